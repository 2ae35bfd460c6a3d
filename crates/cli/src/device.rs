//! Opening a volume's image file or block device, with the errors a user can act on, and
//! the advisory lock that keeps two processes from mounting (or checking and mounting) one
//! volume at the same time.
//!
//! Lock protocol: `FileDevice` holds flock(2) on the image file or device node for its
//! life (flashlog-dev's file.rs), so a program linking the core is held to it too: a mount
//! and mkfs hold it exclusively; fsck, inspect and a read-only mount share it. The CLI
//! waits for a volume in use (a finishing mount), inspect reads one without the lock.

use anyhow::{anyhow, bail, Result};
use flashlog_dev::{BlockDevice, DevError, FileDevice};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
/// fsck IMG` must wait for that rather than fail. `FLASHLOG_LOCK_WAIT=SECONDS` sets another
/// wait (0: refuse at once), for scripts that would rather fail fast.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// `LOCK_WAIT`, or the environment's `FLASHLOG_LOCK_WAIT` seconds.
fn lock_wait() -> Duration {
    std::env::var("FLASHLOG_LOCK_WAIT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 86_400.0)
        .map_or(LOCK_WAIT, Duration::from_secs_f64)
}

/// Open the volume's device (after `check_target`), taking its lock (`FileDevice::open`):
/// exclusive to write, shared to read; a volume in use is waited for up to `LOCK_WAIT`.
pub fn open(path: &Path, read_only: bool) -> Result<Arc<FileDevice>> {
    open_with(path, read_only, false)
}

/// `open`, with the `O_DIRECT` path for large writes on or off (`image_io=`).
pub fn open_with(path: &Path, read_only: bool, direct: bool) -> Result<Arc<FileDevice>> {
    let mut dev = not_empty(path, open_device(path, read_only)?)?;
    if direct {
        dev.set_direct_writes(true);
    }
    Ok(Arc::new(dev))
}

/// `open`, not yet shared and perhaps empty (mkfs resizes it first).
pub fn open_device(path: &Path, read_only: bool) -> Result<FileDevice> {
    check_target(path)?;
    let start = Instant::now();
    let wait = lock_wait();
    let mut told = false;
    loop {
        match FileDevice::open(path, read_only) {
            Ok(dev) => return Ok(dev),
            Err(DevError::InUse(_)) if start.elapsed() < wait => {
                if !told && start.elapsed() > Duration::from_secs(1) {
                    eprintln!(
                        "flashlog: waiting for the flashlog process using {} to finish...",
                        path.display()
                    );
                    told = true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(DevError::InUse(_)) => bail!(
                "{} is in use: it is mounted (or being checked) by another flashlog process; unmount it first (`umount MOUNTPOINT`)",
                path.display()
            ),
            Err(DevError::Io(e))
                if !read_only
                    && matches!(
                        e.raw_os_error(),
                        Some(libc::EPERM | libc::EACCES | libc::EROFS)
                    ) =>
            {
                bail!(
                    "cannot open {} for writing: {e}; it may be immutable (chattr +i), on a read-only file system or not writable by this user: to read the volume, mount it with -o ro",
                    path.display()
                )
            }
            Err(e) => bail!("cannot open {}: {e}", path.display()),
        }
    }
}

/// `dev`, unless it has no blocks: an empty image holds no volume.
fn not_empty(path: &Path, dev: FileDevice) -> Result<FileDevice> {
    if dev.capabilities().block_count == 0 {
        let what = match std::fs::metadata(path).map(|m| m.len()) {
            Ok(n) if n > 0 => format!("holds {n} bytes, less than one 4 KiB block"),
            _ => "is empty".to_string(),
        };
        bail!(
            "{} {what}; make a volume with `flashlog mkfs --size 1G {}`",
            path.display(),
            path.display()
        );
    }
    Ok(dev)
}

/// Open the volume to read it, with its lock when it is free now, else without (inspect:
/// fine to read a mounted volume); the flag says whether it is in use.
pub fn open_to_peek(path: &Path) -> Result<(Arc<FileDevice>, bool)> {
    check_target(path)?;
    let (dev, in_use) = match FileDevice::open(path, true) {
        Ok(dev) => (dev, false),
        Err(DevError::InUse(_)) => (
            FileDevice::open_unlocked(path)
                .map_err(|e| anyhow!("cannot open {}: {e}", path.display()))?,
            true,
        ),
        Err(e) => bail!("cannot open {}: {e}", path.display()),
    };
    Ok((Arc::new(not_empty(path, dev)?), in_use))
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
        flashlog_core::Error::NoMemory(why) => {
            anyhow!("{}: not enough memory: {why}; {NO_MEMORY_HINT}", path.display())
        }
        e => anyhow!("{}: {e}", path.display()),
    }
}

/// What to do about a volume whose tables do not fit (mkfs, mount, fsck refuse it before
/// they allocate them).
pub const NO_MEMORY_HINT: &str = "run it where more memory is free (a larger machine, or a \
     higher memory limit of the container, service or cgroup it names)";
