//! Thin, checked wrappers over the raw syscalls the checkers use.
//!
//! This module owns every `unsafe` libc call of the crate (apart from
//! `fork`/`mmap` plumbing in the tools themselves): each wrapper turns the C
//! return convention into an `io::Result`, so callers can compare the errno
//! they got with the one POSIX requires.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Converts a path into a NUL-terminated C string (paths never contain NUL here).
pub fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path contains NUL")
}

fn cstr_os(s: &OsStr) -> CString {
    CString::new(s.as_bytes()).expect("string contains NUL")
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Returns the errno carried by an error (0 if it carries none).
pub fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Symbolic name of an errno value, for readable messages.
pub fn errno_name(e: i32) -> &'static str {
    match e {
        0 => "OK",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::ESPIPE => "ESPIPE",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::E2BIG => "E2BIG",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::ESTALE => "ESTALE",
        _ => "E?",
    }
}

/// Formats a result as `OK` or `ENAME (n)` for diagnostics.
pub fn describe<T>(r: &io::Result<T>) -> String {
    match r {
        Ok(_) => "success".to_string(),
        Err(e) => {
            let n = errno_of(e);
            format!("{} ({n})", errno_name(n))
        }
    }
}

pub fn open(p: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = cstr(p);
    let fd = cvt(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn openat(dir: RawFd, p: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = cstr(p);
    let fd = cvt(unsafe {
        libc::openat(
            dir,
            c.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn stat(p: &Path) -> io::Result<libc::stat> {
    let c = cstr(p);
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::stat(c.as_ptr(), &mut st) })?;
    Ok(st)
}

pub fn lstat(p: &Path) -> io::Result<libc::stat> {
    let c = cstr(p);
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::lstat(c.as_ptr(), &mut st) })?;
    Ok(st)
}

pub fn fstat(fd: &impl AsRawFd) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

pub fn read(fd: &impl AsRawFd, buf: &mut [u8]) -> io::Result<usize> {
    cvt_size(unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

pub fn write(fd: &impl AsRawFd, buf: &[u8]) -> io::Result<usize> {
    cvt_size(unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) })
}

pub fn pread(fd: &impl AsRawFd, buf: &mut [u8], off: u64) -> io::Result<usize> {
    cvt_size(unsafe {
        libc::pread(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            off as libc::off_t,
        )
    })
}

pub fn pwrite(fd: &impl AsRawFd, buf: &[u8], off: u64) -> io::Result<usize> {
    cvt_size(unsafe {
        libc::pwrite(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            off as libc::off_t,
        )
    })
}

/// Reads exactly `buf.len()` bytes at `off`, failing on a short read (EOF).
pub fn pread_exact(fd: &impl AsRawFd, buf: &mut [u8], off: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = pread(fd, &mut buf[done..], off + done as u64)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("short read: {done} of {} bytes at offset {off}", buf.len()),
            ));
        }
        done += n;
    }
    Ok(())
}

/// Writes all of `buf` at `off`, retrying short writes.
pub fn pwrite_all(fd: &impl AsRawFd, buf: &[u8], off: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = pwrite(fd, &buf[done..], off + done as u64)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "pwrite wrote 0 bytes",
            ));
        }
        done += n;
    }
    Ok(())
}

/// Reads the whole file behind `fd` from offset 0 up to EOF.
pub fn read_all(fd: &impl AsRawFd) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = pread(fd, &mut buf, out.len() as u64)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

pub fn lseek(fd: &impl AsRawFd, off: i64, whence: i32) -> io::Result<i64> {
    let r = unsafe { libc::lseek(fd.as_raw_fd(), off as libc::off_t, whence) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i64)
    }
}

pub fn ftruncate(fd: &impl AsRawFd, len: i64) -> io::Result<()> {
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) }).map(drop)
}

pub fn truncate(p: &Path, len: i64) -> io::Result<()> {
    let c = cstr(p);
    cvt(unsafe { libc::truncate(c.as_ptr(), len as libc::off_t) }).map(drop)
}

pub fn fallocate(fd: &impl AsRawFd, mode: i32, off: u64, len: u64) -> io::Result<()> {
    cvt(unsafe { libc::fallocate(fd.as_raw_fd(), mode, off as libc::off_t, len as libc::off_t) })
        .map(drop)
}

pub fn fsync(fd: &impl AsRawFd) -> io::Result<()> {
    cvt(unsafe { libc::fsync(fd.as_raw_fd()) }).map(drop)
}

pub fn fdatasync(fd: &impl AsRawFd) -> io::Result<()> {
    cvt(unsafe { libc::fdatasync(fd.as_raw_fd()) }).map(drop)
}

pub fn mkdir(p: &Path, mode: u32) -> io::Result<()> {
    let c = cstr(p);
    cvt(unsafe { libc::mkdir(c.as_ptr(), mode as libc::mode_t) }).map(drop)
}

pub fn rmdir(p: &Path) -> io::Result<()> {
    let c = cstr(p);
    cvt(unsafe { libc::rmdir(c.as_ptr()) }).map(drop)
}

pub fn unlink(p: &Path) -> io::Result<()> {
    let c = cstr(p);
    cvt(unsafe { libc::unlink(c.as_ptr()) }).map(drop)
}

pub fn rename(a: &Path, b: &Path) -> io::Result<()> {
    let (ca, cb) = (cstr(a), cstr(b));
    cvt(unsafe { libc::rename(ca.as_ptr(), cb.as_ptr()) }).map(drop)
}

pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

/// `renameat2(AT_FDCWD, a, AT_FDCWD, b, flags)` through the raw syscall.
pub fn renameat2(a: &Path, b: &Path, flags: u32) -> io::Result<()> {
    let (ca, cb) = (cstr(a), cstr(b));
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            flags,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn link(a: &Path, b: &Path) -> io::Result<()> {
    let (ca, cb) = (cstr(a), cstr(b));
    cvt(unsafe { libc::link(ca.as_ptr(), cb.as_ptr()) }).map(drop)
}

pub fn symlink(target: &Path, p: &Path) -> io::Result<()> {
    let (ct, cp) = (cstr(target), cstr(p));
    cvt(unsafe { libc::symlink(ct.as_ptr(), cp.as_ptr()) }).map(drop)
}

pub fn readlink(p: &Path) -> io::Result<Vec<u8>> {
    let c = cstr(p);
    let mut buf = vec![0u8; 8192];
    let n = cvt_size(unsafe { libc::readlink(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
    buf.truncate(n);
    Ok(buf)
}

pub fn chmod(p: &Path, mode: u32) -> io::Result<()> {
    let c = cstr(p);
    cvt(unsafe { libc::chmod(c.as_ptr(), mode as libc::mode_t) }).map(drop)
}

pub fn fchmod(fd: &impl AsRawFd, mode: u32) -> io::Result<()> {
    cvt(unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) }).map(drop)
}

/// `chown`; pass `u32::MAX` for "leave unchanged" (-1).
pub fn chown(p: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let c = cstr(p);
    cvt(unsafe { libc::chown(c.as_ptr(), uid, gid) }).map(drop)
}

pub fn lchown(p: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let c = cstr(p);
    cvt(unsafe { libc::lchown(c.as_ptr(), uid, gid) }).map(drop)
}

pub fn access(p: &Path, mode: i32) -> io::Result<()> {
    let c = cstr(p);
    cvt(unsafe { libc::access(c.as_ptr(), mode) }).map(drop)
}

/// `utimensat(AT_FDCWD, p, times, flags)`; each time is `(sec, nsec)` where
/// nsec may be `UTIME_NOW`/`UTIME_OMIT`. `None` means both "now".
pub fn utimensat(p: &Path, times: Option<[(i64, i64); 2]>, flags: i32) -> io::Result<()> {
    let c = cstr(p);
    let ts = times.map(|t| {
        [
            libc::timespec {
                tv_sec: t[0].0 as libc::time_t,
                tv_nsec: t[0].1 as _,
            },
            libc::timespec {
                tv_sec: t[1].0 as libc::time_t,
                tv_nsec: t[1].1 as _,
            },
        ]
    });
    let ptr = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    cvt(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ptr, flags) }).map(drop)
}

pub fn mknod(p: &Path, mode: u32, dev: u64) -> io::Result<()> {
    let c = cstr(p);
    cvt(unsafe { libc::mknod(c.as_ptr(), mode as libc::mode_t, dev as libc::dev_t) }).map(drop)
}

pub fn mkfifo(p: &Path, mode: u32) -> io::Result<()> {
    let c = cstr(p);
    cvt(unsafe { libc::mkfifo(c.as_ptr(), mode as libc::mode_t) }).map(drop)
}

pub fn setxattr(p: &Path, name: &str, value: &[u8], flags: i32) -> io::Result<()> {
    let (c, n) = (cstr(p), cstr_os(OsStr::new(name)));
    cvt(unsafe {
        libc::setxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

/// `getxattr` into a buffer of `cap` bytes (cap 0 = size query); returns the value.
pub fn getxattr_sized(p: &Path, name: &str, cap: usize) -> io::Result<(usize, Vec<u8>)> {
    let (c, n) = (cstr(p), cstr_os(OsStr::new(name)));
    let mut buf = vec![0u8; cap];
    let ptr = if cap == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    let len = cvt_size(unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), ptr, cap) })?;
    buf.truncate(len.min(cap));
    Ok((len, buf))
}

pub fn getxattr(p: &Path, name: &str) -> io::Result<Vec<u8>> {
    getxattr_sized(p, name, 65536).map(|(_, v)| v)
}

/// Lists xattr names (split at NUL).
pub fn listxattr(p: &Path) -> io::Result<Vec<String>> {
    let c = cstr(p);
    let mut buf = vec![0u8; 65536];
    let n = cvt_size(unsafe { libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
    Ok(buf[..n]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect())
}

pub fn removexattr(p: &Path, name: &str) -> io::Result<()> {
    let (c, n) = (cstr(p), cstr_os(OsStr::new(name)));
    cvt(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) }).map(drop)
}

pub fn statfs(p: &Path) -> io::Result<libc::statfs> {
    let c = cstr(p);
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::statfs(c.as_ptr(), &mut s) })?;
    Ok(s)
}

pub fn fstatfs(fd: &impl AsRawFd) -> io::Result<libc::statfs> {
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut s) })?;
    Ok(s)
}

/// Sets the process umask, returning the previous one.
pub fn umask(mask: u32) -> u32 {
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// Nanosecond timestamps of a stat buffer: (atime, mtime, ctime).
pub fn times_ns(st: &libc::stat) -> (i128, i128, i128) {
    let f = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
    (
        f(st.st_atime, st.st_atime_nsec),
        f(st.st_mtime, st.st_mtime_nsec),
        f(st.st_ctime, st.st_ctime_nsec),
    )
}

/// File type bits of a mode.
pub fn file_type(mode: u32) -> u32 {
    mode & libc::S_IFMT
}

/// Wall clock in nanoseconds since the epoch.
pub fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}
