# The stack the FUSE-path profiles build (sourced by fuse-path.sh and log-ahead-ab.sh): ext4 on a
# --direct-io=on loop device, and a cleanup that undoes it. The sourcing script sets B (the
# fardisk binary), W (its scratch dir), POOL (the pool to export) and LOOPS=() first.

# stack_cleanup: unmounts $W/fs and $W/fs-local, detaches the loop devices, exports $POOL and
# removes $W (an EXIT trap: it goes on past errors).
stack_cleanup() {
    set +e
    for m in "$W/fs" "$W/fs-local"; do mountpoint -q "$m" && umount "$m"; done
    for l in "${LOOPS[@]}"; do losetup -d "$l"; done
    "$B" export "$POOL" >/dev/null 2>&1
    rm -rf "$W"
}

# ext4_on FILE DIR: ext4 on a --direct-io=on loop device over FILE, mounted at DIR; prints the
# loop device.
ext4_on() {
    local loop
    loop="$(losetup --direct-io=on -f --show "$1")"
    LOOPS+=("$loop")
    mkfs.ext4 -q "$loop"
    mkdir -p "$2"
    mount "$loop" "$2"
    echo "$loop"
}
