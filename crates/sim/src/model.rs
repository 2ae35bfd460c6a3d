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
//! set of names (the first, its set at the last completed checkpoint, or at its creation). Durable points only shrink allowances (they forget the
//! versions before them), never obligations.
//!
//! The model is sound only for what Flashlog promises (docs/DESIGN.md, durability
//! contract): fsync of a file makes its contents, size and xattrs durable, and its name if
//! the file is new since the checkpoint; a checkpoint (sync, fsync of a directory, unmount,
//! or an fsync the core turned into one) makes everything durable.

use flashlog_core::{Ino, ROOT_INO};
use std::collections::{BTreeMap, BTreeSet};

/// A directory entry: (parent, name) -> child.
pub type Entry = (Ino, Vec<u8>, Ino);
/// The key of a directory entry.
pub type Key = (Ino, Vec<u8>);
pub type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

/// One state a file passed through.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Version {
    pub data: Vec<u8>,
    pub xattrs: Xattrs,
}

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
            }
            i.cur = v;
        }
    }

    // ---- operations (called after the file system accepted them, or for the operation
    // in flight when power was cut: its effect may or may not have reached the disk) ----

    pub fn create(&mut self, parent: Ino, name: &[u8], ino: Ino, is_dir: bool) {
        let key = (parent, name.to_vec());
        self.touch(&key);
        self.entries.insert(key.clone(), ino);
        // A reused inode number starts a new history: the old file was freed before a
        // completed checkpoint, or the number would not have been handed out again.
        self.inodes.insert(
            ino,
            Inode {
                is_dir,
                nlink: if is_dir { 2 } else { 1 },
                cur: Version::default(),
                history: vec![Version::default()],
            },
        );
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
        let end = off as usize + data.len();
        if v.data.len() < end {
            v.data.resize(end, 0);
        }
        v.data[off as usize..end].copy_from_slice(data);
        self.set_version(ino, v);
    }

    pub fn truncate(&mut self, ino: Ino, size: u64) {
        let Some(i) = self.inodes.get(&ino) else {
            return;
        };
        let mut v = i.cur.clone();
        v.data.resize(size as usize, 0);
        self.set_version(ino, v);
    }

    pub fn punch(&mut self, ino: Ino, off: u64, len: u64) {
        let Some(i) = self.inodes.get(&ino) else {
            return;
        };
        let mut v = i.cur.clone();
        let size = v.data.len() as u64;
        let (a, b) = (
            off.min(size) as usize,
            off.saturating_add(len).min(size) as usize,
        );
        v.data[a..b].fill(0);
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
