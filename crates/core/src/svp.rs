//! Scalable victim protector (ScaleLFS SVP): page-level protection of blocks being
//! migrated, in a concurrent table keyed by (inode, page index), instead of a per-file GC
//! lock.
//!
//! A collector takes a *page* protection `[idx, idx+1)` with a try (on conflict it skips
//! the block, as ScaleLFS's trylock does). I/O paths that can conflict with a migration
//! (truncate, punch-hole, overwrite writeback, unlink) take a *range* protection
//! `[start, end)` (half-open; ScaleLFS's released code used `end = 1` for pages, so two
//! pages never conflicted: fixed here) and sleep on a condition variable while a collector
//! holds a page inside the range (ScaleLFS's code busy-spins). Ranges of I/O paths do not
//! exclude each other: those paths are serialised by the file cell anyway.
//!
//! Invariant: an I/O path takes its range protection before it locks the file cell, and a
//! collector never blocks on the table while holding a cell lock (it only tries), so the
//! table cannot deadlock with cell locks. A collector holds its page protections from its
//! owner check to its remap (`scale::commit_dnode_run`), across the write of its copies,
//! when it holds no cell: so no I/O path changes those slots in between.
//!
//! Lock order: one shard mutex (leaf). Sharded by inode, so all protections of one file
//! live in one shard and range checks are local.

use crate::waits::{self, Point};
use flashlog_format::Ino;
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// Shards of the table.
const SHARDS: usize = 64;

/// Inode numbers hashed as the cell table hashes them (`InoHash`), not with SipHash: every
/// overwrite under `gc=scale` looks its file up here.
type InoMap<V> = HashMap<Ino, V, std::hash::BuildHasherDefault<crate::cell::InoHash>>;

#[derive(Default)]
struct ShardState {
    /// Pages held by collectors, per inode.
    pages: InoMap<BTreeSet<u64>>,
    /// Ranges held by I/O paths, per inode.
    ranges: InoMap<Vec<(u64, u64)>>,
}

#[derive(Default)]
struct Shard {
    state: Mutex<ShardState>,
    cv: Condvar,
}

pub struct Svp {
    /// Cache-padded: writers of different files take neighbouring shards on every write,
    /// and must not share their lines.
    shards: Box<[crossbeam_utils::CachePadded<Shard>]>,
}

impl Default for Svp {
    fn default() -> Self {
        Svp {
            shards: (0..SHARDS).map(|_| Default::default()).collect(),
        }
    }
}

/// A range held by an I/O path; released on drop.
pub struct RangeGuard<'a> {
    svp: &'a Svp,
    ino: Ino,
    range: (u64, u64),
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let sh = self.svp.shard(self.ino);
        let mut st = sh.state.lock();
        if let Some(v) = st.ranges.get_mut(&self.ino) {
            if let Some(i) = v.iter().position(|r| *r == self.range) {
                v.swap_remove(i);
            }
            if v.is_empty() {
                st.ranges.remove(&self.ino);
            }
        }
    }
}

impl Svp {
    fn shard(&self, ino: Ino) -> &Shard {
        &self.shards[ino as usize % SHARDS]
    }

    /// Collector: protect page `idx` of `ino` unless an I/O range or another collector
    /// holds it.
    pub fn try_protect_page(&self, ino: Ino, idx: u64) -> bool {
        let mut st = self.shard(ino).state.lock();
        if st
            .ranges
            .get(&ino)
            .is_some_and(|v| v.iter().any(|&(a, b)| a <= idx && idx < b))
        {
            return false;
        }
        st.pages.entry(ino).or_default().insert(idx)
    }

    /// Collector: release page `idx` and wake waiting I/O.
    pub fn release_page(&self, ino: Ino, idx: u64) {
        let sh = self.shard(ino);
        let mut st = sh.state.lock();
        if let Some(set) = st.pages.get_mut(&ino) {
            set.remove(&idx);
            if set.is_empty() {
                st.pages.remove(&ino);
            }
        }
        drop(st);
        sh.cv.notify_all();
    }

    /// I/O path: protect `[start, end)` of `ino`, sleeping while a collector holds a page
    /// inside it.
    pub fn protect_range(&self, ino: Ino, start: u64, end: u64) -> RangeGuard<'_> {
        let sh = self.shard(ino);
        let mut st = sh.state.lock();
        let busy = |st: &ShardState| {
            st.pages
                .get(&ino)
                .is_some_and(|p| p.range(start..end).next().is_some())
        };
        if busy(&st) {
            let t0 = Instant::now();
            while busy(&st) {
                sh.cv.wait(&mut st);
            }
            waits::record(Point::Svp, t0);
        }
        st.ranges.entry(ino).or_default().push((start, end));
        RangeGuard {
            svp: self,
            ino,
            range: (start, end),
        }
    }

    /// The pages of `ino` collectors protect right now, in index order (for tests).
    pub fn pages_of(&self, ino: Ino) -> Vec<u64> {
        self.shard(ino)
            .state
            .lock()
            .pages
            .get(&ino)
            .map(|p| p.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Pages currently protected (for tests and statistics).
    pub fn pages_held(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.state
                    .lock()
                    .pages
                    .values()
                    .map(|p| p.len())
                    .sum::<usize>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn half_open_ranges_and_pages() {
        let s = Svp::default();
        assert!(s.try_protect_page(1, 5));
        assert!(
            s.try_protect_page(1, 6),
            "neighbouring pages never conflict"
        );
        assert!(!s.try_protect_page(1, 5), "the same page conflicts");
        assert!(s.try_protect_page(2, 5), "other inodes are independent");
        s.release_page(1, 5);
        s.release_page(1, 6);
        {
            let _r = s.protect_range(1, 10, 20);
            assert!(!s.try_protect_page(1, 10));
            assert!(!s.try_protect_page(1, 19));
            assert!(s.try_protect_page(1, 20), "end is exclusive");
            assert!(s.try_protect_page(1, 9));
        }
        assert!(s.try_protect_page(1, 10), "range released on drop");
    }

    #[test]
    fn io_sleeps_until_the_page_is_released() {
        let s = Arc::new(Svp::default());
        assert!(s.try_protect_page(7, 3));
        let got = Arc::new(AtomicBool::new(false));
        let t = {
            let (s, got) = (s.clone(), got.clone());
            std::thread::spawn(move || {
                let _r = s.protect_range(7, 0, 100);
                got.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !got.load(Ordering::SeqCst),
            "the range must wait for the page"
        );
        s.release_page(7, 3);
        t.join().unwrap();
        assert!(got.load(Ordering::SeqCst));
    }
}
