//! Memory this process may still use: the least of the machine's `MemAvailable`
//! (/proc/meminfo) and the room left under every memory cgroup limit that applies to the
//! process. In a container or a systemd service with a memory limit, `MemAvailable` is the
//! host's: a table sized by it was OOM-killed (SIGKILL, no message) part way through.
//!
//! Owns: the parsing of /proc/self/mountinfo and /proc/self/cgroup, and the walk from the
//! process's cgroup up to its hierarchy's root (every ancestor's limit applies):
//! - cgroup v2 (`0::/path`, fstype `cgroup2`): `memory.max` ("max" = none) less
//!   `memory.current`;
//! - cgroup v1 (the line whose controllers include `memory`, fstype `cgroup` with `memory`
//!   in its super options): `memory.limit_in_bytes` (values from 2^62 up = none; the kernel
//!   writes PAGE_COUNTER_MAX pages, just under 2^63) less `memory.usage_in_bytes`.
//!
//! Inactive page cache (`inactive_file` of v2's memory.stat, `total_inactive_file` of
//! v1's) counts as room: the kernel reclaims it before it kills, and a container that has
//! read GiBs of files would otherwise look full. The cgroup path of /proc/self/cgroup is
//! mapped onto the mount by stripping the mount's `root` (cgroup namespaces, bind mounts);
//! a directory that does not exist falls back to the mount point itself. Anything
//! unreadable counts as no limit (a limit whose usage is unreadable counts whole).

use std::path::{Component, Path, PathBuf};

/// v1 `memory.limit_in_bytes` from here up means "no limit".
const V1_UNLIMITED: u64 = 1 << 62;

/// Memory this process may still use, and whose limit it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Available {
    pub bytes: u64,
    /// The cgroup directory whose limit leaves the least room, when that is less than the
    /// machine's `MemAvailable`; `None`: the machine's.
    pub cgroup: Option<PathBuf>,
}

impl Available {
    /// "the N MiB this machine has available", or "... this process may still use (cgroup
    /// memory limit of DIR)": for messages that refuse a table.
    pub fn describe(&self) -> String {
        match &self.cgroup {
            None => format!("the {} MiB this machine has available", self.bytes >> 20),
            Some(dir) => format!(
                "the {} MiB this process may still use (cgroup memory limit of {})",
                self.bytes >> 20,
                dir.display()
            ),
        }
    }
}

/// The memory this process may still use (see the module header), if anything says.
pub fn available() -> Option<Available> {
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let machine = read(Path::new("/proc/meminfo")).and_then(|t| parse_meminfo(&t));
    let cgroup = match (
        read(Path::new("/proc/self/mountinfo")),
        read(Path::new("/proc/self/cgroup")),
    ) {
        (Some(mi), Some(cg)) => least_room(&mi, &cg, &|p: &Path| p.is_dir(), &read),
        _ => None,
    };
    combine(machine, cgroup)
}

/// Refuse with `Error::NoMemory` when `need` bytes exceed what this process may still use:
/// "{what}, more than the N MiB ...". The one check mkfs, mount and fsck make before they
/// allocate their tables.
pub fn refuse_over(need: u64, what: impl FnOnce() -> String) -> crate::error::Result<()> {
    match available() {
        Some(avail) if need > avail.bytes => Err(crate::error::Error::NoMemory(format!(
            "{}, more than {}",
            what(),
            avail.describe()
        ))),
        _ => Ok(()),
    }
}

fn combine(machine: Option<u64>, cgroup: Option<(u64, PathBuf)>) -> Option<Available> {
    match (machine, cgroup) {
        (Some(m), Some((c, dir))) if c < m => Some(Available {
            bytes: c,
            cgroup: Some(dir),
        }),
        (Some(m), _) => Some(Available {
            bytes: m,
            cgroup: None,
        }),
        (None, Some((c, dir))) => Some(Available {
            bytes: c,
            cgroup: Some(dir),
        }),
        (None, None) => None,
    }
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn parse_meminfo(info: &str) -> Option<u64> {
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}
use Version::{V1, V2};

#[derive(Debug)]
struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    super_opts: String,
}

/// The mounts of a /proc/self/mountinfo: `ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...]
/// - FSTYPE SOURCE SUPER_OPTS`, paths with octal escapes (`\040` for a space).
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let mut post = post.split(' ');
            let fstype = post.next()?.to_string();
            let _source = post.next()?;
            let super_opts = post.next().unwrap_or("").to_string();
            Some(Mount {
                root: unescape(pre.get(3)?),
                point: PathBuf::from(unescape(pre.get(4)?)),
                fstype,
                super_opts,
            })
        })
        .collect()
}

/// mountinfo's octal escapes (`\040` space, `\011` tab, `\012` newline, `\134` backslash).
fn unescape(s: &str) -> String {
    String::from_utf8_lossy(&unescape_mountinfo_bytes(s)).into_owned()
}

/// A field of /proc/self/mountinfo with its `\ooo` escapes (space, tab, newline, backslash)
/// undone, as the bytes of the path or source it names (also the FUSE adapter's and the
/// CLI's reader of mountinfo). An escape past `\377` is kept as it is.
pub fn unescape_mountinfo_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// The memory cgroup directories whose limits apply to this process, from its own cgroup
/// up to the hierarchy's root (the mount point), per hierarchy (v1 memory, v2).
fn cgroup_dirs(
    mountinfo: &str,
    cgroup: &str,
    is_dir: &dyn Fn(&Path) -> bool,
) -> Vec<(Version, Vec<PathBuf>)> {
    let mounts = parse_mountinfo(mountinfo);
    let mut out = Vec::new();
    for line in cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let (version, mount) = if id == "0" && controllers.is_empty() {
            (V2, mounts.iter().find(|m| m.fstype == "cgroup2"))
        } else if controllers.split(',').any(|c| c == "memory") {
            let m = mounts
                .iter()
                .find(|m| m.fstype == "cgroup" && m.super_opts.split(',').any(|o| o == "memory"));
            (V1, m)
        } else {
            continue;
        };
        let Some(m) = mount else { continue };
        if out.iter().any(|(v, _)| *v == version) {
            continue;
        }
        out.push((version, walk_up(&map_path(path, m, is_dir), &m.point)));
    }
    out
}

/// The directory of cgroup `path` (as /proc/self/cgroup names it) under mount `m`.
fn map_path(path: &str, m: &Mount, is_dir: &dyn Fn(&Path) -> bool) -> PathBuf {
    let root = m.root.trim_end_matches('/');
    let rel = match path.strip_prefix(root) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ => path,
    };
    let rel = Path::new(rel.trim_start_matches('/'));
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return m.point.clone();
    }
    if rel.as_os_str().is_empty() {
        return m.point.clone();
    }
    let dir = m.point.join(rel);
    if is_dir(&dir) {
        dir
    } else {
        m.point.clone()
    }
}

/// `dir` and its ancestors up to `top`, inclusive.
fn walk_up(dir: &Path, top: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .take_while(|d| d.starts_with(top))
        .map(Path::to_path_buf)
        .collect()
}

/// The room left under cgroup directory `dir`'s own limit, if it has one.
fn room(version: Version, dir: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Option<u64> {
    let num =
        |name: &str| -> Option<String> { read(&dir.join(name)).map(|s| s.trim().to_string()) };
    let (limit, usage, inactive_key) = match version {
        V2 => ("memory.max", "memory.current", "inactive_file"),
        V1 => (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        ),
    };
    let limit: u64 = num(limit)?.parse().ok()?; // "max" does not parse: no limit
    if version == V1 && limit >= V1_UNLIMITED {
        return None;
    }
    let usage: u64 = num(usage).and_then(|u| u.parse().ok()).unwrap_or(0);
    let inactive: u64 = read(&dir.join("memory.stat"))
        .and_then(|s| {
            s.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == inactive_key).then(|| v.trim().parse().ok()).flatten()
            })
        })
        .unwrap_or(0);
    Some(limit.saturating_sub(usage.saturating_sub(inactive)))
}

/// The least room under any memory cgroup limit that applies, and whose limit it is.
fn least_room(
    mountinfo: &str,
    cgroup: &str,
    is_dir: &dyn Fn(&Path) -> bool,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Option<(u64, PathBuf)> {
    cgroup_dirs(mountinfo, cgroup, is_dir)
        .into_iter()
        .flat_map(|(v, dirs)| dirs.into_iter().map(move |d| (v, d)))
        .filter_map(|(v, d)| room(v, &d, read).map(|r| (r, d)))
        .min_by_key(|(r, _)| *r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const V1_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:5 - cgroup2 cgroup2 rw
";
    const V1_CGROUP: &str = "\
9:name=systemd:/
4:memory:/process_api/abc
1:cpu:/
0::/
";

    fn files(list: &[(&str, &str)]) -> HashMap<PathBuf, String> {
        list.iter()
            .map(|(p, s)| (PathBuf::from(p), s.to_string()))
            .collect()
    }

    fn run(mi: &str, cg: &str, fs: &HashMap<PathBuf, String>) -> Option<(u64, PathBuf)> {
        let is_dir = |p: &Path| fs.keys().any(|k| k.parent() == Some(p));
        let read = |p: &Path| fs.get(p).cloned();
        least_room(mi, cg, &is_dir, &read)
    }

    #[test]
    fn v1_walks_from_the_process_cgroup_to_the_root() {
        let dirs = cgroup_dirs(V1_MOUNTINFO, V1_CGROUP, &|_| true);
        assert_eq!(
            dirs,
            vec![
                (
                    V1,
                    vec![
                        PathBuf::from("/sys/fs/cgroup/memory/process_api/abc"),
                        PathBuf::from("/sys/fs/cgroup/memory/process_api"),
                        PathBuf::from("/sys/fs/cgroup/memory"),
                    ]
                ),
                (V2, vec![PathBuf::from("/sys/fs/cgroup/unified")]),
            ]
        );
        // A parent's limit binds too; the root's "unlimited" (PAGE_COUNTER_MAX pages) is none.
        let fs = files(&[
            (
                "/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            (
                "/sys/fs/cgroup/memory/process_api/abc/memory.usage_in_bytes",
                "1000\n",
            ),
            (
                "/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes",
                "209715200\n",
            ),
            (
                "/sys/fs/cgroup/memory/process_api/memory.usage_in_bytes",
                "20971520\n",
            ),
            (
                "/sys/fs/cgroup/memory/process_api/memory.stat",
                "cache 5\ninactive_file 7\ntotal_inactive_file 1048576\n",
            ),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            (
                "/sys/fs/cgroup/memory/memory.usage_in_bytes",
                "6888722432\n",
            ),
        ]);
        assert_eq!(
            run(V1_MOUNTINFO, V1_CGROUP, &fs),
            Some((
                209715200 - 20971520 + 1048576,
                PathBuf::from("/sys/fs/cgroup/memory/process_api")
            ))
        );
        // Unlimited everywhere: no limit.
        let fs = files(&[
            (
                "/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes",
                "9223372036854775807\n",
            ),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ]);
        assert_eq!(run(V1_MOUNTINFO, V1_CGROUP, &fs), None);
    }

    #[test]
    fn v2_reads_memory_max_and_max_means_none() {
        let mi = "\
25 1 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
26 1 0:5 / /proc rw - proc proc rw
";
        let cg = "0::/system.slice/flashlog.service\n";
        let fs = files(&[
            (
                "/sys/fs/cgroup/system.slice/flashlog.service/memory.max",
                "max\n",
            ),
            (
                "/sys/fs/cgroup/system.slice/flashlog.service/memory.current",
                "4096\n",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "1073741824\n"),
            ("/sys/fs/cgroup/system.slice/memory.current", "73741824\n"),
            (
                "/sys/fs/cgroup/system.slice/memory.stat",
                "anon 1\ninactive_file 0\n",
            ),
        ]);
        assert_eq!(
            run(mi, cg, &fs),
            Some((1_000_000_000, PathBuf::from("/sys/fs/cgroup/system.slice")))
        );
        let fs = files(&[
            (
                "/sys/fs/cgroup/system.slice/flashlog.service/memory.max",
                "max\n",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "max\n"),
        ]);
        assert_eq!(run(mi, cg, &fs), None);
        // Usage above the limit (the kernel reclaims lazily): no room, not an overflow.
        let fs = files(&[
            (
                "/sys/fs/cgroup/system.slice/flashlog.service/memory.max",
                "100\n",
            ),
            (
                "/sys/fs/cgroup/system.slice/flashlog.service/memory.current",
                "200\n",
            ),
        ]);
        assert_eq!(
            run(mi, cg, &fs),
            Some((
                0,
                PathBuf::from("/sys/fs/cgroup/system.slice/flashlog.service")
            ))
        );
    }

    #[test]
    fn a_namespace_root_is_stripped_and_a_missing_directory_falls_back_to_the_mount() {
        // Docker without a cgroup namespace: the mount's root is the container's cgroup.
        let mi = "\
700 650 0:32 /docker/c0ffee /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
";
        let cg = "4:memory:/docker/c0ffee\n";
        let fs = files(&[
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "134217728\n"),
            ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "33554432\n"),
        ]);
        assert_eq!(
            run(mi, cg, &fs),
            Some((96 << 20, PathBuf::from("/sys/fs/cgroup/memory")))
        );
        // A child of the mount's root.
        let cg = "4:memory:/docker/c0ffee/inner\n";
        let d = cgroup_dirs(mi, cg, &|_| true);
        assert_eq!(
            d[0].1,
            vec![
                PathBuf::from("/sys/fs/cgroup/memory/inner"),
                PathBuf::from("/sys/fs/cgroup/memory")
            ]
        );
        // A cgroup namespace entered after the mount: a path the mount cannot show.
        let mi = "30 20 0:40 /.. /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let d = cgroup_dirs(mi, "0::/\n", &|_| true);
        assert_eq!(d, vec![(V2, vec![PathBuf::from("/sys/fs/cgroup")])]);
        // A directory that does not exist: the mount point itself.
        let mi = "30 20 0:40 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let d = cgroup_dirs(mi, "0::/gone/away\n", &|_| false);
        assert_eq!(d, vec![(V2, vec![PathBuf::from("/sys/fs/cgroup")])]);
    }

    #[test]
    fn parsing_odd_input() {
        // Escaped spaces in a mount point; a mount with no memory controller is ignored.
        let mi = "\
35 31 0:32 / /mnt/cg\\040mem rw - cgroup cgroup rw,memory,nosuid
36 31 0:33 / /sys/fs/cgroup/memoryx rw - cgroup cgroup rw,memoryx
";
        let d = cgroup_dirs(mi, "4:cpu,memory:/\n", &|_| true);
        assert_eq!(d, vec![(V1, vec![PathBuf::from("/mnt/cg mem")])]);
        // No memory controller anywhere, garbage lines, no cgroup2 mount.
        assert!(cgroup_dirs(mi, "garbage\n3:cpu:/\n0::/\n", &|_| true).is_empty());
        assert!(cgroup_dirs("garbage - \n", "0::/x\n", &|_| true).is_empty());
        assert_eq!(
            parse_meminfo("MemTotal: 10 kB\nMemAvailable:    2048 kB\n"),
            Some(2 << 20)
        );
        assert_eq!(parse_meminfo("MemTotal: 10 kB\n"), None);
        // An unparsable limit is no limit.
        let mi = "30 20 0:40 / /cg rw - cgroup2 cgroup2 rw\n";
        let fs = files(&[("/cg/memory.max", "lots\n")]);
        assert_eq!(run(mi, "0::/\n", &fs), None);
    }

    #[test]
    fn the_least_of_machine_and_cgroup_and_its_message() {
        let cg = Some((180 << 20, PathBuf::from("/sys/fs/cgroup/memory/x")));
        let a = combine(Some(20 << 30), cg.clone()).unwrap();
        assert_eq!(a.bytes, 180 << 20);
        assert_eq!(
            a.describe(),
            "the 180 MiB this process may still use (cgroup memory limit of /sys/fs/cgroup/memory/x)"
        );
        let a = combine(Some(100 << 20), cg.clone()).unwrap();
        assert_eq!(a.cgroup, None);
        assert_eq!(a.describe(), "the 100 MiB this machine has available");
        assert_eq!(combine(None, cg).unwrap().bytes, 180 << 20);
        assert_eq!(combine(None, None), None);
    }
}
