//! `flashlog mount` and the mount(8) helper `mount.fuse.flashlog`: mount a volume with FUSE
//! and serve it until it is unmounted, then write the final checkpoint.
//!
//! Process model:
//! - Foreground (default): this process mounts, serves and unmounts.
//! - `--daemon` (always for the mount(8) helper): fork before any thread exists; the parent
//!   waits on a pipe and returns only once the child reports the mount live (exit 0) or
//!   failed (exit 1, with the child's error). The child starts a new session, logs to a file
//!   and serves.
//!
//! Ways a mount ends, all finishing with `Fs::unmount()` (the final checkpoint):
//! - `umount DIR` / `fusermount3 -u DIR`: the kernel ends the connection, the request
//!   threads see ENODEV and `Session::run` returns;
//! - SIGINT, SIGTERM, SIGHUP: blocked in every thread, taken by one signal thread with
//!   sigwait, which unmounts (lazily if the mount is busy) and so reaches the case above.
//!
//! Invariant: signals are blocked before the first thread is spawned (the core's checkpoint
//! thread, fuser's request threads), so no thread but the signal thread ever takes them.
//!
//! `--device SPEC` (instead of an image): the volume lives on an emulated SSD in this
//! process's memory (the bench's device spec, `flashlog_bench::device::DeviceSpec`). The
//! device is created, formatted and mounted in the serving process, after daemonizing (the
//! emulator starts threads, which must not exist at fork); its contents vanish at unmount,
//! where the emulator's summary (WAF, device GC, upcalls), fsck's verdict and inspect's view
//! of the volume are logged (the exit status is 1 if fsck is not clean).

use crate::device;
use anyhow::{anyhow, bail, Context, Result};
use flashlog_bench::device::{BenchDevice, DeviceSpec};
use flashlog_core::Fs;
use flashlog_dev::{DevError, FileDevice};
use flashlog_fuse::MountConfig;
use nix::sys::signal::{SigSet, Signal};
use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args)]
#[command(
    allow_missing_positional = true,
    after_help = "\
Mount options (-o, comma separated, as mount(8) passes them; the last one wins):
  ro | rw                   read-only or read-write (default rw); a volume that needs
                            roll-forward recovery (a crash after fsync) is refused
                            read-only until mounted read-write once
  gc=f2fs|scale|device|none garbage-collection policy (default f2fs)
  gc_workers=N              gc=scale's dedicated collectors (default one per core, at
                            most 64)
  gc_interval=SECONDS       background cleaning period, 0 = off (default 30)
  mode=lfs|adaptive         allocation mode (default adaptive)
  mlog=ino|thread           on volumes with several mlogs (mkfs --mlogs), which log
                            partition a write goes to: the file's (ino mod mlogs, default)
                            or the writing thread's (Max's per-core mlogs)
  allow_other|noallow_other let every user use the mount (default: on when mounted by root)
  default_permissions|nodefault_permissions
                            the kernel checks permissions from the mode bits (default on)
  acl|noacl                 POSIX ACLs (default acl; implies default_permissions); with
                            noacl setting an ACL fails with EOPNOTSUPP, so tools use chmod
  nosubtype                 type fuse instead of fuse.flashlog in /proc/mounts (fstests)
  inline|noinline           small files and directories inside the inode (default inline)
  writeback|nowriteback     kernel write-back cache (default writeback)
  killpriv|nokillpriv       Flashlog clears setuid/setgid on write, truncate and chown
                            (FUSE HANDLE_KILLPRIV_V2), so the kernel skips a
                            security.capability lookup per write (default killpriv)
  bdi_max_ratio=PERCENT     share of the kernel's dirty-page limit the mount may use
                            before writers wait for write-back (default 20; FUSE's own
                            default is 1; needs root, else a warning)
  threads=N                 FUSE request threads (default: one per core)
  io_threads=N              threads writing the log to the device (default 8)
  flushers=N                background write-back threads (default 1); lane k writes
                            back the files whose inode number is k mod N
  image_io=buffered|direct  log writes to an image file through the host's page cache
                            (default) or with O_DIRECT
  own_writeback|noown_writeback
                            a writer over the hard dirty cap writes back the file it
                            wrote before it waits for the flusher (default off)
  cp_tail|nocp_tail         gc=none: a checkpoint lets operations run again while its
                            I/O tail reaches the device (default cp_tail)
  cp_interval=SECONDS       checkpoint timer, 0 = off (default 30)
  dirty_cap=SIZE            dirty data cached before write-back (default 64M)
  dev, nodev, suid, nosuid, exec, noexec, atime, noatime, sync, async, dirsync: as mount(8)
  defaults, auto, noauto, user, nouser, _netdev, nofail, x-*: accepted for fstab
Unknown options are an error.

Unmount with `umount DIR` or `fusermount3 -u DIR`, stop a foreground mount with Ctrl-C, or
send SIGINT, SIGTERM or SIGHUP to the mount process (a --daemon's pid is in its mount message
and --pid-file); a signal detaches a busy mount lazily. Every way writes a final checkpoint.

--device PRESET:SIZE mounts a fresh volume on an emulated SSD held in memory (presets as for
`flashlog bench --device`, e.g. 970pro-like:4GiB, sata-like:1GiB, or ram:1GiB for a RAM device
without a timing model). It is formatted at mount and its CONTENTS VANISH AT UNMOUNT; the
unmount logs the device's write amplification, GC work and upcalls. With -o gc=device the
emulator runs its coupled-GC FTL (ftl=coupled) unless --ssd-set ftl=... chose another; a device
without migration upcalls (an image file, ram:, another FTL) refuses gc=device with the reason.
With -o gc=none it runs the interval-mapping FTL (ftl=interval), the infinite space gc=none
needs; an image file, a block device or ram: cannot offer one and refuse gc=none.

Examples:
  flashlog mount disk.img /mnt/flash                  # foreground, Ctrl-C unmounts
  flashlog mount --daemon -o gc=scale disk.img /mnt/flash
  flashlog mount --daemon --device 970pro-like:4GiB -o gc=device /mnt/flash   # D2FS, in memory
  mount -t fuse.flashlog disk.img /mnt/flash           # via the mount(8) helper
  fstab: /srv/disk.img  /mnt/flash  fuse.flashlog  defaults,nofail  0  0"
)]
pub struct Args {
    /// Image file or block device holding the volume (or --device instead).
    #[arg(required_unless_present = "device", conflicts_with = "device")]
    source: Option<PathBuf>,
    /// Directory to mount on.
    mountpoint: PathBuf,
    /// Mount options, comma separated (may be repeated); see below.
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Return as soon as the mount is live and keep serving in the background.
    #[arg(long)]
    daemon: bool,
    /// Log file of the background process (default /run/flashlog/<mountpoint>.log, the
    /// mount point's path with `/` as `_`, e.g. tmp_mnt.log; or the temporary directory
    /// when /run/flashlog cannot be created).
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Write the id of the serving process to FILE (removed at unmount).
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Instead of an image: a fresh emulated SSD in memory, PRESET:SIZE (e.g.
    /// 970pro-like:4GiB, ram:1GiB), formatted at mount; its contents vanish at unmount.
    #[arg(long, value_name = "PRESET:SIZE")]
    device: Option<String>,
    /// Emulator setting KEY=VALUE for --device (repeatable), e.g. ftl=coupled.
    #[arg(long, value_name = "KEY=VALUE")]
    ssd_set: Vec<String>,
    /// Emulator clock for --device: wall (requests take the modelled time) or virtual.
    #[arg(long, default_value = "wall", value_name = "CLOCK")]
    clock: String,
}

/// `mount.fuse.flashlog SOURCE DIR [-o OPTS] [-n] [-f] [-v] [-s] [-t TYPE]`, as mount(8)
/// runs helpers. Always daemonizes: mount(8) waits for the helper to return.
pub fn helper_main(argv: Vec<String>) -> Result<ExitCode> {
    let usage = "usage: mount.fuse.flashlog SOURCE MOUNTPOINT [-o OPTIONS] [-n] [-f] [-v] [-s]";
    let mut pos = Vec::new();
    let mut options = Vec::new();
    let (mut fake, mut sloppy) = (false, false);
    let mut it = argv.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => options.push(
                it.next()
                    .ok_or_else(|| anyhow!("-o needs a value; {usage}"))?,
            ),
            s if s.starts_with("-o") => options.push(s[2..].to_string()),
            "-t" => {
                it.next();
            }
            "-n" | "-v" => {}
            "-f" => fake = true,
            "-s" => sloppy = true,
            "-r" => options.push("ro".into()),
            "-w" => options.push("rw".into()),
            "-h" | "--help" => {
                println!("{usage}\nSee `flashlog mount --help` for the options.");
                return Ok(ExitCode::SUCCESS);
            }
            s if s.starts_with('-') && s.len() > 1 => bail!("unknown flag {s:?}; {usage}"),
            _ => pos.push(a),
        }
    }
    let [source, mountpoint] = <[String; 2]>::try_from(pos).map_err(|_| anyhow!("{usage}"))?;
    // Old fuse fstab syntax: "flashlog#SOURCE".
    let source = source
        .strip_prefix("flashlog#")
        .unwrap_or(&source)
        .to_string();
    if sloppy {
        // mount -s: drop options we do not know instead of failing.
        let mut probe = MountConfig::defaults(true);
        options = options
            .iter()
            .flat_map(|o| o.split(',').map(str::to_string).collect::<Vec<_>>())
            .filter(|o| probe.apply(std::slice::from_ref(o)).is_ok())
            .collect();
    }
    let args = Args {
        source: Some(source.into()),
        mountpoint: mountpoint.into(),
        options,
        daemon: true,
        log: None,
        pid_file: None,
        device: None,
        ssd_set: Vec::new(),
        clock: "wall".into(),
    };
    if fake {
        prepare(&args)?;
        return Ok(ExitCode::SUCCESS);
    }
    run(args)
}

/// Checked, absolute paths and the parsed options.
struct Prepared {
    /// The image or block device (empty with `emu`).
    source: PathBuf,
    /// What messages call the volume: the image's path or the emulated device.
    name: String,
    /// `--device`: the emulated device to create (with the FTL gc=device needs).
    emu: Option<DeviceSpec>,
    mountpoint: PathBuf,
    cfg: MountConfig,
}

fn prepare(a: &Args) -> Result<Prepared> {
    let is_root = nix::unistd::geteuid().is_root();
    let mut cfg = MountConfig::defaults(is_root);
    cfg.apply(&a.options).map_err(anyhow::Error::msg)?;
    let (source, name, emu) = match (&a.source, &a.device) {
        (Some(src), None) => {
            device::check_target(src)?;
            let source = src
                .canonicalize()
                .with_context(|| format!("cannot resolve {}", src.display()))?;
            let name = source.display().to_string();
            (source, name, None)
        }
        (None, Some(spec)) => {
            let spec = DeviceSpec::from_args(spec, None, None, &a.ssd_set, &a.clock)?
                .for_policy(cfg.core.gc);
            let mut name = format!("{} ({spec_s})", spec.describe(), spec_s = spec_label(&spec));
            name = name.replace(" ()", "");
            (PathBuf::new(), name, Some(spec))
        }
        _ => bail!("give either an image (SOURCE) or --device PRESET:SIZE, not both"),
    };
    if emu.is_none() && !a.ssd_set.is_empty() {
        bail!("--ssd-set only applies to --device (an emulated SSD)");
    }
    let md = std::fs::metadata(&a.mountpoint).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow!("mountpoint {} does not exist (create it with `mkdir -p {}`)", a.mountpoint.display(), a.mountpoint.display()),
        std::io::ErrorKind::NotConnected => anyhow!(
            "mountpoint {} is a dead FUSE mount (its daemon died); clear it with `fusermount3 -u {}` and mount again",
            a.mountpoint.display(),
            a.mountpoint.display()
        ),
        _ => anyhow!("cannot use mountpoint {}: {e}", a.mountpoint.display()),
    })?;
    if !md.is_dir() {
        bail!("mountpoint {} is not a directory", a.mountpoint.display());
    }
    let mountpoint = a.mountpoint.canonicalize()?;
    if !Path::new("/dev/fuse").exists() {
        bail!(
            "/dev/fuse is missing: load the FUSE module (`modprobe fuse`) or run scripts/setup.sh"
        );
    }
    if !is_root && which("fusermount3").is_none() {
        bail!("fusermount3 is not installed, and mounting as a normal user needs it: run scripts/setup.sh (or `apt-get install fuse3`)");
    }
    if cfg.allow_other && !is_root {
        let conf = std::fs::read_to_string("/etc/fuse.conf").unwrap_or_default();
        if !conf.lines().any(|l| l.trim() == "user_allow_other") {
            bail!("allow_other as a normal user needs `user_allow_other` in /etc/fuse.conf (or mount as root)");
        }
    }
    Ok(Prepared {
        source,
        name,
        emu,
        mountpoint,
        cfg,
    })
}

/// The emulator settings of a spec, for messages ("ftl=coupled"), or "".
fn spec_label(spec: &DeviceSpec) -> String {
    match spec {
        DeviceSpec::Ssd { set, .. } => set.join(","),
        _ => String::new(),
    }
}

fn which(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

pub fn run(a: Args) -> Result<ExitCode> {
    let p = prepare(&a)?;
    // Relative paths name files in the caller's directory: resolve them before daemonize
    // moves to "/" (a relative --pid-file used to land in /).
    let pid_file = a
        .pid_file
        .as_ref()
        .map(|f| std::path::absolute(f).unwrap_or_else(|_| f.clone()));
    // The image is opened (and its lock taken) here, before `--daemon` forks: the wait for a
    // volume in use and a refusal reach the terminal, not the daemon's log. The child
    // inherits the descriptor and with it the flock (a lock belongs to the open file
    // description); the parent leaves with `process::exit`, which drops nothing, so the
    // lock is never released on its behalf. `--device` opens its emulator in the serving
    // process (it starts threads, which must not exist at fork).
    let dev = match &p.emu {
        None => Some(open_image(&p)?),
        Some(_) => None,
    };
    let mut ready = None;
    if a.daemon {
        let log = match &a.log {
            Some(l) => std::path::absolute(l).unwrap_or_else(|_| l.clone()),
            None => default_log(&p.mountpoint),
        };
        ready = Some(daemonize(&log, &p)?);
        crate::init_logging("info,fuser=error", false);
    } else {
        crate::init_logging("info,fuser=error", std::io::stderr().is_terminal());
    }
    let r = serve(&p, dev, &mut ready, pid_file.as_deref());
    if let Some(f) = &pid_file {
        let _ = std::fs::remove_file(f);
    }
    match (r, ready) {
        (Err(e), Some(mut rd)) if rd.pending() => {
            rd.fail(&format!("{e:#}"));
            Err(e)
        }
        (r, _) => r,
    }
}

fn default_log(mountpoint: &Path) -> PathBuf {
    let name: String = mountpoint
        .to_string_lossy()
        .trim_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = if name.is_empty() {
        "root".to_string()
    } else {
        name
    };
    let run = Path::new("/run/flashlog");
    if std::fs::create_dir_all(run).is_ok()
        && nix::unistd::access(run, nix::unistd::AccessFlags::W_OK).is_ok()
    {
        return run.join(format!("{name}.log"));
    }
    std::env::temp_dir().join(format!("flashlog-{}-{name}.log", nix::unistd::geteuid()))
}

/// The child's end of the readiness pipe of `--daemon`.
struct Ready {
    pipe: Option<File>,
}

impl Ready {
    fn pending(&self) -> bool {
        self.pipe.is_some()
    }
    fn send(&mut self, msg: &str) {
        if let Some(mut f) = self.pipe.take() {
            let _ = f.write_all(msg.as_bytes());
        }
    }
    fn ok(&mut self, msg: &str) {
        self.send(&format!("OK {msg}"));
    }
    fn fail(&mut self, msg: &str) {
        self.send(&format!("ERR {msg}"));
    }
}

/// Fork. The parent waits for the child's report and exits; the child returns.
fn daemonize(log: &Path, p: &Prepared) -> Result<Ready> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open the log file {}", log.display()))?;
    // Close-on-exec: helpers the child runs (fusermount3) must not hold the pipe open.
    let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("pipe")?;
    // SAFETY: no thread has been started yet (daemonize runs before the volume is opened and
    // before logging or FUSE start threads), so the child is a complete copy of this process.
    match unsafe { nix::unistd::fork() }.context("fork")? {
        nix::unistd::ForkResult::Parent { child } => {
            drop(wr);
            let mut msg = String::new();
            let _ = File::from(rd).read_to_string(&mut msg);
            if let Some(ok) = msg.strip_prefix("OK ") {
                // The mount is up whether or not anyone still reads this line.
                let _ = writeln!(std::io::stdout(), "{ok}");
                std::process::exit(0);
            }
            match msg.strip_prefix("ERR ") {
                Some(err) => eprintln!("flashlog: error: {err}"),
                None => eprintln!("flashlog: error: the background process {child} exited before the mount of {} was ready; see {}", p.mountpoint.display(), log.display()),
            }
            std::process::exit(1);
        }
        nix::unistd::ForkResult::Child => {
            drop(rd);
            let _ = nix::unistd::setsid();
            if let Ok(null) = File::open("/dev/null") {
                let _ = nix::unistd::dup2_stdin(&null);
            }
            let _ = nix::unistd::dup2_stdout(&log_file);
            let _ = nix::unistd::dup2_stderr(&log_file);
            let _ = std::env::set_current_dir("/");
            eprintln!(
                "--- flashlog {} mount of {} on {} (pid {})",
                env!("CARGO_PKG_VERSION"),
                p.name,
                p.mountpoint.display(),
                std::process::id()
            );
            let _ = log; // the path was reported by the parent's message
            Ok(Ready {
                pipe: Some(File::from(wr)),
            })
        }
    }
}

/// Open the image or block device to mount, taking its lock (`device::open_with`). A
/// volume still in use after the wait is refused with what holds it: a visible mount (to
/// unmount), or a process no mount shows (a mount detached with `umount -l` whose daemon
/// still serves files kept open).
fn open_image(p: &Prepared) -> Result<Arc<FileDevice>> {
    let ro = p.cfg.core.read_only;
    device::open_with(&p.source, ro, p.cfg.image_direct).map_err(|e| {
        match FileDevice::open(&p.source, ro) {
            Err(DevError::InUse(_)) => in_use_error(&p.source).unwrap_or(e),
            _ => e,
        }
    })
}

/// Why `source` is in use, when more can be said than device.rs's generic refusal.
fn in_use_error(source: &Path) -> Option<anyhow::Error> {
    let name = source.to_string_lossy();
    let mounts: Vec<MountEntry> = mountinfo()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.fstype.starts_with("fuse") && m.source == name)
        .collect();
    if let Some(m) = mounts.last() {
        return Some(anyhow!(
            "{} is in use: it is mounted on {}; unmount it first (`umount {}`)",
            source.display(),
            m.point.display(),
            m.point.display()
        ));
    }
    let holders = processes_holding(source);
    let (pid, cmd) = holders.first()?;
    let mount = cmd.split(' ').any(|w| w == "mount") || cmd.contains("mount.fuse");
    Some(if mount {
        anyhow!(
            "{} is in use by the earlier flashlog mount daemon (pid {pid}), though no mount of it is visible: it was detached (`umount -l`) while files in it were still open, and that daemon keeps serving them; it writes its final checkpoint and exits once the last of them is closed (then mount again)",
            source.display()
        )
    } else {
        anyhow!(
            "{} is in use by process {pid} (`{cmd}`); wait for it to finish",
            source.display()
        )
    })
}

/// Processes other than this one with a descriptor open on `path` (canonical; as pid and
/// command line), from the links in /proc/*/fd, compared by name: reading a link does not
/// reach into the file's file system (a stat through it could wait on a hung FUSE mount).
/// Processes this user may not look into are skipped.
fn processes_holding(path: &Path) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == path));
        if holds {
            let cmd = std::fs::read(e.path().join("cmdline"))
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .split('\0')
                        .filter(|w| !w.is_empty())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            found.push((pid, cmd));
        }
    }
    found
}

/// One line of /proc/self/mountinfo (proc(5)).
struct MountEntry {
    id: u64,
    parent: u64,
    /// The file system's device, "major:minor" (st_dev of its files).
    dev: String,
    point: PathBuf,
    fstype: String,
    source: String,
}

fn mountinfo() -> Option<Vec<MountEntry>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    Some(text.lines().filter_map(parse_mountinfo_line).collect())
}

fn parse_mountinfo_line(l: &str) -> Option<MountEntry> {
    use std::os::unix::ffi::OsStringExt;
    let (pre, post) = l.split_once(" - ")?;
    let f: Vec<&str> = pre.split(' ').collect();
    let mut t = post.split(' ');
    Some(MountEntry {
        id: f.first()?.parse().ok()?,
        parent: f.get(1)?.parse().ok()?,
        dev: f.get(2)?.to_string(),
        point: PathBuf::from(std::ffi::OsString::from_vec(
            flashlog_fuse::unescape_mountinfo_bytes(f.get(4)?),
        )),
        fstype: t.next()?.to_string(),
        source: String::from_utf8_lossy(&flashlog_fuse::unescape_mountinfo_bytes(
            t.next().unwrap_or(""),
        ))
        .into_owned(),
    })
}

/// Our FUSE mount as /proc/self/mountinfo lists it right after mounting: its mount id and
/// device, so that a signal later unmounts only this mount and nothing else at that path
/// (the file system the mount covered, or one mounted over it).
#[derive(Clone, PartialEq)]
struct OurMount {
    id: u64,
    dev: String,
}

fn find_our_mount(mountpoint: &Path) -> Option<OurMount> {
    mountinfo()?
        .into_iter()
        .rfind(|m| m.point == mountpoint && m.fstype.starts_with("fuse"))
        .map(|m| OurMount {
            id: m.id,
            dev: m.dev,
        })
}

/// Where our mount stands at `mountpoint` now.
#[derive(Debug, PartialEq)]
enum Standing {
    /// Mounted there, the topmost mount: unmounting the path unmounts it.
    OnTop,
    /// Mounted there, under another mount: unmounting the path would unmount that one.
    Covered,
    /// Not in this mount namespace any more (unmounted, or detached with `umount -l`).
    Gone,
    /// Not known (mountinfo unreadable, or the mount not found in it after mounting).
    Unknown,
}

fn standing(ours: Option<&OurMount>, mountpoint: &Path) -> Standing {
    let (Some(ours), Some(all)) = (ours, mountinfo()) else {
        return Standing::Unknown;
    };
    if !all
        .iter()
        .any(|m| m.id == ours.id && m.dev == ours.dev && m.point == mountpoint)
    {
        return Standing::Gone;
    }
    if all
        .iter()
        .any(|m| m.parent == ours.id && m.point == mountpoint)
    {
        return Standing::Covered;
    }
    Standing::OnTop
}

fn serve(
    p: &Prepared,
    dev: Option<Arc<FileDevice>>,
    ready: &mut Option<Ready>,
    pid_file: Option<&Path>,
) -> Result<ExitCode> {
    // Before any thread exists: every thread inherits this mask.
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // A shell starts background jobs with SIGINT ignored, and an ignored signal is
        // discarded before sigwait could take it: restore the default disposition (never
        // acted on, since the signal is blocked below).
        // SAFETY: installs SIG_DFL, no handler code; no other thread exists yet.
        let _ = unsafe { nix::sys::signal::signal(s, nix::sys::signal::SigHandler::SigDfl) };
        signals.add(s);
    }
    signals.thread_block().context("blocking signals")?;

    let (fs, emu, source) = match (&p.emu, dev) {
        (None, Some(dev)) => {
            // The device holds the volume's lock (exclusive, or shared read-only) for as
            // long as the mount has it (taken in `run`, before any fork).
            tracing::info!(
                "{}: large log writes {}",
                p.source.display(),
                if dev.direct_writes() {
                    "bypass the host's page cache (O_DIRECT)"
                } else {
                    "go through the host's page cache"
                }
            );
            let fs =
                Fs::mount(dev, p.cfg.core.clone()).map_err(|e| device::explain(&p.source, e))?;
            let source = p.source.to_string_lossy().into_owned();
            (fs, None, source)
        }
        (Some(spec), _) => {
            let (fs, bd) = open_emulated(spec, p)?;
            (fs, Some(bd), "flashlog-emu".to_string())
        }
        (None, None) => bail!("no device opened for {}", p.name),
    };
    let fs = Arc::new(fs);
    let mut session = match flashlog_fuse::mount(fs.clone(), &source, &p.mountpoint, &p.cfg) {
        Ok(s) => s,
        Err(e) => {
            finish(fs, p, emu.as_ref());
            return Err(anyhow!(
                "cannot mount {} on {}: {e}",
                p.name,
                p.mountpoint.display()
            ));
        }
    };
    let ours = find_our_mount(&p.mountpoint);
    if ours.is_none() {
        tracing::warn!(
            "the new mount on {} is not in /proc/self/mountinfo; signals will not detach it",
            p.mountpoint.display()
        );
    }
    let pid = std::process::id();
    if let Some(f) = pid_file {
        std::fs::write(f, format!("{pid}\n"))
            .with_context(|| format!("cannot write the pid file {}", f.display()))?;
    }
    let vanish = if p.emu.is_some() {
        " (in memory: its contents vanish at unmount)"
    } else {
        ""
    };
    let how = format!("unmount with `umount {}`", p.mountpoint.display());
    tracing::info!(
        "mounted {}{vanish} on {} ({}); {how}",
        p.name,
        p.mountpoint.display(),
        p.cfg.summary()
    );
    match ready {
        Some(r) => {
            let log = std::fs::read_link("/proc/self/fd/2")
                .map(|l| l.display().to_string())
                .unwrap_or_else(|_| "?".into());
            r.ok(&format!(
                "flashlog: mounted {}{vanish} on {} (pid {pid}, log {log}); {how}",
                p.name,
                p.mountpoint.display()
            ));
        }
        None => eprintln!(
            "flashlog: mounted {}{vanish} on {}; Ctrl-C or `umount {}` unmounts",
            p.name,
            p.mountpoint.display(),
            p.mountpoint.display()
        ),
    }
    let served_flag = Arc::new(AtomicBool::new(false));
    spawn_signal_thread(
        signals,
        session.unmount_callable(),
        p.mountpoint.clone(),
        ours,
        served_flag.clone(),
    )?;
    let served = session.run();
    served_flag.store(true, Ordering::Release);
    if let Err(e) = &served {
        tracing::error!("FUSE session ended with an error: {e}");
    }
    Ok(finish(fs, p, emu.as_ref()))
}

/// `--device`: a fresh emulated device, formatted with mkfs's defaults (as the bench does
/// for a policy) and mounted. The core refuses gc=device or gc=none on a device without the
/// capability, with the reason.
fn open_emulated(spec: &DeviceSpec, p: &Prepared) -> Result<(Fs, BenchDevice)> {
    let bd = spec.open()?;
    Fs::mkfs(
        bd.dev.clone(),
        &flashlog_core::MkfsOptions {
            force: true,
            label: "emulated".into(),
            ..Default::default()
        },
    )
    .map_err(|e| anyhow!("mkfs on {}: {e}", p.name))?;
    let fs = Fs::mount(bd.dev.clone(), p.cfg.core.clone())
        .map_err(|e| anyhow!("cannot mount {}: {e}", p.name))?;
    Ok((fs, bd))
}

/// The final checkpoint. Every other holder of the `Fs` is gone once the session returned.
/// On an emulated device, then the device's summary; its contents are dropped with it.
fn finish(fs: Arc<Fs>, p: &Prepared, emu: Option<&BenchDevice>) -> ExitCode {
    let stats = fs.stats();
    let r = match Arc::try_unwrap(fs) {
        Ok(fs) => fs.unmount(),
        Err(fs) => {
            tracing::warn!(
                "the volume is still referenced; writing a checkpoint without unmounting"
            );
            fs.sync()
        }
    };
    match r {
        Ok(()) => {
            let msg = format!(
                "unmounted {} from {} cleanly: final checkpoint written (app wrote {:.1} MiB, device wrote {:.1} MiB, {} checkpoints before the final one, {} fsyncs)",
                p.name,
                p.mountpoint.display(),
                stats.app_write_bytes as f64 / (1 << 20) as f64,
                stats.dev_write_blocks as f64 * 4096.0 / (1 << 20) as f64,
                stats.checkpoints,
                stats.fsyncs
            );
            tracing::info!("{msg}");
            match emu {
                Some(bd) => {
                    emu_summary(bd, &stats);
                    emu_final_checks(p, bd)
                }
                None => ExitCode::SUCCESS,
            }
        }
        Err(e) if emu.is_some() => {
            tracing::error!("final checkpoint of {} failed: {e}", p.name);
            ExitCode::from(1)
        }
        Err(e) => {
            tracing::error!(
                "final checkpoint of {} failed: {e}; the next mount recovers the last good checkpoint and fsync'd data; run `flashlog fsck {}`",
                p.source.display(),
                p.source.display()
            );
            ExitCode::from(1)
        }
    }
}

/// The emulated device's summary at unmount.
fn emu_summary(bd: &BenchDevice, fs: &flashlog_core::Counters) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let (_, written) = bd.dev.bytes();
    let msg = match bd.ssd_stats() {
        Some(s) => format!(
            "emulated device summary: host wrote {:.1} MiB, NAND wrote {:.1} MiB, WAF {:.3}; device GC: {} runs{}, {} pages moved; upcalls sent {}, acked {}; applied by the file system {} ({} block moves)",
            mib(s.host_write_bytes),
            mib(s.nand_write_bytes),
            s.waf,
            s.gc_runs,
            if s.ftl.gc_idle_runs > 0 {
                format!(" ({} in idle time)", s.ftl.gc_idle_runs)
            } else {
                String::new()
            },
            s.gc_pages_moved,
            s.ftl.upcalls_sent,
            s.ftl.upcalls_acked,
            fs.upcalls_applied,
            fs.upcall_pairs_applied
        ),
        None => format!("RAM device summary: host wrote {:.1} MiB", mib(written)),
    };
    tracing::info!("{msg}");
}

/// On an emulated device, the last chance to look at the volume: fsck it, and log what
/// `flashlog inspect` shows (for a `gc=none` volume the live interval of each log and the
/// discard log: the CLI cannot open such a volume otherwise, since no file or block device
/// offers an infinite space). Then its contents are dropped. Failure if fsck is not clean.
fn emu_final_checks(p: &Prepared, bd: &BenchDevice) -> ExitCode {
    let code = match flashlog_core::fsck::fsck(&*bd.dev) {
        Ok(r) if r.is_clean() => {
            tracing::info!("fsck of {} after the unmount: {r}", p.name);
            ExitCode::SUCCESS
        }
        Ok(r) => {
            tracing::error!("fsck of {} after the unmount:\n{r}", p.name);
            ExitCode::from(1)
        }
        Err(e) => {
            tracing::error!("fsck of {} after the unmount failed: {e}", p.name);
            ExitCode::from(1)
        }
    };
    match crate::inspect::render(&*bd.dev, &p.name, false, false) {
        Ok(text) => tracing::info!("flashlog inspect {}:\n{}", p.name, text.trim_end()),
        Err(e) => tracing::warn!("inspect of {} failed: {e}", p.name),
    }
    tracing::info!(
        "{}: contents discarded (the device lived in memory)",
        p.name
    );
    code
}

/// The signal thread: SIGINT, SIGTERM and SIGHUP unmount the mount (lazily if busy), but
/// only while our FUSE mount is the topmost at the mount point (`Standing`): once it is
/// unmounted or detached, a further signal (a second Ctrl-C during the final checkpoint)
/// only logs, instead of unmounting whatever file system lies under the mount point.
fn spawn_signal_thread(
    signals: SigSet,
    mut unmounter: fuser::SessionUnmounter,
    mountpoint: PathBuf,
    ours: Option<OurMount>,
    served: Arc<AtomicBool>,
) -> Result<()> {
    std::thread::Builder::new()
        .name("flashlog-signals".into())
        .spawn(move || {
            let mut first = true;
            // This thread unmounted the mount, or detached it lazily.
            let (mut unmounted, mut detached) = (false, false);
            while let Ok(sig) = signals.wait() {
                let mp = mountpoint.display();
                let here = standing(ours.as_ref(), &mountpoint);
                let r = match here {
                    Standing::Gone if served.load(Ordering::Acquire) || unmounted => {
                        tracing::info!("{sig}: {mp} is already unmounted; the final checkpoint is being written, then this process exits");
                        continue;
                    }
                    Standing::Gone => {
                        let how = if detached {
                            "was detached lazily while in use"
                        } else {
                            "is no longer mounted (detached with `umount -l` while in use?)"
                        };
                        tracing::info!("{sig}: {mp} {how}; this process serves the files still open, then writes its final checkpoint and exits once the last is closed");
                        continue;
                    }
                    Standing::Covered => {
                        tracing::warn!("{sig}: another file system is mounted over {mp}: not unmounting (that would unmount the other one); unmount it first, then signal again");
                        continue;
                    }
                    Standing::Unknown if !first => {
                        tracing::info!("{sig}: an unmount of {mp} was already requested");
                        continue;
                    }
                    Standing::OnTop | Standing::Unknown => {
                        tracing::info!("{sig}: unmounting {mp}");
                        if first {
                            unmounter.unmount().map_err(|e| e.to_string())
                        } else {
                            Err("a further signal".to_string())
                        }
                    }
                };
                first = false;
                unmounted |= r.is_ok();
                if let Err(why) = r {
                    // Busy (a process has a file open or its cwd inside): detach now, the
                    // kernel ends the connection when the last user leaves. Only our own
                    // mount: checked again right before.
                    if !matches!(here, Standing::Unknown)
                        && standing(ours.as_ref(), &mountpoint) != Standing::OnTop
                    {
                        continue;
                    }
                    tracing::warn!(
                        "unmount of {mp} did not complete ({why}); detaching it lazily"
                    );
                    match nix::mount::umount2(&mountpoint, nix::mount::MntFlags::MNT_DETACH) {
                        Ok(()) => detached = true,
                        Err(e) => tracing::error!(
                            "lazy unmount of {mp} failed: {e}; use `fusermount3 -uz {mp}`"
                        ),
                    }
                }
            }
        })
        .context("spawning the signal thread")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_parse_with_escapes() {
        let l = "512 27 0:44 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:300 - fuse.flashlog /tmp/x\\040y.img rw,user_id=0";
        let m = parse_mountinfo_line(l).unwrap();
        assert_eq!((m.id, m.parent, m.dev.as_str()), (512, 27, "0:44"));
        assert_eq!(m.point, Path::new("/tmp/a b"));
        assert_eq!(m.fstype, "fuse.flashlog");
        assert_eq!(m.source, "/tmp/x y.img");
        // No optional fields, a trailing backslash left as it is.
        let m = parse_mountinfo_line("30 1 0:25 / /x\\ rw - tmpfs tmpfs rw").unwrap();
        assert_eq!(
            (m.point.as_path(), m.fstype.as_str()),
            (Path::new("/x\\"), "tmpfs")
        );
        assert!(parse_mountinfo_line("garbage").is_none());
    }
}
