#!/usr/bin/env bash
# The life cycle of a Flashlog mount beyond scripts/mount-tests.sh, as a user meets it:
#   1. -o ro, inspect and fsck of a volume that needs roll-forward recovery (daemon killed
#      -9 after fsyncs): refused or shown without writing the image; a read-write mount
#      then recovers everything;
#   2. the image file changed between mounts: grown, shrunk, emptied, replaced by another
#      volume, made immutable (chattr +i), behind a read-only bind mount, made immutable
#      while mounted;
#   3. real block devices: loop devices (plain, --direct-io=on with 4096-byte sectors,
#      read-only), discards reaching the backing file, mkfs on a too-small device and on a
#      mounted ext4, the same volume reached through its image and a loop device;
#   4. signals and sessions: SIGHUP/SIGTERM to a --daemon daemon, SIGTERM during a large
#      fsync'd write, umount -l under a writer, fusermount3 -u while busy, odd mount
#      points, the same image twice, two images at once, a second SIGTERM during the
#      final checkpoint with another file system under the mount point;
#   5. -o parsing: unknown, malformed and out-of-range options refused before anything is
#      written; conflicting ones: the last one wins.
#
#   scripts/lifecycle-check.sh /path/to/release/flashlog
#
# Needs root, fuse3 (fusermount3), util-linux (losetup, mount), e2fsprogs (mkfs.ext4,
# chattr) and python3. Every check prints PASS or FAIL (a wrong behaviour found; the line
# says what should happen) and NOTE lines record minor observations that are not counted.
# The exit status is the number of FAILs: 0 when every check holds. ONLY=2,5 runs just
# those sections. Everything made here
# (mounts, loop devices, daemons, files) is removed at exit; KEEP=1 keeps the work directory.
set -uo pipefail

FL=${1:-}
if [[ -z $FL || ! -x $FL ]]; then
    echo "usage: $0 PATH/TO/flashlog" >&2
    exit 2
fi
FL=$(cd "$(dirname "$FL")" && pwd)/$(basename "$FL")
if [[ $(id -u) -ne 0 ]]; then
    echo "lifecycle-check: run as root (loop devices, chattr, bind mounts)" >&2
    exit 2
fi
for t in losetup fusermount3 chattr mkfs.ext4 python3 md5sum; do
    command -v "$t" >/dev/null || { echo "lifecycle-check: $t is missing" >&2; exit 2; }
done

work=$(mktemp -d /tmp/flashlog-lifecycle.XXXXXX)
cd "$work" || exit 2
mkdir -p m m2
failures=0
loops=()

# Unmount everything under $work (deepest first), stop our daemons, detach our loops.
cleanup() {
    local mp
    for _ in 1 2 3; do
        while read -r mp; do
            umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null
        done < <(awk -v w="$work" '$2 ~ "^"w {print $2}' /proc/mounts | sort -r)
    done
    for f in "$work"/*.pid; do
        [[ -s $f ]] || continue
        kill -0 "$(cat "$f")" 2>/dev/null && kill -TERM "$(cat "$f")" 2>/dev/null
    done
    sleep 1
    local l
    for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null; done
    for f in "$work"/*.img; do [[ -f $f ]] && chattr -i "$f" 2>/dev/null; done
    cd /
    if [[ ${KEEP:-0} == 1 ]]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

pass() { printf 'PASS %s\n' "$*"; }
fail() { printf 'FAIL %s\n' "$*"; failures=$((failures + 1)); }
note() { printf 'NOTE %s\n' "$*"; }
# ok COND-COMMAND... -- MESSAGE: PASS/FAIL on the command's status.
ok() {
    local msg=${*: -1}
    if "${@:1:$#-2}" >/dev/null 2>&1; then pass "$msg"; else fail "$msg"; fi
}
ro_refuses() { ! touch "$work/$1/x" 2>/dev/null; }

mounted() { grep -qs " $work/$1 " /proc/mounts; }
# Wait up to 30 s for process $1 to exit.
wait_gone() {
    for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    return 1
}
# mountd NAME IMG DIR [OPTS...]: --daemon mount with pid file NAME.pid and log NAME.log.
mountd() {
    local name=$1 img=$2 dir=$3
    shift 3
    "$FL" mount --daemon --pid-file "$work/$name.pid" --log "$work/$name.log" "$@" "$img" "$dir" >/dev/null
}
# umountd NAME DIR: unmount and wait for the daemon's final checkpoint and exit.
umountd() {
    local pid
    pid=$(cat "$work/$1.pid" 2>/dev/null)
    umount "$work/$2" || return 1
    [[ -z $pid ]] || wait_gone "$pid"
}
flags() { "$FL" inspect --json "$1" | python3 -c 'import json,sys; print(",".join(json.load(sys.stdin)["checkpoint"]["flags"]))'; }
uuid() { "$FL" inspect --json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["superblock"]["uuid"])' 2>/dev/null; }
fsck_clean() { "$FL" fsck -q "$1"; }
fingerprint() { echo "$(md5sum <"$1") $(stat -c '%s %Y' "$1")"; }

# ---------------------------------------------------------------------------------------
# 1. A volume that needs roll-forward recovery.
section1() {
    echo "== 1. -o ro / inspect / fsck of a volume that needs recovery"
    "$FL" mkfs --size 256M rec.img >/dev/null || { fail "mkfs rec.img"; return; }
    mountd rec rec.img m -o cp_interval=0,gc_interval=0 || { fail "mount rec.img"; return; }
    local pid
    pid=$(cat rec.pid)
    mkdir m/d && sync m/d
    head -c 5M /dev/urandom >exp.data
    dd if=exp.data of=m/d/f bs=1M conv=fsync status=none
    echo small | dd of=m/small conv=fsync status=none
    kill -KILL "$pid"
    wait_gone "$pid"
    fusermount3 -uz m 2>/dev/null
    local before out
    before=$(fingerprint rec.img)
    ok test "$(flags rec.img)" = "" -- "inspect after kill -9: the checkpoint has no umount flag"
    out=$("$FL" fsck rec.img 2>&1)
    ok test $? -eq 0 -- "fsck after kill -9 runs (exit 0)"
    grep -q 'recover\|roll' <<<"$out$("$FL" inspect rec.img 2>&1)" ||
        note "fsck says '$(tail -1 <<<"$out" | cut -c1-60)...' and inspect shows 'flags []': neither says that fsync'd data awaits roll-forward (mount read-write to recover it)"
    out=$(mountd rec rec.img m -o ro 2>&1)
    if [[ $? -ne 0 ]] && grep -q "roll-forward recovery; mount it read-write once" <<<"$out"; then
        pass "-o ro of a volume that needs recovery is refused, as documented (--help: ro)"
    else
        fail "-o ro of a volume that needs recovery: $out"
        mounted m && umountd rec m
    fi
    ok test "$(fingerprint rec.img)" = "$before" -- "inspect, fsck and the refused -o ro left the image's bytes and mtime alone"
    mountd rec rec.img m || { fail "read-write mount after kill -9"; return; }
    ok cmp exp.data m/d/f -- "read-write mount recovers the 5 MiB fsync'd file"
    ok test "$(cat m/small)" = small -- "read-write mount recovers the small fsync'd file"
    umountd rec m
    ok test "$(flags rec.img)" = umount -- "after the recovering mount's unmount: flag umount"
    ok fsck_clean rec.img -- "fsck clean after recovery"
    before=$(fingerprint rec.img)
    sleep 1.1 # an mtime change would show
    if mountd rec rec.img m -o ro; then
        ok cmp exp.data m/d/f -- "-o ro of the clean volume reads the data"
        ok ro_refuses m -- "-o ro refuses a write"
        umountd rec m
    else
        fail "-o ro of a clean volume"
    fi
    ok test "$(fingerprint rec.img)" = "$before" -- "a read-only mount and unmount leave the image's bytes and mtime alone"
}

# ---------------------------------------------------------------------------------------
# 2. The image changed between mounts.
section2() {
    echo "== 2. the image file changed between mounts"
    "$FL" mkfs --size 256M base.img >/dev/null || { fail "mkfs base.img"; return; }
    mountd base base.img m && echo hello >m/hello && umountd base m

    # Grown: still mounts (the volume keeps its size), fsck clean.
    cp --sparse=always base.img grown.img && truncate -s +64M grown.img
    if mountd grown grown.img m; then
        ok test "$(cat m/hello)" = hello -- "grown image (+64M): mounts, data there"
        head -c 1M /dev/urandom >m/new
        umountd grown m
        ok fsck_clean grown.img -- "grown image: fsck clean after a write"
    else
        fail "grown image: mount refused"
    fi

    # Shrunk below the volume's size: refused everywhere with the fix, image untouched.
    cp --sparse=always base.img shrunk.img && truncate -s 200M shrunk.img
    local before out rc
    before=$(fingerprint shrunk.img)
    out=$(mountd shrunk shrunk.img m 2>&1)
    rc=$?
    ok test $rc -ne 0 -a -n "$(grep 'larger than the device.*truncate -s' <<<"$out")" -- "shrunk image: mount refused, says to restore the size"
    mounted m && umountd shrunk m
    out=$(mountd shrunk shrunk.img m -o ro 2>&1)
    ok test $? -ne 0 -- "shrunk image: -o ro refused"
    mounted m && umountd shrunk m
    "$FL" fsck shrunk.img >/dev/null 2>&1
    ok test $? -eq 8 -- "shrunk image: fsck exits 8 (could not check)"
    out=$("$FL" mkfs shrunk.img 2>&1)
    ok test $? -ne 0 -a -n "$(grep -- --force <<<"$out")" -- "shrunk image: mkfs without --force refused"
    ok test "$(fingerprint shrunk.img)" = "$before" -- "shrunk image: nothing written by mount, ro mount, fsck, mkfs"
    truncate -s 256M shrunk.img
    ok fsck_clean shrunk.img -- "shrunk image restored to its size: fsck clean again"
    truncate -s 0 shrunk.img
    out=$(mountd shrunk shrunk.img m 2>&1)
    ok test $? -ne 0 -a -n "$(grep 'is empty' <<<"$out")" -- "emptied image: mount refused ('is empty')"

    # Replaced by another volume between mounts: the other volume is mounted; both clean.
    "$FL" mkfs --size 256M other.img >/dev/null
    local u1 u2
    u1=$(uuid base.img)
    cp --sparse=always base.img swap.img
    mv -f other.img swap.img
    u2=$(uuid swap.img)
    if mountd swap swap.img m; then
        ok test ! -e m/hello -a "$u1" != "$u2" -- "image replaced by another volume: the new volume is mounted"
        umountd swap m
        ok fsck_clean swap.img -- "replaced image: fsck clean"
    else
        fail "replaced image: mount refused"
    fi

    # Immutable image (chattr +i): read-write refused, read-only works, nothing written.
    cp --sparse=always base.img imm.img
    if chattr +i imm.img 2>/dev/null; then
        before=$(fingerprint imm.img)
        out=$(mountd imm imm.img m 2>&1)
        rc=$?
        ok test $rc -ne 0 -- "immutable image: read-write mount refused"
        mounted m && umountd imm m
        grep -qi 'read-only\|immutable\|-o ro' <<<"$out" ||
            note "immutable image: the refusal reads '$out' (an 'I/O error', no hint that the file is immutable or to mount -o ro)"
        if mountd imm imm.img m -o ro; then
            ok test "$(cat m/hello)" = hello -- "immutable image: -o ro mounts and reads"
            umountd imm m
        else
            fail "immutable image: -o ro refused"
        fi
        ok fsck_clean imm.img -- "immutable image: fsck works"
        ok test "$(fingerprint imm.img)" = "$before" -- "immutable image: nothing written"
        chattr -i imm.img
    else
        note "chattr +i not supported under $work: immutable-image checks skipped"
    fi

    # The image behind a read-only bind mount.
    mkdir -p rosrc robind && cp --sparse=always base.img rosrc/ro.img
    if mount --bind rosrc robind && mount -o remount,bind,ro robind; then
        out=$(mountd robind robind/ro.img m 2>&1)
        ok test $? -ne 0 -- "image on a read-only bind mount: read-write mount refused"
        mounted m && umountd robind m
        grep -qi '\-o ro' <<<"$out" || note "read-only image: the refusal reads '$out' (no hint to mount -o ro)"
        if mountd robind robind/ro.img m -o ro; then
            ok test "$(cat m/hello)" = hello -- "image on a read-only bind mount: -o ro mounts"
            umountd robind m
        else
            fail "image on a read-only bind mount: -o ro refused"
        fi
        umount robind
    fi

    # Made immutable while mounted: writes fail with EIO, the daemon exits at unmount,
    # no panic, the last checkpoint is intact.
    cp --sparse=always base.img live.img
    if mountd live live.img m; then
        local pid
        pid=$(cat live.pid)
        if chattr +i live.img 2>/dev/null; then
            dd if=/dev/urandom of=m/y bs=1M count=2 conv=fsync status=none 2>/dev/null
            ok test $? -ne 0 -- "image made immutable while mounted: an fsync'd write fails (EIO)"
            umount m
            ok wait_gone "$pid" -- "image made immutable while mounted: the daemon exits after umount"
            ok grep -q 'final checkpoint of .* failed' live.log -- "image made immutable while mounted: the log says the final checkpoint failed"
            ! grep -q panicked live.log
            ok test $? -eq 0 -- "image made immutable while mounted: no panic"
            chattr -i live.img
            ok fsck_clean live.img -- "image made immutable while mounted: fsck clean afterwards"
            mountd live live.img m && {
                ok test "$(cat m/hello)" = hello -- "image made immutable while mounted: earlier data intact"
                umountd live m
            }
        else
            umountd live m
        fi
    fi
}

# ---------------------------------------------------------------------------------------
# 3. Block devices.
newloop() { # newloop [LOSETUP OPTS...] IMG: prints the device
    local l
    l=$(losetup -f --show "$@") || return 1
    loops+=("$l")
    echo "$l"
}
delloop() { losetup -d "$1"; }
alloc_kib() { du -k "$1" | cut -f1; }

loop_roundtrip() { # loop_roundtrip LABEL [LOSETUP OPTS...]
    local label=$1
    shift
    rm -f lp.img && truncate -s 512M lp.img
    local L
    L=$(newloop "$@" lp.img) || { fail "$label: losetup"; return; }
    local opts=()
    [[ $label == *direct* ]] && opts=(-o image_io=direct)
    if ! "$FL" mkfs "$L" >/dev/null; then fail "$label: mkfs $L"; delloop "$L"; return; fi
    if ! mountd lp "$L" m "${opts[@]}"; then fail "$label: mount $L"; delloop "$L"; return; fi
    head -c 100M /dev/urandom >lp.data
    cp lp.data m/big
    dd if=lp.data of=m/synced bs=1M count=8 conv=fsync status=none
    local full
    full=$(alloc_kib lp.img)
    rm m/big
    umountd lp m
    local after
    after=$(alloc_kib lp.img)
    ok test "$after" -lt $((full - 60000)) -- "$label: discards reach the loop device (backing file ${full} KiB -> ${after} KiB after rm + unmount)"
    ok test "$(flags "$L")" = umount -- "$label: inspect: clean unmount flag"
    ok fsck_clean "$L" -- "$label: fsck clean"
    if mountd lp "$L" m -o ro; then
        ok cmp <(head -c 8M lp.data) m/synced -- "$label: data read back through a read-only mount"
        umountd lp m
    else
        fail "$label: -o ro mount"
    fi
    delloop "$L"
}

section3() {
    echo "== 3. loop devices"
    loop_roundtrip "loop device"
    loop_roundtrip "loop device --direct-io=on -b 4096 (image_io=direct)" --direct-io=on -b 4096

    # A read-only loop device (losetup -r): a read-write mount must be refused (or made
    # read-only), not accepted with writes that silently vanish.
    rm -f lro.img && truncate -s 256M lro.img && "$FL" mkfs lro.img >/dev/null
    mountd lro lro.img m && echo keep >m/keep && umountd lro m
    local L out rc pid
    L=$(newloop -r lro.img)
    out=$(mountd lro "$L" m 2>&1)
    rc=$?
    if [[ $rc -eq 0 ]]; then
        pid=$(cat lro.pid)
        echo "written on a read-only device" >m/lost
        local wrc=$?
        umount m
        wait_gone "$pid"
        mountd lro "$L" m -o ro && { [[ -e m/lost ]] && echo kept; umountd lro m; } >lro.kept
        fail "read-only loop device ($L, losetup -r): the read-write mount was accepted; 'echo > m/lost' returned $wrc, the file is gone after unmount ($(grep -c kept lro.kept) kept); only the daemon log says why: $(grep -o 'poisoned by.*os error 1)' lro.log | head -1 | cut -c1-90)"
    else
        pass "read-only loop device: read-write mount refused: $out"
    fi
    if mountd lro "$L" m -o ro; then
        ok test "$(cat m/keep)" = keep -- "read-only loop device: -o ro mounts and reads"
        umountd lro m
    else
        fail "read-only loop device: -o ro refused"
    fi
    out=$("$FL" mkfs --force "$L" 2>&1)
    ok test $? -ne 0 -- "read-only loop device: mkfs --force refused"
    grep -qi 'read-only' <<<"$out" || note "read-only loop device: mkfs --force says '$out'"
    delloop "$L"

    # Too small a device.
    rm -f tiny.img && truncate -s 32M tiny.img
    L=$(newloop tiny.img)
    out=$("$FL" mkfs "$L" 2>&1)
    ok test $? -ne 0 -a -n "$(grep 'too small' <<<"$out")" -- "mkfs on a 32 MiB loop device: refused ('too small')"
    delloop "$L"

    # A mounted ext4: mkfs refused with and without --force, ext4 intact.
    rm -f ext.img && truncate -s 100M ext.img && mkfs.ext4 -q ext.img
    L=$(newloop ext.img)
    mkdir -p e && mount "$L" e && echo hello >e/file && sync
    out=$("$FL" mkfs "$L" 2>&1)
    ok test $? -ne 0 -a -n "$(grep -E 'another file system|is busy' <<<"$out")" -- "mkfs on a mounted ext4's device: refused without --force"
    out=$("$FL" mkfs --force "$L" 2>&1)
    ok test $? -ne 0 -- "mkfs --force on a mounted ext4's device: refused"
    grep -qi 'mounted\|in use' <<<"$out" ||
        note "mkfs --force on a mounted ext4: the refusal reads '$out' (the kernel's EBUSY on BLKDISCARD, the first write; nothing says the device is mounted)"
    out=$("$FL" mount "$L" m 2>&1)
    ok test $? -ne 0 -- "mount of a mounted ext4's device: refused"
    ok test "$(cat e/file)" = hello -- "the mounted ext4 is intact"
    umount e
    ok fsck.ext4 -n "$L" -- "the ext4 is clean after flashlog's refusals"
    delloop "$L"

    # One volume through two names: its image file and a loop device over it.
    rm -f two.img && "$FL" mkfs --size 256M two.img >/dev/null
    L=$(newloop two.img)
    mountd twoa two.img m2 || { fail "mount two.img"; return; }
    if mountd twob "$L" m 2>/dev/null; then
        for i in $(seq 10); do head -c 256K /dev/urandom >"m/via-loop-$i"; head -c 256K /dev/urandom >"m2/via-image-$i"; done
        dd if=/dev/urandom of=m/loop-synced bs=1M count=2 conv=fsync status=none
        dd if=/dev/urandom of=m2/image-synced bs=1M count=2 conv=fsync status=none
        umountd twob m
        umountd twoa m2
        delloop "$L"
        mountd twoa two.img m2
        local n_loop n_img
        n_loop=$(ls m2 | grep -c loop)
        n_img=$(ls m2 | grep -c image)
        umountd twoa m2
        fail "one volume mounted twice read-write, as two.img and as $L (losetup of two.img): both accepted; after both unmounts $n_loop of the 11 files written through the loop mount (one fsync'd) and $n_img of 11 through the image mount are there; fsck: $("$FL" fsck -q two.img >/dev/null 2>&1 && echo clean || echo errors)"
    else
        pass "a loop device over a mounted image: mount refused"
        umountd twoa m2
        delloop "$L"
    fi
    # The same alias for fsck and mkfs --force (both refused on the image while mounted).
    rm -f three.img && "$FL" mkfs --size 256M three.img >/dev/null
    mountd three three.img m2 || return
    echo keep >m2/keep
    dd if=/dev/urandom of=m2/synced bs=1M count=2 conv=fsync status=none
    out=$(timeout 60 "$FL" fsck three.img 2>&1)
    ok test -n "$(grep 'in use' <<<"$out")" -- "fsck of a mounted image: refused ('in use')"
    L=$(newloop three.img)
    out=$(timeout 60 "$FL" fsck "$L" 2>&1)
    grep -q 'in use' <<<"$out" && pass "fsck of a loop device over a mounted image: refused" ||
        fail "fsck of a loop device over a mounted image: not refused (docs/DESIGN.md: fsck of a volume in use is refused); it printed: $(tail -1 <<<"$out" | cut -c1-100)"
    out=$(timeout 60 "$FL" mkfs --force "$L" 2>&1)
    rc=$?
    delloop "$L"
    umountd three m2
    if [[ $rc -eq 0 ]]; then
        mountd three three.img m2
        local left
        left=$(cat m2/keep m2/synced 2>/dev/null | wc -c)
        umountd three m2
        fail "mkfs --force of a loop device over a MOUNTED image: accepted (the image's own path would be refused 'in use'); after the mount's 'clean' unmount, keep and the fsync'd synced read back $left of 2097157 bytes; fsck: $(out=$("$FL" fsck -q three.img 2>&1 | tail -1 | cut -c1-90); echo "${out:-clean}")"
    else
        pass "mkfs --force of a loop device over a mounted image: refused"
    fi
}

# ---------------------------------------------------------------------------------------
# 4. Signals and sessions.
section4() {
    echo "== 4. signals and sessions"
    rm -f sig.img && "$FL" mkfs --size 512M sig.img >/dev/null
    local sig pid
    for sig in HUP TERM; do
        mountd sig sig.img m || { fail "mount for SIG$sig"; continue; }
        pid=$(cat sig.pid)
        echo "data $sig" >"m/f-$sig"
        kill -"$sig" "$pid"
        if wait_gone "$pid"; then
            ok test "$(flags sig.img)" = umount -a ! -e sig.pid -- "SIG$sig to a --daemon daemon: unmounted, flag umount, pid file removed"
            mounted m && fail "SIG$sig: still mounted"
        else
            fail "SIG$sig to a --daemon daemon: still running after 30 s"
        fi
    done
    "$FL" mount --help | grep -q SIGHUP
    ok test $? -eq 0 -- "mount --help says that SIGHUP unmounts too"
    mountd sig sig.img m && {
        ok test "$(cat m/f-HUP)$(cat m/f-TERM)" = "data HUPdata TERM" -- "data written before SIGHUP/SIGTERM is there"
        umountd sig m
    }

    # SIGTERM while a 300 MiB write with fsync runs: the writer finishes, the daemon then
    # unmounts (lazily) and exits, nothing lost.
    head -c 300M /dev/urandom >sig.data
    mountd sig sig.img m || return
    pid=$(cat sig.pid)
    (dd if=sig.data of=m/big bs=1M conv=fsync status=none; echo $? >dd.rc) &
    local dpid=$!
    sleep 1.5
    kill -TERM "$pid"
    wait "$dpid"
    ok test "$(cat dd.rc)" = 0 -- "SIGTERM during a 300 MiB dd conv=fsync: dd completes"
    ok wait_gone "$pid" -- "SIGTERM during a large write: the daemon exits once the writer is done"
    mountd sig sig.img m && {
        ok cmp sig.data m/big -- "SIGTERM during a large write: the file is complete after remount"
        rm -f m/big
        umountd sig m
    }

    # SIGTERM while an fsync of 300 MiB of dirty data is in progress.
    mountd sig sig.img m -o dirty_cap=1G || return
    pid=$(cat sig.pid)
    python3 -c '
import os,sys
fd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT|os.O_TRUNC)
os.write(fd,open(sys.argv[2],"rb").read())
open(sys.argv[3],"w").close()
os.fsync(fd); os.close(fd)' "$work/m/fsynced" "$work/sig.data" "$work/fsync.go" &
    local fp=$!
    for _ in $(seq 600); do [[ -e fsync.go ]] && break; sleep 0.05; done
    kill -TERM "$pid"
    wait "$fp"
    ok test $? -eq 0 -- "SIGTERM during an fsync of 300 MiB: the fsync succeeds"
    ok wait_gone "$pid" -- "SIGTERM during an fsync: the daemon exits"
    mountd sig sig.img m && {
        ok cmp sig.data m/fsynced -- "SIGTERM during an fsync: the file is intact after remount"
        rm -f m/fsynced
        umountd sig m
    }

    # umount -l while a process holds a file open and keeps writing.
    mountd sig sig.img m || return
    pid=$(cat sig.pid)
    python3 -c '
import os,sys,time
fd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT|os.O_TRUNC)
open(sys.argv[2],"w").close()
for i in range(40):
    os.write(fd,b"x"*65536); time.sleep(0.1)
os.fsync(fd); os.close(fd)' "$work/m/held" "$work/held.open" &
    local wp=$!
    for _ in $(seq 100); do [[ -e held.open ]] && break; sleep 0.1; done
    sleep 0.5
    umount -l m
    ok test $? -eq 0 -- "umount -l under a writer: accepted"
    sleep 0.5
    ok kill -0 "$pid" -- "umount -l under a writer: the daemon keeps serving the writer"
    wait "$wp"
    ok test $? -eq 0 -- "umount -l under a writer: the writer's writes and fsync succeed"
    ok wait_gone "$pid" -- "umount -l: the daemon exits once the writer closed"
    ok test "$(flags sig.img)" = umount -- "umount -l: final checkpoint written (flag umount)"
    mountd sig sig.img m && {
        ok test "$(stat -c %s m/held)" = $((40 * 65536)) -- "umount -l: the held file is complete"
        umountd sig m
    }

    # fusermount3 -u while busy: EBUSY, then a later success.
    mountd sig sig.img m || return
    pid=$(cat sig.pid)
    (cd m && sleep 3) &
    local sp=$!
    sleep 0.5
    fusermount3 -u m 2>/dev/null
    ok test $? -ne 0 -- "fusermount3 -u while a process has its cwd inside: refused (busy)"
    ok mounted m -- "fusermount3 -u while busy: still mounted and served"
    wait "$sp"
    ok fusermount3 -u m -- "fusermount3 -u once idle: succeeds"
    ok wait_gone "$pid" -- "fusermount3 -u: daemon exits"
    ok test "$(flags sig.img)" = umount -- "fusermount3 -u: flag umount"

    # Odd mount points.
    local out
    mkdir -p ne && echo keep >ne/hidden
    if mountd sig sig.img ne; then
        ok test ! -e ne/hidden -- "non-empty mount point: mounted over (as fuse3 allows)"
        umountd sig ne
        ok test "$(cat ne/hidden)" = keep -- "non-empty mount point: its files are back after unmount"
    else
        fail "non-empty mount point refused"
    fi
    touch afile
    out=$(mountd sig sig.img afile 2>&1)
    ok test $? -ne 0 -a -n "$(grep 'not a directory' <<<"$out")" -- "mount point is a file: refused ('not a directory')"
    out=$(mountd sig sig.img nosuch/dir 2>&1)
    ok test $? -ne 0 -a -n "$(grep 'does not exist' <<<"$out")" -- "missing mount point: refused ('does not exist')"

    # The same image twice: refused; how long does the user wait, and is told what?
    mountd sig sig.img m || return
    local t0=$SECONDS rc
    mountd sig2 sig.img m2 >second.out 2>&1 &
    local bp=$!
    sleep 5
    if kill -0 "$bp" 2>/dev/null && [[ ! -s second.out ]]; then
        wait "$bp"
        rc=$?
        fail "the same image mounted twice with --daemon: silent for $((SECONDS - t0)) s, then refused (rc $rc: $(cut -c1-80 second.out)...); the 'waiting for the flashlog process' line went to the log $(grep -c waiting sig2.log) time(s), not the terminal"
    else
        wait "$bp"
        rc=$?
        ok test $rc -ne 0 -- "the same image mounted twice: refused promptly or with a message"
    fi
    ok test ! -e sig2.pid -- "the refused second mount left no pid file"
    mounted m2 && fail "the same image is mounted twice"
    "$FL" mkfs --size 256M sig-b.img >/dev/null
    if mountd sigb sig-b.img m2; then
        echo a >m/a && echo b >m2/b
        ok test "$(cat m/a)$(cat m2/b)" = ab -- "two different images mounted at once"
        umountd sigb m2
        ok fsck_clean sig-b.img -- "second image clean"
    else
        fail "two different images at once: second refused"
    fi
    umountd sig m
    ok fsck_clean sig.img -- "first image clean"

    # A second SIGTERM while the daemon writes its final checkpoint, with another file
    # system under the mount point: the daemon must not unmount what is not its own.
    mkdir -p under
    mount -t tmpfs lifecycle-under under && echo under >under/marker
    mountd sig sig.img under -o dirty_cap=1G || return
    pid=$(cat sig.pid)
    head -c 350M /dev/urandom >under/dirty
    kill -TERM "$pid"
    sleep 0.05
    kill -TERM "$pid"
    wait_gone "$pid"
    if [[ -e under/marker ]]; then
        pass "two SIGTERMs in a row: the tmpfs under the mount point is still mounted"
        umount under
    else
        local why
        why=$(grep -o 'did not complete.*' sig.log | tail -1 | cut -c1-60)
        fail "two SIGTERMs in a row (kill -TERM twice, 50 ms apart, during the final checkpoint): the daemon lazily detached the tmpfs mounted UNDER its mount point ($why); under/marker is gone"
    fi
    rm -f sig.data
}

# ---------------------------------------------------------------------------------------
# 5. -o parsing.
section5() {
    echo "== 5. mount option parsing"
    rm -f opt.img && "$FL" mkfs --size 256M opt.img >/dev/null
    local before o out rc bad=0 n=0
    before=$(fingerprint opt.img)
    # Each refused before anything is opened: nonzero exit at once, names the option.
    for o in bogus gc=bogus gc= gc threads=0 threads=65 threads=-1 threads=99999999999999999999 \
        io_threads=0 io_threads=65 flushers=0 flushers=65 gc_workers=0 gc_workers=65 \
        gc_interval=-1 gc_interval=1.5 cp_interval=abc cp_interval=99999999999999999999 \
        dirty_cap=0 dirty_cap=1K dirty_cap=999999999T dirty_cap=16E bdi_max_ratio=0 \
        bdi_max_ratio=101 bdi_max_ratio=x ro=1 rw=0 default_permissions=1 nosubtype=1 mode=x \
        mlog=x image_io=x uid=0 user_id=0 allow_root max_read=4096 nonempty auto_unmount \
        context=x "ro,bogus"; do
        n=$((n + 1))
        out=$(timeout 10 "$FL" mount -o "$o" opt.img m 2>&1)
        rc=$?
        if mounted m; then
            umount m
            fail "-o $o: mounted"
            bad=1
        elif [[ $rc -eq 0 || $rc -eq 124 ]]; then
            fail "-o $o: exit $rc"
            bad=1
        elif ! grep -qi "$(o=${o##*,}; echo "${o%%=*}" | tr _ .)" <<<"$out"; then
            fail "-o $o: the error does not name the option: $out"
            bad=1
        fi
    done
    [[ $bad == 0 ]] && pass "$n unknown, malformed or out-of-range -o options refused at once, each naming the option"
    for o in gc=device gc=none; do
        out=$(timeout 20 "$FL" mount -o "$o" opt.img m 2>&1)
        rc=$?
        mounted m && umount m
        ok test $rc -ne 0 -a -n "$(grep 'operation not supported' <<<"$out")" -- "-o $o on an image file: refused with the reason"
    done
    ok test "$(fingerprint opt.img)" = "$before" -- "no refused mount wrote the image (bytes and mtime)"
    # Conflicting and duplicated options: the last one wins (--help says so). Each case:
    # OPTIONS|a flag /proc/mounts must show|one it must not show.
    local c has hasnt
    for c in "rw,ro|ro|rw" "ro,rw|rw|ro" "ro,ro|ro|rw" "-o ro -o rw|rw|ro" "dev,nodev|nodev|-" \
        "nodev,dev|-|nodev" "sync,async|-|sync" "async,sync|sync|-" "noexec,exec|-|noexec"; do
        IFS='|' read -r o has hasnt <<<"$c"
        if [[ $o == -o* ]]; then
            "$FL" mount --daemon --pid-file "$work/opt.pid" --log "$work/opt.log" $o opt.img m >/dev/null
        else
            mountd opt opt.img m -o "$o"
        fi
        if [[ $? -eq 0 ]]; then
            local f
            f=",$(awk -v m="$work/m" '$2 == m {print $4}' /proc/mounts),"
            ok test "$has" = - -o -n "$(grep ",$has," <<<"$f")" -a \( "$hasnt" = - -o -z "$(grep ",$hasnt," <<<"$f")" \) -- "-o $o: the last one wins (/proc/mounts: ${f:1:-1})"
            umountd opt m
        else
            fail "-o $o: refused"
        fi
    done
    ok fsck_clean opt.img -- "option image clean"
}

echo "lifecycle-check: $FL, work directory $work"
for s in 1 2 3 4 5; do
    [[ -z ${ONLY:-} || ",$ONLY," == *",$s,"* ]] && "section$s"
done
echo "result: $failures failed checks"
exit "$failures"
