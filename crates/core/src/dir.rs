//! Directories: lookup, insert, remove and list over inline dentries or the multi-level hash
//! of dentry blocks (format::dir). Callers hold the directory's cell lock.
//!
//! Readdir offsets: 0 is ".", 1 is "..", and an entry in block b at slot s has offset
//! 2 + b * 200 + s. Entries never move (inline slots map onto block 0 unchanged), so an
//! offset stays valid for as long as its entry exists.
//!
//! Holes: a dentry block whose address is NULL_ADDR holds no entries (never written, or
//! given back when its last entry went: `dir_remove` punches it as F2FS's
//! `f2fs_delete_entry` does). Lookups and listings skip a hole without caching a page for
//! it; an insert makes a page only in the block it inserts into.
//!
//! Page cache: dentry pages stay cached after write-back, up to
//! `config::DENTRY_CACHE_PER_DIR` per directory; past it, loading another page (and the
//! write-back, `FsInner::writeback_pages_max`) drops the clean ones.

use crate::cell::{InodeState, Page, PageData};
use crate::error::{Error, Result};
use crate::inner::FsInner;
use flashlog_format::codec::zero_block;
use flashlog_format::dir::{
    self as fdir, Dentry, BLOCK_LAYOUT, BLOCK_SLOTS, INLINE_LAYOUT, MAX_DEPTH,
};
use flashlog_format::node::{self, iflag};
use flashlog_format::{Ino, BLOCK_SIZE, NEW_ADDR, NULL_ADDR};

/// One directory entry as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: Ino,
    pub name: Vec<u8>,
    pub ftype: u8,
    /// Offset to continue listing after this entry.
    pub next_offset: u64,
}

/// Where an entry was found.
#[derive(Clone, Copy, Debug)]
pub struct Found {
    pub ino: Ino,
    pub ftype: u8,
    /// Block index (None: inline), slot.
    pub block: Option<u64>,
    pub slot: usize,
}

impl FsInner {
    fn hash(&self, name: &[u8]) -> u32 {
        fdir::name_hash(self.sb.hash_seed, name)
    }

    /// Load dentry block `idx` into the page cache (zeros for a hole).
    fn dir_page(&self, st: &mut InodeState, idx: u64) -> Result<()> {
        if !self.dir_page_if_any(st, idx)? {
            Self::cache_dir_page(st, idx, PageData::zeroed());
        }
        Ok(())
    }

    /// Load dentry block `idx` into the page cache unless it is a hole with no page cached
    /// (NULL_ADDR, or NEW_ADDR, which no directory uses): returns whether a page is cached.
    /// A hole holds no entries; a lookup that missed cached a zero page for every hole it
    /// probed before (a directory of 480 colliding names, 40 levels deep: 300 misses cached
    /// 19,414 pages, 130 MiB, found in review 2026-11-28).
    fn dir_page_if_any(&self, st: &mut InodeState, idx: u64) -> Result<bool> {
        if st.pages.contains_key(&idx) {
            return Ok(true);
        }
        let addr = self.block_addr(st, idx)?;
        if addr == NULL_ADDR || addr == NEW_ADDR {
            return Ok(false);
        }
        let mut data = zero_block();
        self.read_block(addr, &mut data)?;
        fdir::check_dentry_block(&data)
            .map_err(|e| Error::Corrupt(format!("directory {} block {idx}: {e}", st.ino)))?;
        Self::cache_dir_page(st, idx, PageData::copy_of(&data));
        Ok(true)
    }

    /// Cache a clean page `idx` (not cached yet), first dropping the directory's clean
    /// pages if it has `DENTRY_CACHE_PER_DIR` cached (its dirty ones stay). Callers use the
    /// page right away and never keep another page across this call.
    fn cache_dir_page(st: &mut InodeState, idx: u64, data: PageData) {
        if st.pages.len() >= crate::config::DENTRY_CACHE_PER_DIR {
            st.pages.retain(|_, p| p.dirty);
        }
        st.pages.insert(idx, Page::new(data, false, false, false));
    }

    fn dir_page_dirty(&self, st: &mut InodeState, idx: u64) -> Result<()> {
        let addr_null =
            !st.pages.get(&idx).is_some_and(|p| p.dirty) && self.block_addr(st, idx)? == NULL_ADDR;
        let p = st.pages.get(&idx).expect("loaded");
        if !p.dirty {
            if addr_null && !p.reserved {
                // The block first, then the nodes, as for file pages (file.rs
                // `new_dirty_page`): a refusal leaves no node made.
                self.reserve_blocks(1)?;
                if let Err(e) = self.locate(st, idx, true) {
                    self.release_blocks(1);
                    return Err(e);
                }
                st.pages.get_mut(&idx).expect("loaded").reserved = true;
                st.hdr.blocks += 1;
            }
            let p = st.pages.get_mut(&idx).expect("loaded");
            p.dirty = true;
            st.dirty_pages += 1;
            self.charge_dirty_page();
        }
        Ok(())
    }

    fn is_inline_dir(st: &InodeState) -> bool {
        st.hdr.flags & iflag::INLINE_DENTRY != 0
    }

    fn corrupt_dir(st: &InodeState, e: impl std::fmt::Display) -> Error {
        Error::Corrupt(format!("directory {}: {e}", st.ino))
    }

    pub fn dir_find(&self, st: &mut InodeState, name: &[u8]) -> Result<Option<Found>> {
        let h = self.hash(name);
        if Self::is_inline_dir(st) {
            let d = INLINE_LAYOUT
                .find(node::inode_area(&st.node), name, h)
                .map_err(|e| Self::corrupt_dir(st, e))?;
            return Ok(d.map(|d| Found {
                ino: d.ino,
                ftype: d.ftype,
                block: None,
                slot: d.slot,
            }));
        }
        for level in 0..st.hdr.depth.min(MAX_DEPTH) {
            for idx in fdir::bucket_blocks(level, h) {
                if !self.dir_page_if_any(st, idx)? {
                    continue;
                }
                let d = BLOCK_LAYOUT
                    .find(&st.pages[&idx].data[..], name, h)
                    .map_err(|e| Self::corrupt_dir(st, e))?;
                if let Some(d) = d {
                    return Ok(Some(Found {
                        ino: d.ino,
                        ftype: d.ftype,
                        block: Some(idx),
                        slot: d.slot,
                    }));
                }
            }
        }
        Ok(None)
    }

    /// Grow an inline directory into block 0, keeping slot positions.
    fn convert_inline_dir(&self, st: &mut InodeState) -> Result<()> {
        let mut data = zero_block();
        INLINE_LAYOUT
            .copy_into_block(node::inode_area(&st.node), &mut data[..])
            .map_err(|e| Self::corrupt_dir(st, e))?;
        self.new_dirty_page(st, 0, PageData::copy_of(&data))?;
        node::inode_area_mut(&mut st.node).fill(0);
        st.hdr.flags &= !iflag::INLINE_DENTRY;
        st.hdr.depth = 1;
        st.hdr.size = fdir::level_start(1) * BLOCK_SIZE as u64;
        self.dirty_inode(st);
        Ok(())
    }

    /// Add `name -> ino`. The caller checked that the name is absent.
    pub fn dir_insert(&self, st: &mut InodeState, name: &[u8], ino: Ino, ftype: u8) -> Result<()> {
        let h = self.hash(name);
        let need = fdir::slots_for(name.len());
        if Self::is_inline_dir(st) {
            let area = node::inode_area_mut(&mut st.node);
            if let Some(slot) = INLINE_LAYOUT.find_space(area, need) {
                INLINE_LAYOUT.insert(area, slot, name, h, ino, ftype);
                self.dirty_inode(st);
                return Ok(());
            }
            self.convert_inline_dir(st)?;
        }
        let mut level = 0;
        loop {
            if level >= MAX_DEPTH {
                return Err(Error::NoSpace);
            }
            for idx in fdir::bucket_blocks(level, h) {
                // A hole has room for any name: its page is made here, for the insert
                // (and dropped again if the insert is refused).
                let hole = !self.dir_page_if_any(st, idx)?;
                if hole {
                    Self::cache_dir_page(st, idx, PageData::zeroed());
                }
                if let Some(slot) = BLOCK_LAYOUT.find_space(&st.pages[&idx].data[..], need) {
                    if let Err(e) = self.dir_page_dirty(st, idx) {
                        if hole {
                            st.pages.remove(&idx);
                        }
                        return Err(e);
                    }
                    let p = st.pages.get_mut(&idx).expect("loaded");
                    BLOCK_LAYOUT.insert(&mut p.bytes_mut()[..], slot, name, h, ino, ftype);
                    if level >= st.hdr.depth {
                        st.hdr.depth = level + 1;
                    }
                    let end = fdir::level_start(st.hdr.depth) * BLOCK_SIZE as u64;
                    st.hdr.size = st.hdr.size.max(end);
                    self.dirty_inode(st);
                    return Ok(());
                }
                if hole {
                    st.pages.remove(&idx); // never: an empty block has room for any name
                }
            }
            level += 1;
        }
    }

    pub fn dir_remove(&self, st: &mut InodeState, f: &Found) -> Result<()> {
        match f.block {
            None => {
                INLINE_LAYOUT.remove(node::inode_area_mut(&mut st.node), f.slot);
                self.dirty_inode(st);
            }
            Some(idx) => {
                self.dir_page(st, idx)?;
                if BLOCK_LAYOUT.only_entry(&st.pages[&idx].data[..], f.slot) {
                    self.dir_punch_block(st, idx)?;
                } else {
                    self.dir_page_dirty(st, idx)?;
                    BLOCK_LAYOUT.remove(
                        &mut st.pages.get_mut(&idx).expect("loaded").bytes_mut()[..],
                        f.slot,
                    );
                }
            }
        }
        Ok(())
    }

    /// Give back dentry block `idx` (cached) of the locked directory, whose last entry is
    /// being removed, as F2FS's `f2fs_delete_entry` punches a dentry block whose bitmap
    /// empties: its page is dropped (its reservation and dirty debt given back), its block
    /// freed as a file's punch hole frees one (`FsInner::free_data_addr`: the address is
    /// invalidated, so it stays readable as of the last checkpoint and is not reused before
    /// the next one, and the cleaners and the space budget see it go), its slot set to
    /// NULL_ADDR and the inode's block count lowered. The node tree stays, as in F2FS.
    /// Entries never move, so readdir offsets of the others stay valid. The only fallible
    /// step (`locate`, which may read a node the cache dropped) comes before any change.
    fn dir_punch_block(&self, st: &mut InodeState, idx: u64) -> Result<()> {
        let at = self.locate(st, idx, false)?;
        // A page dirtied over a hole and never written gives back its reservation (its
        // slot is still NULL_ADDR).
        self.drop_pages(st, idx, idx + 1);
        if let Some((nid, slot)) = at {
            if self.dnode_get(st, nid, slot) != NULL_ADDR {
                // Read and cleared under one hold of the node's lock (a `scale` collector
                // remaps slots under it).
                let addr = self.dnode_replace(st, nid, slot, NULL_ADDR);
                self.free_data_addr(st, addr);
            }
        }
        self.dirty_inode(st);
        Ok(())
    }

    /// Point an existing entry at another inode (rename over an existing name).
    pub fn dir_set(&self, st: &mut InodeState, f: &Found, ino: Ino, ftype: u8) -> Result<()> {
        match f.block {
            None => {
                INLINE_LAYOUT.set_ino(node::inode_area_mut(&mut st.node), f.slot, ino, ftype);
                self.dirty_inode(st);
            }
            Some(idx) => {
                self.dir_page(st, idx)?;
                self.dir_page_dirty(st, idx)?;
                BLOCK_LAYOUT.set_ino(
                    &mut st.pages.get_mut(&idx).expect("loaded").bytes_mut()[..],
                    f.slot,
                    ino,
                    ftype,
                );
            }
        }
        Ok(())
    }

    /// Number of dentry blocks the directory spans.
    fn dir_blocks(st: &InodeState) -> u64 {
        fdir::level_start(st.hdr.depth.min(MAX_DEPTH))
    }

    /// Entries from readdir offset `offset` on (not "." / ".."), at most `max`.
    pub fn dir_list(&self, st: &mut InodeState, offset: u64, max: usize) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        let pos = offset.saturating_sub(2);
        let conv = |d: Dentry, block: u64| DirEntry {
            ino: d.ino,
            next_offset: 2 + block * BLOCK_SLOTS as u64 + d.slot as u64 + 1,
            name: d.name,
            ftype: d.ftype,
        };
        if Self::is_inline_dir(st) {
            let es = INLINE_LAYOUT
                .entries(node::inode_area(&st.node))
                .map_err(|e| Self::corrupt_dir(st, e))?;
            out.extend(
                es.into_iter()
                    .filter(|d| d.slot as u64 >= pos)
                    .take(max)
                    .map(|d| conv(d, 0)),
            );
            return Ok(out);
        }
        let mut idx = pos / BLOCK_SLOTS as u64;
        let end = Self::dir_blocks(st);
        while idx < end && out.len() < max {
            if !st.pages.contains_key(&idx) {
                match self.locate(st, idx, false)? {
                    None => {
                        let p = node::node_path(idx).ok_or(Error::TooBig)?;
                        let (start, count) =
                            node::dnode_range(p.node_ofs[p.depth]).unwrap_or((idx, 1));
                        idx = (start + count).max(idx + 1);
                        continue;
                    }
                    Some((nid, slot)) if self.dnode_get(st, nid, slot) == NULL_ADDR => {
                        idx += 1;
                        continue;
                    }
                    Some(_) => {}
                }
            }
            self.dir_page(st, idx)?;
            let es = BLOCK_LAYOUT
                .entries(&st.pages[&idx].data[..])
                .map_err(|e| Self::corrupt_dir(st, e))?;
            let skip = if idx == pos / BLOCK_SLOTS as u64 {
                (pos % BLOCK_SLOTS as u64) as usize
            } else {
                0
            };
            for d in es.into_iter().filter(|d| d.slot >= skip) {
                if out.len() >= max {
                    break;
                }
                out.push(conv(d, idx));
            }
            idx += 1;
        }
        Ok(out)
    }

    pub fn dir_is_empty(&self, st: &mut InodeState) -> Result<bool> {
        Ok(self.dir_list(st, 2, 1)?.is_empty())
    }
}
