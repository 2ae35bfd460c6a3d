//! The multi-process stress run behind `flashlog-stress`.
//!
//! This module owns the shared tree layout (top dirs `d<i>` that always
//! exist, optional subdirs `s<j>` below them, files `f<k>` in any of them),
//! the self-describing slot format of file contents, the child op loop with
//! its classification of errnos into "legal under concurrency" and
//! "unexpected", and the parent's final consistency check (every entry
//! stats, names are well-formed, link counts match the names found per
//! inode, every slot is zero or a checksummed record some child wrote).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::sys;

/// Every write covers exactly one slot at a slot-aligned offset, so a file
/// is always a whole number of slots.
pub const SLOT: usize = 256;
const MAGIC: &[u8; 4] = b"FLS1";
const TOP_DIRS: usize = 4;
const SUB_DIRS: usize = 3;

/// Options of one stress run.
#[derive(Clone, Debug)]
pub struct StressOpts {
    pub dir: PathBuf,
    pub procs: usize,
    pub seconds: f64,
    pub seed: u64,
    /// Upper bound on files (the file name space is sized from it).
    pub max_files: usize,
    /// Upper bound on one file's size (rounded down to whole slots).
    pub max_file_size: usize,
    pub keep: bool,
    /// Self-test: write a garbage slot before verification (must fail).
    pub inject_corruption: bool,
}

/// Builds the slot `writer` writes as its `seq`-th record.
pub fn make_slot(writer: u32, seq: u64) -> [u8; SLOT] {
    let mut s = [0u8; SLOT];
    s[0..4].copy_from_slice(MAGIC);
    s[4..8].copy_from_slice(&writer.to_le_bytes());
    s[8..16].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in s[24..].iter_mut().enumerate() {
        *b = ((writer as u64 * 131 + seq * 7 + i as u64) % 251) as u8;
    }
    let crc = slot_crc(&s);
    s[16..20].copy_from_slice(&crc.to_le_bytes());
    s
}

fn slot_crc(s: &[u8]) -> u32 {
    let c = crc32c::crc32c(&s[0..16]);
    crc32c::crc32c_append(c, &s[20..])
}

/// Checks one slot: `Ok(None)` for an all-zero slot, `Ok(Some((w, seq)))`
/// for a valid record, `Err` describing why it is garbage.
pub fn check_slot(s: &[u8], seqs: &[u64]) -> std::result::Result<Option<(u32, u64)>, String> {
    if s.iter().all(|b| *b == 0) {
        return Ok(None);
    }
    if &s[0..4] != MAGIC {
        return Err(format!("bad magic {:02x?}", &s[0..4]));
    }
    let w = u32::from_le_bytes(s[4..8].try_into().unwrap());
    let seq = u64::from_le_bytes(s[8..16].try_into().unwrap());
    let crc = u32::from_le_bytes(s[16..20].try_into().unwrap());
    if slot_crc(s) != crc {
        return Err(format!("checksum mismatch (writer {w}, seq {seq})"));
    }
    let Some(&n) = seqs.get(w as usize) else {
        return Err(format!("writer id {w} out of range"));
    };
    if seq >= n {
        return Err(format!(
            "writer {w} never wrote seq {seq} (it wrote {n} records)"
        ));
    }
    if s != make_slot(w, seq) {
        return Err(format!(
            "record (writer {w}, seq {seq}) differs from what was written"
        ));
    }
    Ok(Some((w, seq)))
}

/// Names and sizes of the shared tree.
#[derive(Clone)]
struct Layout {
    root: PathBuf,
    names: usize,
    max_slots: u64,
}

impl Layout {
    fn top(&self, t: usize) -> PathBuf {
        self.root.join(format!("d{t}"))
    }

    fn rand_dir(&self, rng: &mut ChaCha8Rng) -> PathBuf {
        let t = self.top(rng.random_range(0..TOP_DIRS));
        if rng.random_bool(0.4) {
            t.join(format!("s{}", rng.random_range(0..SUB_DIRS)))
        } else {
            t
        }
    }

    fn rand_sub(&self, rng: &mut ChaCha8Rng) -> PathBuf {
        self.top(rng.random_range(0..TOP_DIRS))
            .join(format!("s{}", rng.random_range(0..SUB_DIRS)))
    }

    fn rand_file(&self, rng: &mut ChaCha8Rng) -> PathBuf {
        self.rand_dir(rng)
            .join(format!("f{}", rng.random_range(0..self.names)))
    }
}

/// Per-op counters of one child (or the sum over children).
#[derive(Default, Debug, Clone)]
pub struct Counts {
    pub ok: BTreeMap<String, u64>,
    /// (op, errno name) -> count of errors that are legal under concurrency.
    pub legal: BTreeMap<(String, String), u64>,
    pub failures: Vec<String>,
}

impl Counts {
    fn encode(&self, seq: u64) -> String {
        let mut s = format!("seq {seq}\n");
        for (k, v) in &self.ok {
            s.push_str(&format!("ok {k} {v}\n"));
        }
        for ((op, e), v) in &self.legal {
            s.push_str(&format!("legal {op} {e} {v}\n"));
        }
        for f in &self.failures {
            s.push_str(&format!("fail {}\n", f.replace('\n', " ")));
        }
        s
    }

    /// Merges a child's encoded report; returns the child's record count.
    fn merge(&mut self, text: &str) -> u64 {
        let mut seq = 0;
        for line in text.lines() {
            let parts: Vec<&str> = line.splitn(4, ' ').collect();
            match parts.as_slice() {
                ["seq", n] => seq = n.parse().unwrap_or(0),
                ["ok", k, v] => {
                    *self.ok.entry(k.to_string()).or_insert(0) += v.parse::<u64>().unwrap_or(0)
                }
                ["legal", op, e, v] => {
                    *self
                        .legal
                        .entry((op.to_string(), e.to_string()))
                        .or_insert(0) += v.parse::<u64>().unwrap_or(0)
                }
                ["fail", ..] => self.failures.push(line[5..].to_string()),
                _ => {}
            }
        }
        seq
    }
}

struct Child {
    id: u32,
    lay: Layout,
    rng: ChaCha8Rng,
    seq: u64,
    counts: Counts,
}

impl Child {
    /// Records the result of `op`; errors in `legal` are counted, anything
    /// else becomes a failure.
    fn note<T>(
        &mut self,
        op: &str,
        r: io::Result<T>,
        legal: &[i32],
        what: &dyn Fn() -> String,
    ) -> Option<T> {
        match r {
            Ok(v) => {
                *self.counts.ok.entry(op.to_string()).or_insert(0) += 1;
                Some(v)
            }
            Err(e) => {
                let n = sys::errno_of(&e);
                if legal.contains(&n) {
                    *self
                        .counts
                        .legal
                        .entry((op.to_string(), sys::errno_name(n).to_string()))
                        .or_insert(0) += 1;
                } else {
                    self.counts.failures.push(format!(
                        "child {}: {op} {}: unexpected {} ({n}): {e}",
                        self.id,
                        what(),
                        sys::errno_name(n)
                    ));
                }
                None
            }
        }
    }

    fn next_slot(&mut self) -> [u8; SLOT] {
        let s = make_slot(self.id, self.seq);
        self.seq += 1;
        s
    }

    fn step(&mut self) {
        use libc::{EEXIST, ENOENT, ENOTEMPTY};
        let k = self.rng.random_range(0..100u32);
        let lay = self.lay.clone();
        match k {
            0..=11 => {
                let p = lay.rand_file(&mut self.rng);
                let excl = if self.rng.random_bool(0.5) {
                    libc::O_EXCL
                } else {
                    0
                };
                let r = sys::open(&p, libc::O_CREAT | libc::O_WRONLY | excl, 0o644);
                if let Some(fd) =
                    self.note("create", r, &[ENOENT, EEXIST], &|| p.display().to_string())
                {
                    let slot = self.next_slot();
                    let r = sys::pwrite_all(&fd, &slot, 0);
                    self.note("create-write", r, &[], &|| p.display().to_string());
                }
            }
            12..=27 => {
                let p = lay.rand_file(&mut self.rng);
                let idx = self.rng.random_range(0..lay.max_slots);
                let r = sys::open(&p, libc::O_WRONLY, 0);
                if let Some(fd) = self.note("open-write", r, &[ENOENT], &|| p.display().to_string())
                {
                    let slot = self.next_slot();
                    let r = sys::pwrite_all(&fd, &slot, idx * SLOT as u64);
                    self.note("write", r, &[], &|| format!("{} slot {idx}", p.display()));
                }
            }
            28..=35 => {
                let p = lay.rand_file(&mut self.rng);
                let r = sys::open(&p, libc::O_WRONLY | libc::O_APPEND, 0);
                if let Some(fd) =
                    self.note("open-append", r, &[ENOENT], &|| p.display().to_string())
                {
                    let full =
                        sys::fstat(&fd).map(|s| s.st_size as u64 >= lay.max_slots * SLOT as u64);
                    if let Some(false) = self.note("fstat", full, &[], &|| p.display().to_string())
                    {
                        let slot = self.next_slot();
                        let r = sys::write(&fd, &slot).and_then(|n| {
                            if n == SLOT {
                                Ok(n)
                            } else {
                                Err(io::Error::new(
                                    io::ErrorKind::WriteZero,
                                    format!("short append of {n} bytes"),
                                ))
                            }
                        });
                        self.note("append", r, &[], &|| p.display().to_string());
                    }
                }
            }
            36..=45 => {
                let (a, b) = (lay.rand_file(&mut self.rng), lay.rand_file(&mut self.rng));
                let r = sys::rename(&a, &b);
                self.note("rename-file", r, &[ENOENT], &|| {
                    format!("{} -> {}", a.display(), b.display())
                });
            }
            46..=49 => {
                let (a, b) = (lay.rand_sub(&mut self.rng), lay.rand_sub(&mut self.rng));
                let r = sys::rename(&a, &b);
                self.note("rename-dir", r, &[ENOENT, ENOTEMPTY, EEXIST], &|| {
                    format!("{} -> {}", a.display(), b.display())
                });
            }
            50..=56 => {
                let (a, b) = (lay.rand_file(&mut self.rng), lay.rand_file(&mut self.rng));
                let r = sys::link(&a, &b);
                self.note("link", r, &[ENOENT, EEXIST], &|| {
                    format!("{} -> {}", a.display(), b.display())
                });
            }
            57..=64 => {
                let p = lay.rand_file(&mut self.rng);
                let r = sys::unlink(&p);
                self.note("unlink", r, &[ENOENT], &|| p.display().to_string());
            }
            65..=68 => {
                let p = lay.rand_sub(&mut self.rng);
                let r = sys::mkdir(&p, 0o755);
                self.note("mkdir", r, &[EEXIST], &|| p.display().to_string());
            }
            69..=71 => {
                let p = lay.rand_sub(&mut self.rng);
                let r = sys::rmdir(&p);
                self.note("rmdir", r, &[ENOENT, ENOTEMPTY, EEXIST], &|| {
                    p.display().to_string()
                });
            }
            72..=79 => {
                let d = lay.rand_dir(&mut self.rng);
                let is_top = d.parent() == Some(lay.root.as_path());
                let r = list_dir(&d);
                if let Some(names) = self.note("readdir", r, &[ENOENT], &|| d.display().to_string())
                {
                    for n in names {
                        if !valid_name(&n, is_top, lay.names) {
                            self.counts.failures.push(format!(
                                "child {}: readdir {} returned unexpected name {n:?}",
                                self.id,
                                d.display()
                            ));
                        }
                    }
                }
            }
            80..=87 => {
                let p = if self.rng.random_bool(0.7) {
                    lay.rand_file(&mut self.rng)
                } else {
                    lay.rand_sub(&mut self.rng)
                };
                let r = sys::lstat(&p);
                if let Some(st) = self.note("stat", r, &[ENOENT], &|| p.display().to_string()) {
                    let name = p
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let ty = sys::file_type(st.st_mode);
                    let bad = if name.starts_with('f') {
                        (ty != libc::S_IFREG)
                            .then(|| format!("file name with type {ty:o}"))
                            .or_else(|| {
                                (st.st_size as usize % SLOT != 0).then(|| {
                                    format!("size {} not a multiple of {SLOT}", st.st_size)
                                })
                            })
                    } else {
                        (ty != libc::S_IFDIR).then(|| format!("dir name with type {ty:o}"))
                    };
                    if let Some(b) = bad {
                        self.counts.failures.push(format!(
                            "child {}: stat {}: {b}",
                            self.id,
                            p.display()
                        ));
                    }
                }
            }
            88..=94 => {
                let p = lay.rand_file(&mut self.rng);
                // Mostly shrink: growing truncates would fill files with zero slots.
                let len = self.rng.random_range(0..=lay.max_slots.div_ceil(4)) * SLOT as u64;
                let r = sys::truncate(&p, len as i64);
                self.note("truncate", r, &[ENOENT], &|| {
                    format!("{} to {len}", p.display())
                });
            }
            _ => {
                let p = if self.rng.random_bool(0.7) {
                    lay.rand_file(&mut self.rng)
                } else {
                    lay.rand_dir(&mut self.rng)
                };
                let r = sys::open(&p, libc::O_RDONLY, 0);
                if let Some(fd) = self.note("open-fsync", r, &[ENOENT], &|| p.display().to_string())
                {
                    let r = if self.rng.random_bool(0.5) {
                        sys::fsync(&fd)
                    } else {
                        sys::fdatasync(&fd)
                    };
                    self.note("fsync", r, &[], &|| p.display().to_string());
                }
            }
        }
    }
}

fn list_dir(d: &Path) -> io::Result<Vec<String>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(d)? {
        match e {
            Ok(e) => v.push(String::from_utf8_lossy(e.file_name().as_bytes()).into_owned()),
            // An entry racing with removal is fine; a failing stream is not.
            Err(e) => return Err(e),
        }
    }
    Ok(v)
}

fn valid_name(n: &str, in_top: bool, names: usize) -> bool {
    let num = |p: &str, max: usize| {
        n.strip_prefix(p)
            .and_then(|r| r.parse::<usize>().ok())
            .is_some_and(|k| k < max && n == format!("{p}{k}"))
    };
    num("f", names) || (in_top && num("s", SUB_DIRS))
}

/// Result of the parent's final tree verification.
#[derive(Default, Debug)]
pub struct Verify {
    pub dirs: usize,
    pub files: usize,
    pub names: usize,
    pub bytes: u64,
    pub records: u64,
    pub zero_slots: u64,
    pub problems: Vec<String>,
}

/// Verifies the tree after all children exited.
fn verify(lay: &Layout, seqs: &[u64]) -> Verify {
    let mut v = Verify::default();
    // ino -> (nlink, names)
    let mut inodes: HashMap<u64, (u64, Vec<PathBuf>)> = HashMap::new();
    let mut dirs = Vec::new();
    for t in 0..TOP_DIRS {
        dirs.push((lay.top(t), true));
    }
    while let Some((d, is_top)) = dirs.pop() {
        v.dirs += 1;
        let names = match list_dir(&d) {
            Ok(n) => n,
            Err(e) => {
                v.problems.push(format!("readdir {}: {e}", d.display()));
                continue;
            }
        };
        let mut seen = HashMap::new();
        let mut subdirs = 0;
        for n in &names {
            *seen.entry(n.clone()).or_insert(0) += 1;
        }
        for (n, c) in &seen {
            if *c > 1 {
                v.problems
                    .push(format!("{}: name {n:?} listed {c} times", d.display()));
            }
        }
        for n in seen.keys() {
            let p = d.join(n);
            if !valid_name(n, is_top, lay.names) {
                v.problems.push(format!("unexpected entry {}", p.display()));
            }
            let st = match sys::lstat(&p) {
                Ok(st) => st,
                Err(e) => {
                    v.problems
                        .push(format!("readdir entry {} does not stat: {e}", p.display()));
                    continue;
                }
            };
            match sys::file_type(st.st_mode) {
                libc::S_IFDIR if n.starts_with('s') => {
                    subdirs += 1;
                    dirs.push((p, false));
                }
                libc::S_IFREG if n.starts_with('f') => {
                    v.names += 1;
                    let e = inodes.entry(st.st_ino).or_insert((st.st_nlink, Vec::new()));
                    e.1.push(p);
                }
                t => v
                    .problems
                    .push(format!("{} has unexpected type {t:o}", p.display())),
            }
        }
        match sys::lstat(&d) {
            Ok(st) if st.st_nlink != 2 + subdirs => v.problems.push(format!(
                "{}: nlink {} but it has {subdirs} subdirectories (want {})",
                d.display(),
                st.st_nlink,
                2 + subdirs
            )),
            Ok(_) => {}
            Err(e) => v.problems.push(format!("stat {}: {e}", d.display())),
        }
    }
    for (ino, (nlink, paths)) in &inodes {
        v.files += 1;
        if *nlink != paths.len() as u64 {
            v.problems.push(format!(
                "inode {ino}: nlink {nlink} but {} name(s) found: {}",
                paths.len(),
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let p = &paths[0];
        let data = match sys::open(p, libc::O_RDONLY, 0).and_then(|fd| sys::read_all(&fd)) {
            Ok(d) => d,
            Err(e) => {
                v.problems.push(format!("read {}: {e}", p.display()));
                continue;
            }
        };
        v.bytes += data.len() as u64;
        if data.len() % SLOT != 0 {
            v.problems.push(format!(
                "{}: size {} is not a whole number of {SLOT}-byte slots",
                p.display(),
                data.len()
            ));
        }
        if data.len() as u64 > lay.max_slots * SLOT as u64 {
            v.problems.push(format!(
                "{}: size {} exceeds the maximum {}",
                p.display(),
                data.len(),
                lay.max_slots * SLOT as u64
            ));
        }
        for (i, s) in data.chunks_exact(SLOT).enumerate() {
            match check_slot(s, seqs) {
                Ok(None) => v.zero_slots += 1,
                Ok(Some(_)) => v.records += 1,
                Err(why) => v.problems.push(format!(
                    "{}: garbage in slot {i} (offset {}): {why}",
                    p.display(),
                    i * SLOT
                )),
            }
        }
    }
    v
}

/// Summary of a stress run.
pub struct StressReport {
    pub counts: Counts,
    pub verify: Verify,
    pub child_problems: Vec<String>,
    pub elapsed: Duration,
}

impl StressReport {
    pub fn passed(&self) -> bool {
        self.counts.failures.is_empty()
            && self.verify.problems.is_empty()
            && self.child_problems.is_empty()
    }
}

fn child_main(id: u32, lay: Layout, seed: u64, deadline: Instant, wfd: i32) -> ! {
    let mut c = Child {
        id,
        lay,
        rng: ChaCha8Rng::seed_from_u64(seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        seq: 0,
        counts: Counts::default(),
    };
    let mut n = 0u64;
    // Stop early after a handful of unexpected errors: one is enough to fail.
    while c.counts.failures.len() < 10 {
        if n % 16 == 0 && Instant::now() >= deadline {
            break;
        }
        c.step();
        n += 1;
    }
    let text = c.counts.encode(c.seq);
    let mut off = 0;
    while off < text.len() {
        let r = unsafe { libc::write(wfd, text.as_ptr().add(off).cast(), text.len() - off) };
        if r <= 0 {
            break;
        }
        off += r as usize;
    }
    unsafe { libc::_exit(if c.counts.failures.is_empty() { 0 } else { 1 }) }
}

/// Runs the stress test and verifies the result.
pub fn run(opts: &StressOpts) -> Result<StressReport> {
    if opts.procs == 0 {
        bail!("--procs must be at least 1");
    }
    let root = opts
        .dir
        .join(format!("flashlog-stress.{}", std::process::id()));
    sys::mkdir(&root, 0o755).with_context(|| format!("mkdir {}", root.display()))?;
    let ndirs = TOP_DIRS * (1 + SUB_DIRS);
    let lay = Layout {
        root: root.clone(),
        names: opts.max_files.div_ceil(ndirs).max(1),
        max_slots: (opts.max_file_size / SLOT).max(1) as u64,
    };
    for t in 0..TOP_DIRS {
        sys::mkdir(&lay.top(t), 0o755)
            .with_context(|| format!("mkdir {}", lay.top(t).display()))?;
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(opts.seconds);
    let mut kids = Vec::new();
    for id in 0..opts.procs as u32 {
        let mut fds = [0i32; 2];
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            bail!("pipe2: {}", io::Error::last_os_error());
        }
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", io::Error::last_os_error());
        }
        if pid == 0 {
            unsafe { libc::close(fds[0]) };
            child_main(id, lay.clone(), opts.seed, deadline, fds[1]);
        }
        unsafe { libc::close(fds[1]) };
        kids.push((id, pid, fds[0]));
    }
    // Wait with a hard limit so a hung file system cannot hang the run.
    let hard = deadline + Duration::from_secs(60);
    let mut counts = Counts::default();
    let mut seqs = vec![0u64; opts.procs];
    let mut child_problems = Vec::new();
    for (id, pid, rfd) in kids {
        let mut status = 0;
        loop {
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if Instant::now() > hard {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                unsafe { libc::waitpid(pid, &mut status, 0) };
                child_problems.push(format!(
                    "child {id} did not finish within 60 s after the deadline (killed)"
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = unsafe { libc::read(rfd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            text.extend_from_slice(&buf[..n as usize]);
        }
        unsafe { libc::close(rfd) };
        seqs[id as usize] = counts.merge(&String::from_utf8_lossy(&text));
        if libc::WIFSIGNALED(status) {
            child_problems.push(format!(
                "child {id} killed by signal {}",
                libc::WTERMSIG(status)
            ));
        }
    }
    if opts.inject_corruption {
        let p = lay.top(0).join("f0");
        let fd =
            sys::open(&p, libc::O_CREAT | libc::O_WRONLY, 0o644).context("self-test: create")?;
        let mut slot = make_slot(0, 0);
        slot[100] ^= 0xff;
        sys::pwrite_all(&fd, &slot, 0).context("self-test: write garbage")?;
    }
    let verify = verify(&lay, &seqs);
    let report = StressReport {
        counts,
        verify,
        child_problems,
        elapsed: started.elapsed(),
    };
    if !opts.keep && report.passed() {
        crate::posix::force_remove(&root).with_context(|| format!("remove {}", root.display()))?;
    }
    Ok(report)
}
