//! `flashlog fsck` and `inspect` of a volume that was not unmounted cleanly (review,
//! 2026-11-28: after a `kill -9` following fsyncs, fsck said only "clean" and inspect
//! `flags []`, neither that the next read-write mount recovers fsync'd data).
//!
//! A crash is a copy of the image taken while the volume is mounted in this process (the
//! device writes through the host's page cache, so the copy holds every block written).

use flashlog_core::{Fs, MountOptions};
use flashlog_dev::FileDevice;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

fn flashlog(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashlog"))
        .args(args)
        .output()
        .expect("run flashlog")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flashlog-unclean-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// Mount `img` in this process, run `f` on the volume, copy the image to `crash` (the
/// volume still mounted), then unmount cleanly.
fn crash_copy(img: &Path, crash: &Path, f: impl FnOnce(&Fs)) {
    let dev = FileDevice::open(img, false).unwrap();
    let opts = MountOptions {
        cp_interval: None,
        gc_interval: None,
        ..Default::default()
    };
    let fs = Fs::mount(Arc::new(dev), opts).unwrap();
    f(&fs);
    std::fs::copy(img, crash).unwrap();
    fs.unmount().unwrap();
}

#[test]
fn fsck_and_inspect_say_that_fsynced_data_awaits_roll_forward() {
    let d = scratch("rf");
    let img = d.join("v.img");
    let crash = d.join("crash.img");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    assert!(flashlog(&["mkfs", "--size", "256M", &s(&img)])
        .status
        .success());
    crash_copy(&img, &crash, |fs| {
        let ino = fs.write_file("/synced", &vec![7u8; 64 << 10]).unwrap();
        fs.fsync(ino, false).unwrap();
    });
    let before = std::fs::read(&crash).unwrap();

    let o = flashlog(&["fsck", &s(&crash)]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("not unmounted cleanly"), "fsck: {out}");
    assert!(out.contains("roll-forward recovery"), "fsck: {out}");
    let v = json(&flashlog(&["fsck", "--json", &s(&crash)]));
    assert_eq!(v["unmounted_cleanly"], false, "{v}");
    assert_eq!(v["roll_forward_pending"], true, "{v}");
    // -q prints nothing for a consistent volume: the note is not a problem.
    assert_eq!(stdout(&flashlog(&["fsck", "-q", &s(&crash)])), "");

    let o = flashlog(&["inspect", &s(&crash)]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("not unmounted cleanly"), "inspect: {out}");
    assert!(out.contains("roll-forward recovery"), "inspect: {out}");
    let v = json(&flashlog(&["inspect", "--json", &s(&crash)]));
    assert_eq!(v["unmounted_cleanly"], false, "{v}");
    assert_eq!(v["roll_forward_pending"], true, "{v}");

    // Only read: the crash image is as it was (a read-only mount found the fsync chain).
    assert!(
        std::fs::read(&crash).unwrap() == before,
        "fsck or inspect wrote the image"
    );

    // The cleanly unmounted volume: no note, nothing pending.
    let out = stdout(&flashlog(&["fsck", &s(&img)]));
    assert!(!out.contains("not unmounted cleanly"), "{out}");
    let v = json(&flashlog(&["inspect", "--json", &s(&img)]));
    assert_eq!(v["unmounted_cleanly"], true, "{v}");
    assert_eq!(v["roll_forward_pending"], false, "{v}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn fsck_says_a_crash_after_a_checkpoint_left_nothing_to_recover() {
    let d = scratch("cp");
    let img = d.join("v.img");
    let crash = d.join("crash.img");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    assert!(flashlog(&["mkfs", "--size", "256M", &s(&img)])
        .status
        .success());
    crash_copy(&img, &crash, |fs| {
        fs.write_file("/f", b"checkpointed").unwrap();
        fs.sync().unwrap(); // a checkpoint without the umount flag, nothing fsync'd after it
    });
    let out = stdout(&flashlog(&["fsck", &s(&crash)]));
    assert!(out.contains("not unmounted cleanly"), "fsck: {out}");
    assert!(out.contains("nothing fsync'd"), "fsck: {out}");
    let v = json(&flashlog(&["inspect", "--json", &s(&crash)]));
    assert_eq!(v["unmounted_cleanly"], false, "{v}");
    assert_eq!(v["roll_forward_pending"], false, "{v}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `fsck --progress` tells each step on stderr from 0 to 100 % (on a terminal by default;
/// here stderr is a pipe, so only when asked), and changes nothing else: the same report on
/// stdout, the same exit code. Without it, and not on a terminal, stderr stays empty.
#[test]
fn fsck_progress_tells_every_step_and_changes_no_report() {
    let d = scratch("progress");
    let img = d.join("v.img");
    let s = img.to_str().unwrap();
    assert!(flashlog(&["mkfs", "--size", "256M", s]).status.success());
    {
        let fs = Fs::mount(
            Arc::new(FileDevice::open(&img, false).unwrap()),
            MountOptions::default(),
        )
        .unwrap();
        for i in 0..5000 {
            fs.write_file(&format!("/f{i}"), b"x").unwrap();
        }
        fs.unmount().unwrap();
    }
    let plain = flashlog(&["fsck", s]);
    let with = flashlog(&["fsck", "--progress", s]);
    assert_eq!(plain.status.code(), Some(0), "{}", stdout(&plain));
    assert_eq!(with.status.code(), Some(0));
    assert_eq!(
        stdout(&plain),
        stdout(&with),
        "--progress changed the report"
    );
    assert!(
        plain.stderr.is_empty(),
        "progress without --progress on a pipe: {}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let err = String::from_utf8_lossy(&with.stderr).into_owned();
    for step in [
        "reading the NAT",
        "reading the SIT",
        "walking the tree",
        "checking segment usage",
    ] {
        let lines: Vec<&str> = err.lines().filter(|l| l.contains(step)).collect();
        assert!(
            lines.first().is_some_and(|l| l.ends_with("(0 %)"))
                && lines.last().is_some_and(|l| l.ends_with("(100 %)")),
            "{step}: {lines:?}\n{err}"
        );
    }
    assert!(
        err.contains("walking the tree: 5001 of 5001 inodes (100 %)"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
