//! The kernel's lookup count per inode, as the daemon answered it (FUSE's `nlookup`).
//!
//! Owns: for every inode the kernel was given in an entry reply (LOOKUP, MKNOD, MKDIR,
//! SYMLINK, LINK, CREATE), how many such replies it got minus the `nlookup` of the
//! FORGETs for it. The kernel has dropped an inode only when that count reaches zero: a
//! FORGET for a kernel inode that was evicted can arrive after a new LOOKUP gave the kernel
//! a new inode for the same number (its eviction raced the lookup, and the two requests
//! went to different daemon threads). The adapter's pins of unlinked inodes end at zero,
//! not at any FORGET (review 2026-11-27: one stale FORGET unpinned, and so freed, a file
//! the new kernel inode still had open; after the next checkpoint its number could name
//! an unrelated new file that the old descriptor's writes then reached).
//!
//! Invariant: an entry is counted before its reply is sent, so that no FORGET for it can
//! be handled first. A reply the kernel never took (its request was aborted: the process
//! was killed) stays counted, as fuser does not say that it failed: an inode of such a
//! reply that is then unlinked keeps its pin until unmount, which frees it (a space leak
//! for the mount's life, never a live file freed).
//!
//! Locks: 64 shards, each a leaf mutex (never held across a call into the core).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

const SHARDS: usize = 64;

pub struct LookupCounts {
    shards: Vec<Mutex<HashMap<u64, u64>>>,
}

impl Default for LookupCounts {
    fn default() -> Self {
        LookupCounts {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl LookupCounts {
    fn shard(&self, ino: u64) -> MutexGuard<'_, HashMap<u64, u64>> {
        self.shards[(ino as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// One entry reply for `ino` is about to be sent.
    pub fn looked_up(&self, ino: u64) {
        *self.shard(ino).entry(ino).or_insert(0) += 1;
    }

    /// A FORGET of `n` lookups of `ino`. True when the kernel holds none any more (also
    /// for an inode never counted: a FORGET is all the kernel says then).
    pub fn forget(&self, ino: u64, n: u64) -> bool {
        let mut m = self.shard(ino);
        match m.get_mut(&ino) {
            Some(c) if *c > n => {
                *c -= n;
                false
            }
            Some(_) => {
                m.remove(&ino);
                true
            }
            None => true,
        }
    }

    /// Inodes the kernel may still hold.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stale FORGET: the kernel evicted its inode for 7 after 3 lookups and queued
    /// FORGET(7, 3); a LOOKUP answered meanwhile gave it a new inode for 7, which a program
    /// opened and unlinked (the adapter pinned it). The stale FORGET must not end the pin;
    /// the new inode's own FORGET does. (With every FORGET ending the pin, as before, the
    /// first returned "gone".)
    #[test]
    fn a_stale_forget_does_not_drop_a_newer_lookup() {
        let c = LookupCounts::default();
        for _ in 0..3 {
            c.looked_up(7);
        }
        c.looked_up(7); // the new kernel inode
        assert!(!c.forget(7, 3), "the stale FORGET ended the count");
        assert!(c.forget(7, 1));
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn counts_are_per_inode_and_a_forget_of_an_unknown_inode_is_gone() {
        let c = LookupCounts::default();
        c.looked_up(1);
        c.looked_up(65); // same shard
        assert!(c.forget(9, 1));
        assert!(c.forget(65, 5));
        assert_eq!(c.len(), 1);
        assert!(c.forget(1, 1));
    }
}
