//! Seeded workloads: random operations drawn from the model, applied to a mounted volume
//! and to the model side by side.
//!
//! Owns: the operation vocabulary ([`Op`]), the generator ([`Workload`]) and [`apply`], the
//! one place that runs an operation on both the file system and the model.
//!
//! Files stay small (a few blocks past the inline limit), except for a rare write of one
//! block past the inode's own block slots (`FAR_WRITE`), which makes the file's first or
//! second direct node. Attribute changes (chmod, chown, utimens) go through `Fs::setattr`;
//! after every operation [`apply`] reads back the times the core stamped from its clock on
//! the inodes the operation changed ([`Model::stamp`]).
//!
//! Invariants: the generator only draws operations the model says are valid, so any error
//! the file system returns is a failure, except the power cut (or the poisoning it causes)
//! that ends a crash case. Names come from small pools so that operations collide (renames
//! over existing names, re-creates, links into the same directory); directories live only
//! in the root, so a walk of depth two sees the whole tree.

use crate::model::{Model, Stamp, CREATE_MODE};
use flashlog_core::{
    Error, FallocMode, Fs, Ino, RenameFlags, SetAttr, TimeSet, Timespec, XattrMode, ROOT_INO,
};
use flashlog_format::node::{ADDRS_PER_BLOCK, ADDRS_PER_INODE};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// File names drawn by the generator.
const FILE_NAMES: &[&str] = &["a", "b", "c", "d", "e", "f"];
const DIR_NAMES: &[&str] = &["d0", "d1", "d2"];
const XATTR_NAMES: &[&str] = &["user.x", "user.y"];
/// Largest offset a write or truncate reaches: a few blocks past the inline limit, so that
/// files convert from inline and use several data blocks.
const MAX_FILE_BYTES: u64 = 6 * 4096;
/// Largest single write.
const MAX_WRITE_BYTES: u64 = 9000;
/// A far write: up to one block, in a block the inode's own slots do not cover (the first
/// [`ADDRS_PER_INODE`]), within the two direct nodes.
const FAR_FIRST_BLOCK: u64 = ADDRS_PER_INODE as u64;
const FAR_BLOCKS: u64 = 2 * ADDRS_PER_BLOCK as u64;
/// Owners chown draws from.
const OWNERS: &[u32] = &[0, 1000, 65534];
/// Range of `try_op`'s roll: the first 100 are the original operations, then chmod,
/// chown, utimens and the far write.
const ROLL: u32 = 110;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Create {
        parent: Ino,
        name: Vec<u8>,
    },
    Mkdir {
        name: Vec<u8>,
    },
    Write {
        ino: Ino,
        off: u64,
        len: u64,
        fill: u8,
    },
    Truncate {
        ino: Ino,
        size: u64,
    },
    PunchHole {
        ino: Ino,
        off: u64,
        len: u64,
    },
    Fsync {
        ino: Ino,
        datasync: bool,
    },
    FsyncDir {
        ino: Ino,
    },
    Sync,
    Rename {
        parent: Ino,
        name: Vec<u8>,
        new_parent: Ino,
        new_name: Vec<u8>,
    },
    Link {
        ino: Ino,
        parent: Ino,
        name: Vec<u8>,
    },
    Unlink {
        parent: Ino,
        name: Vec<u8>,
    },
    Rmdir {
        name: Vec<u8>,
    },
    SetXattr {
        ino: Ino,
        name: Vec<u8>,
        value: Vec<u8>,
    },
    RemoveXattr {
        ino: Ino,
        name: Vec<u8>,
    },
    /// chmod (permission bits, setuid, setgid and sticky included).
    Chmod {
        ino: Ino,
        mode: u32,
    },
    /// chown (one or both ids).
    Chown {
        ino: Ino,
        uid: Option<u32>,
        gid: Option<u32>,
    },
    /// utimens: each time left alone, set to an explicit value, or to now.
    SetTimes {
        ino: Ino,
        atime: Option<TimeSet>,
        mtime: Option<TimeSet>,
    },
    /// Move every file to another mlog from now on (`mlog = (ino + shift) mod mlogs`): the
    /// nodes a file writes next go to another chain, as when a per-CPU mapping moves its
    /// writer. Not drawn by [`Workload`] (so a seed's operations stay what they were); the
    /// driver inserts it on volumes with several mlogs ([`remap_after`]).
    Remap {
        shift: u32,
    },
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |n: &[u8]| String::from_utf8_lossy(n).into_owned();
        match self {
            Op::Create { parent, name } => write!(f, "create {parent}/{}", s(name)),
            Op::Mkdir { name } => write!(f, "mkdir /{}", s(name)),
            Op::Write {
                ino,
                off,
                len,
                fill,
            } => write!(f, "write ino {ino} [{off}, +{len}) fill {fill:#04x}"),
            Op::Truncate { ino, size } => write!(f, "truncate ino {ino} to {size}"),
            Op::PunchHole { ino, off, len } => write!(f, "punch ino {ino} [{off}, +{len})"),
            Op::Fsync { ino, datasync } => write!(
                f,
                "{} ino {ino}",
                if *datasync { "fdatasync" } else { "fsync" }
            ),
            Op::FsyncDir { ino } => write!(f, "fsync dir ino {ino}"),
            Op::Sync => write!(f, "sync"),
            Op::Rename {
                parent,
                name,
                new_parent,
                new_name,
            } => {
                write!(
                    f,
                    "rename {parent}/{} -> {new_parent}/{}",
                    s(name),
                    s(new_name)
                )
            }
            Op::Link { ino, parent, name } => write!(f, "link ino {ino} as {parent}/{}", s(name)),
            Op::Unlink { parent, name } => write!(f, "unlink {parent}/{}", s(name)),
            Op::Rmdir { name } => write!(f, "rmdir /{}", s(name)),
            Op::SetXattr { ino, name, value } => {
                write!(f, "setxattr ino {ino} {} ({} bytes)", s(name), value.len())
            }
            Op::RemoveXattr { ino, name } => write!(f, "removexattr ino {ino} {}", s(name)),
            Op::Chmod { ino, mode } => write!(f, "chmod ino {ino} {mode:#o}"),
            Op::Chown { ino, uid, gid } => write!(f, "chown ino {ino} uid {uid:?} gid {gid:?}"),
            Op::SetTimes { ino, atime, mtime } => {
                let t = |t: &Option<TimeSet>| match t {
                    None => "omit".to_string(),
                    Some(TimeSet::Now) => "now".to_string(),
                    Some(TimeSet::At(ts)) => format!("{}.{:09}", ts.sec, ts.nsec),
                };
                write!(f, "utimens ino {ino} atime {} mtime {}", t(atime), t(mtime))
            }
            Op::Remap { shift } => write!(f, "remap: files go to mlog (ino + {shift}) mod mlogs"),
        }
    }
}

/// The bytes a write puts down: position-dependent, so a block that landed at the wrong
/// offset or from the wrong write is visible.
pub fn write_bytes(off: u64, len: u64, fill: u8) -> Vec<u8> {
    (off..off + len)
        .map(|p| fill ^ (p as u8).wrapping_mul(31) ^ ((p >> 8) as u8))
        .collect()
}

/// Chance, per operation, that the driver moves files to other mlogs after it.
const REMAP_CHANCE: f64 = 0.2;

/// The [`Op::Remap`] the driver inserts after an operation of seed `seed` on a volume with
/// `mlogs` mlogs, if any: drawn from `rng`, a stream of its own (seeded from the seed by
/// [`remap_rng`]), so that the workload's own draws do not change.
pub fn remap_after(rng: &mut ChaCha8Rng, mlogs: u32) -> Option<Op> {
    if mlogs <= 1 || !rng.random_bool(REMAP_CHANCE) {
        return None;
    }
    Some(Op::Remap {
        shift: rng.random_range(0..mlogs),
    })
}

/// Chance that a new file just fsync'd (rolled forward) gives its name to a newer file.
const REUSE_NAME_CHANCE: f64 = 0.4;

/// After `last`, an fsync that rolled forward a new file (its name now durable through its
/// DENT mark), maybe: the name, for the driver to unlink, re-create (after a remap, so the
/// new file is often on another chain) and fsync again ([`reuse_name_ops`],
/// [`write_and_fsync`]). Two DENT marks then claim one name from two chains; roll-forward
/// must give it to the later fsync.
pub fn reuse_name_after(rng: &mut ChaCha8Rng, m: &Model, last: &Op) -> Option<(Ino, Vec<u8>)> {
    let Op::Fsync { ino, .. } = last else {
        return None;
    };
    if !m.fsynced_new.contains(ino) || !rng.random_bool(REUSE_NAME_CHANCE) {
        return None;
    }
    let key = m.new_since_cp.get(ino)?.clone();
    (m.lookup(key.0, &key.1) == Some(*ino)).then_some(key)
}

/// Unlink `key`, remap, create `key` again.
pub fn reuse_name_ops(rng: &mut ChaCha8Rng, key: &(Ino, Vec<u8>), mlogs: u32) -> Vec<Op> {
    vec![
        Op::Unlink {
            parent: key.0,
            name: key.1.clone(),
        },
        Op::Remap {
            shift: rng.random_range(0..mlogs.max(1)),
        },
        Op::Create {
            parent: key.0,
            name: key.1.clone(),
        },
    ]
}

/// Give `ino` some data and fsync it.
pub fn write_and_fsync(rng: &mut ChaCha8Rng, ino: Ino) -> Vec<Op> {
    let len = rng.random_range(1..=MAX_WRITE_BYTES);
    vec![
        Op::Write {
            ino,
            off: 0,
            len,
            fill: rng.random(),
        },
        Op::Fsync {
            ino,
            datasync: rng.random_bool(0.3),
        },
    ]
}

/// The remap stream of seed `seed`.
pub fn remap_rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed ^ 0x6d6c_6f67_7368_6966)
}

/// A seeded generator of operations.
pub struct Workload {
    rng: ChaCha8Rng,
}

impl Workload {
    pub fn new(seed: u64) -> Self {
        Workload {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn pick<T: Clone>(&mut self, v: &[T]) -> Option<T> {
        if v.is_empty() {
            None
        } else {
            Some(v[self.rng.random_range(0..v.len())].clone())
        }
    }

    fn name(&mut self, pool: &[&str]) -> Vec<u8> {
        pool[self.rng.random_range(0..pool.len())]
            .as_bytes()
            .to_vec()
    }

    /// Draw the next operation valid in `m`.
    pub fn next_op(&mut self, m: &Model) -> Op {
        loop {
            if let Some(op) = self.try_op(m) {
                return op;
            }
        }
    }

    /// A time for utimens: left alone, now, or an explicit instant (any second of 32 bits,
    /// any nanosecond).
    fn time(&mut self) -> Option<TimeSet> {
        match self.rng.random_range(0..5u32) {
            0 => None,
            1 => Some(TimeSet::Now),
            _ => Some(TimeSet::At(Timespec {
                sec: self.rng.random_range(0..1i64 << 32),
                nsec: self.rng.random_range(0..1_000_000_000),
            })),
        }
    }

    fn owner(&mut self) -> Option<u32> {
        if self.rng.random_bool(0.6) {
            self.pick(OWNERS)
        } else {
            None
        }
    }

    fn try_op(&mut self, m: &Model) -> Option<Op> {
        let files = m.files();
        let dirs = m.dirs();
        let roll = self.rng.random_range(0..ROLL);
        Some(match roll {
            0..=11 => {
                let parent = self.pick(&dirs)?;
                let name = self.name(FILE_NAMES);
                if m.lookup(parent, &name).is_some() {
                    return None;
                }
                Op::Create { parent, name }
            }
            12..=31 => {
                let ino = self.pick(&files)?;
                let off = self.rng.random_range(0..MAX_FILE_BYTES);
                let len = self
                    .rng
                    .random_range(1..=MAX_WRITE_BYTES.min(MAX_FILE_BYTES - off));
                Op::Write {
                    ino,
                    off,
                    len,
                    fill: self.rng.random(),
                }
            }
            32..=35 => Op::Truncate {
                ino: self.pick(&files)?,
                size: self.rng.random_range(0..MAX_FILE_BYTES),
            },
            36..=39 => {
                let ino = self.pick(&files)?;
                Op::PunchHole {
                    ino,
                    off: self.rng.random_range(0..MAX_FILE_BYTES),
                    len: self.rng.random_range(1..3 * 4096),
                }
            }
            40..=55 => Op::Fsync {
                ino: self.pick(&files)?,
                datasync: self.rng.random_bool(0.3),
            },
            56..=59 => Op::FsyncDir {
                ino: self.pick(&dirs)?,
            },
            60..=63 => Op::Sync,
            64..=72 => {
                // Rename a file (or, sometimes, a directory within the root).
                let (parent, name, ino) = if self.rng.random_bool(0.85) {
                    let parent = self.pick(&dirs)?;
                    let name = self.name(FILE_NAMES);
                    (parent, name.clone(), m.lookup(parent, &name)?)
                } else {
                    let name = self.name(DIR_NAMES);
                    (ROOT_INO, name.clone(), m.lookup(ROOT_INO, &name)?)
                };
                let is_dir = m.inode(ino)?.is_dir;
                let (new_parent, new_name) = if is_dir {
                    (ROOT_INO, self.name(DIR_NAMES))
                } else {
                    (self.pick(&dirs)?, self.name(FILE_NAMES))
                };
                if let Some(v) = m.lookup(new_parent, &new_name) {
                    let vi = m.inode(v)?;
                    if vi.is_dir != is_dir || (vi.is_dir && !m.dir_is_empty(v)) {
                        return None;
                    }
                }
                Op::Rename {
                    parent,
                    name,
                    new_parent,
                    new_name,
                }
            }
            73..=76 => {
                let ino = self.pick(&files)?;
                let parent = self.pick(&dirs)?;
                let name = self.name(FILE_NAMES);
                if m.lookup(parent, &name).is_some() {
                    return None;
                }
                Op::Link { ino, parent, name }
            }
            77..=84 => {
                let parent = self.pick(&dirs)?;
                let name = self.name(FILE_NAMES);
                let ino = m.lookup(parent, &name)?;
                if m.inode(ino)?.is_dir {
                    return None;
                }
                Op::Unlink { parent, name }
            }
            85..=88 => {
                let name = self.name(DIR_NAMES);
                if m.lookup(ROOT_INO, &name).is_some() {
                    return None;
                }
                Op::Mkdir { name }
            }
            89..=90 => {
                let name = self.name(DIR_NAMES);
                let ino = m.lookup(ROOT_INO, &name)?;
                if !m.inode(ino)?.is_dir || !m.dir_is_empty(ino) {
                    return None;
                }
                Op::Rmdir { name }
            }
            91..=96 => {
                let ino = self.pick(&files)?;
                let len = self.rng.random_range(0..64usize);
                let fill: u8 = self.rng.random();
                Op::SetXattr {
                    ino,
                    name: self.name(XATTR_NAMES),
                    value: vec![fill; len],
                }
            }
            97..=99 => {
                let ino = self.pick(&files)?;
                let name = self.name(XATTR_NAMES);
                if !m.inode(ino)?.cur.xattrs.contains_key(&name) {
                    return None;
                }
                Op::RemoveXattr { ino, name }
            }
            100..=102 => Op::Chmod {
                ino: self.pick(&files)?,
                mode: self.rng.random_range(0..=0o7777),
            },
            103..=104 => {
                let ino = self.pick(&files)?;
                let (uid, gid) = (self.owner(), self.owner());
                if uid.is_none() && gid.is_none() {
                    return None;
                }
                Op::Chown { ino, uid, gid }
            }
            105..=107 => {
                let ino = self.pick(&files)?;
                let (atime, mtime) = (self.time(), self.time());
                if atime.is_none() && mtime.is_none() {
                    return None;
                }
                Op::SetTimes { ino, atime, mtime }
            }
            _ => {
                let ino = self.pick(&files)?;
                let block = FAR_FIRST_BLOCK + self.rng.random_range(0..FAR_BLOCKS);
                let off = block * 4096 + self.rng.random_range(0..4096);
                Op::Write {
                    ino,
                    off,
                    len: self.rng.random_range(1..=4096),
                    fill: self.rng.random(),
                }
            }
        })
    }
}

/// What applying one operation did.
#[derive(Debug)]
pub enum Outcome {
    /// The file system accepted it; the model followed.
    Done,
    /// The operation failed because power was cut (or the mount was poisoned by the cut):
    /// the model took its effect as possible, not durable.
    Cut(Error),
    /// The file system refused an operation the model says is valid.
    Mismatch(String),
}

fn is_cut(e: &Error) -> bool {
    matches!(e, Error::Device(_) | Error::Poisoned(_))
}

/// The files whose inode `op` changes (contents, attributes, or only the ctime: a link,
/// unlink or rename), looked up before it runs; a create's new file is added after it.
fn changes(m: &Model, op: &Op) -> Vec<Ino> {
    let file = |ino: Option<Ino>| {
        ino.filter(|i| m.inode(*i).is_some_and(|x| !x.is_dir))
            .into_iter()
            .collect()
    };
    match op {
        Op::Write { ino, .. }
        | Op::Truncate { ino, .. }
        | Op::PunchHole { ino, .. }
        | Op::SetXattr { ino, .. }
        | Op::RemoveXattr { ino, .. }
        | Op::Chmod { ino, .. }
        | Op::Chown { ino, .. }
        | Op::SetTimes { ino, .. }
        | Op::Link { ino, .. } => file(Some(*ino)),
        Op::Unlink { parent, name } => file(m.lookup(*parent, name)),
        Op::Rename {
            parent,
            name,
            new_parent,
            new_name,
        } => {
            let mut v: Vec<Ino> = file(m.lookup(*parent, name));
            v.extend(file(m.lookup(*new_parent, new_name)));
            v
        }
        Op::Create { .. }
        | Op::Mkdir { .. }
        | Op::Fsync { .. }
        | Op::FsyncDir { .. }
        | Op::Sync
        | Op::Rmdir { .. }
        | Op::Remap { .. } => Vec::new(),
    }
}

/// Run `op` on `fs` and on `m`. Durable points (fsync, sync) update the model only when the
/// file system returned Ok; the model learns whether an fsync became a checkpoint from the
/// core's `fsync_checkpoints` counter. Then the times the core stamped on the files `op`
/// changed are read back into the model ([`Model::stamp`]), also after a cut (the
/// operation in flight may have reached the disk).
pub fn apply(fs: &Fs, m: &mut Model, op: &Op) -> Outcome {
    m.begin_op();
    let mut stamp = changes(m, op);
    let r = run_op(fs, m, op, &mut stamp);
    for ino in stamp {
        // A file unlinked to its last name may be gone: nothing to stamp then.
        if let Ok(a) = fs.getattr(ino) {
            m.stamp(
                ino,
                Stamp {
                    atime: a.atime,
                    mtime: a.mtime,
                    ctime: a.ctime,
                },
            );
        }
    }
    match r {
        Ok(()) => Outcome::Done,
        Err(e) if is_cut(&e) => Outcome::Cut(e),
        Err(e) => Outcome::Mismatch(format!(
            "{op}: the file system refused a valid operation: {e}"
        )),
    }
}

fn run_op(fs: &Fs, m: &mut Model, op: &Op, stamp: &mut Vec<Ino>) -> Result<(), Error> {
    match op {
        Op::Create { parent, name } => match fs.create(*parent, name, CREATE_MODE, 0, 0) {
            Ok(a) => {
                m.create(*parent, name, a.ino, false);
                stamp.push(a.ino);
                Ok(())
            }
            Err(e) => Err(e),
        },
        Op::Mkdir { name } => match fs.mkdir(ROOT_INO, name, 0o755, 0, 0) {
            Ok(a) => {
                m.create(ROOT_INO, name, a.ino, true);
                Ok(())
            }
            Err(e) => Err(e),
        },
        Op::Write {
            ino,
            off,
            len,
            fill,
        } => {
            let data = write_bytes(*off, *len, *fill);
            m.write(*ino, *off, &data);
            write_all(fs, *ino, *off, &data)
        }
        Op::Truncate { ino, size } => {
            m.truncate(*ino, *size);
            fs.setattr(
                *ino,
                &SetAttr {
                    size: Some(*size),
                    ..Default::default()
                },
            )
            .map(|_| ())
        }
        Op::PunchHole { ino, off, len } => {
            m.punch(*ino, *off, *len);
            fs.fallocate(*ino, FallocMode::PunchHole, *off, *len)
        }
        Op::Fsync { ino, datasync } => {
            let before = fs.stats().fsync_checkpoints;
            let r = fs.fsync(*ino, *datasync);
            match &r {
                Ok(()) if fs.stats().fsync_checkpoints > before => m.checkpoint(),
                Ok(()) => m.fsync_file(*ino),
                // In flight: roll-forward may or may not put back the name, which `may`
                // already allows.
                Err(_) => {}
            }
            r
        }
        Op::FsyncDir { ino } => fs.fsync(*ino, false).map(|()| m.checkpoint()),
        Op::Sync => fs.sync().map(|()| m.checkpoint()),
        Op::Rename {
            parent,
            name,
            new_parent,
            new_name,
        } => {
            m.rename(*parent, name, *new_parent, new_name);
            fs.rename(*parent, name, *new_parent, new_name, RenameFlags::default())
        }
        Op::Link { ino, parent, name } => {
            m.link(*ino, *parent, name);
            fs.link(*ino, *parent, name).map(|_| ())
        }
        Op::Unlink { parent, name } => {
            m.remove(*parent, name);
            fs.unlink(*parent, name)
        }
        Op::Rmdir { name } => {
            m.remove(ROOT_INO, name);
            fs.rmdir(ROOT_INO, name)
        }
        Op::SetXattr { ino, name, value } => {
            m.setxattr(*ino, name, Some(value));
            fs.setxattr(*ino, name, value, XattrMode::Any)
        }
        Op::RemoveXattr { ino, name } => {
            m.setxattr(*ino, name, None);
            fs.removexattr(*ino, name)
        }
        Op::Chmod { ino, mode } => {
            m.setattr(*ino, Some(*mode), None, None, None, None);
            setattr(
                fs,
                *ino,
                SetAttr {
                    mode: Some(*mode),
                    ..Default::default()
                },
            )
        }
        Op::Chown { ino, uid, gid } => {
            m.setattr(*ino, None, *uid, *gid, None, None);
            setattr(
                fs,
                *ino,
                SetAttr {
                    uid: *uid,
                    gid: *gid,
                    ..Default::default()
                },
            )
        }
        Op::SetTimes { ino, atime, mtime } => {
            let at = |t: &Option<TimeSet>| match t {
                Some(TimeSet::At(ts)) => Some(*ts),
                _ => None,
            };
            m.setattr(*ino, None, None, None, at(atime), at(mtime));
            let r = setattr(
                fs,
                *ino,
                SetAttr {
                    atime: *atime,
                    mtime: *mtime,
                    ..Default::default()
                },
            );
            // Explicit times are the model's, not the clock's: the volume must show them.
            match (&r, fs.getattr(*ino)) {
                (Ok(()), Ok(a))
                    if at(atime).is_some_and(|t| t != a.atime)
                        || at(mtime).is_some_and(|t| t != a.mtime) =>
                {
                    Err(Error::Corrupt(format!(
                        "utimens set atime {:?} mtime {:?}, getattr shows {:?} {:?}",
                        at(atime),
                        at(mtime),
                        a.atime,
                        a.mtime
                    )))
                }
                _ => r,
            }
        }
        Op::Remap { shift } => {
            fs.inner()
                .mlog_shift
                .store(*shift, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
    }
}

fn setattr(fs: &Fs, ino: Ino, a: SetAttr) -> Result<(), Error> {
    fs.setattr(ino, &a).map(|_| ())
}

fn write_all(fs: &Fs, ino: Ino, off: u64, data: &[u8]) -> Result<(), Error> {
    let mut done = 0usize;
    while done < data.len() {
        let n = fs.write(ino, off + done as u64, &data[done..])?;
        if n == 0 {
            return Err(Error::Corrupt(format!(
                "write of ino {ino} made no progress at {}",
                off + done as u64
            )));
        }
        done += n;
    }
    Ok(())
}
