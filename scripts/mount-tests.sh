#!/usr/bin/env bash
# Flashlog through a real FUSE mount: the POSIX suite, fsx with fixed seeds, a
# multi-process stress run, stress-ng's file-system stressors, real tools (cp -a, tar, sqlite3, git) across a remount,
# every entry's metadata after cp -a / cp -p / rsync / tar (scripts/meta-check.sh), POSIX
# ACLs (setfacl/getfacl, enforced for other users, inherited) and -o noacl, the mount(8)
# helper and an fstab line, signals, a SIGKILL of the daemon (nothing fsync'd may be
# lost; and at random moments, scripts/fuse-crash.py), the POSIX differential and kernel
# feature scripts, the mount's life cycle (scripts/lifecycle-check.sh: loop devices,
# changed images, recovery read-only), and a clean fsck at the end.
#
#   scripts/mount-tests.sh            # builds nothing; run scripts/test.sh for everything
#
# Needs root, fuse3 (fusermount3), sqlite3, git, acl (setfacl), attr (setfattr), rsync,
# stress-ng, python3, losetup and e2fsprogs (scripts/test.sh installs them) and the release binaries (cargo build --release). Each step prints one PASS/FAIL line; the exit
# status is the number of failed steps (0 = all passed).
# Environment: KEEP=1 keeps the work directory; STRESS_SECONDS (20), FSX_OPS (20000),
# STRESSNG_SECONDS (2 per stress-ng stressor); POSIX_DIFF_SEEDS (1-20); FUSE_CRASH_ROUNDS (6);
# ONLY=t_emulated (comma separated) runs just the named self-contained steps.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CARGO_TARGET_DIR:-$root/target}/release
FL=$bin/flashlog
for b in flashlog flashlog-posix flashlog-fsx flashlog-stress; do
    if [[ ! -x $bin/$b ]]; then
        echo "mount-tests: $bin/$b is missing: run \`cargo build --release\` (or scripts/test.sh)" >&2
        exit 1
    fi
done
for t in setfacl getfacl setfattr getfattr rsync python3 setpriv stress-ng; do
    if ! command -v "$t" >/dev/null 2>&1; then
        echo "mount-tests: $t is missing: apt-get install acl attr rsync python3 util-linux stress-ng (or run scripts/test.sh)" >&2
        exit 1
    fi
done
if [[ $(id -u) -ne 0 ]]; then
    echo "mount-tests: run as root (the permission cases switch users; mount(8) needs root)" >&2
    exit 1
fi

work=$(mktemp -d /tmp/flashlog-mount-tests.XXXXXX)
chmod 755 "$work" # the POSIX suite's permission cases run as uid 65534
img=$work/vol.img
mnt=$work/mnt
mkdir -p "$mnt"
pidfile=$work/daemon.pid
failures=0
started=$SECONDS
# A snapshot of this repository's sources: the tree may change while the tests run.
snap=$work/snap
mkdir -p "$snap" && cp -a "$root/crates" "$root/scripts" "$snap/"

cleanup() {
    if mountpoint -q "$mnt" 2>/dev/null || grep -qs " $mnt " /proc/mounts; then
        umount "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
    fi
    if [[ -s $pidfile ]]; then
        local pid
        pid=$(cat "$pidfile")
        kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
    fi
    if [[ ${KEEP:-0} == 1 || $failures -gt 0 ]]; then
        echo "work directory kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

# step NAME COMMAND...: run one check, print PASS/FAIL with its time and, on failure,
# the tail of its output.
step() {
    local name=$1
    shift
    # ONLY=t_name[,t_other] runs just those steps (they must not need the earlier ones).
    if [[ -n ${ONLY:-} && ",$ONLY," != *",$1,"* ]]; then
        return 0
    fi
    local t0=$SECONDS log=$work/step.log
    if "$@" >"$log" 2>&1; then
        printf 'PASS %-34s (%ds)%s\n' "$name" $((SECONDS - t0)) "$(summary_of "$log")"
    else
        printf 'FAIL %-34s (%ds)\n' "$name" $((SECONDS - t0))
        tail -n 40 "$log" | sed 's/^/    | /'
        failures=$((failures + 1))
    fi
}
# The last line starting with "summary:" or "result:" of a step's output, if any.
summary_of() {
    local s
    s=$(grep -E '^(summary|result):' "$1" | tail -n 1)
    [[ -n $s ]] && printf '  %s' "$s"
}
result() { echo "result: $*"; }

daemon_pid() { cat "$pidfile"; }

mount_fs() {
    ensure_unmounted
    "$FL" mount --daemon --pid-file "$pidfile" "$@" "$img" "$mnt"
}

# Wait up to 60 s for daemon $1 to exit (after its umount: it writes its final checkpoint
# first); fails if it is still running.
wait_exit() {
    for _ in $(seq 600); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

# Unmount and wait for the daemon to write its final checkpoint and exit.
umount_fs() {
    local pid
    pid=$(daemon_pid)
    umount "$mnt" || return 1
    wait_exit "$pid" && return 0
    echo "daemon $pid did not exit within 60 s after umount"
    return 1
}

# Make sure nothing is mounted on $mnt (a failed step may have left a mount behind).
ensure_unmounted() {
    if grep -qs " $mnt " /proc/mounts; then
        umount_fs 2>/dev/null || { fusermount3 -uz "$mnt" 2>/dev/null; sleep 1; }
    fi
    if [[ -s $pidfile ]]; then
        local pid
        pid=$(cat "$pidfile")
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    return 0
}

fsck_clean() {
    "$FL" fsck "$img"
}

# ---------------------------------------------------------------------------------------

t_mkfs() {
    "$FL" mkfs --size 1G --label mount-tests "$img"
}

t_cli_errors() {
    local out
    # Unknown options are an error that names the option.
    if out=$("$FL" mount -o bogus_option "$img" "$mnt" 2>&1); then
        echo "mount -o bogus_option succeeded"
        return 1
    fi
    grep -q bogus_option <<<"$out" || { echo "error does not name the option: $out"; return 1; }
    # Missing mountpoint, non-volume image, fsck of garbage: helpful errors, no panics.
    out=$("$FL" mount "$img" "$work/nonexistent" 2>&1) && return 1
    grep -q "does not exist" <<<"$out" || { echo "$out"; return 1; }
    head -c 8M /dev/zero >"$work/zero.img"
    out=$("$FL" mount "$work/zero.img" "$mnt" 2>&1) && return 1
    grep -q "flashlog mkfs" <<<"$out" || { echo "$out"; return 1; }
    "$FL" fsck "$work/zero.img" >/dev/null 2>&1
    [[ $? -eq 8 ]] || { echo "fsck of a non-volume should exit 8"; return 1; }
    # mkfs refuses to overwrite a volume without --force.
    out=$("$FL" mkfs "$img" 2>&1) && { echo "mkfs overwrote a volume without --force"; return 1; }
    grep -q -- "--force" <<<"$out" || { echo "$out"; return 1; }
    "$FL" inspect --json "$img" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["checkpoint"]["version"] > 0 and d["segment_usage"]["segments"] > 0'
    echo "result: errors name the problem and the fix"
}

t_mount() {
    mount_fs || return 1
    grep " $mnt fuse.flashlog " /proc/mounts
}

t_posix() {
    "$bin/flashlog-posix" "$mnt"
}

t_fsx() {
    local seed out
    for seed in 1 2 3 42; do
        out=$("$bin/flashlog-fsx" "$mnt" --seed "$seed" --ops "${FSX_OPS:-20000}") || {
            echo "$out"
            return 1
        }
        echo "$out"
        # Every fallocate mode the kernel forwards (allocate, keep size, punch hole, zero
        # range with and without keep size) must be served, not skipped as EOPNOTSUPP.
        if grep -q "EOPNOTSUPP" <<<"$out"; then
            echo "fsx seed $seed: a fallocate mode was refused"
            return 1
        fi
        grep -q "zero-range=" <<<"$out" || { echo "fsx seed $seed: no zero-range op ran"; return 1; }
    done
    result "seeds 1 2 3 42, ${FSX_OPS:-20000} ops each, every fallocate mode served"
}

t_stress() {
    "$bin/flashlog-stress" "$mnt" --procs 4 --seconds "${STRESS_SECONDS:-20}" --seed 7
}

# stress-ng's file-system and I/O stressors with --verify (scripts/stress-ng.sh): a checker
# from the distribution, not written against Flashlog.
t_stress_ng() {
    "$root/scripts/stress-ng.sh" "$mnt" "${STRESSNG_SECONDS:-2}" 2
}

# A large source tree: /usr/include when present, plus this repository's crates.
tree_src() {
    if [[ -d /usr/include && $(find /usr/include -type f | head -n 500 | wc -l) -ge 500 ]]; then
        echo /usr/include
    else
        echo "$snap/crates"
    fi
}

t_cp_in() {
    local src
    src=$(tree_src)
    cp -a "$src" "$mnt/tree" && diff -r "$src" "$mnt/tree" || return 1
    result "cp -a $src ($(du -sh "$src" | cut -f1), $(find "$src" | wc -l) entries) in, diff -r identical"
}

# Metadata of every entry after cp -a, cp -p, rsync -aHAX and tar --xattrs --acls of a
# real tree (/etc and the scripts, plus special cases: modes, owners, xattrs, ACLs,
# nanosecond times), built on the host's file system first.
t_meta_in() {
    "$root/scripts/meta-check.sh" source "$work/metasrc" /etc "$snap/scripts" || return 1
    "$root/scripts/meta-check.sh" copy "$work/metasrc" "$mnt/meta" || return 1
    "$root/scripts/meta-check.sh" compare "$work/metasrc" "$mnt/meta"
}

t_meta_remount() {
    "$root/scripts/meta-check.sh" compare "$work/metasrc" "$mnt/meta"
}

# Run a command as uid $1, gid $2, no supplementary groups.
as_user() {
    local uid=$1 gid=$2
    shift 2
    setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"
}

# POSIX ACLs through the mount: the mode follows an ACL, the kernel enforces named users,
# named groups and the mask for other users, chmod rewrites the mask, default ACLs are
# inherited with the umask ignored.
t_acl() {
    local d=$mnt/acl
    mkdir "$d" && chmod 0755 "$d" || return 1
    # cp -p of a 0644 file: 0644 and no ACL (the issue: 0600 plus an ACL mark).
    printf 'x\n' >"$work/p644" && chmod 0644 "$work/p644" && cp -p "$work/p644" "$d/p" || return 1
    [[ $(stat -c %a "$d/p") == 644 ]] || { echo "cp -p: mode $(stat -c %a "$d/p"), not 644"; return 1; }
    getfattr -m- -d "$d/p" 2>/dev/null | grep -q posix_acl && { echo "cp -p left an ACL that equals the mode"; return 1; }
    # A named user may read a 0600 file only through its ACL entry; the mask bounds it.
    printf 'secret\n' >"$d/f" && chmod 0600 "$d/f" || return 1
    as_user 65534 65534 cat "$d/f" >/dev/null 2>&1 && { echo "uid 65534 read a 0600 file"; return 1; }
    setfacl -m u:65534:r "$d/f" || return 1
    [[ $(stat -c %a "$d/f") == 640 ]] || { echo "after setfacl: mode $(stat -c %a "$d/f"), not 640 (mask r)"; return 1; }
    [[ $(as_user 65534 65534 cat "$d/f") == secret ]] || { echo "named user entry not honoured"; return 1; }
    as_user 65533 65533 cat "$d/f" >/dev/null 2>&1 && { echo "uid 65533 read through another user's entry"; return 1; }
    chmod 0600 "$d/f" || return 1
    getfacl -pn "$d/f" | grep -qx 'mask::---' || { echo "chmod did not rewrite the mask"; getfacl -pn "$d/f"; return 1; }
    as_user 65534 65534 cat "$d/f" >/dev/null 2>&1 && { echo "the mask (---) was not applied"; return 1; }
    setfacl -m g:65532:r,m::r "$d/f" || return 1
    [[ $(as_user 65531 65532 cat "$d/f") == secret ]] || { echo "named group entry not honoured"; return 1; }
    setfacl -b "$d/f" || return 1
    [[ $(stat -c %a "$d/f") == 600 ]] && ! getfattr -m- -d "$d/f" 2>/dev/null | grep -q posix_acl || { echo "setfacl -b"; return 1; }
    as_user 65531 65532 cat "$d/f" >/dev/null 2>&1 && { echo "access after setfacl -b"; return 1; }
    # Default ACL: inherited under umask 077 (which is ignored), by files and directories.
    mkdir "$d/inh" && setfacl -d -m u:65534:rwx "$d/inh" && chmod 0777 "$d/inh" || return 1
    (umask 077 && : >"$d/inh/file" && mkdir "$d/inh/sub" && : >"$d/inh/sub/deep") || return 1
    [[ $(stat -c %a "$d/inh/file") == 664 && $(stat -c %a "$d/inh/sub") == 775 ]] ||
        { echo "inherited modes $(stat -c %a "$d/inh/file") $(stat -c %a "$d/inh/sub"), not 664 775"; return 1; }
    getfacl -pn "$d/inh/sub/deep" | grep -qx 'user:65534:rwx.*' || { echo "not inherited two levels down"; getfacl -pn "$d/inh/sub/deep"; return 1; }
    getfacl -pn "$d/inh/sub" | grep -qx 'default:user:65534:rwx' || { echo "a subdirectory did not inherit the default ACL"; return 1; }
    echo appended | as_user 65534 65534 tee -a "$d/inh/file" >/dev/null || { echo "inherited entry not honoured"; return 1; }
    # setgid is cleared when a non-member of the group sets an ACL (posix_acl_update_mode).
    : >"$d/sg" && chown 65534:0 "$d/sg" && chmod 2770 "$d/sg" || return 1
    as_user 65534 65534 setfacl -m u:65533:r "$d/sg" || return 1
    [[ $(stat -c %a "$d/sg") == 770 ]] || { echo "setgid kept by a non-member: $(stat -c %a "$d/sg")"; return 1; }
    result "mode follows ACLs; named user, group and mask enforced; default ACL inherited (umask ignored)"
}

# -o noacl: ACLs are "not supported", so tools fall back to chmod; stored ACLs are hidden.
t_noacl() {
    mount_fs -o noacl || return 1
    local out
    out=$(setfacl -m u:65534:r "$mnt/acl/p" 2>&1) && { echo "setfacl succeeded with noacl"; umount_fs; return 1; }
    grep -q "not supported" <<<"$out" || { echo "setfacl: $out"; umount_fs; return 1; }
    cp -p "$work/p644" "$mnt/acl/p2" && [[ $(stat -c %a "$mnt/acl/p2") == 644 ]] || { echo "cp -p with noacl"; umount_fs; return 1; }
    getfattr -m- -d "$mnt/meta/cp-a/special/acl-file" 2>/dev/null | grep -q posix_acl && { echo "a stored ACL is visible with noacl"; umount_fs; return 1; }
    umount_fs && fsck_clean
}

t_tar_in() {
    tar -C "$snap" -cf "$mnt/repo.tar" crates scripts || return 1
    mkdir "$mnt/untar" && tar -C "$mnt/untar" -xf "$mnt/repo.tar" || return 1
    diff -r "$snap/crates" "$mnt/untar/crates" && diff -r "$snap/scripts" "$mnt/untar/scripts"
}

t_sqlite_in() {
    sqlite3 "$mnt/test.db" <<'EOF' || return 1
PRAGMA journal_mode=WAL;
CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, n INTEGER);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 20000)
  INSERT INTO t(v, n) SELECT hex(randomblob(32)), x FROM c;
CREATE INDEX t_n ON t(n);
BEGIN; UPDATE t SET v = 'updated' WHERE n % 7 = 0; DELETE FROM t WHERE n % 11 = 0; COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
EOF
    local ok rows
    ok=$(sqlite3 "$mnt/test.db" 'PRAGMA integrity_check;')
    rows=$(sqlite3 "$mnt/test.db" 'SELECT count(*) FROM t;')
    [[ $ok == ok ]] || { echo "integrity_check: $ok"; return 1; }
    echo "$rows" >"$work/sqlite.rows"
    result "integrity_check ok, $rows rows"
}

t_git_in() {
    mkdir "$mnt/repo" && cp -a "$snap/crates" "$mnt/repo/" || return 1
    (
        cd "$mnt/repo" &&
            git init -q &&
            git -c user.name=t -c user.email=t@example.com add -A &&
            git -c user.name=t -c user.email=t@example.com commit -q -m "first" &&
            echo change >>crates/fuse/Cargo.toml &&
            git -c user.name=t -c user.email=t@example.com commit -q -am "second" &&
            git log --oneline | tee "$work/git.log" &&
            git fsck --strict
    )
}

t_umount_fsck() {
    umount_fs && fsck_clean || return 1
    # docs/FORMAT.md against the bytes: every documented offset of the superblock,
    # checkpoint, NAT, inodes, dentries, SIT and SSA the image holds now.
    cargo build --release -q -p flashlog-format --example format_check --manifest-path "$root/Cargo.toml" || return 1
    local out
    out=$("$bin/examples/format_check" "$img") || { grep MISMATCH <<<"$out"; return 1; }
    result "fsck clean; FORMAT.md: $(tail -1 <<<"$out")"
}

t_remount_check() {
    mount_fs || return 1
    local src
    src=$(tree_src)
    diff -r "$src" "$mnt/tree" || return 1
    rm -rf "$work/back" && cp -a "$mnt/tree" "$work/back" && diff -r "$src" "$work/back" || return 1
    rm -rf "$work/back"
    diff -r "$snap/crates" "$mnt/untar/crates" || return 1
    mkdir -p "$work/untar2" && tar -C "$work/untar2" -xf "$mnt/repo.tar" && diff -r "$snap/crates" "$work/untar2/crates" || return 1
    local ok rows
    ok=$(sqlite3 "$mnt/test.db" 'PRAGMA integrity_check;')
    rows=$(sqlite3 "$mnt/test.db" 'SELECT count(*) FROM t;')
    [[ $ok == ok && $rows == $(cat "$work/sqlite.rows") ]] || { echo "sqlite after remount: $ok, $rows rows"; return 1; }
    (cd "$mnt/repo" && git log --oneline | diff - "$work/git.log" && git fsck --strict && git status --porcelain | diff - /dev/null) || return 1
    result "tree copied back identical; tar, sqlite3 ($rows rows, integrity ok) and git intact"
}

t_readonly() {
    umount_fs || return 1
    mount_fs -o ro || return 1
    if echo x >"$mnt/ro-test" 2>/dev/null; then
        echo "write succeeded on a read-only mount"
        return 1
    fi
    # immutable=1: a WAL database cannot create its -shm file on a read-only file system.
    [[ $(sqlite3 "file:$mnt/test.db?immutable=1" 'SELECT count(*) FROM t;') == $(cat "$work/sqlite.rows") ]] || { umount_fs; return 1; }
    cmp <(cat "$mnt/repo.tar") "$mnt/repo.tar" || { umount_fs; return 1; }
    umount_fs && fsck_clean
}

t_mount_helper() {
    ensure_unmounted
    if [[ ! -x /sbin/mount.fuse.flashlog ]]; then
        echo "/sbin/mount.fuse.flashlog is missing: run scripts/setup.sh"
        return 1
    fi
    mount -t fuse.flashlog -o noatime "$img" "$mnt" || return 1
    grep " $mnt fuse.flashlog " /proc/mounts || return 1
    [[ -f $mnt/test.db ]] || return 1
    umount "$mnt" || return 1
    # An fstab line (a private fstab: /etc/fstab is not touched).
    echo "$img $mnt fuse.flashlog defaults,nofail,_netdev,x-test=1 0 0" >"$work/fstab"
    mount -T "$work/fstab" "$mnt" || return 1
    grep " $mnt fuse.flashlog " /proc/mounts || return 1
    umount "$mnt" || return 1
    # What fstests does with FSTYP=fuse, FUSE_SUBTYP=.flashlog (scripts/fstests/local.config):
    # mount through the helper with nosubtype, expect type "fuse", unmount by the image.
    mount -t fuse.flashlog -o nosubtype "$img" "$mnt" || return 1
    grep " $mnt fuse rw" /proc/mounts || { echo "-o nosubtype: type is not plain fuse"; return 1; }
    umount "$img" || return 1
    fsck_clean # waits for the helper's daemon to write its final checkpoint
}

t_sigterm() {
    ensure_unmounted
    local pid rc=0 sig
    for sig in TERM INT; do
        "$FL" mount "$img" "$mnt" >"$work/fg.log" 2>&1 &
        pid=$!
        for _ in $(seq 100); do grep -qs " $mnt " /proc/mounts && break; sleep 0.1; done
        echo data >"$mnt/sig-$sig" || rc=1
        kill -"$sig" "$pid"
        wait "$pid" || { echo "foreground mount exited $? after SIG$sig"; cat "$work/fg.log"; rc=1; }
        grep -qs " $mnt " /proc/mounts && { echo "still mounted after SIG$sig"; rc=1; }
        "$FL" inspect --json "$img" | python3 -c 'import json,sys; assert "umount" in json.load(sys.stdin)["checkpoint"]["flags"], "no clean-unmount checkpoint"' || rc=1
    done
    [[ $rc == 0 ]] && fsck_clean
}

t_sigkill() {
    mount_fs -o cp_interval=0 || return 1
    mkdir -p "$mnt/kill" && sync "$mnt" # fsync of the root: a checkpoint (sync -f would not reach the daemon)
    head -c 24M /dev/urandom >"$work/kill.data"
    dd if="$work/kill.data" of="$mnt/kill/synced" bs=1M conv=fsync status=none || return 1
    # Small fsync'd files in an existing directory, and an fsync'd append.
    local i
    for i in $(seq 20); do
        echo "small $i" | dd of="$mnt/kill/small-$i" conv=fsync status=none || return 1
    done
    echo appended | dd of="$mnt/kill/synced" oflag=append conv=notrunc,fsync status=none || return 1
    cat "$work/kill.data" >"$work/kill.expect" && echo appended >>"$work/kill.expect"
    # Written but never fsync'd: may be lost, must not corrupt anything.
    head -c 4M /dev/urandom >"$mnt/kill/unsynced"
    local pid
    pid=$(daemon_pid)
    kill -KILL "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" || return 1
    mount_fs || return 1
    cmp "$work/kill.expect" "$mnt/kill/synced" || { echo "fsync'd data lost or changed"; return 1; }
    for i in $(seq 20); do
        [[ $(cat "$mnt/kill/small-$i") == "small $i" ]] || { echo "small-$i lost"; return 1; }
    done
    umount_fs && fsck_clean || return 1
    result "24 MiB + 20 small fsync'd files intact after kill -9; fsck clean"
}

# The kernel-side settings the daemon makes (docs/DESIGN.md, "The FUSE adapter's request
# path"), on a mount point whose name has a space (found through /proc/self/mountinfo, where
# it reads "\040"): the mount's bdi max_ratio is 20 by default, N with bdi_max_ratio=N and
# FUSE's own 1 with bdi_max_ratio=1; HANDLE_KILLPRIV_V2 is negotiated unless nokillpriv.
t_fuse_knobs() {
    local kmnt="$work/knob mnt" klog=$work/knob.log kpid=$work/knob.pid kimg=$work/knob.img
    local opt o want kp io got dev ratio pid rc=0 direct=buffered n=0
    mkdir -p "$kmnt"
    head -c 4M /dev/urandom >"$work/knob.data" # 3 of them in 18 MiB of user space
    "$FL" mkfs --size 64M "$kimg" >/dev/null || return 1
    # image_io=direct is direct where the file system under $work takes O_DIRECT.
    dd if=/dev/zero of="$work/knob.odirect" bs=64k count=1 oflag=direct status=none 2>/dev/null && direct=direct
    rm -f "$work/knob.odirect"
    for opt in "-:20:yes:buffered" "bdi_max_ratio=35,image_io=direct:35:yes:$direct" \
        "bdi_max_ratio=1,nokillpriv:1:no:buffered"; do
        IFS=: read -r o want kp io <<<"$opt"
        rm -f "$klog"
        if [[ $o == - ]]; then
            "$FL" mount --daemon --pid-file "$kpid" --log "$klog" "$kimg" "$kmnt" || return 1
        else
            "$FL" mount --daemon --pid-file "$kpid" --log "$klog" -o "$o" "$kimg" "$kmnt" || return 1
        fi
        pid=$(cat "$kpid")
        dev=$(M=${kmnt// /\\040} awk '$5 == ENVIRON["M"] {print $3}' /proc/self/mountinfo | tail -n 1)
        ratio=$(cat "/sys/class/bdi/$dev/max_ratio" 2>/dev/null)
        [[ $ratio == "$want" ]] || { echo "-o $o: bdi $dev max_ratio is '$ratio', not $want"; cat "$klog"; rc=1; }
        if grep -q "enabled .*HANDLE_KILLPRIV_V2" "$klog"; then got=yes; else got=no; fi
        [[ $got == "$kp" ]] || { echo "-o $o: HANDLE_KILLPRIV_V2 negotiated: $got, expected $kp"; cat "$klog"; rc=1; }
        if grep -q "large log writes bypass the host's page cache" "$klog"; then got=direct; else got=buffered; fi
        [[ $got == "$io" ]] || { echo "-o $o: image writes $got, expected $io"; cat "$klog"; rc=1; }
        # 4 MiB through this mount's image I/O (log writes of 256 KiB), fsync'd.
        n=$((n + 1))
        dd if="$work/knob.data" of="$kmnt/f$n" bs=1M conv=fsync status=none || rc=1
        umount "$kmnt" || return 1
        wait_exit "$pid" || true
    done
    # Every file reads back after a remount, with the host's cached pages of the image gone.
    echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
    "$FL" mount --daemon --pid-file "$kpid" --log "$klog" "$kimg" "$kmnt" || return 1
    pid=$(cat "$kpid")
    for i in 1 2 3; do
        cmp "$work/knob.data" "$kmnt/f$i" || { echo "f$i (written with mount $i's image I/O) differs after a remount"; rc=1; }
    done
    umount "$kmnt" || return 1
    wait_exit "$pid" || true
    [[ $rc == 0 ]] && result "bdi max_ratio 20 / 35 / 1, KILLPRIV_V2 on / on / off and image writes buffered / $direct / buffered as asked, on a mount point with a space; 4 MiB written through each reads back after a remount"
}

# Requests per new file (docs/DESIGN.md, "The FUSE adapter's request path"): 200 files
# created, written (4 KiB), closed and unlinked through a fresh mount, as the bench's
# create+unlink job does. From the daemon's per-opcode counters (logged at unmount): FLUSH,
# OPEN, CREATE and RELEASE come at most once (answered ENOSYS, after which the kernel stops
# sending them), each file is made with one MKNOD, and the rest stays within what the kernel
# itself sends per file (LOOKUP, WRITE, UNLINK one each; GETXATTR 1, GETATTR 2, SETATTR 2:
# see the docs). Then what those requests carried must still hold: times and size of a file
# written, reopened, written, fsync'd and closed read back the same after a kill -9 of the
# daemon and a remount; an unlinked open file stays readable and writable until its close;
# fsck is clean.
t_requests_per_file() {
    local rmnt=$work/req-mnt rlog=$work/req.log rpid=$work/req.pid rimg=$work/req.img pid rc=0 line
    mkdir -p "$rmnt"
    "$FL" mkfs --size 64M "$rimg" >/dev/null || return 1
    "$FL" mount --daemon --pid-file "$rpid" --log "$rlog" "$rimg" "$rmnt" >/dev/null || return 1
    pid=$(cat "$rpid")
    mkdir "$rmnt/d" || return 1
    python3 - "$rmnt/d" 200 <<'PY' || rc=1
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    p = os.path.join(d, "f%d" % (i % 64))
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"x" * 4096)
    os.close(fd)
    os.unlink(p)
PY
    umount "$rmnt" || return 1
    wait_exit "$pid" || return 1
    line=$(grep -o "by opcode: .*" "$rlog")
    echo "200 files: $line"
    grep -q "enabled .*NO_OPEN_SUPPORT" "$rlog" || { echo "NO_OPEN_SUPPORT not in the kernel's INIT"; cat "$rlog"; rc=1; }
    python3 - "$line" 200 <<'PY' || rc=1
import sys
counts = dict((k, int(v)) for k, v in (kv.rsplit(" ", 1) for kv in sys.argv[1].split(": ", 1)[1].split(", ")))
n = int(sys.argv[2])
slack = n // 10  # attribute and entry timeouts (1 s) of the mount root and d expire during a slow run
budget = {"flush": 1, "open": 1, "create": 1, "release": 1, "mknod": n, "lookup": n + slack,
          "write": n, "unlink": n, "forget": n + 2, "getxattr": n, "getattr": 2 * n + slack,
          "setattr": 2 * n, "mkdir": 1, "statfs": 1}
bad = [f"{k} {v} > {budget.get(k, 0)}" for k, v in counts.items() if v > budget.get(k, 0)]
if counts.get("mknod", 0) != n:
    bad.append(f"mknod {counts.get('mknod', 0)} != {n}")
if bad:
    sys.exit("over budget: " + ", ".join(bad))
PY
    # Times and size after write, reopen, write, fsync and close survive a kill -9; an
    # unlinked open file lives until its close.
    "$FL" mount --daemon --pid-file "$rpid" --log "$rlog" "$rimg" "$rmnt" >/dev/null || return 1
    pid=$(cat "$rpid")
    python3 - "$rmnt" >"$work/req.times" <<'PY' || rc=1
import os, sys, time
m = sys.argv[1]
p = os.path.join(m, "t")
fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"a" * 4096)
os.close(fd)
time.sleep(0.05)
fd = os.open(p, os.O_WRONLY)
os.pwrite(fd, b"b" * 100, 4096)
os.fsync(fd)
os.close(fd)
st = os.stat(p)
assert st.st_size == 4196, st
print(st.st_size, st.st_mtime_ns, st.st_ctime_ns)
u = os.path.join(m, "u")
fd = os.open(u, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"hello ")
os.unlink(u)
os.write(fd, b"world")
assert os.fstat(fd).st_nlink == 0
assert os.pread(fd, 100, 0) == b"hello world", os.pread(fd, 100, 0)
os.close(fd)
assert not os.path.exists(u)
PY
    kill -KILL "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fusermount3 -u "$rmnt" 2>/dev/null || umount -l "$rmnt" || return 1
    "$FL" mount --daemon --pid-file "$rpid" --log "$rlog" "$rimg" "$rmnt" >/dev/null || return 1
    pid=$(cat "$rpid")
    local got want
    want=$(cat "$work/req.times")
    got=$(python3 -c 'import os, sys; st = os.stat(sys.argv[1]); print(st.st_size, st.st_mtime_ns, st.st_ctime_ns)' "$rmnt/t")
    [[ $got == "$want" && -n $want ]] || { echo "size mtime ctime after kill -9 and remount: '$got', before: '$want'"; rc=1; }
    umount "$rmnt" || return 1
    wait_exit "$pid" || return 1
    "$FL" fsck "$rimg" >/dev/null || { echo "fsck after the request checks"; rc=1; }
    [[ $rc == 0 ]] && result "200 create+write+close+unlink: $(sed 's/^by opcode: //' <<<"$line"); times durable after fsync + kill -9; unlinked open file ok"
}

# --device: a fresh emulated SSD in the daemon's memory with -o gc=device (D2FS on the
# coupled-GC FTL, chosen automatically): fsync'd data and a cp -a tree read back, the
# unmount logs the emulator's summary; gc=device on an image or a RAM device is refused
# with the reason.
# The same random operation lists on tmpfs and on a fresh Flashlog mount, compared after
# every operation (errno, lstat, whether times changed, contents, listings, xattrs; as root
# and as two other users), then a remount compared exactly (scripts/posix-diff.py).
t_posix_diff() {
    local pd=$work/pd rc=0
    mkdir -p "$pd"
    python3 "$root/scripts/posix-diff.py" --setup --teardown --bin "$FL" \
        --tmpfs "$pd/tmpfs" --flashlog "$pd/mnt" --img "$pd/vol.img" --size 256M \
        --seeds "${POSIX_DIFF_SEEDS:-1-20}" --ops 200 --shrink-seconds 60 >"$pd/out.txt" 2>&1 || rc=1
    umount "$pd/mnt" 2>/dev/null
    umount "$pd/tmpfs" 2>/dev/null
    if ((rc)); then
        tail -40 "$pd/out.txt"
        return 1
    fi
    result "$(grep -E 'seeds, [0-9]+ kinds' "$pd/out.txt")"
}

# The mount's life cycle beyond these steps (scripts/lifecycle-check.sh sections 1, 2, 3
# and 5): a volume needing recovery read-only, inspected and checked without a write; the
# image grown, shrunk, replaced, immutable or behind a read-only bind; loop devices (plain,
# direct I/O with 4 KiB sectors, read-only, too small, a mounted ext4, the image mounted
# through a loop device and directly); -o parsing. A volume in use is refused after 2 s
# (FLASHLOG_LOCK_WAIT) instead of 30.
t_lifecycle() {
    local out rc=0
    out=$(FLASHLOG_LOCK_WAIT=2 ONLY=1,2,3,5 bash "$root/scripts/lifecycle-check.sh" "$FL" 2>&1) || rc=1
    if ((rc)); then
        grep -E '^(FAIL|NOTE)' <<<"$out"
        tail -5 <<<"$out"
        return 1
    fi
    result "$(grep -c '^PASS' <<<"$out") checks passed"
}

# Random operations by 3 processes (every durability call: fsync, fdatasync, O_SYNC and
# O_DSYNC writes, msync, directory fsync; O_DIRECT writes and copy_file_range too) and 2
# more writing ranges of their own and a shared range of the same 2 files, on a 96 % full
# volume of its own, the daemon killed with SIGKILL at a random moment in each round, then
# every promise checked after the recovering mount, fsck clean before and after
# (scripts/fuse-crash.py; its --selftest first: the shared-file checker on made-up logs).
t_fuse_crash() {
    local fc=$work/fc rc=0
    mkdir -p "$fc"
    python3 "$root/scripts/fuse-crash.py" --selftest >"$fc/out.txt" 2>&1 || rc=1
    python3 "$root/scripts/fuse-crash.py" --setup --bin "$FL" --img "$fc/vol.img" \
        --mnt "$fc/mnt" --rounds "${FUSE_CRASH_ROUNDS:-6}" --seed 5 --fill 96 \
        --odirect 2 --copy 2 --shared-writers 2 >>"$fc/out.txt" 2>&1 || rc=1
    fusermount3 -u "$fc/mnt" 2>/dev/null
    if ((rc)); then
        tail -40 "$fc/out.txt"
        return 1
    fi
    result "$(grep -E '^TOTAL' "$fc/out.txt" | cut -c1-160)"
}

# Kernel features beyond plain syscalls, on a fresh mount of its own
# (scripts/kernel-features.py): mmap and msync, O_DIRECT, O_APPEND from two processes,
# O_SYNC/O_DSYNC/fdatasync then SIGKILL, SEEK_HOLE/SEEK_DATA, every fallocate mode and one
# past the free space, copy_file_range/sendfile/splice, renameat2 (overlayfs with its upper
# directory on the mount), locks, inotify, utimensat, deep paths, 20,000 entries in one
# directory read while it changes, a full volume under the write-back cache.
t_kernel_features() {
    local kf=$work/kf rc=0
    mkdir -p "$kf"
    python3 "$root/scripts/kernel-features.py" --setup --bin "$FL" --mnt "$kf/mnt" \
        --img "$kf/vol.img" --big "${KERNEL_FEATURES_BIG:-20000}" >"$kf/out.txt" 2>&1 || rc=1
    fusermount3 -u "$kf/mnt" 2>/dev/null
    if ((rc)); then
        grep -E '^(FAIL|SKIP)' "$kf/out.txt"
        tail -20 "$kf/out.txt"
        return 1
    fi
    result "$(grep -c '^PASS' "$kf/out.txt") checks passed, $(grep -c '^SKIP' "$kf/out.txt") skipped (O_TMPFILE: fuser has no TMPFILE request)"
}

t_readdirplus() {
    local out rc=0
    out=$(python3 "$root/scripts/readdirplus-check.py" --bin "$FL" 2>&1) || rc=1
    echo "$out"
    ((rc)) && return 1
    result "listings with attributes (readdirplus=always, auto, off): attributes, . and .., lookups balanced"
}

t_emulated() {
    local emnt=$work/emu-mnt elog=$work/emu.log epid=$work/emu.pid eimg=$work/emu.img out pid rc=0
    mkdir -p "$emnt"
    out=$("$FL" mount --daemon --pid-file "$epid" --log "$elog" --device 970pro-like:1GiB \
        -o gc=device "$emnt" 2>&1) || { echo "mount --device failed: $out"; return 1; }
    echo "$out"
    grep -q "ftl=coupled" <<<"$out" || { echo "gc=device did not pick ftl=coupled"; rc=1; }
    grep -q "vanish at unmount" <<<"$out" || { echo "mount message does not say the contents vanish"; rc=1; }
    pid=$(cat "$epid")
    head -c 8M /dev/urandom >"$work/emu.data"
    dd if="$work/emu.data" of="$emnt/data" bs=1M conv=fsync status=none || rc=1
    echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
    cmp "$work/emu.data" "$emnt/data" || { echo "8 MiB file read back differs"; rc=1; }
    cp -a "$snap/scripts" "$emnt/tree" && diff -r "$snap/scripts" "$emnt/tree" || { echo "cp -a tree differs"; rc=1; }
    umount "$emnt" || return 1
    wait_exit "$pid" || true
    kill -0 "$pid" 2>/dev/null && { echo "daemon $pid still running after umount"; return 1; }
    cat "$elog"
    grep -q "emulated device summary: .*WAF .*device GC: .*upcalls sent" "$elog" || { echo "no emulator summary in the log"; rc=1; }
    grep -q "contents discarded" "$elog" || { echo "unmount does not say the contents are gone"; rc=1; }
    grep -q "fsck of .* after the unmount: .*: clean" "$elog" || { echo "no clean fsck of the emulated volume in the log"; rc=1; }
    # gc=none (IPLFS): the log shows what inspect shows of an infinite volume, which the
    # CLI cannot open otherwise: each head's live interval and an empty discard log (a clean
    # unmount issues the discards its final checkpoint made safe).
    out=$("$FL" mount --daemon --pid-file "$epid" --log "$elog.none" --device 970pro-like:1GiB \
        -o gc=none "$emnt" 2>&1) || { echo "mount --device -o gc=none failed: $out"; return 1; }
    grep -q "ftl=interval" <<<"$out" || { echo "gc=none did not pick ftl=interval: $out"; rc=1; }
    pid=$(cat "$epid")
    dd if="$work/emu.data" of="$emnt/data" bs=1M conv=fsync status=none || rc=1
    dd if=/dev/zero of="$emnt/data" bs=1M count=4 conv=notrunc,fsync status=none || rc=1
    umount "$emnt" || return 1
    wait_exit "$pid" || true
    kill -0 "$pid" 2>/dev/null && { echo "gc=none daemon $pid still running after umount"; return 1; }
    sed -n '/flashlog inspect/,$p' "$elog.none"
    grep -q "fsck of .* after the unmount: .*: clean" "$elog.none" || { echo "gc=none: no clean fsck in the log"; rc=1; }
    grep -q "Infinite space (gc=none): 20[0-9][0-9] live blocks" "$elog.none" || { echo "gc=none: no live intervals (8 MiB live) in the log"; rc=1; }
    grep -q "Discard log: 0 bytes, 0 commands" "$elog.none" || { echo "gc=none: the unmounted volume still lists discards"; rc=1; }
    # gc=device where the device cannot move blocks itself: refused, saying why.
    "$FL" mkfs --size 64M "$eimg" >/dev/null || return 1
    if out=$("$FL" mount -o gc=device "$eimg" "$emnt" 2>&1); then
        echo "gc=device over an image file mounted"; return 1
    fi
    echo "$out"
    grep -q "migration_upcalls" <<<"$out" || { echo "image refusal does not say why: $out"; rc=1; }
    if out=$("$FL" mount -o gc=device --device ram:256MiB "$emnt" 2>&1); then
        echo "gc=device over a RAM device mounted"; return 1
    fi
    grep -q "migration_upcalls" <<<"$out" || { echo "RAM refusal does not say why: $out"; rc=1; }
    grep -qs " $emnt " /proc/mounts && { echo "a refused mount left $emnt mounted"; rc=1; }
    [[ $rc == 0 ]] && result "970pro-like:1GiB gc=device (ftl=coupled): 8 MiB fsync'd + cp -a tree read back; summary and clean fsck logged; gc=none: live intervals and an empty discard log logged; gc=device on image/RAM refused"
}

# Two signals in a row, the second while the final checkpoint writes back 350 MiB of dirty
# data (dirty_cap=1G), with a tmpfs under the mount point: the daemon unmounts its own mount
# and nothing else (review 2026-11-28: the second signal lazily detached the tmpfs). Then a
# foreground mount on a plain directory given SIGINT twice: exit 0, no failed lazy unmount.
t_two_signals() {
    local under=$work/under img2=$work/sig2.img log=$work/sig2.log pid rc=0
    mkdir -p "$under"
    "$FL" mkfs --size 1G "$img2" >/dev/null || return 1
    mount -t tmpfs flashlog-under "$under" || return 1
    echo under >"$under/marker"
    if ! "$FL" mount --daemon --pid-file "$work/sig2.pid" --log "$log" -o dirty_cap=1G \
        "$img2" "$under" >/dev/null; then
        umount "$under"
        return 1
    fi
    pid=$(cat "$work/sig2.pid")
    head -c 350M /dev/urandom >"$under/dirty"
    kill -TERM "$pid"
    sleep 0.05
    kill -TERM "$pid"
    wait_exit "$pid" || { echo "daemon $pid still running"; rc=1; }
    cat "$log"
    if [[ $(cat "$under/marker" 2>/dev/null) == under ]]; then
        umount "$under" || { echo "the tmpfs could not be unmounted"; rc=1; }
    else
        echo "the tmpfs under the mount point was detached by the second SIGTERM"
        rc=1
    fi
    grep -q "unmounted .* cleanly" "$log" || { echo "no clean unmount in the log"; rc=1; }
    # Foreground, SIGINT twice during the final checkpoint, on a plain directory.
    mkdir -p "$work/plain"
    "$FL" mount -o dirty_cap=1G "$img2" "$work/plain" >"$work/fg2.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -qs " $work/plain " /proc/mounts && break; sleep 0.1; done
    head -c 350M /dev/urandom >"$work/plain/dirty"
    kill -INT "$pid"
    sleep 0.05
    kill -INT "$pid"
    wait "$pid" || { echo "foreground mount exited $? after two SIGINTs"; rc=1; }
    cat "$work/fg2.log"
    grep -q "lazy unmount .* failed\|detaching it lazily" "$work/fg2.log" && { echo "the second SIGINT tried a lazy unmount"; rc=1; }
    grep -q "unmounted .* cleanly" "$work/fg2.log" || { echo "foreground: no clean unmount"; rc=1; }
    rm -f "$img2"
    [[ $rc == 0 ]] && result "two SIGTERMs (daemon, tmpfs underneath) and two SIGINTs (foreground): only our mount unmounted, clean final checkpoints"
}

# The same image mounted twice with --daemon: the second mount's wait message reaches the
# terminal at once (review 2026-11-28: 30 s of silence, the message went to the log), and
# it mounts once the first unmounts, its daemon holding the lock after its parent exits. A
# mount detached with `umount -l` while a file is open keeps the image: a new mount is
# refused naming that daemon's pid, not "unmount it first".
t_in_use() {
    local img3=$work/inuse.img m1=$work/inuse1 m2=$work/inuse2 out pid1 pid2 bp hp rc=0
    mkdir -p "$m1" "$m2"
    "$FL" mkfs --size 256M "$img3" >/dev/null || return 1
    "$FL" mount --daemon --pid-file "$work/inuse1.pid" --log "$work/inuse1.log" "$img3" "$m1" >/dev/null || return 1
    pid1=$(cat "$work/inuse1.pid")
    "$FL" mount --daemon --pid-file "$work/inuse2.pid" --log "$work/inuse2.log" "$img3" "$m2" >"$work/inuse2.out" 2>&1 &
    bp=$!
    sleep 3
    grep -q "waiting for the flashlog process" "$work/inuse2.out" || {
        echo "after 3 s the second mount's terminal shows '$(cat "$work/inuse2.out")'; its log has $(grep -cs waiting "$work/inuse2.log") wait line(s)"
        rc=1
    }
    umount "$m1"
    wait "$bp" || { echo "the second mount failed once the first was unmounted: $(cat "$work/inuse2.out")"; rc=1; }
    wait_exit "$pid1"
    grep -qs " $m2 " /proc/mounts || { echo "the second mount is not mounted"; return 1; }
    pid2=$(cat "$work/inuse2.pid")
    flock -n -s "$img3" true && { echo "nothing holds the image's lock after the mounting parent exited"; rc=1; }
    # umount -l with a file open: the daemon keeps serving it; a new mount names it.
    echo held >"$m2/held"
    sleep 60 <"$m2/held" &
    hp=$!
    sleep 0.5
    umount -l "$m2" || rc=1
    out=$(FLASHLOG_LOCK_WAIT=3 timeout 60 "$FL" mount --daemon --log "$work/inuse3.log" "$img3" "$m1" 2>&1) && {
        echo "a third mount went ahead"
        umount "$m1"
        rc=1
    }
    echo "$out"
    grep -q "pid $pid2" <<<"$out" || { echo "the refusal does not name the detached daemon ($pid2)"; rc=1; }
    grep -q "unmount it first" <<<"$out" && { echo "the refusal says to unmount what is not visible"; rc=1; }
    kill "$hp"
    wait "$hp" 2>/dev/null
    wait_exit "$pid2" || { echo "the detached daemon did not exit once its last file was closed"; rc=1; }
    "$FL" fsck -q "$img3" || rc=1
    rm -f "$img3"
    [[ $rc == 0 ]] && result "second --daemon mount waits on the terminal and mounts after the first; a umount -l'd daemon is named by pid"
}

t_final() {
    mount_fs || return 1
    local src
    src=$(tree_src)
    diff -r "$src" "$mnt/tree" >/dev/null || { echo "tree differs at the end"; return 1; }
    umount_fs && fsck_clean
}

echo "== Flashlog mount tests in $work"
step "mkfs 1 GiB image" t_mkfs
step "CLI errors are helpful" t_cli_errors
step "mount --daemon" t_mount
step "POSIX suite (flashlog-posix)" t_posix
step "fsx, fixed seeds (flashlog-fsx)" t_fsx
step "stress, 4 procs (flashlog-stress)" t_stress
step "stress-ng file-system stressors" t_stress_ng
step "cp -a source tree in + diff" t_cp_in
step "metadata after cp -a/-p, rsync, tar" t_meta_in
step "POSIX ACLs (setfacl, enforcement)" t_acl
step "tar round trip" t_tar_in
step "sqlite3 write + integrity_check" t_sqlite_in
step "git init/add/commit/log/fsck" t_git_in
step "umount + fsck clean, FORMAT.md offsets" t_umount_fsck
step "remount: cp back, tar, sqlite3, git" t_remount_check
step "remount: metadata still identical" t_meta_remount
step "read-only mount" t_readonly
step "-o noacl: setfacl refused, cp -p ok" t_noacl
step "mount -t fuse.flashlog, fstab, nosubtype" t_mount_helper
step "SIGTERM/SIGINT unmount cleanly" t_sigterm
step "SIGKILL loses nothing fsync'd" t_sigkill
step "FUSE knobs: bdi_max_ratio, killpriv" t_fuse_knobs
step "requests per new file, times durable" t_requests_per_file
step "POSIX differential against tmpfs (posix-diff.py)" t_posix_diff
step "kernel features: mmap, O_DIRECT, fallocate, overlayfs (kernel-features.py)" t_kernel_features
step "directory listings with attributes (readdirplus-check.py)" t_readdirplus
step "kill -9 of the daemon at random, 96 % full (fuse-crash.py)" t_fuse_crash
step "life cycle: recovery read-only, changed images, loop devices, -o (lifecycle-check.sh)" t_lifecycle
step "--device 970pro-like -o gc=device, gc=none" t_emulated
step "two signals unmount only our mount" t_two_signals
step "image in use: wait on the terminal, pid" t_in_use
step "final remount + umount + fsck" t_final
echo "== mount tests: $failures failed step(s) in $((SECONDS - started)) s"
exit $((failures > 0 ? 1 : 0))
