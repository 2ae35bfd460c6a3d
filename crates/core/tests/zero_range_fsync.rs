//! A zero range over blocks already written, then fsync (data only and full), then a power
//! cut: the zeros must survive recovery. (Written for a loss fuse-crash.py reported once
//! through the mount, CI of e02e244; that report was the checker's: the byte came from a
//! copy out of a file whose write had been refused, docs/TESTING.md "CI failures of
//! 2026-11-28, eighth session".)

use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, SimDevice};
use std::sync::Arc;

#[test]
fn a_zero_range_over_written_blocks_survives_fsync_and_a_power_cut() {
    for gc in [GcPolicy::F2fs, GcPolicy::Scale] {
        for datasync in [true, false] {
            for mode in CrashMode::ALL {
                let sim = Arc::new(SimDevice::new((64 << 20) / 4096));
                let dev: Arc<dyn BlockDevice> = sim.clone();
                Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
                let o = MountOptions {
                    cp_interval: None,
                    gc_interval: None,
                    gc,
                    ..Default::default()
                };
                let fs = Fs::mount(dev.clone(), o.clone()).unwrap();
                let ino = fs.create(ROOT_INO, b"f6", 0o644, 0, 0).unwrap().ino;
                fs.write(ino, 148124, &[0xa3; 5000]).unwrap();
                fs.write(ino, 155648, &[0xa3; 12288]).unwrap();
                fs.sync().unwrap();
                fs.fallocate(ino, FallocMode::ZeroRange, 138023, 27265)
                    .unwrap();
                fs.write(ino, 40960, &[7; 512]).unwrap();
                fs.fsync(ino, datasync).unwrap();
                sim.cut_now();
                fs.abandon();
                let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, 1));
                let fs = Fs::mount(img, o).unwrap();
                let mut buf = vec![0u8; 167936];
                let n = fs.read(ino, 0, &mut buf).unwrap();
                assert_eq!(n, 167936, "{gc:?} datasync {datasync} {mode:?}: size");
                let bad: Vec<usize> = (138023..165288).filter(|&i| buf[i] != 0).collect();
                assert!(
                    bad.is_empty(),
                    "{gc:?} datasync {datasync} {mode:?}: {} bytes of the zero range not zero, \
                     first at {}",
                    bad.len(),
                    bad[0]
                );
                fs.unmount().unwrap();
            }
        }
    }
}
