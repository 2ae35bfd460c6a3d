#!/usr/bin/env python3
"""Randomized crash tester: kill -9 the Flashlog daemon at random times, check every
durability promise through the real kernel + FUSE + daemon path.

Each round mounts the volume (`flashlog mount --daemon IMG MNT -o ...`), makes one directory
per worker (made durable by an fsync of the directory above it, which checkpoints), forks
--workers processes that run random operations in their own directory, and after a random
delay kills the daemon with SIGKILL, then the workers, unmounts lazily, fscks the image
(before recovery: must report no error), remounts (roll-forward), checks every promise the
workers logged, unmounts cleanly and fscks again (must be clean). The volume ages over the
rounds (the directories of round r-3 are removed at round r), or is made afresh each round
with --fresh.

Each worker logs (outside the mount, one JSON line per record, written with write(2) so a
SIGKILL of the worker loses nothing) an intent line BEFORE every mutating operation, its
result after it, and a promise line AFTER a durability call returned 0. The checker replays
the log into a model, and for every file whose last promise still stands checks:
  data    fsync, fdatasync, an O_SYNC or O_DSYNC pwrite, msync(MS_SYNC) of a shared map:
          the file's bytes and size at that moment are durable, except where an operation
          logged after the promise (finished or in flight at the kill) may have changed
          them (every byte must then be its promised value or one of the later writes',
          or zero after a later truncate / punch / zero range; the size must lie between
          the smallest and largest size it had since). fsync also promises the mode.
  name    docs/DESIGN.md "What fsync promises": after fsync(f) f is reachable under at
          least one name it had (unless it was unlinked to 0 links since), never under a
          name it never had.
  dir     fsync of a directory writes a checkpoint ("f is a directory: checkpoint:
          everything"): every name of the worker's tree at that moment (file identity by
          inode number, symlink target, subdirectory) is durable unless a later operation
          touched that name, and no name absent then appears unless a later op made it.
  sync    sync() and syncfs(): the library's Fs::sync() is a checkpoint; checked
          like a dir fsync plus the data of every file only with --check-sync (through
          FUSE the kernel does not forward sync/syncfs to a /dev/fuse daemon at all:
          FUSE_SYNCFS is sent only when fc->sync_fs, which only virtiofs sets; so with
          --check-sync and few other checkpoints, e.g. --weight dirfsync=0,sync=3,syncfs=3
          -o cp_interval=0, this fails: sync/syncfs make nothing durable on the mount).
  meta    fsync and O_SYNC also promise the mode, the user.* xattrs and an mtime set by
          utime (when no later op may have changed them).
sync_file_range is not a durability call and is not used. Errors: EIO/ENOSPC of a write
(the write-back cache reports them late) leave that file's bytes unknown: it is not
checked after them. A ZERO_RANGE fallocate refused with ENOSPC must change nothing (found
by this script on a 96 % full volume, 2026-11-28: the range was punched before its
preallocation failed, while the kernel kept showing the old bytes from its cache).

Knobs: --spread places the model's 64 KiB regions at file offsets up to 4 GiB (inode
slots, direct, indirect and double-indirect node levels); --weight K=W changes the op mix
(e.g. dirfsync=0,rename=2,link=1 with -o cp_interval=0 for few checkpoints, i.e. mostly
roll-forward); --fill PCT fills the volume first; --no-clean keeps the recovered mount
for the next round (no clean unmount between crashes); --double-kill kills the daemon a
second time right after the recovering mount; --workers, --min/max-delay.
--odirect W adds O_DIRECT pwrites (aligned and not; the adapter sets no FOPEN_DIRECT_IO,
so the kernel writes back and drops its cached pages of the range and sends the caller's
bytes as WRITE requests, FUSE_ASYNC_DIO) and --copy W copy_file_range(2) copies between
the worker's files (the adapter answers ENOSYS, the kernel then copies through the page
cache): both checked like any write. --shared-writers N adds N processes writing ranges of
their own and one range they all share of the same --shared-files files, each fsyncing,
fdatasyncing or writing O_SYNC (see "Several writers on one file" below; --selftest checks
that checker on made-up logs). --gc-report S ends with S seconds of the workers and a
clean unmount, whose log line gives the cleaning's passes and moved blocks (a killed
daemon logs nothing: this shows that the cleaning runs at that fullness; 96 % full, f2fs:
28 foreground passes in 8 s). Mount options go through -o: gc=scale, mode=lfs,
mlog=thread, image_io=direct, nowriteback, gc_interval, cp_interval. gc=device and gc=none
cannot run here: they need `flashlog mount --device`, an emulated SSD in the daemon's own
memory, formatted at every mount (crates/cli/src/mount.rs, `open_emulated`), so a killed
daemon takes the whole volume with it; their crash tests cut the emulator's power instead
(crates/sim/tests/device_gc_crash.rs, gc_none_crash.rs, crates/core/tests/iplfs.rs).

  scripts/fuse-crash.py --setup --bin target/release/flashlog --rounds 20 --seed 1
  scripts/fuse-crash.py --setup -o gc=scale --mkfs-arg=--mlogs=4 --seconds 600
  scripts/fuse-crash.py --setup --fill 85 -o nowriteback --rounds 10
  scripts/fuse-crash.py --spread --no-clean --double-kill -o cp_interval=0 --weight dirfsync=0,rename=2,link=1
  scripts/fuse-crash.py --workers 1 --shared-writers 4 --odirect 3 --copy 3 -o image_io=direct
  scripts/fuse-crash.py --fill 96 -o gc=scale -o gc_interval=1 --mkfs-arg=--mlogs=4 --odirect 3 --copy 3

Failures print the failing file's whole operation history (from the worker's log, which is
kept under --logdir). A round is reproducible in its operations from --seed (the kill time
and the interleaving of workers are not). Exit status 1 when any promise failed or an fsck
was not clean. Standard library only; run as root.
"""

import argparse
import bisect
import ctypes
import errno
import hashlib
import json
import mmap
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
libc.syncfs.argtypes = [ctypes.c_int]
FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE, FALLOC_ZERO_RANGE = 0x01, 0x02, 0x10
MAXF = 192 * 1024  # largest model offset + length a write reaches (8 regions with --spread)
# Ops that store bytes given by the op (data_of(ds, n), or a copy's source bytes).
WRITE_KINDS = ("write", "osync", "odsync", "append", "mmap", "odirect", "copy")


# --spread: the model's offsets are regions of REGION bytes, each placed at a file offset of
# its own, so files reach past the inode's own block addresses (456 blocks), past the two
# direct nodes (1,470 blocks) into the indirect and the double-indirect trees
# (crates/format/src/node.rs), while the model and the comparison stay small. A model write
# never crosses a region; the gaps between regions are holes.
REGION = 64 * 1024
SPREAD_BASES = [0, 64 * 1024, 456 * 4096 - 32768, 3 << 20, 1470 * 4096 - 32768, 64 << 20, 1 << 30,
                (1470 + 2 * 1014 * 507) * 4096 - 32768]
SPREAD = False


def fofs(x):
    """File offset of model offset x."""
    if not SPREAD:
        return x
    r = min(x // REGION, len(SPREAD_BASES) - 1)
    return SPREAD_BASES[r] + (x - r * REGION)


def fsize(s):
    """File size of model size s (the end of its last byte)."""
    return fofs(s - 1) + 1 if s > 0 else 0


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def syncfs(fd):
    if libc.syncfs(fd) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def data_of(dseed, n):
    return random.Random(dseed).randbytes(n)


def sh(*cmd, check=True, timeout=120):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    out = r.stdout.decode(errors="replace")
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode, out))
    return r.returncode, out


def is_mounted(d):
    d = os.path.realpath(d)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == d for line in f)


# ---------------------------------------------------------------------------------------
# The model: one worker's tree. Used by the worker (to choose operations) and by the
# checker (to replay the log), so both see exactly the same states.

class Model:
    def __init__(self):
        self.names = {}  # path -> ("f", fid) | ("l", target) | ("d",)
        self.files = {}  # fid -> dict(data=bytearray, mode=int, ino=int|None, names=set)
        self.next_fid = 0

    def dirs(self):
        return [p for p, v in self.names.items() if v[0] == "d"]

    def file_paths(self):
        return [p for p, v in self.names.items() if v[0] == "f"]

    def children(self, d):
        pre = d + "/"
        return [p for p in self.names if p.startswith(pre)]

    def size(self, fid):
        return len(self.files[fid]["data"])

    def apply(self, op):
        """Apply a finished op to the model. Returns the fids it affected."""
        k = op["k"]
        if k == "create":
            fid = op["fid"]
            self.next_fid = max(self.next_fid, fid + 1)
            self.files[fid] = dict(data=bytearray(), mode=0o644, ino=op.get("ino"), names={op["p"]},
                                   ever={op["p"]}, xattr={}, mtime=None)
            self.names[op["p"]] = ("f", fid)
            return [fid]
        if k in WRITE_KINDS + ("truncate", "ftruncate", "falloc"):
            self.files[op["fid"]]["mtime"] = None  # changed by the kernel (unknown)
        if k in WRITE_KINDS:
            d = self.files[op["fid"]]["data"]
            buf = op_buf(op, self)
            off = op["off"]
            if len(d) < off:
                d.extend(bytes(off - len(d)))
            d[off:off + len(buf)] = buf
            return [op["fid"]]
        if k in ("truncate", "ftruncate"):
            d = self.files[op["fid"]]["data"]
            n = op["n"]
            if n < len(d):
                del d[n:]
            else:
                d.extend(bytes(n - len(d)))
            return [op["fid"]]
        if k == "falloc":
            d = self.files[op["fid"]]["data"]
            mode, off, n = op["mode"], op["off"], op["n"]
            end = off + n
            if mode & (FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE):
                z = min(end, len(d))
                if z > off:
                    d[off:z] = bytes(z - off)
            if not mode & FALLOC_KEEP_SIZE and end > len(d):
                d.extend(bytes(end - len(d)))
            return [op["fid"]]
        if k == "chmod":
            self.files[op["fid"]]["mode"] = op["mode"]
            return [op["fid"]]
        if k == "utime":
            self.files[op["fid"]]["mtime"] = op["tm"]
            return [op["fid"]]
        if k == "setxattr":
            self.files[op["fid"]]["xattr"][op["xn"]] = data_of(op["ds"], op["n"])
            return [op["fid"]]
        if k == "rmxattr":
            self.files[op["fid"]]["xattr"].pop(op["xn"], None)
            return [op["fid"]]
        if k == "mkdir":
            self.names[op["p"]] = ("d",)
            return []
        if k == "rmdir":
            del self.names[op["p"]]
            return []
        if k == "symlink":
            self.names[op["p"]] = ("l", op["tg"])
            return []
        if k == "link":
            fid = op["fid"]
            self.names[op["dst"]] = ("f", fid)
            self.files[fid]["names"].add(op["dst"])
            self.files[fid]["ever"].add(op["dst"])
            return [fid]
        if k == "unlink":
            v = self.names.pop(op["p"])
            if v[0] == "f":
                self.files[v[1]]["names"].discard(op["p"])
                return [v[1]]
            return []
        if k == "rename":
            if self.names[op["src"]][0] == "f" and self.names.get(op["dst"]) == self.names[op["src"]]:
                return []  # two names of one file: rename(2) does nothing
            v = self.names.pop(op["src"])
            out = []
            old = self.names.get(op["dst"])
            if old is not None and old[0] == "f":
                self.files[old[1]]["names"].discard(op["dst"])
                out.append(old[1])
            self.names[op["dst"]] = v
            if v[0] == "f":
                f = self.files[v[1]]
                f["names"].discard(op["src"])
                f["names"].add(op["dst"])
                f["ever"].add(op["dst"])
                out.append(v[1])
            return out
        return []


def op_buf(op, m=None):
    """The bytes a write-like op stores: its own random bytes, or for a copy the source's
    bytes at that moment (from the model m, kept in op["buf"] by the checker's replay)."""
    if op["k"] != "copy":
        return data_of(op["ds"], op["n"])
    if "buf" not in op:
        src = m.files[op["sfid"]]["data"]
        op["buf"] = bytes(src[op["soff"]:op["soff"] + op["n"]])
    return op["buf"]


# Which paths an op touches (for the directory promise) and which fids.
def op_paths(op):
    return [op[x] for x in ("p", "src", "dst") if x in op]


# ---------------------------------------------------------------------------------------
# The worker.

class Worker:
    def __init__(self, base, rel, seed, logpath, args):
        self.base, self.rel, self.args = base, rel, args
        self.rng = random.Random(seed)
        self.m = Model()
        self.log = os.open(logpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.seq = 0

    def emit(self, rec, sync=False):
        os.write(self.log, (json.dumps(rec) + "\n").encode())
        if sync:
            os.fsync(self.log)

    def P(self, p):
        return os.path.join(self.base, p)

    def pick_file(self):
        fp = self.m.file_paths()
        return self.rng.choice(fp) if fp else None

    def new_name(self):
        rng = self.rng
        dirs = [""] + self.m.dirs()
        d = rng.choice(dirs)
        n = "f%d" % rng.randrange(12)
        return (d + "/" + n) if d else n

    def run(self):
        kinds = {
            "create": 8, "write": 18, "append": 6, "truncate": 3, "ftruncate": 3, "falloc": 5,
            "mkdir": 2, "rmdir": 2, "rename": 6, "link": 3, "unlink": 4, "symlink": 2,
            "chmod": 3, "utime": 2, "fsync": 10, "fdatasync": 6, "osync": 4, "odsync": 4,
            "dirfsync": 4, "mmap": 3, "setxattr": 3, "rmxattr": 1, "sync": 1 if self.args.sync_ops else 0,
            "syncfs": 1 if self.args.sync_ops else 0,
            # Last, so that with weight 0 (the default) the other ops' choices are those
            # of the same seed before they existed.
            "odirect": self.args.odirect, "copy": self.args.copy,
        }
        for kw in self.args.weight:
            for item in kw.split(","):
                kk, w = item.split("=")
                if kk not in kinds:
                    raise SystemExit("--weight: unknown op %r (ops: %s)" % (kk, ", ".join(kinds)))
                kinds[kk] = int(w)
        names, weights = list(kinds), [kinds[k] for k in kinds]
        while True:
            k = self.rng.choices(names, weights)[0]
            try:
                self.step(k)
            except OSError as e:
                if e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
                    time.sleep(1)
                    continue
                raise
            if self.args.op_delay:
                time.sleep(self.rng.random() * self.args.op_delay)

    def do(self, op, fn):
        """Log the intent, run fn, log the result and apply it to the model on success."""
        self.seq += 1
        op["i"] = self.seq
        self.emit({"t": "op", **op})
        try:
            r = fn()
        except OSError as e:
            self.emit({"t": "err", "i": self.seq, "e": errno.errorcode.get(e.errno, str(e.errno))})
            if e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
                raise
            return None
        res = {"t": "ok", "i": self.seq}
        if isinstance(r, dict):
            res.update(r)
            op.update(r)
        self.emit(res)
        self.m.apply(op)
        return True if r is None else r

    def promise(self, kind, **kw):
        self.emit({"t": "promise", "kind": kind, "after": self.seq, **kw}, sync=self.args.fsync_log)

    def fsync_file(self, p, data_only):
        fd = os.open(self.P(p), os.O_RDONLY)
        try:
            (os.fdatasync if data_only else os.fsync)(fd)
        finally:
            os.close(fd)

    def step(self, k):
        rng, m = self.rng, self.m
        if k == "create":
            p = self.new_name()
            if p in m.names or (os.path.dirname(p) and os.path.dirname(p) not in m.names):
                return
            fid = m.next_fid
            m.next_fid += 1

            def fn():
                fd = os.open(self.P(p), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                try:
                    os.fchmod(fd, 0o644)
                    return {"ino": os.fstat(fd).st_ino}
                finally:
                    os.close(fd)
            self.do({"k": "create", "p": p, "fid": fid}, fn)
            return
        if k == "mkdir":
            p = "s%d" % rng.randrange(3)
            if p not in m.names:
                self.do({"k": "mkdir", "p": p}, lambda: os.mkdir(self.P(p)))
            return
        if k == "rmdir":
            ds = [d for d in m.dirs() if not m.children(d)]
            if ds:
                p = rng.choice(ds)
                self.do({"k": "rmdir", "p": p}, lambda: os.rmdir(self.P(p)))
            return
        if k == "symlink":
            p = self.new_name()
            if p in m.names or (os.path.dirname(p) and os.path.dirname(p) not in m.names):
                return
            t = "target-%d" % rng.randrange(1000)
            self.do({"k": "symlink", "p": p, "tg": t}, lambda: os.symlink(t, self.P(p)))
            return
        if k == "dirfsync":
            d = rng.choice([""] + m.dirs())
            fd = os.open(self.P(d) if d else self.base, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            except OSError as e:
                self.emit({"t": "err", "i": self.seq, "k": "dirfsync", "e": errno.errorcode.get(e.errno)})
                if e.errno == errno.ENOTCONN:
                    raise
                return
            finally:
                os.close(fd)
            self.promise("dir", d=d)
            return
        if k in ("sync", "syncfs"):
            try:
                if k == "sync":
                    os.sync()
                else:
                    fd = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        syncfs(fd)
                    finally:
                        os.close(fd)
            except OSError as e:
                self.emit({"t": "err", "i": self.seq, "k": k, "e": errno.errorcode.get(e.errno)})
                return
            self.promise("sync", how=k)
            return
        # Ops on an existing name.
        if k == "rename":
            srcs = [p for p, v in m.names.items() if v[0] in ("f", "l")]
            if not srcs:
                return
            src = rng.choice(srcs)
            dst = self.new_name()
            if dst == src or (os.path.dirname(dst) and os.path.dirname(dst) not in m.names):
                return
            if dst in m.names and m.names[dst][0] == "d":
                return
            self.do({"k": "rename", "src": src, "dst": dst,
                     "fid": m.names[src][1] if m.names[src][0] == "f" else None,
                     "victim": m.names[dst][1] if dst in m.names and m.names[dst][0] == "f" else None},
                    lambda: os.rename(self.P(src), self.P(dst)))
            return
        if k == "unlink":
            ps = [p for p, v in m.names.items() if v[0] in ("f", "l")]
            if ps:
                p = rng.choice(ps)
                v = m.names[p]
                self.do({"k": "unlink", "p": p, "fid": v[1] if v[0] == "f" else None},
                        lambda: os.unlink(self.P(p)))
            return
        p = self.pick_file()
        if p is None:
            return
        fid = m.names[p][1]
        f = m.files[fid]
        size = len(f["data"])
        if k == "link":
            dst = self.new_name()
            if dst in m.names or (os.path.dirname(dst) and os.path.dirname(dst) not in m.names):
                return
            self.do({"k": "link", "src": p, "dst": dst, "fid": fid}, lambda: os.link(self.P(p), self.P(dst)))
            return
        if k in ("write", "osync", "odsync", "append"):
            n = rng.choice([1, 17, 512, 4096, 4096, 5000, 12288, 40000])
            if k == "append" and size + n > MAXF:
                k = "write"
            off = size if k == "append" else rng.choice(
                [0, rng.randrange(0, max(1, size + 1)), rng.randrange(0, MAXF - n), (rng.randrange(0, 40) * 4096)])
            off = min(off, MAXF - n)
            if SPREAD:
                if k == "append":
                    k = "write"
                n = min(n, REGION - off % REGION)
            ds = rng.getrandbits(48)
            flags = os.O_WRONLY | {"write": 0, "osync": os.O_SYNC, "odsync": os.O_DSYNC,
                                   "append": os.O_APPEND}[k]

            def fn():
                fd = os.open(self.P(p), flags)
                try:
                    buf = data_of(ds, n)
                    if k == "append":
                        w = os.write(fd, buf)
                    else:
                        w = os.pwrite(fd, buf, fofs(off))
                    if w != n:
                        # A short write: -o nowriteback on a full volume stores the part
                        # before the refused block (README); logged as ENOSPC, which
                        # leaves the file unchecked from here on.
                        raise OSError(errno.ENOSPC, "short write %d of %d" % (w, n))
                finally:
                    os.close(fd)
            if self.do({"k": k, "p": p, "fid": fid, "off": off, "n": n, "ds": ds}, fn) and k in ("osync", "odsync"):
                self.promise("data", fid=fid, mode=(k == "osync"), via=k)
            return
        if k == "odirect":
            # O_DIRECT pwrite (FUSE: a WRITE request straight from the caller's buffer, the
            # kernel's cached pages of the range written back and dropped around it),
            # aligned or not.
            n = rng.choice([512, 4096, 4096, 8192, 16384, 40960, 17, 5000])
            off = rng.choice([0, rng.randrange(0, max(1, size + 1)), rng.randrange(0, MAXF - n)])
            if rng.random() < 0.6:
                off = off // 4096 * 4096
            off = min(off, MAXF - n)
            if SPREAD:
                n = min(n, REGION - off % REGION)
            ds = rng.getrandbits(48)

            def fn():
                fd = os.open(self.P(p), os.O_WRONLY | os.O_DIRECT)
                try:
                    buf = mmap.mmap(-1, max(n, 1))  # page-aligned, as O_DIRECT may want
                    buf[:n] = data_of(ds, n)
                    w = os.pwrite(fd, memoryview(buf)[:n], fofs(off))
                    if w != n:
                        raise OSError(errno.ENOSPC, "short write %d of %d" % (w, n))
                finally:
                    os.close(fd)
            self.do({"k": "odirect", "p": p, "fid": fid, "off": off, "n": n, "ds": ds}, fn)
            return
        if k == "copy":
            # copy_file_range(2) from a file of the worker's (this one too, ranges apart):
            # Flashlog answers ENOSYS, so the kernel copies through the page cache (splice).
            srcs = [q for q in m.file_paths() if m.size(m.names[q][1]) > 0]
            if not srcs:
                return
            sp = rng.choice(srcs)
            sfid = m.names[sp][1]
            ssize = m.size(sfid)
            soff = rng.randrange(0, ssize)
            n = min(ssize - soff, rng.choice([1, 100, 4096, 12288, 40000]))
            off = rng.choice([0, size, rng.randrange(0, max(1, size + 1)), rng.randrange(0, 40) * 4096])
            off = min(off, MAXF - n)
            if SPREAD:
                n = min(n, REGION - off % REGION, REGION - soff % REGION)
            if sfid == fid and soff < off + n and off < soff + n:
                return  # overlapping ranges of one file: EINVAL

            def fn():
                fi = os.open(self.P(sp), os.O_RDONLY)
                try:
                    fo = os.open(self.P(p), os.O_WRONLY)
                    try:
                        done = 0
                        while done < n:
                            c = os.copy_file_range(fi, fo, n - done, fofs(soff + done), fofs(off + done))
                            if c <= 0:
                                raise OSError(errno.ENOSPC, "copy_file_range copied %d of %d" % (done, n))
                            done += c
                    finally:
                        os.close(fo)
                finally:
                    os.close(fi)
            self.do({"k": "copy", "p": p, "fid": fid, "off": off, "n": n, "sp": sp, "sfid": sfid, "soff": soff}, fn)
            return
        if k == "mmap":
            if size == 0:
                return
            n = rng.randrange(1, min(size, 9000) + 1)
            off = rng.randrange(0, size - n + 1)
            if SPREAD:
                n = min(n, REGION - off % REGION)
            ds = rng.getrandbits(48)

            def fn():
                fd = os.open(self.P(p), os.O_RDWR)
                try:
                    mm = mmap.mmap(fd, fsize(size), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                    try:
                        mm[fofs(off):fofs(off) + n] = data_of(ds, n)
                        mm.flush()  # msync(MS_SYNC)
                    finally:
                        mm.close()
                finally:
                    os.close(fd)
            if self.do({"k": "mmap", "p": p, "fid": fid, "off": off, "n": n, "ds": ds}, fn):
                self.promise("data", fid=fid, mode=False, via="msync")
            return
        if k in ("truncate", "ftruncate"):
            n = rng.choice([0, size // 2, max(0, size - 1), size + 1, size + 5000, rng.randrange(0, MAXF)])

            def fn():
                if k == "truncate":
                    os.truncate(self.P(p), fsize(n))
                else:
                    fd = os.open(self.P(p), os.O_WRONLY)
                    try:
                        os.ftruncate(fd, fsize(n))
                    finally:
                        os.close(fd)
            self.do({"k": k, "p": p, "fid": fid, "n": n}, fn)
            return
        if k == "falloc":
            mode = rng.choice([0, FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE, FALLOC_ZERO_RANGE,
                               FALLOC_ZERO_RANGE | FALLOC_KEEP_SIZE])
            off = rng.randrange(0, MAXF - 1)
            n = rng.randrange(1, min(MAXF - off, 50000) + 1)
            if SPREAD:
                n = min(n, REGION - off % REGION)

            def fn():
                fd = os.open(self.P(p), os.O_WRONLY)
                try:
                    fallocate(fd, mode, fofs(off), n)
                finally:
                    os.close(fd)
            self.do({"k": "falloc", "p": p, "fid": fid, "mode": mode, "off": off, "n": n}, fn)
            return
        if k == "chmod":
            mode = rng.choice([0o600, 0o640, 0o644, 0o664, 0o700, 0o755])
            self.do({"k": "chmod", "p": p, "fid": fid, "mode": mode}, lambda: os.chmod(self.P(p), mode))
            return
        if k == "setxattr":
            xn = "user.x%d" % rng.randrange(4)
            n = rng.choice([1, 30, 200, 1500, 3000])
            ds = rng.getrandbits(48)
            self.do({"k": "setxattr", "p": p, "fid": fid, "xn": xn, "n": n, "ds": ds},
                    lambda: os.setxattr(self.P(p), xn, data_of(ds, n)))
            return
        if k == "rmxattr":
            if f["xattr"]:
                xn = rng.choice(sorted(f["xattr"]))
                self.do({"k": "rmxattr", "p": p, "fid": fid, "xn": xn}, lambda: os.removexattr(self.P(p), xn))
            return
        if k == "utime":
            t = rng.randrange(10 ** 9, 2 * 10 ** 9)
            self.do({"k": "utime", "p": p, "fid": fid, "tm": t}, lambda: os.utime(self.P(p), (t, t)))
            return
        if k in ("fsync", "fdatasync"):
            try:
                self.fsync_file(p, k == "fdatasync")
            except OSError as e:
                self.emit({"t": "err", "i": self.seq, "k": k, "fid": fid, "e": errno.errorcode.get(e.errno)})
                if e.errno == errno.ENOTCONN:
                    raise
                return
            self.promise("data", fid=fid, mode=(k == "fsync"), via=k, name=True)
            return


# ---------------------------------------------------------------------------------------
# The checker.

class Fail(Exception):
    pass


def read_log(path):
    recs = []
    with open(path, "rb") as f:
        for line in f:
            try:
                recs.append(json.loads(line))
            except ValueError:
                break  # a torn last line (the worker was killed in its write)
    return recs


def scan_tree(base):
    """path -> (kind, ino, extra) of everything under base after the crash."""
    out = {}
    for root, dirs, files in os.walk(base):
        for n in dirs + files:
            full = os.path.join(root, n)
            rel = os.path.relpath(full, base)
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", st.st_ino, None)
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", st.st_ino, os.readlink(full))
            else:
                out[rel] = ("f", st.st_ino, st)
    return out


def check_worker(base, logpath, args, stats, sync_checked):
    """Replay one worker's log and check its promises against the tree under base."""
    recs = read_log(logpath)
    m = Model()
    ops = {}  # i -> op
    results = {}  # i -> "ok" | errno
    for r in recs:
        if r["t"] == "op":
            ops[r["i"]] = r
        elif r["t"] in ("ok", "err") and "i" in r and r["i"] in ops and "k" not in r:
            results[r["i"]] = r
    # Per fid: the standing data promise: dict(i, data, mode, name, via) and the ops after it.
    prom = {}
    later = {}  # fid -> list of ops (finished or in flight) after its promise
    tainted = set()
    dirprom = None  # (after, names snapshot)
    touched_after_dir = set()
    gone = set()  # fids unlinked to zero links (or with an in-flight op that may)
    history = {}  # fid -> list of strings
    failures = []
    inflight = None
    inflight_paths = set()  # names an op in flight at the kill may have made
    dead = False  # once the connection is gone every result is unknown (EIO, ENOTCONN, ...)
    # The kill can fail the last requests with EIO before the first ENOTCONN: the few
    # records before the first connection error count as in flight too, and so do the last
    # few of a log that ends before one (the worker was killed before its next request).
    first_dead = next((j for j, r in enumerate(recs) if r["t"] == "err" and r.get("e") in ("ENOTCONN", "ECONNABORTED")),
                      len(recs))
    for pos, r in enumerate(recs):
        if pos >= first_dead - 4 and r["t"] in ("err", "op"):
            dead = True
        t = r["t"]
        if t == "err" and r.get("e") in ("ENOTCONN", "ECONNABORTED"):
            dead = True
        if t == "op":
            op = r
            if op["k"] == "copy" and op["sfid"] in m.files:
                op_buf(op, m)  # the source's bytes now (the worker's own files: exact...)
            res = results.get(op["i"])
            if res is not None and res["t"] == "err" and res.get("e") in ("ENOTCONN", "ECONNABORTED"):
                dead = True
            if dead and (res is None or res["t"] == "err"):
                res = None  # the daemon died with it: it may have happened
            desc = "#%d %s" % (op["i"], {k: v for k, v in op.items() if k not in ("t", "i")})
            fids = set(x for x in (op.get("fid"), op.get("victim")) if x is not None)
            if op["k"] == "unlink" and op.get("fid") is None and op["p"] in m.names and m.names[op["p"]][0] == "f":
                fids.add(m.names[op["p"]][1])
            for fid in fids:
                history.setdefault(fid, []).append(desc + (" -> " + (res["t"] if res and res["t"] == "ok" else (res.get("e") if res else "IN FLIGHT"))))
            if res is None:
                inflight = op
                inflight_paths.update(op_paths(op))
            for p in op_paths(op):
                touched_after_dir.add(p)
            if res is not None and res["t"] == "err":
                if res.get("e") in ("EIO", "ENOSPC", "EFBIG") and op.get("fid") is not None and op["k"] in WRITE_KINDS:
                    # Under the write-back cache part of a refused write may be stored (README:
                    # pages in the kernel's write-back order): the file's bytes are unknown.
                    tainted.add(op["fid"])
                if res.get("e") == "ENOSPC" and op["k"] == "falloc" and op["mode"] & FALLOC_ZERO_RANGE:
                    # A refused zero range changes no byte (crates/core/src/file.rs: its holes
                    # are preallocated before anything is zeroed; until 2026-11-28 the range
                    # was punched first and read as zeros while the kernel's cache, which it
                    # invalidates only on success, still showed the old bytes): the file
                    # stays checked.
                    stats["zero_range_enospc"] = stats.get("zero_range_enospc", 0) + 1
                stats["errors"][op["k"] + ":" + str(res.get("e"))] = stats["errors"].get(op["k"] + ":" + str(res.get("e")), 0) + 1
                continue
            if op["k"] == "copy" and op["sfid"] in tainted:
                # ...unless a refused write may have stored part of itself there: the bytes
                # copied from a tainted file are unknown too (CI of e02e244, 2026-11-28: a
                # 1-byte copy from a file whose O_DSYNC write had failed with ENOSPC stored
                # that write's byte, 0xa3, which the model did not have; reported as a lost
                # promise of the destination).
                tainted.add(op["fid"])
            for fid in fids:
                if fid in prom:
                    later.setdefault(fid, []).append(op)
            if res is None:
                # In flight: may or may not have happened. Names it removes may be gone.
                if op["k"] in ("unlink", "rename"):
                    for fid in fids:
                        gone.add(fid)
                continue
            if op["k"] == "create" and "ino" not in op and "ino" in res:
                op["ino"] = res["ino"]
            m.apply(op)
            for fid in fids:
                if fid in m.files and not m.files[fid]["names"]:
                    gone.add(fid)
        elif t == "err" and "k" in r and not dead:
            stats["errors"][r["k"] + ":" + str(r.get("e"))] = stats["errors"].get(r["k"] + ":" + str(r.get("e")), 0) + 1
            if r.get("fid") is not None and r.get("e") in ("EIO", "ENOSPC", "EFBIG"):
                tainted.add(r["fid"])
        elif t == "promise":
            kind = r["kind"]
            if kind == "data":
                fid = r["fid"]
                if fid not in m.files:
                    continue
                f = m.files[fid]
                prom[fid] = dict(after=r["after"], data=bytes(f["data"]), mode=f["mode"] if r.get("mode") else None,
                                 xattr=dict(f["xattr"]) if r.get("mode") else None,
                                 mtime=f["mtime"] if r.get("mode") else None,
                                 name=r.get("name", False), via=r["via"], names=set(f["names"]))
                later[fid] = []
                history.setdefault(fid, []).append("PROMISE %s after #%d: size %d sha %s mode %s names %s" % (
                    r["via"], r["after"], len(f["data"]), hashlib.sha1(f["data"]).hexdigest()[:12],
                    oct(f["mode"]) if r.get("mode") else "-", sorted(f["names"])))
            elif kind == "dir" or (kind == "sync" and sync_checked):
                dirprom = (r["after"], dict(m.names), {fid: dict(ino=f["ino"]) for fid, f in m.files.items()})
                touched_after_dir = set()
                if kind == "sync":
                    for fid, f in m.files.items():
                        prom[fid] = dict(after=r["after"], data=bytes(f["data"]), mode=f["mode"], name=True, xattr=None,
                                         via=r["how"], names=set(f["names"]))
                        later[fid] = []
                        history.setdefault(fid, []).append("PROMISE %s after #%d: size %d" % (r["how"], r["after"], len(f["data"])))
            stats["promises"][kind] = stats["promises"].get(kind, 0) + 1
    tree = scan_tree(base)
    by_ino = {}
    for p, (kind, ino, extra) in tree.items():
        by_ino.setdefault(ino, []).append(p)
    ino_owner = {}
    for fid, f in m.files.items():
        if f["ino"] is not None:
            ino_owner[f["ino"]] = max(fid, ino_owner.get(f["ino"], -1))
    for fid, pr in prom.items():
        f = m.files.get(fid)
        if f is None:
            continue
        if fid in tainted:
            stats["skipped_tainted"] += 1
            continue
        if f["ino"] is None or ino_owner.get(f["ino"]) != fid:
            continue
        stats["checked"] += 1
        paths = [p for p in by_ino.get(f["ino"], []) if tree[p][0] == "f"]
        if fid in gone and paths and all(p in inflight_paths and p not in f["ever"] for p in paths):
            paths = []  # its inode number went to a file an op in flight at the kill made
        if not paths:
            if fid in gone:
                continue
            failures.append((fid, "fsync'd file (ino %d, promised via %s) is not reachable under any name (had %s; ever %s)" % (
                f["ino"], pr["via"], sorted(pr["names"]), sorted(f["ever"]))))
            continue
        bad = [p for p in paths if p not in f["ever"] and p not in inflight_paths]
        paths = [p for p in paths if p in f["ever"]] or paths
        if bad:
            failures.append((fid, "ino %d found under names it never had: %s" % (f["ino"], bad)))
        p = paths[0]
        try:
            st = os.lstat(os.path.join(base, p))
            got = read_model(os.path.join(base, p), st.st_size)
        except OSError as e:
            failures.append((fid, "cannot read %s: %s" % (p, e)))
            continue
        msg = check_content(pr, later.get(fid, []), got)
        if msg:
            failures.append((fid, "%s (path %s, ino %d): %s" % (pr["via"], p, f["ino"], msg)))
        if pr["mode"] is not None and not any(o["k"] == "chmod" for o in later.get(fid, [])):
            if stat.S_IMODE(st.st_mode) != pr["mode"]:
                failures.append((fid, "mode %o after crash, fsync'd %o" % (stat.S_IMODE(st.st_mode), pr["mode"])))
        if pr.get("mtime") is not None and not any(
                o["k"] in WRITE_KINDS + ("truncate", "ftruncate", "falloc", "utime")
                for o in later.get(fid, [])):
            if int(st.st_mtime) != pr["mtime"]:
                failures.append((fid, "mtime %d after crash, fsync'd %d (set by utime)" % (int(st.st_mtime), pr["mtime"])))
            stats["mtime_checked"] = stats.get("mtime_checked", 0) + 1
        if pr.get("xattr") is not None:
            lx = [o for o in later.get(fid, []) if o["k"] in ("setxattr", "rmxattr")]
            try:
                names_now = set(n for n in os.listxattr(os.path.join(base, p)) if n.startswith("user."))
            except OSError as e:
                names_now = set()
                failures.append((fid, "listxattr %s: %s" % (p, e)))
            for xn in sorted(set(pr["xattr"]) | names_now):
                later_vals = [data_of(o["ds"], o["n"]) for o in lx if o["xn"] == xn and o["k"] == "setxattr"]
                may_vanish = any(o["xn"] == xn and o["k"] == "rmxattr" for o in lx)
                try:
                    v = os.getxattr(os.path.join(base, p), xn)
                except OSError:
                    v = None
                ok = (v == pr["xattr"].get(xn)) or (v is not None and v in later_vals) or (v is None and may_vanish)
                if not ok:
                    failures.append((fid, "xattr %s of %s: %s after crash, fsync'd %s" % (
                        xn, p, "absent" if v is None else "%d bytes %s" % (len(v), hashlib.sha1(v).hexdigest()[:10]),
                        "absent" if xn not in pr["xattr"] else "%d bytes %s" % (
                            len(pr["xattr"][xn]), hashlib.sha1(pr["xattr"][xn]).hexdigest()[:10]))))
    # The directory promise.
    if dirprom is not None:
        after, names, inos = dirprom
        stats["dir_names_checked"] += 1
        # An op in flight or later touching a directory touches everything under it.
        tdirs = set(touched_after_dir)
        for p, v in names.items():
            if p in touched_after_dir or os.path.dirname(p) in tdirs:
                continue
            got = tree.get(p)
            if got is None:
                failures.append((v[1] if v[0] == "f" else None, "dir-fsync'd name %s (%s) missing after crash" % (p, v[0])))
                continue
            if got[0] != v[0]:
                failures.append((v[1] if v[0] == "f" else None, "dir-fsync'd name %s: type %s, expected %s" % (p, got[0], v[0])))
            elif v[0] == "l" and got[2] != v[1]:
                failures.append((None, "symlink %s -> %r, expected %r" % (p, got[2], v[1])))
            elif v[0] == "f":
                ino = inos[v[1]]["ino"]
                if ino is not None and got[1] != ino:
                    failures.append((v[1], "dir-fsync'd name %s points to ino %d, expected %d" % (p, got[1], ino)))
        for p in tree:
            if p not in names and p not in touched_after_dir and os.path.dirname(p) not in tdirs:
                failures.append((None, "name %s exists after crash but was absent at the last dir fsync and never touched since" % p))
    out = []
    for fid, msg in failures:
        out.append("FAIL %s: %s" % (logpath, msg))
        if fid is not None:
            for h in history.get(fid, [])[-args.history:]:
                out.append("    " + h)
    return out


def bad_byte(i, got, D, S, zeros_ok, touched, writes, bad):
    base = D[i] if i < S else 0
    c = got[i]
    if c == base:
        return
    if (c == 0 and zeros_ok[i]) or (touched[i] and any(o <= i < o + len(b) and b[i - o] == c for o, b in writes)):
        return
    bad.append(i)


def read_model(path, size):
    """The file's bytes in model space (regions only with --spread); a size that ends in
    a gap between regions reads as the model size up to the gap plus a marker."""
    with open(path, "rb") as fh:
        if not SPREAD:
            return fh.read()
        out = bytearray()
        for r, b in enumerate(SPREAD_BASES):
            if size <= b:
                break
            last = r + 1 == len(SPREAD_BASES)
            out += os.pread(fh.fileno(), size - b if last else min(REGION, size - b), b)
            if not last and b + REGION < size <= SPREAD_BASES[r + 1]:
                if size != b + REGION:
                    raise OSError(errno.ERANGE, "file size %d ends in the hole after region %d" % (size, r))
        return bytes(out)


def check_content(pr, later, got):
    D, S = pr["data"], len(pr["data"])
    sizes = [S]
    # Model the file through the later ops to know their sizes.
    cur = bytearray(D)
    touched = bytearray(max(S, len(got), MAXF + 1))
    zeros_ok = bytearray(len(touched))
    writes = []
    for op in later:
        k = op["k"]
        if k in WRITE_KINDS:
            buf = op_buf(op)
            off = op["off"]
            if k == "append":
                off = len(cur)  # the log's offset is the model's, equal for a single writer
            writes.append((off, buf))
            e = min(off + len(buf), len(touched))
            if e > off:
                touched[off:e] = b"\1" * (e - off)
            if len(cur) < off:
                cur.extend(bytes(off - len(cur)))
            cur[off:off + len(buf)] = buf
        elif k in ("truncate", "ftruncate"):
            n = op["n"]
            if n < len(zeros_ok):
                zeros_ok[n:] = b"\1" * (len(zeros_ok) - n)
            if n < len(cur):
                del cur[n:]
            else:
                cur.extend(bytes(n - len(cur)))
        elif k == "falloc":
            mode, off, n = op["mode"], op["off"], op["n"]
            if mode & (FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE):
                e = min(off + n, len(zeros_ok))
                if e > off:
                    zeros_ok[off:e] = b"\1" * (e - off)
                z = min(off + n, len(cur))
                if z > off:
                    cur[off:z] = bytes(z - off)
            if not mode & FALLOC_KEEP_SIZE and off + n > len(cur):
                cur.extend(bytes(off + n - len(cur)))
        sizes.append(len(cur))
    lo, hi = min(sizes), max(sizes)
    if not lo <= len(got) <= hi:
        return "size %d, allowed %d..%d (promised %d, %d ops after)" % (len(got), lo, hi, S, len(later))
    expect = (D[:len(got)] + bytes(max(0, len(got) - S)))
    bad = []
    for c0 in range(0, len(got), 4096):
        if got[c0:c0 + 4096] == expect[c0:c0 + 4096]:
            continue
        for i in range(c0, min(c0 + 4096, len(got))):
            bad_byte(i, got, D, S, zeros_ok, touched, writes, bad)
        if len(bad) > 2000:
            break
    if bad:
        first = bad[0]
        # Describe the run of bad bytes.
        runs, s, prev = [], bad[0], bad[0]
        for j in bad[1:]:
            if j != prev + 1:
                runs.append((s, prev + 1))
                s = j
            prev = j
        runs.append((s, prev + 1))
        return "%d wrong bytes, runs %s; at %d got %02x expected %02x (promised size %d, %d ops after)" % (
            len(bad), runs[:6], first, got[first], D[first] if first < S else 0, S, len(later))
    return None


# ---------------------------------------------------------------------------------------
# Rounds.

def daemon_pid(args):
    try:
        with open(args.pidfile) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def mount(args):
    cmd = [args.bin, "mount", "--daemon", "--pid-file", args.pidfile, "--log", args.img + ".log"]
    for o in args.o:
        cmd += ["-o", o]
    sh(*(cmd + [args.img, args.mnt]))


def wait_gone(pid, secs=60):
    for _ in range(int(secs * 10)):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def umount_clean(args):
    pid = daemon_pid(args)
    for _ in range(50):
        if sh("umount", args.mnt, check=False)[0] == 0:
            break
        time.sleep(0.2)
    else:
        raise RuntimeError("cannot unmount " + args.mnt)
    if pid and not wait_gone(pid):
        raise RuntimeError("daemon %d did not exit after umount" % pid)


def fsck(args, label):
    rc, out = sh(args.bin, "fsck", args.img, check=False, timeout=600)
    last = out.strip().splitlines()[-1:] if out.strip() else [""]
    ok = rc == 0 and "errors" in last[0] and " 0 errors" in last[0]
    if not ok:
        print("  fsck %s: exit %d: %s" % (label, rc, out.strip()[-3000:]))
    return ok


def mkfs(args):
    sh(*([args.bin, "mkfs", "--force", "--size", args.size] + args.mkfs_arg + [args.img]))


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fill(args):
    """Fill the volume to --fill percent with fsync'd filler files."""
    d = os.path.join(args.mnt, "filler")
    os.makedirs(d, exist_ok=True)
    st = os.statvfs(args.mnt)
    total = st.f_blocks * st.f_frsize
    want = total * args.fill // 100
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    i = 0
    chunk = os.urandom(1 << 20)
    while used < want:
        with open(os.path.join(d, "fill%d" % i), "wb") as f:
            for _ in range(min(16, max(1, (want - used) >> 20))):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        i += 1
        st = os.statvfs(args.mnt)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
    fsync_dir(d)
    fsync_dir(args.mnt)
    print("  filled to %d%% (%d MiB used of %d MiB)" % (used * 100 // total, used >> 20, total >> 20))


def worker_main(base, rel, seed, logpath, args):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        Worker(base, rel, seed, logpath, args).run()
    except BaseException as e:  # noqa: B902
        try:
            with open(logpath, "a") as f:
                f.write(json.dumps({"t": "crash", "e": repr(e)}) + "\n")
        except OSError:
            pass
    os._exit(0)


# ---------------------------------------------------------------------------------------
# Several writers on one file (--shared-writers N): each of N processes writes ranges of
# its own (writer k: [k*R, (k+1)*R)) and a range all share ([N*R, (N+1)*R)) of
# --shared-files files, and fsyncs, fdatasyncs or writes O_SYNC. Every record carries a
# CLOCK_MONOTONIC time (one clock for all processes), so the checker knows which write
# finished before another began. A write W is promised once an fsync or fdatasync of the
# file (by any writer: it flushes the whole file) that began after W returned has
# returned 0, or when W was an O_SYNC / O_DSYNC write that returned. After the crash each
# byte must hold the value of a write that covers it and did not return before a promised
# write covering it began (the promised write overwrote it), or zero when no promised write
# covers it; the size must lie between the end of the furthest promised write and of the
# furthest write tried. With --odirect, odd-numbered shared files are written only with
# O_DIRECT (Linux leaves O_DIRECT and buffered writes racing on one range undefined, open(2)).

SHARED_R = 64 * 1024


def shared_writer_main(paths, k, nw, seed, logpath, args):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    log = os.open(logpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(rec):
        rec["ts"] = time.monotonic_ns()
        os.write(log, (json.dumps(rec) + "\n").encode())

    def failed(seq, e):
        # A call that failed: logged; after the kill, a pause before the next one.
        emit({"t": "err", "i": seq, "e": errno.errorcode.get(e.errno, str(e.errno))})
        if e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
            time.sleep(1)
    try:
        rng = random.Random(seed)
        direct = [bool(args.odirect) and j % 2 == 1 for j in range(len(paths))]
        fds = [os.open(q, os.O_RDWR | (os.O_DIRECT if direct[j] else 0)) for j, q in enumerate(paths)]
        dbuf = mmap.mmap(-1, SHARED_R)
        names, weights = ["write", "osync", "fsync", "fdatasync"], [12, 2, 3, 2]
        seq = 0
        while True:
            kind = rng.choices(names, weights)[0]
            j = rng.randrange(len(paths))
            seq += 1
            if kind in ("fsync", "fdatasync"):
                emit({"t": "op", "i": seq, "k": kind, "f": j})
                try:
                    (os.fsync if kind == "fsync" else os.fdatasync)(fds[j])
                except OSError as e:
                    failed(seq, e)
                    continue
                emit({"t": "ok", "i": seq})
                continue
            n = rng.choice([1, 17, 512, 4096, 4096, 5000, 12288, 40000])
            if direct[j] and rng.random() < 0.5:
                n = max(4096, n // 4096 * 4096)
            base = (k if rng.random() < 0.5 else nw) * SHARED_R
            off = base + rng.randrange(0, SHARED_R - n + 1)
            if direct[j] and rng.random() < 0.5:
                off = off // 4096 * 4096
            ds = rng.getrandbits(48)
            emit({"t": "op", "i": seq, "k": kind, "f": j, "off": off, "n": n, "ds": ds, "d": direct[j]})
            try:
                if kind == "osync":
                    fd = os.open(paths[j], os.O_WRONLY | os.O_SYNC | (os.O_DIRECT if direct[j] else 0))
                else:
                    fd = fds[j]
                try:
                    buf = data_of(ds, n)
                    if direct[j]:
                        dbuf[:n] = buf
                        buf = memoryview(dbuf)[:n]
                    w = os.pwrite(fd, buf, off)
                    if w != n:
                        raise OSError(errno.ENOSPC, "short write")
                finally:
                    if fd != fds[j]:
                        os.close(fd)
            except OSError as e:
                failed(seq, e)
                continue
            emit({"t": "ok", "i": seq})
    except BaseException as e:  # noqa: B902
        try:
            os.write(log, (json.dumps({"t": "crash", "e": repr(e)}) + "\n").encode())
        except OSError:
            pass
    os._exit(0)


def check_shared(paths, logps, kill_ts, stats):
    """Check the shared files against every writer's log (see above). Returns failure lines."""
    INF = 1 << 62
    writes = [[] for _ in paths]  # per file: [t0, t1, off, n, ds, osync, writer, i]
    syncs = [[] for _ in paths]  # per file: start times of fsyncs that returned 0
    tainted = set()
    nops = 0
    out = []
    for w, lp in enumerate(logps):
        recs = read_log(lp)
        ops = {}
        for r in recs:
            if r["t"] == "crash":
                out.append("WORKER CRASH %s: %s" % (lp, r["e"]))
            elif r["t"] == "op":
                ops[r["i"]] = [r, None]
                nops += 1
            elif r["t"] in ("ok", "err") and r.get("i") in ops:
                ops[r["i"]][1] = r
        for op, res in ops.values():
            j = op["f"]
            after_kill = res is None or res["ts"] >= kill_ts
            if op["k"] in ("fsync", "fdatasync"):
                if res is not None and res["t"] == "ok":
                    syncs[j].append(op["ts"])
                    stats["shared_promises"] += 1
                continue
            if res is not None and res["t"] == "err" and not after_kill:
                stats["errors"]["shared-" + op["k"] + ":" + res["e"]] = stats["errors"].get("shared-" + op["k"] + ":" + res["e"], 0) + 1
                if res["e"] in ("EIO", "ENOSPC", "EFBIG"):
                    tainted.add(j)  # (the write-back cache stores part of a refused write)
                continue  # refused: changed nothing
            done = res is not None and res["t"] == "ok"
            if done and op["k"] == "osync":
                stats["shared_promises"] += 1
            writes[j].append([op["ts"], res["ts"] if done else INF, op["off"], op["n"], op["ds"], done and op["k"] == "osync",
                              w, op["i"]])
    stats["ops"] += nops
    for j, path in enumerate(paths):
        if j in tainted:
            stats["skipped_tainted"] += 1
            continue
        ws = writes[j]
        ss = sorted(syncs[j])
        durable = []
        for x in ws:
            # promised: O_SYNC, or an fsync that returned 0 began after x returned
            x.append(x[5] or (x[1] < INF and bisect.bisect_right(ss, x[1]) < len(ss)))
        with open(path, "rb") as fh:
            got = fh.read()
        lo = max([x[2] + x[3] for x in ws if x[8]] + [0])
        hi = max([x[2] + x[3] for x in ws] + [0])
        stats["shared_checked"] += 1
        if not lo <= len(got) <= hi:
            out.append("FAIL shared %s: size %d, allowed %d..%d" % (path, len(got), lo, hi))
        bounds = sorted(set([0, len(got)] + [min(len(got), x[2]) for x in ws] + [min(len(got), x[2] + x[3]) for x in ws]))
        cache = {}

        def buf(x):
            if id(x) not in cache:
                cache[id(x)] = data_of(x[4], x[3])
            return cache[id(x)]
        by_page = {}  # 4 KiB page -> the writes that reach into it
        for x in ws:
            for pg in range(x[2] >> 12, ((x[2] + x[3] - 1) >> 12) + 1):
                by_page.setdefault(pg, []).append(x)
        bad = []
        for a, b in zip(bounds, bounds[1:]):
            if a >= b:
                continue
            cover = [x for x in by_page.get(a >> 12, ()) if x[2] <= a and b <= x[2] + x[3]]
            prom = [x for x in cover if x[8]]
            floor = max([x[0] for x in prom] + [-1])
            allowed = [x for x in cover if x[1] >= floor]
            seg = got[a:b]
            if not prom and seg == bytes(b - a):
                continue
            if any(seg == buf(x)[a - x[2]:b - x[2]] for x in allowed):
                continue
            for i in range(a, b):
                c = got[i]
                if (c == 0 and not prom) or any(buf(x)[i - x[2]] == c for x in allowed):
                    continue
                bad.append((i, c, prom, cover))
                if len(bad) > 50:
                    break
            if len(bad) > 50:
                break
        if bad:
            stats["shared_lost"] += 1
            i, c, prom, cover = bad[0]
            out.append("FAIL shared %s: %d+ wrong bytes, first at %d: got %02x; promised writes covering it "
                       "(t0, t1, off, n, writer, #): %s; all covering: %s" % (
                           path, len(bad), i, c,
                           [(x[0], x[1], x[2], x[3], x[6], x[7], "%02x" % buf(x)[i - x[2]]) for x in prom][-4:],
                           [(x[0], x[1], x[2], x[3], x[6], x[7], "%02x" % buf(x)[i - x[2]]) for x in cover][-8:]))
    return out, nops


def selftest():
    """--selftest: the shared-file checker on made-up logs (two or three writers on one
    file) must accept every allowed outcome and reject lost promised bytes. No mount."""
    import tempfile
    d = tempfile.mkdtemp(prefix="fuse-crash-selftest-")
    a, b, c = data_of(1, 10), data_of(2, 10), data_of(3, 4)
    w0 = [{"t": "op", "i": 1, "k": "write", "f": 0, "off": 0, "n": 10, "ds": 1, "ts": 1}, {"t": "ok", "i": 1, "ts": 2},
          {"t": "op", "i": 2, "k": "fsync", "f": 0, "ts": 3}, {"t": "ok", "i": 2, "ts": 4}]
    w1 = [{"t": "op", "i": 1, "k": "write", "f": 0, "off": 5, "n": 10, "ds": 2, "ts": 5}, {"t": "ok", "i": 1, "ts": 6}]
    w1s = w1 + [{"t": "op", "i": 2, "k": "fdatasync", "f": 0, "ts": 7}, {"t": "ok", "i": 2, "ts": 8}]
    w2 = [{"t": "op", "i": 1, "k": "osync", "f": 0, "off": 2, "n": 4, "ds": 3, "ts": 1}, {"t": "ok", "i": 1, "ts": 9}]
    w3 = [{"t": "op", "i": 1, "k": "write", "f": 0, "off": 8, "n": 10, "ds": 2, "ts": 5}]  # in flight at the kill
    cases = [  # (writers' logs, file after the crash, must pass)
        ([w0, w1], a[:5] + b, True),
        ([w0, w1], a, True),  # the second write, never fsync'd, lost
        ([w0, w1], a + b[5:], True),  # its tail only
        ([w0, w1], bytes(5) + b, False),  # fsync'd bytes zero
        ([w0, w1], a[:4], False),  # shorter than the fsync'd write
        ([w0, w1s], a + b[5:], False),  # bytes the fsync'd second write overwrote came back
        ([w0, w1s], a[:5] + b, True),
        ([w0, w1, w2], a[:2] + c + a[6:], True),  # O_SYNC write concurrent with the first: either
        ([w0, w1, w2], a[:5] + b, True),
        ([w0, w3], a + bytes(8), True),  # in flight: zeros past the old end allowed
        ([w0, w3], a[:8] + bytes(10), False),  # but not over fsync'd bytes
        ([w0, w3], a + bytes(9), False),  # longer than any write reaches
    ]
    bad = 0
    for n, (ws, content, ok) in enumerate(cases):
        logps = []
        for w, recs in enumerate(ws):
            lp = os.path.join(d, "w%d.log" % w)
            with open(lp, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in recs))
            logps.append(lp)
        path = os.path.join(d, "file")
        with open(path, "wb") as f:
            f.write(content)
        st = dict(errors={}, shared_promises=0, shared_checked=0, shared_lost=0, skipped_tainted=0, ops=0)
        out, _ = check_shared([path], logps, 100, st)
        if bool(out) == ok:
            bad += 1
            print("selftest case %d: expected %s, got %s" % (n, "pass" if ok else "a failure", out or "pass"))
    bad += selftest_copy_from_tainted(d, len(cases))
    shutil.rmtree(d)
    print("selftest: %d of %d cases wrong" % (bad, len(cases) + 2))
    return bad == 0


def selftest_copy_from_tainted(d, n0):
    """Two cases of the worker checker (`check_worker`): file b is written and O_DSYNC'd, then
    gets a 1-byte copy from file a. When a's last write was refused (ENOSPC), the write-back
    cache may have stored part of it, so the copied byte may be that write's: b must not
    fail (the false failure of CI of e02e244). When a's write succeeded, a byte in b that is
    neither the promised one nor the copied one is a failure."""
    bad = 0
    for k, (refused, ok) in enumerate([(True, True), (False, False)]):
        base = os.path.join(d, "tree%d" % k)
        os.makedirs(base)
        wa, wb = data_of(11, 8), data_of(12, 8)
        with open(os.path.join(base, "a"), "wb") as f:
            f.write(wa)
        # b after the crash: its promised bytes with byte 3 from the refused write to a.
        with open(os.path.join(base, "b"), "wb") as f:
            f.write(wb[:3] + bytes([wa[5] ^ (0 if refused else 0x5a)]) + wb[4:])
        ino = {p: os.lstat(os.path.join(base, p)).st_ino for p in ("a", "b")}
        recs = [
            {"t": "op", "k": "create", "p": "a", "fid": 1, "i": 1}, {"t": "ok", "i": 1, "ino": ino["a"]},
            {"t": "op", "k": "create", "p": "b", "fid": 2, "i": 2}, {"t": "ok", "i": 2, "ino": ino["b"]},
            {"t": "op", "k": "odsync", "p": "a", "fid": 1, "off": 0, "n": 8, "ds": 11, "i": 3},
            {"t": "err", "i": 3, "e": "ENOSPC"} if refused else {"t": "ok", "i": 3},
            {"t": "op", "k": "odsync", "p": "b", "fid": 2, "off": 0, "n": 8, "ds": 12, "i": 4}, {"t": "ok", "i": 4},
            {"t": "promise", "kind": "data", "after": 4, "fid": 2, "mode": False, "via": "odsync"},
            {"t": "op", "k": "copy", "p": "b", "fid": 2, "off": 3, "n": 1, "sp": "a", "sfid": 1, "soff": 5, "i": 5},
            {"t": "ok", "i": 5},
        ]
        lp = os.path.join(d, "worker%d.log" % k)
        with open(lp, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in recs))
        st = dict(errors={}, promises={}, checked=0, skipped_tainted=0, dir_names_checked=0)
        out = check_worker(base, lp, argparse.Namespace(history=5), st, False)
        if bool(out) == ok:
            bad += 1
            print("selftest case %d: expected %s, got %s" % (n0 + k, "pass" if ok else "a failure", out or "pass"))
    return bad


def run_round(args, rnd, stats):
    rng = random.Random("%d/%d" % (args.seed, rnd))
    if args.fresh or rnd == 0:
        if is_mounted(args.mnt):
            umount_clean(args)
        mkfs(args)
        mount(args)
        if args.fill:
            fill(args)
    elif not is_mounted(args.mnt):
        mount(args)
    # Age: drop round rnd-3's tree.
    old = os.path.join(args.mnt, "r%d" % (rnd - 3))
    if os.path.isdir(old):
        shutil.rmtree(old, ignore_errors=True)
    rdir = os.path.join(args.mnt, "r%d" % rnd)
    try:
        os.mkdir(rdir)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        # Full (a full volume, e.g. --fill 96 with 4 mlogs): drop the older rounds' trees too.
        for r in range(max(0, rnd - 3), rnd):
            shutil.rmtree(os.path.join(args.mnt, "r%d" % r), ignore_errors=True)
        fsync_dir(args.mnt)
        os.mkdir(rdir)
    for k in range(args.workers):
        os.mkdir(os.path.join(rdir, "w%d" % k))
    spaths, slogs = [], []
    if args.shared_writers:
        sd = os.path.join(rdir, "shared")
        os.mkdir(sd)
        for j in range(args.shared_files):
            q = os.path.join(sd, "s%d" % j)
            fd = os.open(q, os.O_CREAT | os.O_WRONLY, 0o644)
            os.fsync(fd)
            os.close(fd)
            spaths.append(q)
        fsync_dir(sd)
    fsync_dir(rdir)
    fsync_dir(args.mnt)
    pids, logs = [], []
    for k in range(args.shared_writers):
        logp = os.path.join(args.logdir, "r%d-s%d.log" % (rnd, k))
        if os.path.exists(logp):
            os.unlink(logp)
        slogs.append(logp)
        pid = os.fork()
        if pid == 0:
            shared_writer_main(spaths, k, args.shared_writers, args.seed * 1000003 + rnd * 101 + 50 + k, logp, args)
        pids.append(pid)
    for k in range(args.workers):
        logp = os.path.join(args.logdir, "r%d-w%d.log" % (rnd, k))
        if os.path.exists(logp):
            os.unlink(logp)
        logs.append((os.path.join(rdir, "w%d" % k), logp))
        pid = os.fork()
        if pid == 0:
            worker_main(os.path.join(rdir, "w%d" % k), "r%d/w%d" % (rnd, k), args.seed * 1000003 + rnd * 101 + k, logp, args)
        pids.append(pid)
    delay = rng.uniform(args.min_delay, args.max_delay)
    time.sleep(delay)
    dpid = daemon_pid(args)
    kill_ts = time.monotonic_ns()
    os.kill(dpid, signal.SIGKILL)
    stats["kills"] += 1
    wait_gone(dpid)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in pids:
        os.waitpid(p, 0)
    if sh("fusermount3", "-u", args.mnt, check=False)[0] != 0:
        sh("umount", "-l", args.mnt, check=False)
    ok = fsck(args, "after kill (before recovery)")
    if not ok:
        stats["fsck_bad"] += 1
    if args.double_kill:
        # A second crash right after the recovering mount (its roll-forward and checkpoint).
        mount(args)
        time.sleep(rng.uniform(0, 0.3))
        dpid = daemon_pid(args)
        os.kill(dpid, signal.SIGKILL)
        wait_gone(dpid)
        if sh("fusermount3", "-u", args.mnt, check=False)[0] != 0:
            sh("umount", "-l", args.mnt, check=False)
        stats["kills"] += 1
        if not fsck(args, "after the second kill"):
            stats["fsck_bad"] += 1
    mount(args)
    out = []
    for base, logp in logs:
        for r in read_log(logp):
            if r["t"] == "crash":
                out.append("WORKER CRASH %s: %s" % (logp, r["e"]))
        out += check_worker(base, logp, args, stats, args.check_sync)
    sops = 0
    if spaths:
        sout, sops = check_shared(spaths, slogs, kill_ts, stats)
        out += sout
    for line in out:
        print(line)
    stats["failures"] += sum(1 for line in out if line.startswith("FAIL") or line.startswith("WORKER"))
    if not args.no_clean or rnd + 1 == args.rounds:
        umount_clean(args)
        ok = fsck(args, "after recovery + clean unmount")
        if not ok:
            stats["fsck_bad"] += 1
    nops = sum(sum(1 for r in read_log(lp) if r["t"] == "op") for _, lp in logs)
    print("round %d: killed after %.2fs, %d ops, failures so far %d, promises %s, checked %d files%s" % (
        rnd, delay, nops + sops, stats["failures"], dict(stats["promises"]), stats["checked"],
        ", shared: %d promises, %d files checked, %d lost" % (stats["shared_promises"], stats["shared_checked"],
                                                             stats["shared_lost"]) if spaths else ""), flush=True)
    stats["ops"] += nops


def gc_report(args):
    """--gc-report S: after the crash rounds, one more round of the same workers on the aged
    volume for S seconds ended by a clean unmount instead of a kill, so that the daemon logs
    its counters: whether the cleaning ran at this fullness (the killed rounds cannot say)."""
    if not is_mounted(args.mnt):
        mount(args)
    rdir = os.path.join(args.mnt, "gc-report")
    shutil.rmtree(rdir, ignore_errors=True)
    os.mkdir(rdir)
    pids = []
    for k in range(max(1, args.workers)):
        base = os.path.join(rdir, "w%d" % k)
        os.mkdir(base)
        logp = os.path.join(args.logdir, "gc-report-w%d.log" % k)
        if os.path.exists(logp):
            os.unlink(logp)
        pid = os.fork()
        if pid == 0:
            worker_main(base, "gc-report/w%d" % k, args.seed * 7919 + k, logp, args)
        pids.append(pid)
    time.sleep(args.gc_report)
    for p in pids:
        os.kill(p, signal.SIGKILL)
    for p in pids:
        os.waitpid(p, 0)
    with open(args.img + ".log", "rb") as f:
        f.seek(max(0, os.path.getsize(args.img + ".log") - 200000))
        start = f.tell()
    umount_clean(args)
    with open(args.img + ".log", "rb") as f:
        f.seek(start)
        tail = f.read().decode(errors="replace")
    line = [x for x in tail.splitlines() if "cleaning:" in x]
    if not line:
        return "no cleaning counters in the log (a daemon before they were logged?)"
    m = line[-1]
    return m[m.index("cleaning:"):].split(";")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="flashlog")
    ap.add_argument("--img", default="/tmp/fcrash-img")
    ap.add_argument("--mnt", default="/tmp/fcrash-mnt")
    ap.add_argument("--logdir", default=None, help="worker logs (default IMG.logs)")
    ap.add_argument("--size", default="384M")
    ap.add_argument("--setup", action="store_true", help="mkfs the image (always done for round 0)")
    ap.add_argument("-o", action="append", default=[], help="mount options (repeatable)")
    ap.add_argument("--mkfs-arg", action="append", default=[], help="extra mkfs argument, e.g. --mkfs-arg=--mlogs=4")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=0, help="stop starting rounds after this long")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--min-delay", type=float, default=0.5)
    ap.add_argument("--max-delay", type=float, default=6.0)
    ap.add_argument("--op-delay", type=float, default=0.0, help="random pause up to this many s per op")
    ap.add_argument("--fresh", action="store_true", help="a fresh volume every round")
    ap.add_argument("--fill", type=int, default=0, help="fill the volume to PCT percent first")
    ap.add_argument("--sync-ops", action="store_true", help="also call sync() and syncfs()")
    ap.add_argument("--check-sync", action="store_true", help="treat sync()/syncfs() as a checkpoint promise")
    ap.add_argument("--fsync-log", action="store_true", help="fsync the log after every promise line")
    ap.add_argument("--weight", action="append", default=[],
                    help="op weights, e.g. --weight dirfsync=0,sync=20 (fewer checkpoints: roll-forward)")
    ap.add_argument("--history", type=int, default=40, help="ops of a failing file's history to print")
    ap.add_argument("--no-clean", action="store_true",
                    help="after the check keep the recovered mount for the next round (no clean unmount)")
    ap.add_argument("--double-kill", action="store_true", help="kill again right after the recovering mount")
    ap.add_argument("--odirect", type=int, default=0, metavar="W",
                    help="weight of O_DIRECT pwrites among the ops (default 0: none)")
    ap.add_argument("--copy", type=int, default=0, metavar="W",
                    help="weight of copy_file_range copies among the ops (default 0: none)")
    ap.add_argument("--shared-writers", type=int, default=0, metavar="N",
                    help="also N processes writing and fsyncing ranges of the same files (own and shared ranges)")
    ap.add_argument("--shared-files", type=int, default=2, help="files the --shared-writers write (default 2)")
    ap.add_argument("--spread", action="store_true",
                    help="place the model's 64 KiB regions up to 4 GiB into the file (indirect nodes)")
    ap.add_argument("--gc-report", type=float, default=0, metavar="S",
                    help="at the end run the workers S more seconds and unmount cleanly, to log the cleaning's counters")
    ap.add_argument("--selftest", action="store_true", help="check the shared-file checker on made-up logs, then exit")
    args = ap.parse_args()
    if args.selftest:
        sys.exit(0 if selftest() else 1)
    global SPREAD, MAXF
    if args.spread:
        SPREAD = True
        MAXF = REGION * len(SPREAD_BASES)
    args.logdir = args.logdir or args.img + ".logs"
    args.pidfile = args.img + ".pid"
    if args.check_sync:
        args.sync_ops = True
    os.makedirs(args.logdir, exist_ok=True)
    os.makedirs(args.mnt, exist_ok=True)
    if is_mounted(args.mnt):
        raise SystemExit("%s is mounted; unmount it first" % args.mnt)
    stats = dict(failures=0, fsck_bad=0, promises={}, checked=0, errors={}, skipped_tainted=0, dir_names_checked=0,
                 ops=0, rounds=0, kills=0, shared_promises=0, shared_checked=0, shared_lost=0)
    t0 = time.time()
    print("fuse-crash: seed %d, -o %s, mkfs %s, size %s, workers %d, fill %d%%" % (
        args.seed, ",".join(args.o) or "-", " ".join(args.mkfs_arg) or "-", args.size, args.workers, args.fill), flush=True)
    for rnd in range(args.rounds):
        if args.seconds and time.time() - t0 > args.seconds:
            break
        run_round(args, rnd, stats)
        stats["rounds"] += 1
    was_mounted = is_mounted(args.mnt)
    if args.gc_report:
        print("GC: after the crash rounds, %.0f s of the workers then a clean unmount: %s" % (
            args.gc_report, gc_report(args)), flush=True)
    if is_mounted(args.mnt):
        umount_clean(args)
    if was_mounted or args.gc_report:
        if not fsck(args, "at the end"):
            stats["fsck_bad"] += 1
    if args.shared_writers:
        print("SHARED: %d writers on %d files: %d promises (fsync/fdatasync/O_SYNC returned), %d file checks, "
              "%d files with lost bytes" % (args.shared_writers, args.shared_files, stats["shared_promises"],
                                            stats["shared_checked"], stats["shared_lost"]))
    print("TOTAL: %d rounds, %d kills, %d ops, promises %s, %d files' data promises checked (%d skipped after an I/O error), "
          "%d dir promises checked, %d utime'd mtimes checked, %d failures, %d unclean fsck, "
          "%d failed ZERO_RANGE fallocates (ENOSPC; must change nothing); errors seen: %s" % (
              stats["rounds"], stats["kills"], stats["ops"], stats["promises"], stats["checked"], stats["skipped_tainted"],
              stats["dir_names_checked"], stats.get("mtime_checked", 0), stats["failures"], stats["fsck_bad"],
              stats.get("zero_range_enospc", 0), stats["errors"]))
    sys.exit(1 if stats["failures"] or stats["fsck_bad"] else 0)


if __name__ == "__main__":
    main()
