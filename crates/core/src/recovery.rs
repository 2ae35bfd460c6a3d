//! Roll-forward recovery (F2FS paper 2.7.2, Max 4.4 for several mlogs): replay what was
//! fsync'd after the checkpoint.
//!
//! fsync writes a file's dirty nodes to a warm node log (its mlog's), the inode last with
//! the FSYNC mark (and the DENT mark for a file created since the checkpoint). Each node
//! footer names the next block of its log (`next_blkaddr`), carries the tag of the
//! checkpoint it was written under and a sequence: together the node's *version*, from one
//! counter every node write of the mount takes the next value of (`FsInner::node_version`).
//! Mount walks every mlog's warm node log from its checkpointed head position while the
//! footers check out and carry the current tag, and merges the chains into one list
//! ordered by version (`FsyncOrder`): what follows works on that list, whatever chain
//! each node is on (a file's nodes may be spread over several).
//!
//! Decision table, per inode seen on the merged list:
//!
//! | list contents for the inode             | action                                      |
//! |-----------------------------------------|---------------------------------------------|
//! | no node with FSYNC                      | ignore (never made durable)                 |
//! | nodes up to the newest FSYNC-marked one | adopt the newest version of each of them    |
//! | nodes after the newest FSYNC mark       | ignore                                      |
//! | FSYNC inode with DENT                   | also put its name into its parent (replacing a stale entry of that name), oldest fsync first |
//! | adopted inode has nlink 0               | free it (it was unlinked while open)        |
//!
//! Conflicts between chains: two copies of one node (the same file fsync'd on two mlogs)
//! resolve to the newer version; two DENT inodes naming one entry (the first unlinked in
//! between, on another mlog) resolve to the later fsync, because names go back oldest
//! first. fsync only rolls forward a new inode whose parent lost no name by rename, rmdir,
//! or an unlink that left its file other links since the checkpoint, so a stale entry of
//! that name always belongs to a file unlinked (and freed) since, and replacing it is what
//! the unlink did (docs/DESIGN.md, "What fsync promises").
//!
//! Adopting sets the NAT, then reconciles block validity by comparing what the old and the
//! new version of the file's tree reach: blocks only the old tree reaches become invalid,
//! blocks only the new one reaches become valid and get their summary entries.
//! Anything recovered makes every log head move to a fresh section, and mount writes a
//! checkpoint before the volume is used. Until that checkpoint is durable a second cut
//! walks the same chains again, so the fresh sections are never the chains' own: the free
//! sections holding any walked node (superseded versions included) and the block each
//! chain ended at are prefree until then (`SegManager::keep_until_checkpoint`). Runs
//! single-threaded at mount: no locks of its own.

use crate::error::{Error, Result};
use crate::inner::FsInner;
use flashlog_dev::BlockDevice;
use flashlog_format::codec::zero_block;
use flashlog_format::cp::{Checkpoint, LogKind, Temp};
use flashlog_format::meta::{NatEntry, Summary};
use flashlog_format::node::{
    self, NodeKind, ADDRS_PER_BLOCK, ADDRS_PER_INODE, INODE_NIDS_COUNT, NIDS_PER_BLOCK,
};
use flashlog_format::sb::Geometry;
use flashlog_format::{BlkAddr, Ino, Nid, BLOCKS_PER_SEG, NEW_ADDR, NULL_ADDR};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;

/// What one version of a file's tree reaches.
#[derive(Default)]
struct Reach {
    nodes: HashMap<Nid, BlkAddr>,
    /// Data block -> (owning node, slot).
    data: HashMap<BlkAddr, (Nid, u16)>,
    reserved: u64,
}

fn read_node_at(
    fs: &FsInner,
    addr: BlkAddr,
    nid: Nid,
    ino: Ino,
) -> Result<Box<flashlog_format::codec::Block>> {
    if !fs.sb.geo.is_main(addr) {
        return Err(Error::Corrupt(format!(
            "node {nid} at {addr:#x} outside the main area"
        )));
    }
    let mut b = zero_block();
    fs.dev.read(addr, &mut b[..])?;
    let f = node::check_node(&b, Some(nid))?;
    if f.ino != ino {
        return Err(Error::Corrupt(format!(
            "node {nid} belongs to {} not {ino}",
            f.ino
        )));
    }
    Ok(b)
}

fn reach(fs: &FsInner, ino: Ino) -> Result<Reach> {
    let mut r = Reach::default();
    let addr = fs.nat.addr(ino);
    if addr == NULL_ADDR || fs.nat.ino(ino) != ino {
        return Ok(r);
    }
    let blk = read_node_at(fs, addr, ino, ino)?;
    r.nodes.insert(ino, addr);
    let hdr = node::InodeHdr::read(&blk)?;
    let add = |r: &mut Reach, a: BlkAddr, owner: Nid, slot: usize| match a {
        NULL_ADDR => {}
        NEW_ADDR => r.reserved += 1,
        _ => {
            r.data.insert(a, (owner, slot as u16));
        }
    };
    if hdr.flags & (node::iflag::INLINE_DATA | node::iflag::INLINE_DENTRY) == 0 {
        for s in 0..ADDRS_PER_INODE {
            add(&mut r, node::inode_addr(&blk, s), ino, s);
        }
    }
    if hdr.xattr_nid != 0 {
        let x = hdr.xattr_nid;
        r.nodes.insert(x, fs.nat.addr(x));
    }
    let levels = [1usize, 1, 2, 2, 3];
    let mut stack: Vec<(Nid, usize)> = (0..INODE_NIDS_COUNT)
        .map(|k| (node::inode_nid(&blk, k), levels[k]))
        .filter(|(n, _)| *n != 0)
        .collect();
    while let Some((nid, level)) = stack.pop() {
        if !fs.nat.valid(nid) || r.nodes.contains_key(&nid) {
            return Err(Error::Corrupt(format!(
                "inode {ino}: bad or repeated node {nid}"
            )));
        }
        let a = fs.nat.addr(nid);
        let b = read_node_at(fs, a, nid, ino)?;
        r.nodes.insert(nid, a);
        if level == 1 {
            for s in 0..ADDRS_PER_BLOCK {
                add(&mut r, node::dnode_addr(&b, s), nid, s);
            }
        } else {
            for s in 0..NIDS_PER_BLOCK {
                let c = node::indirect_nid(&b, s);
                if c != 0 {
                    stack.push((c, level - 1));
                }
            }
        }
    }
    Ok(r)
}

/// When a node was written, as far as roll-forward can tell: its node version (issue 12,
/// Max 4.4: every node write takes the next value of one global counter, `node_version`,
/// and stamps it into its footer), then the chain and the position on it. The version
/// orders writes across every mlog's chain; the chain and position only break ties, which
/// only a volume written before footers carried a sequence has (its nodes share one).
type FsyncOrder = (u64, usize, usize);

struct ChainNode {
    addr: BlkAddr,
    /// Where the walk went next (the next node, or where the chain ended).
    next: BlkAddr,
    nid: Nid,
    ino: Ino,
    flags: u32,
    kind: Option<NodeKind>,
    order: FsyncOrder,
}

/// Walk one warm node log (the `chain`-th) from its checkpointed position.
fn walk_chain(
    dev: &dyn BlockDevice,
    geo: &Geometry,
    ck: &Checkpoint,
    chain: usize,
    start: BlkAddr,
    out: &mut Vec<ChainNode>,
) -> Result<()> {
    let mut addr = start;
    let limit = geo.main_blocks();
    let mut seen = HashSet::new();
    let mut b = zero_block();
    let tag = node::cp_ver_tag(ck.version);
    for pos in 0..limit {
        if !geo.is_main(addr) || !seen.insert(addr) {
            break;
        }
        if dev.read(addr, &mut b[..]).is_err() {
            break;
        }
        let Ok(f) = node::check_node(&b, None) else {
            break;
        };
        if f.cp_ver != tag {
            break;
        }
        out.push(ChainNode {
            addr,
            next: f.next_blkaddr,
            nid: f.nid,
            ino: f.ino,
            flags: f.flags,
            kind: f.kind(),
            order: (f.version(), chain, pos as usize),
        });
        addr = f.next_blkaddr;
    }
    Ok(())
}

/// Every mlog's warm node log from its checkpointed position (unsorted).
fn walk_chains(dev: &dyn BlockDevice, geo: &Geometry, ck: &Checkpoint) -> Result<Vec<ChainNode>> {
    let mut chain = Vec::new();
    for (i, h) in ck
        .heads
        .iter()
        .filter(|h| h.kind == LogKind::Node && h.temp == Temp::Warm)
        .enumerate()
    {
        let start = if (h.blkoff as u64) < BLOCKS_PER_SEG {
            geo.seg_start(h.seg) + h.blkoff as u64
        } else if h.next_seg < geo.main_segments {
            geo.seg_start(h.next_seg)
        } else {
            continue;
        };
        walk_chain(dev, geo, ck, i, start, &mut chain)?;
    }
    Ok(chain)
}

/// Whether roll-forward would replay anything after checkpoint `ck`: an fsync-marked inode
/// on a chain (what makes a read-only mount refuse). Reads only the chains' node blocks:
/// `flashlog fsck` and `inspect` ask this without mounting, which held the volume's
/// tables (1.1 GiB for 4 TiB) on top of fsck's own.
pub fn fsync_pending(dev: &dyn BlockDevice, geo: &Geometry, ck: &Checkpoint) -> Result<bool> {
    Ok(walk_chains(dev, geo, ck)?.iter().any(is_fsync_inode))
}

/// An inode written by fsync (the mark roll-forward replays up to).
fn is_fsync_inode(c: &ChainNode) -> bool {
    c.flags & node::flag::FSYNC != 0 && c.kind == Some(NodeKind::Inode) && c.nid == c.ino
}

/// Replay fsync'd nodes. Returns the number of inodes recovered.
pub fn roll_forward(fs: &FsInner, ck: &Checkpoint) -> Result<u64> {
    let geo = fs.sb.geo.clone();
    let mut chain = walk_chains(&*fs.dev, &geo, ck)?;
    // Versions written from now on (this mount's own, before its first checkpoint) must
    // follow every one found, in case the chains are walked again (a cut before that
    // checkpoint lands). A sequence at or past `SEQ_CHECKPOINT_AT` (only a volume from
    // before the sequence, whose footers hold the version's high half there) is left: fsync
    // checkpoints from there on, and the next checkpoint starts a new tag.
    if let Some(max) = chain.iter().map(|c| c.order.0).max() {
        if (max as u32) < node::SEQ_CHECKPOINT_AT {
            fs.node_version.fetch_max(max + 1, Ordering::AcqRel);
        }
    }
    if chain.is_empty() {
        return Ok(0);
    }
    // One order over every mlog's chain: the nodes of one file may be spread over several
    // chains (a file is written by whichever mlog its writer maps to), and an fsync'd name
    // may be fsync'd again on another chain. From here on a position in `chain` is a
    // point in that order: "up to the last fsync mark" and "oldest first" are by version.
    chain.sort_unstable_by_key(|c| c.order);
    // Per inode: the position of its last fsync mark.
    let mut last_fsync: BTreeMap<Ino, usize> = BTreeMap::new();
    for (i, c) in chain.iter().enumerate() {
        if is_fsync_inode(c) {
            last_fsync.insert(c.ino, i);
        }
    }
    if last_fsync.is_empty() {
        return Ok(0);
    }
    if fs.opts.read_only {
        return Err(Error::Invalid(
            "the volume needs roll-forward recovery; mount it read-write once",
        ));
    }
    // Names to recover, with when their fsync happened: names are put back oldest first, so
    // that where two new inodes were fsync'd under one name (the first unlinked in between,
    // which only a checkpoint makes durable), the later fsync's inode ends up with the name.
    let mut dent: Vec<(FsyncOrder, Ino)> = Vec::new();
    for (&ino, &last) in &last_fsync {
        if !fs.nat.valid(ino) {
            continue;
        }
        let mut latest: HashMap<Nid, &ChainNode> = HashMap::new();
        for c in chain[..=last]
            .iter()
            .filter(|c| c.ino == ino && fs.nat.valid(c.nid))
        {
            latest.insert(c.nid, c);
        }
        let old = reach(fs, ino).unwrap_or_default();
        let saved: HashMap<Nid, NatEntry> = latest.keys().map(|&n| (n, fs.nat.entry(n))).collect();
        for (&nid, c) in &latest {
            fs.nat.set(nid, ino, c.addr);
        }
        let new = match reach(fs, ino) {
            Ok(r) => r,
            Err(e) => {
                // The fsync'd tree does not check out: keep the checkpointed file.
                tracing::warn!("roll-forward of inode {ino} skipped: {e}");
                for (&nid, e) in &saved {
                    fs.nat.set(nid, e.ino, e.addr);
                }
                continue;
            }
        };
        for (&nid, e) in &saved {
            if !new.nodes.contains_key(&nid) && !old.nodes.contains_key(&nid) {
                fs.nat.set(nid, e.ino, e.addr);
            }
        }
        reconcile(fs, ino, &old, &new)?;
        fs.stats
            .roll_forward_nodes
            .fetch_add(latest.len() as u64, Ordering::Relaxed);
        if chain[last].flags & node::flag::DENT != 0 {
            dent.push((chain[last].order, ino));
        }
    }
    // Log heads continue in fresh sections so that nothing recovered is overwritten. The
    // space budget held these sections out of every operation's reach (the recovery
    // reserve), so they are free now; mount holds the reserve again after its checkpoint.
    // Not in the chains' own sections: a cut before the recovery checkpoint is durable walks
    // them again (`SegManager::keep_until_checkpoint`; `chain` is in version order, oldest
    // first, the order it keeps them in when it cannot keep all).
    fs.seg.lend_recovery_reserve();
    fs.seg
        .keep_until_checkpoint(chain.iter().flat_map(|c| [c.addr, c.next]));
    fs.seg.move_heads_to_fresh()?;
    dent.sort_unstable();
    for (_, ino) in dent {
        recover_dentry(fs, ino)?;
    }
    for &ino in last_fsync.keys() {
        if let Ok(c) = fs.cell(ino) {
            let mut st = c.lock();
            if st.hdr.nlink == 0 {
                fs.free_inode(&mut st)?;
            }
        }
    }
    Ok(last_fsync.len() as u64)
}

fn reconcile(fs: &FsInner, ino: Ino, old: &Reach, new: &Reach) -> Result<()> {
    for (&nid, &oa) in &old.nodes {
        match new.nodes.get(&nid) {
            Some(&na) if na == oa => {}
            Some(_) => fs.seg.invalidate(oa),
            None => {
                fs.seg.invalidate(oa);
                fs.nat.free(nid);
                fs.valid_nodes.fetch_sub(1, Ordering::Relaxed);
                fs.release_blocks(1);
                if nid == ino {
                    fs.valid_inodes.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }
    for (&nid, &na) in &new.nodes {
        if old.nodes.get(&nid) == Some(&na) {
            continue;
        }
        if na != NULL_ADDR {
            fs.seg.set_valid(na);
            fs.seg.mark_section_used(na);
            fs.seg.set_class_kind(na, LogKind::Node);
            fs.seg.set_summary(
                na,
                Summary {
                    nid,
                    ofs: 0,
                    version: fs.nat.version(nid),
                },
            )?;
        }
        if !old.nodes.contains_key(&nid) {
            fs.nat.mark_used(nid);
            fs.valid_nodes.fetch_add(1, Ordering::Relaxed);
            fs.alloc_blocks.add(1);
            if nid == ino {
                fs.valid_inodes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    for &a in old.data.keys() {
        if !new.data.contains_key(&a) {
            fs.seg.invalidate(a);
            fs.release_blocks(1);
        }
    }
    for (&a, &(nid, slot)) in &new.data {
        if !old.data.contains_key(&a) {
            fs.seg.set_valid(a);
            fs.seg.mark_section_used(a);
            fs.seg.set_class_kind(a, LogKind::Data);
            fs.seg.set_summary(
                a,
                Summary {
                    nid,
                    ofs: slot,
                    version: fs.nat.version(nid),
                },
            )?;
            fs.alloc_blocks.add(1);
        }
    }
    if new.reserved >= old.reserved {
        fs.alloc_blocks.add(new.reserved - old.reserved);
    } else {
        fs.release_blocks(old.reserved - new.reserved);
    }
    Ok(())
}

/// Put a recovered new file's name back into its parent directory if it is missing.
fn recover_dentry(fs: &FsInner, ino: Ino) -> Result<()> {
    let c = fs.cell(ino)?;
    let (pino, name, mode, nlink) = {
        let st = c.lock();
        (st.hdr.pino, st.hdr.name.clone(), st.hdr.mode, st.hdr.nlink)
    };
    if nlink == 0 || name.is_empty() {
        return Ok(());
    }
    let Ok(pc) = fs.cell(pino) else {
        tracing::warn!("roll-forward: parent {pino} of inode {ino} is gone; the file has no name");
        return Ok(());
    };
    let mut pst = pc.lock();
    if !pst.is_dir() {
        return Ok(());
    }
    if let Some(f) = fs.dir_find(&mut pst, &name)? {
        if f.ino == ino {
            return Ok(());
        }
        // The name still points at an older file whose unlink or replacement was not
        // durable: the fsync'd new file wins (F2FS recover_dentry does the same). Never
        // replace a directory.
        let oc = fs.cell(f.ino)?;
        let mut ost = oc.lock();
        if ost.is_dir() {
            tracing::warn!(
                "roll-forward: {:?} in {pino} is a directory; inode {ino} stays nameless",
                String::from_utf8_lossy(&name)
            );
            return Ok(());
        }
        fs.dir_remove(&mut pst, &f)?;
        ost.hdr.nlink = ost.hdr.nlink.saturating_sub(1);
        ost.dirty = true;
        if ost.hdr.nlink == 0 {
            fs.free_inode(&mut ost)?;
        }
    }
    // Every type, as the entry was made (a FIFO came back as a regular file's entry before:
    // found in review, 2026-11-27).
    fs.dir_insert(&mut pst, &name, ino, crate::fs::ftype_of(mode))?;
    pst.dirty = true;
    Ok(())
}
