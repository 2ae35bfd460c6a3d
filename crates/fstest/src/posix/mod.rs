//! The POSIX conformance suite behind `flashlog-posix`.
//!
//! This module owns the case registry, the per-case sandbox directory, the
//! runner (filter, list, PASS/FAIL/SKIP reporting) and the helpers the case
//! modules share: errno assertions, timestamp "tick" waits and running a
//! closure as an unprivileged uid in a forked child.

mod cases_data;
mod cases_meta;
mod cases_names;
mod cases_open;
mod cases_perm;

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::sys;

/// What a case reports when it did not fail.
#[derive(Debug)]
pub enum Outcome {
    Pass,
    Skip(String),
}

/// A case body: `Err` means FAIL (with the reason), `Ok(Skip)` means the file
/// system does not support an optional feature.
pub type CaseFn = fn(&Ctx) -> Result<Outcome>;

/// One named test case.
pub struct Case {
    pub name: &'static str,
    pub run: CaseFn,
}

/// Builds a `Case` list from `name => function` pairs.
macro_rules! cases {
    ($($name:literal => $f:path),* $(,)?) => {
        vec![$($crate::posix::Case { name: $name, run: $f }),*]
    };
}
pub(crate) use cases;

/// Per-case context: a fresh, empty directory plus the identity to use for
/// unprivileged checks.
pub struct Ctx {
    /// The case's own directory (mode 0755, owned by the runner).
    pub dir: PathBuf,
    /// Unprivileged uid/gid used in forked children (default 65534).
    pub uid: u32,
    pub gid: u32,
    /// A second unprivileged uid (uid + 1) for "other user" checks.
    pub uid2: u32,
    /// Whether the runner has root privileges (needed for uid switching).
    pub is_root: bool,
    /// Why unprivileged checks cannot run, if they cannot.
    pub unpriv_skip: Option<String>,
}

impl Ctx {
    /// Path of `name` inside the case directory.
    pub fn p(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Returns a SKIP outcome when unprivileged checks are unavailable.
    pub fn need_unpriv(&self) -> Option<Outcome> {
        self.unpriv_skip.clone().map(Outcome::Skip)
    }

    /// Runs `f` in a forked child that has dropped to `uid`/`gid` (no
    /// supplementary groups). The child's error message is carried back.
    pub fn as_user(&self, uid: u32, gid: u32, f: impl FnOnce() -> Result<()>) -> Result<()> {
        run_as(uid, gid, f)
    }
}

/// Forks, drops privileges in the child with setgroups/setgid/setuid, runs
/// `f` and reports its result through a pipe.
pub fn run_as(uid: u32, gid: u32, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let mut fds = [0i32; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe2: {}", io::Error::last_os_error());
    }
    let (rd, wr) = (fds[0], fds[1]);
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", io::Error::last_os_error());
    }
    if pid == 0 {
        unsafe { libc::close(rd) };
        let res: Result<()> = (|| {
            if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
                bail!("setgroups: {}", io::Error::last_os_error());
            }
            if unsafe { libc::setgid(gid) } != 0 {
                bail!("setgid({gid}): {}", io::Error::last_os_error());
            }
            if unsafe { libc::setuid(uid) } != 0 {
                bail!("setuid({uid}): {}", io::Error::last_os_error());
            }
            match catch_unwind(AssertUnwindSafe(f)) {
                Ok(r) => r,
                Err(_) => bail!("panic in unprivileged child"),
            }
        })();
        let code = match res {
            Ok(()) => 0,
            Err(e) => {
                let msg = format!("{e:#}");
                unsafe { libc::write(wr, msg.as_ptr().cast(), msg.len()) };
                1
            }
        };
        unsafe { libc::_exit(code) };
    }
    unsafe { libc::close(wr) };
    let mut msg = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = unsafe { libc::read(rd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        msg.extend_from_slice(&buf[..n as usize]);
    }
    unsafe { libc::close(rd) };
    let mut status = 0;
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else if !msg.is_empty() {
        bail!("as uid {uid}: {}", String::from_utf8_lossy(&msg))
    } else {
        bail!("as uid {uid}: child died with wait status {status:#x}")
    }
}

/// Asserts that `r` failed with one of `want`; `what` names the operation.
pub fn expect_err<T>(r: io::Result<T>, want: &[i32], what: &str) -> Result<()> {
    match &r {
        Err(e) if want.contains(&sys::errno_of(e)) => Ok(()),
        _ => {
            let names: Vec<_> = want.iter().map(|e| sys::errno_name(*e)).collect();
            bail!(
                "{what}: expected {}, got {}",
                names.join(" or "),
                sys::describe(&r)
            )
        }
    }
}

/// Adds the operation name to an `io::Result` error.
pub fn ok<T>(r: io::Result<T>, what: &str) -> Result<T> {
    r.map_err(|e| {
        let n = sys::errno_of(&e);
        anyhow::anyhow!("{what}: unexpected {} ({n}): {e}", sys::errno_name(n))
    })
}

/// Fails with `msg` unless `cond` holds.
macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            anyhow::bail!($($msg)+);
        }
    };
}
pub(crate) use check;

/// Waits long enough for the file system clock to advance, so that a
/// following operation must produce strictly newer timestamps.
pub fn tick() {
    std::thread::sleep(Duration::from_millis(25));
}

/// Creates a regular file with `data` and mode 0644.
pub fn make_file(p: &Path, data: &[u8]) -> Result<()> {
    let fd = ok(
        sys::open(p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644),
        &format!("create {}", p.display()),
    )?;
    ok(sys::pwrite_all(&fd, data, 0), "write")?;
    Ok(())
}

/// Reads a whole file by path.
pub fn read_file(p: &Path) -> Result<Vec<u8>> {
    let fd = ok(
        sys::open(p, libc::O_RDONLY, 0),
        &format!("open {}", p.display()),
    )?;
    ok(sys::read_all(&fd), "read")
}

/// Removes a tree even if a case left directories without permissions or
/// paths longer than PATH_MAX (works relative to directory fds).
pub fn force_remove(p: &Path) -> io::Result<()> {
    let parent = p.parent().unwrap_or(Path::new("/"));
    let name = p
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let pfd = sys::open(parent, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let c = std::ffi::CString::new(name.as_encoded_bytes()).expect("NUL in name");
    match remove_at(pfd.as_raw_fd(), &c) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

fn remove_at(parent: RawFd, name: &CStr) -> io::Result<()> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatat(parent, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if sys::file_type(st.st_mode) != libc::S_IFDIR {
        if unsafe { libc::unlinkat(parent, name.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(());
    }
    unsafe { libc::fchmodat(parent, name.as_ptr(), 0o700, 0) };
    let fd = unsafe {
        libc::openat(
            parent,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let dir = unsafe { libc::fdopendir(fd) };
    if dir.is_null() {
        unsafe { libc::close(fd) };
        return Err(io::Error::last_os_error());
    }
    let mut names = Vec::new();
    loop {
        let e = unsafe { libc::readdir64(dir) };
        if e.is_null() {
            break;
        }
        let n = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) };
        if n.to_bytes() != b"." && n.to_bytes() != b".." {
            names.push(n.to_owned());
        }
    }
    let mut res = Ok(());
    for n in &names {
        if let Err(e) = remove_at(unsafe { libc::dirfd(dir) }, n) {
            res = Err(e);
        }
    }
    unsafe { libc::closedir(dir) };
    res?;
    if unsafe { libc::unlinkat(parent, name.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Every case of the suite, in run order.
pub fn all_cases() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(cases_perm::cases());
    v.extend(cases_open::cases());
    v.extend(cases_names::cases());
    v.extend(cases_meta::cases());
    v.extend(cases_data::cases());
    v
}

/// Runner options (the CLI maps onto this).
pub struct RunOpts {
    pub dir: PathBuf,
    pub filters: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    pub keep: bool,
}

/// Result counts of a run.
#[derive(Default, Debug)]
pub struct Summary {
    pub pass: usize,
    pub fail: usize,
    pub skip: usize,
}

/// Selects the cases matching any filter (all when no filter is given).
pub fn selected(filters: &[String]) -> Vec<Case> {
    all_cases()
        .into_iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name.contains(f.as_str())))
        .collect()
}

/// Checks that an unprivileged uid can reach `dir` (search permission on
/// every ancestor), otherwise permission cases are skipped.
fn probe_unpriv(dir: &Path, uid: u32, gid: u32, is_root: bool) -> Option<String> {
    if !is_root {
        return Some("needs root to switch to an unprivileged uid".into());
    }
    let d = dir.to_path_buf();
    match run_as(uid, gid, move || {
        ok(
            sys::access(&d, libc::X_OK),
            "access(X_OK) on the work directory",
        )
    }) {
        Ok(()) => None,
        Err(e) => Some(format!("uid {uid} cannot reach the work directory: {e:#}")),
    }
}

/// Runs the selected cases under `opts.dir`, printing one line per case.
pub fn run(opts: &RunOpts) -> Result<Summary> {
    let is_root = unsafe { libc::geteuid() } == 0;
    sys::umask(0);
    let st = sys::stat(&opts.dir).with_context(|| format!("stat {}", opts.dir.display()))?;
    if sys::file_type(st.st_mode) != libc::S_IFDIR {
        bail!("{} is not a directory", opts.dir.display());
    }
    let root = opts.dir.join(format!(
        "flashlog-posix.{}.{}",
        std::process::id(),
        sys::now_ns() % 1_000_000
    ));
    sys::mkdir(&root, 0o755).with_context(|| format!("mkdir {}", root.display()))?;
    let unpriv_skip = probe_unpriv(&root, opts.uid, opts.gid, is_root);
    let cases = selected(&opts.filters);
    println!(
        "flashlog-posix: {} case(s) in {} (unprivileged uid {}:{}{})",
        cases.len(),
        root.display(),
        opts.uid,
        opts.gid,
        match &unpriv_skip {
            Some(r) => format!(", permission cases skipped: {r}"),
            None => String::new(),
        }
    );
    let mut sum = Summary::default();
    let width = cases.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for (i, case) in cases.iter().enumerate() {
        let dir = root.join(format!("c{i:03}"));
        let started = Instant::now();
        let res = match sys::mkdir(&dir, 0o755) {
            Err(e) => Err(anyhow::anyhow!("cannot create case directory: {e}")),
            Ok(()) => {
                let ctx = Ctx {
                    dir: dir.clone(),
                    uid: opts.uid,
                    gid: opts.gid,
                    uid2: opts.uid.wrapping_add(1),
                    is_root,
                    unpriv_skip: unpriv_skip.clone(),
                };
                match catch_unwind(AssertUnwindSafe(|| (case.run)(&ctx))) {
                    Ok(r) => r,
                    Err(p) => {
                        let m = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        Err(anyhow::anyhow!("panicked: {m}"))
                    }
                }
            }
        };
        // Undo a umask change a case may have left behind.
        sys::umask(0);
        let res = match (res, opts.keep) {
            (r, true) => r,
            (r, false) => match force_remove(&dir) {
                Ok(()) => r,
                Err(e) if r.is_ok() => {
                    Err(anyhow::anyhow!("cleanup of case directory failed: {e}"))
                }
                Err(_) => r,
            },
        };
        let ms = started.elapsed().as_millis();
        match res {
            Ok(Outcome::Pass) => {
                sum.pass += 1;
                println!("PASS {:width$}  ({ms} ms)", case.name);
            }
            Ok(Outcome::Skip(why)) => {
                sum.skip += 1;
                println!("SKIP {:width$}  {why}", case.name);
            }
            Err(e) => {
                sum.fail += 1;
                println!("FAIL {:width$}  {e:#}", case.name);
            }
        }
    }
    if !opts.keep {
        if let Err(e) = force_remove(&root) {
            println!("warning: could not remove {}: {e}", root.display());
        }
    }
    println!(
        "summary: {} passed, {} failed, {} skipped",
        sum.pass, sum.fail, sum.skip
    );
    Ok(sum)
}
