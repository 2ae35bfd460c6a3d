//! Regression tests: one per bug the crash simulation or the fuzzers found. Each names the
//! seed and case that found it; `flashlog-sim replay` with the same arguments reproduces it.

use flashlog_core::GcPolicy;
use flashlog_dev::CrashMode;
use flashlog_sim::crash::{run_case, Case};

fn case(seed: u64, mode: CrashMode, cut: u64) -> Case {
    Case {
        seed,
        mode,
        cut,
        partial: 0,
        policy: GcPolicy::F2fs,
    }
}

/// Bug 1 (core): unlink of one link of a multiply-linked file, then fsync of the file. The
/// fsync took the roll-forward path and made the lower link count durable while the
/// directory entry removal waited for a checkpoint: after a crash fsck found "link count 1
/// but 2 found" (and, when a new file later took the name through roll-forward, a dentry
/// whose inode was freed). Fix: `drop_link` sets `needs_cp`, so that fsync checkpoints.
#[test]
fn unlink_then_fsync_keeps_link_count_consistent() {
    for c in [
        case(152, CrashMode::KeepRandomSubset, 44),
        case(62, CrashMode::TearOne, 70),
        case(211, CrashMode::TearOne, 24),
    ] {
        if let Err(f) = run_case(&c) {
            panic!("{f}");
        }
    }
}

/// Bug 1, second symptom: a seed whose clean run (no crash) already showed it, through the
/// remount of the fully flushed image.
#[test]
fn unlink_then_fsync_clean_remount() {
    if let Err(f) = flashlog_sim::crash::trace(1917, GcPolicy::F2fs) {
        panic!("{f}");
    }
}
