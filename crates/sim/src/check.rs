//! Comparing a recovered (remounted) volume with the model.
//!
//! Owns the durability verdict of one crash case. Walks the tree from the root (bounded:
//! depth and entry count, with a visited set, so a corrupt volume cannot hang the checker)
//! and checks, in order:
//! 1. every entry found is one the model had at some moment since the last durable point
//!    (nothing never written appears);
//! 2. every entry the model says is durable is there (when its parent was reached);
//! 3. every durable entry renamed since is under the names of its rename chain exactly as
//!    the inode held them at one moment since the checkpoint (rename atomicity: exactly one
//!    of them for a file with one name);
//! 4. every file found has as many names as its link count, and the contents, size, xattrs
//!    and attributes (mode, uid, gid, atime, mtime, ctime) of one version the model allows
//!    (the durable one or a later one; after fsync only the fsync'd one or later); every
//!    directory found has a link count of 2 plus the directories found in it;
//! 5. every file the model says must survive ([`Model::must_survive`]: durable, and never
//!    without a name since) is found under some name.
//!
//! Also [`check_live`]: the same comparison, strict, against a volume that did not crash
//! (the model's own sanity check, run before any crash case of a seed).

use crate::model::{Attrs, Data, Entry, Model, Version, Xattrs, BLOCK};
use flashlog_core::{Fs, Ino, ROOT_INO};
use std::collections::{BTreeMap, BTreeSet};

/// Walk limits: the model never builds more than two levels or a few dozen entries; a
/// recovered tree beyond these is wrong anyway, and the bound keeps a broken one finite.
const MAX_DEPTH: usize = 4;
const MAX_ENTRIES: usize = 4096;
/// Largest file the checker reads (the workload's far writes stay below 8 MiB).
const MAX_READ_BYTES: u64 = 64 << 20;
/// Bytes per read call of the checker.
const READ_CHUNK: usize = 16 * BLOCK as usize;

/// What the walk found: entries and, per inode, whether it is a directory.
pub struct Found {
    pub entries: BTreeSet<Entry>,
    pub dirs: BTreeSet<Ino>,
    pub reached: BTreeSet<Ino>,
}

pub fn walk(fs: &Fs) -> Result<Found, String> {
    let mut found = Found {
        entries: BTreeSet::new(),
        dirs: BTreeSet::new(),
        reached: BTreeSet::new(),
    };
    found.reached.insert(ROOT_INO);
    found.dirs.insert(ROOT_INO);
    let mut stack = vec![(ROOT_INO, 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let mut offset = 0;
        loop {
            let list = fs
                .readdir(dir, offset, 64)
                .map_err(|e| format!("readdir of ino {dir}: {e}"))?;
            if list.is_empty() {
                break;
            }
            for e in &list {
                offset = e.next_offset;
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                found.entries.insert((dir, e.name.clone(), e.ino));
                if found.entries.len() > MAX_ENTRIES {
                    return Err(format!(
                        "more than {MAX_ENTRIES} entries: the tree is broken"
                    ));
                }
                let a = fs.lookup(dir, &e.name).map_err(|err| {
                    format!(
                        "lookup of {dir}/{} (listed by readdir): {err}",
                        String::from_utf8_lossy(&e.name)
                    )
                })?;
                if a.ino != e.ino {
                    return Err(format!(
                        "readdir says {dir}/{} is ino {}, lookup says {}",
                        String::from_utf8_lossy(&e.name),
                        e.ino,
                        a.ino
                    ));
                }
                if a.is_dir() {
                    found.dirs.insert(e.ino);
                    if !found.reached.insert(e.ino) {
                        return Err(format!(
                            "directory ino {} reached twice (loop or second link)",
                            e.ino
                        ));
                    }
                    if depth + 1 >= MAX_DEPTH {
                        return Err(format!("directory ino {} deeper than {MAX_DEPTH}", e.ino));
                    }
                    stack.push((e.ino, depth + 1));
                } else {
                    found.reached.insert(e.ino);
                }
            }
        }
    }
    Ok(found)
}

fn read_version(fs: &Fs, ino: Ino) -> Result<Version, String> {
    let a = fs
        .getattr(ino)
        .map_err(|e| format!("getattr ino {ino}: {e}"))?;
    let size = a.size;
    if size > MAX_READ_BYTES {
        return Err(format!(
            "ino {ino} has size {size}, more than any write made"
        ));
    }
    // Read in chunks of whole blocks, keeping the blocks that are not all zeros.
    let mut blocks = Vec::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut off = 0u64;
    while off < size {
        let want = (size - off).min(READ_CHUNK as u64) as usize;
        let mut got = 0usize;
        while got < want {
            let at = off + got as u64;
            let n = fs
                .read(ino, at, &mut buf[got..want])
                .map_err(|e| format!("read ino {ino} at {at}: {e}"))?;
            if n == 0 {
                return Err(format!(
                    "ino {ino}: read returned 0 at {at} below the size {size}"
                ));
            }
            got += n;
        }
        for (k, b) in buf[..want].chunks(BLOCK as usize).enumerate() {
            if b.iter().any(|&x| x != 0) {
                let mut blk = b.to_vec();
                blk.resize(BLOCK as usize, 0);
                blocks.push((off / BLOCK + k as u64, blk));
            }
        }
        off += want as u64;
    }
    let data = Data::from_blocks(size, blocks);
    let mut xattrs = Xattrs::new();
    for name in fs
        .listxattr(ino)
        .map_err(|e| format!("listxattr ino {ino}: {e}"))?
    {
        let v = fs
            .getxattr(ino, &name)
            .map_err(|e| format!("getxattr ino {ino}: {e}"))?;
        xattrs.insert(name, v);
    }
    Ok(Version {
        data,
        xattrs,
        attrs: Attrs {
            mode: a.mode & 0o7777,
            uid: a.uid,
            gid: a.gid,
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
        },
    })
}

fn show(e: &Entry) -> String {
    format!("{}/{} -> ino {}", e.0, String::from_utf8_lossy(&e.1), e.2)
}

/// Describe how a found version differs from the nearest allowed one.
fn diff(found: &Version, allowed: &[Version]) -> String {
    let mut out = format!(
        "found size {} xattrs {:?} {}; allowed:",
        found.data.len(),
        found.xattrs.keys().collect::<Vec<_>>(),
        show_attrs(&found.attrs)
    );
    for (i, v) in allowed.iter().enumerate() {
        let first = found.data.first_difference(&v.data);
        out.push_str(&format!(
            "\n    v{i}: size {}{}{}{}",
            v.data.len(),
            first
                .map(|p| format!(", first differing byte at {p}"))
                .unwrap_or_default(),
            if v.xattrs != found.xattrs {
                ", xattrs differ"
            } else {
                ""
            },
            if v.attrs != found.attrs {
                format!(", attributes {}", show_attrs(&v.attrs))
            } else {
                String::new()
            }
        ));
    }
    out
}

fn show_attrs(a: &Attrs) -> String {
    let t = |t: &flashlog_core::Timespec| format!("{}.{:09}", t.sec, t.nsec);
    format!(
        "mode {:#o} uid {} gid {} atime {} mtime {} ctime {}",
        a.mode,
        a.uid,
        a.gid,
        t(&a.atime),
        t(&a.mtime),
        t(&a.ctime)
    )
}

/// [`walk`], leaving out the root's entries named in `skip` (files a driver keeps outside
/// the model, checked on its own: `gc_none`'s ballast).
fn walk_except(fs: &Fs, skip: &[&[u8]]) -> Result<Found, String> {
    let mut found = walk(fs)?;
    let gone: Vec<Entry> = found
        .entries
        .iter()
        .filter(|e| e.0 == ROOT_INO && skip.contains(&e.1.as_slice()))
        .cloned()
        .collect();
    for e in gone {
        found.entries.remove(&e);
        if !found.entries.iter().any(|o| o.2 == e.2) {
            found.reached.remove(&e.2);
        }
    }
    Ok(found)
}

/// Check a recovered volume against the model. Returns every violation found.
pub fn check_recovered(fs: &Fs, m: &Model) -> Vec<String> {
    check_recovered_except(fs, m, &[])
}

/// [`check_recovered`] with the root's entries named in `skip` left out of the comparison.
pub fn check_recovered_except(fs: &Fs, m: &Model, skip: &[&[u8]]) -> Vec<String> {
    let mut bad = Vec::new();
    let found = match walk_except(fs, skip) {
        Ok(f) => f,
        Err(e) => return vec![format!("walking the recovered tree: {e}")],
    };
    for e in &found.entries {
        if !m.may.contains(e) {
            bad.push(format!(
                "entry {} appeared, but the model never had it since the last durable point",
                show(e)
            ));
        }
    }
    for e in &m.must {
        if found.reached.contains(&e.0) && !found.entries.contains(e) {
            bad.push(format!("durable entry {} is missing", show(e)));
        }
    }
    for (ino, names) in &m.groups {
        if !names.iter().all(|(p, _)| found.reached.contains(p)) {
            continue;
        }
        let distinct: BTreeSet<&(Ino, Vec<u8>)> = names.iter().collect();
        let at: BTreeSet<&(Ino, Vec<u8>)> = distinct
            .iter()
            .copied()
            .filter(|(p, name)| found.entries.contains(&(*p, name.clone(), *ino)))
            .collect();
        // The names of the rename chain found must be those the inode held at one moment
        // since the checkpoint: for a file with one name, exactly one of them; for a hard
        // linked one, possibly several (its checkpointed names, say).
        let held = |s: &BTreeSet<(Ino, Vec<u8>)>| -> BTreeSet<&(Ino, Vec<u8>)> {
            distinct
                .iter()
                .copied()
                .filter(|k| s.contains(*k))
                .collect()
        };
        let ok = match m.name_sets.get(ino) {
            Some(sets) => sets.iter().any(|s| held(s) == at),
            None => at.len() == 1,
        };
        if !ok {
            let list: Vec<String> = names
                .iter()
                .map(|(p, name)| format!("{p}/{}", String::from_utf8_lossy(name)))
                .collect();
            let sets: Vec<Vec<String>> = m
                .name_sets
                .get(ino)
                .map(|v| {
                    v.iter()
                        .map(|s| {
                            s.iter()
                                .map(|(p, n)| format!("{p}/{}", String::from_utf8_lossy(n)))
                                .collect()
                        })
                        .collect()
                })
                .unwrap_or_default();
            bad.push(format!(
                "renamed ino {ino} found under {} of its names {list:?}, a set it never held \
                 (rename must be atomic; its name sets since the checkpoint: {sets:?})",
                at.len()
            ));
        }
    }
    let mut seen = BTreeMap::new();
    for (_, _, ino) in &found.entries {
        seen.entry(*ino).or_insert(());
    }
    for &ino in m.inodes.keys() {
        if m.must_survive(ino) && !seen.contains_key(&ino) {
            bad.push(format!(
                "ino {ino} is durable and had a name at every moment since, but the \
                 recovered tree has no name for it"
            ));
        }
    }
    for ino in seen.keys() {
        let Some(mi) = m.inode(*ino) else {
            bad.push(format!(
                "ino {ino} is in the tree but the model has no such inode"
            ));
            continue;
        };
        if mi.is_dir != found.dirs.contains(ino) {
            bad.push(format!(
                "ino {ino}: model says dir={}, the volume disagrees",
                mi.is_dir
            ));
            continue;
        }
        if mi.is_dir {
            continue;
        }
        let names = found.entries.iter().filter(|e| e.2 == *ino).count();
        match fs.getattr(*ino) {
            Ok(a) if a.nlink as usize == names => {}
            Ok(a) => bad.push(format!(
                "ino {ino}: link count {} but found under {names} names",
                a.nlink
            )),
            Err(e) => bad.push(format!("getattr ino {ino}: {e}")),
        }
        match read_version(fs, *ino) {
            Ok(v) if mi.history.contains(&v) => {}
            Ok(v) => bad.push(format!(
                "ino {ino}: contents are no version the file had since its durable point: {}",
                diff(&v, &mi.history)
            )),
            Err(e) => bad.push(e),
        }
    }
    for &dir in &found.dirs {
        check_dir_links(fs, &found, dir, &mut bad);
    }
    bad
}

/// A directory's link count must be 2 plus the directories found in it (the walk reached
/// all of them: it lists every directory it finds).
fn check_dir_links(fs: &Fs, found: &Found, dir: Ino, bad: &mut Vec<String>) {
    let subdirs = found
        .entries
        .iter()
        .filter(|e| e.0 == dir && found.dirs.contains(&e.2))
        .count();
    match fs.getattr(dir) {
        Ok(a) if a.nlink as usize == 2 + subdirs => {}
        Ok(a) => bad.push(format!(
            "directory ino {dir}: link count {} but {subdirs} directories found in it",
            a.nlink
        )),
        Err(e) => bad.push(format!("getattr ino {dir}: {e}")),
    }
}

/// Strict comparison of a live (not crashed) volume with the model's current state.
pub fn check_live(fs: &Fs, m: &Model) -> Vec<String> {
    check_live_except(fs, m, &[])
}

/// [`check_live`] with the root's entries named in `skip` left out.
pub fn check_live_except(fs: &Fs, m: &Model, skip: &[&[u8]]) -> Vec<String> {
    let mut bad = Vec::new();
    let found = match walk_except(fs, skip) {
        Ok(f) => f,
        Err(e) => return vec![format!("walking the live tree: {e}")],
    };
    let want: BTreeSet<Entry> = m
        .entries
        .iter()
        .map(|((p, n), c)| (*p, n.clone(), *c))
        .collect();
    for e in want.symmetric_difference(&found.entries) {
        bad.push(format!(
            "live entry {} is {}",
            show(e),
            if want.contains(e) {
                "missing"
            } else {
                "unexpected"
            }
        ));
    }
    for ino in m.files() {
        match read_version(fs, ino) {
            Ok(v) if v == m.inodes[&ino].cur => {}
            Ok(v) => bad.push(format!(
                "live ino {ino}: {}",
                diff(&v, std::slice::from_ref(&m.inodes[&ino].cur))
            )),
            Err(e) => bad.push(e),
        }
    }
    for &dir in &found.dirs {
        check_dir_links(fs, &found, dir, &mut bad);
    }
    bad
}
