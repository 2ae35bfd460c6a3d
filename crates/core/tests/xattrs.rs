//! Extended attributes and POSIX ACLs under every GC policy: limits and flags, the xattr
//! node's nid and block accounted exactly once (fsck, statfs), eager moves of xattr nodes
//! and inode blocks between xattr changes and fsyncs followed by a power cut (f2fs and scale
//! on the crash simulator with one and two mlogs; none and device on the emulated SSD),
//! concurrent setxattr/removexattr/fsync beside cleaners, orphans with xattrs freed on
//! remount, and a mkdir whose inherited ACLs do not fit one xattr node (found in review,
//! 2026-11-28: it panicked in `node::set_xattrs` and the half-made inode reached the
//! checkpoint). Knob: `SEEDS`.

use flashlog_core::gc::{clean_section, Migration};
use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, RamDevice, SimDevice};
use flashlog_format::acl::{tag, Acl, AclEntry, ACCESS_NAME, DEFAULT_NAME, UNDEFINED_ID};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

mod common;

const BS: u64 = BLOCK_SIZE as u64;
/// Bytes of xattr entries an xattr node holds (`node::XATTR_SPACE` less the terminator).
const SPACE: usize = flashlog_format::node::XATTR_SPACE - 1;

fn base_opts(gc: GcPolicy) -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        gc,
        acl: true,
        ..Default::default()
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Snap {
    mode: u32,
    ctime: (i64, u32),
    size: u64,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

fn snap(fs: &Fs, ino: Ino) -> Snap {
    let a = fs.getattr(ino).unwrap();
    let mut xattrs: Vec<_> = fs
        .listxattr(ino)
        .unwrap()
        .into_iter()
        .map(|n| {
            let v = fs.getxattr(ino, &n).unwrap();
            (n, v)
        })
        .collect();
    xattrs.sort();
    Snap {
        mode: a.mode,
        ctime: (a.ctime.sec, a.ctime.nsec),
        size: a.size,
        xattrs,
    }
}

fn e(tag: u16, perm: u16, id: u32) -> AclEntry {
    AclEntry { tag, perm, id }
}

fn named_acl(uid: u32, perm: u16) -> Vec<u8> {
    Acl {
        entries: vec![
            e(tag::USER_OBJ, 6, UNDEFINED_ID),
            e(tag::USER, perm, uid),
            e(tag::GROUP_OBJ, 4, UNDEFINED_ID),
            e(tag::MASK, 7, UNDEFINED_ID),
            e(tag::OTHER, 0, UNDEFINED_ID),
        ],
    }
    .encode()
}

fn xnid(fs: &Fs, ino: Ino) -> u32 {
    let c = fs.inner().cell(ino).unwrap();
    let st = c.lock();
    st.hdr.xattr_nid
}

/// Eagerly clean the section holding node `nid` (if it has an address).
fn clean_node_section(fs: &Fs, nid: u32) {
    let inner = fs.inner();
    let addr = inner.nat.addr(nid);
    if addr == 0 || addr == u64::MAX {
        return;
    }
    let geo = inner.geo();
    let Some(seg) = geo.seg_of(addr) else { return };
    let sec = seg / geo.segs_per_sec as u64;
    // As `gc.rs` foreground cleaning does: the gc lock, the op lock per victim, a claimed
    // section that no log head writes into.
    let _g = inner.gc_lock.lock();
    let _op = inner.oplock.op();
    if inner.seg.victims.set(sec) {
        return;
    }
    std::sync::atomic::fence(Ordering::SeqCst);
    if !inner.seg.is_current_section(sec) && inner.seg.section_valid(sec) > 0 {
        clean_section(inner, sec, Migration::Eager).unwrap();
    }
    inner.seg.victims.clear(sec);
}

fn fsck_clean(dev: &dyn BlockDevice, what: &str) -> flashlog_core::fsck::FsckReport {
    let r = flashlog_core::fsck::fsck(dev).unwrap();
    assert!(r.is_clean(), "{what}: fsck: {:?}", r.findings);
    r
}

// ---------------------------------------------------------------------------------------
// Limits and flags.

#[test]
fn limits_flags_and_empty_values() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((64 << 20) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), base_opts(GcPolicy::F2fs)).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    // Names.
    assert!(matches!(
        fs.setxattr(f, b"", b"v", XattrMode::Any),
        Err(Error::Invalid(_))
    ));
    let long: Vec<u8> = [b"user.".as_slice(), &[b'n'; 250]].concat();
    assert_eq!(long.len(), 255);
    fs.setxattr(f, &long, b"v", XattrMode::Any).unwrap();
    let too_long: Vec<u8> = [long.as_slice(), b"x"].concat();
    assert!(matches!(
        fs.setxattr(f, &too_long, b"v", XattrMode::Any),
        Err(Error::Range)
    ));
    assert_eq!(fs.getxattr(f, &long).unwrap(), b"v");
    fs.removexattr(f, &long).unwrap();
    // A NUL inside a name would split it in two in a listxattr reply.
    assert!(matches!(
        fs.setxattr(f, b"user.a\0user.b", b"v", XattrMode::Any),
        Err(Error::Invalid(_))
    ));
    assert!(fs.listxattr(f).unwrap().is_empty());
    // Empty values are values.
    fs.setxattr(f, b"user.empty", b"", XattrMode::Create)
        .unwrap();
    assert_eq!(fs.getxattr(f, b"user.empty").unwrap(), b"");
    assert_eq!(fs.listxattr(f).unwrap(), vec![b"user.empty".to_vec()]);
    // Flags.
    assert!(matches!(
        fs.setxattr(f, b"user.empty", b"x", XattrMode::Create),
        Err(Error::Exists)
    ));
    assert!(matches!(
        fs.setxattr(f, b"user.none", b"x", XattrMode::Replace),
        Err(Error::NoAttr)
    ));
    assert!(matches!(
        fs.removexattr(f, b"user.none"),
        Err(Error::NoAttr)
    ));
    assert!(matches!(fs.getxattr(f, b"user.none"), Err(Error::NoAttr)));
    fs.setxattr(f, b"user.empty", b"now", XattrMode::Replace)
        .unwrap();
    assert_eq!(fs.getxattr(f, b"user.empty").unwrap(), b"now");
    fs.removexattr(f, b"user.empty").unwrap();
    assert_eq!(xnid(&fs, f), 0, "the last removal frees the xattr node");
    // Values: the kernel's largest (65,536 bytes) is ENOSPC, as on ext4, and only after the
    // create/replace checks (it was EFBIG before them until 2026-11-28: a differential run
    // against tmpfs and ext4 found ENODATA expected for a replace of a missing name);
    // exactly the node's space fits; one byte more is ENOSPC and leaves the old value.
    let huge = vec![1u8; 65536];
    assert!(matches!(
        fs.setxattr(f, b"user.big", &huge, XattrMode::Any),
        Err(Error::NoSpace)
    ));
    assert!(matches!(
        fs.setxattr(f, b"user.big", &huge, XattrMode::Replace),
        Err(Error::NoAttr)
    ));
    fs.setxattr(f, b"user.small", b"v", XattrMode::Any).unwrap();
    assert!(matches!(
        fs.setxattr(f, b"user.small", &huge, XattrMode::Create),
        Err(Error::Exists)
    ));
    fs.removexattr(f, b"user.small").unwrap();
    let name = b"user.big";
    let fit = SPACE - 3 - name.len();
    fs.setxattr(f, name, &vec![2u8; fit], XattrMode::Any)
        .unwrap();
    assert!(matches!(
        fs.setxattr(f, name, &vec![3u8; fit + 1], XattrMode::Any),
        Err(Error::NoSpace)
    ));
    assert!(matches!(
        fs.setxattr(f, b"user.c", b"", XattrMode::Any),
        Err(Error::NoSpace)
    ));
    assert_eq!(fs.getxattr(f, name).unwrap(), vec![2u8; fit]);
    // A value larger than the node on a file without xattrs allocates nothing.
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    assert!(matches!(
        fs.setxattr(g, b"user.x", &vec![1u8; SPACE], XattrMode::Any),
        Err(Error::NoSpace)
    ));
    assert_eq!(xnid(&fs, g), 0);
    fs.unmount().unwrap();
    fsck_clean(&*dev, "after unmount");
    let fs = Fs::mount(dev.clone(), base_opts(GcPolicy::F2fs)).unwrap();
    assert_eq!(fs.getxattr(f, name).unwrap(), vec![2u8; fit]);
    fs.unmount().unwrap();
}

// ---------------------------------------------------------------------------------------
// Volumes per policy.

#[derive(Clone, Copy, Debug)]
enum Pol {
    F2fs,
    Scale,
    None,
    Device,
}

impl Pol {
    fn opts(self) -> MountOptions {
        match self {
            Pol::F2fs => base_opts(GcPolicy::F2fs),
            Pol::Scale => MountOptions {
                gc_workers: 2,
                ..base_opts(GcPolicy::Scale)
            },
            Pol::None => base_opts("none".parse().unwrap()),
            Pol::Device => base_opts("device".parse().unwrap()),
        }
    }
    fn ssd(self) -> Option<Arc<flashlog_ssd::SsdDevice>> {
        match self {
            Pol::None => Some(common::emulated_ssd("interval", 256 << 20)),
            Pol::Device => Some(common::emulated_ssd("coupled", 256 << 20)),
            _ => None,
        }
    }
}

/// Nids and nodes in use, and free space, after a sync.
fn counts(fs: &Fs) -> (u64, u64, u64) {
    fs.sync().unwrap();
    fs.sync().unwrap();
    let s = fs.statfs();
    (
        s.files_free,
        fs.inner().valid_nodes.load(Ordering::Relaxed),
        s.blocks_free,
    )
}

/// Xattr nodes come and go: set, remove the last, re-add, unlink, truncate, ACLs through
/// inheritance; orphans with xattrs. Every nid and block comes back, fsck is clean.
fn nid_balance(pol: Pol) {
    let ssd = pol.ssd();
    let dev: Arc<dyn BlockDevice> = match &ssd {
        Some(s) => s.clone(),
        None => Arc::new(RamDevice::new((256 << 20) / BS)),
    };
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), pol.opts()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let before = counts(&fs);
    let dacl = Acl {
        entries: vec![
            e(tag::USER_OBJ, 7, UNDEFINED_ID),
            e(tag::USER, 5, 1000),
            e(tag::GROUP_OBJ, 5, UNDEFINED_ID),
            e(tag::MASK, 7, UNDEFINED_ID),
            e(tag::OTHER, 0, UNDEFINED_ID),
        ],
    }
    .encode();
    let sub = fs.mkdir(d, b"acl", 0o755, 0, 0).unwrap().ino;
    fs.setxattr(sub, DEFAULT_NAME, &dacl, XattrMode::Any)
        .unwrap();
    for round in 0..3u8 {
        let mut files = Vec::new();
        for i in 0..40u32 {
            let parent = if i % 4 == 0 { sub } else { d };
            let name = format!("f{round}_{i}");
            let f = fs.create(parent, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
            fs.write(f, 0, &vec![i as u8; 5000]).unwrap();
            fs.setxattr(f, b"user.a", &vec![round; 100 + i as usize], XattrMode::Any)
                .unwrap();
            if i % 3 == 0 {
                fs.setxattr(f, ACCESS_NAME, &named_acl(1000 + i, 7), XattrMode::Any)
                    .unwrap();
            }
            files.push((parent, name, f));
        }
        if round == 1 {
            fs.sync().unwrap();
        }
        common::assert_budget_exact(&fs, &format!("{pol:?} round {round} after the sets"));
        for (k, (parent, name, f)) in files.iter().enumerate() {
            match k % 5 {
                0 => {
                    // Remove everything, then unlink.
                    let _ = fs.removexattr(*f, ACCESS_NAME);
                    let _ = fs.removexattr(*f, b"user.a");
                    assert!(fs.listxattr(*f).unwrap().is_empty());
                    fs.unlink(*parent, name.as_bytes()).unwrap();
                }
                1 => {
                    // Remove the last and re-add, fsync, unlink.
                    let _ = fs.removexattr(*f, ACCESS_NAME);
                    fs.removexattr(*f, b"user.a").unwrap();
                    fs.setxattr(*f, b"user.b", b"again", XattrMode::Create)
                        .unwrap();
                    fs.fsync(*f, false).unwrap();
                    fs.unlink(*parent, name.as_bytes()).unwrap();
                }
                2 => {
                    // Truncate, then unlink while open (orphan), then release.
                    fs.setattr(
                        *f,
                        &SetAttr {
                            size: Some(0),
                            ..Default::default()
                        },
                    )
                    .unwrap();
                    fs.open(*f).unwrap();
                    fs.unlink(*parent, name.as_bytes()).unwrap();
                    assert_eq!(fs.getxattr(*f, b"user.a").unwrap().len(), 100 + k);
                    if k % 2 == 0 {
                        fs.sync().unwrap();
                    }
                    fs.release(*f).unwrap();
                }
                _ => {
                    fs.unlink(*parent, name.as_bytes()).unwrap();
                }
            }
        }
    }
    common::assert_budget_exact(&fs, &format!("{pol:?} before the unlinks' checkpoint"));
    fs.rmdir(d, b"acl").unwrap();
    let after = counts(&fs);
    common::assert_budget_exact(&fs, &format!("{pol:?} at the end"));
    assert_eq!(
        (after.0, after.1),
        (before.0, before.1),
        "{pol:?}: nids / nodes leaked or double freed (files_free, valid_nodes)"
    );
    fs.unmount().unwrap();
    fsck_clean(&*dev, &format!("{pol:?} after unmount"));
    let fs = Fs::mount(dev.clone(), pol.opts()).unwrap();
    let again = counts(&fs);
    assert_eq!(
        (again.0, again.1),
        (before.0, before.1),
        "{pol:?} after remount"
    );
    fs.unmount().unwrap();
}

#[test]
fn nid_balance_f2fs() {
    nid_balance(Pol::F2fs);
}
#[test]
fn nid_balance_scale() {
    nid_balance(Pol::Scale);
}
#[test]
fn nid_balance_none() {
    nid_balance(Pol::None);
}
#[test]
fn nid_balance_device() {
    nid_balance(Pol::Device);
}

// ---------------------------------------------------------------------------------------
// Random xattr / ACL / chmod sequences with eager moves of the xattr node and the inode
// block, fsync, power cut.

/// One random step on file `f` (with `g` a second file sharing sections).
fn random_step(fs: &Fs, rng: &mut ChaCha8Rng, f: Ino, g: Ino, pol: Pol) {
    let names: [&[u8]; 4] = [b"user.a", b"user.b", b"trusted.c", b"security.d"];
    match rng.random_range(0..16u32) {
        14 | 15 => fill_and_thin(fs, rng),
        0..=3 => {
            let n = names[rng.random_range(0..4)];
            let len = [0usize, 1, 50, 900, 2000][rng.random_range(0..5)];
            let v: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let _ = fs.setxattr(f, n, &v, XattrMode::Any);
        }
        4 | 5 => {
            let n = names[rng.random_range(0..4)];
            let _ = fs.removexattr(f, n);
        }
        6 => {
            let _ = fs.setxattr(
                f,
                ACCESS_NAME,
                &named_acl(rng.random_range(1..5), rng.random_range(0..8)),
                XattrMode::Any,
            );
        }
        7 => {
            let _ = fs.removexattr(f, ACCESS_NAME);
        }
        8 => {
            fs.setattr(
                f,
                &SetAttr {
                    mode: Some(0o100000 | rng.random_range(0..0o777u32)),
                    ..Default::default()
                },
            )
            .unwrap();
        }
        9 => fs.fsync(f, false).unwrap(),
        10 => {
            if rng.random_range(0..3) == 0 {
                fs.sync().unwrap();
            } else {
                fs.fsync(g, false).unwrap();
            }
        }
        11 => {
            // Churn on g so that sections fill and become victims.
            let v: Vec<u8> = (0..rng.random_range(1..40000))
                .map(|_| rng.random())
                .collect();
            fs.write(g, 0, &v).unwrap();
            let _ = fs.setxattr(g, b"user.g", &v[..v.len().min(500)], XattrMode::Any);
        }
        12 | 13 => {
            if matches!(pol, Pol::F2fs | Pol::Scale) {
                let x = xnid(fs, f);
                if x != 0 && rng.random_bool(0.7) {
                    clean_node_section(fs, x);
                } else {
                    clean_node_section(fs, f);
                }
            } else {
                let _ = fs.gc(1);
            }
        }
        _ => unreachable!(),
    }
}

/// Node churn so that node sections roll over and become victims: 120 new files with an
/// xattr each, fsync'd (warm node log) and synced (cold), then the previous batch unlinked.
fn fill_and_thin(fs: &Fs, rng: &mut ChaCha8Rng) {
    let dir = match fs.lookup(ROOT_INO, b"fill") {
        Ok(a) => a.ino,
        Err(_) => fs.mkdir(ROOT_INO, b"fill", 0o755, 0, 0).unwrap().ino,
    };
    let batch: u32 = rng.random();
    let old: Vec<Vec<u8>> = fs
        .readdir(dir, 0, 100_000)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    for i in 0..120u32 {
        let name = format!("b{batch}_{i}");
        let x = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.setxattr(x, b"user.fill", &[i as u8; 64], XattrMode::Any)
            .unwrap();
        fs.fsync(x, false).unwrap();
    }
    fs.sync().unwrap();
    for n in old {
        fs.unlink(dir, &n).unwrap();
    }
}

fn crash_case_sim(pol: Pol, mlogs: u32, seed: u64, steps: usize, tight: bool) -> Vec<String> {
    let sim = Arc::new(SimDevice::new((128 << 20) / BS));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(
        dev.clone(),
        &MkfsOptions {
            mlogs,
            seed: Some(seed),
            ..Default::default()
        },
    )
    .unwrap();
    let mut opts = pol.opts();
    if tight {
        // Cells evicted and nodes written back by the cap relief between the steps; an
        // inode's nodes on the mlog of the thread that wrote first in the interval.
        opts.inode_cache_max = 4;
        opts.dirty_nodes_max = 8;
        opts.mlog_map = MlogMap::Thread;
    }
    let fs = Fs::mount(dev.clone(), opts.clone()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, b"data").unwrap();
    if rng.random_bool(0.5) {
        fs.sync().unwrap();
    }
    for _ in 0..steps {
        random_step(&fs, &mut rng, f, g, pol);
    }
    fs.fsync(f, false).unwrap();
    let want = snap(&fs, f);
    MOVED.fetch_add(fs.stats().gc_moved_blocks, Ordering::Relaxed);
    sim.cut_now();
    fs.abandon();
    let mut fails = Vec::new();
    for mode in CrashMode::ALL {
        let tag = format!("{pol:?} mlogs={mlogs} tight={tight} seed={seed} {mode:?}");
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, seed));
        let r = flashlog_core::fsck::fsck(&*img).unwrap();
        if !r.is_clean() {
            fails.push(format!("{tag}: fsck before recovery: {r}"));
        }
        let fs = match Fs::mount(img.clone(), opts.clone()) {
            Ok(f) => f,
            Err(e) => {
                fails.push(format!("{tag}: mount: {e}"));
                continue;
            }
        };
        match fs.getattr(f) {
            Ok(_) => {
                let got = snap(&fs, f);
                if got != want {
                    fails.push(format!("{tag}:\n  got  {got:?}\n  want {want:?}"));
                }
            }
            Err(e) => fails.push(format!("{tag}: getattr {e}")),
        }
        fs.unmount().unwrap();
        let r = flashlog_core::fsck::fsck(&*img).unwrap();
        if !r.is_clean() {
            fails.push(format!("{tag}: fsck after recovery: {r}"));
        }
    }
    fails
}

static MOVED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn seeds() -> u64 {
    std::env::var("SEEDS")
        .ok()
        .map_or(24, |v| v.parse().unwrap())
}

#[test]
fn random_xattrs_with_eager_moves_survive_power_cut_f2fs_scale() {
    let mut fails = Vec::new();
    for seed in 0..seeds() {
        for (pol, mlogs) in [
            (Pol::F2fs, 1),
            (Pol::F2fs, 2),
            (Pol::Scale, 1),
            (Pol::Scale, 2),
        ] {
            fails.extend(crash_case_sim(pol, mlogs, seed, 60, seed % 2 == 1));
        }
    }
    eprintln!("blocks moved: {}", MOVED.load(Ordering::Relaxed));
    assert!(
        fails.is_empty(),
        "{} failures:\n{}",
        fails.len(),
        fails.join("\n")
    );
}

fn crash_case_ssd(pol: Pol, seed: u64, steps: usize) -> Vec<String> {
    let ssd = pol.ssd().unwrap();
    let cut = Arc::new(common::Cut::new(ssd.clone()));
    let dev: Arc<dyn BlockDevice> = cut.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let opts = pol.opts();
    let fs = Fs::mount(dev.clone(), opts.clone()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let g = fs.create(ROOT_INO, b"g", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, b"data").unwrap();
    fs.sync().unwrap();
    for _ in 0..steps {
        random_step(&fs, &mut rng, f, g, pol);
    }
    fs.fsync(f, false).unwrap();
    let want = snap(&fs, f);
    let st = fs.stats();
    MOVED.fetch_add(
        st.gc_moved_blocks + st.upcall_pairs_applied,
        Ordering::Relaxed,
    );
    cut.cut.store(true, Ordering::Release);
    fs.abandon();
    ssd.power_cycle();
    let tag = format!("{pol:?} seed={seed}");
    let mut fails = Vec::new();
    let r = flashlog_core::fsck::fsck(&*ssd).unwrap();
    if !r.is_clean() {
        fails.push(format!("{tag}: fsck before recovery: {r}"));
    }
    let fs = match Fs::mount(ssd.clone(), opts.clone()) {
        Ok(f) => f,
        Err(e) => return vec![format!("{tag}: mount: {e}")],
    };
    let got = snap(&fs, f);
    if got != want {
        fails.push(format!("{tag}:\n  got  {got:?}\n  want {want:?}"));
    }
    fs.unmount().unwrap();
    let r = flashlog_core::fsck::fsck(&*ssd).unwrap();
    if !r.is_clean() {
        fails.push(format!("{tag}: fsck after recovery: {r}"));
    }
    fails
}

#[test]
fn random_xattrs_survive_power_cut_none_device() {
    let mut fails = Vec::new();
    for seed in 0..seeds() / 3 {
        for pol in [Pol::None, Pol::Device] {
            fails.extend(crash_case_ssd(pol, seed, 80));
        }
    }
    eprintln!(
        "blocks moved or remapped: {}",
        MOVED.load(Ordering::Relaxed)
    );
    assert!(
        fails.is_empty(),
        "{} failures:\n{}",
        fails.len(),
        fails.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// Concurrency: writers change their own file's xattrs and fsync while a cleaner moves
// node blocks; every getxattr matches the writer's model; then a fsync and power cut.

fn concurrent(pol: Pol, seed: u64) {
    let sim = Arc::new(SimDevice::new((128 << 20) / BS));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(
        dev.clone(),
        &MkfsOptions {
            mlogs: 2,
            seed: Some(seed),
            ..Default::default()
        },
    )
    .unwrap();
    let mut opts = pol.opts();
    // Background cleaning allowed too (it rarely finds a victim in this short run).
    opts.gc_interval = Some(std::time::Duration::from_millis(2));
    opts.gc_idle = std::time::Duration::ZERO;
    let fs = Arc::new(Fs::mount(dev.clone(), opts.clone()).unwrap());
    let files: Vec<Ino> = (0..3)
        .map(|i| {
            fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        })
        .collect();
    fs.sync().unwrap();
    common::widen_races(&fs, seed);
    let stop = Arc::new(AtomicBool::new(false));
    let cleaner = {
        let fs = fs.clone();
        let stop = stop.clone();
        let files = files.clone();
        std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc1ea);
            while !stop.load(Ordering::Relaxed) {
                let f = files[rng.random_range(0..files.len())];
                let x = xnid(&fs, f);
                let nid = if x != 0 && rng.random_bool(0.7) { x } else { f };
                if rng.random_bool(0.5) {
                    let _ = fs.gc(1);
                } else {
                    clean_node_section(&fs, nid);
                }
                if rng.random_range(0..20) == 0 {
                    fs.sync().unwrap();
                }
            }
        })
    };
    // Warm node log churn: every fsync of this file writes its inode (and a direct node),
    // so node sections roll over and the old ones, mostly invalid, become victims.
    let filler = {
        let fs = fs.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let c = fs.create(ROOT_INO, b"churn", 0o644, 0, 0).unwrap().ino;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                fs.write(c, (i % 600) * BS, &[i as u8; 100]).unwrap();
                fs.fsync(c, false).unwrap();
                i += 1;
            }
        })
    };
    let writers: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(t, &f)| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed * 31 + t as u64);
                let mut model: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
                for step in 0..2000 {
                    let n = format!("user.{}", rng.random_range(0..5)).into_bytes();
                    if rng.random_bool(0.3) {
                        let r = fs.removexattr(f, &n);
                        assert_eq!(r.is_ok(), model.remove(&n).is_some(), "t{t} step {step}");
                    } else {
                        let len = rng.random_range(0..600);
                        let v: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                        fs.setxattr(f, &n, &v, XattrMode::Any).unwrap();
                        model.insert(n, v);
                    }
                    if rng.random_range(0..8) == 0 {
                        fs.fsync(f, false).unwrap();
                    }
                    if rng.random_range(0..4) == 0 {
                        std::thread::sleep(std::time::Duration::from_micros(300));
                    }
                    let got: std::collections::BTreeMap<_, _> = fs
                        .listxattr(f)
                        .unwrap()
                        .into_iter()
                        .map(|n| {
                            let v = fs.getxattr(f, &n).unwrap();
                            (n, v)
                        })
                        .collect();
                    assert_eq!(got, model, "t{t} step {step}: xattrs differ from the model");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    cleaner.join().unwrap();
    filler.join().unwrap();
    eprintln!(
        "{pol:?} seed {seed}: blocks moved {} (background runs {})",
        fs.stats().gc_moved_blocks,
        fs.stats().gc_bg_runs
    );
    common::narrow_races(&fs);
    for &f in &files {
        fs.fsync(f, false).unwrap();
    }
    let want: Vec<Snap> = files.iter().map(|&f| snap(&fs, f)).collect();
    sim.cut_now();
    Arc::try_unwrap(fs).ok().unwrap().abandon();
    for mode in CrashMode::ALL {
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, seed));
        fsck_clean(
            &*img,
            &format!("{pol:?} seed {seed} {mode:?} before recovery"),
        );
        let fs = Fs::mount(img.clone(), opts.clone()).unwrap();
        for (k, &f) in files.iter().enumerate() {
            assert_eq!(snap(&fs, f), want[k], "{pol:?} seed {seed} {mode:?} f{k}");
        }
        fs.unmount().unwrap();
        fsck_clean(
            &*img,
            &format!("{pol:?} seed {seed} {mode:?} after recovery"),
        );
    }
}

#[test]
fn concurrent_xattrs_beside_cleaners_f2fs() {
    for seed in 0..3 {
        concurrent(Pol::F2fs, seed);
    }
}

#[test]
fn concurrent_xattrs_beside_cleaners_scale() {
    for seed in 0..3 {
        concurrent(Pol::Scale, seed);
    }
}

// ---------------------------------------------------------------------------------------
// Orphans with xattrs.

fn orphan_with_xattrs(pol: Pol) {
    let (dev, ssd, sim): (Arc<dyn BlockDevice>, _, _) = match pol.ssd() {
        Some(s) => {
            let c = Arc::new(common::Cut::new(s.clone()));
            (c.clone() as Arc<dyn BlockDevice>, Some((s, c)), None)
        }
        None => {
            let s = Arc::new(SimDevice::new((128 << 20) / BS));
            (s.clone() as Arc<dyn BlockDevice>, None, Some(s))
        }
    };
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), pol.opts()).unwrap();
    let base = counts(&fs).0;
    let mut inos = Vec::new();
    for i in 0..6u32 {
        let f = fs
            .create(ROOT_INO, format!("o{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(f, 0, &vec![1u8; 9000]).unwrap();
        fs.setxattr(f, b"user.o", &vec![i as u8; 700], XattrMode::Any)
            .unwrap();
        fs.setxattr(f, ACCESS_NAME, &named_acl(7, 5), XattrMode::Any)
            .unwrap();
        fs.open(f).unwrap();
        fs.unlink(ROOT_INO, format!("o{i}").as_bytes()).unwrap();
        if i % 2 == 0 {
            fs.fsync(f, false).unwrap();
        }
        inos.push(f);
    }
    fs.sync().unwrap();
    // One more change to an orphan's xattrs after the checkpoint, fsync'd.
    fs.setxattr(inos[1], b"user.late", b"x", XattrMode::Any)
        .unwrap();
    fs.fsync(inos[1], false).unwrap();
    match (&ssd, &sim) {
        (Some((_, c)), _) => c.cut.store(true, Ordering::Release),
        (_, Some(s)) => s.cut_now(),
        _ => unreachable!(),
    }
    fs.abandon();
    let img: Arc<dyn BlockDevice> = match (&ssd, &sim) {
        (Some((s, _)), _) => {
            s.power_cycle();
            s.clone()
        }
        (_, Some(s)) => Arc::new(s.crash_image(CrashMode::DropUnflushed, 1)),
        _ => unreachable!(),
    };
    fsck_clean(&*img, &format!("{pol:?} before recovery"));
    let fs = Fs::mount(img.clone(), pol.opts()).unwrap();
    for &f in &inos {
        assert!(fs.getattr(f).is_err(), "{pol:?}: orphan {f} not freed");
    }
    assert_eq!(counts(&fs).0, base, "{pol:?}: orphans' nids not all freed");
    fs.unmount().unwrap();
    fsck_clean(&*img, &format!("{pol:?} after recovery"));
}

#[test]
fn orphans_with_xattrs_f2fs() {
    orphan_with_xattrs(Pol::F2fs);
}
#[test]
fn orphans_with_xattrs_scale() {
    orphan_with_xattrs(Pol::Scale);
}
#[test]
fn orphans_with_xattrs_none() {
    orphan_with_xattrs(Pol::None);
}
#[test]
fn orphans_with_xattrs_device() {
    orphan_with_xattrs(Pol::Device);
}

// ---------------------------------------------------------------------------------------
// Inherited ACLs larger than the xattr node.

/// A default ACL of `users` named user entries.
fn big_default(users: u32) -> Vec<u8> {
    let mut entries = vec![e(tag::USER_OBJ, 7, UNDEFINED_ID)];
    entries.extend((0..users).map(|u| e(tag::USER, 5, 2000 + u)));
    entries.push(e(tag::GROUP_OBJ, 5, UNDEFINED_ID));
    entries.push(e(tag::MASK, 7, UNDEFINED_ID));
    entries.push(e(tag::OTHER, 0, UNDEFINED_ID));
    Acl { entries }.encode()
}

/// A directory's default ACL fits the xattr node alone (setxattr accepts it), but a new
/// subdirectory inherits it twice (access + default ACL) and the pair does not fit: mkdir
/// is refused with ENOSPC (as ext4's `ext4_init_acl`) and changes nothing. Before the fix
/// `make_node` stored the inherited ACLs without the size check, `node::set_xattrs` panicked
/// writing past the node's body, and the half-made, nameless inode reached the checkpoint
/// (fsck: "node 8 (inode 8) is not reachable", counts off).
#[test]
fn mkdir_under_a_large_default_acl_fails_cleanly() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((64 << 20) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), base_opts(GcPolicy::F2fs)).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let acl = big_default(300);
    assert!(acl.len() + DEFAULT_NAME.len() + 3 < SPACE, "fits alone");
    assert!(
        2 * (acl.len() + DEFAULT_NAME.len() + 3) > SPACE,
        "not twice"
    );
    fs.setxattr(d, DEFAULT_NAME, &acl, XattrMode::Any).unwrap();
    // A file inherits only the access ACL: fits.
    let f = fs.create(d, b"f", 0o644, 0, 0).unwrap().ino;
    assert!(fs.getxattr(f, ACCESS_NAME).is_ok());
    let before = counts(&fs);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fs.mkdir(d, b"sub", 0o755, 0, 0)
    }));
    let Ok(r) = r else {
        // What the panic left behind: a nameless directory inode in the cell table whose
        // xattr_nid names a node that was never written.
        let unmount = fs.unmount();
        let report = flashlog_core::fsck::fsck(&*dev).unwrap();
        panic!(
            "mkdir under a large default ACL panicked (set_xattrs past the xattr node body); \
             then unmount: {unmount:?}; fsck clean: {}, findings: {:?}",
            report.is_clean(),
            report.findings
        );
    };
    assert!(matches!(r, Err(Error::NoSpace)), "{r:?}");
    assert!(matches!(fs.lookup(d, b"sub"), Err(Error::NotFound)));
    assert_eq!(counts(&fs), before, "a refused mkdir changed the counts");
    // A file still inherits its access ACL; the directory keeps its default ACL.
    fs.create(d, b"g", 0o644, 0, 0).unwrap();
    assert_eq!(fs.getxattr(d, DEFAULT_NAME).unwrap(), acl);
    fs.unmount().unwrap();
    fsck_clean(&*dev, "after unmount");
}

// ---------------------------------------------------------------------------------------
// gc=device under pressure: the device moves node blocks (xattr nodes among them) while
// xattrs change and are fsync'd; power cut after an fsync.

#[test]
fn device_remaps_xattr_nodes_then_power_cut() {
    let ssd = common::emulated_ssd("coupled", 256 << 20);
    let cut = Arc::new(common::Cut::new(ssd.clone()));
    let dev: Arc<dyn BlockDevice> = cut.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let opts = Pol::Device.opts();
    let fs = Fs::mount(dev.clone(), opts.clone()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let files: Vec<Ino> = (0..8)
        .map(|i| {
            fs.create(ROOT_INO, format!("x{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        })
        .collect();
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    let span = fs.statfs().blocks * 6 / 10;
    let chunk = vec![7u8; 256 << 10];
    for round in 0..(span * 4 * BS / (256 << 10)) {
        let off = rng.random_range(0..span * BS / (256 << 10)) * (256 << 10);
        fs.write(big, off, &chunk).unwrap();
        for &f in &files {
            if rng.random_range(0..4) == 0 {
                let n = format!("user.{}", rng.random_range(0..3));
                let v: Vec<u8> = (0..rng.random_range(0..900))
                    .map(|_| rng.random())
                    .collect();
                fs.setxattr(f, n.as_bytes(), &v, XattrMode::Any).unwrap();
                if rng.random_bool(0.3) {
                    fs.removexattr(f, n.as_bytes()).unwrap();
                }
                fs.fsync(f, false).unwrap();
            }
        }
        if round % 64 == 0 {
            fs.sync().unwrap();
        }
    }
    for &f in &files {
        fs.fsync(f, false).unwrap();
    }
    let want: Vec<Snap> = files.iter().map(|&f| snap(&fs, f)).collect();
    let st = fs.stats();
    eprintln!(
        "device: upcall pairs applied {} skipped {}",
        st.upcall_pairs_applied, st.upcall_pairs_skipped
    );
    cut.cut.store(true, Ordering::Release);
    fs.abandon();
    ssd.power_cycle();
    fsck_clean(&*ssd, "device before recovery");
    let fs = Fs::mount(ssd.clone(), opts.clone()).unwrap();
    for (k, &f) in files.iter().enumerate() {
        assert_eq!(snap(&fs, f), want[k], "x{k}");
    }
    fs.unmount().unwrap();
    fsck_clean(&*ssd, "device after recovery");
}
