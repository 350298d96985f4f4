# shellcheck shell=bash
# Store selection for the e2e tests that run on every store server (the matrix in scripts/test.sh).
# Source after lib/common.sh.
#
#   FARDISK_E2E_STORE   minio (default), versity (a second S3 implementation) or azurite
#                       (Azure Blob emulator, az:// URLs)
#
#   store_start         start the selected server in this test's run dir and stop it at exit
#   store_url PREFIX    the pool URL under the server's bucket/container: s3://B/PREFIX, az://B/PREFIX
#   store_script        scripts/<server>.sh of the selected server
#   E2E_STORE           the selected server's name, for messages
#
# Toxiproxy (`scripts/toxiproxy.sh start`) in front of any of them: its `env` prints the selected
# server's variables with the proxy's endpoint.

E2E_STORE="${FARDISK_E2E_STORE:-minio}"
case "$E2E_STORE" in
    minio | versity | azurite) ;;
    *)
        echo "FARDISK_E2E_STORE='$E2E_STORE': expected minio, versity or azurite" >&2
        exit 2
        ;;
esac

store_script() { printf '%s\n' "$SCRIPTS/$E2E_STORE.sh"; }

store_start() {
    "$(store_script)" start || return 1
    on_exit '"$(store_script)" stop'
    eval "$("$(store_script)" env)"
}

store_url() {
    case "$E2E_STORE" in
        azurite) printf 'az://%s/%s\n' "$FARDISK_BUCKET" "$1" ;;
        *) printf 's3://%s/%s\n' "$FARDISK_BUCKET" "$1" ;;
    esac
}
