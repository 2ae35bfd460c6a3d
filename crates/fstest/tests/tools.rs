//! Integration tests: run each tool briefly against scratch directories on
//! the local file systems (ext4 under /tmp, tmpfs under /dev/shm) and check
//! both that they pass there and that their self-tests make them fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use flashlog_fstest::stress::{check_slot, make_slot, SLOT};

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(base: &Path, name: &str) -> Option<Self> {
        if !base.is_dir() {
            return None;
        }
        let p = base.join(format!("fstest-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).ok()?;
        Some(Self(p))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = flashlog_fstest::posix::force_remove(&self.0);
    }
}

fn bases() -> Vec<PathBuf> {
    let mut v = vec![std::env::temp_dir()];
    if Path::new("/dev/shm").is_dir() {
        v.push(PathBuf::from("/dev/shm"));
    }
    v
}

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().expect("spawn tool")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

const POSIX: &str = env!("CARGO_BIN_EXE_flashlog-posix");
const FSX: &str = env!("CARGO_BIN_EXE_flashlog-fsx");
const STRESS: &str = env!("CARGO_BIN_EXE_flashlog-stress");

#[test]
fn posix_suite_passes_on_local_fs() {
    for base in bases() {
        let s = Scratch::new(&base, "posix").expect("scratch dir");
        let o = run(POSIX, &[s.0.to_str().unwrap()]);
        let t = text(&o);
        assert!(
            o.status.success(),
            "posix suite failed on {}:\n{t}",
            base.display()
        );
        assert!(t.contains(" 0 failed"), "{t}");
        // The suite cleans up after itself.
        let left: Vec<_> = std::fs::read_dir(&s.0).unwrap().collect();
        assert!(left.is_empty(), "suite left {} entries behind", left.len());
    }
}

#[test]
fn posix_list_and_filter() {
    let o = run(POSIX, &["--list"]);
    assert!(o.status.success());
    let all = String::from_utf8_lossy(&o.stdout).lines().count();
    assert!(all >= 100, "only {all} cases listed");
    let o = run(POSIX, &["--list", "--filter", "rename/"]);
    let names = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        names.lines().count() >= 10 && names.lines().all(|l| l.contains("rename/")),
        "{names}"
    );

    let s = Scratch::new(&std::env::temp_dir(), "posix-filter").unwrap();
    let o = run(
        POSIX,
        &[
            s.0.to_str().unwrap(),
            "--filter",
            "xattr/",
            "--filter",
            "symlink/eloop",
        ],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let ran = t
        .lines()
        .filter(|l| l.starts_with("PASS") || l.starts_with("SKIP") || l.starts_with("FAIL"))
        .count();
    assert_eq!(ran, 8, "{t}");
}

#[test]
fn posix_rejects_missing_dir() {
    let o = run(POSIX, &["/nonexistent/flashlog-fstest"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn fsx_passes_on_local_fs() {
    for base in bases() {
        let s = Scratch::new(&base, "fsx").unwrap();
        for extra in [&[][..], &["--no-mmap"][..]] {
            let mut args = vec![
                s.0.to_str().unwrap(),
                "--seed",
                "42",
                "--ops",
                "3000",
                "--file-size",
                "131072",
            ];
            args.extend_from_slice(extra);
            let o = run(FSX, &args);
            let t = text(&o);
            assert!(o.status.success(), "fsx failed on {}:\n{t}", base.display());
            assert!(t.contains("passed 3000 ops") && t.contains("write="), "{t}");
        }
    }
}

#[test]
fn fsx_seed_determines_ops() {
    let s = Scratch::new(&std::env::temp_dir(), "fsx-seed").unwrap();
    let ops = |seed: &str| {
        let o = run(
            FSX,
            &[
                s.0.to_str().unwrap(),
                "--seed",
                seed,
                "--ops",
                "300",
                "--verbose",
            ],
        );
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with('#'))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let (a, b, c) = (ops("9"), ops("9"), ops("10"));
    assert_eq!(a.len(), 300);
    assert_eq!(a, b, "same seed gave different op sequences");
    assert_ne!(a, c, "different seeds gave the same op sequence");
}

#[test]
fn fsx_detects_corruption() {
    let s = Scratch::new(&std::env::temp_dir(), "fsx-corrupt").unwrap();
    let o = run(
        FSX,
        &[
            s.0.to_str().unwrap(),
            "--seed",
            "3",
            "--ops",
            "400",
            "--corrupt-after",
            "100",
        ],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("first bad byte at offset") && t.contains("seed 3") && t.contains("last "),
        "{t}"
    );
}

#[test]
fn stress_passes_on_local_fs() {
    for base in bases() {
        let s = Scratch::new(&base, "stress").unwrap();
        let o = run(
            STRESS,
            &[
                s.0.to_str().unwrap(),
                "--procs",
                "3",
                "--seconds",
                "2",
                "--seed",
                "11",
            ],
        );
        let t = text(&o);
        assert!(
            o.status.success(),
            "stress failed on {}:\n{t}",
            base.display()
        );
        assert!(
            t.contains("stress: PASS") && t.contains("rename-file"),
            "{t}"
        );
        let left: Vec<_> = std::fs::read_dir(&s.0).unwrap().collect();
        assert!(left.is_empty(), "stress left its tree behind");
    }
}

#[test]
fn stress_detects_corruption() {
    let s = Scratch::new(&std::env::temp_dir(), "stress-corrupt").unwrap();
    let o = run(
        STRESS,
        &[
            s.0.to_str().unwrap(),
            "--procs",
            "2",
            "--seconds",
            "0.5",
            "--inject-corruption",
        ],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("INCONSISTENT") && t.contains("garbage in slot"),
        "{t}"
    );
}

#[test]
fn stress_slot_format() {
    let seqs = [5u64, 2];
    let s = make_slot(1, 1);
    assert_eq!(check_slot(&s, &seqs), Ok(Some((1, 1))));
    assert_eq!(check_slot(&[0u8; SLOT], &seqs), Ok(None));
    assert!(
        check_slot(&make_slot(1, 2), &seqs).is_err(),
        "unwritten seq accepted"
    );
    assert!(
        check_slot(&make_slot(2, 0), &seqs).is_err(),
        "unknown writer accepted"
    );
    let mut bad = make_slot(0, 4);
    bad[200] ^= 1;
    assert!(check_slot(&bad, &seqs).is_err(), "corrupt payload accepted");
    let mut torn = make_slot(0, 4);
    torn[128..].copy_from_slice(&make_slot(0, 3)[128..]);
    assert!(check_slot(&torn, &seqs).is_err(), "torn record accepted");
}
