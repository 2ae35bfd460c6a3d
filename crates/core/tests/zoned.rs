//! zf2fs: F2FS over the emulator's zoned (ZNS-style) FTL. Sections are zones, blocks of a
//! zone are written in order from its start (the device refuses anything else), no
//! threaded logging even when adaptive mode is asked for, and a freed section is a zone
//! reset. Checked against a model of the files; fsck clean; a remount reads the same.

use flashlog_core::*;
use flashlog_dev::BlockDevice;
use flashlog_ssd::{SsdConfig, SsdDevice, StoreKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const CAP: u64 = 512 << 20;
const FILE: u64 = 8 << 20;

fn zoned() -> Arc<SsdDevice> {
    let mut c = SsdConfig::preset("970pro-like")
        .unwrap()
        .with_capacity(CAP)
        .unwrap();
    c.set("ftl", "zoned").unwrap();
    c.store = StoreKind::Ram;
    Arc::new(SsdDevice::new(c).unwrap())
}

#[test]
fn f2fs_on_zones_cleans_by_zone_reset_and_matches_the_model() {
    let ssd = zoned();
    let dev: Arc<dyn BlockDevice> = ssd.clone();
    let caps = dev.capabilities().clone();
    assert!(caps.zone_blocks > 0);
    let sb = Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap().sb;
    assert_eq!(
        sb.geo.segs_per_sec as u64 * 512,
        caps.zone_blocks,
        "sections are not zones"
    );
    assert_eq!(sb.geo.main_addr, caps.conventional_blocks);
    // Adaptive mode asked for: the zoned device gets lfs mode (no writes into holes).
    let opts = MountOptions {
        cp_interval: None,
        gc_interval: None,
        alloc_mode: AllocMode::Adaptive,
        ..MountOptions::default()
    };
    let fs = Fs::mount(dev.clone(), opts.clone()).unwrap();
    let nfiles = (fs.statfs().blocks * 4096 * 7 / 10 / FILE) as usize;
    let mut model: Vec<Vec<u8>> = Vec::new();
    let mut inos = Vec::new();
    for i in 0..nfiles {
        let data: Vec<u8> = (0..FILE).map(|k| (k as usize * 5 + i) as u8).collect();
        inos.push(fs.write_file(&format!("/f{i}"), &data).unwrap());
        model.push(data);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    for n in 0..2 * CAP / 4096 {
        let f = rng.random_range(0..nfiles);
        let blk = rng.random_range(0..FILE / 4096) as usize;
        let byte: u8 = rng.random();
        fs.write(inos[f], (blk * 4096) as u64, &[byte; 4096])
            .unwrap();
        model[f][blk * 4096..(blk + 1) * 4096].fill(byte);
        if n % 20000 == 0 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    let c = fs.stats();
    assert!(c.gc_sections_freed > 0, "the host never cleaned");
    assert_eq!(c.ssr_blocks, 0, "threaded logging on a zoned device");
    let st = ssd.ftl_stats();
    assert!(st.zone_resets > 0, "no zone was ever reset");
    assert_eq!(ssd.stats().gc_runs, 0, "the zoned device ran its own GC");
    for (i, m) in model.iter().enumerate() {
        assert!(
            fs.read_file(&format!("/f{i}")).unwrap() == *m,
            "file {i} differs"
        );
    }
    fs.unmount().unwrap();
    let r = flashlog_core::fsck::fsck(&*dev).unwrap();
    assert!(r.is_clean(), "fsck: {:?}", r.findings);
    let fs = Fs::mount(dev.clone(), opts).unwrap();
    for (i, m) in model.iter().enumerate() {
        assert!(
            fs.read_file(&format!("/f{i}")).unwrap() == *m,
            "file {i} differs after remount"
        );
    }
    fs.unmount().unwrap();
}
