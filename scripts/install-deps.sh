#!/usr/bin/env bash
# Install what fardisk needs on a Debian 12 machine.
#
#   install-deps.sh --demo   what scripts/demo.sh uses: the Debian packages for PostgreSQL, FUSE,
#                            ext4 and the build, and the Rust toolchain (a minute or less)
#   install-deps.sh          everything the tests and benchmarks use besides:
#     - toxiproxy, MinIO and the Versity S3 gateway built with `go install` into
#       $FARDISK_TOOLS/bin, skipped when the stamp file says the pinned version is there;
#     - Azurite (npm) and an s3proxy release (Maven Central) into the tools cache, likewise;
#     - rustfmt and clippy; the nightly toolchain and cargo-fuzz (pinned) for scripts/fuzz.sh;
#     - a Python venv with matplotlib for bench/report.py.
# Idempotent: each step checks first and prints one line saying what it did and how long it took.
# Fails with one clear line naming the step that could not be done.
set -euo pipefail
FD_NAME=install-deps
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Real package names (postgresql-contrib-15 is a virtual package provided by
# postgresql-15; nbdfuse is a binary in libnbd-bin), so dpkg-query can check them.
DEMO_APT_PACKAGES=(
    fuse3 libfuse3-dev pkg-config postgresql-15 e2fsprogs util-linux curl ca-certificates
)
TEST_APT_PACKAGES=(
    fio qemu-utils libnbd-bin python3-libnbd postgresql-contrib xfsprogs gnuplot-nox python3-venv
    default-jre-headless
)
# Tools the full install needs as commands, however they came (the Debian package otherwise).
TEST_COMMANDS=(mvn:maven node:nodejs npm:npm)
MODE=full
case "${1:-}" in
    --demo) MODE=demo ;;
    "") ;;
    *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac
APT_PACKAGES=("${DEMO_APT_PACKAGES[@]}")
[ "$MODE" = full ] && APT_PACKAGES+=("${TEST_APT_PACKAGES[@]}")

TOOLS="$(fd_tools_dir)"
mkdir -p "$TOOLS/bin" "$TOOLS/stamps" "$TOOLS/logs" || fd_die "cannot create tools cache $TOOLS"

apt_missing() {
    local p c
    for p in "${APT_PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            printf '%s\n' "$p"
        fi
    done
    [ "$MODE" = full ] || return 0
    for c in "${TEST_COMMANDS[@]}"; do
        command -v "${c%%:*}" >/dev/null || printf '%s\n' "${c#*:}"
    done
}

install_apt() {
    local missing log="$TOOLS/logs/apt.log" t0
    command -v dpkg-query >/dev/null || fd_die "dpkg-query not found: this script supports Debian 12 only"
    mapfile -t missing < <(apt_missing)
    if [ "${#missing[@]}" -eq 0 ]; then
        fd_log "apt: all ${#APT_PACKAGES[@]} packages already installed"
        return
    fi
    [ "$(id -u)" -eq 0 ] || fd_die "apt: missing ${missing[*]} and not root; install them as root"
    t0=$SECONDS
    fd_log "apt: installing ${missing[*]} (log: $log)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >"$log" 2>&1 || fd_die "apt: 'apt-get update' failed (see $log)"
    apt-get install -y --no-install-recommends "${missing[@]}" >>"$log" 2>&1 \
        || fd_die "apt: 'apt-get install ${missing[*]}' failed (see $log)"
    fd_log "apt: installed ${#missing[@]} packages in $((SECONDS - t0)) s"
}

# go_tool NAME MODULE VERSION: build MODULE@VERSION into $TOOLS/bin/NAME.
go_tool() {
    local name="$1" module="$2" version="$3"
    local want="$module@$version" stamp="$TOOLS/stamps/$name" log="$TOOLS/logs/$name.log"
    local gobin="$TOOLS/build/$name" t0 built
    if [ -x "$TOOLS/bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        fd_log "$name: $want already built ($TOOLS/bin/$name)"
        return
    fi
    command -v go >/dev/null || fd_die "$name: 'go' not found; it is needed to build $want"
    t0=$SECONDS
    fd_log "$name: building $want with go install (log: $log)"
    rm -rf "$gobin"
    mkdir -p "$gobin"
    # GOTOOLCHAIN=local: never download another Go toolchain; build with the one here.
    GOBIN="$gobin" GOTOOLCHAIN=local GOFLAGS=-modcacherw go install "$want" >"$log" 2>&1 \
        || { tail -n 5 "$log" >&2; fd_die "$name: 'go install $want' failed (see $log)"; }
    built="$(find "$gobin" -maxdepth 1 -type f -perm -u+x | head -n 1)"
    [ -n "$built" ] || fd_die "$name: go install produced no binary in $gobin"
    mv -f "$built" "$TOOLS/bin/$name"
    rm -rf "$gobin"
    printf '%s\n' "$want" >"$stamp"
    fd_log "$name: built in $((SECONDS - t0)) s -> $TOOLS/bin/$name"
}

install_rust() {
    local c
    command -v cargo >/dev/null || fd_die "rust: 'cargo' not found; install Rust (rustup) first"
    if [ "$MODE" = demo ]; then
        fd_log "rust: $(cargo --version)"
        return
    fi
    for c in rustfmt clippy; do
        if cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
            fd_log "rust: $c present"
        else
            command -v rustup >/dev/null || fd_die "rust: $c missing and rustup not found"
            fd_log "rust: adding component $c"
            rustup component add "$c" >/dev/null 2>&1 || fd_die "rust: 'rustup component add $c' failed"
        fi
    done
}

# scripts/fuzz.sh needs `cargo +nightly fuzz`: the nightly toolchain (libFuzzer's coverage
# instrumentation is nightly-only) and cargo-fuzz at the pinned version.
install_fuzz() {
    local want="cargo-fuzz $CARGO_FUZZ_VERSION" bin="$HOME/.cargo/bin/cargo-fuzz" log="$TOOLS/logs/cargo-fuzz.log" t0
    if rustup run nightly rustc --version >/dev/null 2>&1; then
        fd_log "fuzz: nightly toolchain present"
    else
        command -v rustup >/dev/null || fd_die "fuzz: nightly toolchain missing and rustup not found"
        fd_log "fuzz: installing the nightly toolchain (log: $TOOLS/logs/nightly.log)"
        rustup toolchain install nightly --profile minimal >"$TOOLS/logs/nightly.log" 2>&1 \
            || fd_die "fuzz: 'rustup toolchain install nightly' failed (see $TOOLS/logs/nightly.log)"
    fi
    if [ "$("$bin" --version 2>/dev/null)" = "$want" ]; then
        fd_log "fuzz: $want already installed ($bin)"
        return
    fi
    t0=$SECONDS
    fd_log "fuzz: installing $want with cargo install (log: $log)"
    cargo install --locked --force --root "$HOME/.cargo" "cargo-fuzz@$CARGO_FUZZ_VERSION" >"$log" 2>&1 \
        || { tail -n 5 "$log" >&2; fd_die "fuzz: 'cargo install cargo-fuzz@$CARGO_FUZZ_VERSION' failed (see $log)"; }
    [ "$("$bin" --version 2>/dev/null)" = "$want" ] || fd_die "fuzz: $bin does not report $want after install"
    fd_log "fuzz: installed $want in $((SECONDS - t0)) s"
}

# npm_tool NAME PACKAGE VERSION BIN: `npm install PACKAGE@VERSION` into $TOOLS/NAME, with
# $TOOLS/bin/BIN linked to the package's executable.
npm_tool() {
    local name="$1" package="$2" version="$3" bin="$4"
    local want="$package@$version" stamp="$TOOLS/stamps/$name" log="$TOOLS/logs/$name.log" t0
    if [ -x "$TOOLS/bin/$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        fd_log "$name: $want already installed ($TOOLS/bin/$bin)"
        return
    fi
    command -v npm >/dev/null || fd_die "$name: 'npm' not found; it is needed to install $want"
    t0=$SECONDS
    fd_log "$name: installing $want with npm (log: $log)"
    rm -rf "$TOOLS/$name"
    npm install --prefix "$TOOLS/$name" --no-audit --no-fund --omit=dev "$want" >"$log" 2>&1 \
        || { tail -n 5 "$log" >&2; fd_die "$name: 'npm install $want' failed (see $log)"; }
    [ -x "$TOOLS/$name/node_modules/.bin/$bin" ] || fd_die "$name: npm installed no $bin"
    ln -sfn "$TOOLS/$name/node_modules/.bin/$bin" "$TOOLS/bin/$bin"
    printf '%s\n' "$want" >"$stamp"
    fd_log "$name: installed in $((SECONDS - t0)) s -> $TOOLS/bin/$bin"
}

# maven_jar NAME GROUP:ARTIFACT:VERSION:jar:CLASSIFIER: the jar into $TOOLS/lib/NAME.jar and a
# launcher $TOOLS/bin/NAME (java -jar).
maven_jar() {
    local name="$1" artifact="$2" stamp="$TOOLS/stamps/$1" log="$TOOLS/logs/$1.log" t0 jar
    if [ -x "$TOOLS/bin/$name" ] && [ -f "$TOOLS/lib/$name.jar" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$artifact" ]; then
        fd_log "$name: $artifact already present ($TOOLS/lib/$name.jar)"
        return
    fi
    command -v mvn >/dev/null || fd_die "$name: 'mvn' not found; it is needed to fetch $artifact"
    t0=$SECONDS
    fd_log "$name: fetching $artifact with mvn (log: $log)"
    rm -rf "$TOOLS/build/$name"
    mkdir -p "$TOOLS/build/$name" "$TOOLS/lib"
    mvn -B -q dependency:copy -Dartifact="$artifact" -DoutputDirectory="$TOOLS/build/$name" >"$log" 2>&1 \
        || { tail -n 5 "$log" >&2; fd_die "$name: 'mvn dependency:copy $artifact' failed (see $log)"; }
    jar="$(find "$TOOLS/build/$name" -maxdepth 1 -name '*.jar' | head -n 1)"
    [ -n "$jar" ] || fd_die "$name: mvn fetched no jar"
    mv -f "$jar" "$TOOLS/lib/$name.jar"
    rm -rf "$TOOLS/build/$name"
    printf '#!/bin/sh\nexec java -jar %s "$@"\n' "$TOOLS/lib/$name.jar" >"$TOOLS/bin/$name"
    chmod +x "$TOOLS/bin/$name"
    printf '%s\n' "$artifact" >"$stamp"
    fd_log "$name: fetched in $((SECONDS - t0)) s -> $TOOLS/lib/$name.jar"
}

# The venv python is what bench/report.py and tests/e2e use for plots.
install_python_venv() {
    local venv="$TOOLS/venv" want="matplotlib==$MATPLOTLIB_VERSION"
    local stamp="$TOOLS/stamps/venv" log="$TOOLS/logs/venv.log" t0
    if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        fd_log "python: venv with $want already present ($venv)"
        return
    fi
    t0=$SECONDS
    fd_log "python: creating venv $venv with $want (log: $log)"
    rm -rf "$venv"
    python3 -m venv "$venv" >"$log" 2>&1 || fd_die "python: 'python3 -m venv $venv' failed (see $log)"
    "$venv/bin/pip" install --disable-pip-version-check -q "$want" >>"$log" 2>&1 \
        || fd_die "python: 'pip install $want' failed (see $log)"
    printf '%s\n' "$want" >"$stamp"
    fd_log "python: venv ready in $((SECONDS - t0)) s"
}

main() {
    local t0=$SECONDS
    exec 9>"$TOOLS/.lock"
    # Two runs at once (a developer and CI) would race on the same binaries.
    flock -w 1800 9 || fd_die "another install-deps holds $TOOLS/.lock for 30 min"
    fd_log "tools cache: $TOOLS ($MODE)"
    install_apt
    install_rust
    if [ "$MODE" = demo ]; then
        fd_log "done in $((SECONDS - t0)) s (demo only; the tests need scripts/install-deps.sh without --demo)"
        return
    fi
    go_tool toxiproxy-server "$TOXIPROXY_MODULE" "$TOXIPROXY_VERSION"
    go_tool minio "$MINIO_MODULE" "$MINIO_VERSION"
    go_tool versitygw "$VERSITYGW_MODULE" "$VERSITYGW_VERSION"
    npm_tool azurite azurite "$AZURITE_VERSION" azurite-blob
    maven_jar s3proxy "$S3PROXY_ARTIFACT"
    install_fuzz
    install_python_venv
    fd_log "done in $((SECONDS - t0)) s"
}

main "$@"
