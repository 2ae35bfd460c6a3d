//! Node ids (found in review, 2026-11-27, fourth session): nids handed out for an inode
//! that an unlink freed meanwhile, and nids that only a checkpoint gives back.
//!
//! An operation takes its file's cell (`FsInner::cell`, an `Arc`) and then waits for the
//! cell's lock. If an unlink frees the inode while it waits (`free_inode`: nodes and nid
//! freed, `freed` set, the cell dropped from the table), the operation then holds a dead
//! cell. `write`, `setattr`, `fsync`, `open` and `set_acl` check `st.freed` and answer
//! ENOENT; `setxattr` (for a name that is not an ACL) and `fallocate` did not: they allocated
//! a nid (`store_xattrs`: a new xattr node; `preallocate` -> `locate` -> `new_node`: a
//! direct node) and blocks for the dead inode. Nothing ever wrote or freed that cell
//! again (it is in no table), so the nid stays allocated for the rest of the mount
//! (`statfs.files_free` one lower after every checkpoint), and `valid_nodes` /
//! `valid_blocks` count nodes and blocks no inode reaches: the next checkpoint records
//! them and fsck finds the pack's counts wrong, after every later mount too.
//!
//! The interleaving is forced with the cell lock itself: the test holds the victim's cell
//! lock; the unlink parks on it (having taken the cell), then the second operation parks on
//! it (having taken the cell too: seen in the cell's `Arc` count); the test lets go, the
//! unlink (first in the lock's queue) frees the inode, and the second operation runs on
//! the dead cell.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        ..MountOptions::default()
    }
}

fn fresh() -> (Arc<dyn BlockDevice>, Arc<Fs>) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((128 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Arc::new(Fs::mount(dev.clone(), opts()).unwrap());
    (dev, fs)
}

/// Wait (at most 20 s) until `cond` holds.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Create `/victim` (closed, checkpointed), then: hold its cell lock; unlink it on one
/// thread (parks on the lock holding the cell), run `op` on another (parks on the lock
/// holding the cell); release. The unlink frees the inode first, then `op` runs on the
/// freed cell. Returns `op`'s result and the statfs before the create, after the sync
/// that follows. The volume is then unmounted and checked by fsck (returned).
fn op_on_a_cell_freed_while_it_waited<T: Send + std::fmt::Debug + 'static>(
    op: impl FnOnce(&Fs, Ino) -> Result<T> + Send + 'static,
) -> (
    String,
    StatFs,
    StatFs,
    flashlog_core::fsck::FsckReport,
    StatFs,
) {
    let (dev, fs) = fresh();
    fs.sync().unwrap();
    let before = fs.statfs();
    let ino = fs.create(ROOT_INO, b"victim", 0o644, 0, 0).unwrap().ino;
    fs.sync().unwrap();
    let cell = fs.inner().cells.get(ino).expect("cached");
    let root = fs.inner().cells.get(ROOT_INO).expect("cached");
    let held = cell.lock();
    // The table and this test keep the cell.
    let base = Arc::strong_count(&cell);
    let unlink = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.unlink(ROOT_INO, b"victim"))
    };
    // The unlink holds the directory and has taken the victim's cell.
    wait_until("unlink takes the victim's cell", || {
        Arc::strong_count(&cell) > base && root.try_lock().is_none()
    });
    std::thread::sleep(Duration::from_millis(200)); // parked on the cell lock
    let second = {
        let fs = fs.clone();
        std::thread::spawn(move || op(&fs, ino))
    };
    wait_until("the second operation takes the victim's cell", || {
        Arc::strong_count(&cell) > base + 1
    });
    std::thread::sleep(Duration::from_millis(200)); // parked behind the unlink
    drop(held);
    drop(root);
    unlink.join().unwrap().expect("unlink");
    let r = format!("{:?}", second.join().unwrap());
    drop(cell);
    fs.sync().unwrap();
    let after = fs.statfs();
    Arc::try_unwrap(fs)
        .ok()
        .expect("one handle")
        .unmount()
        .unwrap();
    let rep = flashlog_core::fsck::fsck(&*dev).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let remounted = fs.statfs();
    fs.unmount().unwrap();
    (r, before, after, rep, remounted)
}

/// `op` on a cell an unlink freed while it waited leaves every nid and block free, and
/// fsck clean, before and after a remount.
fn leaks_nothing<T: Send + std::fmt::Debug + 'static>(
    what: &str,
    op: impl FnOnce(&Fs, Ino) -> Result<T> + Send + 'static,
) {
    let (r, before, after, rep, remounted) = op_on_a_cell_freed_while_it_waited(op);
    assert!(
        after.files_free == before.files_free
            && after.blocks_free == before.blocks_free
            && rep.is_clean()
            && remounted.blocks_free == before.blocks_free,
        "{what} on the freed inode returned {r}; files_free {} -> {} (after unlink + sync), \
         blocks_free {} -> {} (remounted: {}); fsck: {:?}",
        before.files_free,
        after.files_free,
        before.blocks_free,
        after.blocks_free,
        remounted.blocks_free,
        rep.findings
    );
}

/// `setxattr` of a user attribute waits for the cell while an unlink frees the inode,
/// then stores the attribute in a new xattr node of the dead inode: a nid that is never
/// freed (files_free one short after the sync) and a node that `valid_nodes` counts and
/// nothing reaches (fsck: "valid node count N+1 but N nodes are reachable").
/// Expected: ENOENT, as `set_acl` (the ACL branch of the same call) already answers.
#[test]
fn setxattr_on_an_inode_freed_while_it_waited_allocates_no_nid() {
    leaks_nothing("setxattr", |fs, ino| {
        fs.setxattr(ino, b"user.k", b"v", XattrMode::Any)
    });
}

/// `fallocate` past the inode's own block slots waits for the cell while an unlink frees
/// the inode, then creates a direct node (a nid) and reserves a block for the dead inode:
/// both stay allocated (files_free and blocks_free short after the sync, blocks_free still
/// short after a remount) and the checkpoint's counts are wrong (fsck).
/// Expected: ENOENT, as `write` answers.
#[test]
fn fallocate_on_an_inode_freed_while_it_waited_allocates_no_nid() {
    leaks_nothing("fallocate", |fs, ino| {
        // Block 1000: past the 456 slots of the inode, in the first direct node.
        fs.fallocate(ino, FallocMode::KeepSize, 1000 * 4096, 4096)
    });
}

/// Nids freed by unlinks become allocatable only after the checkpoint that records them
/// (nat.rs), but nothing asks for that checkpoint when the nids run out: `make_node` gets
/// `NoSpace` from `NatTable::alloc` and returns ENOSPC at once (the block budget, by
/// contrast, checkpoints and retries in `reserve_space` before it answers ENOSPC), and no
/// cap is crossed by creating and unlinking empty files (inode blocks are not counted in
/// `dirty_nodes`, unlinked cells leave the cache), so only the timer (30 s by default)
/// would. Sequence: on an otherwise empty 64 MiB volume (max_nid = its main-area blocks),
/// create and unlink one file in a loop, no checkpoint between: after about max_nid
/// cycles (well under a second here, far under the timer's 30 s) `create` fails with
/// ENOSPC while statfs reports the volume nearly empty of blocks and every file deleted.
#[test]
fn create_after_unlinks_does_not_run_out_of_nids_before_a_checkpoint() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((64 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let files = fs.statfs().files;
    let t0 = Instant::now();
    let mut failed = None;
    for i in 0..2 * files {
        if let Err(e) = fs.create(ROOT_INO, b"f", 0o644, 0, 0) {
            failed = Some((i, e));
            break;
        }
        fs.unlink(ROOT_INO, b"f").unwrap();
    }
    let st = fs.statfs();
    fs.unmount().unwrap();
    let rep = flashlog_core::fsck::fsck(&*dev).unwrap();
    assert!(rep.is_clean(), "{:?}", rep.findings);
    if let Some((i, e)) = failed {
        panic!(
            "create #{i} failed with {e:?} after {:?} (no file exists; statfs: files {}, \
             files_free {}, blocks {}, blocks_free {})",
            t0.elapsed(),
            st.files,
            st.files_free,
            st.blocks,
            st.blocks_free
        );
    }
}
