//! GC policy specs: the list of designs a bench run compares, as data.
//!
//! Owns: [`PolicySpec`] (parsed from `f2fs`, `f2fs-lfs`, `scale`, `scale:N`, each optionally
//! followed by emulator overrides for that policy's device, `/KEY=VALUE` repeated, e.g.
//! `device/vop_degree=1.2` or `none/compaction_period=0`; the host keys are
//! `io_threads=N`, the log's queue depth, e.g. `f2fs/io_threads=2`, `flushers=N`, the
//! background write-back threads, e.g. `f2fs/flushers=4`, `own_writeback=1`, writers
//! over the hard dirty cap writing back their own file, and `cp_tail=0`, `none`'s
//! checkpoints excluding operations until their pack is durable), the candidate
//! list [`CANDIDATES`], and the probe that finds which candidates the core implements.
//!
//! Adding a policy is one row of [`TABLE`]. The default set is every row marked `default`
//! whose GC policy is in `GcPolicy::implemented()`; an explicit `--policies` list is checked
//! by a probe mount on a small RAM device so that an unimplemented policy fails up front with
//! the core's own message.

use anyhow::{bail, Result};
use flashlog_core::config::{ScaleFeatures, MAX_FLUSHERS, MAX_IO_THREADS};
use flashlog_core::{AllocMode, Fs, GcPolicy, MkfsOptions, MountOptions};
use flashlog_dev::{BlockDevice, RamDevice};
use std::sync::Arc;

/// One row per policy name: (name, GC policy, allocation mode, takes a worker count, in the
/// default set, what it is).
type Row = (&'static str, GcPolicy, AllocMode, bool, bool, &'static str);
const TABLE: &[Row] = &[
    (
        "f2fs",
        GcPolicy::F2fs,
        AllocMode::Adaptive,
        false,
        true,
        "F2FS default mode: one collector, SSR when space runs short",
    ),
    (
        "f2fs-lfs",
        GcPolicy::F2fs,
        AllocMode::Lfs,
        false,
        true,
        "F2FS mode=lfs (F2FS-L): one collector, never writes into holes",
    ),
    (
        "scale",
        GcPolicy::Scale,
        AllocMode::Lfs,
        true,
        true,
        "ScaleLFS: dedicated per-core collectors (scale:N = N workers)",
    ),
    (
        "scale-adaptive",
        GcPolicy::Scale,
        AllocMode::Adaptive,
        true,
        false,
        "ScaleLFS collectors with F2FS's threaded logging (not in the paper, which runs LFS mode)",
    ),
    (
        "device",
        GcPolicy::Device,
        AllocMode::Lfs,
        false,
        false,
        "D2FS: the SSD cleans (coupled GC, ftl=coupled, chosen for this policy on an emulated \
         SSD), the host applies its migration upcalls",
    ),
    (
        "zf2fs",
        GcPolicy::F2fs,
        AllocMode::Lfs,
        false,
        false,
        "zoned F2FS (the D2FS paper's peer): F2FS in lfs mode over the emulator's zoned FTL \
         (ftl=zoned, chosen for this policy on an emulated SSD): sections are zones, a freed \
         section is a zone reset",
    ),
    (
        "none",
        GcPolicy::None,
        AllocMode::Lfs,
        false,
        false,
        "IPLFS: no cleaning at all, a never-reused 2^64-block space (ftl=interval, chosen for \
         this policy on an emulated SSD), dead blocks only discarded",
    ),
];

/// A policy to run: a name from the table and its parameters.
/// ScaleLFS ablation rows (paper Table 3): `scale-simple` is per-core GC without any of
/// the techniques; `scale+svp+dws+...` adds them in the paper's order. `scale` has all.
pub const ABLATION: &[&str] = &[
    "scale-simple",
    "scale+svp",
    "scale+svp+dws",
    "scale+svp+dws+lsu",
    "scale+svp+dws+lsu+cvs",
    "scale",
];

fn parse_features(name: &str) -> Option<ScaleFeatures> {
    if name == "scale-simple" {
        return Some(ScaleFeatures::NONE);
    }
    let rest = name.strip_prefix("scale+")?;
    let mut f = ScaleFeatures::NONE;
    for t in rest.split('+') {
        match t {
            "svp" => f.svp = true,
            "dws" => f.dws = true,
            "lsu" => f.lsu = true,
            "cvs" => f.cvs = true,
            "dpb" => f.dpb = true,
            "pdl" => f.pdl = true,
            _ => return None,
        }
    }
    Some(f)
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PolicySpec {
    /// The spec as given (`scale:4`), used as the label in tables and plots.
    pub label: String,
    pub name: String,
    #[serde(skip)]
    pub gc: GcPolicy,
    #[serde(skip)]
    pub alloc_mode: AllocMode,
    /// GC workers (`scale:N`); None = the policy's default.
    pub workers: Option<usize>,
    /// ScaleLFS techniques (ablation); all on unless the name says otherwise.
    #[serde(skip)]
    pub features: ScaleFeatures,
    /// Emulator overrides for this policy's device only (`/KEY=VALUE` suffixes), applied
    /// after `--ssd-set` and after the FTL the policy picks.
    pub ssd_set: Vec<String>,
    /// `/io_threads=N`: the file system's log-write threads (its queue depth to the device)
    /// instead of the policy's default.
    pub io_threads: Option<usize>,
    /// `/flushers=N`: background write-back threads (lanes) instead of the default one.
    pub flushers: Option<usize>,
    /// `/own_writeback=1`: writers over the hard dirty cap write back their own file
    /// (`MountOptions::own_writeback`).
    pub own_writeback: Option<bool>,
    /// `/cp_tail=0`: `gc=none`'s room-making checkpoints exclude operations until their
    /// pack is durable (`MountOptions::cp_tail`; on by default).
    pub cp_tail: Option<bool>,
}

/// A host key's switch `v` (1/on or 0/off), or an error naming the policy and the key.
fn host_flag(label: &str, key: &str, v: &str) -> Result<bool> {
    match v.trim() {
        "1" | "on" => Ok(true),
        "0" | "off" => Ok(false),
        _ => bail!("policy {label:?}: {key} is 1 or 0 (got {v:?})"),
    }
}

/// A host key's count `v` in `1..=max`, or an error naming the policy and the key.
fn host_count(label: &str, key: &str, v: &str, max: usize) -> Result<usize> {
    match v.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => bail!("policy {label:?}: {key} must be between 1 and {max} (got {v:?})"),
    }
}

impl PolicySpec {
    /// Parse `NAME` or `NAME:N`, optionally followed by `/KEY=VALUE` emulator overrides.
    pub fn parse(s: &str) -> Result<Self> {
        let label = s.trim();
        let mut parts = label.split('/');
        let s = parts.next().unwrap_or("").trim();
        let mut ssd_set = Vec::new();
        let mut io_threads = None;
        let mut flushers = None;
        let mut own_writeback = None;
        let mut cp_tail = None;
        let mut dnode_lock = None;
        for kv in parts {
            let kv = kv.trim();
            match kv.split_once('=') {
                Some((k, v)) if k.trim() == "io_threads" => {
                    io_threads = Some(host_count(label, "io_threads", v, MAX_IO_THREADS)?)
                }
                Some((k, v)) if k.trim() == "flushers" => {
                    flushers = Some(host_count(label, "flushers", v, MAX_FLUSHERS)?)
                }
                Some((k, v)) if k.trim() == "own_writeback" => {
                    own_writeback = Some(host_flag(label, "own_writeback", v)?)
                }
                Some((k, v)) if k.trim() == "cp_tail" => {
                    cp_tail = Some(host_flag(label, "cp_tail", v)?)
                }
                Some((k, v)) if k.trim() == "dnode_lock" => {
                    dnode_lock = Some(host_flag(label, "dnode_lock", v)?)
                }
                Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
                    ssd_set.push(format!("{}={}", k.trim(), v.trim()))
                }
                _ => bail!(
                    "policy {label:?}: device override {kv:?} is not KEY=VALUE (e.g. device/vop_degree=1.2)"
                ),
            }
        }
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let features = parse_features(name);
        let row_name = if features.is_some() { "scale" } else { name };
        let Some(row) = TABLE.iter().find(|r| r.0 == row_name) else {
            let known: Vec<&str> = TABLE.iter().map(|r| r.0).collect();
            bail!(
                "unknown policy {s:?} (known: {}; `scale:N` sets N GC workers; ablation: scale-simple, scale+svp+dws+lsu+cvs+dpb+pdl in any subset; `scale/dnode_lock=0` commits under the file's cell)",
                known.join(", ")
            );
        };
        let workers = match arg {
            None => None,
            Some(a) if row.3 => match a.parse::<usize>() {
                Ok(n) if n > 0 => Some(n),
                _ => bail!("policy {s:?}: worker count must be a positive integer"),
            },
            Some(_) => bail!("policy {name:?} takes no parameter (got {s:?})"),
        };
        Ok(PolicySpec {
            label: label.to_string(),
            name: name.to_string(),
            gc: row.1,
            alloc_mode: row.2,
            workers,
            features: {
                let mut f = features.unwrap_or(ScaleFeatures::ALL);
                if let Some(b) = dnode_lock {
                    f.pdl = b;
                }
                f
            },
            ssd_set,
            io_threads,
            flushers,
            own_writeback,
            cp_tail,
        })
    }

    /// Mount options for this policy on top of `base`.
    pub fn mount_options(&self, base: &MountOptions) -> MountOptions {
        let mut o = base.clone();
        o.gc = self.gc;
        o.alloc_mode = self.alloc_mode;
        if let Some(n) = self.workers {
            o.gc_workers = n;
        }
        o.scale = self.features;
        if let Some(n) = self.io_threads {
            o.io_threads = n;
        }
        if let Some(n) = self.flushers {
            o.flushers = n;
        }
        if let Some(b) = self.own_writeback {
            o.own_writeback = b;
        }
        if let Some(b) = self.cp_tail {
            o.cp_tail = b;
        }
        o
    }

    pub fn description(&self) -> &'static str {
        if parse_features(&self.name).is_some() {
            return "ScaleLFS ablation (paper Table 3)";
        }
        TABLE.iter().find(|r| r.0 == self.name).map_or("", |r| r.5)
    }
}

/// Parse a comma-separated list, or probe the candidates when `list` is None.
pub fn resolve(list: Option<&str>) -> Result<Vec<PolicySpec>> {
    match list {
        Some(l) => {
            let v: Vec<PolicySpec> = l
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(PolicySpec::parse)
                .collect::<Result<_>>()?;
            if v.is_empty() {
                bail!("--policies is empty");
            }
            for p in &v {
                if let Err(e) = probe(p) {
                    bail!("policy {}: {e}", p.label);
                }
            }
            Ok(v)
        }
        None => Ok(implemented()),
    }
}

/// The default set: rows marked default whose policy the core implements.
pub fn implemented() -> Vec<PolicySpec> {
    TABLE
        .iter()
        .filter(|r| r.4 && GcPolicy::implemented().contains(&r.1))
        .filter_map(|r| PolicySpec::parse(r.0).ok())
        .collect()
}

/// Mount the policy on a 64 MiB RAM volume and unmount it. `device` needs the emulator's
/// coupled FTL, `none` its interval FTL and `zf2fs` its zoned FTL, which `Volume::open`
/// selects for them; they are not probed on RAM.
fn probe(p: &PolicySpec) -> Result<()> {
    if matches!(p.gc, GcPolicy::Device | GcPolicy::None) || p.name == "zf2fs" {
        return Ok(());
    }
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(16384));
    Fs::mkfs(
        dev.clone(),
        &MkfsOptions {
            force: true,
            ..Default::default()
        },
    )?;
    let mut o = p.mount_options(&MountOptions::default());
    o.cp_interval = None;
    o.gc_interval = None;
    let fs = Fs::mount(dev, o)?;
    fs.unmount()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_specs() {
        assert_eq!(
            PolicySpec::parse("f2fs").unwrap().alloc_mode,
            AllocMode::Adaptive
        );
        assert_eq!(
            PolicySpec::parse("f2fs-lfs").unwrap().alloc_mode,
            AllocMode::Lfs
        );
        assert_eq!(PolicySpec::parse("scale:4").unwrap().workers, Some(4));
        assert!(PolicySpec::parse("scale:0").is_err());
        assert!(PolicySpec::parse("f2fs:2").is_err());
        let e = PolicySpec::parse("btrfs").unwrap_err().to_string();
        assert!(e.contains("unknown policy"), "{e}");
        assert!(implemented().iter().any(|p| p.name == "f2fs"));
        let d = PolicySpec::parse("device/vop_degree=1.2/upcall_pairs=64").unwrap();
        assert_eq!(d.name, "device");
        assert_eq!(d.label, "device/vop_degree=1.2/upcall_pairs=64");
        assert_eq!(d.ssd_set, vec!["vop_degree=1.2", "upcall_pairs=64"]);
        assert_eq!(d.gc, GcPolicy::Device);
        let e = PolicySpec::parse("none/compaction_period")
            .unwrap_err()
            .to_string();
        assert!(e.contains("KEY=VALUE"), "{e}");
        assert!(PolicySpec::parse("scale:2/op=0.2").unwrap().workers == Some(2));
        // io_threads is the host's, not the emulator's.
        let q = PolicySpec::parse("f2fs/io_threads=3/op=0.2").unwrap();
        assert_eq!(q.io_threads, Some(3));
        assert_eq!(q.ssd_set, vec!["op=0.2"]);
        assert_eq!(q.mount_options(&MountOptions::default()).io_threads, 3);
        let f = PolicySpec::parse("f2fs").unwrap();
        assert_eq!(f.mount_options(&MountOptions::default()).io_threads, 8);
        for bad in [
            "f2fs/io_threads=0",
            "f2fs/io_threads=65",
            "f2fs/io_threads=x",
        ] {
            let e = PolicySpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains("io_threads"), "{bad}: {e}");
        }
        // So is flushers.
        let l = PolicySpec::parse("f2fs/flushers=4/op=0.2").unwrap();
        assert_eq!(l.mount_options(&MountOptions::default()).flushers, 4);
        assert_eq!(l.ssd_set, vec!["op=0.2"]);
        assert_eq!(f.mount_options(&MountOptions::default()).flushers, 1);
        let w = PolicySpec::parse("f2fs/own_writeback=1").unwrap();
        assert!(w.mount_options(&MountOptions::default()).own_writeback);
        assert!(!f.mount_options(&MountOptions::default()).own_writeback);
        let e = PolicySpec::parse("f2fs/own_writeback=yes")
            .unwrap_err()
            .to_string();
        assert!(e.contains("own_writeback"), "{e}");
        for bad in ["f2fs/flushers=0", "f2fs/flushers=65", "f2fs/flushers=x"] {
            let e = PolicySpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains("flushers"), "{bad}: {e}");
        }
    }
}
