#!/usr/bin/env python3
"""Compare the metadata of two directory trees entry by entry (used by scripts/meta-check.sh).

    treecmp.py SRC DST [--skip FIELD,...]

For every entry under SRC (SRC itself included) the entry at the same relative path under DST
must exist, be of the same type, and have the same:
  mode    permission and type bits (st_mode)
  owner   uid and gid
  size    st_size (not for directories: their size is each file system's own business)
  mtime   st_mtime_ns, to the nanosecond (symbolic links too)
  link    symbolic link target
  xattr   every extended attribute, name and value (system.posix_acl_* included), via
          listxattr/getxattr without following symbolic links
  acl     only the system.posix_acl_* attributes (for copies that do not carry user xattrs)
  nlink   link count (for copies that keep hard links)
  content file contents (regular files)
DST must hold no entry that SRC lacks. `--skip` leaves fields out (e.g. xattr for `cp -p`, which
copies ACLs as part of the mode but no other attributes). Exit status 0 when identical;
otherwise the first mismatches are printed and the status is 1.
"""
import os
import stat
import sys

FIELDS = ["mode", "owner", "size", "mtime", "link", "xattr", "acl", "nlink", "content"]
ACL_NAMES = ("system.posix_acl_access", "system.posix_acl_default")


def xattrs(path, acl_only):
    out = {}
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        return {"<listxattr error>": str(e).encode()}
    for n in names:
        if acl_only and n not in ACL_NAMES:
            continue
        try:
            out[n] = os.getxattr(path, n, follow_symlinks=False)
        except OSError as e:
            out[n] = ("<error %s>" % e).encode()
    return out


def same_content(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def describe(st, path, fields):
    d = {}
    if "mode" in fields:
        d["mode"] = oct(st.st_mode)
    if "owner" in fields:
        d["owner"] = "%d:%d" % (st.st_uid, st.st_gid)
    if "size" in fields and not stat.S_ISDIR(st.st_mode):
        d["size"] = st.st_size
    if "mtime" in fields:
        d["mtime"] = st.st_mtime_ns
    if "link" in fields and stat.S_ISLNK(st.st_mode):
        d["link"] = os.readlink(path)
    if "xattr" in fields or "acl" in fields:
        d["xattr"] = xattrs(path, "xattr" not in fields)
    if "nlink" in fields:
        d["nlink"] = st.st_nlink
    return d


def walk(root):
    yield ""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        for n in sorted(dirnames + filenames):
            yield n if rel == "." else os.path.join(rel, n)


def main(argv):
    args = [a for a in argv[1:]]
    skip = set()
    if "--skip" in args:
        i = args.index("--skip")
        skip = set(args[i + 1].split(","))
        del args[i : i + 2]
    if len(args) != 2 or not skip <= set(FIELDS):
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = args
    fields = [f for f in FIELDS if f not in skip]
    bad = []
    n = 0
    seen = set()
    for rel in walk(src):
        n += 1
        seen.add(rel)
        a, b = os.path.join(src, rel), os.path.join(dst, rel)
        try:
            sa = os.lstat(a)
        except FileNotFoundError:
            continue  # the source changed under us: not the copy's fault
        try:
            sb = os.lstat(b)
        except OSError as e:
            bad.append("%s: missing in the copy (%s)" % (rel or ".", e))
            continue
        if stat.S_IFMT(sa.st_mode) != stat.S_IFMT(sb.st_mode):
            bad.append("%s: type %o != %o" % (rel or ".", stat.S_IFMT(sa.st_mode), stat.S_IFMT(sb.st_mode)))
            continue
        da, db = describe(sa, a, fields), describe(sb, b, fields)
        for k in da:
            if da[k] != db.get(k):
                bad.append("%s: %s: source %r, copy %r" % (rel or ".", k, da[k], db.get(k)))
        if "content" in fields and stat.S_ISREG(sa.st_mode) and not same_content(a, b):
            bad.append("%s: contents differ" % (rel or "."))
    for rel in walk(dst):
        if rel not in seen:
            bad.append("%s: only in the copy" % rel)
    if bad:
        for line in bad[:40]:
            print(line)
        print("summary: %d mismatches in %d entries (%s vs %s; fields %s)" % (len(bad), n, src, dst, ",".join(fields)))
        return 1
    print("summary: %d entries identical in %s" % (n, ",".join(fields)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
