#!/usr/bin/env bash
# Metadata round trip through a mount: copy a real tree in with cp -a, cp -p, rsync and tar,
# and compare every entry's mode, owner, group, size, mtime (ns), symlink target, xattrs
# (POSIX ACLs included), link count and contents with the source (scripts/treecmp.py).
#
#   scripts/meta-check.sh source DIR [TREE...]  # build the source tree DIR on the host fs:
#                                               # copies of TREEs (default /etc) plus a
#                                               # directory of special cases (below)
#   scripts/meta-check.sh copy SRC DEST          # DEST/{cp-a,cp-p,rsync,tar}: one copy per tool
#   scripts/meta-check.sh compare SRC DEST       # compare each copy with SRC
#
# Used by scripts/mount-tests.sh (SRC on the host's file system, DEST in the mount; compare
# again after a remount). Needs root (chown), setfacl/getfacl (acl), setfattr (attr), rsync,
# python3. Exit status 0 only if every copy and comparison succeeded.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# The special cases: every kind of entry, permission bit, owner, xattr and ACL shape the
# tools must carry, and times down to the nanosecond (set last: creating entries changes the
# directory's mtime).
special_cases() {
    local s=$1
    mkdir -p "$s" && cd "$s" || return 1
    printf 'plain\n' >plain && chmod 0644 plain
    printf 'suid\n' >suid && chmod 4755 suid
    printf 'sgid\n' >sgid && chmod 2750 sgid
    printf 'none\n' >none && chmod 0000 none
    printf 'owned\n' >owned && chown 1000:100 owned && chmod 0640 owned
    : >empty && chmod 0600 empty
    mkdir sticky && chmod 1777 sticky
    mkdir private && chown 65534:65534 private && chmod 0700 private
    mkdir sgid-dir && chmod 2775 sgid-dir && printf 'x\n' >sgid-dir/inside
    mkfifo fifo && chmod 0620 fifo
    ln plain hardlink
    truncate -s 5M sparse && printf 'end\n' >>sparse
    ln -s plain rel-link
    ln -s /nonexistent/target dangling
    ln -s .. up-link
    printf 'sp\n' >'name with spaces' && printf 'u\n' >"$(printf 'caf\xc3\xa9-\xe2\x9c\x93')"
    printf 'long\n' >"$(printf 'l%.0s' $(seq 255))"
    # Extended attributes: text, binary, empty, large; on files and directories.
    setfattr -n user.text -v hello plain
    setfattr -n user.bin -v 0x00ff10fe00 plain
    setfattr -n user.empty owned
    setfattr -n user.big -v "$(head -c 1500 /dev/zero | tr '\0' 'b')" empty
    setfattr -n user.dir -v yes sticky
    # POSIX ACLs: named users and groups with a mask, a mask below the group entry, a
    # directory with a default ACL and entries created under it (inherited here, on the
    # host), one of them chmod'ed afterwards.
    printf 'acl\n' >acl-file && chmod 0640 acl-file
    setfacl -m u:1000:rw-,g:100:r--,m::rw- acl-file
    printf 'acl2\n' >acl-masked && setfacl -m u:65534:rwx,g::rwx,m::r-x acl-masked
    setfattr -n user.with-acl -v 1 acl-masked
    mkdir acl-dir && setfacl -m u:1000:rwx acl-dir && setfacl -d -m u:1000:rwx,g:100:r-x,o::--- acl-dir
    (umask 022 && printf 'i\n' >acl-dir/inherited && mkdir acl-dir/subdir && printf 'j\n' >acl-dir/subdir/deep)
    chmod 0600 acl-dir/subdir/deep
    mkdir default-only && setfacl -d -m g:100:rwx default-only
    # Times: every entry in the past (rsync does not set a time that equals the copy's to the
    # second), then nanoseconds, before 1970, far future; symlinks too (touch -h).
    find . -depth -exec touch -h -d '2022-03-04 05:06:07.089101112' {} +
    touch -h -d '2001-02-03 04:05:06.123456789' plain rel-link dangling
    touch -d '1960-06-01 12:00:00.5' none
    touch -d '2100-01-01 00:00:00.000000001' owned
    touch -d '2020-02-29 23:59:59.999999999' fifo sticky/. acl-dir/subdir/deep acl-dir/subdir
    touch -d '2019-01-01 00:00:00.000000007' acl-dir .
}

cmd_source() {
    local dir=$1
    shift
    local trees=("$@")
    ((${#trees[@]})) || trees=(/etc)
    rm -rf "$dir" && mkdir -p "$dir" || return 1
    local t
    for t in "${trees[@]}"; do
        [[ -d $t ]] && { cp -a "$t" "$dir/" || return 1; }
    done
    (special_cases "$dir/special") || { echo "building the special cases failed"; return 1; }
    touch -d '2018-05-05 05:05:05.555555555' "$dir"
    echo "result: source $dir: $(find "$dir" | wc -l) entries ($(find "$dir" -type l | wc -l) symlinks, $(getfattr -R -P -m- "$dir" 2>/dev/null | grep -c '^# file') with xattrs or ACLs)"
}

# The copies. Each tool with the options that make it carry what it can: cp -p carries mode
# (ACLs included), owner and times but no other xattr and no hard link.
cmd_copy() {
    local src=$1 dest=$2 rc=0
    mkdir -p "$dest" || return 1
    cp -a "$src" "$dest/cp-a" || { echo "cp -a failed"; rc=1; }
    cp -rp "$src" "$dest/cp-p" || { echo "cp -rp failed"; rc=1; }
    rsync -aHAX --numeric-ids "$src/" "$dest/rsync/" || { echo "rsync -aHAX failed"; rc=1; }
    mkdir -p "$dest/tar" &&
        tar --format=posix --xattrs --xattrs-include='*' --acls -C "$src" -cpf - . |
        tar --xattrs --xattrs-include='*' --acls --numeric-owner -C "$dest/tar" -xpf - ||
        { echo "tar -p round trip failed"; rc=1; }
    return $rc
}

cmd_compare() {
    local src=$1 dest=$2 rc=0 out
    for c in cp-a:"" cp-p:xattr,nlink rsync:"" tar:""; do
        local name=${c%%:*} skip=${c#*:}
        if out=$(python3 "$here/treecmp.py" "$src" "$dest/$name" ${skip:+--skip "$skip"} 2>&1); then
            echo "$name: ${out#summary: }"
        else
            echo "$name: MISMATCH"
            sed 's/^/    /' <<<"$out"
            rc=1
        fi
    done
    [[ $rc == 0 ]] && echo "result: cp -a, cp -p, rsync -aHAX, tar -p --xattrs --acls: every entry identical"
    return $rc
}

case ${1:-} in
source) shift && cmd_source "$@" ;;
copy) shift && cmd_copy "$@" ;;
compare) shift && cmd_compare "$@" ;;
*)
    sed -n '2,14p' "$0"
    exit 2
    ;;
esac
