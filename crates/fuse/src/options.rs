//! `-o` mount options, parsed the way mount(8) passes them, and byte sizes ("64M", "1GiB").
//!
//! Owns: the mapping from option strings to [`MountConfig`] (core mount options plus the
//! FUSE session settings). Invariant: every option is either understood, one of the generic
//! mount(8)/fstab options that only mean something to mount(8) (accepted silently), or an
//! error that names it — never silently ignored. Later options override earlier ones, as in
//! mount(8) (`-o ro,rw` mounts read-write).

use flashlog_core::{AllocMode, GcPolicy, MountOptions};
use std::time::Duration;

/// Most FUSE request threads one mount may run: beyond this, threads only add contention
/// (dependencies.md §1.2 measured fewer getattr/s with more threads on small machines).
pub const MAX_THREADS: usize = 64;

/// Default share of the kernel's dirty-page limit for a Flashlog mount, in percent (FUSE
/// gives each mount 1 %; docs/BENCHMARKS.md "fio" measures what 20 changes).
pub const DEFAULT_BDI_MAX_RATIO: u32 = 20;

/// Everything a mount is configured with.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Options of the core (read-only, GC policy, allocation mode, inline data, ...).
    pub core: MountOptions,
    /// Let users other than the one who mounted access the file system (`allow_other`).
    pub allow_other: bool,
    /// Let the kernel check permissions from the mode bits (`default_permissions`). POSIX
    /// ACLs (`core.acl`, the default) imply it: the kernel then checks the ACLs too.
    pub default_permissions: bool,
    /// FUSE request threads (`threads=N`).
    pub threads: usize,
    /// Kernel write-back cache (`writeback` / `nowriteback`).
    pub writeback_cache: bool,
    /// READDIRPLUS, directory listings that carry each entry's attributes so that a walk
    /// that stats what it lists needs no LOOKUP per entry (`readdirplus=auto`, the default:
    /// the kernel asks for them on a directory's first batch and after lookups in it, as
    /// `ls -l` makes; `always`; `off` or `noreaddirplus`: plain READDIR).
    pub readdirplus: Readdirplus,
    /// Negotiate FUSE_HANDLE_KILLPRIV_V2 (`killpriv` / `nokillpriv`): the adapter clears
    /// setuid/setgid on write, truncate and chown, and the kernel stops asking for
    /// security.capability before every write.
    pub killpriv: bool,
    /// Percent of the kernel's dirty-page limit this mount may hold before its writers are
    /// throttled (`bdi_max_ratio=N`, written to /sys/class/bdi/DEV/max_ratio after the
    /// mount; root only). `None` (`bdi_max_ratio=1`, FUSE's own default) leaves it alone.
    pub bdi_max_ratio: Option<u32>,
    /// Mount with the subtype, so the type in /proc/mounts is `fuse.flashlog`; `nosubtype`
    /// makes it plain `fuse`, which is what fstests' `FSTYP=fuse` checks for.
    pub subtype: bool,
    /// Write the log heads' buffers to the volume's image file or block device through the
    /// host's page cache, starting its write-back at once (`image_io=buffered`, the default),
    /// or with `O_DIRECT` where the file system under it allows it (`image_io=direct`).
    /// Durability is the same.
    pub image_direct: bool,
    /// Generic kernel mount flags passed through (nodev, noexec, noatime, sync, ...).
    pub kernel_flags: Vec<fuser::MountOption>,
}

/// When directory listings carry attributes (`readdirplus=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readdirplus {
    /// Every READDIR is a READDIRPLUS.
    Always,
    /// The kernel's READDIRPLUS_AUTO: plus on a directory's first batch and after lookups.
    Auto,
    /// Plain READDIR.
    Off,
}

impl MountConfig {
    /// Defaults: read-write, default_permissions, one request thread per core, write-back
    /// cache, and `allow_other` when mounted by root (so that a root mount behaves like a
    /// kernel file system: every user sees it, the kernel checks the mode bits).
    pub fn defaults(is_root: bool) -> Self {
        MountConfig {
            core: MountOptions::default(),
            allow_other: is_root,
            default_permissions: true,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(MAX_THREADS),
            writeback_cache: true,
            // libfuse's default: `always` makes walks that read a whole directory before they
            // stat its entries (du, tar, rsync) up to 3.5x faster, and walks that only read
            // names (find) up to 10x slower (docs/BENCHMARKS.md "Directory listings").
            readdirplus: Readdirplus::Auto,
            killpriv: true,
            bdi_max_ratio: Some(DEFAULT_BDI_MAX_RATIO),
            subtype: true,
            image_direct: false,
            kernel_flags: Vec::new(),
        }
    }

    /// Apply a list of `-o` arguments (each may hold several comma-separated options).
    pub fn apply(&mut self, args: &[String]) -> Result<(), String> {
        for arg in args {
            for opt in arg.split(',').map(str::trim).filter(|o| !o.is_empty()) {
                self.apply_one(opt)?;
            }
        }
        Ok(())
    }

    fn apply_one<'a>(&mut self, opt: &'a str) -> Result<(), String> {
        let (key, val) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        let need = |v: Option<&'a str>| -> Result<&'a str, String> {
            v.filter(|s| !s.is_empty())
                .ok_or_else(|| format!("mount option {key:?} needs a value ({key}=...)"))
        };
        let flag = |v: Option<&str>| match v {
            None => Ok(()),
            Some(_) => Err(format!("mount option {key:?} takes no value")),
        };
        match key {
            "ro" => {
                flag(val)?;
                self.core.read_only = true;
            }
            "rw" => {
                flag(val)?;
                self.core.read_only = false;
            }
            "gc" => self.core.gc = need(val)?.parse::<GcPolicy>()?,
            "mlog" => self.core.mlog_map = need(val)?.parse()?,
            "mode" => {
                self.core.alloc_mode = match need(val)? {
                    "lfs" => AllocMode::Lfs,
                    "adaptive" => AllocMode::Adaptive,
                    v => {
                        return Err(format!(
                            "unknown mode {v:?} (expected mode=lfs or mode=adaptive)"
                        ))
                    }
                }
            }
            "allow_other" | "noallow_other" => {
                flag(val)?;
                self.allow_other = key == "allow_other";
            }
            "default_permissions" | "nodefault_permissions" => {
                flag(val)?;
                self.default_permissions = key == "default_permissions";
            }
            "inline" | "noinline" => {
                flag(val)?;
                self.core.inline = key == "inline";
            }
            "nosubtype" => {
                flag(val)?;
                self.subtype = false;
            }
            "acl" | "noacl" => {
                flag(val)?;
                self.core.acl = key == "acl";
            }
            "writeback" | "nowriteback" => {
                flag(val)?;
                self.writeback_cache = key == "writeback";
            }
            "noreaddirplus" => {
                flag(val)?;
                self.readdirplus = Readdirplus::Off;
            }
            "readdirplus" => {
                self.readdirplus = match need(val)? {
                    "always" => Readdirplus::Always,
                    "auto" => Readdirplus::Auto,
                    "off" => Readdirplus::Off,
                    v => {
                        return Err(format!(
                            "unknown readdirplus={v:?} (expected always, auto or off)"
                        ))
                    }
                }
            }
            "own_writeback" | "noown_writeback" => {
                flag(val)?;
                self.core.own_writeback = key == "own_writeback";
            }
            "cp_tail" | "nocp_tail" => {
                flag(val)?;
                self.core.cp_tail = key == "cp_tail";
            }
            "killpriv" | "nokillpriv" => {
                flag(val)?;
                self.killpriv = key == "killpriv";
            }
            "bdi_max_ratio" => {
                let v = need(val)?;
                let n: u32 = v
                    .parse()
                    .map_err(|_| format!("bdi_max_ratio={v}: not a number"))?;
                if !(1..=100).contains(&n) {
                    return Err(format!(
                        "bdi_max_ratio={n}: must be a percentage between 1 (FUSE's default) and 100"
                    ));
                }
                self.bdi_max_ratio = (n > 1).then_some(n);
            }
            "image_io" => {
                self.image_direct = match need(val)? {
                    "direct" => true,
                    "buffered" => false,
                    v => {
                        return Err(format!(
                            "unknown image_io={v:?} (expected image_io=direct or image_io=buffered)"
                        ))
                    }
                }
            }
            "io_threads" => {
                self.core.io_threads = count(
                    key,
                    need(val)?,
                    flashlog_core::config::MAX_IO_THREADS,
                    " (log-write threads, the queue depth to the device)",
                )?
            }
            "flushers" => {
                self.core.flushers = count(
                    key,
                    need(val)?,
                    flashlog_core::config::MAX_FLUSHERS,
                    " (background write-back threads)",
                )?
            }
            "threads" => self.threads = count(key, need(val)?, MAX_THREADS, "")?,
            "gc_workers" => {
                self.core.gc_workers = count(
                    key,
                    need(val)?,
                    flashlog_core::config::MAX_GC_WORKERS,
                    " (dedicated collectors of gc=scale)",
                )?
            }
            "gc_interval" => {
                let v = need(val)?;
                let s: u64 = v.parse().map_err(|_| {
                    format!(
                        "gc_interval={v}: expected whole seconds (0 turns background cleaning off)"
                    )
                })?;
                self.core.gc_interval = (s > 0).then(|| Duration::from_secs(s));
            }
            "cp_interval" => {
                let v = need(val)?;
                let s: u64 = v.parse().map_err(|_| {
                    format!("cp_interval={v}: expected whole seconds (0 turns the timer off)")
                })?;
                self.core.cp_interval = (s > 0).then(|| Duration::from_secs(s));
            }
            "dirty_cap" => {
                let v = need(val)?;
                let b = parse_size(v).map_err(|e| format!("dirty_cap={v}: {e}"))?;
                if b < 1 << 20 {
                    return Err(format!("dirty_cap={v}: must be at least 1M"));
                }
                self.core.dirty_cap_bytes = b;
            }
            _ => return self.apply_generic(key, val),
        }
        Ok(())
    }

    /// Kernel mount flags and the options that only mean something to mount(8) and fstab.
    fn apply_generic(&mut self, key: &str, val: Option<&str>) -> Result<(), String> {
        use fuser::MountOption as M;
        if val.is_none() {
            let kernel = match key {
                "dev" => Some(M::Dev),
                "nodev" => Some(M::NoDev),
                "suid" => Some(M::Suid),
                "nosuid" => Some(M::NoSuid),
                "exec" => Some(M::Exec),
                "noexec" => Some(M::NoExec),
                "atime" => Some(M::Atime),
                "noatime" => Some(M::NoAtime),
                "sync" => Some(M::Sync),
                "async" => Some(M::Async),
                "dirsync" => Some(M::DirSync),
                _ => None,
            };
            if let Some(k) = kernel {
                // Keep the last of a conflicting pair (fuser refuses both at once).
                let opposite = |a: &M, b: &M| {
                    matches!(
                        (a, b),
                        (M::Dev, M::NoDev)
                            | (M::NoDev, M::Dev)
                            | (M::Suid, M::NoSuid)
                            | (M::NoSuid, M::Suid)
                            | (M::Exec, M::NoExec)
                            | (M::NoExec, M::Exec)
                            | (M::Atime, M::NoAtime)
                            | (M::NoAtime, M::Atime)
                            | (M::Sync, M::Async)
                            | (M::Async, M::Sync)
                    )
                };
                self.kernel_flags.retain(|f| f != &k && !opposite(f, &k));
                self.kernel_flags.push(k);
                return Ok(());
            }
            // relatime is what FUSE does anyway; the rest are mount(8)/fstab-only options.
            if matches!(
                key,
                "relatime"
                    | "norelatime"
                    | "strictatime"
                    | "lazytime"
                    | "nolazytime"
                    | "defaults"
                    | "auto"
                    | "noauto"
                    | "user"
                    | "nouser"
                    | "users"
                    | "owner"
                    | "group"
                    | "_netdev"
                    | "nofail"
                    | "loud"
                    | "silent"
            ) {
                return Ok(());
            }
        }
        if key.starts_with("x-") || key == "comment" || key == "fsname" || key == "subtype" {
            return Ok(());
        }
        Err(format!(
            "unknown mount option {key:?}. Flashlog options: ro, rw, gc=f2fs|scale|device|none, gc_workers=N, gc_interval=SECONDS, mode=lfs|adaptive, mlog=ino|thread, \
             allow_other, noallow_other, default_permissions, nodefault_permissions, acl, noacl, inline, noinline, \
             writeback, nowriteback, readdirplus=always|auto|off, noreaddirplus, own_writeback, noown_writeback, cp_tail, nocp_tail, killpriv, nokillpriv, bdi_max_ratio=PERCENT, nosubtype, image_io=direct|buffered, io_threads=N, flushers=N, threads=N, cp_interval=SECONDS, dirty_cap=SIZE; plus the generic dev, nodev, suid, nosuid, \
             exec, noexec, atime, noatime, relatime, sync, async, dirsync, defaults, auto, noauto, user, nouser, \
             _netdev, nofail, x-*"
        ))
    }

    /// Whether the kernel checks permissions: asked for, or implied by POSIX ACLs (FUSE's
    /// POSIX_ACL capability turns default_permissions on whatever the mount options say).
    pub fn checks_permissions(&self) -> bool {
        self.default_permissions || self.core.acl
    }

    /// The options as one comma-separated string (for logs and `--daemon` messages).
    pub fn summary(&self) -> String {
        let c = &self.core;
        let gc = format!("{:?}", c.gc).to_lowercase();
        let mode = format!("{:?}", c.alloc_mode).to_lowercase();
        let cp = c.cp_interval.map(|d| d.as_secs()).unwrap_or(0);
        let gc_interval = c.gc_interval.map(|d| d.as_secs()).unwrap_or(0);
        let workers = if c.gc == flashlog_core::GcPolicy::Scale {
            format!(",gc_workers={}", c.gc_workers)
        } else {
            String::new()
        };
        format!(
            "{},gc={gc}{workers},gc_interval={gc_interval},mode={mode},{}{}{}{}threads={},io_threads={},flushers={},cp_interval={cp},dirty_cap={}M,{},bdi_max_ratio={}{}{}{}{}{}{}",
            if c.read_only { "ro" } else { "rw" },
            if self.allow_other { "allow_other," } else { "" },
            if self.checks_permissions() {
                "default_permissions,"
            } else {
                ""
            },
            if c.acl { "acl," } else { "noacl," },
            if c.inline { "inline," } else { "noinline," },
            self.threads,
            c.io_threads,
            c.flushers,
            c.dirty_cap_bytes >> 20,
            if self.writeback_cache {
                "writeback"
            } else {
                "nowriteback"
            },
            self.bdi_max_ratio.unwrap_or(1),
            if self.killpriv { "" } else { ",nokillpriv" },
            match self.readdirplus {
                Readdirplus::Always => ",readdirplus=always",
                Readdirplus::Auto => "",
                Readdirplus::Off => ",readdirplus=off",
            },
            if self.subtype { "" } else { ",nosubtype" },
            if self.image_direct { ",image_io=direct" } else { "" },
            if c.own_writeback { ",own_writeback" } else { "" },
            if c.cp_tail { "" } else { ",nocp_tail" },
        )
    }
}

/// A count option `key=v` between 1 and `max`; `what` ends the range error.
fn count(key: &str, v: &str, max: usize, what: &str) -> Result<usize, String> {
    let n: usize = v.parse().map_err(|_| format!("{key}={v}: not a number"))?;
    if n == 0 || n > max {
        return Err(format!("{key}={n}: must be between 1 and {max}{what}"));
    }
    Ok(n)
}

/// Parse a byte size: a number with an optional unit. K, M, G, T (and KiB, MiB, GiB, TiB)
/// are powers of 1024; KB, MB, GB, TB are powers of 1000 (as truncate(1) reads them).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "{s:?} is not a size (examples: 4096, 64M, 512MiB, 1G, 2GB)"
        ));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: number too large"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" | "b" => 1,
        "K" | "k" | "KiB" | "kiB" => 1 << 10,
        "M" | "m" | "MiB" => 1 << 20,
        "G" | "g" | "GiB" => 1 << 30,
        "T" | "t" | "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        u => return Err(format!("unknown size unit {u:?} in {s:?} (use K, M, G, T, KiB, MiB, GiB, TiB, KB, MB, GB or TB)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(o: &str) -> Result<MountConfig, String> {
        let mut c = MountConfig::defaults(true);
        c.apply(&[o.to_string()])?;
        Ok(c)
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert!(parse_size("").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000T").is_err());
    }

    #[test]
    fn options() {
        let c = parse(
            "ro,gc=none,mode=lfs,threads=3,cp_interval=0,dirty_cap=128M,noinline,nowriteback",
        )
        .unwrap();
        assert!(c.core.read_only);
        assert_eq!(c.core.gc, GcPolicy::None);
        assert_eq!(c.core.alloc_mode, AllocMode::Lfs);
        assert_eq!(c.threads, 3);
        assert_eq!(c.core.cp_interval, None);
        assert_eq!(c.core.dirty_cap_bytes, 128 << 20);
        assert!(!c.core.inline && !c.writeback_cache);
        assert!(c.killpriv && !parse("nokillpriv").unwrap().killpriv);
        assert_eq!(c.readdirplus, Readdirplus::Auto);
        assert_eq!(
            parse("readdirplus=always").unwrap().readdirplus,
            Readdirplus::Always
        );
        assert_eq!(
            parse("readdirplus=off").unwrap().readdirplus,
            Readdirplus::Off
        );
        assert_eq!(
            parse("noreaddirplus").unwrap().readdirplus,
            Readdirplus::Off
        );
        assert!(parse("readdirplus").is_err());
        assert!(parse("readdirplus=yes").is_err());
        assert!(parse("readdirplus=always")
            .unwrap()
            .summary()
            .contains("readdirplus=always"));
        assert_eq!(c.bdi_max_ratio, Some(DEFAULT_BDI_MAX_RATIO));
        assert_eq!(parse("bdi_max_ratio=50").unwrap().bdi_max_ratio, Some(50));
        assert!(!c.image_direct);
        assert_eq!(c.core.io_threads, 8);
        assert_eq!(parse("io_threads=3").unwrap().core.io_threads, 3);
        assert_eq!(parse("flushers=4").unwrap().core.flushers, 4);
        assert!(parse("own_writeback").unwrap().core.own_writeback);
        assert!(
            !parse("own_writeback,noown_writeback")
                .unwrap()
                .core
                .own_writeback
        );
        assert!(parse("own_writeback=1").is_err());
        assert!(c.core.cp_tail);
        assert!(!parse("nocp_tail").unwrap().core.cp_tail);
        assert!(parse("nocp_tail,cp_tail").unwrap().core.cp_tail);
        assert!(parse("flushers=0").unwrap_err().contains("flushers"));
        assert!(parse("flushers=65").unwrap_err().contains("flushers"));
        assert!(parse("io_threads=0").unwrap_err().contains("io_threads"));
        assert!(!parse("image_io=buffered").unwrap().image_direct);
        assert!(parse("image_io=direct").unwrap().image_direct);
        assert!(parse("image_io=sometimes")
            .unwrap_err()
            .contains("image_io"));
        assert_eq!(parse("bdi_max_ratio=1").unwrap().bdi_max_ratio, None);
        assert_eq!(c.core.mlog_map, flashlog_core::MlogMap::Ino);
        assert_eq!(
            parse("mlog=thread").unwrap().core.mlog_map,
            flashlog_core::MlogMap::Thread
        );
        assert!(parse("mlog=core").is_err());
        assert!(c.core.acl, "ACLs are on by default");
        let c = parse("noacl,nodefault_permissions").unwrap();
        assert!(!c.core.acl && !c.checks_permissions());
        assert!(c.summary().contains("noacl"));
        assert!(!parse("nosubtype").unwrap().subtype && MountConfig::defaults(false).subtype);
        let c = parse("nodefault_permissions").unwrap();
        assert!(c.checks_permissions(), "ACLs imply default_permissions");
        assert!(
            !parse("ro,rw").unwrap().core.read_only,
            "the last option wins"
        );
        let c = parse("defaults,noauto,_netdev,nofail,x-systemd.automount,user,nodev,dev,noatime")
            .unwrap();
        assert_eq!(
            c.kernel_flags,
            vec![fuser::MountOption::Dev, fuser::MountOption::NoAtime]
        );
    }

    #[test]
    fn bad_options_are_named() {
        assert!(parse("bogus").unwrap_err().contains("\"bogus\""));
        assert!(parse("gc=fast").unwrap_err().contains("fast"));
        assert!(parse("threads=0").is_err());
        assert!(parse("bdi_max_ratio=0").is_err());
        assert!(parse("bdi_max_ratio=101").unwrap_err().contains("101"));
        assert!(parse("bdi_max_ratio=x").is_err());
        assert!(parse("threads").is_err());
        assert!(parse("ro=1").is_err());
        assert!(parse("mode=").is_err());
    }
}
