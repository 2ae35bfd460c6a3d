//! File cells (Max): the in-memory state of each inode, sharded by inode number.
//!
//! Owns: `InodeCell` (one per cached inode), the `CellTable` that finds them, and what
//! cells evicted between checkpoints knew about the interval (`SinceCheckpoint`, kept in
//! the table's shards until the cell is loaded again or the checkpoint ends the interval;
//! invariant: an inode has a cell or such a record, never both). An inode's
//! cell holds everything that belongs to that file alone: its inode block, its other node
//! blocks (direct, indirect, xattr), and its page cache. All of it is guarded by the cell's
//! mutex. Each cached node (not the inode block) also has a lock of its own
//! (`NodeLock`, the node lock of ScaleLFS's node-lock rule), which the cell holder takes for
//! every access to the node and a `scale` collector takes *without* the cell, found through
//! the cell's `NodeIndex`, to check and remap one direct node's blocks
//! (`scale::commit_dnode_run`, docs/DESIGN.md "ScaleLFS commit"). A page's bytes are shared
//! outside the cell only with a flusher visit that copies them with the cell released
//! (`PageData`, `Page::wb`); a write makes its own copy first. A flusher visit takes the
//! cell twice, to mark pages and to map their copies (`FsInner::writeback_pages_released`).
//!
//! Invariants: a node in a cell's `NodeMap` is in its `NodeIndex` with the same lock and
//! not `gone`; a node removed from the map is marked `gone` under its lock; a cell that
//! someone keeps (an `Arc` besides the table's) is not evicted; while a cell's
//! `fsync_window` is open (an fsync between its data barrier and its node write) no one
//! remaps the file's slots without the cell.
//!
//! Lock order: op lock (shared) -> rename lock -> directory cells (an ancestor before its
//! descendants at any depth, otherwise ascending ino: `fs.rs` `lock_dirs`) -> the cells
//! of entries in them (ascending ino) -> node locks (one at a time) -> log heads -> leaves. The table's
//! shard locks and the node index are leaves: never held while taking a cell or node lock,
//! but that `evict` try-locks cells under one and then locks the nodes of a cell it got
//! and that no one else keeps (so no collector can hold them). A thread that holds a node
//! lock without its cell (a collector) takes no cell, no shard lock and no other node lock.

use crate::config::CELL_SHARDS;
use flashlog_format::codec::Block;
use flashlog_format::node::InodeHdr;
use flashlog_format::{Ino, Nid};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// A cached node block of a file (not its inode), behind its own lock: the node lock of
/// ScaleLFS's node-lock rule (`NodeLock`).
pub struct NodeBuf {
    pub blk: Box<Block>,
    pub dirty: bool,
    /// Dropped from its file's cache (freed, trimmed as clean, or its file freed): a
    /// collector that found the node before that must not change it, and takes the cell
    /// to find the node the cache has now (`scale::commit_dnode_run`).
    pub gone: bool,
}

/// A node's lock. The file's cell holder takes it for every access to the node (under the
/// cell: lock order cell -> node); a `scale` collector takes it *without* the cell, found
/// through the cell's `NodeIndex`, to check and remap the blocks of one direct node
/// (ScaleLFS §4.3: collectors and writers of other parts of one file never wait for each
/// other). A thread that holds a node lock takes no cell and no other node lock, only
/// leaves (NAT, SVP, SIT atomics, the space counters).
pub type NodeLock = Arc<Mutex<NodeBuf>>;

/// A held node lock.
pub type NodeGuard<'a> = parking_lot::MutexGuard<'a, NodeBuf>;

/// Lock a node, timing the wait when it is contended (`waits::Point::Node`).
pub fn lock_node(n: &Mutex<NodeBuf>) -> NodeGuard<'_> {
    crate::waits::lock(crate::waits::Point::Node, n)
}

type NidMap<V> = HashMap<Nid, V, std::hash::BuildHasherDefault<InoHash>>;

/// The nodes of a cell that a thread not holding it may look up (`InodeCell::node`): the
/// same locks as the cell's `NodeMap`, changed with it. A leaf lock, held only for a
/// lookup, an insert or a removal.
#[derive(Default)]
pub struct NodeIndex(Mutex<NidMap<NodeLock>>);

/// The cached nodes of a file (`InodeState::nodes`), each behind its `NodeLock`. Changed
/// only by the cell holder; every insert and removal is mirrored in the cell's
/// `NodeIndex`, and a removed node is marked `gone` under its lock.
///
/// Invariant: a node in the map is in the index, with the same lock, and not gone.
#[derive(Default)]
pub struct NodeMap {
    map: NidMap<NodeLock>,
    index: Arc<NodeIndex>,
}

impl NodeMap {
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn contains(&self, nid: Nid) -> bool {
        self.map.contains_key(&nid)
    }
    /// Lock node `nid` if it is cached.
    pub fn lock(&self, nid: Nid) -> Option<NodeGuard<'_>> {
        self.map.get(&nid).map(|n| lock_node(n))
    }
    /// Cache node `nid` (a node cached before under that nid is dropped: `gone`).
    pub fn insert(&mut self, nid: Nid, blk: Box<Block>, dirty: bool) {
        let n: NodeLock = Arc::new(Mutex::new(NodeBuf {
            blk,
            dirty,
            gone: false,
        }));
        self.index.0.lock().insert(nid, n.clone());
        if let Some(old) = self.map.insert(nid, n) {
            lock_node(&old).gone = true;
        }
    }
    /// Drop node `nid` from the cache; whether it was dirty, if it was cached.
    pub fn remove(&mut self, nid: Nid) -> Option<bool> {
        let n = self.map.remove(&nid)?;
        self.index.0.lock().remove(&nid);
        let mut g = lock_node(&n);
        g.gone = true;
        Some(g.dirty)
    }
    /// Drop every node; how many were dirty.
    pub fn drain(&mut self) -> u64 {
        self.index.0.lock().clear();
        let mut dirty = 0;
        for (_, n) in self.map.drain() {
            let mut g = lock_node(&n);
            g.gone = true;
            dirty += u64::from(g.dirty);
        }
        dirty
    }
    /// Drop every clean node (checked and dropped under each node's lock, so a node a
    /// collector dirties meanwhile stays).
    pub fn drop_clean(&mut self) {
        let mut dropped = Vec::new();
        self.map.retain(|&nid, n| {
            let mut g = lock_node(n);
            if g.dirty {
                return true;
            }
            g.gone = true;
            dropped.push(nid);
            false
        });
        let mut idx = self.index.0.lock();
        for nid in dropped {
            idx.remove(&nid);
        }
    }
    pub fn any_dirty(&self) -> bool {
        self.map.values().any(|n| lock_node(n).dirty)
    }
    /// The dirty nodes, with the kind their footer gives.
    pub fn dirty(&self) -> Vec<(Nid, Option<flashlog_format::node::NodeKind>)> {
        self.map
            .iter()
            .filter_map(|(&nid, n)| {
                let g = lock_node(n);
                g.dirty
                    .then(|| (nid, flashlog_format::node::footer(&g.blk).kind()))
            })
            .collect()
    }
}

/// A page's bytes. Shared only while a flusher copies them into the log with the file's
/// cell released (`FsInner::writeback_pages_released`): a write meanwhile gets a copy of
/// its own (`Page::bytes_mut`), so the bytes being copied never change under the copy.
///
/// The block is a box of its own behind the shared count, not inline in the `Arc`: a
/// 4,096-byte allocation, as the pages were before they could be shared (`Arc<Block>` is
/// 4,112 bytes, which the allocator serves from its 5 KiB size class: a quarter more
/// memory per cached page, and fxmark DWAL at 16 threads ran 20-30 % slower with it on 2
/// cores). The count is `triomphe::Arc`'s, without std's weak count: the uniqueness check
/// of every write into a page is one load instead of a compare-exchange (fxmark DWOL at one
/// thread, a write into one cached page: -5 % with std's `Arc`, -2-3 % with this).
#[derive(Clone)]
pub struct PageData(triomphe::Arc<Box<Block>>);

impl PageData {
    /// A copy of `b` (one copy, straight into the new allocation).
    pub fn copy_of(b: &Block) -> Self {
        PageData(triomphe::Arc::new(
            Box::<[u8]>::from(&b[..]).try_into().expect("one block"),
        ))
    }

    /// Zeros.
    pub fn zeroed() -> Self {
        PageData(triomphe::Arc::new(flashlog_format::codec::zero_block()))
    }

    /// The bytes, to change them, if no write-back in flight shares them.
    pub fn get_mut(&mut self) -> Option<&mut Block> {
        triomphe::Arc::get_mut(&mut self.0).map(|b| &mut **b)
    }

    /// The bytes, to change them: copied first if a write-back in flight shares them.
    pub fn make_mut(&mut self) -> &mut Block {
        let b: &mut Box<Block> = triomphe::Arc::make_mut(&mut self.0);
        b
    }

    /// The same bytes (not a copy of them).
    pub fn same(&self, other: &PageData) -> bool {
        triomphe::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::ops::Deref for PageData {
    type Target = Block;
    fn deref(&self) -> &Block {
        &self.0
    }
}

/// A cached page of file data (or a directory's dentry block).
pub struct Page {
    pub data: PageData,
    pub dirty: bool,
    /// Counted in the volume's allocated blocks when it was dirtied over a hole.
    pub reserved: bool,
    /// Dirtied by background cleaning: writeback sends it to the cold data log.
    pub gc: bool,
    /// Under write-back (the kernel's `PG_writeback`): a flusher copies these bytes into
    /// the log with the cell released and maps the copy when it takes the cell again, if
    /// the page is still this one. The page stays dirty and keeps its debt meanwhile, so
    /// fsync and every other path see it as before. The copy in flight uses one block of
    /// the page's debt; a path that writes or drops the page before the flusher is back
    /// leaves that block charged (`FsInner::page_written`, `drop_dirty_page`), and a write
    /// into it charges one and clears the mark (`FsInner::page_for_write_init`): either
    /// way the copy the flusher then finds orphaned is paid for.
    pub wb: bool,
}

impl Page {
    /// A page of `data` as the cache keeps it.
    pub fn new(data: PageData, dirty: bool, reserved: bool, gc: bool) -> Self {
        Page {
            data,
            dirty,
            reserved,
            gc,
            wb: false,
        }
    }

    /// The bytes, to change them: copied first if a write-back in flight shares them.
    pub fn bytes_mut(&mut self) -> &mut Block {
        self.data.make_mut()
    }
}

pub struct InodeState {
    pub ino: Ino,
    /// The inode block; `hdr` is written into it before it goes to disk.
    pub node: Box<Block>,
    pub hdr: InodeHdr,
    /// The inode block differs from disk.
    pub dirty: bool,
    /// The dirty inode block is charged to the space budget as checkpoint debt (set by
    /// `FsInner::dirty_inode`; an inode marked dirty without it is charged when written).
    pub inode_charged: bool,
    /// Hashed with `InoHash` (node ids come from the same allocator as inode numbers):
    /// every page a flusher visit picks and maps looks its direct node up here, and with
    /// SipHash those lookups were a third of the visit's time under the cell.
    pub nodes: NodeMap,
    pub pages: BTreeMap<u64, Page>,
    pub dirty_pages: u64,
    /// Resources freed: the inode no longer exists.
    pub freed: bool,
    /// An fsync must write a checkpoint (the inode gained or changed a name since the last
    /// checkpoint, which roll-forward cannot replay).
    pub needs_cp: bool,
    /// Nodes of this file were written since the checkpoint without the FSYNC mark
    /// (`FsInner::write_nodes_unsynced`): fsync writes an FSYNC inode even when nothing
    /// is dirty.
    pub unsynced: bool,
    /// Write-back visits (the flusher's, the checkpoint pre-pass's) that have copies of
    /// this file's pages in flight (`Page::wb`), between releasing the cell and taking it
    /// again to map them (`FsInner::writeback_pages_released`): fsync waits for them to
    /// end (`FsInner::wait_for_writeback`) instead of writing those pages a second time.
    pub wb_in_flight: u32,
    /// `mlog=thread`: (checkpoint version, mlog) — the mlog this inode's nodes go to until
    /// the checkpoint after that version. Roll-forward walks the mlogs' node chains one
    /// after the other, so one inode's nodes must stay on one chain per interval
    /// (`FsInner::node_mlog`).
    pub mlog: Option<(u64, u16)>,
}

impl InodeState {
    /// ENOENT for an inode freed while the caller waited for its cell (an unlink's free
    /// runs under the same lock): an operation that went on would allocate for, or report,
    /// an inode that no longer exists.
    pub fn ensure_live(&self) -> crate::error::Result<()> {
        if self.freed {
            return Err(crate::error::Error::NotFound);
        }
        Ok(())
    }

    /// State of an inode whose block is `node` (written or about to be).
    pub fn new(ino: Ino, node: Box<Block>, hdr: InodeHdr, dirty: bool) -> Self {
        InodeState {
            ino,
            node,
            hdr,
            dirty,
            inode_charged: false,
            nodes: NodeMap::default(),
            pages: BTreeMap::new(),
            dirty_pages: 0,
            freed: false,
            needs_cp: false,
            unsynced: false,
            wb_in_flight: 0,
            mlog: None,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.hdr.mode & libc_mode::S_IFMT == libc_mode::S_IFDIR
    }
    pub fn is_reg(&self) -> bool {
        self.hdr.mode & libc_mode::S_IFMT == libc_mode::S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.hdr.mode & libc_mode::S_IFMT == libc_mode::S_IFLNK
    }
    pub fn has_dirty_nodes(&self) -> bool {
        self.nodes.any_dirty()
    }
    /// The first `max` dirty pages by index that no write-back visit has in flight
    /// (`Page::wb`: those are the visit's to map).
    pub fn pages_to_write_back(&self, max: u64) -> Vec<u64> {
        self.pages
            .iter()
            .filter(|(_, p)| p.dirty && !p.wb)
            .map(|(&i, _)| i)
            .take(max as usize)
            .collect()
    }

    /// Nothing of this inode waits to be written.
    pub fn is_clean(&self) -> bool {
        !self.dirty && self.dirty_pages == 0 && !self.has_dirty_nodes()
    }
}

/// Mode bits (as in <sys/stat.h>), kept here so that the core does not depend on libc.
pub mod libc_mode {
    pub const S_IFMT: u32 = 0o170000;
    pub const S_IFSOCK: u32 = 0o140000;
    pub const S_IFLNK: u32 = 0o120000;
    pub const S_IFREG: u32 = 0o100000;
    pub const S_IFBLK: u32 = 0o060000;
    pub const S_IFDIR: u32 = 0o040000;
    pub const S_IFCHR: u32 = 0o020000;
    pub const S_IFIFO: u32 = 0o010000;
    pub const S_ISUID: u32 = 0o4000;
    pub const S_ISGID: u32 = 0o2000;
    pub const S_ISVTX: u32 = 0o1000;
}

pub struct InodeCell {
    pub ino: Ino,
    pub state: Mutex<InodeState>,
    /// Open handles (library `open`/`release`, FUSE open/release).
    pub open: AtomicU32,
    /// Created since the last checkpoint.
    pub is_new: AtomicBool,
    /// Mirror of `hdr.pino` readable without the cell lock (rename's ancestor walk).
    pub pino: AtomicU32,
    /// For a directory: the checkpoint version + 1 under which a name last left it by rename,
    /// rmdir, or an unlink whose file kept other links (0: never since mount). Roll-forward
    /// cannot redo such a removal, so fsync of a file created in this directory since that
    /// checkpoint writes a checkpoint instead (docs/DESIGN.md, "What fsync promises"). Stale values need no clearing: a checkpoint
    /// changes the version they are compared with.
    pub names_left_at: AtomicU64,
    /// The role (`waits::Role as u8`) of the thread that locked the cell last, stored on
    /// every acquisition: while the cell is held, its holder. A waiter charges its wait to
    /// it (`waits::cell_holders`, the bench's "file-cell waits by holder").
    pub holder: AtomicU8,
    /// An fsync of the file is between its data barrier and its node write (it holds the
    /// cell throughout; `FsyncWindow`). A `scale` collector does not remap the file's
    /// slots under a node's own lock then, but under the cell, after the fsync: a remap in
    /// the window would put into the FSYNC'd node a copy the barrier did not cover
    /// (`scale::commit_dnode_run`, docs/DESIGN.md "ScaleLFS commit").
    pub fsync_window: AtomicBool,
    /// The cell's nodes, for a thread that does not hold the cell (`node`).
    nodes: Arc<NodeIndex>,
}

/// `InodeCell::fsync_window` open while it lives (closed on every path out of fsync).
pub struct FsyncWindow<'a>(&'a InodeCell);

impl<'a> FsyncWindow<'a> {
    /// Open the window: before the data barrier, by the cell's holder. SeqCst with the
    /// collector's load: a collector that does not see it open appended its copies
    /// before the store, so before the barrier's submit of every log head.
    pub fn open(cell: &'a InodeCell) -> Self {
        cell.fsync_window.store(true, Ordering::SeqCst);
        FsyncWindow(cell)
    }
}

impl Drop for FsyncWindow<'_> {
    fn drop(&mut self) {
        self.0.fsync_window.store(false, Ordering::SeqCst);
    }
}

impl InodeCell {
    pub fn new(state: InodeState, is_new: bool) -> Arc<Self> {
        Arc::new(InodeCell {
            ino: state.ino,
            nodes: state.nodes.index.clone(),
            pino: AtomicU32::new(state.hdr.pino),
            state: Mutex::new(state),
            open: AtomicU32::new(0),
            is_new: AtomicBool::new(is_new),
            names_left_at: AtomicU64::new(0),
            holder: AtomicU8::new(0),
            fsync_window: AtomicBool::new(false),
        })
    }
    /// Lock the cell (timing the wait if contended: `waits::cell_point`, by the calling
    /// thread's role, charged to the holder's role).
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, InodeState> {
        if let Some(g) = self.try_lock() {
            return g;
        }
        let held_by = self.holder.load(Ordering::Relaxed);
        let t0 = std::time::Instant::now();
        let g = self.state.lock();
        crate::waits::record_cell(crate::waits::cell_point(), held_by, t0);
        self.holder
            .store(crate::waits::role() as u8, Ordering::Relaxed);
        g
    }

    /// Lock the cell if it is free (every acquisition goes through `lock` or this, so that
    /// the holder tag stays true).
    pub fn try_lock(&self) -> Option<parking_lot::MutexGuard<'_, InodeState>> {
        let g = self.state.try_lock()?;
        self.holder
            .store(crate::waits::role() as u8, Ordering::Relaxed);
        Some(g)
    }

    /// The lock of node `nid` if the cell has it cached, looked up without the cell. The
    /// caller keeps this cell (its `Arc`) while it uses the node: a cell someone keeps is
    /// never evicted (`CellTable::evict`), so the node leaves the cache only by a removal,
    /// which marks it `gone`.
    pub fn node(&self, nid: Nid) -> Option<NodeLock> {
        self.nodes.0.lock().get(&nid).cloned()
    }

    pub fn pino(&self) -> Ino {
        self.pino.load(Ordering::Acquire)
    }
}

/// What an evicted cell knew about the checkpoint interval it was evicted in: the state
/// fsync needs that is not on disk (`InodeCell::is_new`, `InodeState::needs_cp`,
/// `InodeState::unsynced`, `InodeState::mlog`, `InodeCell::names_left_at`). Kept beside the table until the cell
/// is loaded again (which takes it back) or the interval's checkpoint ends it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinceCheckpoint {
    pub is_new: bool,
    pub needs_cp: bool,
    pub unsynced: bool,
    pub mlog: Option<(u64, u16)>,
    pub names_left_at: u64,
}

impl SinceCheckpoint {
    /// Anything here that the interval after checkpoint version `epoch` still needs.
    fn current(&self, epoch: u64) -> bool {
        self.is_new
            || self.needs_cp
            || self.unsynced
            || self.mlog.is_some_and(|(e, _)| e == epoch)
            || self.names_left_at == epoch.wrapping_add(1)
    }
}

/// The hash of the cell table's maps: an inode number times a 64-bit odd constant, high
/// half folded into the low one (a shard holds the numbers of one residue mod 128, so the
/// low bits of the product alone would put them all in a few buckets). SipHash, the
/// default, is for keys an attacker picks; inode numbers come from the nid allocator, and
/// every operation hashes one (MWUL: 8 % of an unlink with the evicted cells' records).
#[derive(Clone, Copy, Default)]
pub struct InoHash(u64);

impl std::hash::Hasher for InoHash {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = u64::from(v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type InoMap<V> = HashMap<Ino, V, std::hash::BuildHasherDefault<InoHash>>;

/// One shard of the cell table: its cells, and what the cells evicted from it since the
/// last checkpoint knew about the interval (never both for one inode).
#[derive(Default)]
struct Shard {
    cells: InoMap<Arc<InodeCell>>,
    gone: InoMap<SinceCheckpoint>,
    /// Cells removed from this shard (evicted or freed) since the mount: a load that read
    /// its inode while one was removed may have read a block older than the cell the
    /// removal dropped (`insert_loaded`).
    removals: u64,
}

type CellShard = Mutex<Shard>;

pub struct CellTable {
    shards: Box<[CellShard]>,
    /// Cells in all shards, changed under the shard lock of the change: `len_approx()` is
    /// read by every `Fs::balance` (once per write call), where summing the shards took and
    /// released all 128 shard locks (14 % of the CPU of a gc=none sustained bench run). A
    /// sharded counter, so that creates on 16 cores do not all bump one cache line.
    count: crate::stats::Counter,
    /// Records in the shards' `gone` maps.
    gone: crate::stats::Counter,
}

impl Default for CellTable {
    fn default() -> Self {
        CellTable {
            shards: (0..CELL_SHARDS).map(|_| Mutex::default()).collect(),
            count: Default::default(),
            gone: Default::default(),
        }
    }
}

impl CellTable {
    fn shard(&self, ino: Ino) -> &CellShard {
        &self.shards[ino as usize % CELL_SHARDS]
    }
    pub fn get(&self, ino: Ino) -> Option<Arc<InodeCell>> {
        self.shard(ino).lock().cells.get(&ino).cloned()
    }
    /// The cell of `ino`, or, when none is cached, the mark a load of it passes to
    /// `insert_loaded`.
    pub fn get_or_mark(&self, ino: Ino) -> Result<Arc<InodeCell>, u64> {
        let m = self.shard(ino).lock();
        m.cells.get(&ino).cloned().ok_or(m.removals)
    }
    /// Insert a new inode's cell unless present; returns the cell that is in the table.
    pub fn insert(&self, cell: Arc<InodeCell>) -> Arc<InodeCell> {
        let mut m = self.shard(cell.ino).lock();
        if m.gone.remove(&cell.ino).is_some() {
            self.gone.fetch_sub(1, Ordering::Relaxed);
        }
        let Shard { cells, .. } = &mut *m;
        cells
            .entry(cell.ino)
            .or_insert_with(|| {
                self.count.fetch_add(1, Ordering::Relaxed);
                cell
            })
            .clone()
    }
    /// Insert the cell of an inode read from disk after `get_or_mark` gave `mark`, unless
    /// one is present (then that one is returned and `st` dropped); it takes back what the
    /// inode's evicted cell knew about this checkpoint interval. None if a cell of the
    /// shard was removed since the mark: between the read and now another thread may have
    /// loaded the inode, changed it, written it back and evicted it (the cap relief does
    /// that under the shared op lock), and `st` would bring the older inode back; the
    /// caller reads it again.
    pub fn insert_loaded(&self, mut st: InodeState, mark: u64) -> Option<Arc<InodeCell>> {
        let mut m = self.shard(st.ino).lock();
        if let Some(c) = m.cells.get(&st.ino) {
            return Some(c.clone());
        }
        if m.removals != mark {
            return None;
        }
        let was = m.gone.remove(&st.ino);
        if was.is_some() {
            self.gone.fetch_sub(1, Ordering::Relaxed);
        }
        let was = was.unwrap_or_default();
        st.needs_cp = was.needs_cp;
        st.unsynced = was.unsynced;
        st.mlog = was.mlog;
        let c = InodeCell::new(st, was.is_new);
        c.names_left_at.store(was.names_left_at, Ordering::Relaxed);
        m.cells.insert(c.ino, c.clone());
        self.count.fetch_add(1, Ordering::Relaxed);
        Some(c)
    }
    pub fn remove(&self, ino: Ino) {
        let mut m = self.shard(ino).lock();
        if m.cells.remove(&ino).is_some() {
            m.removals += 1;
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
    }
    /// Cells in the table: exact when no insert, remove or evict runs at the same time (as
    /// the sum over the shards was, which was no snapshot either).
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed) as usize
    }
    /// Cells in the table within `COUNTER_SHARDS x COUNTER_BATCH` (one load).
    pub fn len_approx(&self) -> usize {
        self.count.approx() as usize
    }
    /// Make `len_approx` exact enough for a cache of `max` cells (`Counter::fit_to`).
    pub fn fit_to(&mut self, max: usize) {
        self.count.fit_to(max as u64);
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Evicted cells whose interval state is kept (`SinceCheckpoint`).
    pub fn gone_len(&self) -> usize {
        self.gone.load(Ordering::Relaxed) as usize
    }
    /// Whether `ino` was created since the last checkpoint, and its `names_left_at`: from
    /// its cell, or from what its cell knew when it was evicted (both false/0 for an inode
    /// neither knows of: it was last cached before the checkpoint).
    pub fn new_and_names_left(&self, ino: Ino) -> (bool, u64) {
        let m = self.shard(ino).lock();
        match m.cells.get(&ino) {
            Some(c) => (
                c.is_new.load(Ordering::Acquire),
                c.names_left_at.load(Ordering::Acquire),
            ),
            None => m
                .gone
                .get(&ino)
                .map_or((false, 0), |g| (g.is_new, g.names_left_at)),
        }
    }
    /// Forget what evicted cells knew about the interval that a checkpoint just ended
    /// (under the exclusive op lock).
    pub fn end_interval(&self) {
        for s in self.shards.iter() {
            let mut m = s.lock();
            let n = m.gone.len() as u64;
            m.gone.clear();
            self.gone.fetch_sub(n, Ordering::Relaxed);
        }
    }
    /// Snapshot of every cell, in inode order (the checkpoint locks them in this order).
    pub fn all(&self) -> Vec<Arc<InodeCell>> {
        self.lane(0, 1)
    }
    /// Snapshot of the cells of lane `k` of `n` (`ino % n == k`), in inode order; only the
    /// shards that can hold such inodes are visited when `n` divides the shard count.
    pub fn lane(&self, k: usize, n: usize) -> Vec<Arc<InodeCell>> {
        let whole = CELL_SHARDS % n == 0;
        let mut v: Vec<_> = self
            .shards
            .iter()
            .enumerate()
            .filter(|(i, _)| !whole || i % n == k)
            .flat_map(|(_, s)| {
                s.lock()
                    .cells
                    .values()
                    .filter(|c| c.ino as usize % n == k)
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        v.sort_by_key(|c| c.ino);
        v
    }
    /// Drop cells nobody holds that are clean and closed, until at most `keep` remain.
    /// `epoch` is the version of the last checkpoint (stable: the caller holds the op lock):
    /// what a dropped cell knows about the interval since it is kept for its next load
    /// (`SinceCheckpoint`), so that eviction needs no checkpoint first.
    /// Returns the cells dropped.
    pub fn evict(&self, keep: usize, epoch: u64) -> usize {
        let mut len = self.len();
        let mut dropped = 0;
        for s in self.shards.iter() {
            if len <= keep {
                break;
            }
            let mut m = s.lock();
            let Shard {
                cells,
                gone,
                removals,
            } = &mut *m;
            let before = cells.len();
            let mut kept = 0;
            cells.retain(|&ino, c| {
                if len <= keep || Arc::strong_count(c) > 1 || c.open.load(Ordering::Acquire) > 0 {
                    return true;
                }
                match c.try_lock() {
                    Some(st) if st.is_clean() && !st.freed => {
                        let was = SinceCheckpoint {
                            is_new: c.is_new.load(Ordering::Acquire),
                            needs_cp: st.needs_cp,
                            unsynced: st.unsynced,
                            mlog: st.mlog,
                            names_left_at: c.names_left_at.load(Ordering::Acquire),
                        };
                        if was.current(epoch) && gone.insert(ino, was).is_none() {
                            kept += 1;
                        }
                        len -= 1;
                        false
                    }
                    _ => true,
                }
            });
            dropped += before - cells.len();
            *removals += (before - cells.len()) as u64;
            self.count
                .fetch_sub((before - cells.len()) as u64, Ordering::Relaxed);
            self.gone.fetch_add(kept, Ordering::Relaxed);
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(ino: Ino) -> Arc<InodeCell> {
        let st = InodeState::new(ino, Box::new([0; 4096]), InodeHdr::default(), false);
        InodeCell::new(st, false)
    }

    /// The node index follows the cell's node map: a node a thread without the cell found
    /// (`InodeCell::node`) is marked gone when the holder removes it, trims it as clean or
    /// drains the map, and is no longer found; a dirty node survives the trim.
    #[test]
    fn nodes_leave_the_index_and_are_marked_gone_when_the_cache_drops_them() {
        let c = cell(3);
        let blk = || Box::new([0u8; 4096]);
        let mut st = c.lock();
        st.nodes.insert(10, blk(), false);
        st.nodes.insert(11, blk(), true);
        st.nodes.insert(12, blk(), false);
        st.nodes.insert(13, blk(), true);
        let found: Vec<NodeLock> = (10..14).map(|n| c.node(n).expect("indexed")).collect();
        assert_eq!(st.nodes.remove(10), Some(false));
        assert!(found[0].lock().gone && c.node(10).is_none());
        st.nodes.drop_clean();
        assert!(
            found[2].lock().gone && c.node(12).is_none(),
            "clean node trimmed"
        );
        assert!(
            !found[1].lock().gone && c.node(11).is_some(),
            "dirty node kept"
        );
        assert_eq!(st.nodes.len(), 2);
        // Replacing a cached node drops the old one.
        st.nodes.insert(13, blk(), false);
        assert!(found[3].lock().gone);
        assert!(!Arc::ptr_eq(&found[3], &c.node(13).unwrap()));
        assert_eq!(st.nodes.drain(), 1, "11 was dirty, the new 13 is clean");
        assert!(found[1].lock().gone && c.node(11).is_none() && c.node(13).is_none());
        assert!(st.nodes.is_empty());
    }

    fn counted(t: &CellTable) -> usize {
        t.shards.iter().map(|s| s.lock().cells.len()).sum()
    }

    /// A wait for a cell is charged to the role of the thread that holds it: an application
    /// thread waiting behind the flusher counts at `file_cell` with holder `flusher`, and
    /// the flusher waiting behind the application at `file_cell_flusher` with holder `app`.
    #[test]
    fn cell_waits_are_charged_to_the_holders_role() {
        use crate::waits::{as_role, cell_holders, Role};
        use std::sync::atomic::AtomicBool;
        let waits = |point: &str, holder: &str| {
            cell_holders()
                .iter()
                .filter(|r| r.0 == point && r.1 == holder)
                .map(|r| r.3)
                .sum::<u64>()
        };
        let c = cell(3);
        for (holder_role, waiter_role, point, holder) in [
            (Role::Flusher, Role::App, "file_cell", "flusher"),
            (Role::App, Role::Flusher, "file_cell_flusher", "app"),
        ] {
            let before = waits(point, holder);
            let _r = as_role(holder_role);
            // The wait is one only if the thread reaches the lock before it is let go: on a
            // loaded machine it may be preempted between its flag and the lock for longer
            // than the hold, so the hold doubles (20 ms to 640 ms) until a wait was seen.
            for attempt in 0..6 {
                let held = c.lock();
                let started = Arc::new(AtomicBool::new(false));
                let t = {
                    let (c, started) = (c.clone(), started.clone());
                    std::thread::spawn(move || {
                        let _r = as_role(waiter_role);
                        started.store(true, Ordering::Release);
                        drop(c.lock());
                    })
                };
                while !started.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                std::thread::sleep(std::time::Duration::from_millis(20 << attempt));
                drop(held);
                t.join().unwrap();
                if waits(point, holder) > before {
                    break;
                }
            }
            assert!(waits(point, holder) > before, "{point} < {holder}");
        }
    }

    /// The bytes a flusher visit copies never change under it: a write into a shared page
    /// changes a copy of its own, and the visit still recognises an untouched page.
    #[test]
    fn page_data_is_copied_on_write_while_shared() {
        let mut page = Page::new(PageData::zeroed(), true, false, false);
        page.bytes_mut()[0] = 1;
        let in_flight = page.data.clone();
        assert!(page.data.same(&in_flight));
        assert!(
            page.data.get_mut().is_none(),
            "shared bytes are not writable in place"
        );
        page.bytes_mut()[0] = 2;
        assert_eq!((in_flight[0], page.data[0]), (1, 2));
        assert!(!page.data.same(&in_flight));
        assert!(
            page.data.get_mut().is_some(),
            "the writer's copy is its own"
        );
    }

    /// The inode numbers of one shard (one residue mod 128) spread over a map's buckets:
    /// the low 12 bits of `InoHash` take over half the values for 4,096 of them (random
    /// keys: 63 %; the bare product, whose low 7 bits are the same for all, at most 32).
    #[test]
    fn ino_hash_spreads_one_shards_numbers() {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let h = BuildHasherDefault::<InoHash>::default();
        let buckets: std::collections::HashSet<u64> = (0..4096u32)
            .map(|k| h.hash_one(k * CELL_SHARDS as u32 + 5) & 4095)
            .collect();
        assert!(buckets.len() > 2048, "{} of 4096 buckets", buckets.len());
    }

    /// Eviction between checkpoints keeps what a cell knew about the interval, and only
    /// that: a load gets it back (and the record goes), a new cell of the number drops it,
    /// the checkpoint's `end_interval` drops all; `gone_len` counts the records throughout.
    #[test]
    fn evicted_cells_keep_their_interval_state_until_loaded_or_checkpointed() {
        let t = CellTable::default();
        let epoch = 7;
        let state =
            |ino: Ino| InodeState::new(ino, Box::new([0; 4096]), InodeHdr::default(), false);
        // 3: new; 4: a name changed; 5: nodes written unsynced, mlog pinned this interval;
        // 6: a directory a name left this interval; 8: nothing of this interval (its mlog
        // was pinned in an earlier one, and a name left it before).
        for ino in [3, 4, 5, 6, 8] {
            let c = t.insert(InodeCell::new(state(ino), ino == 3));
            let mut st = c.lock();
            st.needs_cp = ino == 4;
            st.unsynced = ino == 5;
            st.mlog = match ino {
                5 => Some((epoch, 1)),
                8 => Some((epoch - 1, 1)),
                _ => None,
            };
            let left = match ino {
                6 => epoch + 1,
                8 => epoch,
                _ => 0,
            };
            c.names_left_at.store(left, Ordering::Relaxed);
        }
        assert_eq!(t.evict(0, epoch), 5);
        assert_eq!((t.len(), t.gone_len()), (0, 4), "8 kept a record");
        assert_eq!(t.new_and_names_left(3), (true, 0));
        assert_eq!(t.new_and_names_left(6), (false, epoch + 1));
        assert_eq!(t.new_and_names_left(8), (false, 0));
        let mark = t.get_or_mark(4).err().expect("evicted");
        let c = t
            .insert_loaded(state(4), mark)
            .expect("no removal since the mark");
        assert!(c.lock().needs_cp && !c.is_new.load(Ordering::Relaxed));
        let mark = t.get_or_mark(5).err().expect("evicted");
        let c = t
            .insert_loaded(state(5), mark)
            .expect("no removal since the mark");
        assert!(c.lock().unsynced);
        assert_eq!(c.lock().mlog, Some((epoch, 1)));
        assert_eq!(t.gone_len(), 2);
        // A new inode of number 6 (freed and reused) does not inherit the record.
        let c = t.insert(InodeCell::new(state(6), true));
        assert_eq!(c.names_left_at.load(Ordering::Relaxed), 0);
        assert_eq!(t.gone_len(), 1);
        // A load whose shard dropped a cell since its mark reads again.
        let mark = t
            .get_or_mark(3 + CELL_SHARDS as Ino)
            .err()
            .expect("not cached");
        drop(c);
        t.remove(6 + CELL_SHARDS as Ino);
        t.evict(0, epoch);
        assert!(
            t.insert_loaded(state(3 + CELL_SHARDS as Ino), mark)
                .is_some(),
            "another shard's removal"
        );
        let mark = t.get_or_mark(3).err().expect("not cached");
        let _held = t.insert(InodeCell::new(state(3 + 2 * CELL_SHARDS as Ino), false));
        t.remove(3 + 2 * CELL_SHARDS as Ino);
        assert!(
            t.insert_loaded(state(3), mark).is_none(),
            "its shard removed a cell"
        );
        t.end_interval();
        assert_eq!(t.gone_len(), 0);
        assert_eq!(t.new_and_names_left(3), (false, 0));
    }

    /// `len()` (the counter) equals the cells in the shards after inserts (new and already
    /// present), removes (present and absent) and evictions (of cells held and not held).
    #[test]
    fn len_counts_the_cells_in_the_shards() {
        let t = CellTable::default();
        let inos: Vec<Ino> = (1..=300).map(|i| i * 7).collect();
        let held: Vec<_> = inos.iter().map(|&i| t.insert(cell(i))).collect();
        assert_eq!((t.len(), counted(&t)), (300, 300));
        // Already present: the table keeps its cell and its count.
        let again = t.insert(cell(7));
        assert!(Arc::ptr_eq(&again, &held[0]));
        drop(again);
        assert_eq!((t.len(), counted(&t)), (300, 300));
        t.remove(14);
        t.remove(14);
        t.remove(5);
        assert_eq!((t.len(), counted(&t)), (299, 299));
        // Held cells stay; drop the handles of all but the first 50 and evict down to 100.
        t.evict(0, 0);
        assert_eq!((t.len(), counted(&t)), (299, 299));
        let kept: Vec<_> = held[..50].to_vec();
        drop(held);
        t.evict(100, 0);
        assert_eq!(t.len(), counted(&t));
        assert_eq!(t.len(), 100);
        t.evict(0, 0);
        // The 50 kept, less ino 14 (removed above).
        assert_eq!((t.len(), counted(&t)), (49, 49));
        drop(kept);
        t.evict(0, 0);
        assert!(t.is_empty());
        assert_eq!(counted(&t), 0);
    }
}
