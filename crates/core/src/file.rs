//! File data: read, buffered write, truncate, fallocate, inline data.
//!
//! All functions take the inode's cell locked (`&mut InodeState`). Writes go to the page
//! cache; the write path (writeback) is in `inner`. Invariant: `hdr.blocks` counts data
//! blocks held or reserved (real addresses, NEW_ADDR reservations and dirty pages over holes),
//! and `FsInner::alloc_blocks` moves with it.

use crate::cell::{InodeState, Page, PageData};
use crate::error::{Error, Result};
use crate::inner::FsInner;
use flashlog_format::codec::{zero_block, Block};
use flashlog_format::node::{self, iflag, MAX_FILE_BLOCKS, MAX_INLINE_DATA};
use flashlog_format::{Nid, BLOCK_SIZE, NEW_ADDR, NULL_ADDR};
use std::sync::atomic::Ordering;

const BS: u64 = BLOCK_SIZE as u64;
/// Largest file size in bytes.
pub const MAX_FILE_BYTES: u64 = MAX_FILE_BLOCKS * BS;

/// What a page not yet in the cache starts from (`page_for_write_init`).
enum PageInit<'a> {
    /// Exactly these bytes: the write covers the whole block.
    Whole(&'a Block),
    /// Zeros, then the block's stored contents if `read` (a partial write keeps the rest).
    Zeros { read: bool },
}

/// fallocate modes the core implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FallocMode {
    /// Reserve blocks and extend the size.
    Allocate,
    /// Reserve blocks, keep the size.
    KeepSize,
    /// Free the range (keeps the size), reads return zeros.
    PunchHole,
    /// `FALLOC_FL_ZERO_RANGE`: reads of the range return zeros and its blocks stay
    /// allocated (preallocated, as `Allocate` leaves them); extends the size.
    ZeroRange,
    /// `FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE`: the same, keeping the size.
    ZeroRangeKeepSize,
}

/// `st.pages.insert(idx, page)` (replacing any page there), returning the page inserted
/// from the same search.
fn insert_page(st: &mut InodeState, idx: u64, page: Page) -> &mut Page {
    match st.pages.entry(idx) {
        std::collections::btree_map::Entry::Vacant(v) => v.insert(page),
        std::collections::btree_map::Entry::Occupied(mut o) => {
            o.insert(page);
            o.into_mut()
        }
    }
}

impl FsInner {
    fn is_inline(st: &InodeState) -> bool {
        st.hdr.flags & iflag::INLINE_DATA != 0
    }

    /// Read up to `buf.len()` bytes at `off`. Returns the bytes read (0 at or past EOF).
    pub fn file_read(&self, st: &mut InodeState, off: u64, buf: &mut [u8]) -> Result<usize> {
        if st.is_dir() {
            return Err(Error::IsDir);
        }
        let size = st.hdr.size;
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(size - off) as usize;
        if Self::is_inline(st) {
            let area = node::inode_area(&st.node);
            let (s, e) = (off as usize, off as usize + n);
            if e > area.len() {
                return Err(Error::Corrupt(format!(
                    "inline inode {} has size {size}",
                    st.ino
                )));
            }
            buf[..n].copy_from_slice(&area[s..e]);
            return Ok(n);
        }
        let mut done = 0usize;
        let mut blk = zero_block();
        while done < n {
            let pos = off + done as u64;
            let idx = pos / BS;
            let in_page = (pos % BS) as usize;
            let take = (BLOCK_SIZE - in_page).min(n - done);
            let out = &mut buf[done..done + take];
            if let Some(p) = st.pages.get(&idx) {
                out.copy_from_slice(&p.data[in_page..in_page + take]);
            } else {
                match self.block_addr(st, idx)? {
                    NULL_ADDR | NEW_ADDR => out.fill(0),
                    addr => {
                        // Read the run of physically contiguous blocks in one request.
                        let first_page_rest = n - done;
                        if in_page == 0 && first_page_rest >= 2 * BLOCK_SIZE {
                            let run = self.contiguous_run(
                                st,
                                idx,
                                addr,
                                (first_page_rest / BLOCK_SIZE) as u64,
                            )?;
                            if run > 1 {
                                let bytes = run as usize * BLOCK_SIZE;
                                if run_is_pending_free(self, addr, run) {
                                    self.dev.read(addr, &mut buf[done..done + bytes])?;
                                    self.stats.dev_read_blocks.fetch_add(run, Ordering::Relaxed);
                                    done += bytes;
                                    continue;
                                }
                            }
                        }
                        self.read_block(addr, &mut blk)?;
                        out.copy_from_slice(&blk[in_page..in_page + take]);
                    }
                }
            }
            done += take;
        }
        self.stats
            .app_read_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// How many blocks from `idx` (at `addr`) are mapped to consecutive addresses with no
    /// cached page in between, up to `max`.
    fn contiguous_run(&self, st: &mut InodeState, idx: u64, addr: u64, max: u64) -> Result<u64> {
        let mut run = 1;
        while run < max.min(256) {
            if st.pages.contains_key(&(idx + run)) || self.block_addr(st, idx + run)? != addr + run
            {
                break;
            }
            run += 1;
        }
        Ok(run)
    }

    /// Insert page `idx` as a new dirty page over a hole, reserving its block first.
    pub(crate) fn new_dirty_page(
        &self,
        st: &mut InodeState,
        idx: u64,
        data: PageData,
    ) -> Result<()> {
        self.new_dirty_page_at(st, idx, data, None).map(drop)
    }

    /// `new_dirty_page` where the caller may already have located the block's direct node
    /// and slot under the same cell lock (`located`: every node above the block exists and
    /// is loaded, so `locate` with `create` would make nothing); returns the page.
    fn new_dirty_page_at<'s>(
        &self,
        st: &'s mut InodeState,
        idx: u64,
        data: PageData,
        located: Option<(Nid, usize)>,
    ) -> Result<&'s mut Page> {
        // The nodes that will map the block exist from now on (F2FS allocates the dnode at
        // write_begin): their user space and checkpoint debt are taken here, by the write,
        // and writeback never has to create a node.
        // The data block first: `locate` makes the nodes only once their blocks are
        // reserved too, so a refusal leaves nothing made.
        self.reserve_blocks(1)?;
        if located.is_none() {
            if let Err(e) = self.locate(st, idx, true) {
                self.release_blocks(1);
                return Err(e);
            }
        }
        st.hdr.blocks += 1;
        st.dirty_pages += 1;
        self.charge_dirty_page();
        self.dirty_inode(st);
        Ok(insert_page(st, idx, Page::new(data, true, true, false)))
    }

    /// Move inline data out of the inode into page 0.
    pub fn convert_inline(&self, st: &mut InodeState) -> Result<()> {
        if !Self::is_inline(st) {
            return Ok(());
        }
        if st.hdr.size > MAX_INLINE_DATA as u64 {
            // Reads refuse it too; fsck reports it.
            return Err(Error::Corrupt(format!(
                "inode {}: inline data of size {}",
                st.ino, st.hdr.size
            )));
        }
        let size = st.hdr.size as usize;
        if size > 0 {
            let mut data = zero_block();
            let area = node::inode_area(&st.node);
            data[..size].copy_from_slice(&area[..size]);
            self.new_dirty_page(st, 0, PageData::copy_of(&data))?;
        }
        node::inode_area_mut(&mut st.node).fill(0);
        st.hdr.flags &= !iflag::INLINE_DATA;
        self.dirty_inode(st);
        Ok(())
    }

    /// Change page `idx` with `change`, loading it first unless `overwrite_all`; marks it
    /// dirty and reserves space if it lies over a hole. A page not cached starts as zeros.
    fn page_for_write(
        &self,
        st: &mut InodeState,
        idx: u64,
        overwrite_all: bool,
        change: impl FnOnce(&mut Page),
    ) -> Result<()> {
        self.page_for_write_init(
            st,
            idx,
            PageInit::Zeros {
                read: !overwrite_all,
            },
            change,
        )
    }

    /// `page_for_write` with the contents a page not yet cached starts from: a whole-block
    /// write builds it from the caller's bytes in one copy (no zero-fill that the write would
    /// overwrite at once: 17 % of the FUSE daemon's CPU in sequential write, issue 13).
    fn page_for_write_init(
        &self,
        st: &mut InodeState,
        idx: u64,
        init: PageInit<'_>,
        change: impl FnOnce(&mut Page),
    ) -> Result<()> {
        // One search of the page map where the page is cached (the overwrite), one more
        // where it is not (the insert, which hands the page back; none before it for an
        // append); and one `locate` for a new page over a hole: its result serves the
        // insert (it was searched four times, then twice and three times, and located
        // twice).
        // An append (past every cached page) misses without a search: the last key is the
        // end of the map's rightmost edge, while a search compares keys in every node on
        // the way (~180 instructions in a map of a few thousand dirty pages).
        let cached = match st.pages.last_key_value() {
            Some((&last, _)) if idx <= last => st.pages.get_mut(&idx),
            _ => None,
        };
        if let Some(p) = cached {
            if p.wb {
                // A flusher is copying the page's bytes with the cell released: this write
                // changes them (into a copy of its own, below), so the copy in flight will be
                // orphaned. Its block is paid here, from the writer's allowance, and the page
                // is an ordinary dirty page again (`Page::wb`).
                p.wb = false;
                self.seg.space.charge(1);
            }
            if let PageInit::Whole(src) = init {
                match p.data.get_mut() {
                    Some(d) => *d = *src,
                    None => p.data = PageData::copy_of(src),
                }
            }
            if !p.dirty {
                p.dirty = true;
                st.dirty_pages += 1;
                self.charge_dirty_page();
            }
            change(p);
            return Ok(());
        }
        let located = self.locate(st, idx, false)?;
        let addr = match located {
            Some((nid, slot)) => self.dnode_get(st, nid, slot),
            None => NULL_ADDR,
        };
        let (mut data, read) = match init {
            // Allocated and copied in one step (`Box::new(*src)` may build it on the stack).
            PageInit::Whole(src) => (PageData::copy_of(src), false),
            PageInit::Zeros { read } => (PageData::zeroed(), read),
        };
        let p = if addr == NULL_ADDR {
            // Dirty and charged as it goes in.
            self.new_dirty_page_at(st, idx, data, located)?
        } else {
            if read && addr != NEW_ADDR {
                self.read_block(addr, data.get_mut().expect("not shared yet"))?;
            }
            st.dirty_pages += 1;
            self.charge_dirty_page();
            insert_page(st, idx, Page::new(data, true, false, false))
        };
        change(p);
        Ok(())
    }

    /// Buffered write. Returns bytes written: short if space ran out part way, or where the
    /// write passes the largest file size (`MAX_FILE_BYTES`).
    pub fn file_write(&self, st: &mut InodeState, off: u64, data: &[u8]) -> Result<usize> {
        if st.is_dir() {
            return Err(Error::IsDir);
        }
        // Not `ok_or(Error::TooBig)?`: that builds and drops an `Error` on every call.
        if off.checked_add(data.len() as u64).is_none() {
            return Err(Error::TooBig);
        }
        if data.is_empty() {
            return Ok(0);
        }
        // As Linux's `generic_write_check_limits`: EFBIG only at or past the limit; a
        // write that straddles it is short.
        if off >= MAX_FILE_BYTES {
            return Err(Error::TooBig);
        }
        let data = &data[..data.len().min((MAX_FILE_BYTES - off) as usize)];
        let end = off + data.len() as u64;
        if Self::is_inline(st) {
            if self.opts.inline && end <= MAX_INLINE_DATA as u64 {
                node::inode_area_mut(&mut st.node)[off as usize..end as usize]
                    .copy_from_slice(data);
                st.hdr.size = st.hdr.size.max(end);
                self.dirty_inode(st);
                self.stats
                    .app_write_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                return Ok(data.len());
            }
            self.convert_inline(st)?;
        }
        let mut done = 0usize;
        while done < data.len() {
            let pos = off + done as u64;
            let idx = pos / BS;
            let in_page = (pos % BS) as usize;
            let take = (BLOCK_SIZE - in_page).min(data.len() - done);
            let src = &data[done..done + take];
            let r = match <&Block>::try_from(src) {
                // A whole block: the page is these bytes (in_page is 0 when take is a block).
                Ok(whole) => self.page_for_write_init(st, idx, PageInit::Whole(whole), |_| ()),
                Err(_) => {
                    // A page past EOF needs no read: its old contents are zeros by definition.
                    let past_eof = idx * BS >= st.hdr.size;
                    self.page_for_write(st, idx, past_eof, |p| {
                        p.bytes_mut()[in_page..in_page + take].copy_from_slice(src)
                    })
                }
            };
            match r {
                Ok(()) => {}
                Err(Error::NoSpace) if done > 0 => break,
                Err(e) => return Err(e),
            }
            done += take;
            st.hdr.size = st.hdr.size.max(off + done as u64);
        }
        self.dirty_inode(st);
        self.stats
            .app_write_bytes
            .fetch_add(done as u64, Ordering::Relaxed);
        Ok(done)
    }

    /// Zero bytes `[from, to)` of page `idx` if the block exists (page cache or disk).
    fn zero_in_page(&self, st: &mut InodeState, idx: u64, from: usize, to: usize) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        if !st.pages.contains_key(&idx) {
            let addr = self.block_addr(st, idx)?;
            if addr == NULL_ADDR || addr == NEW_ADDR {
                return Ok(());
            }
        }
        self.page_for_write(st, idx, false, |p| p.bytes_mut()[from..to].fill(0))
    }

    /// Drop cached pages with index >= `first` (and < `end`), releasing reservations.
    pub(crate) fn drop_pages(&self, st: &mut InodeState, first: u64, end: u64) {
        let idxs: Vec<u64> = st.pages.range(first..end).map(|(&i, _)| i).collect();
        for i in idxs {
            let p = st.pages.remove(&i).expect("present");
            if p.dirty {
                st.dirty_pages -= 1;
                self.drop_dirty_page(p.wb);
            }
            if p.reserved {
                self.release_blocks(1);
                st.hdr.blocks = st.hdr.blocks.saturating_sub(1);
            }
        }
    }

    /// Set the file size (truncate or extend with a hole).
    pub fn file_truncate(&self, st: &mut InodeState, size: u64) -> Result<()> {
        if st.is_dir() {
            return Err(Error::IsDir);
        }
        if size > MAX_FILE_BYTES {
            return Err(Error::TooBig);
        }
        let old = st.hdr.size;
        if Self::is_inline(st) {
            if size <= MAX_INLINE_DATA as u64 {
                if size < old {
                    node::inode_area_mut(&mut st.node)[size as usize..].fill(0);
                }
                st.hdr.size = size;
                self.dirty_inode(st);
                return Ok(());
            }
            self.convert_inline(st)?;
        }
        if size <= old {
            // The same size too: blocks preallocated past the end (fallocate KEEP_SIZE, or
            // one that failed part way) are freed, as on F2FS and ext4 (`truncate -s` to
            // the size is how a user gives them back).
            let first_free = size.div_ceil(BS);
            self.drop_pages(st, first_free, u64::MAX);
            self.free_blocks_from(st, first_free)?;
            // Zero the tail of the last partial page so that a later extension reads zeros.
            if size < old && size % BS != 0 {
                self.zero_in_page(st, size / BS, (size % BS) as usize, BLOCK_SIZE)?;
            }
        }
        st.hdr.size = size;
        self.dirty_inode(st);
        Ok(())
    }

    /// fallocate. A failure part way (ENOSPC while preallocating, an error while punching)
    /// keeps what was done, and the inode is dirtied for it: its block count moved while
    /// only direct nodes were dirtied (found in review, 2026-11-27: the checkpoint wrote the
    /// nodes and not the inode, and fsck found "header says 800 blocks, tree holds 816").
    pub fn file_fallocate(
        &self,
        st: &mut InodeState,
        mode: FallocMode,
        off: u64,
        len: u64,
    ) -> Result<()> {
        let blocks = st.hdr.blocks;
        let r = self.file_fallocate_steps(st, mode, off, len);
        if r.is_err() && st.hdr.blocks != blocks {
            self.dirty_inode(st);
        }
        r
    }

    fn file_fallocate_steps(
        &self,
        st: &mut InodeState,
        mode: FallocMode,
        off: u64,
        len: u64,
    ) -> Result<()> {
        if st.is_dir() {
            return Err(Error::IsDir);
        }
        if len == 0 {
            return Err(Error::Invalid("fallocate length is zero"));
        }
        let end = off.checked_add(len).ok_or(Error::TooBig)?;
        if end > MAX_FILE_BYTES {
            return Err(Error::TooBig);
        }
        match mode {
            FallocMode::Allocate | FallocMode::KeepSize => {
                if Self::is_inline(st) {
                    if end <= MAX_INLINE_DATA as u64 {
                        if mode == FallocMode::Allocate && end > st.hdr.size {
                            st.hdr.size = end;
                            self.dirty_inode(st);
                        }
                        return Ok(());
                    }
                    self.convert_inline(st)?;
                }
                self.preallocate(st, off / BS, end.div_ceil(BS))?;
                if mode == FallocMode::Allocate && end > st.hdr.size {
                    st.hdr.size = end;
                }
                self.dirty_inode(st);
            }
            FallocMode::PunchHole => {
                if Self::is_inline(st) {
                    Self::zero_inline(st, off, end);
                } else {
                    self.zero_range(st, off, end)?;
                }
                self.dirty_inode(st);
            }
            FallocMode::ZeroRange | FallocMode::ZeroRangeKeepSize => {
                // F2FS's zero range (`f2fs_zero_range`): every block of the range ends up
                // allocated and reading zeros. The holes are preallocated first, so that
                // ENOSPC comes before any byte changes and a failed call leaves the file as
                // it was: under FUSE the kernel keeps its cached pages of the range when
                // the call fails, so a range zeroed by a failed call read as the old data
                // until those pages went, and an fsync then lost them (found 2026-11-28,
                // sixth session, by `scripts/fuse-crash.py` on a 96 % full volume). Then
                // `zero_allocated_range` zeroes the rest without taking space.
                if Self::is_inline(st) && end > MAX_INLINE_DATA as u64 {
                    self.convert_inline(st)?;
                }
                if Self::is_inline(st) {
                    Self::zero_inline(st, off, end);
                } else {
                    self.preallocate(st, off / BS, end.div_ceil(BS))?;
                    self.zero_allocated_range(st, off, end)?;
                }
                if mode == FallocMode::ZeroRange && end > st.hdr.size {
                    st.hdr.size = end;
                }
                self.dirty_inode(st);
            }
        }
        Ok(())
    }

    /// Zero bytes [off, end) of an inline file's data (up to its size; the area past the
    /// size is zero already).
    fn zero_inline(st: &mut InodeState, off: u64, end: u64) {
        let s = off.min(st.hdr.size) as usize;
        let e = end.min(st.hdr.size) as usize;
        if s < e {
            node::inode_area_mut(&mut st.node)[s..e].fill(0);
        }
    }

    /// Make bytes [off, end) of a (not inline) file read as zeros: partial blocks at the
    /// edges are zeroed in their pages, whole blocks freed (punched).
    fn zero_range(&self, st: &mut InodeState, off: u64, end: u64) -> Result<()> {
        if let Some((first_full, end_full)) = self.zero_partial_edges(st, off, end)? {
            self.drop_pages(st, first_full, end_full);
            self.punch_blocks(st, first_full, end_full)?;
        }
        Ok(())
    }

    /// Zero the bytes of [off, end) that lie in partial blocks, in their pages (the last
    /// one only within the file's blocks). Returns the whole blocks [first, end) of the
    /// range left to the caller, or `None` when the range lies inside one block.
    fn zero_partial_edges(
        &self,
        st: &mut InodeState,
        off: u64,
        end: u64,
    ) -> Result<Option<(u64, u64)>> {
        let first_full = off.div_ceil(BS);
        let end_full = end / BS;
        if first_full > end_full {
            self.zero_in_page(st, off / BS, (off % BS) as usize, (end % BS) as usize)?;
            return Ok(None);
        }
        if off % BS != 0 {
            self.zero_in_page(st, off / BS, (off % BS) as usize, BLOCK_SIZE)?;
        }
        if end % BS != 0 && end_full < st.hdr.size.div_ceil(BS) {
            self.zero_in_page(st, end_full, 0, (end % BS) as usize)?;
        }
        Ok(Some((first_full, end_full)))
    }

    /// Make bytes [off, end) of a (not inline) file whose blocks are all allocated read as
    /// zeros, without taking space: partial blocks at the edges and dirty cached pages are
    /// zeroed in their pages; every other block written before is swapped for a
    /// preallocated one (`NEW_ADDR`, as `f2fs_do_zero_range`): its old block is invalidated
    /// and its charge in the space budget and in the inode's block count passes to the new.
    fn zero_allocated_range(&self, st: &mut InodeState, off: u64, end: u64) -> Result<()> {
        let Some((first_full, end_full)) = self.zero_partial_edges(st, off, end)? else {
            return Ok(());
        };
        for idx in first_full..end_full {
            if let Some(p) = st.pages.get(&idx) {
                if p.dirty {
                    // Its debt and any write-back in flight stay as they are.
                    self.zero_in_page(st, idx, 0, BLOCK_SIZE)?;
                    continue;
                }
                st.pages.remove(&idx);
            }
            if let Some((nid, slot)) = self.locate(st, idx, false)? {
                let addr = self.dnode_get(st, nid, slot);
                if addr != NULL_ADDR && addr != NEW_ADDR {
                    self.dnode_replace(st, nid, slot, NEW_ADDR);
                    self.seg.invalidate(addr);
                }
            }
        }
        Ok(())
    }

    /// Preallocate file blocks [first, end): every hole gets a reserved block, mapped as
    /// `NEW_ADDR` (reads as zeros until written). Cached pages have theirs already. A
    /// failure part way (ENOSPC) gives back every block this call preallocated, as tmpfs
    /// does: under FUSE's write-back cache the kernel keeps the file's size itself and
    /// learns of no size a failed call set, so growing the size over them, as F2FS and ext4
    /// do, would leave the daemon's size and the kernel's apart (found 2026-11-28: before,
    /// a failed fallocate of the free space plus 256 MiB kept 900 MiB past the end with
    /// the size unchanged, and every later write got ENOSPC). Direct nodes it made stay,
    /// empty, with the file.
    fn preallocate(&self, st: &mut InodeState, first: u64, end: u64) -> Result<()> {
        let mut made = Vec::new();
        let r = self.preallocate_into(st, first, end, &mut made);
        if r.is_err() {
            for &(nid, slot) in &made {
                self.dnode_set(st, nid, slot, NULL_ADDR);
                st.hdr.blocks -= 1;
                self.release_blocks(1);
            }
        }
        r
    }

    /// `preallocate`'s work; `made` collects the slots it mapped (direct node, slot).
    fn preallocate_into(
        &self,
        st: &mut InodeState,
        first: u64,
        end: u64,
        made: &mut Vec<(Nid, usize)>,
    ) -> Result<()> {
        for idx in first..end {
            if st.pages.contains_key(&idx) {
                continue;
            }
            // Only a hole takes a block: look without creating first. The data block is
            // reserved before `locate` makes any node, as in `new_dirty_page`.
            if let Some((nid, slot)) = self.locate(st, idx, false)? {
                if self.dnode_get(st, nid, slot) != NULL_ADDR {
                    continue;
                }
            }
            self.reserve_blocks(1)?;
            let (nid, slot) = match self.locate(st, idx, true) {
                Ok(found) => found.expect("create"),
                Err(e) => {
                    self.release_blocks(1);
                    return Err(e);
                }
            };
            st.hdr.blocks += 1;
            self.dnode_set(st, nid, slot, NEW_ADDR);
            made.push((nid, slot));
        }
        Ok(())
    }

    /// Free the blocks of file indexes [first, end), skipping unmapped subtrees quickly.
    fn punch_blocks(&self, st: &mut InodeState, first: u64, end: u64) -> Result<()> {
        let mut idx = first;
        while idx < end {
            match self.locate(st, idx, false)? {
                None => {
                    // No direct node here: skip to the start of the next direct node's range.
                    let p = node::node_path(idx).ok_or(Error::TooBig)?;
                    let (start, count) = node::dnode_range(p.node_ofs[p.depth]).unwrap_or((idx, 1));
                    idx = (start + count).max(idx + 1);
                }
                Some((nid, slot)) => {
                    let addr = self.dnode_replace(st, nid, slot, NULL_ADDR);
                    if addr != NULL_ADDR {
                        self.free_data_addr(st, addr);
                    }
                    idx += 1;
                }
            }
        }
        Ok(())
    }

    /// Contents of a symlink.
    pub fn read_all(&self, st: &mut InodeState) -> Result<Vec<u8>> {
        let mut v = vec![0u8; st.hdr.size.min(1 << 20) as usize];
        let is_dir = st.is_dir();
        if is_dir {
            return Err(Error::IsDir);
        }
        let n = self.file_read(st, 0, &mut v)?;
        v.truncate(n);
        Ok(v)
    }
}

/// The device can serve `run` blocks from `addr` directly (none still buffered in a head).
fn run_is_pending_free(fs: &FsInner, addr: u64, run: u64) -> bool {
    let mut probe: Block = [0u8; BLOCK_SIZE];
    !(0..run).any(|k| fs.seg.read_pending(addr + k, &mut probe))
}
