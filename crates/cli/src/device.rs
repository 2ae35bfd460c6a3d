//! Opening a volume's image file or block device, with the errors a user can act on, and
//! the advisory lock that keeps two processes from mounting (or checking and mounting) one
//! volume at the same time.
//!
//! Lock protocol (flock(2) on the image file or device node): a mount holds an exclusive
//! lock for its whole life; mkfs takes it exclusively; fsck and inspect take it shared.
//! A process killed with SIGKILL releases its lock with its descriptors.

use anyhow::{anyhow, bail, Context, Result};
use flashlog_dev::{BlockDevice, FileDevice};
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A held lock on a volume (released on drop).
pub struct VolumeLock {
    _lock: Flock<File>,
}

/// How a command wants to use the volume.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// mount, mkfs: nobody else may use it.
    Exclusive,
    /// fsck, inspect: fine alongside other readers, not alongside a mount.
    Shared,
}

/// Check that `path` is an image file or a block device.
pub fn check_target(path: &Path) -> Result<()> {
    let md = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow!(
            "{} does not exist (create an image with `flashlog mkfs --size 1G {}`)",
            path.display(),
            path.display()
        ),
        std::io::ErrorKind::PermissionDenied => anyhow!(
            "permission denied on {} (run as root or fix its permissions)",
            path.display()
        ),
        _ => anyhow!("cannot stat {}: {e}", path.display()),
    })?;
    let ft = md.file_type();
    if ft.is_dir() {
        bail!(
            "{} is a directory; give an image file or a block device",
            path.display()
        );
    }
    if !ft.is_file() && !ft.is_block_device() {
        bail!(
            "{} is neither a regular file nor a block device",
            path.display()
        );
    }
    Ok(())
}

/// How long to wait for a volume's lock. `umount` returns as soon as the kernel lets go of
/// the mount, while the daemon is still writing its final checkpoint; `umount DIR && flashlog
/// fsck IMG` must wait for that rather than fail.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// Take the volume lock (waiting up to `LOCK_WAIT` for a finishing mount), or say who
/// holds it.
pub fn lock(path: &Path, access: Access) -> Result<VolumeLock> {
    let arg = match access {
        Access::Exclusive => FlockArg::LockExclusiveNonblock,
        Access::Shared => FlockArg::LockSharedNonblock,
    };
    let start = Instant::now();
    let mut told = false;
    loop {
        let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        match Flock::lock(f, arg) {
            Ok(l) => return Ok(VolumeLock { _lock: l }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) if start.elapsed() < LOCK_WAIT => {
                if !told && start.elapsed() > Duration::from_secs(1) {
                    eprintln!("flashlog: waiting for the flashlog process using {} to finish...", path.display());
                    told = true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                return Err(anyhow!(
                    "{} is in use: it is mounted (or being checked) by another flashlog process; unmount it first (`umount MOUNTPOINT`)",
                    path.display()
                ))
            }
            Err((_, e)) => return Err(anyhow!("cannot lock {}: {e}", path.display())),
        }
    }
}

/// Take the lock only if it is free now (inspect: fine to read a mounted volume).
pub fn try_lock_now(path: &Path) -> Option<VolumeLock> {
    let f = File::open(path).ok()?;
    Flock::lock(f, FlockArg::LockSharedNonblock)
        .ok()
        .map(|l| VolumeLock { _lock: l })
}

/// Open the volume's device (after `check_target`).
pub fn open(path: &Path, read_only: bool) -> Result<Arc<FileDevice>> {
    open_with(path, read_only, false)
}

/// `open`, with the `O_DIRECT` path for large writes on or off (`image_io=`).
pub fn open_with(path: &Path, read_only: bool, direct: bool) -> Result<Arc<FileDevice>> {
    check_target(path)?;
    let mut dev = FileDevice::open(path, read_only)
        .map_err(|e| anyhow!("cannot open {}: {e}", path.display()))?;
    if direct {
        dev.set_direct_writes(true);
    }
    if dev.capabilities().block_count == 0 {
        bail!(
            "{} is empty; make a volume with `flashlog mkfs --size 1G {}`",
            path.display(),
            path.display()
        );
    }
    Ok(Arc::new(dev))
}

/// Explain a core error from reading or mounting a volume.
pub fn explain(path: &Path, e: flashlog_core::Error) -> anyhow::Error {
    match e {
        // A valid superblock of a larger volume: the image was shrunk (or a partition is
        // smaller than the volume on it). mkfs would destroy it; restoring the size may not.
        flashlog_core::Error::Corrupt(why) if why.contains("blocks on a device of") => anyhow!(
            "{} holds a Flashlog volume larger than the device ({why}); if the image file was truncated, restore its size (e.g. `truncate -s SIZE {}`) before anything else",
            path.display(),
            path.display()
        ),
        flashlog_core::Error::Corrupt(why) if why.contains("superblock") => anyhow!(
            "{} does not hold a Flashlog volume ({why}); make one with `flashlog mkfs {}`",
            path.display(),
            path.display()
        ),
        flashlog_core::Error::Corrupt(why) => anyhow!(
            "{} is corrupt: {why}; run `flashlog fsck {}` for details",
            path.display(),
            path.display()
        ),
        e => anyhow!("{}: {e}", path.display()),
    }
}
