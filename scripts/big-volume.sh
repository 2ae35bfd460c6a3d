#!/usr/bin/env bash
# Large volumes through the CLI, as a user who formats a big partition meets them: for each
# size, on a sparse image file, mkfs (time, its peak memory, the disk the image really
# takes), mount (time, the daemon's memory idle), df against the geometry, a write of
# WRITE_MB MiB (64 MiB files plus 1 MiB files, so that every mlog gets some and blocks land
# in the last mlog's part, near the end of the volume), the daemon's memory after it, a
# sync of the files, unmount, fsck and inspect (time, memory), a remount with every file
# compared, and the highest block a log head reached. Prints one table line a size.
#
#   scripts/big-volume.sh [SIZE...]        # root, FUSE; default sizes 64G 1T 4T 16T 24T
#
# Env: FLASHLOG (binary, default target/release/flashlog), WRITE_MB (default 1024),
# DIR (images up to 16 TiB - 4 KiB, default /tmp: ext4 holds no larger file); larger
# images go to a tmpfs this script mounts (written data then costs RAM). Sizes are what
# `flashlog mkfs --size` takes, or a byte count (odd sizes: 1099511631872 = 1 TiB + 4 KiB).
# Memory: the segment table and NAT entries a volume uses are resident (up to 0.8 GiB of NAT
# and 72 KiB per GiB of volume when full); mount refuses unless the whole of both would fit.
set -euo pipefail
F=${FLASHLOG:-$(dirname "$0")/../target/release/flashlog}
WRITE_MB=${WRITE_MB:-1024}
DIR=${DIR:-/tmp}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(64G 1T 4T 16T 24T)
work=$(mktemp -d "$DIR/flashlog-big.XXXXXX")
mnt=$work/mnt
big=$work/tmpfs
mkdir -p "$mnt" "$big"
cleanup() {
    umount "$mnt" 2>/dev/null || true
    rm -f "$work"/*.img "$big"/*.img 2>/dev/null || true
    umount "$big" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
since() { printf "%.2f" "$(echo "$(now) - $1" | bc)"; }
hwm() { awk '/VmHWM/ {printf "%d", $2 / 1024}' "/proc/$1/status"; }
# Seconds and peak MiB of a command: "S/MiB".
timed() {
    /usr/bin/time -f "%e/%M" -o "$work/time" "$@" >"$work/out" 2>&1 || {
        echo "FAILED: $*" >&2
        cat "$work/out" >&2
        return 1
    }
    awk -F/ '{printf "%s/%d", $1, $2 / 1024}' "$work/time"
}
bytes_of() {
    local s=$1
    case $s in
    *T) echo $((${s%T} << 40)) ;;
    *G) echo $((${s%G} << 30)) ;;
    *M) echo $((${s%M} << 20)) ;;
    *) echo "$s" ;;
    esac
}
head -c $((64 << 20)) /dev/urandom >"$work/src"

printf "%-14s %12s %8s %9s %11s %8s %9s %11s %9s %7s %11s %11s %8s %9s %s\n" \
    size mkfs_s/MiB du_KiB mount_s idle_MiB df write_s wrote_MiB sync_s umnt_s fsck_s/MiB insp_s/MiB remnt_s read_ok top_block
for size in "${sizes[@]}"; do
    bytes=$(bytes_of "$size")
    if [ "$bytes" -ge $((16 << 40)) ]; then
        mountpoint -q "$big" || mount -t tmpfs -o size=4P,nr_inodes=64 tmpfs "$big"
        img=$big/v.img
    else
        img=$work/v.img
    fi
    rm -f "$img"
    mk=$(timed "$F" mkfs --size "$bytes" "$img")
    du=$(du -k "$img" | cut -f1)
    user_mib=$(sed -n 's/.*user space \([0-9.]*\) MiB.*/\1/p' "$work/out")
    t=$(now)
    "$F" mount --daemon --pid-file "$work/pid" --log "$work/log" "$img" "$mnt" >/dev/null
    mnt_s=$(since "$t")
    pid=$(cat "$work/pid")
    idle=$(hwm "$pid")
    df_blocks=$(df -B4096 --output=size "$mnt" | tail -1 | tr -d ' ')
    want=$(echo "$user_mib * 256 / 1" | bc)
    [ "$df_blocks" = "$want" ] && dfok=ok || dfok="BAD($df_blocks!=$want)"
    t=$(now)
    n64=$((WRITE_MB / 64 / 2))
    n1=$((WRITE_MB - n64 * 64))
    for i in $(seq 1 "$n64"); do cp "$work/src" "$mnt/big$i"; done
    for i in $(seq 1 "$n1"); do head -c $((1 << 20)) "$work/src" >"$mnt/small$i"; done
    w_s=$(since "$t")
    t=$(now)
    sync "$mnt"/big* "$mnt"/small* 2>/dev/null || sync
    sync_s=$(since "$t")
    wrote=$(hwm "$pid")
    t=$(now)
    umount "$mnt"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    um_s=$(since "$t")
    fs=$(timed "$F" fsck -q "$img") || fs="ERR"
    ins=$(timed "$F" inspect --json "$img")
    top=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sb, heads = d["superblock"], d["checkpoint"]["log_heads"]
print(max((sb["main_addr"] + h["segment"] * 512 + h["block_offset"] - 1
           for h in heads if h["block_offset"] > 0), default=0))' "$work/out")
    t=$(now)
    "$F" mount --daemon --pid-file "$work/pid" --log "$work/log" "$img" "$mnt" >/dev/null
    rm_s=$(since "$t")
    pid=$(cat "$work/pid")
    ok=yes
    for i in $(seq 1 "$n64"); do cmp -s "$work/src" "$mnt/big$i" || ok=NO; done
    for i in $(seq 1 "$n1"); do cmp -s -n $((1 << 20)) "$work/src" "$mnt/small$i" || ok=NO; done
    umount "$mnt"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    printf "%-14s %12s %8s %9s %11s %8s %9s %11s %9s %7s %11s %11s %8s %9s %s%s\n" \
        "$size" "$mk" "$du" "$mnt_s" "$idle" "$dfok" "$w_s" "$wrote" "$sync_s" "$um_s" \
        "$fs" "$ins" "$rm_s" "$ok" "$top" "$([ "$top" -ge $((1 << 32)) ] && echo ' (>=2^32)' || { [ "$top" -ge $((1 << 31)) ] && echo ' (>=2^31)'; } || true)"
    rm -f "$img"
done
