//! Flashlog file-system test tools.
//!
//! This crate owns three checkers that can be pointed at any mounted
//! directory (a local ext4/tmpfs directory today, the Flashlog FUSE mount
//! later):
//!
//! * [`posix`]: a named-case POSIX conformance suite (`flashlog-posix`),
//! * [`fsx`]: an fsx-style single-file randomized data checker (`flashlog-fsx`),
//! * [`stress`]: a multi-process namespace/data stress run with a final
//!   consistency check (`flashlog-stress`).
//!
//! [`sys`] holds the checked syscall wrappers they share.

pub mod fsx;
pub mod posix;
pub mod stress;
pub mod sys;
