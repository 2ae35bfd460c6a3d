#!/usr/bin/env python3
"""Directory listings with attributes (READDIRPLUS) through a real mount, in every mode.

For each of `-o readdirplus=always`, `auto` and `off` (a fresh 256 MiB volume each), what a
user of `ls -l`, `du`, `find` or `rsync` sees must be what the files are:

- attributes from a listing: a directory of regular files (empty, inline-sized, several
  blocks, with data still in the kernel's write-back cache and never synced), hard links,
  a subdirectory, a symlink, a FIFO, chmod/chown/truncate/utime after creation; every
  entry's `lstat` as reached through `os.scandir` (the kernel's dentries from the listing)
  equals what the test set, before and after `sync DIR` plus drop_caches; `ls -ia` shows
  `.` and `..` with the directory's and its parent's inode numbers;
- the kernel's lookup count as the daemon keeps it: 40 directories listed with `ls -la`
  (their `.` and `..` come back in every listing, and the kernel takes no lookup for them)
  then removed, and 40 files listed, removed and forgotten by the kernel: after a
  checkpoint the free inode count is back where it was (a `.` counted as a lookup pinned
  every removed directory until the unmount, so `df -i` did not go back);
- an open file whose directory was listed and which was then unlinked still reads its
  bytes after drop_caches, and its space comes back at its close.

Standard library only; run as root:  scripts/readdirplus-check.py --bin target/release/flashlog
"""

import argparse
import os
import stat
import subprocess
import sys
import tempfile
import time


def sh(cmd):
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)


def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def make_tree(d):
    """Entries of every kind; returns {name: (mode, size, nlink, mtime_ns, uid, gid)}."""
    want = {}
    os.mkdir(d)
    for i in range(60):
        p = os.path.join(d, "f%02d" % i)
        size = (0, 100, 3000, 4096, 70000)[i % 5] + i
        with open(p, "wb") as f:
            f.write(bytes([i]) * size)
            if i % 3 == 0:
                f.flush()
                os.fsync(f.fileno())  # some on the volume, the rest in the write-back cache
        if i % 7 == 0:
            os.chmod(p, 0o600)
        if i % 11 == 0:
            os.chown(p, 1000 + i, 2000 + i)
        if i % 13 == 0:
            os.truncate(p, 5)
        if i % 5 == 4:
            os.utime(p, ns=(1_000_000_123 * i, 2_000_000_321 * i))
    os.link(os.path.join(d, "f01"), os.path.join(d, "hard"))
    os.mkdir(os.path.join(d, "sub"))
    os.symlink("f02", os.path.join(d, "link"))
    os.mkfifo(os.path.join(d, "fifo"), 0o640)
    for name in os.listdir(d):
        st = os.lstat(os.path.join(d, name))
        want[name] = (st.st_mode, st.st_size, st.st_nlink, st.st_mtime_ns, st.st_uid, st.st_gid, st.st_ino)
    return want


def check_listing(d, want, when):
    bad = []
    seen = {}
    with os.scandir(d) as it:
        for e in it:
            st = e.stat(follow_symlinks=False)
            seen[e.name] = (st.st_mode, st.st_size, st.st_nlink, st.st_mtime_ns, st.st_uid, st.st_gid, st.st_ino)
            if e.inode() != st.st_ino:
                bad.append("%s: d_ino %d, st_ino %d" % (e.name, e.inode(), st.st_ino))
            if e.is_dir(follow_symlinks=False) != stat.S_ISDIR(st.st_mode):
                bad.append("%s: d_type and mode disagree" % e.name)
    if set(seen) != set(want):
        bad.append("names %s" % sorted(set(seen) ^ set(want)))
    for name in sorted(set(seen) & set(want)):
        if seen[name] != want[name]:
            bad.append("%s: listed %s, set %s" % (name, seen[name], want[name]))
    # `.` and `..` as ls shows them.
    out = subprocess.run(["ls", "-ia", d], check=True, capture_output=True, text=True).stdout.split()
    inos = dict(zip(out[1::2], (int(x) for x in out[0::2])))
    if inos.get(".") != os.stat(d).st_ino or inos.get("..") != os.stat(os.path.dirname(d)).st_ino:
        bad.append("ls -ia: . %s .. %s, want %d %d" % (inos.get("."), inos.get(".."),
                                                      os.stat(d).st_ino, os.stat(os.path.dirname(d)).st_ino))
    return ["%s: %s" % (when, b) for b in bad[:10]]


def lookups_balance(mnt):
    """Listed, removed and forgotten entries leave no inode held (df -i back after a checkpoint)."""
    bad = []
    base = os.path.join(mnt, "bal")
    os.mkdir(base)
    os.sync()
    sh("sync %s" % mnt)
    free0 = os.statvfs(mnt).f_ffree
    for i in range(40):
        sub = os.path.join(base, "d%d" % i)
        os.mkdir(sub)
        with open(os.path.join(base, "x%d" % i), "wb") as f:
            f.write(b"x" * 5000)
    for i in range(40):
        subprocess.run(["ls", "-la", os.path.join(base, "d%d" % i)], check=True, capture_output=True)
    subprocess.run(["ls", "-la", base], check=True, capture_output=True)
    for i in range(40):
        os.rmdir(os.path.join(base, "d%d" % i))
        os.unlink(os.path.join(base, "x%d" % i))
    drop_caches()
    time.sleep(0.5)
    sh("sync %s" % mnt)  # a checkpoint: freed inode numbers count as free again
    free1 = os.statvfs(mnt).f_ffree
    if free1 != free0:
        bad.append("free inodes %d before, %d after 40 directories and 40 files were listed, "
                   "removed and forgotten (inodes still held)" % (free0, free1))
    # An open file, listed, unlinked: still readable; its space comes back at its close.
    p = os.path.join(base, "open")
    data = os.urandom(3 << 20)
    with open(p, "wb") as f:
        f.write(data)
    os.sync()
    sh("sync %s" % mnt)
    fd = os.open(p, os.O_RDONLY)
    subprocess.run(["ls", "-la", base], check=True, capture_output=True)
    before = os.statvfs(mnt).f_bfree
    os.unlink(p)
    drop_caches()
    time.sleep(0.2)
    got = os.pread(fd, len(data) + 1, 0)
    if got != data:
        bad.append("an open, listed, unlinked file read back %d bytes, not its %d" % (len(got), len(data)))
    os.close(fd)
    drop_caches()
    time.sleep(0.5)
    sh("sync %s" % mnt)
    after = os.statvfs(mnt).f_bfree
    if after < before + (3 << 20) // os.statvfs(mnt).f_frsize - 16:
        bad.append("free blocks %d before the unlink, %d after the close: the file's 768 blocks "
                   "did not come back" % (before, after))
    os.rmdir(base)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--modes", default="always,auto,off")
    a = ap.parse_args()
    failed = False
    for mode in a.modes.split(","):
        tmp = tempfile.mkdtemp(prefix="rdplus-")
        img, mnt, log, pidf = (os.path.join(tmp, x) for x in ("vol.img", "mnt", "daemon.log", "pid"))
        os.mkdir(mnt)
        sh("%s mkfs --size 256M %s" % (a.bin, img))
        sh("%s mount --daemon --log %s --pid-file %s -o readdirplus=%s %s %s" % (a.bin, log, pidf, mode, img, mnt))
        with open(pidf) as f:
            pid = int(f.read())
        bad = []
        try:
            d = os.path.join(mnt, "dir")
            want = make_tree(d)
            bad += check_listing(d, want, "dirty pages in the kernel")
            os.sync()
            sh("sync %s" % mnt)
            drop_caches()
            bad += check_listing(d, want, "after sync and drop_caches")
            bad += lookups_balance(mnt)
        except Exception as e:  # noqa: BLE001 - reported as the mode's failure
            bad.append("%s: %r" % (type(e).__name__, e))
        finally:
            sh("umount %s" % mnt)
            for _ in range(600):  # the daemon writes its final checkpoint, then exits
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
        with open(log) as f:
            ops = [l.split("by opcode: ", 1)[1].strip() for l in f if "by opcode: " in l]
        r = subprocess.run([a.bin, "fsck", img], capture_output=True, text=True)
        if r.returncode != 0:
            bad.append("fsck: %s" % r.stdout.strip().splitlines()[-1:])
        if mode == "off" and ops and "readdirplus" in ops[-1]:
            bad.append("readdirplus=off but the daemon answered READDIRPLUS: %s" % ops[-1])
        if mode == "always" and ops and "readdirplus" not in ops[-1]:
            bad.append("readdirplus=always but no READDIRPLUS came: %s" % ops[-1])
        print("%s readdirplus=%s%s (requests: %s)" % ("FAIL" if bad else "PASS", mode,
                                                      "".join("\n  " + b for b in bad), ops[-1] if ops else "?"))
        failed |= bool(bad)
        subprocess.run(["rm", "-rf", tmp])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
