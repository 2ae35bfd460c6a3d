//! Flashlog over FUSE: the kernel-facing adapter of `flashlog_core::Fs` (fuser 0.18).
//!
//! Owns: the `fuser::Filesystem` implementation ([`adapter`]), the one errno mapping
//! ([`errno`]), `-o` option parsing ([`options`]) and the construction of a FUSE session
//! with the kernel knobs of docs/dependencies.md §2 (several request threads each with a
//! cloned `/dev/fuse` fd, write-back cache, 1 MiB writes, parallel directory operations,
//! async direct I/O). Daemonizing, signals and the final checkpoint belong to the `flashlog`
//! binary, which owns the process.
//!
//! Lock order: the adapter takes no locks; see `flashlog_core` for the core's order.

pub mod adapter;
pub mod errno;
pub mod lookups;
pub mod options;

pub use adapter::FlashlogFuse;
pub use errno::errno_of;
pub use options::{parse_size, MountConfig};

use flashlog_core::Fs;
use std::path::Path;
use std::sync::Arc;

/// The fuser session configuration of a mount of `source` with `cfg`.
pub fn session_config(source: &str, cfg: &MountConfig) -> fuser::Config {
    use fuser::MountOption as M;
    let mut c = fuser::Config::default();
    c.n_threads = Some(cfg.threads.max(1));
    c.clone_fd = true;
    // "subtype" as a kernel option (not fuser's Subtype, which only fusermount3 passes on)
    // makes /proc/mounts and df -T say "fuse.flashlog", as fstab lines do; without it
    // (`nosubtype`) the type is plain "fuse".
    let mut opts = vec![M::FSName(source.to_string())];
    if cfg.subtype {
        opts.push(M::CUSTOM("subtype=flashlog".into()));
    }
    if cfg.checks_permissions() {
        opts.push(M::DefaultPermissions);
    }
    opts.push(if cfg.core.read_only { M::RO } else { M::RW });
    opts.extend(cfg.kernel_flags.iter().cloned());
    c.mount_options = opts;
    c.acl = if cfg.allow_other {
        fuser::SessionACL::All
    } else {
        fuser::SessionACL::Owner
    };
    c
}

/// Mount `fs` on `mountpoint`. When this returns, the kernel has sent INIT and the mount is
/// live; run the session (`Session::run`) to serve requests.
pub fn mount(
    fs: Arc<Fs>,
    source: &str,
    mountpoint: &Path,
    cfg: &MountConfig,
) -> std::io::Result<fuser::Session<FlashlogFuse>> {
    let config = session_config(source, cfg);
    let session = fuser::Session::new(FlashlogFuse::new(fs, cfg.clone()), mountpoint, &config)?;
    if let Some(ratio) = cfg.bdi_max_ratio {
        match set_bdi_max_ratio(mountpoint, ratio) {
            Ok(bdi) => tracing::info!("kernel write-back: {bdi} max_ratio={ratio}"),
            Err(e) => tracing::warn!(
                "cannot raise the mount's kernel dirty-page share to {ratio}% (bdi_max_ratio): {e}; writers are throttled at FUSE's default of 1%"
            ),
        }
    }
    Ok(session)
}

/// The backing-device directory in sysfs of the FUSE mount on `mountpoint`, from
/// /proc/self/mountinfo (not stat(2): the session does not serve requests yet, so a stat of
/// our own mount point would wait for ourselves).
fn bdi_dir(mountpoint: &Path) -> std::io::Result<std::path::PathBuf> {
    let want = mountpoint.canonicalize()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    info.lines()
        .rev()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let fstype = l.split(" - ").nth(1)?.split(' ').next()?;
            (fstype.starts_with("fuse") && mountinfo_path(f.get(4)?) == want)
                .then(|| f[2].to_string())
        })
        .next()
        .map(|dev| std::path::PathBuf::from(format!("/sys/class/bdi/{dev}")))
        .ok_or_else(|| {
            std::io::Error::other(format!("{} not in /proc/self/mountinfo", want.display()))
        })
}

/// A path field of /proc/self/mountinfo (escapes undone; its bytes as they are, so that a
/// mount point that is not UTF-8 compares equal to itself).
fn mountinfo_path(s: &str) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(unescape_mountinfo_bytes(s)).into()
}

/// A field of /proc/self/mountinfo with its `\ooo` escapes undone (the core's reader,
/// which its cgroup memory limits share).
pub use flashlog_core::memlimit::unescape_mountinfo_bytes;

/// Let the kernel keep up to `ratio` percent of its dirty-page limit for this mount before
/// it throttles writers (FUSE's default is 1 %, with the bdi's strict limit, so a writer
/// of a FUSE file waits for write-back after a few tens of MiB). The strict limit stays:
/// only this mount's writers wait on its share. Needs root (sysfs). Returns the bdi path.
fn set_bdi_max_ratio(mountpoint: &Path, ratio: u32) -> std::io::Result<String> {
    let dir = bdi_dir(mountpoint)?;
    std::fs::write(dir.join("max_ratio"), format!("{ratio}\n"))?;
    Ok(dir.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::mountinfo_path;
    use std::path::Path;

    #[test]
    fn mountinfo_paths() {
        assert_eq!(mountinfo_path("/mnt/a\\040b"), Path::new("/mnt/a b"));
        assert_eq!(mountinfo_path("/x\\134y\\011z"), Path::new("/x\\y\tz"));
        assert_eq!(mountinfo_path("/plain"), Path::new("/plain"));
        // Not an escape: left as is (and no panic at the end of the string).
        assert_eq!(mountinfo_path("/a\\04"), Path::new("/a\\04"));
        assert_eq!(mountinfo_path("\\"), Path::new("\\"));
        // Past \377 it is no byte: kept (it overflowed a u8 before, a panic in a debug
        // build, a wrong byte in release).
        assert_eq!(mountinfo_path("/a\\777b"), Path::new("/a\\777b"));
    }
}
