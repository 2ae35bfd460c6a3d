//! Image-file and block-device backend: positional I/O on the volume's file.
//! flush = fdatasync; discard = punch-hole on a regular file, BLKDISCARD on a block device.
//!
//! Large writes (the log heads' buffers, [`DIRECT_MIN_BYTES`] and up) start the host's
//! write-back of their range at once (`sync_file_range(SYNC_FILE_RANGE_WRITE)`), so the next
//! `flush` waits only for what is still in flight instead of writing every dirty page of the
//! image at that moment (issue 13: the image's `fdatasync` was 0.21 s of a 0.7 s, 512 MiB
//! sequential job through the mount; 2 ms after). Small writes (checkpoint, NAT, SIT blocks,
//! rewritten often) are left to the host's own write-back.
//!
//! Optionally ([`FileDevice::set_direct_writes`], the mount's `image_io=direct`) large writes
//! go through a second descriptor opened with `O_DIRECT` instead: no copy into the host's page
//! cache, which then holds no second copy of the log. It measured slower on the development
//! VM's disk (each thread waits for its 256 KiB write; docs/BENCHMARKS.md "Queue depth and the
//! image's I/O"), so it is not the default. A buffer that is not 4 KiB-aligned in memory goes
//! through a per-thread aligned bounce buffer (the core's log buffers are aligned). Where the
//! file system under the image refuses `O_DIRECT` (tmpfs, at open; some FUSE file systems, at
//! the first write: `EINVAL`) writes stay buffered. Either way a write is durable only after
//! `flush`, as the trait says: the fdatasync covers the disk's cache and the image's block
//! allocation. Mixing both descriptors is coherent: the kernel writes back and drops cached
//! pages of a range before and after a direct write to it.
//!
//! Volume lock: every `FileDevice` holds an advisory `flock(2)` on its image file or device
//! node for its whole life, exclusive when it may write, shared when read-only (fsck,
//! inspect, a read-only mount), so that two users never mount one volume, or mkfs or
//! fsck it under a mount, whether they are `flashlog` commands or programs linking the
//! core, in one process or several. A busy volume is refused at once
//! ([`DevError::InUse`]); the CLI retries for a while, since `umount` returns before the
//! daemon's final checkpoint. A loop device takes the lock on its backing image too (two
//! inodes, one volume), and a block device opened to write is opened `O_EXCL` (a device the
//! kernel has mounted is [`DevError::Busy`]) and must not be read-only
//! ([`DevError::ReadOnlyDevice`]). [`FileDevice::open_unlocked`] reads a volume in use
//! (`flashlog inspect` of a mounted volume). A process killed with SIGKILL releases its
//! lock with its descriptors.
//!
//! Lock order: no locks (pread/pwrite are positional and thread-safe; the bounce buffer is
//! thread-local).

use crate::{
    check_range, check_request, BlockDevice, Capabilities, Completion, DevError, DevResult,
    BLOCK_SIZE_U64,
};
use rustix::fs::{FallocateFlags, FileType, FlockOperation};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Writes at least this long go through the `O_DIRECT` descriptor (or, buffered, start the
/// host's write-back at once): the log heads' buffers (up to 256 KiB), not single metadata
/// blocks.
pub const DIRECT_MIN_BYTES: usize = 64 << 10;
/// `O_DIRECT` memory and offset alignment (the largest logical block size in use): a
/// buffer aligned to it in memory is written as it is, any other through a bounce copy.
pub const DIRECT_ALIGN: usize = 4096;

pub struct FileDevice {
    file: File,
    /// The same file opened with `O_DIRECT` for large writes; `None`: buffered only.
    direct: Option<File>,
    /// Cleared when the file system under the image refused a direct write (`EINVAL`).
    direct_ok: AtomicBool,
    caps: Capabilities,
    is_block_device: bool,
    read_only: bool,
    /// A loop device's backing file, held for its volume lock (`lock_loop_backing_file`).
    backing: Option<File>,
}

// From linux/fs.h: _IO(0x12, 119), _IOR(0x12, 114, size_t) and _IO(0x12, 94).
const BLKDISCARD: libc::c_ulong = 0x1277;
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const BLKROGET: libc::c_ulong = 0x125e;

impl FileDevice {
    /// Open an existing image file or block device, and take its volume lock (module
    /// header): exclusive for reading and writing, shared for `read_only`. A volume that
    /// another user holds is refused with [`DevError::InUse`].
    pub fn open(path: &Path, read_only: bool) -> DevResult<Self> {
        let is_block_device = std::fs::metadata(path)
            .map(|m| m.file_type().is_block_device())
            .unwrap_or(false);
        let file = if is_block_device && !read_only {
            open_block_device_to_write(path)?
        } else {
            OpenOptions::new().read(true).write(!read_only).open(path)?
        };
        lock(&file, path, !read_only)?;
        let backing = if is_block_device {
            lock_loop_backing_file(&file, path, !read_only)?
        } else {
            None
        };
        let mut dev = Self::from_file(file, read_only)?;
        if is_block_device && !read_only && block_device_read_only(&dev.file)? {
            return Err(DevError::ReadOnlyDevice(path.display().to_string()));
        }
        dev.backing = backing;
        Ok(dev)
    }

    /// Open an image file or block device read-only without its volume lock, to read a
    /// volume that may be mounted (what it reads may be mid-change).
    pub fn open_unlocked(path: &Path) -> DevResult<Self> {
        let file = OpenOptions::new().read(true).open(path)?;
        Self::from_file(file, true)
    }

    /// Create an image file of `bytes` bytes, sparse, and take its volume lock. An
    /// existing file is truncated first and its contents are lost, a volume included
    /// (after its lock is taken: a volume in use is refused): to use an existing volume
    /// again, [`FileDevice::open`] it.
    pub fn create(path: &Path, bytes: u64) -> DevResult<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        lock(&file, path, true)?;
        file.set_len(0)?;
        file.set_len(bytes)?;
        Self::from_file(file, false)
    }

    /// Resize an image file (not a block device) to `bytes`: what lies past the new end is
    /// lost, a new end reads as zeros.
    pub fn set_len(&mut self, bytes: u64) -> DevResult<()> {
        if self.read_only {
            return Err(DevError::ReadOnly);
        }
        if self.is_block_device {
            return Err(DevError::Unsupported("resizing a block device".into()));
        }
        self.file.set_len(bytes)?;
        self.caps.block_count = bytes / BLOCK_SIZE_U64;
        Ok(())
    }

    fn from_file(file: File, read_only: bool) -> DevResult<Self> {
        let st = rustix::fs::fstat(&file).map_err(std::io::Error::from)?;
        let is_block_device = FileType::from_raw_mode(st.st_mode) == FileType::BlockDevice;
        let bytes = if is_block_device {
            let mut size: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at `size`.
            let rc =
                unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) };
            if rc != 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            size
        } else {
            st.st_size as u64
        };
        let mut caps = Capabilities::plain(
            if is_block_device {
                "block-device"
            } else {
                "image-file"
            },
            bytes / BLOCK_SIZE_U64,
        );
        caps.persistent = true;
        caps.read_only = read_only;
        Ok(FileDevice {
            file,
            direct: None,
            direct_ok: AtomicBool::new(false),
            caps,
            is_block_device,
            read_only,
            backing: None,
        })
    }

    /// Turn the `O_DIRECT` path for large writes on (where the file system under the image
    /// allows it) or off (every write buffered, the default).
    pub fn set_direct_writes(&mut self, on: bool) {
        self.direct = if on && !self.read_only {
            self.direct.take().or_else(|| open_direct(&self.file))
        } else {
            None
        };
        self.direct_ok = AtomicBool::new(self.direct.is_some());
    }

    /// Whether large writes go through `O_DIRECT` now.
    pub fn direct_writes(&self) -> bool {
        self.direct.is_some() && self.direct_ok.load(Ordering::Relaxed)
    }

    /// A direct write of `buf` at byte `off`, through the thread's aligned bounce buffer
    /// when `buf` itself is not aligned.
    fn write_direct(d: &File, buf: &[u8], off: u64) -> std::io::Result<()> {
        if (buf.as_ptr() as usize) % DIRECT_ALIGN == 0 {
            return d.write_all_at(buf, off);
        }
        thread_local! {
            static BOUNCE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BOUNCE.with(|b| {
            let mut b = b.borrow_mut();
            if b.len() < buf.len() + DIRECT_ALIGN {
                b.resize(buf.len() + DIRECT_ALIGN, 0);
            }
            let at = b.as_ptr().align_offset(DIRECT_ALIGN);
            let aligned = &mut b[at..at + buf.len()];
            aligned.copy_from_slice(buf);
            d.write_all_at(aligned, off)
        })
    }
}

/// Take `file`'s volume lock (module header) without waiting.
/// Open a block device to write it, exclusively (`O_EXCL`): a device the kernel has mounted
/// or another program claimed (device-mapper, RAID, `O_EXCL` openers) is refused with
/// [`DevError::Busy`] before anything is written. A device busy only because a flashlog
/// user holds it (its own `O_EXCL` open, released when its daemon exits) is opened without
/// `O_EXCL`, so that `lock` sees that user's lock and says [`DevError::InUse`], which the
/// CLI waits for.
fn open_block_device_to_write(path: &Path) -> DevResult<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = OpenOptions::new();
    opts.read(true).write(true);
    match opts.clone().custom_flags(libc::O_EXCL).open(path) {
        Ok(f) => Ok(f),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            let f = opts.open(path)?;
            match rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive) {
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    Err(DevError::InUse(path.display().to_string()))
                }
                _ => Err(DevError::Busy(path.display().to_string())),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// The kernel's read-only flag of a block device (`BLKROGET`): a read-only loop device
/// (`losetup -r`) still opens for writing, and every write then fails.
fn block_device_read_only(file: &File) -> DevResult<bool> {
    let mut ro: libc::c_int = 0;
    // SAFETY: BLKROGET writes one int through the pointer, which points at `ro`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKROGET as _, &mut ro as *mut libc::c_int) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(ro != 0)
}

/// When `file` is a loop device, take the volume lock on its backing file too (kept open
/// for the device's life): the loop device and its image are different inodes, so without
/// it one volume could be mounted twice, through the image and through a loop device over
/// it (or two loop devices over one image), each mount overwriting the other's log. The
/// backing file is found through sysfs; one that can no longer be opened (deleted, or in
/// another mount namespace) is not locked.
fn lock_loop_backing_file(file: &File, path: &Path, exclusive: bool) -> DevResult<Option<File>> {
    let st = rustix::fs::fstat(file).map_err(std::io::Error::from)?;
    let (major, minor) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
    let Ok(name) =
        std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/loop/backing_file"))
    else {
        return Ok(None);
    };
    let name = name.trim_end_matches('\n');
    if name.is_empty() || name.ends_with(" (deleted)") {
        return Ok(None);
    }
    let Ok(backing) = File::open(name) else {
        return Ok(None);
    };
    let what = format!("{} (the image behind it, {name})", path.display());
    lock(&backing, Path::new(&what), exclusive)?;
    Ok(Some(backing))
}

fn lock(file: &File, path: &Path, exclusive: bool) -> DevResult<()> {
    let op = if exclusive {
        FlockOperation::NonBlockingLockExclusive
    } else {
        FlockOperation::NonBlockingLockShared
    };
    match rustix::fs::flock(file, op) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(DevError::InUse(path.display().to_string())),
        Err(e) => Err(std::io::Error::from(e).into()),
    }
}

/// The file behind `file` opened again for writing with `O_DIRECT` (through /proc/self/fd,
/// which reopens the same inode); `None` where the file system does not support it.
fn open_direct(file: &File) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
}

impl BlockDevice for FileDevice {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        check_request(&self.caps, addr, buf.len())?;
        self.file.read_exact_at(buf, addr * BLOCK_SIZE_U64)?;
        Ok(Completion::empty())
    }

    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        if self.read_only {
            return Err(DevError::ReadOnly);
        }
        check_request(&self.caps, addr, buf.len())?;
        let off = addr * BLOCK_SIZE_U64;
        if buf.len() >= DIRECT_MIN_BYTES && self.direct_ok.load(Ordering::Relaxed) {
            if let Some(d) = &self.direct {
                match Self::write_direct(d, buf, off) {
                    Ok(()) => return Ok(Completion::empty()),
                    // The file system under the image takes no direct I/O (or not at this
                    // alignment): buffered from now on, this buffer rewritten whole below.
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        self.direct_ok.store(false, Ordering::Relaxed);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        self.file.write_all_at(buf, off)?;
        if buf.len() >= DIRECT_MIN_BYTES {
            // Start the host's write-back of a large (log) write now, so that the next
            // `flush` waits only for what is still in flight instead of writing every dirty
            // page of the image at that moment. Advisory: durability still comes from the
            // fdatasync in `flush`, so a failure here is not an error.
            // SAFETY: sync_file_range reads no memory; the descriptor is open for writing.
            unsafe {
                libc::sync_file_range(
                    self.file.as_raw_fd(),
                    off as libc::off64_t,
                    buf.len() as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
        Ok(Completion::empty())
    }

    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        if self.read_only {
            return Err(DevError::ReadOnly);
        }
        check_range(&self.caps, addr, count)?;
        let (off, len) = (addr * BLOCK_SIZE_U64, count * BLOCK_SIZE_U64);
        if self.is_block_device {
            let range: [u64; 2] = [off, len];
            // SAFETY: BLKDISCARD reads two u64 (offset, length) through the pointer.
            let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), BLKDISCARD as _, range.as_ptr()) };
            if rc != 0 {
                // Devices without discard support: discard is advisory, so not an error.
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                    return Err(e.into());
                }
            }
        } else {
            let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            if let Err(e) = rustix::fs::fallocate(&self.file, flags, off, len) {
                if e != rustix::io::Errno::OPNOTSUPP {
                    return Err(std::io::Error::from(e).into());
                }
            }
        }
        Ok(Completion::empty())
    }

    fn flush(&self) -> DevResult<Completion> {
        if !self.read_only {
            rustix::fs::fdatasync(&self.file).map_err(std::io::Error::from)?;
        }
        Ok(Completion::empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BLOCK_SIZE;

    #[test]
    fn file_roundtrip_and_punch() {
        let dir = std::env::temp_dir().join(format!("flashlog-dev-test-{}", std::process::id()));
        let d = FileDevice::create(&dir, 64 * BLOCK_SIZE_U64).unwrap();
        assert_eq!(d.capabilities().block_count, 64);
        let buf = vec![0xabu8; BLOCK_SIZE * 4];
        d.write(10, &buf).unwrap();
        d.flush().unwrap();
        let mut back = vec![0u8; BLOCK_SIZE * 4];
        d.read(10, &mut back).unwrap();
        assert_eq!(back, buf);
        d.discard(11, 2).unwrap();
        d.read(10, &mut back).unwrap();
        assert_eq!(back[0], 0xab);
        assert!(back[BLOCK_SIZE..3 * BLOCK_SIZE].iter().all(|&b| b == 0));
        assert!(d.read(63, &mut back).is_err());
        std::fs::remove_file(&dir).unwrap();
    }

    /// The volume lock: one writer, or any number of readers; `open_unlocked` reads beside
    /// a writer; `create` refuses an image in use before it truncates anything.
    #[test]
    fn one_writer_or_many_readers_per_image() {
        let path = std::env::temp_dir().join(format!("flashlog-dev-lock-{}", std::process::id()));
        let w = FileDevice::create(&path, 64 * BLOCK_SIZE_U64).unwrap();
        w.write(3, &[7u8; BLOCK_SIZE]).unwrap();
        for ro in [false, true] {
            assert!(matches!(
                FileDevice::open(&path, ro),
                Err(DevError::InUse(_))
            ));
        }
        assert!(matches!(
            FileDevice::create(&path, 64 * BLOCK_SIZE_U64),
            Err(DevError::InUse(_))
        ));
        let peek = FileDevice::open_unlocked(&path).unwrap();
        let mut back = vec![0u8; BLOCK_SIZE];
        peek.read(3, &mut back).unwrap();
        assert_eq!(back[0], 7, "create must not have truncated an image in use");
        drop(w);
        let r1 = FileDevice::open(&path, true).unwrap();
        let _r2 = FileDevice::open(&path, true).unwrap();
        assert!(matches!(
            FileDevice::open(&path, false),
            Err(DevError::InUse(_))
        ));
        drop((r1, _r2));
        let mut w = FileDevice::open(&path, false).unwrap();
        w.set_len(128 * BLOCK_SIZE_U64).unwrap();
        assert_eq!(w.capabilities().block_count, 128);
        drop(w);
        std::fs::remove_file(&path).unwrap();
    }

    /// A pattern that differs per block and per pass, so a stale block is seen.
    fn pattern(blocks: usize, pass: u8) -> Vec<u8> {
        (0..blocks * BLOCK_SIZE)
            .map(|i| (i / BLOCK_SIZE) as u8 ^ pass.wrapping_mul(37) ^ (i % 251) as u8)
            .collect()
    }

    /// Large writes (direct where the file system under the test directory allows it,
    /// through the bounce buffer when misaligned in memory) and small buffered writes over
    /// the same ranges read back as the last write, with either descriptor's data cached.
    #[test]
    fn direct_and_buffered_writes_of_one_range_read_back_the_last() {
        for direct in [true, false] {
            let path = std::env::temp_dir().join(format!(
                "flashlog-dev-direct-{}-{direct}",
                std::process::id()
            ));
            let mut d = FileDevice::create(&path, 256 * BLOCK_SIZE_U64).unwrap();
            d.set_direct_writes(direct);
            if !direct {
                assert!(!d.direct_writes());
            }
            // 32 blocks, in aligned and misaligned (by one byte in memory) buffers.
            let big = DIRECT_MIN_BYTES / BLOCK_SIZE * 2;
            let first = pattern(big, 1);
            d.write(8, &first).unwrap();
            let mut back = vec![0u8; big * BLOCK_SIZE];
            d.read(8, &mut back).unwrap(); // now cached by the buffered descriptor
            assert!(back == first, "direct={direct}: first large write");
            let mut holder = vec![0u8; big * BLOCK_SIZE + 1];
            holder[1..].copy_from_slice(&pattern(big, 2));
            d.write(8, &holder[1..]).unwrap();
            d.read(8, &mut back).unwrap();
            assert!(
                back == holder[1..],
                "direct={direct}: a cached range rewritten large"
            );
            // A small buffered write inside it, then a large write over both.
            let small = pattern(1, 3);
            d.write(10, &small).unwrap();
            let mut one = vec![0u8; BLOCK_SIZE];
            d.read(10, &mut one).unwrap();
            assert!(
                one == small,
                "direct={direct}: small write over a large one"
            );
            let last = pattern(big, 4);
            d.write(8, &last).unwrap();
            d.flush().unwrap();
            d.read(8, &mut back).unwrap();
            assert!(
                back == last,
                "direct={direct}: large write over a small dirty one"
            );
            // And through a fresh open, after the flush.
            drop(d);
            let d = FileDevice::open(&path, true).unwrap();
            d.read(8, &mut back).unwrap();
            assert!(back == last, "direct={direct}: after reopening");
            std::fs::remove_file(&path).unwrap();
        }
    }
}
