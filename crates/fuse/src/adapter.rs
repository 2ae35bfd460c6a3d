//! The `fuser::Filesystem` implementation: every FUSE request becomes one call into
//! `flashlog_core::Fs`, and every core error becomes an errno through [`errno_of`].
//!
//! Owns: inode-number translation, the FUSE-specific choices (TTLs, open flags, INIT
//! capabilities) and the kernel pins (below). The core does all other locking; the adapter's
//! one lock (`pins`) is a leaf, never held across a call into the core, so it adds nothing
//! to the core's lock order, and any number of request threads may call in at once.
//!
//! Kernel pins. The kernel may keep an inode after its last name is gone and still send
//! requests for it (with the write-back cache it flushes dirty times with SETATTR at the
//! next syncfs), until it evicts the inode and sends FORGET. So the core must neither free
//! the inode nor reuse its number before that FORGET. When an unlink, rmdir or rename is
//! about to remove the last link, the adapter opens the victim in the core (the same count
//! that keeps unlinked open files alive), and releases it when the kernel's lookup count
//! for it reaches zero (`crate::lookups`: a FORGET for an older kernel inode of the same
//! number does not), or at unmount for the inodes the kernel never forgot (the core then
//! frees them). Since the kernel evicts an
//! inode only after its last close, the pin also keeps an unlinked open file alive: where
//! the kernel opens files without asking (NO_OPEN_SUPPORT, below) it is the only count.
//!
//! Every request is counted by opcode ([`RequestCounts`], logged at unmount as "FUSE
//! requests: ... by opcode: ..."); the mount tests read those counts per created file.
//!
//! Inode numbers: FUSE's root is 1, the core's is `ROOT_INO` (3). The adapter swaps 1 and 3
//! and passes every other number through, a bijection (core nids 1 and 2 are never used).
//!
//! How each request is answered:
//! - lookup, getattr, setattr, readlink, mknod, mkdir, unlink, rmdir, symlink, rename
//!   (flags NOREPLACE, EXCHANGE and WHITEOUT, the whiteout owned by the caller), link,
//!   read, write, fsync, readdir, readdirplus (each entry's attributes from the core, and
//!   a kernel lookup counted for each but `.` and `..`; INIT negotiates it per the
//!   `readdirplus=` option, by default READDIRPLUS_AUTO),
//!   fsyncdir, statfs, set/get/list/removexattr, fallocate (modes 0, KEEP_SIZE,
//!   PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE and ZERO_RANGE|KEEP_SIZE, the modes the kernel
//!   forwards; others EOPNOTSUPP): by the core.
//! - open, create, release: where the kernel offers FUSE_NO_OPEN_SUPPORT (4.20 and later),
//!   OPEN and CREATE answer ENOSYS, once each: the kernel then opens regular files itself
//!   (fh 0, KEEP_CACHE), makes new ones with MKNOD, and sends no RELEASE, so a new file
//!   costs LOOKUP + MKNOD instead of LOOKUP + CREATE + RELEASE, and opening an existing one
//!   costs nothing. Elsewhere open and create open the inode in the core and release
//!   closes it.
//! - flush: ENOSYS, once: the kernel then never sends FLUSH again on this connection (data
//!   reaches the core on write, durability is fsync's job, and POSIX locks are the
//!   kernel's), which saves a synchronous round trip per close(2).
//! - forget / batch_forget: drop the kernel pin of an unlinked inode, if any (the core does
//!   not count kernel lookups otherwise).
//! - opendir / releasedir: nothing to do (directories are not open-counted).
//! - access: only sent without default_permissions (so never with ACLs on); answered from
//!   the mode bits.
//! - POSIX ACLs (unless `noacl`): INIT negotiates POSIX_ACL (the kernel checks ACLs) and
//!   DONT_MASK; mknod, mkdir and create hand the caller's umask to the core, which applies it
//!   or the parent's default ACL; the ACL xattrs go to the core, which keeps the mode in step;
//!   setting an access ACL as a non-member of the file's group clears setgid
//!   (docs/DESIGN.md, "POSIX ACLs").
//! - setuid/setgid on write, truncate, fallocate and chown (unless `nokillpriv`): INIT
//!   negotiates HANDLE_KILLPRIV_V2, so the kernel stops sending a GETXATTR of
//!   security.capability before every write and leaves the clearing to us: WRITE flagged
//!   KILL_SUIDGID, SETATTR of the owner or group of a non-directory, SETATTR of the size and
//!   FALLOCATE by a caller without CAP_FSETID (read from /proc, as fuser 0.18 does not
//!   decode FATTR_KILL_SUIDGID); setgid without group execute only for a caller outside
//!   the file's group (Linux 6.2's rule).
//!   Not atomic with a concurrent chmod of the same file (getattr, then setattr).
//! - getlk / setlk / flock: never sent, since POSIX_LOCKS and FLOCK_LOCKS are not
//!   negotiated: the kernel keeps locks itself, which is right for a local file system.
//! - lseek, copy_file_range, ioctl, bmap, poll: ENOSYS, after which the kernel uses its own
//!   generic implementation (lseek over i_size, copy by read/write, ENOTTY for ioctl,
//!   the default poll mask). SEEK_DATA/SEEK_HOLE thus report the whole file as data, which
//!   POSIX allows.

use crate::errno::errno_of;
use crate::options::{MountConfig, Readdirplus};
use flashlog_core::{
    Attr, Creator, DirEntry, Error, FallocMode, Fs, Ino, RenameFlags, SetAttr, TimeSet, Timespec,
    XattrMode, ROOT_INO,
};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may cache attributes and names. The adapter is the only writer, so
/// the kernel's own changes keep its cache right; the TTL only bounds how stale a view can
/// get if that ever changes.
pub const TTL: Duration = Duration::from_secs(1);
/// Largest WRITE request: 1 MiB (256 pages, the kernel's default `max_pages_limit`).
pub const MAX_WRITE_BYTES: u32 = 1 << 20;
/// Asynchronous requests (readahead, write-back, async direct I/O) the kernel keeps in
/// flight before throttling (dependencies.md §2: 64-256; the kernel default is 12).
pub const MAX_BACKGROUND: u16 = 64;
/// Throttle writers at 75 % of `MAX_BACKGROUND`.
pub const CONGESTION_THRESHOLD: u16 = 48;
/// Directory entries fetched from the core per READDIR (one 4 KiB reply holds about 100).
const READDIR_BATCH: usize = 160;

// fallocate(2) modes (linux/falloc.h).
const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;
/// The access ACL's attribute name (flashlog_format::acl::ACCESS_NAME).
const ACL_ACCESS_NAME: &[u8] = b"system.posix_acl_access";
// setxattr(2) flags.
const XATTR_CREATE: i32 = 1;
const XATTR_REPLACE: i32 = 2;

/// The requests the adapter counts, one counter per FUSE opcode that reaches it (FORGET
/// counts inodes, so a BATCH_FORGET of n inodes counts n).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Symlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Statfs,
    Release,
    Fsync,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Flush,
    Opendir,
    Readdir,
    Readdirplus,
    Releasedir,
    Fsyncdir,
    Access,
    Create,
    Fallocate,
    /// lseek, copy_file_range, ioctl, bmap, poll, getlk, setlk (all answered without the core).
    Other,
}

impl Op {
    /// Every op with its name in the unmount log (the opcode's name in lower case), indexed
    /// by `Op as usize`.
    pub const ALL: [(Op, &'static str); 32] = [
        (Op::Lookup, "lookup"),
        (Op::Forget, "forget"),
        (Op::Getattr, "getattr"),
        (Op::Setattr, "setattr"),
        (Op::Readlink, "readlink"),
        (Op::Symlink, "symlink"),
        (Op::Mknod, "mknod"),
        (Op::Mkdir, "mkdir"),
        (Op::Unlink, "unlink"),
        (Op::Rmdir, "rmdir"),
        (Op::Rename, "rename"),
        (Op::Link, "link"),
        (Op::Open, "open"),
        (Op::Read, "read"),
        (Op::Write, "write"),
        (Op::Statfs, "statfs"),
        (Op::Release, "release"),
        (Op::Fsync, "fsync"),
        (Op::Setxattr, "setxattr"),
        (Op::Getxattr, "getxattr"),
        (Op::Listxattr, "listxattr"),
        (Op::Removexattr, "removexattr"),
        (Op::Flush, "flush"),
        (Op::Opendir, "opendir"),
        (Op::Readdir, "readdir"),
        (Op::Readdirplus, "readdirplus"),
        (Op::Releasedir, "releasedir"),
        (Op::Fsyncdir, "fsyncdir"),
        (Op::Access, "access"),
        (Op::Create, "create"),
        (Op::Fallocate, "fallocate"),
        (Op::Other, "other"),
    ];

    /// The name in the unmount log.
    pub fn name(self) -> &'static str {
        Op::ALL[self as usize].1
    }
}

/// Requests served, by kind (logged at unmount): the counters behind the request-path
/// measurements of docs/BENCHMARKS.md ("fio") and the request counts per created file that
/// the mount tests check. Relaxed atomics, no lock.
#[derive(Default, Debug)]
pub struct RequestCounts {
    /// One counter per [`Op`], indexed by `Op as usize`.
    ops: [AtomicU64; Op::ALL.len()],
    pub write_bytes: AtomicU64,
    /// Wall time spent answering WRITE (copy into the core's cache, write-back when its
    /// dirty cap is reached).
    pub write_ns: AtomicU64,
    /// Wall time spent answering FSYNC (write-back of the core's cache, log, device flush).
    pub fsync_ns: AtomicU64,
    /// setuid/setgid cleared for the kernel (HANDLE_KILLPRIV_V2: write, truncate, chown).
    pub suidgid_kills: AtomicU64,
}

impl RequestCounts {
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }

    /// Count one request of kind `op`.
    pub fn count(&self, op: Op) {
        Self::bump(&self.ops[op as usize]);
    }

    /// Requests of kind `op` so far.
    pub fn get(&self, op: Op) -> u64 {
        self.ops[op as usize].load(Relaxed)
    }

    /// One line for the log: the write path's figures first (the bench copies this line
    /// into its report), then every opcode seen.
    pub fn summary(&self) -> String {
        let g = |c: &AtomicU64| c.load(Relaxed);
        let writes = self.get(Op::Write);
        let per_op: Vec<String> = Op::ALL
            .iter()
            .filter(|&&(op, _)| self.get(op) > 0)
            .map(|&(op, name)| format!("{name} {}", self.get(op)))
            .collect();
        format!(
            "FUSE requests: write {} ({:.1} MiB, {:.1} KiB each, {:.3} s), getxattr {}, getattr {}, setattr {}, fsync {} ({:.3} s); setuid/setgid cleared {} times; by opcode: {}",
            writes,
            g(&self.write_bytes) as f64 / (1 << 20) as f64,
            g(&self.write_bytes) as f64 / 1024.0 / writes.max(1) as f64,
            g(&self.write_ns) as f64 / 1e9,
            self.get(Op::Getxattr),
            self.get(Op::Getattr),
            self.get(Op::Setattr),
            self.get(Op::Fsync),
            g(&self.fsync_ns) as f64 / 1e9,
            g(&self.suidgid_kills),
            if per_op.is_empty() {
                "none".to_string()
            } else {
                per_op.join(", ")
            }
        )
    }
}

/// One log line on where the core's write path waited (issue 13 item 4): background
/// write-back, writers throttled at the dirty cap or writing back themselves, fsyncs that
/// needed a checkpoint, the cleaning's passes and moves (scripts/fuse-crash.py
/// --gc-report reads them), and the contended waits of the lock-wait counters.
fn core_write_summary(fs: &Fs) -> String {
    let wb = fs.writeback_stats();
    let c = fs.stats();
    let waits: Vec<String> = flashlog_core::waits::snapshot()
        .into_iter()
        .filter(|&(_, _, n)| n > 0)
        .map(|(name, s, n)| format!("{name} {n} ({s:.3} s)"))
        .collect();
    format!(
        "core write path: flusher wrote {} pages in {} passes ({} copies orphaned by writes, \
         truncates or moves of pages in flight); writers throttled {} times ({:.3} s), \
         wrote back {} pages themselves ({} fallbacks); fsyncs {} ({} as checkpoints), \
         checkpoints {}; cleaning: {} foreground and {} background passes, {} sections \
         freed, {} blocks moved; contended waits: {}",
        wb.background_pages,
        wb.background_passes,
        c.flush_orphaned_copies,
        wb.throttled,
        wb.throttled_ns as f64 / 1e9,
        wb.inline_pages,
        wb.inline_fallbacks,
        c.fsyncs,
        c.fsync_checkpoints,
        c.checkpoints,
        c.gc_fg_runs,
        c.gc_bg_runs,
        c.gc_sections_freed,
        c.gc_moved_blocks,
        if waits.is_empty() {
            "none".to_string()
        } else {
            waits.join(", ")
        }
    )
}

/// The FUSE face of a mounted volume.
pub struct FlashlogFuse {
    fs: Arc<Fs>,
    cfg: MountConfig,
    /// Unlinked inodes held open for the kernel until its FORGET (see the module header).
    /// Leaf lock: never held across a call into the core.
    pins: Mutex<HashSet<Ino>>,
    /// The kernel's lookup count per inode (`crate::lookups`): a pin ends when it reaches
    /// zero, not at any FORGET.
    lookups: crate::lookups::LookupCounts,
    /// Requests served (logged by `destroy` at unmount; [`FlashlogFuse::counts`] shares
    /// them with a caller that wants them while the session runs).
    counts: Arc<RequestCounts>,
    /// INIT negotiated HANDLE_KILLPRIV_V2: the kernel leaves clearing setuid/setgid on write,
    /// truncate and chown to us (and stops asking for security.capability before writes).
    killpriv: bool,
    /// The kernel opens regular files itself (it offers FUSE_NO_OPEN_SUPPORT): OPEN and
    /// CREATE are answered ENOSYS, after which it sends MKNOD for a new file and neither
    /// OPEN nor RELEASE for any file; an unlinked open file is kept by its kernel pin.
    kernel_opens: bool,
}

impl FlashlogFuse {
    pub fn new(fs: Arc<Fs>, cfg: MountConfig) -> Self {
        FlashlogFuse {
            fs,
            cfg,
            pins: Mutex::new(HashSet::new()),
            lookups: Default::default(),
            counts: Arc::new(RequestCounts::default()),
            killpriv: false,
            kernel_opens: false,
        }
    }

    /// The request counters; take them before the session consumes the adapter.
    pub fn counts(&self) -> Arc<RequestCounts> {
        self.counts.clone()
    }

    /// Before removing `name` from `parent`: if that removes the last link of its inode, hold
    /// the inode open for the kernel. Returns the pinned inode, to unpin if the removal fails.
    fn pin_victim(&self, parent: Ino, name: &[u8]) -> Option<Ino> {
        let a = self.fs.lookup(parent, name).ok()?;
        if (a.nlink > 1 && !a.is_dir())
            || self
                .pins
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&a.ino)
        {
            return None;
        }
        self.fs.open(a.ino).ok()?;
        let fresh = self
            .pins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(a.ino);
        if !fresh {
            // Another thread pinned it meanwhile: one pin is enough.
            let _ = self.fs.release(a.ino);
            return None;
        }
        Some(a.ino)
    }

    /// Hand `add` the listable entries of directory `ino` from `offset`, a batch of the
    /// core's at a time, until it says the reply is full (returns true) or the directory
    /// ends; its error, or the core's, ends the walk.
    fn list_entries(
        &self,
        ino: Ino,
        mut offset: u64,
        mut add: impl FnMut(&DirEntry) -> flashlog_core::Result<bool>,
    ) -> flashlog_core::Result<()> {
        loop {
            let entries = self.fs.readdir(ino, offset, READDIR_BATCH)?;
            let Some(last) = entries.last() else {
                return Ok(());
            };
            let next = last.next_offset;
            for e in entries.iter().filter(|e| listable(ino, &e.name)) {
                if add(e)? {
                    return Ok(());
                }
            }
            if entries.len() < READDIR_BATCH || next <= offset {
                return Ok(());
            }
            offset = next;
        }
    }

    /// Drop a pin (the removal failed, the kernel forgot the inode, or unmount).
    fn unpin(&self, ino: Ino) {
        let had = self
            .pins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&ino);
        if had {
            if let Err(e) = self.fs.release(ino) {
                tracing::warn!("releasing unlinked inode {ino}: {e}");
            }
        }
    }

    /// Release every pin (unmount: the kernel will send no more FORGETs).
    pub fn release_pins(&self) {
        let all: Vec<Ino> = self
            .pins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect();
        for ino in all {
            if let Err(e) = self.fs.release(ino) {
                tracing::warn!("releasing unlinked inode {ino}: {e}");
            }
        }
    }
}

/// FUSE inode number -> core inode number.
fn core_ino(ino: INodeNo) -> Result<Ino, Errno> {
    match ino.0 {
        1 => Ok(ROOT_INO),
        n if n == ROOT_INO as u64 => Ok(1),
        n => Ino::try_from(n).map_err(|_| Errno::ENOENT),
    }
}

/// Core inode number -> FUSE inode number.
fn fuse_ino(ino: Ino) -> INodeNo {
    match ino {
        ROOT_INO => INodeNo(1),
        1 => INodeNo(ROOT_INO as u64),
        n => INodeNo(n as u64),
    }
}

fn system_time(t: Timespec) -> SystemTime {
    let nsec = Duration::from_nanos(t.nsec.min(999_999_999) as u64);
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.sec as u64) + nsec
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + nsec
    }
}

/// A time from a fuser request. fuser 0.18 decodes the kernel's (sec < 0, nsec) as
/// `UNIX_EPOCH - (|sec| s + nsec ns)` (its `system_time_from_time` has a TODO there) instead
/// of `UNIX_EPOCH - |sec| s + nsec ns`; this undoes exactly that encoding, so pre-1970 times
/// round-trip (utimensat with tv_sec = -1000, tv_nsec = 5 reads back as set).
fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: d.as_secs().min(i64::MAX as u64) as i64,
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            Timespec {
                // The kernel clamps to its range and sends i64::MIN s (nsec 0) for the
                // earliest time; fuser gives that as 2^63 s before the epoch.
                sec: 0i64.saturating_sub_unsigned(d.as_secs()),
                nsec: d.subsec_nanos(),
            }
        }
    }
}

fn file_type(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// Directory-entry type codes are the DT_* values, which are the S_IFMT bits shifted down.
fn dirent_type(ftype: u8) -> FileType {
    file_type((ftype as u32) << 12)
}

/// Whether a directory entry's name may go to the kernel in a listing. The kernel fails a
/// whole READDIR or READDIRPLUS reply with EIO at a name holding '/' (and leaves the
/// entries after it in a READDIRPLUS unlinked, their lookups uncounted by it but counted
/// here); NUL would cut the name short for every program. Only a damaged or hostile image
/// holds such a name (the core refuses to create one, fsck reports it): it is left out, so
/// that the rest of the directory lists, and a warning names the directory.
fn listable(dir: Ino, name: &[u8]) -> bool {
    if !name.is_empty() && !name.contains(&b'/') && !name.contains(&0) {
        return true;
    }
    tracing::warn!(
        "directory {dir}: entry {:?} left out of a listing (a name no file may have: run \
         flashlog fsck)",
        String::from_utf8_lossy(name)
    );
    false
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: fuse_ino(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: system_time(a.crtime),
        kind: file_type(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

/// The creator of a new inode. With DONT_MASK (negotiated with POSIX ACLs) the kernel leaves
/// the umask to us; without it the kernel has applied it already and applying it again
/// changes nothing.
fn creator(req: &Request, umask: u32) -> Creator {
    Creator {
        uid: req.uid(),
        gid: req.gid(),
        umask,
    }
}

/// Whether the caller of `req` is root or a member of group `gid` (its fsgid or one of its
/// supplementary groups, from /proc/PID/status; a caller that is gone counts as not).
fn caller_in_group(req: &Request, gid: u32) -> bool {
    if req.uid() == 0 || req.gid() == gid {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
}

/// The setuid/setgid bits that a write, truncate, fallocate or chown clears (Linux's
/// `setattr_should_drop_suidgid`, since 6.2): setuid always; setgid with group execute, or
/// without it when the caller is not in the file's group (`in_group_or_capable`; before
/// 6.2 setgid without group execute, once the mandatory-locking mark, always stayed, and
/// so it did here until 2026-11-28: a writer outside the group kept it, where ext4 and
/// tmpfs clear it). `caller_in_group` is asked only for setgid without group execute.
fn suidgid_to_kill(mode: u32, caller_in_group: impl FnOnce() -> bool) -> u32 {
    let mut kill = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !caller_in_group()) {
        kill |= libc::S_ISGID;
    }
    kill
}

/// CAP_FSETID's bit in the capability sets (linux/capability.h).
const CAP_FSETID: u32 = 4;

/// Whether an effective-capability line of /proc/PID/status (`CapEff:\t000001ffffffffff`)
/// holds CAP_FSETID. Unparsable counts as not.
fn cap_eff_has_fsetid(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_FSETID) != 0)
}

/// Whether the caller of `req` (the thread that made the system call, which waits for our
/// reply and so still exists) holds CAP_FSETID, which lets it truncate a file without
/// clearing its setuid/setgid bits. A caller whose status cannot be read counts as not
/// holding it, so the bits are cleared: the safe side.
fn caller_has_fsetid(req: &Request) -> bool {
    std::fs::read_to_string(format!("/proc/{}/status", req.pid()))
        .is_ok_and(|s| cap_eff_has_fsetid(&s))
}

fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(timespec(t)),
    }
}

/// Unwrap a core result or answer the request with its errno.
macro_rules! tri {
    ($reply:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(err) => {
                let err: Error = err;
                $reply.error(errno_of(&err));
                return;
            }
        }
    };
}

/// Unwrap an inode translation or answer ENOENT.
macro_rules! ino {
    ($reply:expr, $ino:expr) => {
        match core_ino($ino) {
            Ok(i) => i,
            Err(e) => {
                $reply.error(e);
                return;
            }
        }
    };
}

impl FlashlogFuse {
    /// After an access ACL was set: clear the setgid bit unless the caller is root or in the
    /// file's group, as Linux's `posix_acl_update_mode` does. (The kernel tells a FUSE file
    /// system so with FUSE_SETXATTR_ACL_KILL_SGID only over FUSE_SETXATTR_EXT, whose request
    /// layout fuser 0.18 does not decode, so the adapter asks /proc for the caller's groups.)
    /// Clear setgid after an access ACL was set by a caller outside the file's group, as
    /// Linux's posix_acl_update_mode does. Not atomic with the ACL write (fuser 0.18 cannot
    /// pass SETXATTR_EXT's kill-sgid flag): if it fails, the caller gets the error rather
    /// than a success that left setgid on.
    fn acl_kill_sgid(&self, req: &Request, ino: Ino) -> flashlog_core::Result<()> {
        let a = self.fs.getattr(ino)?;
        if a.mode & libc::S_ISGID == 0 || caller_in_group(req, a.gid) {
            return Ok(());
        }
        let sa = SetAttr {
            mode: Some(a.mode & 0o7777 & !libc::S_ISGID),
            ..Default::default()
        };
        self.fs.setattr(ino, &sa).map(|_| ())
    }

    /// Clear setuid/setgid before a write the kernel flagged FUSE_WRITE_KILL_SUIDGID (a
    /// write-through write by a caller without CAP_FSETID; only sent under
    /// HANDLE_KILLPRIV_V2), or before a fallocate (`ask_fsetid`: the caller's CAP_FSETID is
    /// read from /proc, and only when the file has a bit to clear). Returns whether anything
    /// was cleared.
    fn kill_suidgid(
        &self,
        req: &Request,
        ino: Ino,
        ask_fsetid: bool,
    ) -> flashlog_core::Result<bool> {
        let a = self.fs.getattr(ino)?;
        let kill = suidgid_to_kill(a.mode, || caller_in_group(req, a.gid));
        if kill == 0 || a.is_dir() || (ask_fsetid && caller_has_fsetid(req)) {
            return Ok(false);
        }
        let sa = SetAttr {
            mode: Some(a.mode & 0o7777 & !kill),
            ..Default::default()
        };
        self.fs.setattr(ino, &sa)?;
        RequestCounts::bump(&self.counts.suidgid_kills);
        Ok(true)
    }

    /// WRITE: clear setuid/setgid first when the kernel asks (KILLPRIV_V2), then hand the
    /// data to the core; a short write is reported as such, except where the kernel cannot
    /// take one ([`error_after_part_written`]). (The WRITE request's own fields.)
    #[allow(clippy::too_many_arguments)]
    fn serve_write(
        &self,
        req: &Request,
        ino: Ino,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        open_flags: OpenFlags,
        reply: ReplyWrite,
    ) {
        if self.killpriv && write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            tri!(reply, self.kill_suidgid(req, ino, false));
        }
        let mut done = 0usize;
        while done < data.len() {
            match self.fs.write(ino, offset + done as u64, &data[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if done == 0 || error_after_part_written(write_flags, open_flags) => {
                    reply.error(errno_of(&e));
                    return;
                }
                // Otherwise a short write is reported as such; the error comes with the
                // next write.
                Err(_) => break,
            }
        }
        reply.written(done as u32);
    }

    fn open_flags(&self, attr: &Attr) -> FopenFlags {
        // We are the only writer, so cached pages stay valid across opens.
        if attr.is_file() {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }
}

/// Whether a WRITE that stored part of its bytes before an error (ENOSPC, EFBIG) must
/// answer the error rather than the short count (the part stays written either way):
/// - the kernel's write-back (`FUSE_WRITE_CACHE`) ignores a short count (the pages past
///   it would be marked clean, and fsync succeed): the error is its only report;
/// - an `O_DIRECT` write goes through the kernel's FUSE direct I/O, which (with
///   `FUSE_ASYNC_DIO`, negotiated in `init`) turns any short reply into EIO
///   (fs/fuse/file.c, `fuse_get_res_by_io`), so a direct write to a nearly full volume
///   failed with EIO, as for a broken device; with the error it fails with ENOSPC, and
///   the kernel truncates an extending one back to the old size (`fuse_do_truncate`).
///   Found by scripts/fuse-crash.py --odirect on a 96 % full volume.
fn error_after_part_written(write_flags: WriteFlags, open_flags: OpenFlags) -> bool {
    write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) || open_flags.0 & libc::O_DIRECT != 0
}

impl Filesystem for FlashlogFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(max) = config.set_max_write(MAX_WRITE_BYTES) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_background(MAX_BACKGROUND) {
            let _ = config.set_max_background(max);
        }
        let _ = config.set_congestion_threshold(CONGESTION_THRESHOLD);
        let mut wanted = InitFlags::FUSE_ASYNC_READ
            | InitFlags::FUSE_BIG_WRITES
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ASYNC_DIO
            | InitFlags::FUSE_CACHE_SYMLINKS;
        match self.cfg.readdirplus {
            Readdirplus::Always => wanted |= InitFlags::FUSE_DO_READDIRPLUS,
            // The kernel asks for attributes on a directory's first batch and after lookups
            // in it, plain READDIR otherwise.
            Readdirplus::Auto => {
                wanted |= InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO
            }
            Readdirplus::Off => {}
        }
        if self.cfg.writeback_cache && !self.cfg.core.read_only {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        // Without HANDLE_KILLPRIV_V2 the kernel never sets SB_NOSEC on a FUSE mount, so every
        // write(2) first asks for security.capability (a synchronous GETXATTR round trip in
        // the writer's thread, half of fio's write path in a 4 KiB random-write profile).
        // With it the kernel checks once per attribute refresh and leaves clearing
        // setuid/setgid to us: on WRITE with FUSE_WRITE_KILL_SUIDGID and on SETATTR of the
        // owner, or of the size by a caller without CAP_FSETID (see `setattr`).
        if self.cfg.killpriv {
            match config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
                Ok(()) => self.killpriv = true,
                Err(_) => tracing::info!(
                    "the kernel's FUSE lacks HANDLE_KILLPRIV_V2: it checks security.capability before every write"
                ),
            }
        }
        // A kernel file system has no open or release round trip, and this one needs none:
        // file handles carry no state (fh 0, KEEP_CACHE for every file, which is what the
        // kernel assumes without OPEN), and an unlinked file stays alive through its kernel
        // pin until FORGET, which the kernel sends only after the last close. So let the
        // kernel open files itself where it can (see `open` and `create`).
        self.kernel_opens = config
            .capabilities()
            .contains(InitFlags::FUSE_NO_OPEN_SUPPORT);
        if self.cfg.core.acl {
            // The kernel checks permissions against the ACLs (and turns default_permissions
            // on); the core keeps mode and ACLs in step and applies the umask or the parent's
            // default ACL on create, so the kernel must pass the umask unapplied (DONT_MASK).
            // Without both, ACLs cannot work: refuse the mount rather than half-work.
            let need = InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
            if let Err(lacks) = config.add_capabilities(need) {
                tracing::error!(
                    "this kernel's FUSE lacks {lacks:?}, which POSIX ACLs need: mount with -o noacl"
                );
                return Err(std::io::Error::other(format!(
                    "the kernel's FUSE lacks {lacks:?} (POSIX ACLs); mount with -o noacl"
                )));
            }
        }
        let mut got = Vec::new();
        let mut missing = Vec::new();
        for (name, flag) in wanted.iter_names() {
            match config.add_capabilities(flag) {
                Ok(()) => got.push(name),
                Err(_) => missing.push(name),
            }
        }
        if self.killpriv {
            got.push("HANDLE_KILLPRIV_V2");
        }
        if self.kernel_opens {
            got.push("NO_OPEN_SUPPORT");
        } else {
            missing.push("NO_OPEN_SUPPORT");
        }
        tracing::info!(
            "FUSE ABI {:?}; enabled {}; kernel lacks [{}]",
            config.kernel_abi(),
            got.join(" "),
            missing.join(" ")
        );
        Ok(())
    }

    fn destroy(&mut self) {
        self.release_pins();
        tracing::info!("{}", self.counts.summary());
        tracing::info!("{}", core_write_summary(&self.fs));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.counts.count(Op::Forget);
        if let Ok(ino) = core_ino(ino) {
            if self.lookups.forget(ino as u64, nlookup) {
                self.unpin(ino);
            }
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.counts.count(Op::Lookup);
        let parent = ino!(reply, parent);
        let a = tri!(reply, self.fs.lookup(parent, name.as_bytes()));
        self.lookups.looked_up(a.ino as u64);
        reply.entry(&TTL, &file_attr(&a), Generation(u64::from(a.generation)));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.counts.count(Op::Getattr);
        let ino = ino!(reply, ino);
        let a = tri!(reply, self.fs.getattr(ino));
        reply.attr(&TTL, &file_attr(&a));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.counts.count(Op::Setattr);
        let ino = ino!(reply, ino);
        // With the write-back cache the kernel sends mtime and ctime as explicit times and
        // only atime as "now"; its ctime is the "now" of this change, so UTIME_NOW gives
        // equal atime, mtime and ctime, as on a kernel file system.
        let ctime = ctime.map(timespec);
        let resolve = |t: TimeOrNow| match (t, ctime) {
            (TimeOrNow::Now, Some(now)) => TimeSet::At(now),
            (t, _) => time_set(t),
        };
        let mut sa = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(resolve),
            mtime: mtime.map(resolve),
            ctime,
        };
        // Under HANDLE_KILLPRIV_V2 the kernel drops its own mode change for chown and
        // truncate and flags the request FATTR_KILL_SUIDGID instead: for chown of a
        // non-directory always, for truncate when the caller lacks CAP_FSETID. fuser 0.18
        // does not decode that flag, so the same conditions are evaluated here (the caller
        // waits for this reply, so its /proc status is there to read). The cleared mode goes
        // into the same core call as the change.
        if self.killpriv && mode.is_none() && (uid.is_some() || gid.is_some() || size.is_some()) {
            let cur = tri!(reply, self.fs.getattr(ino));
            let kill = suidgid_to_kill(cur.mode, || caller_in_group(req, cur.gid));
            if kill != 0
                && !cur.is_dir()
                && (uid.is_some() || gid.is_some() || !caller_has_fsetid(req))
            {
                sa.mode = Some(cur.mode & 0o7777 & !kill);
                RequestCounts::bump(&self.counts.suidgid_kills);
            }
        }
        let a = tri!(reply, self.fs.setattr(ino, &sa));
        reply.attr(&TTL, &file_attr(&a));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.counts.count(Op::Readlink);
        let ino = ino!(reply, ino);
        let target = tri!(reply, self.fs.readlink(ino));
        reply.data(&target);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.counts.count(Op::Mknod);
        let parent = ino!(reply, parent);
        let a = tri!(
            reply,
            self.fs
                .make_node(parent, name.as_bytes(), mode, rdev, creator(req, umask))
        );
        self.lookups.looked_up(a.ino as u64);
        reply.entry(&TTL, &file_attr(&a), Generation(u64::from(a.generation)));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.counts.count(Op::Mkdir);
        let parent = ino!(reply, parent);
        let a = tri!(
            reply,
            self.fs.make_node(
                parent,
                name.as_bytes(),
                libc::S_IFDIR | (mode & 0o7777),
                0,
                creator(req, umask)
            )
        );
        self.lookups.looked_up(a.ino as u64);
        reply.entry(&TTL, &file_attr(&a), Generation(u64::from(a.generation)));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counts.count(Op::Unlink);
        let parent = ino!(reply, parent);
        let pin = self.pin_victim(parent, name.as_bytes());
        if let Err(e) = self.fs.unlink(parent, name.as_bytes()) {
            if let Some(i) = pin {
                self.unpin(i);
            }
            reply.error(errno_of(&e));
            return;
        }
        reply.ok();
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counts.count(Op::Rmdir);
        let parent = ino!(reply, parent);
        let pin = self.pin_victim(parent, name.as_bytes());
        if let Err(e) = self.fs.rmdir(parent, name.as_bytes()) {
            if let Some(i) = pin {
                self.unpin(i);
            }
            reply.error(errno_of(&e));
            return;
        }
        reply.ok();
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.counts.count(Op::Symlink);
        let parent = ino!(reply, parent);
        let a = tri!(
            reply,
            self.fs.symlink(
                parent,
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
                req.uid(),
                req.gid()
            )
        );
        self.lookups.looked_up(a.ino as u64);
        reply.entry(&TTL, &file_attr(&a), Generation(u64::from(a.generation)));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.counts.count(Op::Rename);
        let parent = ino!(reply, parent);
        let newparent = ino!(reply, newparent);
        // RENAME_WHITEOUT too: overlayfs takes an upper directory only on a file system
        // that has it (with d_type and trusted.* xattrs).
        let known = fuser::RenameFlags::RENAME_NOREPLACE
            | fuser::RenameFlags::RENAME_EXCHANGE
            | fuser::RenameFlags::RENAME_WHITEOUT;
        if !known.contains(flags) {
            reply.error(Errno::EINVAL);
            return;
        }
        let f = RenameFlags {
            noreplace: flags.contains(fuser::RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(fuser::RenameFlags::RENAME_EXCHANGE),
            whiteout: flags.contains(fuser::RenameFlags::RENAME_WHITEOUT),
        };
        // The whiteout's owner: the caller, as for a create (its mode is 0: no umask).
        let who = creator(req, 0);
        let pin = if f.exchange {
            None
        } else {
            self.pin_victim(newparent, newname.as_bytes())
        };
        if let Err(e) = self.fs.rename_as(
            parent,
            name.as_bytes(),
            newparent,
            newname.as_bytes(),
            f,
            who,
        ) {
            if let Some(i) = pin {
                self.unpin(i);
            }
            reply.error(errno_of(&e));
            return;
        }
        reply.ok();
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.counts.count(Op::Link);
        let ino = ino!(reply, ino);
        let newparent = ino!(reply, newparent);
        let a = tri!(reply, self.fs.link(ino, newparent, newname.as_bytes()));
        self.lookups.looked_up(a.ino as u64);
        reply.entry(&TTL, &file_attr(&a), Generation(u64::from(a.generation)));
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.counts.count(Op::Open);
        if self.kernel_opens {
            // The kernel records `no_open` for the connection: it opens every regular file
            // from now on without asking (FOPEN_KEEP_CACHE, fh 0) and sends no RELEASE.
            reply.error(Errno::ENOSYS);
            return;
        }
        let ino = ino!(reply, ino);
        let a = tri!(reply, self.fs.open(ino));
        reply.opened(FileHandle(0), self.open_flags(&a));
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.counts.count(Op::Read);
        let ino = ino!(reply, ino);
        let mut buf = vec![0u8; size as usize];
        let n = tri!(reply, self.fs.read(ino, offset, &mut buf));
        reply.data(&buf[..n]);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.counts.count(Op::Write);
        self.counts
            .write_bytes
            .fetch_add(data.len() as u64, Relaxed);
        let ino = ino!(reply, ino);
        let t0 = std::time::Instant::now();
        self.serve_write(req, ino, offset, data, write_flags, flags, reply);
        self.counts
            .write_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.counts.count(Op::Flush);
        // Nothing to do here (data reaches the core on WRITE, and the kernel has already
        // sent the dirty pages and times before FLUSH), so answer ENOSYS: the kernel then
        // sets `no_flush` for the connection and stops sending FLUSH on every close(2), one
        // synchronous round trip less per close. Its close path is otherwise unchanged: it
        // still writes back the file's pages and times (`write_inode_now`) and reports their
        // errors.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.counts.count(Op::Release);
        if self.kernel_opens {
            // Nothing was opened in the core (no RELEASE is expected at all; see `open`).
            reply.ok();
            return;
        }
        let ino = ino!(reply, ino);
        tri!(reply, self.fs.release(ino));
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.counts.count(Op::Fsync);
        let ino = ino!(reply, ino);
        let t0 = std::time::Instant::now();
        let r = self.fs.fsync(ino, datasync);
        self.counts
            .fsync_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        tri!(reply, r);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.counts.count(Op::Opendir);
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.counts.count(Op::Releasedir);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.counts.count(Op::Readdir);
        let ino = ino!(reply, ino);
        let listed = self.list_entries(ino, offset, |e| {
            Ok(reply.add(
                fuse_ino(e.ino),
                e.next_offset,
                dirent_type(e.ftype),
                OsStr::from_bytes(&e.name),
            ))
        });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    /// READDIR with each entry's attributes. Every entry but `.` and `..` counts as a
    /// lookup, as the kernel counts it (`fuse_direntplus_link` links it, or sends a FORGET
    /// of it when it cannot); `.` and `..` it ignores (counted, every listing of a removed
    /// directory pinned it until the unmount: scripts/readdirplus-check.py). An entry whose
    /// inode is gone by the time its attributes are read (an unlink raced the listing) is
    /// left out, as READDIR may leave out entries removed since the directory was opened.
    /// An error after some entries were added ends the reply with those, so that none is
    /// counted unsent.
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.counts.count(Op::Readdirplus);
        let ino = ino!(reply, ino);
        let mut added = 0usize;
        let listed = self.list_entries(ino, offset, |e| {
            let a = match self.fs.getattr(e.ino) {
                Ok(a) => a,
                Err(Error::NotFound) => return Ok(false),
                Err(err) => return Err(err),
            };
            if reply.add(
                fuse_ino(e.ino),
                e.next_offset,
                OsStr::from_bytes(&e.name),
                &TTL,
                &file_attr(&a),
                Generation(u64::from(a.generation)),
            ) {
                return Ok(true); // the buffer is full: this entry was not added
            }
            added += 1;
            if e.name != b"." && e.name != b".." {
                self.lookups.looked_up(a.ino as u64);
            }
            Ok(false)
        });
        match listed {
            Err(e) if added == 0 => reply.error(errno_of(&e)),
            _ => reply.ok(),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.counts.count(Op::Fsyncdir);
        let ino = ino!(reply, ino);
        tri!(reply, self.fs.fsync(ino, datasync));
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.counts.count(Op::Statfs);
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks,
            s.blocks_free,
            s.blocks_free,
            s.files,
            s.files_free,
            s.block_size,
            s.name_max,
            s.block_size,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.counts.count(Op::Setxattr);
        let ino = ino!(reply, ino);
        let mode = match flags {
            0 => XattrMode::Any,
            XATTR_CREATE => XattrMode::Create,
            XATTR_REPLACE => XattrMode::Replace,
            _ => {
                reply.error(Errno::EINVAL);
                return;
            }
        };
        tri!(reply, self.fs.setxattr(ino, name.as_bytes(), value, mode));
        if self.cfg.core.acl && name.as_bytes() == ACL_ACCESS_NAME {
            tri!(reply, self.acl_kill_sgid(req, ino));
        }
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.counts.count(Op::Getxattr);
        let ino = ino!(reply, ino);
        let v = tri!(reply, self.fs.getxattr(ino, name.as_bytes()));
        reply_xattr(reply, &v, size);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.counts.count(Op::Listxattr);
        let ino = ino!(reply, ino);
        let names = tri!(reply, self.fs.listxattr(ino));
        let mut buf = Vec::new();
        for n in names {
            buf.extend_from_slice(&n);
            buf.push(0);
        }
        reply_xattr(reply, &buf, size);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counts.count(Op::Removexattr);
        let ino = ino!(reply, ino);
        tri!(reply, self.fs.removexattr(ino, name.as_bytes()));
        reply.ok();
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.counts.count(Op::Access);
        let ino = ino!(reply, ino);
        let a = tri!(reply, self.fs.getattr(ino));
        let want = mask.bits() as u32 & 0o7;
        if req.uid() == 0 {
            // root: everything but execute of a file nobody may execute.
            if want & 1 != 0 && !a.is_dir() && a.mode & 0o111 == 0 {
                reply.error(Errno::EACCES);
            } else {
                reply.ok();
            }
            return;
        }
        let shift = if req.uid() == a.uid {
            6
        } else if req.gid() == a.gid {
            3
        } else {
            0
        };
        if (a.mode >> shift) & want == want {
            reply.ok();
        } else {
            reply.error(Errno::EACCES);
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        self.counts.count(Op::Create);
        if self.kernel_opens {
            // The kernel records `no_create` and makes the file with MKNOD (same mode, umask
            // and ACL inheritance: `mknod`), then opens it itself: LOOKUP + MKNOD per new
            // file instead of LOOKUP + CREATE + RELEASE.
            reply.error(Errno::ENOSYS);
            return;
        }
        let parent = ino!(reply, parent);
        let a = tri!(
            reply,
            self.fs.make_node(
                parent,
                name.as_bytes(),
                libc::S_IFREG | (mode & 0o7777),
                0,
                creator(req, umask)
            )
        );
        let a = tri!(reply, self.fs.open(a.ino));
        self.lookups.looked_up(a.ino as u64);
        reply.created(
            &TTL,
            &file_attr(&a),
            Generation(u64::from(a.generation)),
            FileHandle(0),
            self.open_flags(&a),
        );
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.counts.count(Op::Fallocate);
        let ino = ino!(reply, ino);
        let m = match mode {
            0 => FallocMode::Allocate,
            FALLOC_FL_KEEP_SIZE => FallocMode::KeepSize,
            m if m == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE => FallocMode::PunchHole,
            FALLOC_FL_ZERO_RANGE => FallocMode::ZeroRange,
            m if m == FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE => FallocMode::ZeroRangeKeepSize,
            _ => {
                reply.error(Errno::EOPNOTSUPP);
                return;
            }
        };
        // Under HANDLE_KILLPRIV_V2 the kernel leaves the clearing of setuid/setgid that
        // fallocate does (`file_modified`) to us, as for a write (until 2026-11-28 it was
        // left undone: a punched hole kept a setuid file setuid).
        if self.killpriv {
            tri!(reply, self.kill_suidgid(req, ino, true));
        }
        tri!(reply, self.fs.fallocate(ino, m, offset, length));
        reply.ok();
    }

    // ---- requests the kernel can do itself (see the module header) ----

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: i64,
        _whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        self.counts.count(Op::Other);
        reply.error(Errno::ENOSYS);
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.counts.count(Op::Other);
        reply.error(Errno::ENOSYS);
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        self.counts.count(Op::Other);
        // No ioctls: what the caller gets for an unknown one on any file system.
        reply.error(Errno::ENOTTY);
    }

    fn bmap(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _blocksize: u32,
        _idx: u64,
        reply: fuser::ReplyBmap,
    ) {
        self.counts.count(Op::Other);
        reply.error(Errno::ENOSYS);
    }

    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ph: fuser::PollNotifier,
        _events: fuser::PollEvents,
        _flags: fuser::PollFlags,
        reply: fuser::ReplyPoll,
    ) {
        self.counts.count(Op::Other);
        reply.error(Errno::ENOSYS);
    }

    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        reply: fuser::ReplyLock,
    ) {
        self.counts.count(Op::Other);
        reply.error(Errno::ENOSYS);
    }

    fn setlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        _sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.counts.count(Op::Other);
        reply.error(Errno::ENOSYS);
    }
}

/// getxattr/listxattr reply: size 0 asks for the size; a smaller buffer is ERANGE.
fn reply_xattr(reply: ReplyXattr, data: &[u8], size: u32) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_kernel_refuses_in_a_listing_are_left_out() {
        for ok in [&b"a"[..], b".", b"..", b"\xff\xfe", b"a b\\c"] {
            assert!(listable(3, ok), "{ok:?}");
        }
        for bad in [&b""[..], b"a/b", b"/", b"a\0b"] {
            assert!(!listable(3, bad), "{bad:?}");
        }
    }

    #[test]
    fn every_op_is_counted_under_its_own_name() {
        for (i, &(op, _)) in Op::ALL.iter().enumerate() {
            assert_eq!(op as usize, i, "{op:?} is not at its own index");
        }
        let names: HashSet<&str> = Op::ALL.iter().map(|o| o.1).collect();
        assert_eq!(names.len(), Op::ALL.len());
        let c = RequestCounts::default();
        c.count(Op::Create);
        c.count(Op::Create);
        c.count(Op::Flush);
        assert_eq!(c.get(Op::Create), 2);
        let s = c.summary();
        assert!(s.starts_with("FUSE requests: write 0 "), "{s}");
        assert!(s.ends_with("by opcode: flush 1, create 2"), "{s}");
    }

    #[test]
    fn a_direct_or_write_back_write_that_stored_part_answers_the_error() {
        // Direct I/O cannot take a short count (the kernel makes it EIO), nor can write-back.
        let direct = OpenFlags(libc::O_WRONLY | libc::O_DIRECT);
        assert!(error_after_part_written(WriteFlags::empty(), direct));
        assert!(error_after_part_written(
            WriteFlags::FUSE_WRITE_CACHE,
            OpenFlags(libc::O_RDWR)
        ));
        // A plain write-through write(2) (-o nowriteback) returns the short count.
        assert!(!error_after_part_written(
            WriteFlags::empty(),
            OpenFlags(libc::O_WRONLY | libc::O_APPEND)
        ));
    }

    #[test]
    fn inode_numbers_are_a_bijection() {
        for n in [1u32, 2, 3, 4, 1000, u32::MAX] {
            assert_eq!(core_ino(fuse_ino(n)), Ok(n));
        }
        assert_eq!(core_ino(INodeNo(1)), Ok(ROOT_INO));
        assert_eq!(fuse_ino(ROOT_INO), INodeNo(1));
        assert!(core_ino(INodeNo(u64::MAX)).is_err());
    }

    #[test]
    fn setid_bits_a_write_clears() {
        let member = || true;
        let outsider = || false;
        assert_eq!(suidgid_to_kill(0o100644, outsider), 0);
        assert_eq!(suidgid_to_kill(0o104755, member), libc::S_ISUID);
        assert_eq!(
            suidgid_to_kill(0o106775, member),
            libc::S_ISUID | libc::S_ISGID
        );
        // setgid without group execute stays for a member of the file's group ...
        assert_eq!(suidgid_to_kill(0o102644, member), 0);
        assert_eq!(suidgid_to_kill(0o106745, member), libc::S_ISUID);
        // ... and goes for anyone else (Linux 6.2's setattr_should_drop_sgid).
        assert_eq!(suidgid_to_kill(0o102644, outsider), libc::S_ISGID);
        assert_eq!(
            suidgid_to_kill(0o106745, outsider),
            libc::S_ISUID | libc::S_ISGID
        );
    }

    #[test]
    fn cap_fsetid_from_proc_status() {
        let root = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert!(cap_eff_has_fsetid(root));
        let user = "CapPrm:\t0000000000000010\nCapEff:\t0000000000000000\n";
        assert!(
            !cap_eff_has_fsetid(user),
            "a permitted but not effective cap"
        );
        assert!(cap_eff_has_fsetid("CapEff:\t0000000000000010\n"));
        assert!(!cap_eff_has_fsetid("CapEff:\tzz\n"));
        assert!(!cap_eff_has_fsetid(""));
    }

    #[test]
    fn times_from_and_to_fuser() {
        for t in [
            Timespec { sec: 0, nsec: 0 },
            Timespec {
                sec: 1_700_000_000,
                nsec: 123,
            },
        ] {
            assert_eq!(timespec(system_time(t)), t);
        }
        // fuser's encoding of the kernel's (-1000, 5).
        assert_eq!(
            timespec(UNIX_EPOCH - Duration::new(1000, 5)),
            Timespec {
                sec: -1000,
                nsec: 5
            }
        );
        // The earliest time the kernel sends (utimensat clamps to i64::MIN s, nsec 0):
        // stored as given, not a second later.
        assert_eq!(
            timespec(UNIX_EPOCH - Duration::new(1 << 63, 0)),
            Timespec {
                sec: i64::MIN,
                nsec: 0
            }
        );
        // Outgoing: -1000 s + 5 ns.
        assert_eq!(
            UNIX_EPOCH
                .duration_since(system_time(Timespec {
                    sec: -1000,
                    nsec: 5
                }))
                .unwrap(),
            Duration::new(999, 999_999_995)
        );
    }
}
