//! The `none` policy (IPLFS): which devices it may run on, checked at mkfs and mount.
//!
//! Owns: the device-capability rules of `gc=none`. IPLFS never cleans because its partition
//! is never reused: that needs a device whose logical space is effectively infinite
//! (`Capabilities::infinite_space`, e.g. the emulator's `ftl=interval`). On an ordinary
//! device a volume without a cleaner just fills up, so mount refuses `gc=none` there.
//!
//! Status: the volume layout of an infinite partition (append-only allocation with each log
//! in its own 2^56-block region, no SIT and no SSA, the discard log of `discard.rs` in the
//! checkpoint) is not implemented yet. Until it is, mkfs and mount refuse a device that
//! declares an infinite space, with a message that says so, instead of sizing SIT and SSA
//! for 2^64 blocks.
//!
//! Invariants: none (pure checks). Lock order: none.

use crate::config::{GcPolicy, MountOptions};
use crate::error::{Error, Result};
use flashlog_dev::Capabilities;

const INFINITE_NOT_YET: &str = "the device offers an infinite logical space (IPLFS); the \
     gc=none volume layout for it (append-only logs, no SIT/SSA, discard log) is not \
     implemented yet";

/// mkfs on `caps`: refuses an infinite space (no layout for it yet).
pub fn check_mkfs(caps: &Capabilities) -> Result<()> {
    if caps.infinite_space {
        return Err(Error::NotSupported(INFINITE_NOT_YET));
    }
    Ok(())
}

/// Mount with `opts` on `caps`: `gc=none` needs an infinite space; an infinite space has no
/// layout yet.
pub fn check_mount(caps: &Capabilities, opts: &MountOptions) -> Result<()> {
    if caps.infinite_space {
        return Err(Error::NotSupported(INFINITE_NOT_YET));
    }
    if opts.gc == GcPolicy::None {
        return Err(Error::NotSupported(
            "gc=none never cleans, so it needs a device whose logical space is never reused \
             (capability infinite_space, e.g. the emulated SSD with ftl=interval); this \
             device is finite: use gc=f2fs or gc=scale",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_needs_an_infinite_device_and_infinite_devices_wait_for_their_layout() {
        let finite = Capabilities::plain("ram", 1 << 20);
        let mut infinite = finite.clone();
        infinite.infinite_space = true;
        infinite.block_count = u64::MAX;
        let none = MountOptions {
            gc: GcPolicy::None,
            ..MountOptions::default()
        };
        let err = check_mount(&finite, &none).unwrap_err().to_string();
        assert!(err.contains("infinite_space"), "{err}");
        assert!(check_mount(&finite, &MountOptions::default()).is_ok());
        assert!(check_mkfs(&finite).is_ok());
        for r in [check_mkfs(&infinite), check_mount(&infinite, &none)] {
            let err = r.unwrap_err().to_string();
            assert!(err.contains("not implemented yet"), "{err}");
        }
    }
}
