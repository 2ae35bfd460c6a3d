//! `FsInner`: the shared state of a mounted volume, and the node-tree layer (mapping a file
//! block to its address through inode, direct, indirect and double-indirect nodes; creating,
//! writing and freeing nodes).
//!
//! Lock order: see `cell`. Everything here that takes `&mut InodeState` runs with that
//! inode's cell locked by the caller.

use crate::cell::{CellTable, InodeCell, InodeState, NodeBuf, NodeGuard};
use crate::config::{MlogMap, MountOptions};
use crate::error::{Error, Result};
use crate::lock::OpLock;
use crate::nat::NatTable;
use crate::seg::{head_index, SegManager};
use crate::stats::Stats;
use flashlog_dev::BlockDevice;
use flashlog_format::codec::{zero_block, Block};
use flashlog_format::cp::{LogKind, Temp};
use flashlog_format::meta::Summary;
use flashlog_format::node::{self, NodeKind};
use flashlog_format::sb::Superblock;
use flashlog_format::{BlkAddr, Ino, Nid, BLOCK_SIZE, NEW_ADDR, NULL_ADDR};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

thread_local! {
    /// Inodes the current operation of this thread unlinked while cells were locked
    /// (`defer_free`, victim protector only). Per thread, not per volume: an operation
    /// defers and frees on its own thread, within one op-lock hold, so the list is empty
    /// between operations and no other thread ever touches it (it was one mutex per
    /// volume that every operation of `gc=scale` took: 16 writers on 16 cores ran 20x
    /// slower than on 8).
    /// Each entry names its mount (`FsInner::mount_id`): an operation that panicked between its
    /// unlink and `free_deferred` must not leave an inode for another volume's next
    /// operation on this thread to free.
    static DEFERRED_FREE: std::cell::RefCell<Vec<(u64, Ino)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Checkpoint bookkeeping: which copy of each NAT/SIT/SSA block is current.
pub struct CpState {
    pub nat_bm: Vec<u8>,
    pub sit_bm: Vec<u8>,
    pub ssa_bm: Vec<u8>,
    pub elapsed_base: u64,
}

pub struct FsInner {
    pub dev: Arc<dyn BlockDevice>,
    pub sb: Superblock,
    pub opts: MountOptions,
    pub oplock: OpLock,
    pub rename_lock: Mutex<()>,
    pub nat: NatTable,
    pub seg: SegManager,
    pub cells: CellTable,
    pub cp: Mutex<CpState>,
    /// Version of the last checkpoint's snapshot: the pack that the state since is
    /// written after (the interval's epoch). Equal to `cp_durable` except while that
    /// checkpoint's tail is in flight (`gc=none`, `checkpoint.rs` "The tail").
    pub cp_version: AtomicU64,
    /// Version of the last durable checkpoint pack.
    pub cp_durable: AtomicU64,
    /// One past the version of the checkpoint that the newest fsync chain of this mount
    /// follows (0: none): while it is above `cp_durable`, a power cut has something to roll
    /// forward, and the recovery reserve may not be lent to a collector
    /// (`gc::reserve_victim`, `space.rs` "Recovery reserve").
    pub fsync_chain_after: AtomicU64,
    /// `cp_durable` moved, or the mount was poisoned (waiters: `wait_durable`). The lock
    /// is a leaf.
    pub tail_lock: Mutex<()>,
    pub tail_done: parking_lot::Condvar,
    /// The one global node-version counter (issue 12 item 3, Max 4.4): the next node write
    /// takes `fetch_add(1)` and stamps it into its footer. High half: the current
    /// checkpoint's version tag; low half: the write sequence under that checkpoint. One
    /// atomic holds both, so a node's tag and sequence are always from the same checkpoint
    /// whatever runs concurrently; the checkpoint restarts it (`node::first_node_version`)
    /// under the exclusive op lock, and roll-forward raises it past every sequence it found
    /// on the chains. Roll-forward merges every mlog's chain by this version.
    pub node_version: AtomicU64,
    /// Test knob: added to the inode number before it picks its mlog (`mlog_of`), so a
    /// test can move a file to another mlog between operations and spread its nodes over
    /// several chains (what a per-CPU mapping does). 0 outside tests.
    #[doc(hidden)]
    pub mlog_shift: AtomicU32,
    /// Inodes unlinked while open (freed at their last close, or by the next mount); the
    /// checkpoint records them in its pack, which has room for `sb.geo.orphan_slots`.
    /// Unlinks add theirs through `admit_orphan`, which keeps the set within
    /// `orphan_limit`, so a checkpoint never outgrows its pack.
    pub orphans: Mutex<BTreeSet<Ino>>,
    /// Unlinks refused because the orphan set was full (ENOSPC); the first is logged.
    pub orphans_refused: AtomicU64,
    /// Data + node blocks allocated or reserved (F2FS valid_block_count).
    pub alloc_blocks: crate::space::UserBlocks,
    /// Per-operation counts, sharded (`stats::Counter`): exact at checkpoints, which
    /// exclude every operation; soft limits read them with `approx`.
    pub valid_nodes: crate::stats::Counter,
    pub valid_inodes: crate::stats::Counter,
    pub dirty_pages: crate::stats::Counter,
    pub dirty_nodes: crate::stats::Counter,
    pub poison: Mutex<Option<String>>,
    pub poisoned: AtomicBool,
    /// Held by the checkpoint pre-pass (`writeback_before_checkpoint`) while it runs: one
    /// at a time. Taken with no lock held or under `gc_lock`; held while the pass takes the
    /// op lock (shared) and cells, never while taking `gc_lock`.
    pub prepass: Mutex<()>,
    /// `gc=device`: held by the thread running the discard trigger's checkpoint
    /// (`device_discard_due`; others find it held and go on). Taken with no lock held,
    /// before the pre-pass and `gc_lock`.
    pub discard_checkpoint: Mutex<()>,
    /// Held by the one thread that relieves a crossed dirty-node or inode-cache cap
    /// (`Fs::relieve_caps`); the others that find a cap crossed help its pre-pass
    /// (`prepass_round`) and go on, or wait here (helping) when it is crossed twice over.
    /// Taken with no lock held (after the operation, in `balance`), before the cleaning
    /// lock (the relief's `ensure_space`), the pre-pass lock and the op lock.
    pub cap_relief: Mutex<()>,
    /// Notified when a flusher visit maps its copies (`writeback_pages_released`); fsync
    /// waits here for a visit to its file (`wait_for_writeback`). Taken with the waiter's
    /// cell held, released by the wait; the flusher takes it with no cell held (leaf).
    pub wb_done_lock: Mutex<()>,
    /// fsyncs waiting on `wb_done` (a visit ending notifies only when there is one).
    pub wb_waiters: AtomicU32,
    pub wb_done: parking_lot::Condvar,
    /// The cells a cap relief's pre-pass is writing, while it runs: operations that
    /// find the cap crossed take cells from it too (`help_prepass`). A leaf: held only to
    /// publish, clear or clone the round.
    pub prepass_round: Mutex<Option<Arc<crate::checkpoint::PrepassRound>>>,
    /// A number no other mount of this process has (thread-local state keys on it).
    pub mount_id: u64,
    pub stats: Stats,
    /// Where the next victim search starts (shared, updated without a lock).
    pub gc_cursor: AtomicU64,
    /// One foreground cleaning at a time; others wait for its result.
    pub gc_lock: Mutex<()>,
    /// The cleaning policy.
    pub collector: Box<dyn crate::gc::Collector>,
    /// Nanoseconds since mount of the last operation (idle detection for background GC).
    pub last_op_ns: AtomicU64,
    /// `last_op_ns` as of the last checkpoint.
    pub last_cp_ns: AtomicU64,
    /// The background cleaning thread's sleep (`background_gc`); only that thread uses it.
    pub gc_sleep: Mutex<crate::gc::BgSleep>,
    /// A background pass marked pages dirty since the last timer checkpoint: the timer
    /// checkpoint runs although no operation came (it writes them, and frees the victims).
    pub gc_bg_dirtied: std::sync::atomic::AtomicBool,
    /// Victim protector (ScaleLFS SVP); used by I/O paths when `svp_on`.
    pub svp: crate::svp::Svp,
    pub svp_on: bool,
    /// Space and dirty limits, computed once in `build` (`compute_limits`).
    pub limits: crate::gc::Limits,
    /// Mount time.
    pub epoch: std::time::Instant,
    /// Mount time on `mono_ns`'s clock, the origin of `last_op_ns` (`since_mount_ns`).
    pub epoch_ns: u64,
    /// Test hook called at named points of concurrent code (`Fs::set_test_hook`); tests use
    /// it to force an interleaving. None outside tests: one uncontended read per use.
    pub test_hook: parking_lot::RwLock<Option<TestHook>>,
}

/// See `FsInner::test_hook`.
pub type TestHook = Arc<dyn Fn(&'static str) + Send + Sync>;

/// Checkpoint debt of one dirty page in blocks: its own block, and the direct node (or
/// inode) that writing it will dirty. Charged whole so that writeback never needs space
/// nobody reserved, whoever writes the page back (checkpoint, writeback, fsync, collector).
pub const PAGE_DEBT: u64 = 2;

/// Orphan slots of the pack kept back from unlinks (`FsInner::orphan_limit`) for orphans
/// recorded without asking: a deferred free (`gc=scale`'s victim protector) that finds its
/// inode opened again by number, frees that failed on a device error. Neither happens
/// through FUSE, where the adapter pins before every unlink, so each orphan is admitted;
/// a caller of the core API that makes more than 64 such loses the guarantee that the
/// pack holds the set (the checkpoint then fails and poisons).
pub const ORPHAN_MARGIN: usize = 64;

/// Which log a node goes to (F2FS paper Table 1).
pub fn node_temp(is_dir: bool, kind: NodeKind) -> Temp {
    match kind {
        NodeKind::Indirect | NodeKind::Xattr => Temp::Cold,
        _ if is_dir => Temp::Hot,
        _ => Temp::Warm,
    }
}

impl FsInner {
    /// Call the test hook, if one is set, at point `what`.
    pub fn test_point(&self, what: &'static str) {
        let h = self.test_hook.read().clone();
        if let Some(h) = h {
            h(what);
        }
    }

    pub fn geo(&self) -> &flashlog_format::sb::Geometry {
        &self.sb.geo
    }

    /// The mlog of inode `ino` under `mlog=ino`.
    /// Node writes since the last checkpoint: the sequence half of the next node version
    /// (`first_node_version` starts it at 1).
    pub fn nodes_since_checkpoint(&self) -> u32 {
        (self.node_version.load(Ordering::Relaxed) as u32).saturating_sub(1)
    }

    pub fn mlog_of(&self, ino: Ino) -> u16 {
        let shift = self.mlog_shift.load(Ordering::Relaxed);
        (ino.wrapping_add(shift) % self.sb.geo.mlogs) as u16
    }

    /// The calling thread's mlog under `mlog=thread` (its thread slot, as Max maps cores).
    pub fn thread_mlog(&self) -> u16 {
        (crate::lock::thread_slot() % self.sb.geo.mlogs as usize) as u16
    }

    /// The data head of temperature `temp` for a block of inode `ino`. Data may go to any
    /// mlog (nodes point at it; roll-forward never walks data): under `mlog=thread` the
    /// writing thread's own.
    pub fn data_head(&self, ino: Ino, temp: Temp) -> usize {
        let mlog = match self.opts.mlog_map {
            MlogMap::Ino => self.mlog_of(ino),
            MlogMap::Thread => self.thread_mlog(),
        };
        head_index(mlog, LogKind::Data, temp)
    }

    /// The mlog the locked inode's nodes go to. Under `mlog=thread` the first node write
    /// of a checkpoint interval picks the writing thread's mlog and every later one in the
    /// interval keeps it: roll-forward walks the mlogs' chains one after the other, so an
    /// inode whose nodes landed on two chains could get an older node back. The
    /// checkpoint (which excludes every operation) starts a new interval.
    pub fn node_mlog(&self, st: &mut InodeState) -> u16 {
        match self.opts.mlog_map {
            MlogMap::Ino => self.mlog_of(st.ino),
            MlogMap::Thread => {
                let epoch = self.cp_version.load(Ordering::Acquire);
                match st.mlog {
                    Some((e, m)) if e == epoch => m,
                    _ => {
                        let m = self.thread_mlog();
                        st.mlog = Some((epoch, m));
                        m
                    }
                }
            }
        }
    }

    /// The node head of temperature `temp` for the locked inode (`node_mlog`).
    pub fn node_head(&self, st: &mut InodeState, temp: Temp) -> usize {
        head_index(self.node_mlog(st), LogKind::Node, temp)
    }

    /// Refuse to change anything on a read-only or poisoned mount.
    #[inline]
    pub fn check_writable(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(self.poisoned_error());
        }
        if self.opts.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    #[cold]
    fn poisoned_error(&self) -> Error {
        Error::Poisoned(self.poison.lock().clone().unwrap_or_default())
    }

    /// Turn the mount read-only after a failure whose effect on disk is unknown.
    pub fn poison_with(&self, why: String) {
        let mut p = self.poison.lock();
        if p.is_none() {
            tracing::error!("poisoning the mount: {why}");
            *p = Some(why);
        }
        self.poisoned.store(true, Ordering::Release);
        // Whoever waits for a checkpoint's tail learns it will not come.
        let _g = self.tail_lock.lock();
        self.tail_done.notify_all();
    }

    /// Run `f`; poison the mount if it failed with a device error (a write of unknown
    /// outcome) or found corruption while changing state.
    #[inline]
    pub fn guard<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.guard_err(e);
        }
        r
    }

    #[cold]
    fn guard_err(&self, e: &Error) {
        match e {
            // The cause, not its "poisoned by an earlier failure" wrapping again.
            Error::Poisoned(why) => self.poison_with(why.clone()),
            Error::Device(_) => self.poison_with(e.to_string()),
            _ => {}
        }
    }

    /// Reserve `n` blocks of user space.
    pub fn reserve_blocks(&self, n: u64) -> Result<()> {
        self.alloc_blocks.reserve(n)
    }
    pub fn release_blocks(&self, n: u64) {
        self.alloc_blocks.release(n);
    }

    /// Read a block the file system wrote: from a log head's buffer if still there.
    pub fn read_block(&self, addr: BlkAddr, out: &mut Block) -> Result<()> {
        if addr == NULL_ADDR || addr == NEW_ADDR || addr >= self.sb.geo.block_count {
            return Err(Error::Corrupt(format!(
                "read of invalid block address {addr:#x}"
            )));
        }
        if self.seg.read_pending(addr, out) {
            return Ok(());
        }
        self.dev.read(addr, out)?;
        self.stats.dev_read_blocks.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Read node `nid` of inode `ino` from disk and check it.
    pub fn read_node(&self, nid: Nid, ino: Ino) -> Result<Box<Block>> {
        let addr = self.nat.addr(nid);
        if addr == NULL_ADDR {
            return Err(Error::Corrupt(format!(
                "node {nid} of inode {ino} has no address"
            )));
        }
        let mut b = zero_block();
        self.read_block(addr, &mut b)?;
        let f = node::check_node(&b, Some(nid))
            .map_err(|e| Error::Corrupt(format!("node {nid} at {addr}: {e}")))?;
        if f.ino != ino {
            return Err(Error::Corrupt(format!(
                "node {nid} belongs to inode {} not {ino}",
                f.ino
            )));
        }
        Ok(b)
    }

    /// Node `nid` of the locked file (loaded from disk if needed), locked.
    pub fn node_of<'a>(&self, st: &'a mut InodeState, nid: Nid) -> Result<NodeGuard<'a>> {
        self.load_node(st, nid)
    }

    fn load_node<'a>(&self, st: &'a mut InodeState, nid: Nid) -> Result<NodeGuard<'a>> {
        self.ensure_node(st, nid)?;
        Ok(st.nodes.lock(nid).expect("just inserted"))
    }

    /// Node `nid` of the locked file in its cache (read from disk if needed), not locked:
    /// for a caller that only needs it there (a lock taken for nothing costs every page a
    /// write-back maps).
    fn ensure_node(&self, st: &mut InodeState, nid: Nid) -> Result<()> {
        if !st.nodes.contains(nid) {
            let blk = self.read_node(nid, st.ino)?;
            st.nodes.insert(nid, blk, false);
        }
        Ok(())
    }

    pub fn mark_dirty_node(&self, st: &mut InodeState, nid: Nid) {
        if let Some(mut n) = st.nodes.lock(nid) {
            self.dirty_node(&mut n);
        }
    }

    /// Mark a locked node dirty, charging it to the space budget once (checkpoint debt:
    /// the block it will be written to).
    pub fn dirty_node(&self, n: &mut NodeBuf) {
        if !n.dirty {
            n.dirty = true;
            self.dirty_nodes.fetch_add(1, Ordering::Relaxed);
            self.seg.space.charge(1);
        }
    }

    /// Mark the inode block dirty, charging it to the space budget once (checkpoint debt).
    pub fn dirty_inode(&self, st: &mut InodeState) {
        st.dirty = true;
        if !st.inode_charged {
            st.inode_charged = true;
            self.seg.space.charge(1);
        }
    }

    /// A page of a locked file became dirty: `PAGE_DEBT` blocks of checkpoint debt, the
    /// page's own block and the direct node its writeback will dirty.
    pub fn charge_dirty_page(&self) {
        self.dirty_pages.fetch_add(1, Ordering::Relaxed);
        self.seg.space.charge(PAGE_DEBT);
    }

    /// A dirty page was dropped without being written: its debt goes back, but for the
    /// block of a flusher's copy in flight when the page was under write-back (`wb`,
    /// `Page::wb`).
    pub fn drop_dirty_page(&self, wb: bool) {
        self.dirty_pages.fetch_sub(1, Ordering::Relaxed);
        self.seg.space.refund(PAGE_DEBT - u64::from(wb));
    }

    /// A dirty page was just written (its block used the page's own debt): the part held
    /// for its direct node goes back, before the caller's `dnode_set` charges the node if
    /// that makes it dirty; but for the block of a flusher's copy in flight when the page
    /// was under write-back (`wb`, `Page::wb`).
    fn page_written(&self, wb: bool) {
        self.dirty_pages.fetch_sub(1, Ordering::Relaxed);
        self.seg.space.refund(PAGE_DEBT - 1 - u64::from(wb));
    }

    /// The direct node (nid, or the inode's own nid for blocks held by the inode) and slot
    /// that map file block `index`. With `create`, missing nodes are allocated: the user
    /// blocks of all of them are reserved at once, at the first missing level (every level
    /// below it is missing too), so a refusal (ENOSPC) leaves no node made for a write that
    /// then fails (found in review, 2026-11-28: a write refused for its data block kept
    /// the direct and indirect nodes it had made, their blocks taken until a truncate).
    pub fn locate(
        &self,
        st: &mut InodeState,
        index: u64,
        create: bool,
    ) -> Result<Option<(Nid, usize)>> {
        // Not `ok_or(Error::TooBig)?`: that builds and drops an `Error` on every call.
        let Some(p) = node::node_path(index) else {
            return Err(Error::TooBig);
        };
        if p.depth == 0 {
            return Ok(Some((st.ino, p.slots[0])));
        }
        let kind_at = |level: usize| {
            if level == p.depth {
                NodeKind::Direct
            } else {
                NodeKind::Indirect
            }
        };
        // Blocks reserved for the nodes still to be made.
        let mut prepaid = 0u64;
        let mut nid = node::inode_nid(&st.node, p.slots[0]);
        if nid == 0 {
            if !create {
                return Ok(None);
            }
            prepaid = p.depth as u64;
            self.reserve_blocks(prepaid)?;
            nid = self.new_node_prepaid(st, kind_at(1), p.node_ofs[1], &mut prepaid)?;
            node::set_inode_nid(&mut st.node, p.slots[0], nid);
            self.dirty_inode(st);
        }
        for d in 1..p.depth {
            let parent = nid;
            let child = node::indirect_nid(&self.load_node(st, parent)?.blk, p.slots[d]);
            if child != 0 && !self.nat.valid(child) {
                self.release_blocks(prepaid);
                return Err(Error::Corrupt(format!(
                    "node {parent} of inode {} points at nid {child}",
                    st.ino
                )));
            }
            nid = if child != 0 {
                child
            } else {
                if !create {
                    return Ok(None);
                }
                if prepaid == 0 {
                    prepaid = (p.depth - d) as u64;
                    self.reserve_blocks(prepaid)?;
                }
                let c =
                    self.new_node_prepaid(st, kind_at(d + 1), p.node_ofs[d + 1], &mut prepaid)?;
                let mut pn = st.nodes.lock(parent).expect("loaded");
                node::set_indirect_nid(&mut pn.blk, p.slots[d], c);
                self.dirty_node(&mut pn);
                c
            };
        }
        debug_assert_eq!(prepaid, 0, "every reserved node block used");
        self.ensure_node(st, nid)?;
        Ok(Some((nid, p.slots[p.depth])))
    }

    /// `new_node` for a block `locate` reserved: takes one of `prepaid`; on failure gives
    /// back all that are left.
    fn new_node_prepaid(
        &self,
        st: &mut InodeState,
        kind: NodeKind,
        ofs: u32,
        prepaid: &mut u64,
    ) -> Result<Nid> {
        let nid = match self.nat.alloc() {
            Ok(n) => n,
            Err(e) => {
                self.release_blocks(std::mem::take(prepaid));
                return Err(e);
            }
        };
        *prepaid -= 1;
        self.nat.set(nid, st.ino, NULL_ADDR);
        self.valid_nodes.fetch_add(1, Ordering::Relaxed);
        st.nodes
            .insert(nid, node::new_node(kind, nid, st.ino, ofs), false);
        self.mark_dirty_node(st, nid);
        Ok(nid)
    }

    /// Address in slot `slot` of direct node `nid` (the inode if `nid == st.ino`).
    pub fn dnode_get(&self, st: &InodeState, nid: Nid, slot: usize) -> BlkAddr {
        if nid == st.ino {
            node::inode_addr(&st.node, slot)
        } else {
            st.nodes
                .lock(nid)
                .map_or(NULL_ADDR, |n| node::dnode_addr(&n.blk, slot))
        }
    }

    pub fn dnode_set(&self, st: &mut InodeState, nid: Nid, slot: usize, addr: BlkAddr) {
        self.dnode_replace(st, nid, slot, addr);
    }

    /// Set slot `slot` of direct node `nid` (the inode if `nid == st.ino`) to `addr` and
    /// return what it held, under one acquisition of the node's lock: a `scale` collector
    /// may remap the slot between a separate read and write (`scale::commit_dnode_run`
    /// holds the node's lock, not the cell), and the address read would then be its
    /// victim, invalidated twice, and its copy left mapped by nothing.
    pub fn dnode_replace(
        &self,
        st: &mut InodeState,
        nid: Nid,
        slot: usize,
        addr: BlkAddr,
    ) -> BlkAddr {
        if nid == st.ino {
            let old = node::inode_addr(&st.node, slot);
            node::set_inode_addr(&mut st.node, slot, addr);
            self.dirty_inode(st);
            old
        } else if let Some(mut n) = st.nodes.lock(nid) {
            let old = node::dnode_addr(&n.blk, slot);
            node::set_dnode_addr(&mut n.blk, slot, addr);
            self.dirty_node(&mut n);
            old
        } else {
            NULL_ADDR
        }
    }

    /// Address of file block `index` (NULL_ADDR for a hole).
    pub fn block_addr(&self, st: &mut InodeState, index: u64) -> Result<BlkAddr> {
        match self.locate(st, index, false)? {
            Some((nid, slot)) => Ok(self.dnode_get(st, nid, slot)),
            None => Ok(NULL_ADDR),
        }
    }

    /// Drop one reference to a data block address (a hole is nothing).
    pub fn free_data_addr(&self, st: &mut InodeState, addr: BlkAddr) {
        if addr == NULL_ADDR {
            return;
        }
        if addr != NEW_ADDR {
            self.seg.invalidate(addr);
        }
        self.release_blocks(1);
        st.hdr.blocks = st.hdr.blocks.saturating_sub(1);
        self.dirty_inode(st);
    }

    /// Free a node (not the inode): its block, its nid, its cache entry.
    pub fn free_node(&self, st: &mut InodeState, nid: Nid) {
        let addr = self.nat.addr(nid);
        if addr != NULL_ADDR {
            self.seg.invalidate(addr);
        }
        if st.nodes.remove(nid) == Some(true) {
            self.dirty_nodes.fetch_sub(1, Ordering::Relaxed);
            self.seg.space.refund(1);
        }
        self.nat.free(nid);
        self.valid_nodes.fetch_sub(1, Ordering::Relaxed);
        self.release_blocks(1);
    }

    /// Free every data block at file index >= `first` and every node left empty.
    pub fn free_blocks_from(&self, st: &mut InodeState, first: u64) -> Result<()> {
        use flashlog_format::node::{
            ADDRS_PER_BLOCK as A, ADDRS_PER_INODE as I, NIDS_PER_BLOCK as N,
        };
        let (a, n, i) = (A as u64, N as u64, I as u64);
        if st.hdr.flags & node::iflag::INLINE_DATA == 0
            && st.hdr.flags & node::iflag::INLINE_DENTRY == 0
        {
            for slot in (first.min(i) as usize)..I {
                let addr = node::inode_addr(&st.node, slot);
                if addr != NULL_ADDR {
                    self.free_data_addr(st, addr);
                    node::set_inode_addr(&mut st.node, slot, NULL_ADDR);
                    self.dirty_inode(st);
                }
            }
        }
        let spans = [
            (i, a, 1usize),
            (i + a, a, 1),
            (i + 2 * a, n * a, 2),
            (i + 2 * a + n * a, n * a, 2),
            (i + 2 * a + 2 * n * a, n * n * a, 3),
        ];
        for (k, &(start, span, level)) in spans.iter().enumerate() {
            let nid = node::inode_nid(&st.node, k);
            if nid == 0 || start + span <= first {
                continue;
            }
            if self.free_subtree(st, nid, level, start, first, 0)? {
                node::set_inode_nid(&mut st.node, k, 0);
                self.dirty_inode(st);
            }
        }
        Ok(())
    }

    /// Free what subtree `nid` (at `level`: 1 direct, 2 indirect, 3 double indirect; first
    /// file block `start`) maps at or after `first`. Returns true if the node itself was
    /// freed. `depth_guard` bounds recursion on corrupt trees.
    fn free_subtree(
        &self,
        st: &mut InodeState,
        nid: Nid,
        level: usize,
        start: u64,
        first: u64,
        depth_guard: usize,
    ) -> Result<bool> {
        use flashlog_format::node::{ADDRS_PER_BLOCK as A, NIDS_PER_BLOCK as N};
        if depth_guard > 3 || !self.nat.valid(nid) {
            return Err(Error::Corrupt(format!(
                "node tree of inode {} is malformed at nid {nid}",
                st.ino
            )));
        }
        self.ensure_node(st, nid)?;
        if level == 1 {
            let from = first.saturating_sub(start).min(A as u64) as usize;
            // Emptied under one hold of the node's lock (a collector remaps slots under
            // it), freed after it.
            let mut freed = Vec::new();
            {
                let mut n = st.nodes.lock(nid).expect("loaded");
                for slot in from..A {
                    let addr = node::dnode_addr(&n.blk, slot);
                    if addr != NULL_ADDR {
                        node::set_dnode_addr(&mut n.blk, slot, NULL_ADDR);
                        freed.push(addr);
                    }
                }
                if !freed.is_empty() {
                    self.dirty_node(&mut n);
                }
            }
            for addr in freed {
                self.free_data_addr(st, addr);
            }
        } else {
            let span = A as u64 * (N as u64).pow(level as u32 - 2);
            for slot in 0..N {
                let child_start = start + slot as u64 * span;
                if child_start + span <= first {
                    continue;
                }
                let child = st
                    .nodes
                    .lock(nid)
                    .map_or(0, |n| node::indirect_nid(&n.blk, slot));
                if child == 0 {
                    continue;
                }
                if self.free_subtree(st, child, level - 1, child_start, first, depth_guard + 1)? {
                    // A deeper level may have trimmed the cache: load the node again.
                    let mut n = self.load_node(st, nid)?;
                    node::set_indirect_nid(&mut n.blk, slot, 0);
                    self.dirty_node(&mut n);
                }
            }
        }
        if first <= start {
            self.free_node(st, nid);
            return Ok(true);
        }
        Ok(false)
    }

    /// Write node `nid` of `st` (or the inode when `nid == st.ino`) to head `hi`, with footer
    /// flags `flags` (fsync / dentry marks).
    pub fn write_node(&self, st: &mut InodeState, nid: Nid, hi: usize, flags: u32) -> Result<()> {
        // Whatever base head the caller named, the node goes to the inode's mlog of this
        // interval (`node_mlog`), same kind and temperature: one chain per inode.
        let hi = if hi < self.sb.geo.log_heads as usize {
            self.node_mlog(st) as usize * 6 + hi % 6
        } else {
            hi
        };
        // One fetch_add per node write; the cell lock orders the writes of one file, so its
        // nodes' versions follow the order they were written in, whichever chain each is on.
        let node_version = self.node_version.fetch_add(1, Ordering::AcqRel);
        if node_version as u32 >= u32::MAX - (1 << 16) {
            // Unreachable in practice (fsync checkpoints at `SEQ_CHECKPOINT_AT`, half the
            // range): refuse rather than carry into the checkpoint tag.
            return Err(Error::Corrupt(
                "node version sequence exhausted without a checkpoint".into(),
            ));
        }
        let version = self.nat.version(nid);
        let ino = st.ino;
        let sum = Summary {
            nid,
            ofs: 0,
            version,
        };
        let seal = |_: BlkAddr, next: BlkAddr, out: &mut Block| {
            node::seal_node(out, node_version, next, flags)
        };
        let was_dirty;
        let new_addr = if nid == ino {
            was_dirty = st.dirty;
            st.hdr.write(&mut st.node);
            self.seg.append_copy(hi, sum, &st.node, seal)?
        } else {
            // Read, copied and made clean under one hold of the node's lock: a collector's
            // remap is in the copy or dirties the node again after it, never lost between.
            let mut n = st
                .nodes
                .lock(nid)
                .ok_or_else(|| Error::Corrupt(format!("node {nid} not cached")))?;
            was_dirty = n.dirty;
            let a = self.seg.append_copy(hi, sum, &n.blk, seal)?;
            n.dirty = false;
            a
        };
        let old = self.nat.addr(nid);
        self.nat.set(nid, ino, new_addr);
        if old != NULL_ADDR {
            self.seg.invalidate(old);
        }
        // Space: a dirty node (a charged inode) was debt, and writing it uses what the debt
        // held; anything else (an inode written by fsync although clean, one marked dirty
        // outside `dirty_inode`) is charged now.
        let was_debt = if nid == ino {
            std::mem::take(&mut st.inode_charged)
        } else {
            was_dirty
        };
        if !was_debt {
            self.seg.space.charge(1);
        }
        if nid == ino {
            st.dirty = false;
        }
        if was_dirty && nid != ino {
            self.dirty_nodes.fetch_sub(1, Ordering::Relaxed);
        }
        self.stats
            .node_blocks_written
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Write back every dirty page of `st`. Returns the number of blocks written.
    pub fn writeback_pages(&self, st: &mut InodeState) -> Result<u64> {
        self.writeback_pages_max(st, u64::MAX)
    }

    /// Write back at most `max` dirty pages of a file as `writeback_pages_max` does, with
    /// its cell (`st`, locked from `cell`) held only to pick the pages and to map their
    /// copies, not while the copies are written into the log (the kernel's per-page
    /// writeback bit; the flusher's visits, which held the cell across the copies, made
    /// each file's writer wait for them: 35 % of thread time at 16 writers and 16 lanes on
    /// 16 cores, docs/BENCHMARKS.md):
    ///
    /// 1. cell held: each page's direct node slot is located and the page marked under
    ///    write-back (`Page::wb`); its bytes are shared, not copied;
    /// 2. no cell held: the bytes are appended to the file's data log;
    /// 3. cell held again: a copy is mapped if its page is still the one marked, with the
    ///    same bytes, and the page leaves the cache as `writeback_pages_max` drops it;
    ///    otherwise someone wrote, dropped or changed the page meanwhile, paid for the
    ///    copy's block (`Page::wb`), and the copy is invalidated unmapped.
    ///
    /// The caller holds the op lock (shared) across all three, so no checkpoint comes
    /// between (and no D2FS upcall is applied, which happens only under the exclusive
    /// side): an unmapped copy is only ever a valid block no node points at, as a `scale`
    /// collector's copy between its two holds (`scale::commit_dnode_run`); collectors skip
    /// such a block and never count its section as empty. Directories, whose dentry
    /// blocks stay cached and are sealed at write-back, go through `writeback_pages_max`.
    pub fn writeback_pages_released(
        &self,
        cell: &InodeCell,
        mut st: parking_lot::MutexGuard<'_, InodeState>,
        max: u64,
    ) -> Result<u64> {
        if st.is_dir() || st.dirty_pages == 0 {
            return self.writeback_pages_max(&mut st, max);
        }
        struct InFlight {
            idx: u64,
            data: crate::cell::PageData,
            sum: Summary,
            head: usize,
            gc: bool,
            new: Option<BlkAddr>,
        }
        // 1. Pick and mark.
        let warm = self.data_head(st.ino, Temp::Warm);
        let cold = self.data_head(st.ino, Temp::Cold);
        let idxs = st.pages_to_write_back(max);
        if idxs.is_empty() {
            return Ok(0);
        }
        let mut todo: Vec<InFlight> = Vec::with_capacity(idxs.len());
        for idx in idxs {
            let (nid, slot) = match self.locate(&mut st, idx, true) {
                Ok(l) => l.expect("create"),
                Err(e) => {
                    for p in &todo {
                        st.pages.get_mut(&p.idx).expect("marked").wb = false;
                    }
                    return Err(e);
                }
            };
            let version = self.nat.version(nid);
            let page = st.pages.get_mut(&idx).expect("dirty page");
            page.wb = true;
            todo.push(InFlight {
                idx,
                data: page.data.clone(),
                sum: Summary {
                    nid,
                    ofs: slot as u16,
                    version,
                },
                head: if page.gc { cold } else { warm },
                gc: page.gc,
                new: None,
            });
        }
        st.wb_in_flight += 1;
        drop(st);
        // A visit that dies from here on leaves its pages marked and the count raised: an
        // fsync would wait for it for good and every later write-back would skip those
        // pages. The flusher poisons the mount when its visit panics; a visit on another
        // thread (a checkpoint pre-pass, a cap relief, `own_writeback`) did not (found in
        // review, 2026-11-27). The guard poisons on unwind and wakes the waiters.
        let dies = VisitUnwind(self);
        self.test_point("flush:copying");
        // 2. Copy, with no cell held.
        let mut failed = None;
        for p in todo.iter_mut() {
            match self.seg.append_copy(p.head, p.sum, &p.data, |_, _, _| {}) {
                Ok(a) => p.new = Some(a),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        self.test_point("flush:copied");
        // 3. Map what is still the page that was copied.
        let mut st = cell.lock();
        let (mut n, mut moves, mut orphaned) = (0, 0, 0);
        for p in &todo {
            let mine = !st.freed
                && st
                    .pages
                    .get(&p.idx)
                    .is_some_and(|q| q.wb && q.data.same(&p.data));
            let Some(new) = p.new else {
                if mine {
                    // Not written (the append failed): an ordinary dirty page again.
                    st.pages.get_mut(&p.idx).expect("mine").wb = false;
                } else {
                    // Whoever took the page left the block of a copy that never came.
                    self.seg.space.refund(1);
                }
                continue;
            };
            let (nid, slot) = (p.sum.nid, p.sum.ofs as usize);
            if !mine {
                self.seg.invalidate(new);
                orphaned += 1;
                continue;
            }
            // The slot's direct node may have left the file's node cache meanwhile: a cap
            // relief wrote the file's nodes and dropped the clean ones past
            // `NODE_CACHE_PER_FILE` (`write_nodes`). Setting a slot of a node not cached
            // does nothing, and the page was lost (test
            // `a_visit_maps_its_copies_after_the_file_s_nodes_left_the_cache`): locate
            // loads it again. A page still marked keeps its slot (only truncate and punch
            // move a page's slot, and they drop the page).
            let located = self.locate(&mut st, p.idx, false);
            if !matches!(located, Ok(Some(l)) if l == (nid, slot)) {
                debug_assert!(located.is_err(), "a page under write-back keeps its slot");
                // Unmapped: the page stays dirty, and its copy is garbage nobody paid.
                st.pages.get_mut(&p.idx).expect("mine").wb = false;
                self.seg.space.charge(1);
                self.seg.invalidate(new);
                orphaned += 1;
                if let Err(e) = located {
                    failed.get_or_insert(e);
                }
                continue;
            }
            st.pages.remove(&p.idx);
            st.dirty_pages -= 1;
            self.page_written(false);
            let old = self.dnode_replace(&mut st, nid, slot, new);
            if old != NULL_ADDR && old != NEW_ADDR {
                self.seg.invalidate(old);
            }
            n += 1;
            moves += u64::from(p.gc);
        }
        if st.pages.len() as u64 > st.dirty_pages {
            st.pages.retain(|_, p| p.dirty);
        }
        // Counted before an fsync waiting for this visit can go on and return.
        self.stats
            .data_blocks_written
            .fetch_add(n - moves, Ordering::Relaxed);
        if orphaned > 0 {
            // A plain atomic: written only when a visit orphaned copies (rare), not by
            // every visit of every lane.
            self.stats
                .flush_orphaned_copies
                .fetch_add(orphaned, Ordering::Relaxed);
        }
        st.wb_in_flight -= 1;
        drop(st);
        std::mem::forget(dies);
        // Only when an fsync waits: the lock is volume-wide and every visit of every lane
        // gets here. A waiter registers under the cell, before the decrement above could
        // run, so this load sees it (the cell orders the two).
        if self.wb_waiters.load(Ordering::Acquire) > 0 {
            let _g = self.wb_done_lock.lock();
            self.wb_done.notify_all();
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Wait until no flusher visit has copies of the file's pages in flight
    /// (`InodeState::wb_in_flight`), with the cell released meanwhile; returns it locked
    /// again. fsync calls it first: the pages in flight are dirty until the visit maps
    /// them, and fsync writing them too would write each twice (the kernel's
    /// `filemap_write_and_wait` waits on `PG_writeback` in the same way).
    ///
    /// A visit that died (a panic, which poisons the mount) never ends: its pages stay
    /// marked and unwritten, so the wait ends with the poison as its error, and fsync
    /// fails (writing the rest and reporting success would promise pages that are not
    /// on disk).
    pub fn wait_for_writeback<'c>(
        &self,
        c: &'c InodeCell,
        mut st: parking_lot::MutexGuard<'c, InodeState>,
    ) -> Result<parking_lot::MutexGuard<'c, InodeState>> {
        if st.wb_in_flight == 0 {
            return Ok(st);
        }
        let t0 = std::time::Instant::now();
        self.test_point("fsync:waits-for-writeback");
        while st.wb_in_flight > 0 {
            if self.poisoned.load(Ordering::Acquire) {
                return Err(Error::Poisoned(
                    self.poison.lock().clone().unwrap_or_default(),
                ));
            }
            // Registered and locked before the cell is released: the visit ends under the
            // cell and then, seeing a waiter, notifies under this lock, so the notification
            // cannot come between.
            self.wb_waiters.fetch_add(1, Ordering::AcqRel);
            let mut g = self.wb_done_lock.lock();
            drop(st);
            self.wb_done
                .wait_for(&mut g, std::time::Duration::from_millis(10));
            drop(g);
            self.wb_waiters.fetch_sub(1, Ordering::AcqRel);
            st = c.lock();
        }
        crate::waits::record(crate::waits::Point::WritebackInFlight, t0);
        Ok(st)
    }

    /// Write back at most `max` dirty pages of `st` (in index order). Pages whose copies
    /// a flusher visit has in flight (`Page::wb`) are left to it.
    pub fn writeback_pages_max(&self, st: &mut InodeState, max: u64) -> Result<u64> {
        if st.dirty_pages == 0 {
            return Ok(0);
        }
        let is_dir = st.is_dir();
        let hi = self.data_head(st.ino, if is_dir { Temp::Hot } else { Temp::Warm });
        let idxs = st.pages_to_write_back(max);
        let cold = self.data_head(st.ino, Temp::Cold);
        let mut n = 0;
        // Pages a lazy collector dirtied are moves, not application data.
        let mut moves = 0;
        for idx in idxs {
            let (nid, slot) = self.locate(st, idx, true)?.expect("create");
            let version = self.nat.version(nid);
            let page = st.pages.get_mut(&idx).expect("dirty page");
            if is_dir {
                flashlog_format::dir::seal_dentry_block(page.bytes_mut());
            }
            let head = if page.gc { cold } else { hi };
            moves += u64::from(page.gc);
            let wb = page.wb;
            let data: &Block = &page.data;
            let addr = self.seg.append_copy(
                head,
                Summary {
                    nid,
                    ofs: slot as u16,
                    version,
                },
                data,
                |_, _, _| {},
            )?;
            if is_dir {
                let page = st.pages.get_mut(&idx).expect("dirty page");
                page.dirty = false;
                page.reserved = false;
                page.gc = false;
            } else {
                // File data is not cached once written: the kernel (FUSE) or the
                // application caches it; directories keep their dentry blocks (up to
                // `DENTRY_CACHE_PER_DIR`, below).
                st.pages.remove(&idx);
            }
            st.dirty_pages -= 1;
            self.page_written(wb);
            let old = self.dnode_replace(st, nid, slot, addr);
            if old != NULL_ADDR && old != NEW_ADDR {
                self.seg.invalidate(old);
            }
            n += 1;
        }
        if !is_dir && st.pages.len() as u64 > st.dirty_pages {
            // Clean file pages written elsewhere (none are kept for long): dropped too. The
            // written ones went one by one above; a sweep of the whole map per visit cost
            // O(dirty pages) per 64 written (issue 15: 3 % of `none`'s CPU).
            st.pages.retain(|_, p| p.dirty);
        }
        if is_dir && st.pages.len() > crate::config::DENTRY_CACHE_PER_DIR {
            // A directory's clean dentry pages past the limit go, as a file's clean nodes
            // past `NODE_CACHE_PER_FILE` do (`write_nodes`): they are on disk, and `dir.rs`
            // loads them again when needed.
            st.pages.retain(|_, p| p.dirty);
        }
        self.stats
            .data_blocks_written
            .fetch_add(n - moves, Ordering::Relaxed);
        Ok(n)
    }

    /// Eager migration: move data block `addr` (slot `slot` of direct node `nid`, page `idx`
    /// of the locked file; the caller checked under the node-lock rule that the node still
    /// points at it) to log head `head`. If the page is dirty in the cache, its newer bytes
    /// are what the move writes, and the page is then clean (F2FS `move_data_page` writes
    /// the page, not the victim's copy; the old bytes would be written now and again at
    /// writeback). Directory blocks move as they are (they are sealed at writeback).
    #[allow(clippy::too_many_arguments)]
    pub fn relocate_data_block(
        &self,
        st: &mut InodeState,
        head: usize,
        nid: Nid,
        slot: usize,
        idx: u64,
        addr: BlkAddr,
        blk: &Block,
    ) -> Result<BlkAddr> {
        let newer = if st.is_dir() {
            None
        } else {
            st.pages.get(&idx).filter(|p| p.dirty).map(|p| *p.data)
        };
        let new = self.seg.append(
            head,
            Summary {
                nid,
                ofs: slot as u16,
                version: self.nat.version(nid),
            },
            |_, _, out| out.copy_from_slice(newer.as_ref().unwrap_or(blk)),
        )?;
        if newer.is_none() {
            // A move of a clean block is no debt: the collector's reservation pays it.
            self.seg.space.charge(1);
        } else {
            let p = st.pages.remove(&idx).expect("dirty page");
            debug_assert!(p.dirty && !p.reserved);
            st.dirty_pages -= 1;
            self.page_written(p.wb);
        }
        self.dnode_set(st, nid, slot, new);
        self.seg.invalidate(addr);
        if newer.is_some() {
            self.stats
                .data_blocks_written
                .fetch_add(1, Ordering::Relaxed);
            self.stats.gc_dirty_moves.fetch_add(1, Ordering::Relaxed);
        }
        Ok(new)
    }

    /// Write every dirty node of `st` and then its inode, to the node logs by temperature
    /// (checkpoint) or all to the file's warm node log with the fsync mark on the inode.
    pub fn write_all_nodes(&self, st: &mut InodeState, fsync_flags: Option<u32>) -> Result<u64> {
        self.write_all_nodes_at(st, fsync_flags).map(|(n, _)| n)
    }

    /// [`Self::write_all_nodes`], also returning the warm node head an fsync wrote to (the
    /// file's mlog is looked up once, so every node of one fsync is on one chain and the
    /// caller submits that head, whatever the mapping does meanwhile).
    pub fn write_all_nodes_at(
        &self,
        st: &mut InodeState,
        fsync_flags: Option<u32>,
    ) -> Result<(u64, usize)> {
        self.write_nodes(st, fsync_flags.is_some(), fsync_flags)
    }

    /// Write the dirty nodes of `st` outside a checkpoint and an fsync (the cap pre-pass,
    /// `Fs::relieve_caps`): a file's (anything but a directory, whose fsync checkpoints)
    /// go to its warm node log, where roll-forward
    /// finds them, and the file is marked `unsynced`, so that a later fsync of it writes an
    /// FSYNC inode that adopts them even if nothing is dirty by then (recovery adopts the
    /// nodes of a file up to its newest FSYNC inode). On a hot or cold log, an indirect
    /// node written here was out of roll-forward's reach, and a file written here looked
    /// clean to fsync, which then wrote nothing.
    pub fn write_nodes_unsynced(&self, st: &mut InodeState) -> Result<u64> {
        let warm = !st.is_dir();
        let (n, _) = self.write_nodes(st, warm, None)?;
        if n > 0 {
            st.unsynced = true;
        }
        Ok(n)
    }

    /// `write_all_nodes_at` with every node to the warm log if `warm`.
    fn write_nodes(
        &self,
        st: &mut InodeState,
        warm: bool,
        fsync_flags: Option<u32>,
    ) -> Result<(u64, usize)> {
        let is_dir = st.is_dir();
        let mut nids: Vec<(Nid, Option<NodeKind>)> = st.nodes.dirty();
        nids.sort_unstable_by_key(|(n, _)| *n);
        let mut n = 0;
        for (nid, kind) in nids {
            let kind = kind.unwrap_or(NodeKind::Direct);
            let temp = if warm {
                Temp::Warm
            } else {
                node_temp(is_dir, kind)
            };
            let hi = self.node_head(st, temp);
            self.write_node(st, nid, hi, 0)?;
            n += 1;
        }
        if st.dirty || fsync_flags.is_some() {
            let temp = if warm {
                Temp::Warm
            } else {
                node_temp(is_dir, NodeKind::Inode)
            };
            let hi = self.node_head(st, temp);
            self.write_node(st, st.ino, hi, fsync_flags.unwrap_or(0))?;
            n += 1;
        }
        // Keep the per-file node cache bounded: drop clean nodes past the limit.
        if st.nodes.len() > crate::config::NODE_CACHE_PER_FILE {
            st.nodes.drop_clean();
        }
        // The inode's node mlog is pinned for the checkpoint interval (`node_mlog`): every
        // node of this fsync went to this head.
        let warm = self.node_head(st, Temp::Warm);
        Ok((n, warm))
    }

    /// Take the victim protector's range `[start, end)` of `ino` for an I/O path that may
    /// conflict with a migration (only with `gc=scale` and SVP on). Taken before the cell.
    pub fn protect(&self, ino: Ino, start: u64, end: u64) -> Option<crate::svp::RangeGuard<'_>> {
        self.svp_on.then(|| self.svp.protect_range(ino, start, end))
    }

    /// `drop_link` under the victim protector: free `ino` after this operation
    /// (`free_deferred`), when its range protection can be taken with no cell locked.
    pub fn defer_free(&self, ino: Ino) {
        DEFERRED_FREE.with(|d| d.borrow_mut().push((self.mount_id, ino)));
    }

    /// Orphans an unlink may add: the pack's slots less [`ORPHAN_MARGIN`] for those
    /// recorded without asking (a deferred free that finds its inode opened again, a free
    /// that failed), so that the checkpoint's pack always holds the set.
    pub fn orphan_limit(&self) -> usize {
        (self.sb.geo.orphan_slots as usize).saturating_sub(ORPHAN_MARGIN)
    }

    /// Before an operation drops one link of the inode `st` (locked: no open can start)
    /// and so makes it an orphan (its last link, or a directory's, while it is open):
    /// take its orphan slot. Refused with ENOSPC, before anything changed, when the set is
    /// at `orphan_limit`, as F2FS's `f2fs_acquire_orphan_inode` refuses past its
    /// `max_orphans`; without the check the next checkpoint outgrew its pack and poisoned
    /// the mount. Returns whether a slot was newly taken, to give back
    /// (`withdraw_orphan`) if the operation fails before the removal.
    pub fn admit_orphan(&self, cell: &InodeCell, st: &InodeState) -> Result<bool> {
        let last_link = st.is_dir() || st.hdr.nlink <= 1;
        if !last_link || cell.open.load(Ordering::Acquire) == 0 {
            return Ok(false);
        }
        let ino = st.ino;
        let mut o = self.orphans.lock();
        if o.contains(&ino) {
            return Ok(false);
        }
        if o.len() >= self.orphan_limit() {
            drop(o);
            if self.orphans_refused.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    "{} inodes are unlinked but still open (or not yet forgotten by the \
                     kernel), all the checkpoint can record: unlinks of open files get \
                     ENOSPC until some are closed",
                    self.orphan_limit()
                );
            }
            return Err(Error::NoSpace);
        }
        o.insert(ino);
        Ok(true)
    }

    /// Give back a slot `admit_orphan` took for an operation that failed before it removed
    /// the link.
    pub fn withdraw_orphan(&self, ino: Ino) {
        self.orphans.lock().remove(&ino);
    }

    /// Free the inodes this thread's operation deferred (`defer_free`): their range
    /// protection first, then the cell. Runs under the operation's op-lock hold, so no
    /// checkpoint sees such an inode unlinked but not freed. One still open becomes an
    /// orphan (decided under its cell lock, as `release` decides, so the two never
    /// disagree); one whose free fails too, so that the next mount frees it.
    #[inline]
    pub fn free_deferred(&self) -> Result<()> {
        // Only the victim protector defers frees; every other operation stops here.
        if !self.svp_on {
            return Ok(());
        }
        self.free_deferred_svp()
    }

    #[inline(never)]
    fn free_deferred_svp(&self) -> Result<()> {
        let mine: Vec<(u64, Ino)> = DEFERRED_FREE.with(|d| {
            let mut d = d.borrow_mut();
            // Nearly always: nothing deferred (no partition of an empty list, nothing to
            // drop after it, on every operation).
            if d.is_empty() {
                return Vec::new();
            }
            let (mine, others) = std::mem::take(&mut *d)
                .into_iter()
                .partition(|e| e.0 == self.mount_id);
            *d = others;
            mine
        });
        let mut left = mine.into_iter().map(|e| e.1);
        while let Some(ino) = left.next() {
            if let Err(e) = self.free_deferred_one(ino) {
                let mut orphans = self.orphans.lock();
                orphans.insert(ino);
                orphans.extend(left);
                return Err(e);
            }
        }
        Ok(())
    }

    fn free_deferred_one(&self, ino: Ino) -> Result<()> {
        let _p = self.protect(ino, 0, u64::MAX);
        let Ok(c) = self.cell(ino) else {
            return Ok(());
        };
        let mut st = c.lock();
        if st.hdr.nlink != 0 || st.freed {
            return Ok(());
        }
        if c.open.load(Ordering::Acquire) == 0 {
            self.free_inode(&mut st)
        } else {
            // Opened since the unlink: its last close frees it (`Fs::release`).
            self.orphans.lock().insert(ino);
            Ok(())
        }
    }

    /// Load an inode's cell (from the table or disk).
    pub fn cell(&self, ino: Ino) -> Result<Arc<InodeCell>> {
        loop {
            let mark = match self.cells.get_or_mark(ino) {
                Ok(c) => return Ok(c),
                Err(mark) => mark,
            };
            if !self.nat.valid(ino) || self.nat.ino(ino) != ino || self.nat.addr(ino) == NULL_ADDR {
                return Err(Error::NotFound);
            }
            let blk = self.read_node(ino, ino)?;
            let f = node::footer(&blk);
            if f.kind() != Some(NodeKind::Inode) {
                return Err(Error::Corrupt(format!("nid {ino} is not an inode")));
            }
            let hdr = node::InodeHdr::read(&blk)?;
            self.test_point("cell:read");
            if let Some(c) = self
                .cells
                .insert_loaded(InodeState::new(ino, blk, hdr, false), mark)
            {
                return Ok(c);
            }
        }
    }

    /// Free an inode whose last link is gone and that nobody has open.
    pub fn free_inode(&self, st: &mut InodeState) -> Result<()> {
        if st.freed {
            return Ok(());
        }
        // Drop cached pages first (releasing reservations), then every block and node.
        let pages = std::mem::take(&mut st.pages);
        for (_, p) in pages {
            if p.dirty {
                self.drop_dirty_page(p.wb);
            }
            if p.reserved {
                self.release_blocks(1);
            }
        }
        st.dirty_pages = 0;
        self.free_blocks_from(st, 0)?;
        if st.hdr.xattr_nid != 0 {
            let x = st.hdr.xattr_nid;
            // A node that does not read back as this inode's (a corrupt xattr nid naming
            // another inode's node) is left alone, not freed from under its owner (found
            // in review, 2026-11-28); fsck reports it.
            if self.nat.valid(x) {
                let mine = st.nodes.contains(x) || {
                    let r = self.ensure_node(st, x);
                    if let Err(e) = &r {
                        tracing::warn!("inode {}: xattr node {x} kept: {e}", st.ino);
                    }
                    r.is_ok()
                };
                if mine {
                    self.free_node(st, x);
                }
            }
            st.hdr.xattr_nid = 0;
        }
        let addr = self.nat.addr(st.ino);
        if addr != NULL_ADDR {
            self.seg.invalidate(addr);
        }
        self.nat.free(st.ino);
        self.valid_nodes.fetch_sub(1, Ordering::Relaxed);
        self.valid_inodes.fetch_sub(1, Ordering::Relaxed);
        self.release_blocks(1);
        let dirty = st.nodes.drain();
        self.dirty_nodes.fetch_sub(dirty, Ordering::Relaxed);
        self.seg.space.refund(dirty);
        if std::mem::take(&mut st.inode_charged) {
            self.seg.space.refund(1);
        }
        st.dirty = false;
        st.freed = true;
        self.cells.remove(st.ino);
        Ok(())
    }

    pub fn now(&self) -> node::Timespec {
        // `clock_gettime` itself: `SystemTime::now().duration_since(UNIX_EPOCH)` is the
        // same clock with a checked subtraction and a `Duration` around it, ~100
        // instructions of every write (docs/BENCHMARKS.md, "Instructions per operation").
        let ts = clock(libc::CLOCK_REALTIME);
        if ts.tv_sec < 0 {
            // Before 1970 (a clock set back that far): the epoch, as `unwrap_or_default`
            // gave.
            return node::Timespec::default();
        }
        // `time_t` is not `i64` on every target.
        #[allow(clippy::unnecessary_cast)]
        let sec = ts.tv_sec as i64;
        node::Timespec {
            sec,
            nsec: ts.tv_nsec as u32,
        }
    }

    /// Nanoseconds since mount on the monotonic clock (`epoch`'s): the time of
    /// `last_op_ns` and of the idle check against it.
    pub fn since_mount_ns(&self) -> u64 {
        mono_ns().saturating_sub(self.epoch_ns)
    }

    /// Volume lifetime in seconds (for segment ages).
    pub fn tick_clock(&self) {
        let cp = self.cp.lock();
        let secs = cp.elapsed_base + self.epoch.elapsed().as_secs();
        self.seg.clock_secs.store(secs, Ordering::Relaxed);
    }

    pub fn block_size(&self) -> usize {
        BLOCK_SIZE
    }
}

/// Armed while a write-back visit has pages marked (`writeback_pages_released`); dropped
/// only by an unwind (the visit forgets it when it ends): poisons the mount, which ends
/// fsync's wait for the visit with an error, and wakes that wait.
struct VisitUnwind<'a>(&'a FsInner);

impl Drop for VisitUnwind<'_> {
    fn drop(&mut self) {
        self.0.poison_with("a write-back visit panicked".into());
        let _g = self.0.wb_done_lock.lock();
        self.0.wb_done.notify_all();
    }
}

/// `clock_gettime(id)`: the clocks `Instant` (`CLOCK_MONOTONIC`) and `SystemTime`
/// (`CLOCK_REALTIME`) read, without their checked arithmetic and `Duration` conversions
/// (`Instant::elapsed` cost ~90 instructions on every operation, `FsInner::now` ~100 more
/// on every write).
fn clock(id: libc::clockid_t) -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the ids used are supported on every
    // Linux (a failure leaves it zero).
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts
}

/// The monotonic clock (`Instant`'s) in nanoseconds.
pub(crate) fn mono_ns() -> u64 {
    let ts = clock(libc::CLOCK_MONOTONIC);
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}
