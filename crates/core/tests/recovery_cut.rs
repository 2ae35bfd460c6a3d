//! A power cut during the recovery mount. Until the recovery checkpoint is durable, the
//! next mount walks the same fsync chains from the same checkpoint, so nothing the
//! recovery mount writes may land on them: not in a section that holds only superseded
//! chain nodes (free to the SIT, nothing in it recovered), which is where the log heads
//! moved before `SegManager::keep_until_checkpoint`.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, SimDevice};
use std::sync::Arc;

mod common;

fn opts(policy: &str) -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc: policy.parse().unwrap(),
        ..Default::default()
    }
}

/// 128 MiB (`f2fs` and `scale` on one mlog, `f2fs` on two), `common::fsync_chains` with 3,000 fsyncs (its chains span 6 sections, the
/// first of them holding only superseded nodes), cut (unflushed writes dropped); then for
/// every request of the recovery mount a second cut there, a crash image of that in each
/// kill mode (dropped, a random subset kept, one block torn), and a third mount: every
/// fsync'd byte and name is there, fsck clean after its unmount. Failed before the fix at
/// the recovery mount's first request kept by a random subset: the recovery checkpoint's
/// first block (a dentry block) landed on a superseded chain node, the third mount's walk
/// stopped there and the files fsync'd after it were gone ("n2939: no such file or
/// directory", or another of them).
/// (On two mlogs the heads move within parts that hold none of the chains: it passed
/// either way, and stays for the chains of two logs.)
#[test]
fn a_cut_during_the_recovery_mount_loses_no_fsynced_byte() {
    for (policy, mlogs) in [("f2fs", 1), ("scale", 1), ("f2fs", 2)] {
        for seed in 0..2u64 {
            let sim = Arc::new(SimDevice::new((128 << 20) / 4096));
            let mk = MkfsOptions {
                mlogs,
                ..MkfsOptions::default()
            };
            Fs::mkfs(sim.clone(), &mk).unwrap();
            let fs = Fs::mount(sim.clone(), opts(policy)).unwrap();
            let model = common::fsync_chains(&fs, seed, 3000);
            sim.cut_now();
            fs.abandon();
            let img = sim.crash_image(CrashMode::DropUnflushed, seed);
            // The recovery mount's requests, uncut.
            let probe = Arc::new(SimDevice::from_image(img.deep_clone()));
            let fs = Fs::mount(probe.clone(), opts(policy)).unwrap();
            assert!(fs.stats().roll_forward_nodes > 0);
            common::assert_files_hold(&fs, &model, "after roll-forward");
            let n = probe.ops();
            fs.abandon();
            for k in 0..n {
                let sim = Arc::new(SimDevice::from_image(img.deep_clone()));
                sim.cut_at(k, 0);
                if let Ok(fs) = Fs::mount(sim.clone(), opts(policy)) {
                    fs.abandon();
                }
                for mode in CrashMode::ALL {
                    let what =
                        format!("{policy} seed {seed}: second cut at request {k} of {n}, {mode:?}");
                    let img2: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, seed + k));
                    let fs = Fs::mount(img2.clone(), opts(policy))
                        .unwrap_or_else(|e| panic!("{what}: third mount: {e}"));
                    common::assert_files_hold(&fs, &model, &what);
                    fs.unmount().unwrap();
                    let r = fsck(&*img2).unwrap();
                    assert!(r.is_clean(), "{what}: {r}");
                }
            }
        }
    }
}
