//! Flashlog core: a log-structured file system for flash, of F2FS lineage, as a library.
//!
//! Layers (docs/DESIGN.md): `Fs` (API) -> file cells (`cell`, per-inode state) -> node tree
//! and write path (`inner`, `file`, `dir`) -> segment manager and NAT (`seg`, `nat`) ->
//! checkpoint and recovery (`checkpoint`, `recovery`) -> the device (flashlog-dev).
//!
//! Embedding (the README's example, compiled as a doctest):
//!
//! ```
//! use flashlog_core::{Fs, MkfsOptions, MountOptions};
//! use flashlog_dev::{BlockDevice, FileDevice};
//! use std::sync::Arc;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let path = std::env::temp_dir().join(format!("flashlog-doctest-{}.img", std::process::id()));
//! let dev: Arc<dyn BlockDevice> = if path.exists() {
//!     Arc::new(FileDevice::open(&path, false)?) // the volume made before
//! } else {
//!     let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::create(&path, 1 << 30)?);
//!     Fs::mkfs(dev.clone(), &MkfsOptions::default())?; // once: create truncates
//!     dev
//! };
//! let fs = Fs::mount(dev.clone(), MountOptions::default())?;
//! fs.mkdir_all("/logs")?;
//! let ino = fs.write_file("/logs/today", b"hello")?;
//! fs.fsync(ino, false)?; // durable without a checkpoint (roll-forward chain)
//! fs.unmount()?;
//! assert!(flashlog_core::fsck(&*dev)?.is_clean());
//! # std::fs::remove_file(&path)?;
//! # Ok(())
//! # }
//! ```
//!
//! Global lock order: op lock (shared; the checkpoint takes it exclusively) -> rename lock
//! -> directory cells (an ancestor first, else ascending ino) -> other cells (ascending
//! ino) -> log heads -> leaf locks (SSA dirty set, prefree sets, cell-table shards, NAT
//! prefree list).

pub mod acl;
pub mod bitmap;
pub mod cell;
pub mod checkpoint;
pub mod config;
pub mod dir;
pub mod discard;
pub mod error;
pub mod file;
pub mod flush;
pub mod fs;
pub mod fsck;
pub mod gc;
pub mod gc_device;
pub mod gc_none;
pub mod inner;
pub mod io;
pub mod lock;
pub mod memlimit;
pub mod nat;
pub mod recovery;
pub mod scale;
pub mod seg;
pub mod space;
pub mod stats;
pub mod svp;
pub mod waits;

pub use checkpoint::{MkfsOptions, MkfsReport};
pub use config::{AllocMode, GcPolicy, MlogMap, MountOptions};
pub use dir::DirEntry;
pub use error::{Error, Result};
pub use file::FallocMode;
pub use flashlog_format::node::Timespec;
pub use flashlog_format::{Ino, BLOCKS_PER_SEG, BLOCK_SIZE, ROOT_INO};
pub use flush::WritebackStats;
pub use fs::{
    Attr, Creator, Fs, RenameFlags, SetAttr, StatFs, TimeSet, XattrMode, WHITEOUT_DEV,
    WHITEOUT_MODE,
};
pub use fsck::{fsck, fsck_with_progress, FsckReport, FsckStep};
pub use stats::Counters;
