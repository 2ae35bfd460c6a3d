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
    fuser::Session::new(FlashlogFuse::new(fs, cfg.clone()), mountpoint, &config)
}
