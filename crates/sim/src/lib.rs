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
//! - [`fault`]: a device that fails or panics on chosen requests, and the poisoning checks;
//! - [`device_gc`]: `gc=device` (D2FS) on the emulated coupled-GC SSD, whose migration
//!   records survive the cut, with cuts between device migration, upcall, host apply,
//!   checkpoint and acknowledgement;
//! - [`gc_none`]: `gc=none` (IPLFS) on the emulated interval-mapping SSD, with cuts in the
//!   discard protocol (discard log written, commands queued, issued) and in fsyncs, and a
//!   check that the device maps exactly the live blocks after the remount.
//!
//! Invariants: every case is a pure function of its [`crash::Case`] (seed, kill mode, cut
//! point, torn-block count, GC policy); every failure carries the command that replays it.

pub mod check;
pub mod crash;
pub mod device_gc;
pub mod fault;
pub mod gc_none;
pub mod image;
pub mod lanes;
pub mod model;
pub mod workload;

use flashlog_core::GcPolicy;

/// GC policies every crash and fault run on RAM images is repeated under. A new policy
/// plugs in here, one line. `GcPolicy::Device`, D2FS, mounts only on a device that moves
/// blocks itself (the emulator's coupled FTL), so its crash runs are [`device_gc`]'s, on
/// an emulated SSD (`run --policies device`, or `device`); `GcPolicy::None`, IPLFS, mounts
/// only on a device with an infinite logical space (the emulator's interval FTL): its runs
/// are [`gc_none`]'s (`run --policies none`, or `none`). [`ALL_POLICIES`] lists both.
pub const POLICIES: &[GcPolicy] = &[GcPolicy::F2fs, GcPolicy::Scale];

/// Every policy the simulator covers: [`POLICIES`] on RAM images, plus `device` on the
/// emulated coupled SSD and `none` on the emulated interval-mapping SSD.
pub const ALL_POLICIES: &[GcPolicy] = &[
    GcPolicy::F2fs,
    GcPolicy::Scale,
    GcPolicy::Device,
    GcPolicy::None,
];

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
