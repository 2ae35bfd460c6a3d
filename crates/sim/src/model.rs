//! The reference model: what the namespace and every file look like now, and what a crash
//! may or must leave behind.
//!
//! Owns three views, all keyed by inode number (Flashlog inode numbers are stable across a
//! remount, so the recovered volume can be compared inode by inode):
//! - the live state (`entries`, `inodes`): what the mounted volume shows now;
//! - obligations: `must` (directory entries that were durable at the last completed
//!   checkpoint or made durable since, by fsync of a new file, and untouched since) and
//!   `groups` (a durable entry renamed since the checkpoint must be found under the names it
//!   passed through exactly as the inode held them at one moment since the checkpoint:
//!   rename atomicity; `name_sets` records those moments);
//! - allowances: `may` (every entry that existed at some moment since the last completed
//!   checkpoint) and each inode's `history` (its durable version, then every later version).
//!
//! Invariants: `history` is never empty and its last element equals `cur`; `must ⊆ may`;
//! every group's names are in `may`; the last element of an inode's `name_sets` is its live
//! set of names (the first, its set at the last completed checkpoint, or at its creation).
//! Durable points only shrink allowances (they forget the versions before them), never
//! obligations.
//!
//! A file's version ([`Version`]) is its contents (sparse, [`Data`]), xattrs and inode
//! attributes ([`Attrs`]: mode, uid, gid, atime, mtime, ctime). Mode, owner and explicit
//! times follow from the operations; the times the core takes from its clock (a wall
//! clock, `FsInner::now`, so not reproducible between runs) are read back from the live
//! volume right after the operation that set them ([`Model::stamp`]): the model trusts the
//! live volume for *which* instant it stamped, and checks that a crash keeps the stamp of
//! an allowed version.
//!
//! The model is sound only for what Flashlog promises (docs/DESIGN.md, durability
//! contract): fsync (and fdatasync) of a file makes its contents, size, xattrs and inode
//! attributes durable, and its name if the file is new since the checkpoint; a checkpoint
//! (sync, fsync of a directory, unmount, or an fsync the core turned into one) makes
//! everything durable.

use flashlog_core::{Ino, Timespec, ROOT_INO};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A directory entry: (parent, name) -> child.
pub type Entry = (Ino, Vec<u8>, Ino);
/// The key of a directory entry.
pub type Key = (Ino, Vec<u8>);
pub type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

/// Block size of [`Data`]'s pieces (the file system's block size).
pub const BLOCK: u64 = flashlog_core::BLOCK_SIZE as u64;

/// A file's contents, sparse: its size and the blocks that hold a nonzero byte. Canonical
/// (so that `==` compares contents): no stored block is all zeros, none starts at or past
/// `size`, and the bytes of the last one at and past `size` are zero. Blocks are shared
/// between versions (`Arc`), so a version costs a few pointers however large the file.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Data {
    size: u64,
    blocks: BTreeMap<u64, Arc<Vec<u8>>>,
}

impl Data {
    pub fn len(&self) -> u64 {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Block `idx` (zeros where none is stored).
    pub fn block(&self, idx: u64) -> &[u8] {
        static ZERO: [u8; BLOCK as usize] = [0; BLOCK as usize];
        self.blocks.get(&idx).map_or(&ZERO[..], |b| &b[..])
    }

    /// Store block `idx` (dropped if all zeros).
    fn put(&mut self, idx: u64, b: Vec<u8>) {
        if b.iter().all(|&x| x == 0) {
            self.blocks.remove(&idx);
        } else {
            self.blocks.insert(idx, Arc::new(b));
        }
    }

    /// Apply `f` to bytes [from, to) of block `idx`, given as a range within the block.
    fn edit(&mut self, idx: u64, from: usize, to: usize, f: impl FnOnce(&mut [u8])) {
        let mut b = self.block(idx).to_vec();
        f(&mut b[from..to]);
        self.put(idx, b);
    }

    pub fn write(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        let mut p = off;
        while p < end {
            let idx = p / BLOCK;
            let from = (p % BLOCK) as usize;
            let to = (end - idx * BLOCK).min(BLOCK) as usize;
            let src = &data[(p - off) as usize..(p - off) as usize + (to - from)];
            self.edit(idx, from, to, |d| d.copy_from_slice(src));
            p = idx * BLOCK + to as u64;
        }
        self.size = self.size.max(end);
    }

    /// Zero [off, off + len) (within the size).
    pub fn zero(&mut self, off: u64, len: u64) {
        let end = off.saturating_add(len).min(self.size);
        let mut p = off.min(end);
        while p < end {
            let idx = p / BLOCK;
            let from = (p % BLOCK) as usize;
            let to = (end - idx * BLOCK).min(BLOCK) as usize;
            if self.blocks.contains_key(&idx) {
                self.edit(idx, from, to, |d| d.fill(0));
            }
            p = idx * BLOCK + to as u64;
        }
    }

    pub fn truncate(&mut self, size: u64) {
        if size < self.size {
            let old = self.size;
            self.zero(size, old - size);
            self.blocks.retain(|&i, _| i * BLOCK < size);
        }
        self.size = size;
    }

    /// Built from a file read block by block: `size` and its blocks (`put` drops zeros).
    pub fn from_blocks(size: u64, blocks: impl IntoIterator<Item = (u64, Vec<u8>)>) -> Self {
        let mut d = Data {
            size,
            blocks: BTreeMap::new(),
        };
        for (i, b) in blocks {
            d.put(i, b);
        }
        d
    }

    /// The first byte offset where `self` and `other` differ (below the smaller size).
    pub fn first_difference(&self, other: &Data) -> Option<u64> {
        let idx: BTreeSet<u64> = self
            .blocks
            .keys()
            .chain(other.blocks.keys())
            .copied()
            .collect();
        let limit = self.size.min(other.size);
        idx.into_iter()
            .filter(|&i| i * BLOCK < limit)
            .find_map(|i| {
                let (a, b) = (self.block(i), other.block(i));
                a.iter()
                    .zip(b)
                    .position(|(x, y)| x != y)
                    .map(|p| i * BLOCK + p as u64)
            })
            .filter(|&p| p < limit)
    }
}

/// A file's inode attributes as the model compares them: permission bits (mode without
/// the type), owner and the three times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Attrs {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
}

/// The times the core stamped on an inode (read back from the live volume).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
}

/// One state a file passed through.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Version {
    pub data: Data,
    pub xattrs: Xattrs,
    pub attrs: Attrs,
}

/// Permission bits of a file the workload creates (`Fs::create(.., 0o644, 0, 0)`).
pub const CREATE_MODE: u32 = 0o644;

#[derive(Clone, Debug)]
pub struct Inode {
    pub is_dir: bool,
    pub nlink: u32,
    pub cur: Version,
    /// Versions a crash may leave: the durable one first, then every later one.
    pub history: Vec<Version>,
}

#[derive(Clone, Debug)]
pub struct Model {
    pub entries: BTreeMap<Key, Ino>,
    pub inodes: BTreeMap<Ino, Inode>,
    pub must: BTreeSet<Entry>,
    pub may: BTreeSet<Entry>,
    pub groups: BTreeMap<Ino, Vec<Key>>,
    /// Per inode, every set of names it held since the last completed checkpoint, in order
    /// (its checkpointed set first). A name change reaches the disk only with a checkpoint
    /// (docs/DESIGN.md, the fsync case table), so a recovered inode's names are one of these
    /// sets, up to names a roll-forward replaced (see [`Model::fsync_file`]).
    pub name_sets: BTreeMap<Ino, Vec<BTreeSet<Key>>>,
    /// Inodes created since the last completed checkpoint, with the entry they were created
    /// under (the name fsync makes durable).
    pub new_since_cp: BTreeMap<Ino, Key>,
    /// Inodes created since the last completed checkpoint and fsync'd since (their name is
    /// durable through roll-forward): with the checkpointed ones, the files a crash must
    /// not lose while they still have a name ([`crate::check`] rule 5).
    pub fsynced_new: BTreeSet<Ino>,
    /// Inodes whose `history` got a version pushed by the operation in progress (since
    /// [`Model::begin_op`]): [`Model::stamp`] completes that version instead of adding one.
    touched: BTreeSet<Ino>,
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

impl Model {
    /// The state right after mkfs + mount: an empty root, durable.
    pub fn new() -> Self {
        let mut inodes = BTreeMap::new();
        inodes.insert(
            ROOT_INO,
            Inode {
                is_dir: true,
                nlink: 2,
                cur: Version::default(),
                history: vec![Version::default()],
            },
        );
        Model {
            entries: BTreeMap::new(),
            inodes,
            must: BTreeSet::new(),
            may: BTreeSet::new(),
            groups: BTreeMap::new(),
            name_sets: BTreeMap::new(),
            new_since_cp: BTreeMap::new(),
            fsynced_new: BTreeSet::new(),
            touched: BTreeSet::new(),
        }
    }

    /// The names `ino` has now.
    pub fn names_of(&self, ino: Ino) -> BTreeSet<Key> {
        self.entries
            .iter()
            .filter(|(_, c)| **c == ino)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Record `ino`'s live set of names (after an operation changed them).
    fn note_names(&mut self, ino: Ino) {
        let now = self.names_of(ino);
        let sets = self.name_sets.entry(ino).or_default();
        if sets.last() != Some(&now) {
            sets.push(now);
        }
    }

    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Option<Ino> {
        self.entries.get(&(parent, name.to_vec())).copied()
    }

    pub fn inode(&self, ino: Ino) -> Option<&Inode> {
        self.inodes.get(&ino)
    }

    /// Live directories (root first).
    pub fn dirs(&self) -> Vec<Ino> {
        self.inodes
            .iter()
            .filter(|(_, i)| i.is_dir && i.nlink > 0)
            .map(|(&n, _)| n)
            .collect()
    }

    /// Live regular files.
    pub fn files(&self) -> Vec<Ino> {
        self.inodes
            .iter()
            .filter(|(_, i)| !i.is_dir && i.nlink > 0)
            .map(|(&n, _)| n)
            .collect()
    }

    pub fn dir_is_empty(&self, dir: Ino) -> bool {
        !self.entries.keys().any(|(p, _)| *p == dir)
    }

    fn note_may(&mut self) {
        for ((p, n), c) in &self.entries {
            if !self.may.contains(&(*p, n.clone(), *c)) {
                self.may.insert((*p, n.clone(), *c));
            }
        }
    }

    /// The entry `key` changed: it is no longer an obligation.
    fn touch(&mut self, key: &Key) {
        self.must.retain(|(p, n, _)| !(*p == key.0 && *n == key.1));
    }

    /// The entry `key` of `ino` went away: a rename group ending in it is void.
    fn drop_group_at(&mut self, ino: Ino, key: &Key) {
        if self.groups.get(&ino).and_then(|g| g.last()) == Some(key) {
            self.groups.remove(&ino);
        }
    }

    fn set_version(&mut self, ino: Ino, v: Version) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            if i.history.last() != Some(&v) {
                i.history.push(v.clone());
                self.touched.insert(ino);
            }
            i.cur = v;
        }
    }

    /// An operation starts: versions pushed from now on are its own (see [`Model::stamp`]).
    pub fn begin_op(&mut self) {
        self.touched.clear();
    }

    /// The operation in progress left `ino` with the times `t` (read back from the live
    /// volume: the core takes them from its wall clock). Completes the version the
    /// operation pushed, if it pushed one (a version with the operation's contents and the
    /// times before it never existed), or adds one (a link, unlink or rename changed only
    /// the ctime).
    pub fn stamp(&mut self, ino: Ino, t: Stamp) {
        let touched = self.touched.remove(&ino);
        let Some(i) = self.inodes.get_mut(&ino) else {
            return;
        };
        let mut v = i.cur.clone();
        v.attrs.atime = t.atime;
        v.attrs.mtime = t.mtime;
        v.attrs.ctime = t.ctime;
        if v == i.cur {
            return;
        }
        if touched && i.history.len() > 1 {
            i.history.pop();
        } else if touched {
            // The version the operation created the inode with.
            i.history[0] = v.clone();
            i.cur = v;
            return;
        }
        if i.history.last() != Some(&v) {
            i.history.push(v.clone());
        }
        i.cur = v;
    }

    // ---- operations (called after the file system accepted them, or for the operation
    // in flight when power was cut: its effect may or may not have reached the disk) ----

    pub fn create(&mut self, parent: Ino, name: &[u8], ino: Ino, is_dir: bool) {
        let key = (parent, name.to_vec());
        self.touch(&key);
        self.entries.insert(key.clone(), ino);
        // A reused inode number starts a new history: the old file was freed before a
        // completed checkpoint, or the number would not have been handed out again.
        let v = Version {
            attrs: Attrs {
                mode: if is_dir { 0o755 } else { CREATE_MODE },
                ..Attrs::default()
            },
            ..Version::default()
        };
        self.inodes.insert(
            ino,
            Inode {
                is_dir,
                nlink: if is_dir { 2 } else { 1 },
                cur: v.clone(),
                history: vec![v],
            },
        );
        self.touched.insert(ino);
        self.groups.remove(&ino);
        self.name_sets.remove(&ino);
        self.note_names(ino);
        self.new_since_cp.insert(ino, key);
        self.fsynced_new.remove(&ino);
        if is_dir {
            if let Some(p) = self.inodes.get_mut(&parent) {
                p.nlink += 1;
            }
        }
        self.note_may();
    }

    pub fn write(&mut self, ino: Ino, off: u64, data: &[u8]) {
        let Some(i) = self.inodes.get(&ino) else {
            return;
        };
        let mut v = i.cur.clone();
        v.data.write(off, data);
        self.set_version(ino, v);
    }

    pub fn truncate(&mut self, ino: Ino, size: u64) {
        let Some(i) = self.inodes.get(&ino) else {
            return;
        };
        let mut v = i.cur.clone();
        v.data.truncate(size);
        self.set_version(ino, v);
    }

    pub fn punch(&mut self, ino: Ino, off: u64, len: u64) {
        let Some(i) = self.inodes.get(&ino) else {
            return;
        };
        let mut v = i.cur.clone();
        v.data.zero(off, len);
        self.set_version(ino, v);
    }

    pub fn setxattr(&mut self, ino: Ino, name: &[u8], value: Option<&[u8]>) {
        let Some(i) = self.inodes.get(&ino) else {
            return;
        };
        let mut v = i.cur.clone();
        match value {
            Some(val) => v.xattrs.insert(name.to_vec(), val.to_vec()),
            None => v.xattrs.remove(name),
        };
        self.set_version(ino, v);
    }

    /// chmod, chown, utimens (explicit times; a time set to "now" comes from
    /// [`Model::stamp`]).
    pub fn setattr(
        &mut self,
        ino: Ino,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime: Option<Timespec>,
        mtime: Option<Timespec>,
    ) {
        let Some(i) = self.inodes.get(&ino) else {
            return;
        };
        let mut v = i.cur.clone();
        let a = &mut v.attrs;
        a.mode = mode.map_or(a.mode, |m| m & 0o7777);
        a.uid = uid.unwrap_or(a.uid);
        a.gid = gid.unwrap_or(a.gid);
        a.atime = atime.unwrap_or(a.atime);
        a.mtime = mtime.unwrap_or(a.mtime);
        self.set_version(ino, v);
    }

    pub fn link(&mut self, ino: Ino, parent: Ino, name: &[u8]) {
        let key = (parent, name.to_vec());
        self.touch(&key);
        self.entries.insert(key, ino);
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.nlink += 1;
        }
        self.note_names(ino);
        self.note_may();
    }

    /// unlink or rmdir.
    pub fn remove(&mut self, parent: Ino, name: &[u8]) {
        let key = (parent, name.to_vec());
        self.touch(&key);
        let Some(ino) = self.entries.remove(&key) else {
            return;
        };
        self.drop_group_at(ino, &key);
        self.note_names(ino);
        let is_dir = self.inodes.get(&ino).is_some_and(|i| i.is_dir);
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.nlink = if is_dir { 0 } else { i.nlink.saturating_sub(1) };
        }
        if is_dir {
            if let Some(p) = self.inodes.get_mut(&parent) {
                p.nlink = p.nlink.saturating_sub(1);
            }
        }
    }

    /// Plain rename (maybe over an existing entry, which is dropped).
    pub fn rename(&mut self, parent: Ino, name: &[u8], new_parent: Ino, new_name: &[u8]) {
        let src: Key = (parent, name.to_vec());
        let dst: Key = (new_parent, new_name.to_vec());
        let Some(ino) = self.entries.get(&src).copied() else {
            return;
        };
        if src == dst {
            return;
        }
        let was_must = self.must.contains(&(src.0, src.1.clone(), ino));
        if let Some(victim) = self.entries.get(&dst).copied() {
            if victim == ino {
                return;
            }
            self.remove(dst.0, &dst.1);
        }
        self.touch(&src);
        self.touch(&dst);
        self.entries.remove(&src);
        self.entries.insert(dst.clone(), ino);
        self.note_names(ino);
        let is_dir = self.inodes.get(&ino).is_some_and(|i| i.is_dir);
        if is_dir && parent != new_parent {
            if let Some(p) = self.inodes.get_mut(&parent) {
                p.nlink = p.nlink.saturating_sub(1);
            }
            if let Some(p) = self.inodes.get_mut(&new_parent) {
                p.nlink += 1;
            }
        }
        match self.groups.get_mut(&ino) {
            Some(g) if g.last() == Some(&src) => g.push(dst),
            Some(_) => {}
            None if was_must => {
                self.groups.insert(ino, vec![src, dst]);
            }
            None => {}
        }
        self.note_may();
    }

    // ---- durable points ----

    /// A checkpoint completed: everything live is durable.
    pub fn checkpoint(&mut self) {
        self.inodes.retain(|_, i| i.nlink > 0);
        for i in self.inodes.values_mut() {
            i.history = vec![i.cur.clone()];
        }
        self.must = self
            .entries
            .iter()
            .map(|((p, n), c)| (*p, n.clone(), *c))
            .collect();
        self.may = self.must.clone();
        self.groups.clear();
        let live: Vec<Ino> = self.inodes.keys().copied().collect();
        self.name_sets = live
            .into_iter()
            .map(|ino| (ino, vec![self.names_of(ino)]))
            .collect();
        self.new_since_cp.clear();
        self.fsynced_new.clear();
    }

    /// Whether a crash now must leave `ino` reachable: a file that still has a name and is
    /// durable (in the last completed checkpoint, or created since and fsync'd). Its names
    /// may differ (a rename or link is durable only with a checkpoint), its existence not:
    /// at no moment since its durable point did it have no name.
    pub fn must_survive(&self, ino: Ino) -> bool {
        self.inodes.get(&ino).is_some_and(|i| {
            !i.is_dir
                && i.nlink > 0
                && (!self.new_since_cp.contains_key(&ino) || self.fsynced_new.contains(&ino))
        })
    }

    /// fsync of a file returned without a checkpoint: its contents are durable, and its
    /// name if it is new since the checkpoint.
    pub fn fsync_file(&mut self, ino: Ino) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.history = vec![i.cur.clone()];
        }
        if let Some(key) = self.new_since_cp.get(&ino).cloned() {
            self.fsynced_new.insert(ino);
            // Roll-forward puts the name back, over an older entry of that name only if
            // that entry's inode was unlinked from it since the checkpoint: fsync writes a
            // checkpoint where a name left the parent by rename, rmdir or an unlink that
            // left its file linked (docs/DESIGN.md), so no durable entry, no rename chain
            // and no file that lives on can hold `key` here.
            if self.entries.get(&key) == Some(&ino) {
                self.must.insert((key.0, key.1, ino));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Data, BLOCK};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// [`Data`] against a dense byte vector, over random writes (near and far), truncates
    /// and punches.
    #[test]
    fn sparse_data_matches_dense() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..100 {
            let (mut d, mut v) = (Data::default(), Vec::<u8>::new());
            for _ in 0..20 {
                let far = if rng.random_bool(0.2) { 40 * BLOCK } else { 0 };
                let off = far + rng.random_range(0..6 * BLOCK);
                let len = rng.random_range(0..3 * BLOCK);
                match rng.random_range(0..3u32) {
                    0 => {
                        let bytes: Vec<u8> = (0..len).map(|_| rng.random_range(0..3u8)).collect();
                        d.write(off, &bytes);
                        let end = (off + len) as usize;
                        if v.len() < end {
                            v.resize(end, 0);
                        }
                        v[off as usize..end].copy_from_slice(&bytes);
                    }
                    1 => {
                        d.truncate(off);
                        v.resize(off as usize, 0);
                    }
                    _ => {
                        d.zero(off, len);
                        let size = v.len() as u64;
                        v[off.min(size) as usize..(off + len).min(size) as usize].fill(0);
                    }
                }
                let blocks = v.chunks(BLOCK as usize).enumerate().map(|(i, b)| {
                    let mut b = b.to_vec();
                    b.resize(BLOCK as usize, 0);
                    (i as u64, b)
                });
                let dense = Data::from_blocks(v.len() as u64, blocks);
                assert_eq!(d, dense);
                assert_eq!(d.first_difference(&dense), None);
            }
        }
    }
}
