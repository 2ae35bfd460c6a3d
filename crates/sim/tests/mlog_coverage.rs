//! What the crash simulator's workloads exercise on volumes with several mlogs (issue 12
//! item 3): fsyncs that roll forward on different mlogs' chains between two checkpoints,
//! files whose fsyncs land on two chains (the driver's `Op::Remap`), and renames between
//! directories on different mlogs. A generator change that stops producing these would
//! leave the multi-mlog recovery untested while every crash run still passed; this test
//! fails instead.

use flashlog_core::{Fs, GcPolicy, Ino};
use flashlog_dev::RamDevice;
use flashlog_sim::crash::{drive_observed, Script};
use flashlog_sim::image::{base_image_mlogs, sim_mount_options};
use flashlog_sim::model::Model;
use flashlog_sim::workload::Op;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Default, Debug)]
struct Seen {
    /// Checkpoint intervals in which fsyncs rolled forward on at least two mlogs.
    intervals_on_two_mlogs: u64,
    /// Files fsync'd (rolled forward) on two mlogs within one checkpoint interval.
    files_on_two_mlogs: u64,
    /// New files fsync'd under a name an earlier rolled-forward file of the same interval
    /// had, from another mlog (the DENT conflict).
    dent_conflicts_across_mlogs: u64,
    /// Renames between two directories on different mlogs.
    cross_mlog_renames: u64,
}

fn run(seed: u64, mlogs: u32, seen: &mut Seen) {
    let dev: Arc<RamDevice> = Arc::new(base_image_mlogs(mlogs).unwrap());
    let fs = Fs::mount(dev, sim_mount_options(GcPolicy::F2fs)).unwrap();
    // Within the current checkpoint interval: mlogs each file rolled forward on, and the
    // (parent, name) -> (ino, mlog) of rolled-forward new files.
    let mut per_file: BTreeMap<Ino, BTreeSet<u16>> = BTreeMap::new();
    let mut names: BTreeMap<(Ino, Vec<u8>), (Ino, u16)> = BTreeMap::new();
    let mut counted = false;
    let mut cps = 0;
    let mut obs = |fs: &Fs, op: &Op, m: &Model| {
        let mlog = |ino: Ino| fs.inner().mlog_of(ino);
        let now = fs.stats().checkpoints;
        if now > cps {
            cps = now;
            per_file.clear();
            names.clear();
            counted = false;
            return;
        }
        match op {
            Op::Rename {
                parent, new_parent, ..
            } if mlog(*parent) != mlog(*new_parent) => seen.cross_mlog_renames += 1,
            Op::Fsync { ino, .. } => {
                let ml = mlog(*ino);
                let set = per_file.entry(*ino).or_default();
                set.insert(ml);
                if set.len() == 2 {
                    seen.files_on_two_mlogs += 1;
                }
                if let Some(key) = m.new_since_cp.get(ino) {
                    if let Some(&(other, om)) = names.get(key) {
                        if other != *ino && om != ml {
                            seen.dent_conflicts_across_mlogs += 1;
                        }
                    }
                    names.insert(key.clone(), (*ino, ml));
                }
                let all: BTreeSet<u16> = per_file.values().flatten().copied().collect();
                if all.len() >= 2 && !counted {
                    seen.intervals_on_two_mlogs += 1;
                    counted = true;
                }
            }
            _ => {}
        }
    };
    let r = drive_observed(&fs, Script::Seed(seed), &mut obs);
    assert!(r.is_ok(), "seed {seed}: the workload failed");
    fs.abandon();
}

#[test]
fn multi_mlog_workloads_spread_fsyncs_over_chains() {
    for mlogs in [2u32, 4] {
        let mut seen = Seen::default();
        for seed in 0..300 {
            run(seed, mlogs, &mut seen);
        }
        eprintln!("{mlogs} mlogs, seeds 0..300: {seen:?}");
        assert!(seen.intervals_on_two_mlogs >= 80, "{mlogs} mlogs: {seen:?}");
        assert!(seen.files_on_two_mlogs >= 40, "{mlogs} mlogs: {seen:?}");
        assert!(
            seen.dent_conflicts_across_mlogs >= 30,
            "{mlogs} mlogs: {seen:?}"
        );
        assert!(seen.cross_mlog_renames >= 10, "{mlogs} mlogs: {seen:?}");
    }
}

/// Under `mlog=thread` (issue 12 item 2) the driver runs each operation on one of four lane
/// threads of known slots: fsync'd inodes must end up pinned to every mlog, two mlogs'
/// chains must carry fsyncs in one checkpoint interval, a name must move between chains
/// (the DENT conflict), and an inode keeps one mlog within an interval whichever lanes
/// write it (what roll-forward relies on).
#[test]
fn thread_map_workloads_spread_fsyncs_over_mlogs() {
    use flashlog_core::MlogMap;
    for mlogs in [2u32, 4] {
        let (mut per_mlog, mut intervals_on_two, mut dent_across) =
            (vec![0u64; mlogs as usize], 0u64, 0u64);
        for seed in 0..150 {
            let dev: Arc<RamDevice> = Arc::new(base_image_mlogs(mlogs).unwrap());
            let opts = flashlog_core::MountOptions {
                mlog_map: MlogMap::Thread,
                ..sim_mount_options(GcPolicy::F2fs)
            };
            let fs = Fs::mount(dev, opts).unwrap();
            // Per checkpoint epoch (the core's pin is (epoch, mlog), set by the inode's
            // first node write of the interval): the pinned mlog of each fsync'd inode.
            let mut pinned: BTreeMap<(u64, Ino), u16> = BTreeMap::new();
            let mut names: BTreeMap<(u64, Ino, Vec<u8>), (Ino, u16)> = BTreeMap::new();
            let mut counted = BTreeSet::new();
            let mut obs = |fs: &Fs, op: &Op, m: &Model| {
                let Op::Fsync { ino, .. } = op else { return };
                let Some((epoch, ml)) = fs.inner().cell(*ino).ok().and_then(|c| c.lock().mlog)
                else {
                    return;
                };
                if let Some(&was) = pinned.get(&(epoch, *ino)) {
                    assert_eq!(
                        was, ml,
                        "seed {seed}: ino {ino} moved from mlog {was} to {ml} within \
                         checkpoint interval {epoch}"
                    );
                }
                pinned.insert((epoch, *ino), ml);
                per_mlog[ml as usize] += 1;
                if let Some(key) = m.new_since_cp.get(ino) {
                    let k = (epoch, key.0, key.1.clone());
                    if let Some(&(other, om)) = names.get(&k) {
                        if other != *ino && om != ml {
                            dent_across += 1;
                        }
                    }
                    names.insert(k, (*ino, ml));
                }
                let all: BTreeSet<u16> = pinned
                    .iter()
                    .filter(|((e, _), _)| *e == epoch)
                    .map(|(_, &m)| m)
                    .collect();
                if all.len() >= 2 && counted.insert(epoch) {
                    intervals_on_two += 1;
                }
            };
            let r = drive_observed(&fs, Script::Seed(seed), &mut obs);
            assert!(r.is_ok(), "seed {seed}: the workload failed");
            fs.abandon();
        }
        eprintln!(
            "mlog=thread, {mlogs} mlogs, seeds 0..150: fsyncs per pinned mlog {per_mlog:?}, \
             intervals with fsyncs on two mlogs {intervals_on_two}, DENT conflicts across \
             mlogs {dent_across}"
        );
        assert!(per_mlog.iter().all(|&n| n >= 100), "{per_mlog:?}");
        assert!(intervals_on_two >= 50, "{intervals_on_two}");
        assert!(dent_across >= 30, "{dent_across}");
    }
}
