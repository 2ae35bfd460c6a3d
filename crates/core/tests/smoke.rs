use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use std::sync::Arc;

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        ..Default::default()
    }
}

#[test]
fn smoke_create_write_remount() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((256 << 20) / 4096));
    let r = Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    println!("{r}");
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    fs.mkdir_all("/a/b").unwrap();
    fs.write_file("/a/b/small", b"hello").unwrap();
    let big: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
    fs.write_file("/a/big", &big).unwrap();
    assert_eq!(fs.read_file("/a/b/small").unwrap(), b"hello");
    assert_eq!(fs.read_file("/a/big").unwrap(), big);
    for i in 0..500 {
        fs.write_file(&format!("/a/f{i}"), format!("data {i}").as_bytes())
            .unwrap();
    }
    fs.unmount().unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    assert_eq!(fs.read_file("/a/b/small").unwrap(), b"hello");
    assert_eq!(fs.read_file("/a/big").unwrap(), big);
    for i in 0..500 {
        assert_eq!(
            fs.read_file(&format!("/a/f{i}")).unwrap(),
            format!("data {i}").as_bytes()
        );
    }
    let a = fs.resolve("/a").unwrap();
    let ents = fs.readdir(a, 0, 10_000).unwrap();
    assert_eq!(ents.len(), 2 + 1 + 1 + 500);
    fs.unmount().unwrap();
}

#[test]
fn smoke_fsck_clean_after_churn() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((256 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    fs.mkdir_all("/d/e").unwrap();
    for i in 0..300 {
        fs.write_file(&format!("/d/f{i}"), &vec![i as u8; i * 100])
            .unwrap();
    }
    for i in (0..300).step_by(3) {
        let d = fs.resolve("/d").unwrap();
        fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
    }
    let big = fs.write_file("/d/e/big", &vec![7u8; 3 << 20]).unwrap();
    fs.fallocate(big, FallocMode::PunchHole, 4096 * 10, 4096 * 100)
        .unwrap();
    fs.setattr(
        big,
        &SetAttr {
            size: Some(1 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    fs.setxattr(big, b"user.k", b"v", XattrMode::Any).unwrap();
    fs.sync().unwrap();
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
}
