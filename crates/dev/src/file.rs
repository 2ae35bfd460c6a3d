//! Image-file and block-device backend: positional I/O on one descriptor.
//! flush = fdatasync; discard = punch-hole on a regular file, BLKDISCARD on a block device.
//!
//! Lock order: no locks (pread/pwrite are positional and thread-safe).

use crate::{
    check_range, check_request, BlockDevice, Capabilities, Completion, DevError, DevResult,
    BLOCK_SIZE_U64,
};
use rustix::fs::{FallocateFlags, FileType};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

pub struct FileDevice {
    file: File,
    caps: Capabilities,
    is_block_device: bool,
    read_only: bool,
}

// From linux/fs.h: _IO(0x12, 119) and _IOR(0x12, 114, size_t).
const BLKDISCARD: libc::c_ulong = 0x1277;
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

impl FileDevice {
    /// Open an existing image file or block device.
    pub fn open(path: &Path, read_only: bool) -> DevResult<Self> {
        let file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        Self::from_file(file, read_only)
    }

    /// Create (or truncate to) an image file of `bytes` bytes, sparse.
    pub fn create(path: &Path, bytes: u64) -> DevResult<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(bytes)?;
        Self::from_file(file, false)
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
        Ok(FileDevice {
            file,
            caps,
            is_block_device,
            read_only,
        })
    }
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
        self.file.write_all_at(buf, addr * BLOCK_SIZE_U64)?;
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
}
