#!/usr/bin/env python3
"""Differential POSIX tester: Flashlog (FUSE) against tmpfs.

Runs the same seeded random sequence of file-system operations in a directory on tmpfs
(the reference: Linux's own behaviour) and in one on a Flashlog mount, and after every
operation compares the result (return value or errno) and the visible state of the whole
test tree (lstat fields, whether mtime/ctime changed, contents, listings, user.* xattrs,
readlink, hard-link structure) plus the open descriptors (fstat, contents). The first
difference of a seed is shrunk to a minimal sequence (ddmin) and printed as replayable
Python. At the end the Flashlog volume is unmounted, fsck'ed, remounted and the whole tree
compared with its state before the unmount (times exactly, atime excepted).

Standard library only; run as root (ops also run as uid 65534 and uid 1001 in forked
children, to compare permission checks, the sticky bit, setgid inheritance and umask).

  scripts/posix-diff.py --setup --bin target/release/flashlog --seeds 1-50 --ops 200
  scripts/posix-diff.py --seed 7 --ops 300 --only rename,link,unlink
  scripts/posix-diff.py --replay FILE       # a list of ops (repr) as printed by a shrink

--setup mounts tmpfs on --tmpfs and makes + mounts a Flashlog volume (--img, --size) on
--flashlog; without it both directories must already be mounted; --teardown unmounts both
at the end (Flashlog then fsck'ed). Exit status 1 when any difference that is not excluded
as acceptable was found, a known Flashlog bug was hit, or the remount check failed.

The reference may also be an ext4 mount (--tmpfs /mnt/ext4). ext4's own limits then show
up as differences: symlink targets of 4095 bytes (ENAMETOOLONG on 4 KiB blocks), one
block for all xattrs (ENOSPC sooner), O_DIRECT needing aligned buffers and offsets (EINVAL;
tmpfs and FUSE take unaligned ones).
"""

import argparse
import ast
import ctypes
import errno
import hashlib
import mmap
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4
FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE, FALLOC_ZERO_RANGE = 0x01, 0x02, 0x10
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
SEEK_DATA, SEEK_HOLE = 3, 4

libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


libc.utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(Timespec), ctypes.c_int]


def _check(rc):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return rc


def renameat2(src, dst, flags):
    return _check(libc.renameat2(AT_FDCWD, src, AT_FDCWD, dst, flags))


def fallocate(fd, mode, off, length):
    return _check(libc.fallocate(fd, mode, off, length))


def utimensat(path, times, follow):
    arr = (Timespec * 2)(*[Timespec(s, n) for s, n in times])
    return _check(libc.utimensat(AT_FDCWD, path, arr, 0 if follow else AT_SYMLINK_NOFOLLOW))


# ---------------------------------------------------------------------------------------
# The operation generator. Ops are plain dicts of bytes/ints/tuples (repr round-trips), so
# a sequence can be shrunk by deleting ops and replayed from its printed form.

USERS = {  # uid -> (gid, supplementary groups)
    0: (0, []),
    65534: (65534, []),
    1001: (1001, [1002]),
}
NAMES = [b"a", b"b", b"c", b"d"]
ODD_NAMES = [b"nl\nx", b"\xff\xfe", "\u00fc\u20ac".encode(), b"L" * 255, b"M" * 256, b".", b".."]
OFFS = [0, 1, 100, 4095, 4096, 5000, 65536, 1 << 20, (1 << 31) + 7, (1 << 32) + 4096,
        1 << 40]
# Not 1 << 42: Flashlog's largest file is MAX_FILE_BLOCKS blocks (crates/format/src/node.rs,
# about 3.9 TiB, as F2FS), tmpfs's 8 EiB; past it EFBIG is the right answer (ext4 stops at
# 16 TiB), so random ops stay below it.
LENS = [0, 1, 10, 4096, 5000, 70000]
MODES = [0o644, 0o755, 0o777, 0o600, 0o700, 0o000, 0o1777, 0o2775, 0o2755, 0o2745, 0o4755,
         0o6755, 0o4644, 0o2644, 0o1755, 0o444]
KINDS = {  # kind -> weight
    "open": 10, "close": 3, "write": 6, "pwrite": 6, "read": 3, "pread": 3, "lseek": 3,
    "truncate": 3, "ftruncate": 3, "fallocate": 4, "cfr": 3, "mkdir": 6, "rmdir": 4,
    "rename": 7, "link": 3, "unlink": 4, "symlink": 3, "readlink": 2, "stat": 2,
    "chmod": 4, "chown": 4, "utime": 3, "mkfifo": 1, "mknod": 1, "setxattr": 3,
    "getxattr": 1, "removexattr": 1, "listxattr": 1, "mmap": 1, "mmap_trunc": 1,
    "rmdir_cwd": 1, "odirect": 1, "fsync": 1, "listdir": 1,
}


class Gen:
    """Random op source. It remembers the paths and slots its earlier ops named, so that
    later ops mostly hit things that exist (it does not know the results)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.made, self.dirs, self.slots = [], [], []

    def fresh_path(self):
        rng = self.rng
        depth = rng.choices([1, 2, 3], [55, 35, 10])[0]
        comps = []
        for _ in range(depth):
            comps.append(rng.choice(ODD_NAMES) if rng.random() < 0.04 else rng.choice(NAMES))
        return b"/".join(comps)

    def path(self):
        rng, r = self.rng, self.rng.random()
        if r < 0.45 and self.made:
            return rng.choice(self.made[-12:])
        if r < 0.75 and self.dirs:
            name = rng.choice(ODD_NAMES) if rng.random() < 0.08 else rng.choice(NAMES)
            return rng.choice(self.dirs[-8:]) + b"/" + name
        return self.fresh_path()

    def slot(self):
        if self.slots and self.rng.random() < 0.85:
            return self.rng.choice(self.slots[-4:])
        return self.rng.randrange(4)


def gen_op(g, kinds):
    rng = g.rng
    gen_path = lambda _r: g.path()  # noqa: E731
    kind = rng.choices(list(kinds), [KINDS[k] for k in kinds])[0]
    op = {"k": kind}
    r = rng.random()
    op["user"] = 0 if r < 0.6 else (65534 if r < 0.8 else 1001)
    op["umask"] = rng.choice([0o022, 0o022, 0o002, 0o077, 0o000, 0o027])
    slot = g.slot()
    if kind == "open":
        slot = rng.randrange(4)
        acc = rng.choice([os.O_RDONLY, os.O_WRONLY, os.O_RDWR, os.O_RDWR])
        fl = acc
        for f, p in [(os.O_CREAT, 0.7), (os.O_EXCL, 0.15), (os.O_TRUNC, 0.15),
                     (os.O_APPEND, 0.15), (os.O_DIRECTORY, 0.05), (os.O_NOFOLLOW, 0.05)]:
            if rng.random() < p:
                fl |= f
        op.update(path=gen_path(rng), flags=fl, mode=rng.choice(MODES), slot=slot)
        g.slots.append(slot)
    elif kind in ("close", "fsync"):
        op.update(slot=slot)
    elif kind == "write":
        op.update(slot=slot, n=rng.choice(LENS[1:]), byte=rng.randrange(1, 256))
    elif kind == "pwrite":
        op.update(slot=slot, off=rng.choice(OFFS), n=rng.choice(LENS), byte=rng.randrange(1, 256))
    elif kind == "read":
        op.update(slot=slot, n=rng.choice(LENS))
    elif kind == "pread":
        op.update(slot=slot, off=rng.choice(OFFS), n=rng.choice(LENS))
    elif kind == "lseek":
        op.update(slot=slot, off=rng.choice(OFFS + [-1]),
                  whence=rng.choice([os.SEEK_SET, os.SEEK_CUR, os.SEEK_END, SEEK_DATA, SEEK_HOLE]))
    elif kind == "truncate":
        op.update(path=gen_path(rng), len=rng.choice(OFFS + [-1]))
    elif kind == "ftruncate":
        op.update(slot=slot, len=rng.choice(OFFS + [-1]))
    elif kind == "fallocate":
        mode = rng.choice([0, FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE,
                           FALLOC_ZERO_RANGE, FALLOC_ZERO_RANGE | FALLOC_KEEP_SIZE,
                           FALLOC_PUNCH_HOLE])
        op.update(slot=slot, mode=mode, off=rng.choice(OFFS[:8]), len=rng.choice(LENS + [1 << 20]))
    elif kind == "cfr":
        op.update(slot=slot, slot2=g.slot(), off=rng.choice([None] + OFFS[:8]),
                  off2=rng.choice([None] + OFFS[:8]), n=rng.choice(LENS))
    elif kind == "mkdir":
        op.update(path=gen_path(rng), mode=rng.choice(MODES))
    elif kind in ("rmdir", "unlink", "readlink", "getxattr", "removexattr", "listxattr", "listdir",
                  "rmdir_cwd"):
        op.update(path=gen_path(rng))
        if kind in ("getxattr", "removexattr"):
            op["name"] = rng.choice([b"user.a", b"user.b", b"user.nope"])
    elif kind == "stat":
        op.update(path=gen_path(rng))
    elif kind == "rename":
        op.update(path=gen_path(rng), dst=gen_path(rng),
                  flags=rng.choice([0, 0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE]))
    elif kind == "link":
        op.update(path=gen_path(rng), dst=gen_path(rng))
    elif kind == "symlink":
        t = rng.random()
        if t < 0.1:
            target = b"t" * 4095
        elif t < 0.15:
            target = b"t" * 4096
        else:
            target = rng.choice([gen_path(rng), b"../" + gen_path(rng), b"loop"])
        op.update(target=target, path=gen_path(rng))
    elif kind == "chmod":
        op.update(path=gen_path(rng), mode=rng.choice(MODES))
    elif kind == "chown":
        op.update(path=gen_path(rng), uid=rng.choice([0, 65534, 1001, -1]),
                  gid=rng.choice([0, 65534, 1001, 1002, -1]), follow=rng.random() < 0.7)
    elif kind == "utime":
        def spec():
            return rng.choice([(0, UTIME_NOW), (0, UTIME_OMIT), (1_000_000_000, 123_456_789),
                               (-1000, 5), (2_000_000_000, 0)])
        op.update(path=gen_path(rng), times=(spec(), spec()), follow=rng.random() < 0.7)
    elif kind == "mkfifo":
        op.update(path=gen_path(rng), mode=rng.choice(MODES))
    elif kind == "mknod":
        op.update(path=gen_path(rng), mode=rng.choice(MODES),
                  type=rng.choice([stat.S_IFREG, stat.S_IFSOCK, stat.S_IFIFO]))
    elif kind == "setxattr":
        op.update(path=gen_path(rng),
                  name=rng.choice([b"user.a", b"user.b", b"user." + b"n" * 250, b"user." + b"n" * 251]),
                  vlen=rng.choice([0, 5, 4000, 65536, 65537]), byte=rng.randrange(256),
                  flags=rng.choice([0, 0, os.XATTR_CREATE, os.XATTR_REPLACE]),
                  follow=rng.random() < 0.8)
    elif kind == "mmap":
        op.update(path=gen_path(rng), off=rng.choice([0, 100, 4095, 5000]), n=rng.choice([1, 10, 5000]),
                  byte=rng.randrange(1, 256))
    elif kind == "mmap_trunc":
        op.update(path=gen_path(rng))
    elif kind == "odirect":
        op.update(path=gen_path(rng), off=rng.choice([0, 4096, 100]), n=rng.choice([4096, 8192, 100]))
    if kind in ("open", "mkdir", "symlink", "mkfifo", "mknod", "rename", "link"):
        p = op.get("dst", op.get("path"))
        g.made.append(p)
        if kind == "mkdir":
            g.dirs.append(p)
    return op


def gen_ops(seed, n, kinds):
    g = Gen(seed)
    return [gen_op(g, kinds) for _ in range(n)]


# ---------------------------------------------------------------------------------------
# Execution.

def ename(e):
    return "E" + errno.errorcode.get(e.errno, str(e.errno))[1:] if isinstance(e, OSError) else repr(e)


def digest(b):
    return "%d:%s" % (len(b), hashlib.sha1(b).hexdigest()[:12])


def slot_fd(fds, slot):
    return fds.get(slot, 1 << 20)  # an fd that is never open: EBADF


def do_op(op, root, fds):
    """Run one op with paths under `root`. Returns (result, new_fd or None)."""
    k = op["k"]
    P = lambda p: root + b"/" + p  # noqa: E731
    if k == "open":
        # O_NONBLOCK always: it changes nothing for regular files and keeps a FIFO open
        # from blocking (O_WRONLY then gives ENXIO without a reader, on both sides).
        fd = os.open(P(op["path"]), op["flags"] | os.O_NONBLOCK, op["mode"])
        return "ok", fd
    if k == "close":
        if op["slot"] not in fds:
            return "EBADF", None
        os.close(fds.pop(op["slot"]))
        return "ok", None
    fd = slot_fd(fds, op.get("slot"))
    if k == "write":
        return os.write(fd, bytes([op["byte"]]) * op["n"]), None
    if k == "pwrite":
        return os.pwrite(fd, bytes([op["byte"]]) * op["n"], op["off"]), None
    if k == "read":
        return digest(os.read(fd, op["n"])), None
    if k == "pread":
        return digest(os.pread(fd, op["n"], op["off"])), None
    if k == "lseek":
        try:
            pos = os.lseek(fd, op["off"], op["whence"])
        except OSError as e:
            if e.errno == errno.ENXIO:  # SEEK_DATA/SEEK_HOLE: the same position after it
                os.lseek(fd, op["off"], os.SEEK_SET)
            raise
        if op["whence"] in (SEEK_DATA, SEEK_HOLE):
            # ACCEPTABLE: Flashlog answers LSEEK with ENOSYS, so the kernel reports the whole
            # file as data (SEEK_DATA = offset, SEEK_HOLE = size), which POSIX and lseek(2)
            # allow; tmpfs reports its real holes. Compare only that it succeeded, and that
            # the position lies in [offset, size].
            # The position is then set back to the offset on both sides, so that later ops
            # do not inherit the difference.
            size = os.fstat(fd).st_size
            os.lseek(fd, op["off"], os.SEEK_SET)
            return "ok" if op["off"] <= pos <= size else "out-of-range %d" % pos, None
        return pos, None
    if k == "truncate":
        os.truncate(P(op["path"]), op["len"])
        return "ok", None
    if k == "ftruncate":
        os.ftruncate(fd, op["len"])
        return "ok", None
    if k == "fallocate":
        try:
            return fallocate(fd, op["mode"], op["off"], op["len"]), None
        except OSError as e:
            # TMPFS QUIRK: shmem_fallocate supports only KEEP_SIZE and PUNCH_HOLE|KEEP_SIZE
            # (EOPNOTSUPP for ZERO_RANGE, after the VFS checks); ext4 and Flashlog support
            # ZERO_RANGE. On tmpfs emulate it: punch the range, then allocate it (which
            # extends the size unless KEEP_SIZE), giving ext4's result: zeros, size as asked.
            if not (e.errno == errno.EOPNOTSUPP and op["mode"] & FALLOC_ZERO_RANGE
                    and root.startswith(REF_PREFIX[0]) and not op["mode"] & FALLOC_PUNCH_HOLE):
                raise
            fallocate(fd, FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE, op["off"], op["len"])
            return fallocate(fd, op["mode"] & FALLOC_KEEP_SIZE, op["off"], op["len"]), None
    if k == "cfr":
        return os.copy_file_range(fd, slot_fd(fds, op["slot2"]), op["n"], op["off"], op["off2"]), None
    if k == "fsync":
        os.fsync(fd)
        return "ok", None
    if k == "mkdir":
        os.mkdir(P(op["path"]), op["mode"])
        return "ok", None
    if k == "rmdir":
        os.rmdir(P(op["path"]))
        return "ok", None
    if k == "unlink":
        os.unlink(P(op["path"]))
        return "ok", None
    if k == "rename":
        renameat2(P(op["path"]), P(op["dst"]), op["flags"])
        return "ok", None
    if k == "link":
        os.link(P(op["path"]), P(op["dst"]))
        return "ok", None
    if k == "symlink":
        os.symlink(op["target"], P(op["path"]))
        return "ok", None
    if k == "readlink":
        return os.readlink(P(op["path"])), None
    if k == "stat":
        st = os.stat(P(op["path"]))
        return (stat.S_IFMT(st.st_mode), st.st_mode & 0o7777, st.st_size if stat.S_ISREG(st.st_mode) else 0), None
    if k == "listdir":
        return sorted(os.listdir(P(op["path"]))), None
    if k == "chmod":
        os.chmod(P(op["path"]), op["mode"])
        return "ok", None
    if k == "chown":
        os.chown(P(op["path"]), op["uid"], op["gid"], follow_symlinks=op["follow"])
        return "ok", None
    if k == "utime":
        utimensat(P(op["path"]), op["times"], op["follow"])
        return "ok", None
    if k == "mkfifo":
        os.mkfifo(P(op["path"]), op["mode"])
        return "ok", None
    if k == "mknod":
        os.mknod(P(op["path"]), op["type"] | op["mode"])
        return "ok", None
    if k == "setxattr":
        os.setxattr(P(op["path"]), op["name"], bytes([op["byte"]]) * op["vlen"], op["flags"],
                    follow_symlinks=op["follow"])
        return "ok", None
    if k == "getxattr":
        return digest(os.getxattr(P(op["path"]), op["name"], follow_symlinks=False)), None
    if k == "removexattr":
        os.removexattr(P(op["path"]), op["name"], follow_symlinks=False)
        return "ok", None
    if k == "listxattr":
        return sorted(n for n in os.listxattr(P(op["path"]), follow_symlinks=False)
                      if n.startswith("user.")), None
    if k == "mmap":
        # MAP_SHARED store + msync, then read(2) must see it.
        f = os.open(P(op["path"]), os.O_RDWR)
        try:
            size = os.fstat(f).st_size
            end = op["off"] + op["n"]
            if size < end:
                os.ftruncate(f, end)
            m = mmap.mmap(f, end, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            m[op["off"]:end] = bytes([op["byte"]]) * op["n"]
            m.flush()
            m.close()
            return digest(os.pread(f, end, 0)), None
        finally:
            os.close(f)
    if k == "mmap_trunc":
        # Map two pages, truncate to 100 bytes while mapped: the tail of the first page reads
        # zero, the second page faults (SIGBUS; the op runs in a child, see run_in_child).
        f = os.open(P(op["path"]), os.O_RDWR)
        try:
            os.ftruncate(f, 8192)
            m = mmap.mmap(f, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            m[:] = b"\x5a" * 8192
            os.ftruncate(f, 100)
            tail = bytes(m[100:4096])
            r = [digest(tail)]
            sys.stdout.flush()
            r.append(m[5000])  # SIGBUS expected
            return r, None
        finally:
            os.close(f)
    if k == "rmdir_cwd":
        # rmdir of the working directory succeeds (rmdir(2) EBUSY is only for mount points);
        # afterwards creating in it fails with ENOENT and it lists as empty.
        os.chdir(P(op["path"]))
        r = []
        for step in (lambda: os.rmdir(P(op["path"])), lambda: os.rmdir("."),
                     lambda: os.close(os.open(b"x", os.O_CREAT | os.O_WRONLY, 0o644)),
                     lambda: sorted(os.listdir(".")), lambda: os.mkdir(b"y")):
            try:
                r.append(step() or "ok")
            except OSError as e:
                r.append(ename(e))
        return r, None
    if k == "odirect":
        f = os.open(P(op["path"]), os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
        try:
            buf = mmap.mmap(-1, op["n"])  # page aligned
            buf.write(b"\x33" * op["n"])
            r = [os.pwrite(f, buf, op["off"])]
            rb = mmap.mmap(-1, 8192)
            try:
                r.append(os.preadv(f, [rb], 0))
            except OSError as e:
                r.append(ename(e))
            return r, None
        finally:
            os.close(f)
    raise ValueError("unknown op %r" % k)


REF_PREFIX = [b"/nonexistent"]  # the tmpfs side's root (set in main)
IN_CHILD = {"mmap_trunc", "rmdir_cwd"}  # ops that may kill or chdir their process


def run_in_child(op, root, fds, uid):
    """Run an op in a forked child as `uid` (and the op's umask); an fd it opens comes back
    over a socket (SCM_RIGHTS)."""
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            a.close()
            if uid != 0:
                gid, groups = USERS[uid]
                os.setgroups(groups)
                os.setgid(gid)
                os.setuid(uid)
            try:
                res, nfd = do_op(op, root, fds)
            except OSError as e:
                res, nfd = ename(e), None
            data = repr(res).encode()
            if nfd is not None:
                socket.send_fds(b, [data], [nfd])
            else:
                b.sendall(data)
        except BaseException as e:  # noqa
            try:
                b.sendall(repr("child:" + repr(e)).encode())
            except Exception:
                pass
        os._exit(0)
    b.close()
    data, nfd = b"", None
    try:
        msg, got, _, _ = socket.recv_fds(a, 1 << 20, 1)
        data = msg
        if got:
            nfd = got[0]
        while True:
            more = a.recv(1 << 20)
            if not more:
                break
            data += more
    finally:
        a.close()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "signal %d (partial %r)" % (os.WTERMSIG(status), data[:40]), nfd
    return ast.literal_eval(data.decode()) if data else "no-result", nfd


def execute(op, side):
    """Run op on one side; returns its normalized result."""
    old = os.umask(op["umask"])
    try:
        if op["user"] != 0 or op["k"] in IN_CHILD:
            res, nfd = run_in_child(op, side.root, side.fds, op["user"])
        else:
            try:
                res, nfd = do_op(op, side.root, side.fds)
            except OSError as e:
                res, nfd = ename(e), None
    finally:
        os.umask(old)
    if op["k"] == "open" and nfd is not None:
        if op["slot"] in side.fds:
            os.close(side.fds[op["slot"]])
        side.fds[op["slot"]] = nfd
    return res


# ---------------------------------------------------------------------------------------
# State snapshots and comparison.

WINDOW = 1 << 16


def file_digest(path_or_fd):
    """Contents: whole file up to 4 MiB, else windows at every offset the ops use."""
    if isinstance(path_or_fd, bytes):
        # /proc/self/fd/N is a magic link: no O_NOFOLLOW for it (ELOOP).
        nofollow = 0 if path_or_fd.startswith(b"/proc/") else os.O_NOFOLLOW
        fd = os.open(path_or_fd, os.O_RDONLY | nofollow | os.O_NONBLOCK)
    else:
        fd = path_or_fd
    try:
        size = os.fstat(fd).st_size
        h = hashlib.sha1()
        if size <= 4 << 20:
            h.update(os.pread(fd, size + 1, 0))
        else:
            for off in sorted(set([max(0, o - 4096) for o in OFFS] + [max(0, size - WINDOW)])):
                if off < size:
                    h.update(b"@%d" % off + os.pread(fd, WINDOW, off))
        return h.hexdigest()[:12]
    finally:
        if isinstance(path_or_fd, bytes):
            os.close(fd)


def entry_state(path, st):
    e = {"ino": st.st_ino, "type": stat.S_IFMT(st.st_mode), "perm": st.st_mode & 0o7777,
         "nlink": st.st_nlink, "uid": st.st_uid, "gid": st.st_gid,
         "mtime": st.st_mtime_ns, "ctime": st.st_ctime_ns}
    # ACCEPTABLE (not compared): st_blocks and st_blksize (allocation policy), st_size of
    # directories (tmpfs counts entries, Flashlog bytes), st_atime (relatime; the FUSE
    # kernel keeps its own), st_ino / st_dev (compared as link structure instead).
    if not stat.S_ISDIR(st.st_mode):
        e["size"] = st.st_size
    if stat.S_ISREG(st.st_mode):
        e["data"] = file_digest(path)
    elif stat.S_ISLNK(st.st_mode):
        e["link"] = os.readlink(path)
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        e["rdev"] = st.st_rdev
    try:
        names = sorted(n for n in os.listxattr(path, follow_symlinks=False) if n.startswith("user."))
        e["xattr"] = [(n, digest(os.getxattr(path, n, follow_symlinks=False))) for n in names]
    except OSError as ex:
        e["xattr"] = ename(ex)
    return e


def snapshot(side):
    """{relpath: state} for the whole tree under side.root, plus 'fd:N' for open slots."""
    snap = {}
    stack = [b""]
    while stack:
        rel = stack.pop()
        path = side.root + (b"/" + rel if rel else b"")
        try:
            st = os.lstat(path)
        except OSError as ex:
            snap[rel] = {"lstat": ename(ex)}
            continue
        e = entry_state(path, st)
        if stat.S_ISDIR(st.st_mode):
            try:
                names = sorted(os.listdir(path))
            except OSError as ex:
                names = ename(ex)
            e["list"] = names
            if isinstance(names, list):
                stack.extend((rel + b"/" + n if rel else n) for n in names)
        snap[rel] = e
    # Hard-link structure: replace inode numbers by the first path holding that inode.
    first = {}
    for rel in sorted(snap, key=repr):
        ino = snap[rel].get("ino")
        if ino is not None:
            first.setdefault(ino, rel)
            snap[rel]["same_as"] = first[ino]
    for slot, fd in sorted(side.fds.items()):
        try:
            st = os.fstat(fd)
            e = {"type": stat.S_IFMT(st.st_mode), "perm": st.st_mode & 0o7777, "nlink": st.st_nlink,
                 "uid": st.st_uid, "gid": st.st_gid, "ino": st.st_ino,
                 "same_as": first.get(st.st_ino, "(unlinked)"),
                 "pos": os.lseek(fd, 0, os.SEEK_CUR) if stat.S_ISREG(st.st_mode) else 0}
            if stat.S_ISREG(st.st_mode):
                e["size"] = st.st_size
                e["data"] = file_digest(b"/proc/self/fd/%d" % fd)
        except OSError as ex:
            e = {"fstat": ename(ex)}
        snap["fd:%d" % slot] = e
    return snap


IGNORE_FIELDS = {"ino", "mtime", "ctime"}


def compare(op, ra, rb, sa, sb, pa, pb, skip_times=False):
    """Differences between sides after `op`: list of (field, detail)."""
    d = []
    if ra != rb and not acceptable_result(op, ra, rb, sa):
        d.append(("result", "tmpfs %r / flashlog %r" % (ra, rb)))
    if set(sa) != set(sb):
        d.append(("tree", "only tmpfs %r / only flashlog %r" % (sorted(set(sa) - set(sb), key=repr)[:6], sorted(set(sb) - set(sa), key=repr)[:6])))
    for rel in sorted(set(sa) & set(sb), key=repr):
        ea, eb = sa[rel], sb[rel]
        for f in sorted(set(ea) | set(eb)):
            if f in IGNORE_FIELDS:
                continue
            if ea.get(f) != eb.get(f) and not acceptable_field(op, rel, f, ea, eb):
                d.append((f, "%r: tmpfs %r / flashlog %r" % (rel, short(ea.get(f)), short(eb.get(f)))))
        # Times: compare whether mtime/ctime changed with this op, where the path still
        # names the same inode on both sides.
        if rel in pa and rel in pb and isinstance(rel, bytes) and not skip_times:
            qa, qb = pa[rel], pb[rel]
            if qa.get("ino") == ea.get("ino") and qb.get("ino") == eb.get("ino") and "mtime" in ea and "mtime" in eb:
                for f in ("mtime", "ctime"):
                    ca, cb = ea[f] != qa.get(f), eb[f] != qb.get(f)
                    if ca != cb and not acceptable_time(op, rel, f, ea, eb):
                        d.append((f + "-changed", "%r: tmpfs %s / flashlog %s" % (rel, ca, cb)))
        elif rel not in pa and rel not in pb and "mtime" in eb:
            now = time.time_ns()
            if abs(eb["mtime"] - now) > 30e9 and abs(ea["mtime"] - now) < 30e9 and op["k"] != "utime":
                d.append(("new-mtime", "%r: flashlog mtime %d far from now" % (rel, eb["mtime"])))
    if op["k"] == "utime" and ra == "ok" and rb == "ok":
        # Explicit times must read back exactly.
        rel = op["path"]
        if rel in sa and rel in sb and "mtime" in sa[rel]:
            for i, f in ((0, None), (1, "mtime")):
                sec, nsec = op["times"][i]
                if f and nsec not in (UTIME_NOW, UTIME_OMIT) and sb[rel]["mtime"] != sa[rel]["mtime"]:
                    d.append(("utime-value", "%r: tmpfs %d / flashlog %d" % (rel, sa[rel]["mtime"], sb[rel]["mtime"])))
    return d


def short(v):
    r = repr(v)
    return r if len(r) < 120 else r[:117] + "..."


def acceptable_result(op, ra, rb, sa):
    k = op["k"]
    fd = sa.get("fd:%s" % op.get("slot"))
    if (k == "lseek" and op["whence"] == SEEK_DATA and ra == "ENXIO" and rb == "ok"
            and fd and fd.get("size", 0) > op["off"] >= 0):
        # ACCEPTABLE: SEEK_DATA inside the file where tmpfs has only holes (or fallocated,
        # never written pages) after the offset: Flashlog reports the whole file as data,
        # which lseek(2) allows ("a file system may treat holes as data").
        return True
    if k == "lseek" and fd and fd.get("type") == stat.S_IFDIR and op["whence"] not in (os.SEEK_SET, os.SEEK_CUR):
        # ACCEPTABLE: lseek on a directory is the file system's own: tmpfs
        # (dcache_dir_lseek) takes only SEEK_SET and SEEK_CUR, ext4 with dir_index and
        # FUSE (generic) take SEEK_END too.
        return True
    return False


def acceptable_field(op, rel, f, ea, eb):
    return False


# Flashlog bugs this tester found (all fixed on 2026-11-28, and differences again by
# default). With --lenient, for a binary from before the fixes, a hit is counted, the
# Flashlog side set back in line (chmod), and the run goes on, so that one of them does not
# hide everything else. The first two were in crates/fuse/src/adapter.rs:
# - setgid without group-execute is not cleared when a caller outside the file's group
#   (without CAP_FSETID) writes or truncates: `suidgid_to_kill` keeps the pre-6.2 rule
#   (mandatory locking), Linux's setattr_should_drop_sgid (and so ext4, tmpfs) clears it.
# - fallocate by a caller without CAP_FSETID never clears setuid/setgid: the kernel leaves
#   that to the server under HANDLE_KILLPRIV_V2 and `fallocate` does not do it (ext4,
#   tmpfs: file_modified()).
KNOWN_HITS = {}
KNOWN_EXAMPLE = {}
CUR_SEED = [None]


def split_known(op, d, A, B, sa, sb):
    """Take the known-bug differences out of d; returns the rest."""
    if not d or any(f != "perm" for f, _ in d):
        return d
    if op["k"] == "chown" and op["uid"] == -1 and op["gid"] == -1:
        # ACCEPTABLE (FUSE protocol): Linux clears setuid on every chown of a
        # non-directory, even chown(f, -1, -1); with HANDLE_KILLPRIV_V2 the kernel leaves
        # that to the FUSE server but flags FATTR_KILL_SUIDGID only when uid or gid is set,
        # and a SETATTR with neither tells the server nothing (mount option nokillpriv
        # gives the kernel's behaviour). The Flashlog side is set in line (chmod), so that
        # the difference does not show again at a later op.
        for rel in sa:
            if rel in sb and isinstance(rel, bytes) and sa[rel].get("perm") != sb[rel].get("perm"):
                pa_, pb_ = sa[rel].get("perm"), sb[rel].get("perm")
                if pa_ is None or pb_ is None or pa_ != pb_ & ~(stat.S_ISUID | stat.S_ISGID):
                    return d
        for rel in sa:
            if rel in sb and isinstance(rel, bytes) and sa[rel].get("perm") != sb[rel].get("perm"):
                os.chmod(B.root + b"/" + rel, sa[rel]["perm"], follow_symlinks=False)
        return []
    if STRICT[0]:
        return d
    bad = [rel for rel in sa if rel in sb and sa[rel].get("perm") != sb[rel].get("perm")]
    for rel in bad:
        pa_, pb_ = sa[rel].get("perm"), sb[rel].get("perm")
        if pa_ is None or pb_ is None or pa_ != pb_ & ~(stat.S_ISUID | stat.S_ISGID):
            return d
    for rel in bad:
        pa_, pb_ = sa[rel]["perm"], sb[rel]["perm"]
        if op["k"] == "fallocate":
            what = "fallocate by a caller without CAP_FSETID keeps setuid/setgid"
        elif pb_ & stat.S_ISGID and not pb_ & stat.S_IXGRP and not (pb_ & ~pa_ & stat.S_ISUID):
            what = "setgid without group-exec not cleared for a writer outside the file's group (%s)" % op["k"]
        else:
            what = "setuid/setgid not cleared by %s" % op["k"]
        KNOWN_HITS[what] = KNOWN_HITS.get(what, 0) + 1
        KNOWN_EXAMPLE.setdefault(what, "seed %s: %s on %r: tmpfs %o, flashlog %o" % (CUR_SEED[0], fmt_op(op), rel, pa_, pb_))
        if isinstance(rel, bytes):
            os.chmod(B.root + b"/" + rel, pa_, follow_symlinks=False)
        else:
            fd = B.fds.get(int(rel[3:]))
            os.fchmod(fd, pa_)
    return []


STRICT = [False]


def acceptable_time(op, rel, f, ea, eb):
    if op["k"] == "truncate" and ea.get("type") == stat.S_IFREG and ea.get("size") == op["len"]:
        # ACCEPTABLE (FUSE write-back cache): truncate(2) to the current size. ext4 and
        # tmpfs bump mtime/ctime; with the write-back cache the kernel owns a regular file's
        # times and adds them to the SETATTR only when the size changes (truncate(2),
        # unlike ftruncate(2), passes no ATTR_MTIME|ATTR_CTIME), and ignores the server's.
        # POSIX asks for the update only "if the file size is changed".
        return True
    if ea.get("type") == stat.S_IFIFO and op["k"] in ("write", "read", "pwrite", "pread", "cfr"):
        # ACCEPTABLE (FUSE): I/O on a FIFO is the kernel's pipe code; it updates the times
        # of the FUSE inode in memory only (FUSE sends no SETATTR for a non-regular file's
        # dirty times), so Flashlog never hears of it.
        return True
    return False


# ---------------------------------------------------------------------------------------
# Sides and runs.

def save_for_reconcile(op, side):
    if op["k"] == "setxattr":
        try:
            return os.getxattr(side.root + b"/" + op["path"], op["name"], follow_symlinks=op["follow"])
        except OSError:
            return None
    return None


def undo_setxattr(op, A, saved):
    """Put the tmpfs side's attribute back as it was before a setxattr (`saved`, or none)."""
    p = A.root + b"/" + op["path"]
    if saved is None:
        os.removexattr(p, op["name"], follow_symlinks=op["follow"])
    else:
        os.setxattr(p, op["name"], saved, 0, follow_symlinks=op["follow"])


def reconcile(op, ra, rb, A, saved):
    """Acceptable differences that leave the trees apart: undo the op on the tmpfs side.
    Returns True when it did (the op's result and times are then not compared)."""
    if op["k"] == "setxattr" and op["vlen"] > 65535 and rb == "EFBIG" and not STRICT[0]:
        # KNOWN FLASHLOG BUG: a 65536-byte value (XATTR_SIZE_MAX, which the VFS passes on)
        # fails with EFBIG, an errno setxattr(2) does not have, and before the
        # XATTR_CREATE/XATTR_REPLACE checks (crates/core/src/fs.rs `setxattr`, value.len() >
        # u16::MAX -> Error::TooBig). ext4 answers ENODATA/EEXIST first, then ENOSPC or E2BIG.
        what = "setxattr of a 65536-byte value answers EFBIG (tmpfs %s)" % ra
        KNOWN_HITS[what] = KNOWN_HITS.get(what, 0) + 1
        if ra == "ok":
            undo_setxattr(op, A, saved)
        return True
    if op["k"] == "setxattr" and ra == "ok" and rb == "ENOSPC":
        # ACCEPTABLE: all xattrs of a Flashlog inode share one xattr node (XATTR_SPACE,
        # about 4 KiB; crates/format/src/node.rs), as ext4's share one block without
        # ea_inode, and ext4 answers ENOSPC too; tmpfs has no such limit.
        undo_setxattr(op, A, saved)
        return True
    return False


class Side:
    def __init__(self, name, root):
        self.name, self.root, self.fds = name, root, {}

    def reset(self):
        self.close_all()
        if os.path.lexists(self.root):
            rmtree(self.root)
        os.mkdir(self.root)
        os.chmod(self.root, 0o777)

    def close_all(self):
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = {}


def rmtree(path):
    def onerr(fn, p, exc):
        try:
            os.chmod(os.path.dirname(p), 0o777)
        except OSError:
            pass
        fn(p)
    shutil.rmtree(path, onerror=onerr)


def run_seq(ops, ta, tb, tick, verbose=False, on_diff=None, reset=True):
    """Run ops on both sides from empty dirs. Returns (index, op, diffs) of the first
    difference, or None. With on_diff, calls it for each difference instead and goes on
    from empty dirs with the ops after it."""
    A, B = Side("tmpfs", ta), Side("flashlog", tb)
    A.reset()
    B.reset()
    pa, pb = snapshot(A), snapshot(B)
    first = None
    try:
        for i, op in enumerate(ops):
            if tick:
                time.sleep(tick)
            saved = save_for_reconcile(op, A)
            ra = execute(op, A)
            rb = execute(op, B)
            skip_times = reconcile(op, ra, rb, A, saved)
            if skip_times:
                ra = rb
            sa, sb = snapshot(A), snapshot(B)
            d = compare(op, ra, rb, sa, sb, pa, pb, skip_times)
            d2 = split_known(op, d, A, B, sa, sb)
            if d and not d2:
                sa, sb = snapshot(A), snapshot(B)
            d = d2
            if verbose:
                print("%4d %s -> %r %r" % (i, fmt_op(op), ra, rb))
            if d:
                if on_diff is None:
                    return i, op, d
                on_diff(i, op, d)
                first = first or (i, op, d)
                if reset:
                    A.reset()
                    B.reset()
                    sa, sb = snapshot(A), snapshot(B)
            pa, pb = sa, sb
        return first
    finally:
        A.close_all()
        B.close_all()


def fingerprint(res):
    i, op, d = res
    return (op["k"], tuple(sorted(set(f for f, _ in d))))


def shrink(ops, res, ta, tb, tick, budget_s):
    """ddmin: the shortest prefix-closed subsequence that still ends in the same kind of
    difference (same op kind, same differing fields)."""
    want = fingerprint(res)
    cur = ops[:res[0] + 1]
    needs_tick = any(f.endswith("-changed") for f in want[1])
    t_end = time.time() + budget_s
    trial = [0]

    def fails(seq):
        trial[0] += 1
        r = run_seq(seq, ta + b".s", tb + b".s", tick if needs_tick else 0)
        return r is not None and fingerprint(r) == want, r

    n = 2
    while len(cur) >= 2 and time.time() < t_end:
        chunk = max(1, len(cur) // n)
        reduced = False
        for start in range(0, len(cur), chunk):
            cand = cur[:start] + cur[start + chunk:]
            if not cand:
                continue
            ok, r = fails(cand)
            if ok:
                cur = cand[:r[0] + 1]
                n = max(n - 1, 2)
                reduced = True
                break
            if time.time() > t_end:
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(cur), n * 2)
    # Simplify: run every remaining op as root with umask 022 where that keeps the failure.
    for i in range(len(cur)):
        for key, val in (("user", 0), ("umask", 0o022)):
            if cur[i][key] != val and time.time() < t_end:
                cand = cur[:i] + [dict(cur[i], **{key: val})] + cur[i + 1:]
                ok, r = fails(cand)
                if ok:
                    cur = cand
    for s in (ta + b".s", tb + b".s"):
        if os.path.lexists(s):
            rmtree(s)
    final = run_seq(cur, ta + b".s", tb + b".s", tick if needs_tick else 0)
    for s in (ta + b".s", tb + b".s"):
        if os.path.lexists(s):
            rmtree(s)
    return cur, final, trial[0]


def fmt_op(op):
    o = dict(op)
    k = o.pop("k")
    user, umask = o.pop("user"), o.pop("umask")
    args = ", ".join("%s=%s" % (a, short(b)) for a, b in o.items())
    return "%s(%s)%s umask=%03o" % (k, args, " as uid %d" % user if user else "", umask)


# ---------------------------------------------------------------------------------------
# Mounts, remount check.

def sh(*cmd, check=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and r.returncode != 0:
        raise SystemExit("%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stdout.decode(errors="replace")))
    return r


def is_mounted(d):
    d = os.path.realpath(d)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == d for line in f)


def mount_flashlog(args):
    sh(args.bin, "mount", "--daemon", "--log", args.img + ".log", args.img, args.flashlog)


def unmount_flashlog(args):
    for _ in range(50):
        if sh("umount", args.flashlog, check=False).returncode == 0:
            break
        time.sleep(0.2)
    else:
        raise SystemExit("cannot unmount " + args.flashlog)
    for _ in range(100):  # the daemon writes its last checkpoint after the unmount
        r = sh(args.bin, "fsck", args.img, check=False)
        if "in use" not in r.stdout.decode(errors="replace"):
            break
        time.sleep(0.1)
    print("fsck: exit %d: %s" % (r.returncode, r.stdout.decode(errors="replace").strip().splitlines()[-1:]))
    return r.returncode


def setup(args):
    os.makedirs(args.tmpfs, exist_ok=True)
    os.makedirs(args.flashlog, exist_ok=True)
    if not is_mounted(args.tmpfs):
        sh("mount", "-t", "tmpfs", "none", args.tmpfs)
    if not is_mounted(args.flashlog):
        sh(args.bin, "mkfs", "--force", "--size", args.size, args.img)
        mount_flashlog(args)


def remount_check(args, tb_base):
    """Unmount, fsck, remount: the tree must read back the same, times included."""
    B = Side("flashlog", tb_base)
    before = snapshot(B)
    rc = unmount_flashlog(args)
    mount_flashlog(args)
    after = snapshot(B)
    bad = []
    if rc != 0:
        bad.append("fsck exit %d" % rc)
    for rel in sorted(set(before) | set(after), key=repr):
        ea, eb = before.get(rel), after.get(rel)
        if ea is None or eb is None:
            bad.append("%r only %s the remount" % (rel, "before" if eb is None else "after"))
            continue
        for f in sorted(set(ea) | set(eb)):
            if f == "ino":
                continue
            if ea.get(f) != eb.get(f):
                bad.append("%r %s: before %r / after %r" % (rel, f, short(ea.get(f)), short(eb.get(f))))
    return bad


# ---------------------------------------------------------------------------------------

def parse_seeds(s):
    out = []
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tmpfs", default="/tmp/posix-tmpfs")
    ap.add_argument("--flashlog", default="/tmp/posix-mnt")
    ap.add_argument("--img", default="/tmp/posix-img")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--bin", default="flashlog")
    ap.add_argument("--setup", action="store_true", help="mount tmpfs and mkfs+mount Flashlog")
    ap.add_argument("--teardown", action="store_true", help="unmount both at the end (fsck Flashlog)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--seeds", default="1-20")
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--only", help="comma-separated op kinds (" + ",".join(KINDS) + ")")
    ap.add_argument("--tick", type=float, default=0.005, help="pause between ops, so that times tick")
    ap.add_argument("--shrink-seconds", type=float, default=120)
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--no-remount", action="store_true")
    ap.add_argument("--replay", help="file holding a list of ops (repr), run verbosely")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--dir-name", help="test directory in both mounts (default pd, or replay); "
                    "removed first, so concurrent runs need different names")
    ap.add_argument("--lenient", action="store_true",
                    help="count the Flashlog bugs fixed on 2026-11-28 (below) instead of reporting them as differences, "
                         "to run a binary from before the fixes")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (ops also run as other users)")
    if args.setup:
        setup(args)
    for d in (args.tmpfs, args.flashlog):
        if not is_mounted(d):
            raise SystemExit("%s is not a mount point (use --setup)" % d)
    kinds = list(KINDS)
    if args.only:
        kinds = args.only.split(",")
        for k in kinds:
            if k not in KINDS:
                raise SystemExit("unknown op kind %r" % k)
    sub = b"/" + os.fsencode(args.dir_name or ("replay" if args.replay else "pd"))
    ta, tb = os.fsencode(args.tmpfs) + sub, os.fsencode(args.flashlog) + sub
    REF_PREFIX[0] = ta
    STRICT[0] = not args.lenient
    for base in (ta, tb):
        if os.path.lexists(base):
            rmtree(base)
        os.mkdir(base)
        os.chmod(base, 0o755)
    found = {}
    if args.replay:
        with open(args.replay) as f:
            ops = eval(f.read(), {"__builtins__": {}})  # a list literal; b"x" * 255 allowed
        seen = []

        def show(i, op, d):
            seen.append(i)
            for f, det in d:
                print("     DIFF %s: %s" % (f, det))
        run_seq(ops, ta + b"/r", tb + b"/r", args.tick, verbose=True, on_diff=show, reset=True)
        print("%d ops, %d with differences (after each, both trees start again empty)" % (len(ops), len(seen)))
        return 1 if seen else 0
    seeds = [args.seed] if args.seed is not None else parse_seeds(args.seeds)
    for seed in seeds:
        CUR_SEED[0] = seed
        ops = gen_ops(seed, args.ops, kinds)
        t0 = time.time()
        diffs = []
        run_seq(ops, ta + b"/s%d" % seed, tb + b"/s%d" % seed, args.tick, verbose=args.verbose,
                on_diff=lambda i, op, d: diffs.append((i, op, d)))
        print("seed %d: %d ops, %d differences (%.1f s)" % (seed, len(ops), len(diffs), time.time() - t0))
        for r in diffs:
            fp = fingerprint(r)
            print("  op %d %s:" % (r[0], fmt_op(r[1])))
            for f, det in r[2][:8]:
                print("    %s: %s" % (f, det))
            if fp in found or args.no_shrink:
                print("    (same kind as seed %s)" % found.get(fp, "-"))
                found.setdefault(fp, seed)
                continue
            found[fp] = seed
            # Shrink from the start of the segment that led to it (after the previous reset).
            prev = max([q[0] + 1 for q in diffs if q[0] < r[0]] + [0])
            seg = ops[prev:r[0] + 1]
            rr = run_seq(seg, ta + b"/x", tb + b"/x", args.tick)
            if rr is None or fingerprint(rr) != fp:
                print("    (does not reproduce alone)")
                continue
            small, final, trials = shrink(seg, rr, ta + b"/x", tb + b"/x", args.tick, args.shrink_seconds)
            print("  shrunk to %d ops (%d trials):" % (len(small), trials))
            print("    ops = " + repr(small))
            for op in small:
                print("    # " + fmt_op(op))
            if final:
                for f, det in final[2][:8]:
                    print("    => %s: %s" % (f, det))
            else:
                print("    (the shrunk sequence no longer reproduces)")
    bad = []
    if not args.no_remount:
        bad = remount_check(args, tb)
        print("remount: %s" % ("tree identical" if not bad else "%d differences" % len(bad)))
        for b in bad[:30]:
            print("    " + b)
    for what, n in sorted(KNOWN_HITS.items()):
        print("known Flashlog bug, hit %d times: %s" % (n, what))
        if what in KNOWN_EXAMPLE:
            print("    e.g. " + KNOWN_EXAMPLE[what])
    print("%d seeds, %d kinds of difference" % (len(seeds), len(found)))
    if args.teardown:
        rc = unmount_flashlog(args)
        sh("umount", args.tmpfs, check=False)
        if rc != 0:
            bad.append("fsck exit %d at teardown" % rc)
    return 1 if found or bad or KNOWN_HITS else 0


if __name__ == "__main__":
    sys.exit(main())
