//! flashlog-sim: deterministic crash simulation, fault injection and fuzz-corpus tooling.
//!
//! Owns the crash-consistency proof of Flashlog (issue 6, docs/TESTING.md):
//! - [`image`]: the base volume every case starts from (mkfs on a small sparse RAM device,
//!   with the random superblock fields pinned so that a seed replays byte for byte), and the
//!   fuzz seed corpora cut from real images;
//! - [`model`]: an in-memory model of the namespace and file contents that tracks what is
//!   durable (must survive a crash) and what may appear (anything the model passed through
//!   since the last durable point);
//! - [`workload`]: seeded random operations drawn from the model;
//! - [`crash`]: the driver: seed -> workload -> power cut -> crash image -> fsck -> remount
//!   -> check against the model; budgeted, exhaustive and replay entry points;
//! - [`check`]: walking a recovered volume and comparing it with the model;
//! - [`fault`]: a device that fails or panics on chosen requests, and the poisoning checks.
//!
//! Invariants: every case is a pure function of its [`crash::Case`] (seed, kill mode, cut
//! point, torn-block count, GC policy); every failure carries the command that replays it.

pub mod check;
pub mod crash;
pub mod fault;
pub mod image;
pub mod model;
pub mod workload;

use flashlog_core::GcPolicy;

/// GC policies every crash and fault run is repeated under. A new policy plugs in here, one
/// line. (`GcPolicy::Device`, D2FS, is refused by mount until it is implemented; add it
/// here when it is. `GcPolicy::None`, IPLFS, mounts only on a device with an infinite
/// logical space, whose volume layout is not implemented yet: add it with that layout.)
pub const POLICIES: &[GcPolicy] = &[GcPolicy::F2fs, GcPolicy::Scale];

/// Volume size of every simulated case with one mlog: the smallest mkfs accepts (64 MiB);
/// more mlogs take the smallest power-of-two multiple mkfs accepts (`image::base_image_mlogs`). The RAM device is
/// sparse, so only the metadata mkfs writes and the workload's blocks cost memory.
pub const VOLUME_BLOCKS: u64 = (64 << 20) / 4096;

/// The name a GC policy has on the command line (`--policy`).
pub fn policy_name(p: GcPolicy) -> &'static str {
    match p {
        GcPolicy::F2fs => "f2fs",
        GcPolicy::Scale => "scale",
        GcPolicy::Device => "device",
        GcPolicy::None => "none",
    }
}
