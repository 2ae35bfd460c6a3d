//! fsck must find what is wrong: each test damages a healthy image in one way and expects a
//! finding in the right area (and never a panic).

use flashlog_core::fsck::Severity;
use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use flashlog_format::codec::{put_u16, put_u32, seal, test_bit};
use flashlog_format::{tag, BLOCK_SIZE};
use std::sync::Arc;

fn image() -> (Arc<RamDevice>, Vec<u32>) {
    let ram = Arc::new(RamDevice::new((64 << 20) / 4096));
    let dev: Arc<dyn BlockDevice> = ram.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(
        dev.clone(),
        MountOptions {
            cp_interval: None,
            ..Default::default()
        },
    )
    .unwrap();
    let mut inos = Vec::new();
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, 0, 0).unwrap().ino;
    for i in 0..200 {
        inos.push(
            fs.write_file(&format!("/dir/file{i}"), &vec![i as u8; 5000 + i * 10])
                .unwrap(),
        );
    }
    inos.push(d);
    fs.unmount().unwrap();
    assert!(fsck(&*ram).unwrap().is_clean());
    (ram, inos)
}

fn areas(dev: &RamDevice) -> Vec<&'static str> {
    let r = fsck(dev).unwrap();
    assert!(!r.is_clean(), "damage went unnoticed");
    assert_eq!(r.exit_code(), 4);
    r.findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.area)
        .collect()
}

fn rw(dev: &RamDevice, addr: u64, f: impl FnOnce(&mut [u8; BLOCK_SIZE])) {
    let mut b = [0u8; BLOCK_SIZE];
    dev.read(addr, &mut b).unwrap();
    f(&mut b);
    dev.write(addr, &b).unwrap();
}

fn current(
    dev: &RamDevice,
) -> (
    flashlog_format::sb::Superblock,
    flashlog_format::cp::Checkpoint,
) {
    let sb = checkpoint::read_superblock(dev).unwrap();
    let cp = checkpoint::read_checkpoint(dev, &sb.geo).unwrap();
    (sb, cp)
}

#[test]
fn torn_nat_block_is_reported() {
    let (dev, _) = image();
    let (sb, cp) = current(&dev);
    let copy = test_bit(&cp.nat_bitmap, 0) as u8;
    rw(&dev, sb.geo.nat_block_addr(0, copy), |b| b[200] ^= 0xff);
    assert!(areas(&dev).contains(&"nat"));
}

#[test]
fn cleared_sit_bit_is_reported() {
    let (dev, _) = image();
    let (sb, cp) = current(&dev);
    // Find a SIT block with valid blocks and clear one bit, keeping the block well formed.
    for i in 0..sb.geo.sit_blocks {
        let copy = test_bit(&cp.sit_bitmap, i as usize) as u8;
        let addr = sb.geo.sit_block_addr(i, copy);
        let mut b = [0u8; BLOCK_SIZE];
        dev.read(addr, &mut b).unwrap();
        let mut blk = flashlog_format::meta::SitBlock::decode(&b, i).unwrap();
        if let Some(e) = blk.entries.iter_mut().find(|e| e.valid > 0) {
            let byte = e.bitmap.iter().position(|&x| x != 0).unwrap();
            let bit = e.bitmap[byte].trailing_zeros();
            e.bitmap[byte] &= !(1 << bit);
            e.valid -= 1;
            dev.write(addr, &blk.encode()[..]).unwrap();
            assert!(areas(&dev).contains(&"sit"));
            return;
        }
    }
    panic!("no valid segment");
}

#[test]
fn wrong_link_count_is_reported() {
    let (dev, inos) = image();
    let (_, cp) = current(&dev);
    let _ = cp;
    let fs = Fs::mount(
        dev.clone() as Arc<dyn BlockDevice>,
        MountOptions {
            cp_interval: None,
            ..Default::default()
        },
    )
    .unwrap();
    let ino = inos[3];
    let addr = fs.inner().nat.addr(ino);
    fs.abandon();
    // nlink lives at byte 20 of the inode block; reseal the node so only the count is wrong.
    rw(&dev, addr, |b| {
        put_u32(b, 20, 7);
        seal(b, tag::NODE);
    });
    assert!(areas(&dev).contains(&"inode"));
}

#[test]
fn dentry_pointing_nowhere_is_reported() {
    let (dev, inos) = image();
    let fs = Fs::mount(
        dev.clone() as Arc<dyn BlockDevice>,
        MountOptions {
            cp_interval: None,
            ..Default::default()
        },
    )
    .unwrap();
    let dir = *inos.last().unwrap();
    let addr = {
        let inner = fs.inner();
        let c = inner.cell(dir).unwrap();
        let mut st = c.state.lock();
        inner.block_addr(&mut st, 0).unwrap()
    };
    fs.abandon();
    // First record of dentry block 0: point its inode number at an unused nid.
    rw(&dev, addr, |b| {
        let rec = flashlog_format::dir::BLOCK_LAYOUT.recs;
        let slot = (0..200).find(|&s| test_bit(&b[8..], s)).unwrap();
        put_u32(b, rec + slot * 12 + 4, 60_000);
        seal(b, tag::DENTRY);
    });
    assert!(areas(&dev).contains(&"dir"));
}

#[test]
fn garbage_everywhere_never_panics() {
    let (dev, _) = image();
    let (sb, _) = current(&dev);
    // Scribble over every metadata area and part of the main area; fsck must return.
    let mut x: u32 = 12345;
    for addr in (2..sb.geo.main_addr + 2048).step_by(3) {
        rw(&dev, addr, |b| {
            for k in 0..64 {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                put_u16(b, (k * 61) % (BLOCK_SIZE - 2), x as u16);
            }
        });
    }
    let _ = fsck(&*dev).unwrap();
    let _ = Fs::mount(
        dev.clone() as Arc<dyn BlockDevice>,
        MountOptions {
            cp_interval: None,
            read_only: true,
            ..Default::default()
        },
    );
}
