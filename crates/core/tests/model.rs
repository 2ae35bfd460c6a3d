//! Model-based test: random operation sequences (with unmount/remount) against an in-memory
//! model of the namespace and file contents; every result and the final tree must match,
//! and fsck must be clean after every remount.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const DIRS: [&str; 3] = ["/", "/a", "/a/b"];
const NAMES: [&str; 5] = [
    "f0",
    "f1",
    "f2",
    "long-name-to-use-more-slots-in-dentries-xxxxxxxxxxxxxxxx",
    "f4",
];

#[derive(Clone, Debug)]
enum Op {
    Write {
        d: usize,
        n: usize,
        off: u64,
        len: usize,
        byte: u8,
    },
    Truncate {
        d: usize,
        n: usize,
        size: u64,
    },
    Punch {
        d: usize,
        n: usize,
        off: u64,
        len: u64,
    },
    Unlink {
        d: usize,
        n: usize,
    },
    Rename {
        d1: usize,
        n1: usize,
        d2: usize,
        n2: usize,
    },
    Link {
        d1: usize,
        n1: usize,
        d2: usize,
        n2: usize,
    },
    Xattr {
        d: usize,
        n: usize,
        v: u8,
    },
    Fsync {
        d: usize,
        n: usize,
    },
    Sync,
    Remount,
}

fn op() -> impl Strategy<Value = Op> {
    let d = 0..DIRS.len();
    let n = 0..NAMES.len();
    // Offsets reach past the inode's own addresses (456 blocks) into direct and indirect nodes.
    let off = prop_oneof![
        0u64..8192,
        0u64..(3 << 20),
        Just((456u64 + 507 * 2) * 4096 - 100)
    ];
    prop_oneof![
        6 => (d.clone(), n.clone(), off.clone(), 1usize..70_000, any::<u8>()).prop_map(|(d, n, off, len, byte)| Op::Write { d, n, off, len, byte }),
        2 => (d.clone(), n.clone(), off.clone()).prop_map(|(d, n, size)| Op::Truncate { d, n, size }),
        1 => (d.clone(), n.clone(), off.clone(), 1u64..200_000).prop_map(|(d, n, off, len)| Op::Punch { d, n, off, len }),
        2 => (d.clone(), n.clone()).prop_map(|(d, n)| Op::Unlink { d, n }),
        2 => (d.clone(), n.clone(), d.clone(), n.clone()).prop_map(|(d1, n1, d2, n2)| Op::Rename { d1, n1, d2, n2 }),
        1 => (d.clone(), n.clone(), d.clone(), n.clone()).prop_map(|(d1, n1, d2, n2)| Op::Link { d1, n1, d2, n2 }),
        1 => (d.clone(), n.clone(), any::<u8>()).prop_map(|(d, n, v)| Op::Xattr { d, n, v }),
        1 => (d.clone(), n.clone()).prop_map(|(d, n)| Op::Fsync { d, n }),
        1 => Just(Op::Sync),
        1 => Just(Op::Remount),
    ]
}

#[derive(Default, Clone)]
struct MFile {
    data: Vec<u8>,
    xattr: Option<u8>,
}

#[derive(Default)]
struct Model {
    files: HashMap<u32, MFile>,
    names: BTreeMap<(usize, String), u32>,
    next: u32,
}

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        ..Default::default()
    }
}

fn ino_of(fs: &Fs, d: usize, n: usize) -> Option<u32> {
    let dir = fs.resolve(DIRS[d]).unwrap();
    fs.lookup(dir, NAMES[n].as_bytes()).ok().map(|a| a.ino)
}

fn check_tree(fs: &Fs, m: &Model) {
    let mut ino_map: HashMap<u32, u32> = HashMap::new();
    for (d, dir) in DIRS.iter().enumerate() {
        let di = fs.resolve(dir).unwrap();
        let ents = fs.readdir(di, 0, 1000).unwrap();
        let mut names: Vec<String> = ents
            .iter()
            .map(|e| String::from_utf8(e.name.clone()).unwrap())
            .filter(|n| {
                n != "." && n != ".." && !DIRS.iter().any(|x| x.ends_with(&format!("/{n}")))
            })
            .collect();
        names.sort();
        let want: Vec<String> = m
            .names
            .keys()
            .filter(|(dd, _)| *dd == d)
            .map(|(_, n)| n.clone())
            .collect();
        assert_eq!(names, want, "entries of {dir}");
        for name in want {
            let id = m.names[&(d, name.clone())];
            let a = fs.lookup(di, name.as_bytes()).unwrap();
            // Hard links: the same model id must map to the same inode.
            let prev = ino_map.insert(id, a.ino);
            assert!(
                prev.is_none() || prev == Some(a.ino),
                "links of {dir}/{name}"
            );
            let f = &m.files[&id];
            assert_eq!(a.size, f.data.len() as u64, "size of {dir}/{name}");
            let links = m.names.values().filter(|&&x| x == id).count() as u32;
            assert_eq!(a.nlink, links, "nlink of {dir}/{name}");
            let mut buf = vec![0u8; f.data.len()];
            let mut got = 0;
            while got < buf.len() {
                let k = fs.read(a.ino, got as u64, &mut buf[got..]).unwrap();
                assert!(k > 0);
                got += k;
            }
            assert!(buf == f.data, "contents of {dir}/{name}");
            match f.xattr {
                Some(v) => assert_eq!(fs.getxattr(a.ino, b"user.v").unwrap(), vec![v]),
                None => assert!(matches!(fs.getxattr(a.ino, b"user.v"), Err(Error::NoAttr))),
            }
        }
    }
}

fn run(ops: Vec<Op>) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((64 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let mut fs = Fs::mount(dev.clone(), opts()).unwrap();
    fs.mkdir_all("/a/b").unwrap();
    let mut m = Model::default();
    for op in ops {
        match op {
            Op::Write {
                d,
                n,
                off,
                len,
                byte,
            } => {
                let key = (d, NAMES[n].to_string());
                let ino = match ino_of(&fs, d, n) {
                    Some(i) => i,
                    None => {
                        let dir = fs.resolve(DIRS[d]).unwrap();
                        let a = fs.create(dir, NAMES[n].as_bytes(), 0o644, 0, 0).unwrap();
                        m.next += 1;
                        m.files.insert(m.next, MFile::default());
                        m.names.insert(key.clone(), m.next);
                        a.ino
                    }
                };
                let data = vec![byte; len];
                match fs.write(ino, off, &data) {
                    Ok(k) => {
                        assert_eq!(k, len);
                        let f = m.files.get_mut(&m.names[&key]).unwrap();
                        let end = off as usize + len;
                        if f.data.len() < end {
                            f.data.resize(end, 0);
                        }
                        f.data[off as usize..end].fill(byte);
                    }
                    Err(Error::NoSpace) => {}
                    Err(e) => panic!("write: {e}"),
                }
            }
            Op::Truncate { d, n, size } => {
                if let Some(ino) = ino_of(&fs, d, n) {
                    fs.setattr(
                        ino,
                        &SetAttr {
                            size: Some(size),
                            ..Default::default()
                        },
                    )
                    .unwrap();
                    m.files
                        .get_mut(&m.names[&(d, NAMES[n].to_string())])
                        .unwrap()
                        .data
                        .resize(size as usize, 0);
                }
            }
            Op::Punch { d, n, off, len } => {
                if let Some(ino) = ino_of(&fs, d, n) {
                    fs.fallocate(ino, FallocMode::PunchHole, off, len).unwrap();
                    let f = m
                        .files
                        .get_mut(&m.names[&(d, NAMES[n].to_string())])
                        .unwrap();
                    let s = (off as usize).min(f.data.len());
                    let e = ((off + len) as usize).min(f.data.len());
                    f.data[s..e].fill(0);
                }
            }
            Op::Unlink { d, n } => {
                let dir = fs.resolve(DIRS[d]).unwrap();
                let r = fs.unlink(dir, NAMES[n].as_bytes());
                match m.names.remove(&(d, NAMES[n].to_string())) {
                    Some(id) => {
                        r.unwrap();
                        if !m.names.values().any(|&x| x == id) {
                            m.files.remove(&id);
                        }
                    }
                    None => assert!(matches!(r, Err(Error::NotFound))),
                }
            }
            Op::Rename { d1, n1, d2, n2 } => {
                let (a, b) = (fs.resolve(DIRS[d1]).unwrap(), fs.resolve(DIRS[d2]).unwrap());
                let r = fs.rename(
                    a,
                    NAMES[n1].as_bytes(),
                    b,
                    NAMES[n2].as_bytes(),
                    RenameFlags::default(),
                );
                let k1 = (d1, NAMES[n1].to_string());
                let k2 = (d2, NAMES[n2].to_string());
                match m.names.get(&k1).copied() {
                    None => assert!(matches!(r, Err(Error::NotFound)), "{r:?}"),
                    Some(id) => {
                        r.unwrap();
                        if m.names.get(&k2) != Some(&id) {
                            if let Some(old) = m.names.insert(k2, id) {
                                if !m.names.values().any(|&x| x == old) {
                                    m.files.remove(&old);
                                }
                            }
                            m.names.remove(&k1);
                        }
                    }
                }
            }
            Op::Link { d1, n1, d2, n2 } => {
                let k1 = (d1, NAMES[n1].to_string());
                let k2 = (d2, NAMES[n2].to_string());
                let Some(ino) = ino_of(&fs, d1, n1) else {
                    continue;
                };
                let b = fs.resolve(DIRS[d2]).unwrap();
                let r = fs.link(ino, b, NAMES[n2].as_bytes());
                if m.names.contains_key(&k2) {
                    assert!(matches!(r, Err(Error::Exists)));
                } else {
                    r.unwrap();
                    let id = m.names[&k1];
                    m.names.insert(k2, id);
                }
            }
            Op::Xattr { d, n, v } => {
                if let Some(ino) = ino_of(&fs, d, n) {
                    fs.setxattr(ino, b"user.v", &[v], XattrMode::Any).unwrap();
                    m.files
                        .get_mut(&m.names[&(d, NAMES[n].to_string())])
                        .unwrap()
                        .xattr = Some(v);
                }
            }
            Op::Fsync { d, n } => {
                if let Some(ino) = ino_of(&fs, d, n) {
                    fs.fsync(ino, false).unwrap();
                }
            }
            Op::Sync => fs.sync().unwrap(),
            Op::Remount => {
                fs.unmount().unwrap();
                let r = fsck(&*dev).unwrap();
                assert!(r.is_clean(), "{r}");
                fs = Fs::mount(dev.clone(), opts()).unwrap();
                check_tree(&fs, &m);
            }
        }
    }
    check_tree(&fs, &m);
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    check_tree(&fs, &m);
    fs.unmount().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 2000, ..ProptestConfig::default() })]
    #[test]
    fn random_operations_match_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}
