//! The `flashlog` command line against bad input: a clear one-line error and a nonzero
//! exit, never a panic or a hang, and the input file left as it was (found in review,
//! 2026-11-28: mkfs resized its target before checking its options, a refused mkfs left
//! its new image behind, and the bench took emulator settings on a RAM device).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn flashlog(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashlog"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run flashlog")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flashlog-review-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A failed command: nonzero exit (1 or 2; fsck 8), no panic, a short message.
fn assert_clear_error(o: &Output, what: &str) {
    let e = stderr(o);
    assert!(!o.status.success(), "{what}: succeeded\n{e}");
    assert!(
        matches!(o.status.code(), Some(1 | 2 | 8)),
        "{what}: exit {:?}\n{e}",
        o.status.code()
    );
    assert!(!e.contains("panicked"), "{what}: panic\n{e}");
    assert!(!e.trim().is_empty(), "{what}: no message");
}

/// A file of known, non-zero contents (not a file system), and its checksum.
fn user_file(path: &Path, bytes: usize) -> u64 {
    let mut v = vec![0u8; bytes];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for c in v.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
    std::fs::write(path, &v).unwrap();
    digest(path)
}

fn digest(path: &Path) -> u64 {
    let v = std::fs::read(path).unwrap();
    v.chunks(8).fold(v.len() as u64, |h, c| {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        (h ^ u64::from_le_bytes(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn bad_sizes_and_options_are_clear_errors() {
    let d = scratch("sizes");
    for args in [
        &["mkfs", "--size", "0", "a.img"][..],
        &["mkfs", "--size", "1XB", "a.img"],
        &["mkfs", "--size", "1EiB", "a.img"],
        &["mkfs", "--size", "99999999999999999999999", "a.img"],
        &["mkfs", "--size", "-1", "a.img"],
        &["mkfs", "a.img"],
        &["--bogus"],
        &["bench", "--threads", "0"],
        &["bench", "--duration", "0"],
        &["bench", "--duration", "nan"],
        &["bench", "--device", "970pro-like:0"],
        &["bench", "--device", "970pro-like:1XB"],
        &["bench", "--device", "floppy:1GiB"],
        &["bench", "--policies", "zfs"],
        &["bench", "--policies", ","],
        &["bench", "--fill", "2"],
        &["bench", "--sample-ms", "0"],
        &["ssd", "--preset", "floppy", "--no-plot"],
        &["ssd", "--preset", "tiny", "--qd", "0", "--no-plot"],
        &["ssd", "--preset", "tiny", "--bs", "1000", "--no-plot"],
    ] {
        let o = flashlog(args, &d);
        assert_clear_error(&o, &args.join(" "));
    }
    assert!(
        !d.join("a.img").exists(),
        "a refused mkfs left a.img behind"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn fsck_and_inspect_refuse_what_is_not_a_volume_and_leave_it_alone() {
    let d = scratch("notvol");
    std::fs::write(d.join("empty.img"), b"").unwrap();
    std::fs::write(d.join("tiny.img"), [7u8; 3000]).unwrap();
    user_file(&d.join("random.img"), 8 << 20);
    std::fs::create_dir(d.join("dir")).unwrap();
    // A real volume, cut short.
    let o = flashlog(&["mkfs", "--size", "64M", "vol.img"], &d);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::copy(d.join("vol.img"), d.join("cut.img")).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("cut.img"))
        .unwrap();
    f.set_len(40 << 20).unwrap();
    drop(f);
    for img in [
        "empty.img",
        "tiny.img",
        "random.img",
        "dir",
        "cut.img",
        "missing.img",
    ] {
        let before = d.join(img).is_file().then(|| digest(&d.join(img)));
        let o = flashlog(&["fsck", img], &d);
        assert_eq!(o.status.code(), Some(8), "fsck {img}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        let o = flashlog(&["inspect", img], &d);
        assert_clear_error(&o, &format!("inspect {img}"));
        let o = flashlog(&["inspect", "--json", img], &d);
        assert_clear_error(&o, &format!("inspect --json {img}"));
        let after = d.join(img).is_file().then(|| digest(&d.join(img)));
        assert_eq!(before, after, "{img} changed");
    }
    // Less than a block is not called empty (it said "is empty" of these 3,000 bytes).
    let o = flashlog(&["mkfs", "tiny.img"], &d);
    assert!(
        stderr(&o).contains("holds 3000 bytes, less than one 4 KiB block"),
        "{}",
        stderr(&o)
    );
    let o = flashlog(&["mkfs", "empty.img"], &d);
    assert!(stderr(&o).contains("is empty"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// mkfs checks every option before it creates or resizes its target: a 128 MiB user file
/// (no file system on it, so no --force is needed) given `--size 64M --mlogs x` keeps its
/// size and bytes. Before the fix `set_len` ran first and the file lost its second half.
#[test]
fn mkfs_with_a_bad_option_leaves_the_target_as_it_was() {
    let d = scratch("trunc");
    let file = d.join("data.bin");
    let sum = user_file(&file, 128 << 20);
    let o = flashlog(&["mkfs", "--size", "64M", "--mlogs", "x", "data.bin"], &d);
    assert_clear_error(&o, "mkfs --mlogs x");
    let len = std::fs::metadata(&file).unwrap().len();
    let same = len == 128 << 20 && digest(&file) == sum;
    let _ = std::fs::remove_dir_all(&d);
    assert!(
        same,
        "a refused mkfs (exit {:?}: {}) left data.bin at {len} bytes (was {})",
        o.status.code(),
        stderr(&o).trim(),
        128u64 << 20
    );
}

/// A refused `mkfs --size` leaves no image behind (before: a 64 MiB file with no volume for
/// `--segs-per-sec 3`, an empty one when the size could not be allocated), and the OS error
/// is said once.
#[test]
fn a_refused_mkfs_leaves_no_new_image_behind() {
    let d = scratch("leftover");
    let o = flashlog(
        &["mkfs", "--size", "64M", "--segs-per-sec", "3", "a.img"],
        &d,
    );
    assert_clear_error(&o, "mkfs --segs-per-sec 3");
    let a = d.join("a.img").exists();
    let o2 = flashlog(&["mkfs", "--size", "16384T", "b.img"], &d);
    assert_clear_error(&o2, "mkfs --size 16384T");
    let b = d.join("b.img").exists();
    let e2 = stderr(&o2);
    assert!(
        e2.matches("os error").count() <= 1,
        "the OS error said twice: {e2}"
    );
    let _ = std::fs::remove_dir_all(&d);
    assert!(
        !a && !b,
        "left behind: a.img {a} ({}), b.img {b} ({})",
        stderr(&o).trim(),
        stderr(&o2).trim()
    );
}

/// `bench --ssd-set` and `--clock` need an emulated SSD: with `--device ram:SIZE` they are
/// refused, not accepted without effect and echoed into report.json's `command` as if they
/// had applied (`mount` refuses `--ssd-set` off the emulator too).
#[test]
fn bench_refuses_emulator_settings_off_the_emulator() {
    let d = scratch("ssdset");
    let mut accepted = Vec::new();
    for extra in [
        &["--ssd-set", "op=0.2"][..],
        &["--ssd-set", "nosuch=1"],
        &["--clock", "sundial"],
    ] {
        let mut args = vec!["bench", "--device", "ram:64MiB", "--policies", "nosuch"];
        args.extend_from_slice(extra);
        let o = flashlog(&args, &d);
        assert_clear_error(&o, &args.join(" "));
        let e = stderr(&o);
        if e.contains("unknown policy") {
            accepted.push(format!("{}: not refused ({})", extra.join(" "), e.trim()));
        }
    }
    let _ = std::fs::remove_dir_all(&d);
    assert!(accepted.is_empty(), "{}", accepted.join("\n"));
}

/// `--mlogs` outside what mkfs accepts (1-32) is refused by the argument parser, before a
/// warm-up or a fill spends minutes (it was refused only at the first mkfs).
#[test]
fn bench_refuses_an_mlog_count_mkfs_would_refuse_before_it_starts() {
    let d = scratch("mlogs");
    for n in ["0", "33"] {
        let args = [
            "bench",
            "--device",
            "ram:64MiB",
            "--duration",
            "1",
            "--mlogs",
            n,
        ];
        let o = flashlog(&args, &d);
        assert_clear_error(&o, &args.join(" "));
        assert!(stderr(&o).contains("--mlogs"), "{}", stderr(&o));
        assert!(
            !d.join("bench-out").exists(),
            "--mlogs {n}: the bench started"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// The volume lock (flashlog-dev's `FileDevice`, 2026-11-28; before, the CLI took it on a
/// descriptor of its own and a program linking the core did not see it): with the lock
/// held elsewhere (here, as another process's mount holds it), fsck and mkfs wait for it
/// and then go on; inspect reads the volume at once and says it is in use; `mkfs | head
/// -1` keeps the image it made (a broken pipe used to unwind through the guard that
/// removes a half-made image).
#[test]
fn commands_wait_for_a_volume_in_use_and_mkfs_survives_a_closed_pipe() {
    let d = scratch("lock");
    let img = d.join("v.img");
    let o = flashlog(&["mkfs", "--size", "64M", img.to_str().unwrap()], &d);
    assert!(o.status.success(), "{}", stderr(&o));
    let holder = std::fs::File::open(&img).unwrap();
    holder.lock().unwrap();
    let o = flashlog(&["inspect", img.to_str().unwrap()], &d);
    assert!(
        o.status.success(),
        "inspect of a volume in use: {}",
        stderr(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("is mounted"),
        "inspect did not say the volume is in use:\n{out}"
    );
    // The lock is let go once fsck says it waits for it (it does after waiting 1 s), not
    // at a fixed time: a release timed from before inspect left fsck less than the 1 s it
    // waits before it says so whenever inspect and fsck's start were slow (a loaded
    // machine), and a fsck that never waits says nothing and gets the lock only when its
    // stderr ends.
    let t = std::time::Instant::now();
    let mut fsck = Command::new(env!("CARGO_BIN_EXE_flashlog"))
        .args(["fsck", img.to_str().unwrap()])
        .current_dir(&d)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run flashlog");
    let (said_tx, said_rx) = std::sync::mpsc::channel();
    let err = fsck.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(err).lines() {
            let line = line.unwrap();
            if line.contains("waiting for") {
                let _ = said_tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // fsck gives up after 30 s of waiting.
    let said = said_rx.recv_timeout(std::time::Duration::from_secs(60));
    drop(holder);
    let o = fsck.wait_with_output().unwrap();
    let err = reader.join().unwrap();
    assert!(
        said.is_ok(),
        "fsck did not say it waits for the lock: {err}"
    );
    assert!(
        o.status.success(),
        "fsck after the lock was released: {err}"
    );
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(1000),
        "fsck did not wait for the lock ({:?})",
        t.elapsed()
    );
    // mkfs into a pipe closed after its first line.
    let made = d.join("piped.img");
    let sh = format!(
        "{} mkfs --size 64M {} | head -c 1 > /dev/null",
        env!("CARGO_BIN_EXE_flashlog"),
        made.display()
    );
    let o = Command::new("sh").arg("-c").arg(&sh).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        made.exists(),
        "mkfs into a closed pipe removed the image it made"
    );
    let o = flashlog(&["fsck", made.to_str().unwrap()], &d);
    assert!(o.status.success(), "{}", stderr(&o));
    // The tools that only print end quietly when their reader goes away (they panicked in
    // `println!`: "failed printing to stdout: Broken pipe").
    for cmd in ["inspect", "fsck"] {
        let sh = format!(
            "{} {cmd} {} | head -c 1 > /dev/null",
            env!("CARGO_BIN_EXE_flashlog"),
            made.display()
        );
        let o = Command::new("sh").arg("-c").arg(&sh).output().unwrap();
        assert!(!stderr(&o).contains("panicked"), "{cmd}: {}", stderr(&o));
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// An image that cannot be opened for writing (immutable, on a read-only file system, or
/// not writable by this user): mount refuses it with the way out, -o ro (review,
/// 2026-11-28: it said only "cannot open ...: I/O error: Operation not permitted").
/// As root the image is made immutable (chattr +i; skipped where that is not supported),
/// otherwise read-only by its mode. Refused before FUSE is used.
#[test]
fn mount_of_an_image_that_cannot_be_written_suggests_ro() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: no /dev/fuse (mount refuses earlier)");
        return;
    }
    let d = scratch("ro-image");
    let img = d.join("v.img");
    let mnt = d.join("m");
    std::fs::create_dir_all(&mnt).unwrap();
    let o = flashlog(&["mkfs", "--size", "64M", img.to_str().unwrap()], &d);
    assert!(o.status.success(), "{}", stderr(&o));
    let root = nix::unistd::geteuid().is_root();
    let chattr = |flag: &str| {
        Command::new("chattr")
            .args([flag, img.to_str().unwrap()])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if root {
        if !chattr("+i") {
            eprintln!("skipped: chattr +i not supported here");
            return;
        }
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&img, std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    let o = flashlog(&["mount", img.to_str().unwrap(), mnt.to_str().unwrap()], &d);
    if root {
        chattr("-i");
    }
    assert_clear_error(&o, "mount of an image that cannot be written");
    let e = stderr(&o);
    assert!(e.contains("mount it with -o ro"), "no -o ro hint: {e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A volume whose tables this machine cannot hold (1 EiB: a 73 TiB segment table) is
/// refused with a clear error before anything is written, and no image is left. Before,
/// mkfs of 1 PiB filled memory until the kernel killed it (22 GiB touched on a 24 GiB
/// machine, the 1 PiB image left behind), and under a memory limit it aborted with
/// "memory allocation of 77002786224 bytes failed". A refused mkfs over an existing volume
/// leaves it as it was. On a tmpfs, which takes files of any
/// size (ext4 refuses files past 16 TiB before mkfs gets this far).
#[test]
fn mkfs_of_a_volume_larger_than_memory_is_refused() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm: skipped");
        return;
    }
    let d = shm.join(format!("flashlog-huge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let o = flashlog(&["mkfs", "--size", "1048576T", "huge.img"], &d);
    let left = d.join("huge.img").exists();
    // Over an existing volume with --force: refused before its metadata is zeroed (the
    // check came after the zeroing at first).
    let old = d.join("old.img");
    let made = flashlog(&["mkfs", "--size", "64M", "old.img"], &d);
    assert!(made.status.success(), "{}", stderr(&made));
    let before = digest(&old);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_len(1 << 60)
        .unwrap();
    let o2 = flashlog(&["mkfs", "--force", "--size", "1048576T", "old.img"], &d);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let after = digest(&old);
    let _ = std::fs::remove_dir_all(&d);
    assert_clear_error(&o, "mkfs --size 1048576T");
    let e = stderr(&o);
    assert!(e.contains("not enough memory"), "{e}");
    assert!(!left, "the image was left behind");
    assert_clear_error(&o2, "mkfs --force --size 1048576T over a volume");
    assert!(stderr(&o2).contains("not enough memory"), "{}", stderr(&o2));
    assert_eq!(before, after, "the refused mkfs changed the volume");
}

/// A child memory cgroup of this machine (v1 memory controller, else cgroup v2 with the
/// memory controller enabled for children of the root) limited to `limit` bytes; `None` where
/// neither can be made (no root, no controller for the root's children).
fn memory_cgroup(name: &str, limit: u64) -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut v1 = None;
    let mut v2 = None;
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let Some(point) = pre.split(' ').nth(4).map(PathBuf::from) else {
            continue;
        };
        let post: Vec<&str> = post.split(' ').collect();
        match post[..] {
            ["cgroup", _, opts, ..] if opts.split(',').any(|o| o == "memory") => {
                v1.get_or_insert(point);
            }
            ["cgroup2", ..] => {
                v2.get_or_insert(point);
            }
            _ => {}
        }
    }
    let make = |dir: PathBuf, file: &str| -> Option<PathBuf> {
        std::fs::create_dir(&dir).ok()?;
        if std::fs::write(dir.join(file), limit.to_string()).is_err() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(dir)
    };
    if let Some(m) = v1 {
        if let Some(d) = make(m.join(name), "memory.limit_in_bytes") {
            return Some(d);
        }
    }
    // v2: only where the memory controller is already enabled for the root's children (the
    // test does not change the machine's cgroup setup).
    let m = v2?;
    let ctl = std::fs::read_to_string(m.join("cgroup.subtree_control")).ok()?;
    if !ctl.split_whitespace().any(|c| c == "memory") {
        return None;
    }
    make(m.join(name), "memory.max")
}

/// A sparse file's checksum from its data extents only (SEEK_DATA/SEEK_HOLE), with their
/// offsets and the file's length: a 16 TiB image in about a MiB of reads.
fn sparse_digest(path: &Path) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::fd::AsRawFd;
    let mut f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    let mut h = len;
    let mut pos = 0i64;
    let mut buf = Vec::new();
    loop {
        // SAFETY: lseek on a descriptor this function owns.
        let data = unsafe { libc::lseek(f.as_raw_fd(), pos, libc::SEEK_DATA) };
        if data < 0 {
            break; // ENXIO: no data past `pos`
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(f.as_raw_fd(), data, libc::SEEK_HOLE) };
        assert!(hole > data, "SEEK_HOLE at {data}");
        f.seek(SeekFrom::Start(data as u64)).unwrap();
        buf.resize((hole - data) as usize, 0);
        f.read_exact(&mut buf).unwrap();
        h = (h ^ data as u64).wrapping_mul(0x100_0000_01b3);
        for c in buf.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            h = (h ^ u64::from_le_bytes(b)).wrapping_mul(0x100_0000_01b3);
        }
        pos = hole;
    }
    h
}

/// In a container or a service with a memory limit (a cgroup's), `MemAvailable` is the
/// host's. Before, mount's table check passed against it and the process was SIGKILLed by
/// the OOM killer while filling its tables (no message: `mount --daemon` said only that its
/// background process exited, `fsck`, which had no check at all, died of SIGKILL). Now fsck
/// and mount of a 16 TiB volume (tables: 2 GiB for mount, 160 MiB for fsck, which keeps
/// 19 bytes per segment; at 4 TiB, this test's size until fsck's SIT shrank on 2026-11-29,
/// fsck fits in the limit now) under a 128 MiB cgroup limit exit with "not enough memory"
/// naming the cgroup's limit, and leave the volume as it was. Needs root (to make the
/// cgroup); skipped otherwise.
#[test]
fn fsck_and_mount_under_a_cgroup_memory_limit_are_refused_not_killed() {
    use std::os::unix::process::ExitStatusExt;
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm: skipped");
        return;
    }
    let d = shm.join(format!("flashlog-cgmem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("mnt")).unwrap();
    let Some(cg) = memory_cgroup(&format!("flashlog-test-{}", std::process::id()), 128 << 20)
    else {
        let _ = std::fs::remove_dir_all(&d);
        eprintln!("cannot make a memory cgroup (not root, or no memory controller): skipped");
        return;
    };
    let made = flashlog(&["mkfs", "--size", "16T", "big.img"], &d);
    assert!(made.status.success(), "{}", stderr(&made));
    let img = d.join("big.img");
    let before = sparse_digest(&img);
    let in_cgroup = |args: &[&str]| -> Output {
        let join = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", cg.display());
        Command::new("sh")
            .args(["-c", &join, "sh", env!("CARGO_BIN_EXE_flashlog")])
            .args(args)
            .current_dir(&d)
            .output()
            .expect("run flashlog in the cgroup")
    };
    let fsck = in_cgroup(&["fsck", "big.img"]);
    let mount = in_cgroup(&["mount", "--daemon", "--log", "mount.log", "big.img", "mnt"]);
    // Nothing may stay mounted, whatever happened.
    let _ = Command::new("fusermount3")
        .args(["-u", "-q"])
        .arg(d.join("mnt"))
        .status();
    let after = sparse_digest(&img);
    let log = std::fs::read_to_string(d.join("mount.log")).unwrap_or_default();
    // The cgroup can go once the processes in it are gone (a daemon that did mount exits
    // after its unmount).
    let mut removed = false;
    for _ in 0..100 {
        if std::fs::remove_dir(&cg).is_ok() {
            removed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(&d);
    for (o, what) in [(&fsck, "fsck"), (&mount, "mount --daemon")] {
        assert_eq!(
            o.status.signal(),
            None,
            "{what} was killed by a signal\n{}",
            stderr(o)
        );
        assert_clear_error(o, what);
        let e = stderr(o);
        assert!(e.contains("not enough memory"), "{what}: {e}\nlog: {log}");
        assert!(e.contains("cgroup memory limit"), "{what}: {e}");
    }
    assert_eq!(
        fsck.status.code(),
        Some(8),
        "fsck: not an operational error"
    );
    assert_eq!(before, after, "the refused commands changed the volume");
    assert!(removed, "the cgroup {} could not be removed", cg.display());
}
