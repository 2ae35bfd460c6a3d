#!/usr/bin/env bash
# The Flashlog demo (the README's first command runs it after scripts/setup.sh):
# make a 1 GiB image file, mkfs, mount it with FUSE, run a small workload (a few thousand
# files, a large sequential write with fsync, reads, renames, deletes), unmount, remount
# to verify every checksum survived, unmount, fsck, and print a summary.
#
#   scripts/demo.sh [--size SIZE] [--files N] [--keep]
#
# Needs root (or fusermount3) and the release binary (scripts/setup.sh builds it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
FL=${CARGO_TARGET_DIR:-$root/target}/release/flashlog
size=1G
files=3000
keep=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --size) size=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ -x $FL ]] || { echo "demo: $FL is missing: run scripts/setup.sh first" >&2; exit 1; }

work=$(mktemp -d /tmp/flashlog-demo.XXXXXX)
img=$work/flashlog.img
mnt=$work/mnt
log=$work/daemon.log
pidfile=$work/daemon.pid
mkdir -p "$mnt"
t0=$(date +%s.%N)
cleanup() {
    grep -qs " $mnt " /proc/mounts && { umount "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true; }
    if [[ $keep == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
wait_daemon() {
    local pid
    pid=$(cat "$pidfile")
    umount "$mnt"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

say "mkfs: a $size image file in $work"
"$FL" mkfs --size "$size" --label demo "$img"

say "mount --daemon"
"$FL" mount --daemon --log "$log" --pid-file "$pidfile" "$img" "$mnt"
df -h "$mnt" | sed 's/^/    /'

say "workload: $files small files in 30 directories"
tw=$(date +%s.%N)
dirs=30
per=$(((files + dirs - 1) / dirs))
n=0
for d in $(seq -w 1 "$dirs"); do
    mkdir "$mnt/dir$d"
    for f in $(seq -w 1 "$per"); do
        ((n < files)) || break
        head -c $((RANDOM % 16384 + 1)) /dev/urandom >"$mnt/dir$d/file$f"
        n=$((n + 1))
    done
done
echo "    $n files in $(elapsed "$tw") s"

say "workload: 256 MiB sequential write + fsync, then read it back"
tw=$(date +%s.%N)
dd if=/dev/urandom of="$mnt/big.bin" bs=1M count=256 conv=fsync status=none
sum_big=$(sha256sum <"$mnt/big.bin" | cut -d' ' -f1)
echo "    written, fsync'd and read back in $(elapsed "$tw") s"

say "workload: renames and deletes"
for d in $(seq -w 1 10); do mv "$mnt/dir$d" "$mnt/renamed$d"; done
find "$mnt" -name 'file*5' -delete
for f in "$mnt"/renamed01/file0[0-9]*; do mv "$f" "$mnt/dir15/moved-${f##*/}"; done
sync "$mnt" # an fsync of the root directory: a checkpoint (plain sync does not reach FUSE)

say "checksums of every file"
(cd "$mnt" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$work/sums"
nfiles=$(wc -l <"$work/sums")
bytes=$(du -sb --apparent-size "$mnt" | cut -f1)

say "unmount, remount, verify"
wait_daemon
"$FL" mount --daemon --log "$log" --pid-file "$pidfile" -o ro "$img" "$mnt" >/dev/null
(cd "$mnt" && sha256sum --quiet -c "$work/sums") && verified=yes || verified=NO
wait_daemon

say "fsck"
set +e
"$FL" fsck "$img"
fsck_rc=$?
set -e
stats=$(grep -o 'app wrote.*fsyncs' "$log" | head -n 1)

say "inspect (segment usage)"
"$FL" inspect "$img" | sed -n '/^Segment usage/,$p'

echo
echo "Flashlog demo summary"
printf '  %-24s %s\n' "image" "$size ($img)"
printf '  %-24s %s\n' "files" "$nfiles ($((bytes / 1048576)) MiB, big.bin sha256 ${sum_big:0:16}...)"
printf '  %-24s %s\n' "first mount" "${stats:-see $log}"
printf '  %-24s %s\n' "checksums after remount" "$verified"
printf '  %-24s %s\n' "fsck" "$([[ $fsck_rc == 0 ]] && echo clean || echo "exit $fsck_rc")"
printf '  %-24s %s s\n' "elapsed" "$(elapsed "$t0")"
[[ $verified == yes && $fsck_rc == 0 ]]
