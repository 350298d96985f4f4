#!/usr/bin/env bash
# Install everything fardisk's tests and benchmarks need on a Debian 12 machine.
# Idempotent: each step checks first and prints one line saying what it did.
#   - Debian packages, installed only when missing (at most one `apt-get update`);
#   - toxiproxy and MinIO built with `go install` into $FARDISK_TOOLS/bin, skipped
#     when the stamp file says the pinned version is already there;
#   - the Rust toolchain pieces (rustfmt, clippy) when missing;
#   - the nightly toolchain and cargo-fuzz (pinned, into ~/.cargo/bin) for scripts/fuzz.sh;
#   - a Python venv with matplotlib for bench/report.py.
# Fails with one clear line naming the step that could not be done.
set -euo pipefail
FD_NAME=install-deps
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Real package names (postgresql-contrib-15 is a virtual package provided by
# postgresql-15; nbdfuse is a binary in libnbd-bin), so dpkg-query can check them.
APT_PACKAGES=(
    fio fuse3 libfuse3-dev pkg-config qemu-utils libnbd-bin python3-libnbd
    postgresql-15 postgresql-contrib e2fsprogs xfsprogs util-linux gnuplot-nox
    curl ca-certificates python3-venv
)

TOOLS="$(fd_tools_dir)"
mkdir -p "$TOOLS/bin" "$TOOLS/stamps" "$TOOLS/logs" || fd_die "cannot create tools cache $TOOLS"

apt_missing() {
    local p
    for p in "${APT_PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            printf '%s\n' "$p"
        fi
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
    fd_log "tools cache: $TOOLS"
    install_apt
    go_tool toxiproxy-server "$TOXIPROXY_MODULE" "$TOXIPROXY_VERSION"
    go_tool minio "$MINIO_MODULE" "$MINIO_VERSION"
    install_rust
    install_fuzz
    install_python_venv
    fd_log "done in $((SECONDS - t0)) s"
}

main "$@"
