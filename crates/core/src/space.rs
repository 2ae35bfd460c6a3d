//! The space budget: the one owner of "may I use main-area space?" (issue 12 item 1).
//!
//! Owns one signed counter, the **headroom** `H` in blocks:
//!
//! ```text
//! H = free_sections * blocks_per_section   (capacity no log head owns)
//!   - debt                                 (dirty pages, nodes and inodes: blocks the next
//!                                           checkpoint must write)
//!   - allowances                           (blocks reserved by operations and collectors
//!                                           in flight, not yet turned into debt or writes)
//!   - sum over log heads of used(h)        (blocks head h can write before it must claim
//!                                           a new section, counted from the other side:
//!                                           used(h) = section size - room(h))
//!   - recovery reserve                     (the sections roll-forward claims to move every
//!                                           log head: one per head, one more per node head
//!                                           whose next segment is in another section)
//! ```
//!
//! The recovery reserve is never lent to operations or collectors: at a power cut `H >= 0`
//! leaves at least that many sections free, and a crash frees no section (sections are
//! released only after a checkpoint), so the mount's roll-forward always finds them. Mount
//! lends it back to itself for the head move (`lend_recovery_reserve`) and takes it again
//! after its checkpoint (`set_recovery_reserve`); what `H` cannot cover then (the old heads'
//! unwritten room is lost to dirty sections) is owed and taken first from the sections the
//! next checkpoints release: `sections_changed` pays the owed part out of the released
//! blocks before the rest reaches `H_g`, so no reservation can take owed blocks in
//! between. While any is owed, `H <= 0` (every positive `H` settles into the reserve), so
//! no application operation gets a reservation, nothing becomes dirty and nothing can be
//! fsync'd: a crash then has nothing to roll forward and its mount moves no head. That is
//! why then the first collector may use the part held (it is how the owed part gets paid
//! at all on a full volume). It may also with nothing owed, when `H` cannot cover its
//! victim and no fsync chain follows the last durable checkpoint (`try_reserve_victim`);
//! fsync checkpoints instead of starting a chain while such a loan is out (`reserve_lent`). Settles may run at once: the held amount changes only by
//! compare-and-swap against the value each computed its move from, so every block moves
//! between `H` and the reserve once.
//!
//! Invariant: `H >= 0` outside an overcommit (counted in `overcommit_blocks`; the tests
//! assert it stays 0). From it, the next checkpoint always finds its sections: writing
//! `k_h` blocks through head `h` claims at most `ceil(max(0, k_h - room(h)) / bps)` sections,
//! which is `<= (k_h + used(h)) / bps`; summed over heads that is at most
//! `(debt + allowances + sum used) / bps <= free_sections`. So a checkpoint needs no check
//! and can never fail for space, and no one else can take what it needs.
//!
//! How each event moves `H` (docs/DESIGN.md "Space budget" has the full table):
//! - a page, node or inode becomes dirty: `-1`, drawn from the thread's allowance if it
//!   holds one (then `H` does not move: the allowance was subtracted when taken);
//! - a dirty block is written: debt `-1`, `used(h)` `+1`: no change; a block that was not
//!   debt (a collector's move of a clean block, a clean inode written by fsync) is drawn
//!   from the allowance like a charge;
//! - a head claims a section: free `-bps`, `used(h)` falls from `bps` to 0: no change (the
//!   segment manager applies the claim and the exact difference as one update of `H_g`,
//!   `head_move`, so no one sees `H` a section short in between); an SSR head fills holes of used
//!   sections, so its `used` stays `bps` and each block it writes gives `+1`;
//! - a dirty block is dropped unwritten (truncate, unlink): `+1`;
//! - the checkpoint frees prefree sections: `+bps` each (the recovery reserve's owed part
//!   first, above).
//!
//! Only two things may fail, both before any lock is held: an operation's allowance
//! (`try_reserve` with the application floor, at the start of each modifying call: ENOSPC
//! comes from here after cleaning could not help) and a collector's reservation for one
//! victim (`try_reserve` with floor 0). The application floor keeps one victim's worth of
//! blocks that only collectors may take, so cleaning can always start.
//!
//! The allowance of the current thread lives in a thread-local (`Allowance` guard), so the
//! node-tree code charges without new parameters and without touching the global counter
//! per block.
//!
//! **Per-slot caches** (Max's per-core counters for a bounded count, issue 12 item 4). One
//! `H` moved by every operation of 16 cores is a lock in all but name, so `H` is split: the
//! global atomic `H_g` and per-thread-slot caches (`stats::SlotCache`) of blocks already
//! taken out of `H_g`. `H = H_g + sum(caches) + moving`, where `moving` is blocks on their
//! way between a cache and `H_g`: a refill's, out of `H_g` and not yet in the cache; a
//! drain's, a cache's return's or an overflow's, out of a cache and not yet added. Each
//! such move marks its slot from before its blocks leave one place until they arrived
//! (`SlotCache`). Application reservations, charges without an allowance, refunds and an
//! allowance's leftover go through the caller's cache while `H_g >= cache_floor` (twice the
//! application floor plus everything the caches may hold), and touch `H_g` once per
//! `cap / 2` blocks. Below that line the caches are not used and every call is exact, as
//! before. A refusal (`Split::take_exact`) comes only after a look at `H_g` failed, a drain
//! of every cache after it found nothing to move and no slot marked (it waits for a marked
//! move to land and looks again), and a last look, which sees every move done by then,
//! failed too: so nobody is refused while the caches, or a move to or from one, hold
//! blocks they held at its look (other than blocks their owners used meanwhile). A drain
//! that moved blocks is followed by another look, a few rounds at most (`DRAIN_ROUNDS`:
//! other threads refilling as fast as drains return blocks could keep a request larger
//! than all caches hold looking forever). A charge without an allowance that takes `H_g`
//! below zero waits for marked moves the same way before it counts an overcommit, and
//! counts no more than `H_g` is below zero once they landed. The invariant `H >= 0` and
//! its proof are unchanged (cached and moving blocks count as allowances), and the
//! application floor is kept on `H_g`, which only exact calls and collectors lower below
//! `cache_floor`.
//! `headroom()` is `H` (it sums the caches); `budget_short`'s per-operation check reads
//! `H_g` and sums the caches only near its line.
//!
//! `UserBlocks` is the same for `alloc_blocks` (blocks of user space in use, the ENOSPC
//! limit and `statfs`): caches of blocks counted as allocated but not yet handed out,
//! used while the count is at least `max_total` away from the limit.
//!
//! Lock order: none. Everything here is atomics; callers may hold any lock.

use crate::stats::SlotCache;
use crate::{Error, Result};
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Blocks one slot's cache of headroom or user blocks holds at most.
pub const SLOT_CACHE_BLOCKS: u64 = 512;

/// Drains that moved blocks after which an exact take stops looking (`Split::take_exact`).
const DRAIN_ROUNDS: u32 = 4;

/// Blocks an operation that changes only metadata may dirty (inodes of a rename's two
/// directories and two files, a new dentry page and the nodes above it, an xattr node).
pub const OP_META_BLOCKS: u64 = 32;

thread_local! {
    /// (budget address, blocks left) of the allowance this thread holds, if any.
    static ALLOWANCE: Cell<(usize, u64)> = const { Cell::new((0, 0)) };
    /// (budget address, blocks) of the head move this thread is in, if any (`HeadMove`).
    static HEAD_MOVE: Cell<(usize, i64)> = const { Cell::new((0, 0)) };
}

#[cfg(test)]
thread_local! {
    /// Read-modify-writes of a global count (`H_g`, the user-block count) by this thread:
    /// the tests check that the caches keep them off the per-operation path.
    static GLOBAL_RMW: Cell<u64> = const { Cell::new(0) };
}

fn global_rmw() {
    #[cfg(test)]
    GLOBAL_RMW.with(|c| c.set(c.get() + 1));
}

#[cfg(test)]
type TestPointHook = Box<dyn FnMut(&'static str)>;

#[cfg(test)]
thread_local! {
    /// A test's hook for this thread's `test_point`s (tests force interleavings with it).
    static TEST_POINT: std::cell::RefCell<Option<TestPointHook>> =
        const { std::cell::RefCell::new(None) };
}

/// A point tests can stop a thread at (`TEST_POINT`): `"to_global"`, blocks out of a slot
/// cache on their way to `global` (a drain, a cache's return, an overflow); `"refilled"`,
/// a refill's blocks out of `global`, not yet in the cache; `"busy"`, a caller that must
/// wait for such a move; `"released"`, released sections' blocks added to `H_g`;
/// `"settle_give"` and `"settle_take"`, inside `settle_recovery_reserve`.
#[inline]
fn test_point(_what: &'static str) {
    #[cfg(test)]
    TEST_POINT.with(|h| {
        if let Some(f) = h.borrow_mut().as_mut() {
            f(_what)
        }
    });
}

/// A count of available blocks split into a global atomic and per-slot caches of blocks
/// already taken out of it (module comment): `total = global + sum(caches)`, plus blocks
/// moving between the two (each such move marks its slot). The caches are used while
/// `global >= cache_floor`; below it every call is exact. The space budget's headroom and
/// the user blocks' free count are each one.
struct Split {
    global: CachePadded<AtomicI64>,
    cache: SlotCache,
    /// `global` at or above which the caches are used.
    cache_floor: i64,
}

impl Split {
    /// `avail` blocks; the caches are used while `global` is at least `margin` plus all
    /// the caches may hold.
    fn new(avail: i64, margin: i64) -> Self {
        let cache = SlotCache::new(SLOT_CACHE_BLOCKS);
        Split {
            global: CachePadded::new(AtomicI64::new(avail)),
            cache_floor: margin + cache.max_total() as i64,
            cache,
        }
    }

    fn global(&self) -> i64 {
        self.global.load(Ordering::Acquire)
    }

    /// The exact count (sums the caches).
    fn total(&self) -> i64 {
        self.global() + self.cache.total() as i64
    }

    /// `global += d`, counted for the tests; returns the value before.
    fn add(&self, d: i64) -> i64 {
        global_rmw();
        self.global.fetch_add(d, Ordering::AcqRel)
    }

    /// Blocks out of a cache back into `global` (a `SlotCache` callback: the slot is
    /// marked meanwhile).
    fn to_global(&self, d: u64) {
        test_point("to_global");
        self.add(d as i64);
    }

    /// The caches may serve `n` blocks: `global` is well above every floor.
    fn usable(&self, n: u64) -> bool {
        self.global.load(Ordering::Relaxed) >= self.cache_floor + n as i64
    }

    /// `global -= n` if it stays at or above `floor`.
    fn take_global(&self, n: i64, floor: i64) -> bool {
        let ok = self
            .global
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur - n >= floor).then_some(cur - n)
            })
            .is_ok();
        if ok {
            global_rmw();
        }
        ok
    }

    /// `n` blocks from this thread's cache, without refilling it.
    fn take_from_cache(&self, n: u64) -> bool {
        n <= self.cache.cap() && self.usable(n) && self.cache.take(n)
    }

    /// `n` blocks from this thread's cache, refilled with half a cache from `global` if
    /// short (and `global` stays at or above the cache floor).
    fn take_cached(&self, n: u64) -> bool {
        if self.take_from_cache(n) {
            return true;
        }
        let half = self.cache.cap() / 2;
        n <= self.cache.cap()
            && self.usable(n)
            && self.cache.refill(
                half,
                || {
                    let ok = self.take_global((n + half) as i64, self.cache_floor);
                    if ok {
                        test_point("refilled");
                    }
                    ok
                },
                |over| self.to_global(over),
            )
    }

    /// Move this thread's cache back to `global` (an exact call: the caches are not in use
    /// below their floor).
    fn return_mine(&self) {
        self.cache.drain_mine(|d| self.to_global(d));
    }

    /// Move every cache back to `global`; returns the blocks moved and whether another
    /// move between a cache and `global` was in flight.
    fn drain_all(&self) -> (i64, bool) {
        let (d, busy) = self.cache.drain_all(|d| self.to_global(d));
        (d as i64, busy)
    }

    /// Wait for a move in flight to land (`drain_all` said busy).
    fn wait_for_move(&self) {
        test_point("busy");
        std::thread::yield_now();
    }

    /// `drain_all` until no move is in flight: every block the caches held, or had on its
    /// way to or from `global`, is in `global` now (or was used meanwhile). Returns the
    /// blocks this call moved.
    fn drain_quiet(&self) -> i64 {
        let mut moved = 0;
        loop {
            let (d, busy) = self.drain_all();
            moved += d;
            if !busy {
                return moved;
            }
            self.wait_for_move();
        }
    }

    /// `n` blocks out of `global` leaving at least `floor`, after this slot's cache went
    /// back. Refused only when a look at `global` failed, the drain of every cache after it
    /// found nothing to move and no move in flight (a move's mark is set before its blocks
    /// leave one place and cleared after they arrived), and a last look, which sees every
    /// move done by then, failed too. `drained` runs after each drain that moved blocks.
    /// Drains that keep finding blocks (other threads refilling their caches as fast as
    /// they come back: `global` is then above the cache floor, and `n` more than all the
    /// caches hold) end after `DRAIN_ROUNDS`, so such a caller is refused, not kept
    /// looking.
    fn take_exact(&self, n: u64, floor: i64, drained: impl Fn()) -> bool {
        self.return_mine();
        let n = n as i64;
        let mut rounds = 0;
        loop {
            if self.take_global(n, floor) {
                return true;
            }
            let (moved, busy) = self.drain_all();
            if moved > 0 {
                drained();
                rounds += 1;
                if rounds <= DRAIN_ROUNDS {
                    continue;
                }
            }
            if !busy {
                return self.take_global(n, floor);
            }
            self.wait_for_move();
        }
    }

    /// `n` blocks leaving at least `floor`: cached when the caches are in use, else exact.
    fn take(&self, n: u64, floor: i64) -> bool {
        self.take_cached(n) || self.take_exact(n, floor, || ())
    }

    /// `n` blocks back: into this thread's cache while the caches are in use.
    fn give(&self, n: u64) {
        if self.usable(0) {
            self.cache.put(n, |over| self.to_global(over));
        } else {
            self.add(n as i64);
        }
    }
}

pub struct SpaceBudget {
    /// Blocks per section.
    bps: i64,
    /// `H`: `H_g` (its `global`) and the slot caches.
    headroom: Split,
    /// Blocks an application operation must leave: one cleaning victim's reservation.
    app_floor: i64,
    /// Blocks charged with no allowance while `H` was below zero (an accounting bug if
    /// nonzero; reported by the bench and asserted by the tests).
    pub overcommit_blocks: AtomicU64,
    /// Reservations refused (operations that had to clean first, collectors that stopped).
    pub refusals: AtomicU64,
    /// Sections released by checkpoints so far (progress for callers that wait on cleaning).
    released: AtomicU64,
    /// Victim reservations held right now (`try_reserve_victim`).
    victims: AtomicU64,
    /// Victim reservations allowed into the held recovery reserve with nothing owed (no
    /// fsync chain to roll forward), counted from before the check for a chain until the
    /// allowance drops (`reserve_lent`).
    lending: AtomicU64,
    /// Blocks of the recovery reserve held out of `H` now.
    recovery_held: AtomicI64,
    /// Blocks the recovery reserve should hold (held + owed).
    recovery_target: AtomicI64,
}

impl SpaceBudget {
    /// A budget over `free_secs` free sections of `bps` blocks, heads already using
    /// `used` blocks.
    pub fn new(bps: u64, free_secs: u64, used: u64) -> Self {
        SpaceBudget {
            bps: bps as i64,
            headroom: Split::new((free_secs * bps) as i64 - used as i64, 4 * bps as i64),
            app_floor: 2 * bps as i64,
            overcommit_blocks: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            released: AtomicU64::new(0),
            victims: AtomicU64::new(0),
            lending: AtomicU64::new(0),
            recovery_held: AtomicI64::new(0),
            recovery_target: AtomicI64::new(0),
        }
    }

    /// Hold `secs` sections out of `H` for the next mount's roll-forward. Takes what `H`
    /// covers now (keeping `H >= 0`); the rest is owed and taken from released sections.
    pub fn set_recovery_reserve(&self, secs: u64) {
        self.recovery_target
            .store(secs as i64 * self.bps, Ordering::Release);
        self.settle_recovery_reserve();
    }

    /// Move blocks between `H` and the reserve toward the target, never taking `H` below 0.
    /// Settles may run at once (a release, a refused reservation, a mount step): `held`
    /// changes only by compare-and-swap against the value the amount was computed from, so
    /// no two give back the same surplus, and what a take got out of `H_g` beyond what is
    /// still owed when it adds it to `held` goes back.
    fn settle_recovery_reserve(&self) {
        let (target, held) = loop {
            let target = self.recovery_target.load(Ordering::Acquire);
            let held = self.recovery_held.load(Ordering::Acquire);
            if held <= target {
                break (target, held);
            }
            test_point("settle_give");
            if self
                .recovery_held
                .compare_exchange(held, target, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.headroom
                    .global
                    .fetch_add(held - target, Ordering::AcqRel);
            }
            // Look again: another settle gave it, or the target moved meanwhile.
        };
        let want = target - held;
        if want == 0 {
            return;
        }
        // Owed: what the caches hold, or have on its way to `H_g`, is headroom too, and
        // none of it may be lent now.
        self.headroom.drain_quiet();
        let mut got = 0;
        let mut cur = self.headroom.global.load(Ordering::Acquire);
        while got < want && cur > 0 {
            let take = (want - got).min(cur);
            match self.headroom.global.compare_exchange_weak(
                cur,
                cur - take,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    got += take;
                    cur -= take;
                }
                Err(now) => cur = now,
            }
        }
        if got == 0 {
            return;
        }
        test_point("settle_take");
        let kept = self.pay_recovery_reserve(got);
        if kept < got {
            self.headroom.global.fetch_add(got - kept, Ordering::AcqRel);
        }
    }

    /// Add up to `blocks` to the reserve, no more than it is owed now; returns the blocks
    /// added.
    fn pay_recovery_reserve(&self, blocks: i64) -> i64 {
        let mut held = self.recovery_held.load(Ordering::Acquire);
        loop {
            let target = self.recovery_target.load(Ordering::Acquire);
            let pay = (target - held).clamp(0, blocks);
            if pay == 0 {
                return 0;
            }
            match self.recovery_held.compare_exchange(
                held,
                held + pay,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return pay,
                Err(now) => held = now,
            }
        }
    }

    /// Give the whole reserve back to `H` (mount, right before roll-forward moves the
    /// heads): the head move claims its sections from it.
    pub fn lend_recovery_reserve(&self) {
        let held = self.recovery_held.swap(0, Ordering::AcqRel);
        self.headroom.global.fetch_add(held, Ordering::AcqRel);
    }

    /// Blocks the recovery reserve holds now and blocks it is still owed.
    pub fn recovery_reserve(&self) -> (u64, u64) {
        let held = self.recovery_held.load(Ordering::Acquire);
        let target = self.recovery_target.load(Ordering::Acquire);
        (held as u64, (target - held).max(0) as u64)
    }

    fn id(&self) -> usize {
        self as *const _ as usize
    }

    /// Current headroom `H` in blocks (negative only after an overcommit); sums the slot
    /// caches.
    pub fn headroom(&self) -> i64 {
        self.headroom.total()
    }

    /// `H_g`: the headroom less what the slot caches hold (one load; `H` is at least this
    /// and at most `SLOT_CACHE_BLOCKS` per slot more).
    pub fn headroom_global(&self) -> i64 {
        self.headroom.global()
    }

    /// How far `H` is below `line` (`> 0`: short), summing the caches only when `H_g` is
    /// below it (the per-operation checks, `budget_short` and `space_target`).
    pub fn shortfall(&self, line: i64) -> i64 {
        let short = line - self.headroom_global();
        if short > 0 {
            line - self.headroom()
        } else {
            short
        }
    }

    /// Settle the recovery reserve if it is owed (after a drain moved blocks to `H_g`).
    fn settle_if_owed(&self) {
        if self.recovery_reserve().1 > 0 {
            self.settle_recovery_reserve();
        }
    }

    /// The floor application reservations must leave, in blocks.
    pub fn app_floor(&self) -> i64 {
        self.app_floor
    }

    /// Free sections changed by `secs` (claim: -1, release after a checkpoint: +n). What
    /// the recovery reserve is owed is paid from released blocks before the rest reaches
    /// `H_g`, so no reservation can take them first.
    pub fn sections_changed(&self, secs: i64) {
        if secs <= 0 {
            return self.head_change(secs * self.bps);
        }
        let blocks = secs * self.bps;
        let paid = self.pay_recovery_reserve(blocks);
        if paid < blocks {
            self.headroom
                .global
                .fetch_add(blocks - paid, Ordering::AcqRel);
        }
        test_point("released");
        self.released.fetch_add(secs as u64, Ordering::AcqRel);
        // The target may have moved meanwhile (a mount step).
        self.settle_recovery_reserve();
    }

    /// Sections released so far.
    pub fn released_secs(&self) -> u64 {
        self.released.load(Ordering::Acquire)
    }

    /// The heads' `used` sum changed by `delta` blocks.
    pub fn used_changed(&self, delta: i64) {
        self.head_change(-delta);
    }

    /// `H_g += d` for a section claim or a head's `used` change, summed instead while this
    /// thread holds a `HeadMove` on this budget.
    fn head_change(&self, d: i64) {
        let id = self.id();
        let deferred = HEAD_MOVE.with(|m| {
            let (owner, sum) = m.get();
            if owner == id {
                m.set((owner, sum + d));
            }
            owner == id
        });
        if !deferred && d != 0 {
            self.headroom.global.fetch_add(d, Ordering::AcqRel);
        }
    }

    /// Apply this thread's section claims and `used` changes as one update of `H_g` when
    /// the guard drops (a head advance: a claim's `-bps` and the head's `+bps` apart would
    /// show others `H` a section short in between: a refusal or an overcommit near the
    /// floor that never was).
    pub fn head_move(&self) -> HeadMove<'_> {
        let prev = HEAD_MOVE.with(|m| m.replace((self.id(), 0)));
        HeadMove {
            budget: self,
            prev,
            _not_send: PhantomData,
        }
    }

    /// Reserve `n` blocks if `H - n >= floor`; the allowance becomes this thread's until the
    /// guard drops (then what is left returns). `app`: use the application floor, else 0.
    pub fn try_reserve(&self, n: u64, app: bool) -> Option<Allowance<'_>> {
        self.try_reserve_above(n, if app { self.app_floor } else { 0 }, false)
    }

    /// A collector's reservation for one victim. The first collector at work may use
    /// everything down to 0 (cleaning must always be able to start: that is what the
    /// application floor is for); each further one must leave the application floor, so
    /// that parallel collectors cannot take the last victim's worth between them. (Twice
    /// the floor, which left writers a victim's worth while several collectors worked, kept
    /// the second of two `scale` workers out of 78 of 80 rounds at 16 threads: 6-9 % less
    /// throughput while cleaning, docs/BENCHMARKS.md.)
    ///
    /// The first collector may also clean with the held recovery reserve when `H` cannot
    /// cover its victim and `no_chain()` says a power cut now has nothing to roll forward
    /// (no fsync chain since the last durable checkpoint): the reserve is only for
    /// roll-forward's head move, and without it a volume whose headroom fell below one
    /// victim with nothing owed could never clean again (every operation ENOSPC, for
    /// good: a `gc=scale` volume after a crash, found 2026-11-28, `tests/scale_full.rs`).
    /// An fsync that starts a chain meanwhile sees the loan (`reserve_lent`) and
    /// checkpoints instead, until released sections have paid it back.
    pub fn try_reserve_victim(
        &self,
        n: u64,
        no_chain: impl FnOnce() -> bool,
    ) -> Option<Allowance<'_>> {
        let others = self.victims.fetch_add(1, Ordering::AcqRel);
        let mut lent = false;
        let floor = if others != 0 {
            self.app_floor
        } else if self.recovery_reserve().1 > 0 {
            // Owed: nothing can be fsync'd now (module comment), the held part may clean.
            -self.recovery_held.load(Ordering::Acquire)
        } else if self.headroom_global() < n as i64 {
            // Counted before the look at the chains, and an fsync marks its chain before it
            // looks at this count (both SeqCst): one of the two sees the other.
            self.lending.fetch_add(1, Ordering::SeqCst);
            if no_chain() {
                lent = true;
                -self.recovery_held.load(Ordering::Acquire)
            } else {
                self.lending.fetch_sub(1, Ordering::SeqCst);
                0
            }
        } else {
            0
        };
        let mut a = self.try_reserve_above(n, floor, true);
        match &mut a {
            Some(a) => a.lent = lent,
            None => {
                self.victims.fetch_sub(1, Ordering::AcqRel);
                if lent {
                    self.lending.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
        a
    }

    /// The recovery reserve is lent to a collector now, or was used by one and not yet
    /// paid back (`H < 0`): an fsync must not start a chain to roll forward (it
    /// checkpoints instead). The caller has marked its chain (SeqCst) before this look.
    pub fn reserve_lent(&self) -> bool {
        self.lending.load(Ordering::SeqCst) > 0
            || (self.headroom_global() < 0 && self.headroom() < 0)
    }

    fn try_reserve_above(&self, n: u64, floor: i64, victim: bool) -> Option<Allowance<'_>> {
        let h = &self.headroom;
        let cached = !victim && floor == self.app_floor && h.take_cached(n);
        if !cached {
            // Exact: this slot's cache goes back first, and a refusal only after every
            // cache is back in `H_g` and no move is in flight (`Split::take_exact`), with
            // the recovery reserve settled in between when it is owed.
            let granted = h.take_exact(n, floor, || self.settle_if_owed());
            if !granted {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        let prev = ALLOWANCE.with(|a| a.replace((self.id(), n)));
        Some(Allowance {
            budget: self,
            prev,
            victim,
            lent: false,
            _not_send: PhantomData,
        })
    }

    /// `n` blocks of new debt (or a write that was not debt): from this thread's allowance
    /// when it has one, else straight from `H` (an overcommit if `H` goes below zero).
    pub fn charge(&self, n: u64) {
        let id = self.id();
        let rest = ALLOWANCE.with(|a| {
            let (owner, left) = a.get();
            if owner == id {
                let take = left.min(n);
                a.set((owner, left - take));
                n - take
            } else {
                n
            }
        });
        if rest == 0 || self.headroom.take_from_cache(rest) {
            return;
        }
        let before = self.headroom.add(-(rest as i64));
        if before < rest as i64 {
            // Below zero in `H_g`: the caches' blocks, and those on their way to or from
            // `H_g` (waited for), count before it is an overcommit. `H_g` once they are
            // all in it bounds what is below zero now.
            let cached = self.headroom.drain_quiet();
            let now = self.headroom.global();
            let below = (rest as i64 - before.max(0) - cached).min(-now);
            if below > 0 {
                self.overcommit_blocks
                    .fetch_add(below as u64, Ordering::Relaxed);
            }
        }
    }

    /// `n` blocks of debt dropped without being written (truncate, unlink), or a block
    /// written into a hole of a used section (SSR).
    pub fn refund(&self, n: u64) {
        self.headroom.give(n);
    }

    /// Give back what this thread's allowance on this budget holds beyond `keep` blocks (a
    /// collector whose remaining moves are known to need less than it reserved: the rest
    /// is headroom writers can reserve at once, not at the end of the victim). Returns the
    /// blocks given back.
    pub fn trim_allowance(&self, keep: u64) -> u64 {
        let id = self.id();
        let back = ALLOWANCE.with(|a| {
            let (owner, left) = a.get();
            if owner != id || left <= keep {
                return 0;
            }
            a.set((owner, keep));
            left - keep
        });
        if back > 0 {
            self.refund(back);
        }
        back
    }

    /// Blocks left in this thread's allowance on this budget (tests).
    pub fn allowance_left(&self) -> u64 {
        ALLOWANCE.with(|a| {
            let (owner, left) = a.get();
            if owner == self.id() {
                left
            } else {
                0
            }
        })
    }
}

/// Blocks of user space in use (`alloc_blocks`: the ENOSPC limit of `write`, `statfs`,
/// the checkpoint's valid-block count), with per-slot caches of blocks counted as in use
/// but not yet handed out (module comment). `count = exact + sum(caches)`.
pub struct UserBlocks {
    /// Blocks not in use (`limit - used`), split into `global` and the slot caches.
    avail: Split,
    limit: u64,
}

impl UserBlocks {
    /// `limit` blocks of user space, `used` of them in use.
    pub fn new(limit: u64, used: u64) -> Self {
        UserBlocks {
            avail: Split::new(limit as i64 - used as i64, 0),
            limit,
        }
    }

    /// Take `n` blocks; ENOSPC only when, with every cache drained, the limit is reached.
    pub fn reserve(&self, n: u64) -> Result<()> {
        if self.avail.take(n, 0) {
            Ok(())
        } else {
            Err(Error::NoSpace)
        }
    }

    /// `n` blocks are no longer in use.
    pub fn release(&self, n: u64) {
        self.avail.give(n);
    }

    /// Blocks in use, without limit check (roll-forward adopting blocks).
    pub fn add(&self, n: u64) {
        self.avail.global.fetch_sub(n as i64, Ordering::AcqRel);
    }

    /// Blocks in use now: exact when nothing reserves or releases at the same time (the
    /// checkpoint, which excludes every operation); otherwise within one refill.
    pub fn used(&self) -> u64 {
        (self.limit as i64 - self.avail.total()).max(0) as u64
    }

    /// Set the count (mount, mkfs: nothing else runs).
    pub fn set(&self, used: u64) {
        self.avail.cache.drain_all(|_| ());
        self.avail
            .global
            .store(self.limit as i64 - used as i64, Ordering::Release);
    }
}

/// A thread's reservation; what is left returns to the budget on drop. Guards of one
/// thread nest: they must drop in reverse order (every user holds one in a scope). Not
/// `Send`: the allowance lives in the thread-local of the thread that took it.
pub struct Allowance<'a> {
    budget: &'a SpaceBudget,
    prev: (usize, u64),
    /// A victim reservation (counted in `victims`).
    victim: bool,
    /// Allowed into the held recovery reserve (counted in `lending`).
    lent: bool,
    _not_send: PhantomData<*const ()>,
}

impl Drop for Allowance<'_> {
    fn drop(&mut self) {
        let (_, left) = ALLOWANCE.with(|a| a.replace(self.prev));
        if left > 0 {
            self.budget.refund(left);
        }
        if self.victim {
            self.budget.victims.fetch_sub(1, Ordering::AcqRel);
        }
        if self.lent {
            self.budget.lending.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// This thread's section claims and `used` changes on a budget, applied as one update when
/// it drops (`SpaceBudget::head_move`). Not `Send`, as `Allowance`.
pub struct HeadMove<'a> {
    budget: &'a SpaceBudget,
    prev: (usize, i64),
    _not_send: PhantomData<*const ()>,
}

impl Drop for HeadMove<'_> {
    fn drop(&mut self) {
        let (_, d) = HEAD_MOVE.with(|m| m.replace(self.prev));
        if d != 0 {
            self.budget.headroom.global.fetch_add(d, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_allowance_gives_back_its_surplus_at_once() {
        let b = SpaceBudget::new(512, 10, 0);
        {
            let _a = b.try_reserve_victim(1000, || false).expect("room");
            b.charge(100);
            assert_eq!(b.trim_allowance(600), 300, "900 left, 600 kept");
            assert_eq!(b.headroom(), 5120 - 1000 + 300);
            assert_eq!(b.allowance_left(), 600);
            assert_eq!(b.trim_allowance(700), 0, "never grows");
            b.charge(600);
            assert_eq!(b.headroom(), 5120 - 700, "charges stay inside what is kept");
        }
        assert_eq!(b.headroom(), 5120 - 700);
        assert_eq!(b.trim_allowance(0), 0, "no allowance held");
        assert_eq!(b.overcommit_blocks.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn allowance_draws_locally_and_returns_the_rest() {
        let b = SpaceBudget::new(512, 10, 0);
        assert_eq!(b.headroom(), 5120);
        {
            let _a = b.try_reserve(100, true).expect("room");
            assert_eq!(b.headroom(), 5020);
            b.charge(30);
            assert_eq!(
                b.headroom(),
                5020,
                "charges inside the allowance stay local"
            );
            assert_eq!(b.allowance_left(), 70);
        }
        assert_eq!(b.headroom(), 5090, "70 unused blocks came back");
        b.charge(5);
        assert_eq!(b.headroom(), 5085);
        assert_eq!(b.overcommit_blocks.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn application_floor_is_left_for_collectors() {
        let b = SpaceBudget::new(512, 3, 0);
        // 1536 blocks, floor 1024: an application may take 512, a collector the rest.
        assert!(b.try_reserve(513, true).is_none());
        let a = b.try_reserve(512, true).expect("above the floor");
        assert!(b.try_reserve(1, true).is_none());
        let g = b
            .try_reserve(1024, false)
            .expect("collectors may use the floor");
        assert!(b.try_reserve(1, false).is_none());
        drop(g);
        drop(a);
        assert_eq!(b.headroom(), 1536);
    }

    #[test]
    fn parallel_victims_leave_the_application_floor() {
        let b = SpaceBudget::new(512, 6, 0);
        // 3072 blocks; application floor 1024. The first collector may take everything,
        // a second one must leave 1024.
        let first = b
            .try_reserve_victim(1000, || false)
            .expect("first collector");
        assert!(
            b.try_reserve_victim(1049, || false).is_none(),
            "2072 left: below 1024 + 1049"
        );
        let second = b
            .try_reserve_victim(1048, || false)
            .expect("exactly 1024 left");
        assert!(
            b.try_reserve_victim(1, || false).is_none(),
            "a third leaves the floor too"
        );
        assert!(
            b.try_reserve(1, true).is_none(),
            "writers wait for the collectors' trims and freed sections"
        );
        drop(second);
        drop(first);
        let all = b
            .try_reserve_victim(3072, || false)
            .expect("alone again: down to 0");
        drop(all);
        assert_eq!(b.headroom(), 3072);
    }

    #[test]
    fn recovery_reserve_is_never_lent_and_owed_part_comes_first() {
        let b = SpaceBudget::new(512, 10, 0);
        b.set_recovery_reserve(4);
        assert_eq!(b.headroom(), 6 * 512);
        assert!(
            b.try_reserve(6 * 512 + 1, false).is_none(),
            "collectors see only what is left after the reserve"
        );
        assert_eq!(b.recovery_reserve(), (4 * 512, 0));
        // Mount: lend it, the head move claims 4 sections and leaves none to take back.
        b.lend_recovery_reserve();
        b.sections_changed(-10);
        b.set_recovery_reserve(4);
        assert_eq!(b.recovery_reserve(), (0, 4 * 512));
        assert_eq!(b.headroom(), 0);
        // While owed, operations get nothing and the first collector may clean with the
        // part held; released sections pay what is owed first.
        b.sections_changed(1);
        assert_eq!(b.recovery_reserve(), (512, 3 * 512));
        assert!(b.try_reserve(1, true).is_none());
        assert!(b.try_reserve(1, false).is_none());
        drop(
            b.try_reserve_victim(512, || false)
                .expect("collector cleans with the held part"),
        );
        assert!(b.try_reserve_victim(513, || false).is_none());
        b.sections_changed(4);
        assert_eq!(b.recovery_reserve(), (4 * 512, 0));
        assert_eq!(b.headroom(), 512);
    }

    #[test]
    fn held_reserve_is_lent_with_nothing_owed_only_without_a_chain() {
        // The reserve holds every free block and nothing is owed: headroom 0.
        let b = SpaceBudget::new(512, 4, 0);
        b.set_recovery_reserve(4);
        assert_eq!((b.headroom(), b.recovery_reserve()), (0, (4 * 512, 0)));
        assert!(b.try_reserve(1, true).is_none());
        // An fsync chain to roll forward: the reserve stays whole.
        assert!(b.try_reserve_victim(16, || false).is_none());
        assert!(!b.reserve_lent());
        // None: the first collector cleans with it, and an fsync sees the loan.
        let first = b.try_reserve_victim(16, || true).expect("lent");
        assert!(b.reserve_lent());
        assert!(
            b.try_reserve_victim(1, || true).is_none(),
            "a second collector leaves the application floor"
        );
        b.charge(8); // the moves
        drop(first);
        assert!(b.reserve_lent(), "used and not yet paid back: H < 0");
        assert_eq!(b.headroom(), -8);
        b.sections_changed(1); // the victim released
        assert!(!b.reserve_lent());
        assert_eq!(b.headroom(), 504);
        assert_eq!(b.overcommit_blocks.load(Ordering::Relaxed), 0);
    }

    fn rmw_count() -> u64 {
        GLOBAL_RMW.with(|c| c.get())
    }

    /// A budget far above the caches' floor (1000 sections of 512 blocks).
    fn roomy() -> SpaceBudget {
        SpaceBudget::new(512, 1000, 0)
    }

    #[test]
    fn slot_caches_keep_operations_off_the_global_counts() {
        let b = roomy();
        let start = b.headroom();
        let before = rmw_count();
        for _ in 0..1000 {
            let a = b.try_reserve(40, true).expect("room");
            b.charge(10);
            b.refund(1);
            drop(a);
        }
        let rmws = rmw_count() - before;
        // 9 blocks net per operation: one refill of 256 every ~28 operations. Without the
        // caches it is 3 per operation (reserve, refund, leftover).
        assert!(
            rmws <= 1000 / 10,
            "{rmws} global updates for 1000 operations"
        );
        assert_eq!(b.headroom(), start - 9 * 1000, "exact once quiet");
        assert_eq!(b.overcommit_blocks.load(Ordering::Relaxed), 0);

        let u = UserBlocks::new(1 << 20, 100);
        let before = rmw_count();
        for _ in 0..1000 {
            u.reserve(1).unwrap();
        }
        for _ in 0..400 {
            u.release(1);
        }
        let rmws = rmw_count() - before;
        assert!(rmws <= 1400 / 50, "{rmws} global updates for 1400 calls");
        assert_eq!(u.used(), 100 + 600);
    }

    #[test]
    fn a_refusal_drains_every_slot_cache_first() {
        let b = roomy();
        let u = UserBlocks::new(1 << 20, 0);
        // Four other threads leave blocks in their slots' caches.
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    drop(b.try_reserve(10, true).expect("room"));
                    u.reserve(1).unwrap();
                });
            }
        });
        assert!(b.headroom_global() < b.headroom(), "the caches hold blocks");
        assert!(u.avail.cache.total() > 0, "the caches hold blocks");
        // Everything down to the application floor, more than `H_g` alone has.
        let all = (b.headroom() - b.app_floor()) as u64;
        let a = b
            .try_reserve(all, true)
            .expect("not refused while caches hold it");
        assert!(b.try_reserve(1, true).is_none(), "the floor is kept");
        drop(a);
        let free = (1 << 20) - u.used();
        u.reserve(free).expect("not ENOSPC while caches hold it");
        assert!(matches!(u.reserve(1), Err(Error::NoSpace)));
        assert_eq!(u.used(), 1 << 20);
    }

    #[test]
    fn parallel_reservations_never_pass_the_limit_and_end_exact() {
        // Around the caches' floor, so that threads switch between cached and exact calls.
        let limit = 40_000u64;
        let u = UserBlocks::new(limit, 20_000);
        let b = SpaceBudget::new(512, 40, 0); // 20480 blocks, cache floor 18432
        let granted = AtomicU64::new(0);
        let charged = AtomicU64::new(0);
        std::thread::scope(|sc| {
            for t in 0..8u64 {
                let (u, b, granted, charged) = (&u, &b, &granted, &charged);
                sc.spawn(move || {
                    let mut x = t * 7919 + 1;
                    loop {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let n = 1 + (x >> 33) % 9;
                        if let Some(a) = b.try_reserve(n, true) {
                            b.charge(n / 2);
                            charged.fetch_add(n / 2, Ordering::Relaxed);
                            if x & 1 == 0 {
                                b.refund(1);
                                charged.fetch_sub(1, Ordering::Relaxed);
                            }
                            drop(a);
                        }
                        match u.reserve(n) {
                            Ok(()) => {
                                granted.fetch_add(n, Ordering::Relaxed);
                                if x & 2 == 0 {
                                    u.release(1);
                                    granted.fetch_sub(1, Ordering::Relaxed);
                                }
                            }
                            Err(_) => {
                                // Each other thread may give one block back meanwhile.
                                let used = u.used();
                                assert!(used + n + 8 > limit, "ENOSPC at {used} of {limit}");
                                break;
                            }
                        }
                    }
                });
            }
        });
        let g = granted.load(Ordering::Relaxed);
        assert!(20_000 + g <= limit, "over the limit: {g}");
        assert_eq!(u.used(), 20_000 + g, "exact once quiet");
        assert_eq!(
            b.headroom(),
            20480 - charged.load(Ordering::Relaxed) as i64,
            "exact once quiet"
        );
        assert_eq!(b.overcommit_blocks.load(Ordering::Relaxed), 0);
    }

    /// Sets this thread's test-point hook.
    fn hook(f: impl FnMut(&'static str) + 'static) {
        TEST_POINT.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    /// Forces one interleaving: `first` runs on a thread stopped at its first test point
    /// `at`; with it stopped there, `between` runs here and `second` on another thread;
    /// `first` goes on once `second` has finished or waits for a move in flight (`"busy"`).
    /// Returns what `second` returned.
    fn while_stopped<R: Send>(
        at: &'static str,
        first: impl FnOnce() + Send,
        between: impl FnOnce(),
        second: impl FnOnce() -> R + Send,
    ) -> R {
        use std::sync::mpsc::channel;
        std::thread::scope(|sc| {
            let (stopped_tx, stopped_rx) = channel();
            let (go_tx, go_rx) = channel::<()>();
            let t1 = sc.spawn(move || {
                let mut once = Some((stopped_tx, go_rx));
                hook(move |what| {
                    if what == at {
                        if let Some((stopped, go)) = once.take() {
                            stopped.send(()).unwrap();
                            let _ = go.recv();
                        }
                    }
                });
                first();
            });
            stopped_rx
                .recv()
                .unwrap_or_else(|_| panic!("the first thread never reached {at:?}"));
            between();
            let (event_tx, event_rx) = channel();
            let busy_tx = event_tx.clone();
            let t2 = sc.spawn(move || {
                let mut once = Some(busy_tx);
                hook(move |what| {
                    if what == "busy" {
                        if let Some(tx) = once.take() {
                            let _ = tx.send(());
                        }
                    }
                });
                let r = second();
                let _ = event_tx.send(());
                r
            });
            let _ = event_rx.recv();
            let _ = go_tx.send(());
            t1.join().unwrap();
            t2.join().unwrap()
        })
    }

    /// User blocks: 257 above the caches' floor, one refill leaves 256 of them in this
    /// thread's slot, then `global` is taken to 0 (the cache untouched).
    fn user_blocks_in_one_cache() -> UserBlocks {
        let u = UserBlocks::new(16384 + 257, 0);
        u.reserve(1).unwrap();
        u.add(16384);
        assert_eq!((u.avail.global(), u.avail.cache.total()), (0, 256));
        u
    }

    /// Finding 1 (ENOSPC with the blocks in the caches): a second writer refused while the
    /// first one's drain held every cached block between the slots and `global`.
    #[test]
    fn no_enospc_while_a_drain_has_the_cached_blocks_in_hand() {
        let u = user_blocks_in_one_cache();
        let second = while_stopped(
            "to_global",
            || u.reserve(1).expect("256 blocks free"),
            || (),
            || u.reserve(1),
        );
        assert!(second.is_ok(), "ENOSPC with 255 blocks free");
        assert_eq!(u.used(), 16384 + 3);
    }

    /// Finding 1 for the space budget: an application reservation refused (its caller
    /// would clean and checkpoint for nothing) while another's drain held the blocks.
    #[test]
    fn no_refusal_while_a_drain_has_the_cached_blocks_in_hand() {
        // 19200 blocks, cache floor 16640, application floor 128.
        let b = SpaceBudget::new(64, 300, 0);
        drop(b.try_reserve(1, true).unwrap()); // a refill: 257 in this slot's cache
        b.used_changed(b.headroom_global()); // `H_g` = 0, the cache untouched
        assert_eq!(b.headroom(), 257);
        let granted = while_stopped(
            "to_global",
            || drop(b.try_reserve(1, true).expect("H = 257")),
            || (),
            || b.try_reserve(1, true).map(drop).is_some(),
        );
        assert!(granted, "refused with H = 257, floor 128");
        assert_eq!(b.headroom(), 257);
        assert_eq!(b.overcommit_blocks.load(Ordering::Relaxed), 0);
    }

    /// Finding 1, the refill's window: blocks out of `global`, not yet in the cache.
    #[test]
    fn no_enospc_while_a_refill_has_the_blocks_in_hand() {
        let u = UserBlocks::new(16384 + 257, 0);
        let second = while_stopped(
            "refilled",
            || u.reserve(1).expect("room"),
            || u.reserve(16384).expect("exactly what `global` has"),
            || u.reserve(1),
        );
        assert!(second.is_ok(), "ENOSPC with 255 blocks free");
        assert_eq!(u.used(), 16384 + 2);
    }

    /// Finding 1, the overflow's window: blocks out of a full cache, not yet in `global`.
    #[test]
    fn no_enospc_while_an_overflow_has_the_blocks_in_hand() {
        let u = UserBlocks::new(16384 + 257 + 300, 300);
        let second = while_stopped(
            "to_global",
            || {
                u.reserve(1).expect("room"); // 256 cached, `global` at the cache floor
                u.release(300); // 556 > 512: 300 go back
            },
            || u.reserve(16384).expect("what `global` has"),
            || u.reserve(300),
        );
        assert!(second.is_ok(), "ENOSPC with 556 blocks free");
        assert_eq!(u.used(), 300 + 1 - 300 + 16384 + 300);
    }

    /// Finding 2: a charge without an allowance takes `H_g` below zero while a refused
    /// reservation's drain holds the cached blocks; it must not count an overcommit (`H`
    /// never went below 249).
    #[test]
    fn a_charge_counts_no_overcommit_while_a_drain_has_the_blocks() {
        let b = SpaceBudget::new(64, 300, 0);
        drop(b.try_reserve(1, true).unwrap());
        b.used_changed(b.headroom_global());
        assert_eq!(b.headroom(), 257);
        let over = while_stopped(
            "to_global",
            || drop(b.try_reserve(1, false).expect("H = 257")),
            || (),
            || {
                b.charge(8);
                b.overcommit_blocks.load(Ordering::Relaxed)
            },
        );
        assert_eq!(over, 0, "overcommit counted with H >= 249");
        assert_eq!(b.headroom(), 257 - 8);
    }

    /// A budget whose recovery reserve of 4 sections (2048 blocks) is owed in full, with
    /// `H` = 0 (mount after the head move used up the volume).
    fn reserve_owed() -> SpaceBudget {
        let b = SpaceBudget::new(512, 10, 0);
        b.set_recovery_reserve(4);
        b.lend_recovery_reserve();
        b.sections_changed(-10);
        b.set_recovery_reserve(4);
        assert_eq!((b.recovery_reserve(), b.headroom()), ((0, 2048), 0));
        b
    }

    /// Finding 3: released sections pay what the reserve is owed before any of their
    /// blocks can be reserved. (They reached `H_g` first and the reserve settled after: an
    /// application got a reservation with the reserve still owed.)
    #[test]
    fn released_sections_pay_the_owed_reserve_before_anyone_reserves() {
        let b = reserve_owed();
        let got = while_stopped(
            "released",
            || b.sections_changed(4),
            || (),
            || {
                b.try_reserve(1, true).map(|a| {
                    let owed = b.recovery_reserve().1;
                    drop(a);
                    owed
                })
            },
        );
        assert!(
            !matches!(got, Some(owed) if owed > 0),
            "an application got a reservation while {got:?} blocks of the reserve were owed"
        );
        assert_eq!((b.recovery_reserve(), b.headroom()), ((2048, 0), 0));
        b.sections_changed(2);
        assert_eq!((b.recovery_reserve(), b.headroom()), ((2048, 0), 1024));
    }

    /// Finding 3: two settles at once give back the reserve's surplus once.
    #[test]
    fn two_settles_give_back_the_surplus_once() {
        let b = SpaceBudget::new(512, 10, 0);
        b.set_recovery_reserve(4);
        assert_eq!(b.headroom(), 3072);
        while_stopped(
            "settle_give",
            || b.set_recovery_reserve(2),
            || (),
            || b.set_recovery_reserve(2),
        );
        assert_eq!((b.recovery_reserve(), b.headroom()), ((1024, 0), 4096));
    }

    /// Finding 3: two settles at once take what the reserve is owed once.
    #[test]
    fn two_settles_take_the_owed_reserve_once() {
        let b = SpaceBudget::new(512, 10, 0);
        while_stopped(
            "settle_take",
            || b.set_recovery_reserve(4),
            || (),
            || b.set_recovery_reserve(4),
        );
        assert_eq!((b.recovery_reserve(), b.headroom()), ((2048, 0), 3072));
    }

    /// Finding 4: inside a head move, a claim and the head's `used` change reach `H_g` as
    /// one update (seg.rs `advance`; its own test is there).
    #[test]
    fn a_head_move_applies_its_net_change_once() {
        let b = SpaceBudget::new(512, 10, 0);
        {
            let _m = b.head_move();
            b.sections_changed(-1);
            assert_eq!(b.headroom(), 5120, "the claim alone is not seen");
            b.used_changed(-512);
        }
        assert_eq!(b.headroom(), 5120);
        b.sections_changed(-1);
        assert_eq!(b.headroom(), 4608, "outside a head move, at once");
    }

    /// Finding 5: `Allowance` and `HeadMove` are not `Send` (what they stand for is in the
    /// thread-local of the thread that took them). Does not compile if either becomes
    /// `Send` (both impls would apply).
    #[test]
    fn guards_are_not_send() {
        trait AmbiguousIfSend<A> {
            fn check() {}
        }
        impl<T: ?Sized> AmbiguousIfSend<()> for T {}
        impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}
        <Allowance<'static> as AmbiguousIfSend<_>>::check();
        <HeadMove<'static> as AmbiguousIfSend<_>>::check();
    }

    #[test]
    fn overcommit_is_counted() {
        let b = SpaceBudget::new(512, 1, 0);
        b.charge(600);
        assert_eq!(b.overcommit_blocks.load(Ordering::Relaxed), 88);
    }
}
