//! The fsx-style randomized single-file checker behind `flashlog-fsx`.
//!
//! This module owns the op generator (seeded ChaCha, so a seed always yields
//! the same op sequence), the in-memory shadow copy of the file with a
//! per-byte "last op that set it" map, the op executors (pread/pwrite,
//! truncate, fallocate modes, mmap read/write with msync, fsync, reopen) and
//! the failure report (seed, op log tail, first bad byte).

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::sys;

/// Options of one fsx run.
#[derive(Clone, Debug)]
pub struct FsxOpts {
    pub dir: PathBuf,
    pub seed: u64,
    pub ops: u64,
    /// Maximum file size the ops may produce.
    pub file_size: u64,
    /// Maximum length of a single read/write/fallocate.
    pub max_len: u64,
    pub no_mmap: bool,
    pub verbose: bool,
    /// How many log lines to print on failure.
    pub log_tail: usize,
    /// Self-test: after this op, flip one byte of the file behind the
    /// shadow's back, so the checker must report a mismatch.
    pub corrupt_after: Option<u64>,
}

/// fallocate flavours exercised by the checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FallocMode {
    Alloc,
    KeepSize,
    PunchHole,
    ZeroRange,
    ZeroRangeKeepSize,
}

impl FallocMode {
    fn flags(self) -> i32 {
        match self {
            FallocMode::Alloc => 0,
            FallocMode::KeepSize => libc::FALLOC_FL_KEEP_SIZE,
            FallocMode::PunchHole => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            FallocMode::ZeroRange => libc::FALLOC_FL_ZERO_RANGE,
            FallocMode::ZeroRangeKeepSize => libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        }
    }
}

/// One generated operation; offsets/lengths are raw draws, clamped at
/// execution time against the current size where an op needs that.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Read {
        off: u64,
        len: u64,
    },
    Write {
        off: u64,
        len: u64,
    },
    Truncate {
        size: u64,
    },
    Fallocate {
        mode: FallocMode,
        off: u64,
        len: u64,
    },
    MapRead {
        off: u64,
        len: u64,
    },
    MapWrite {
        off: u64,
        len: u64,
    },
    Fsync,
    Reopen,
}

impl Op {
    /// Short name used for the op counters.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::Truncate { .. } => "truncate",
            Op::Fallocate {
                mode: FallocMode::Alloc,
                ..
            } => "fallocate",
            Op::Fallocate {
                mode: FallocMode::KeepSize,
                ..
            } => "fallocate-keep-size",
            Op::Fallocate {
                mode: FallocMode::PunchHole,
                ..
            } => "punch-hole",
            Op::Fallocate {
                mode: FallocMode::ZeroRange,
                ..
            } => "zero-range",
            Op::Fallocate {
                mode: FallocMode::ZeroRangeKeepSize,
                ..
            } => "zero-range-keep-size",
            Op::MapRead { .. } => "mapread",
            Op::MapWrite { .. } => "mapwrite",
            Op::Fsync => "fsync",
            Op::Reopen => "close-reopen",
        }
    }
}

/// The deterministic op generator: the sequence depends only on the seed
/// and the size limits.
pub struct OpGen {
    rng: ChaCha8Rng,
    file_size: u64,
    max_len: u64,
}

impl OpGen {
    pub fn new(seed: u64, file_size: u64, max_len: u64) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            file_size: file_size.max(1),
            max_len: max_len.clamp(1, file_size.max(1)),
        }
    }

    fn range(&mut self) -> (u64, u64) {
        let off = self.rng.random_range(0..self.file_size);
        // Favour small ops but sometimes use long ones.
        let len = if self.rng.random_bool(0.7) {
            self.rng.random_range(1..=self.max_len.min(4096))
        } else {
            self.rng.random_range(1..=self.max_len)
        };
        (off, len)
    }

    pub fn next_op(&mut self) -> Op {
        let k = self.rng.random_range(0..100u32);
        match k {
            0..=19 => {
                let (off, len) = self.range();
                Op::Read { off, len }
            }
            20..=44 => {
                let (off, len) = self.range();
                Op::Write { off, len }
            }
            45..=52 => Op::Truncate {
                size: self.rng.random_range(0..=self.file_size),
            },
            53..=61 => {
                let mode = match k % 5 {
                    0 => FallocMode::Alloc,
                    1 => FallocMode::KeepSize,
                    2 => FallocMode::PunchHole,
                    3 => FallocMode::ZeroRange,
                    _ => FallocMode::ZeroRangeKeepSize,
                };
                let (off, len) = self.range();
                Op::Fallocate { mode, off, len }
            }
            62..=73 => {
                let (off, len) = self.range();
                Op::MapRead { off, len }
            }
            74..=87 => {
                let (off, len) = self.range();
                Op::MapWrite { off, len }
            }
            88..=93 => Op::Fsync,
            _ => Op::Reopen,
        }
    }
}

/// The byte written at file offset `i` by op number `opno`: never zero, so
/// holes and stale zeros are told apart from written data.
fn pattern_byte(opno: u64, i: u64) -> u8 {
    ((opno.wrapping_mul(31).wrapping_add(i)) % 255) as u8 + 1
}

/// Final statistics of a successful run.
#[derive(Debug, Default)]
pub struct FsxStats {
    pub done: BTreeMap<&'static str, u64>,
    pub skipped: BTreeMap<String, u64>,
    pub final_size: u64,
}

/// A mismatch or an unexpected error, with the data needed to report it.
pub struct FsxFailure {
    pub message: String,
}

struct Fsx {
    opts: FsxOpts,
    path: PathBuf,
    fd: OwnedFd,
    shadow: Vec<u8>,
    /// Op number that last set each byte (0 = initial/never written).
    owner: Vec<u64>,
    log: VecDeque<String>,
    stats: FsxStats,
    opno: u64,
    page: u64,
    unsupported: [bool; 5],
}

impl Fsx {
    fn log(&mut self, s: String) {
        if self.opts.verbose {
            println!("{s}");
        }
        if self.log.len() >= self.opts.log_tail.max(1) {
            self.log.pop_front();
        }
        self.log.push_back(s);
    }

    fn skip(&mut self, what: String) {
        *self.stats.skipped.entry(what).or_insert(0) += 1;
    }

    fn fail(&self, msg: String) -> FsxFailure {
        let mut m = String::new();
        m.push_str(&format!(
            "FSX FAILURE at op #{} (seed {}, file {})\n  {msg}\n",
            self.opno,
            self.opts.seed,
            self.path.display()
        ));
        m.push_str(&format!("  shadow size {} bytes\n", self.shadow.len()));
        m.push_str(&format!("  last {} ops:\n", self.log.len()));
        for l in &self.log {
            m.push_str("    ");
            m.push_str(l);
            m.push('\n');
        }
        m.push_str(&format!(
            "  reproduce: flashlog-fsx {} --seed {} --ops {} --file-size {} --max-len {}{}\n",
            self.opts.dir.display(),
            self.opts.seed,
            self.opno,
            self.opts.file_size,
            self.opts.max_len,
            if self.opts.no_mmap { " --no-mmap" } else { "" }
        ));
        FsxFailure { message: m }
    }

    fn io<T>(&self, r: std::io::Result<T>, what: &str) -> Result<T, FsxFailure> {
        r.map_err(|e| {
            let n = sys::errno_of(&e);
            self.fail(format!(
                "{what}: unexpected error {} ({n}): {e}",
                sys::errno_name(n)
            ))
        })
    }

    /// Compares `got` (read at `off`) with the shadow.
    fn compare(&self, off: u64, got: &[u8], how: &str) -> Result<(), FsxFailure> {
        let end = (off as usize + got.len()).min(self.shadow.len());
        let want = if (off as usize) < end {
            &self.shadow[off as usize..end]
        } else {
            &[][..]
        };
        if got.len() != want.len() {
            return Err(self.fail(format!(
                "{how} at {off:#x}: got {} bytes, want {} (file size {})",
                got.len(),
                want.len(),
                self.shadow.len()
            )));
        }
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            let bad = off as usize + i;
            let nbad = got.iter().zip(want).filter(|(a, b)| a != b).count();
            let ctx_lo = i.saturating_sub(8);
            let ctx_hi = (i + 8).min(got.len());
            return Err(self.fail(format!(
                "{how} mismatch: first bad byte at offset {bad} ({bad:#x}): got {:#04x}, want {:#04x} \
                 (last set by op #{}); {nbad} bad byte(s) in {}-byte read at {off:#x}\n  got  {:02x?}\n  want {:02x?}",
                got[i],
                want[i],
                self.owner[bad],
                got.len(),
                &got[ctx_lo..ctx_hi],
                &want[ctx_lo..ctx_hi],
            )));
        }
        Ok(())
    }

    fn check_size(&self) -> Result<(), FsxFailure> {
        let st = self.io(sys::fstat(&self.fd), "fstat")?;
        if st.st_size as u64 != self.shadow.len() as u64 {
            return Err(self.fail(format!(
                "size mismatch: fstat says {}, want {}",
                st.st_size,
                self.shadow.len()
            )));
        }
        Ok(())
    }

    fn check_all(&self, how: &str) -> Result<(), FsxFailure> {
        let got = self.io(sys::read_all(&self.fd), "full read")?;
        self.compare(0, &got, how)
    }

    fn set_len(&mut self, len: u64) {
        self.shadow.resize(len as usize, 0);
        self.owner.resize(len as usize, self.opno);
    }

    fn apply(&mut self, op: Op) -> Result<(), FsxFailure> {
        let size = self.shadow.len() as u64;
        let n = self.opno;
        let max = self.opts.file_size;
        match op {
            Op::Read { off, len } => {
                self.log(format!("#{n} read {off:#x} len {len:#x} (size {size:#x})"));
                let mut buf = vec![0u8; len as usize];
                let mut got = 0;
                while got < buf.len() {
                    let r = self.io(
                        sys::pread(&self.fd, &mut buf[got..], off + got as u64),
                        "pread",
                    )?;
                    if r == 0 {
                        break;
                    }
                    got += r;
                }
                buf.truncate(got);
                self.compare(off, &buf, "read")?;
            }
            Op::Write { off, len } => {
                let len = len.min(max - off);
                self.log(format!("#{n} write {off:#x} len {len:#x} (size {size:#x})"));
                let data: Vec<u8> = (0..len).map(|i| pattern_byte(n, off + i)).collect();
                self.io(sys::pwrite_all(&self.fd, &data, off), "pwrite")?;
                if off + len > size {
                    self.set_len(off + len);
                }
                self.shadow[off as usize..(off + len) as usize].copy_from_slice(&data);
                self.owner[off as usize..(off + len) as usize].fill(n);
            }
            Op::Truncate { size: to } => {
                self.log(format!("#{n} truncate {size:#x} -> {to:#x}"));
                self.io(sys::ftruncate(&self.fd, to as i64), "ftruncate")?;
                self.set_len(to);
            }
            Op::Fallocate { mode, off, len } => {
                let len = len.min(max - off);
                let idx = mode as usize;
                if self.unsupported[idx] {
                    self.log(format!("#{n} {} skipped (unsupported)", op.kind()));
                    self.skip(format!("{} (EOPNOTSUPP)", op.kind()));
                    return Ok(());
                }
                self.log(format!(
                    "#{n} {} {off:#x} len {len:#x} (size {size:#x})",
                    op.kind()
                ));
                match sys::fallocate(&self.fd, mode.flags(), off, len) {
                    Err(e) if sys::errno_of(&e) == libc::EOPNOTSUPP => {
                        self.unsupported[idx] = true;
                        self.skip(format!("{} (EOPNOTSUPP)", op.kind()));
                        return Ok(());
                    }
                    r => self.io(r, op.kind())?,
                }
                match mode {
                    FallocMode::Alloc => {
                        if off + len > size {
                            self.set_len(off + len);
                        }
                    }
                    FallocMode::KeepSize => {}
                    FallocMode::ZeroRange | FallocMode::ZeroRangeKeepSize => {
                        if mode == FallocMode::ZeroRange && off + len > size {
                            self.set_len(off + len);
                        }
                        let end = (off + len).min(self.shadow.len() as u64);
                        if off < end {
                            self.shadow[off as usize..end as usize].fill(0);
                            self.owner[off as usize..end as usize].fill(n);
                        }
                    }
                    FallocMode::PunchHole => {
                        let end = (off + len).min(size);
                        if off < end {
                            self.shadow[off as usize..end as usize].fill(0);
                            self.owner[off as usize..end as usize].fill(n);
                        }
                    }
                }
            }
            Op::MapRead { off, len } | Op::MapWrite { off, len } => {
                let write = matches!(op, Op::MapWrite { .. });
                if self.opts.no_mmap {
                    self.log(format!("#{n} {} skipped (--no-mmap)", op.kind()));
                    self.skip(format!("{} (--no-mmap)", op.kind()));
                    return Ok(());
                }
                if size == 0 {
                    self.log(format!("#{n} {} skipped (empty file)", op.kind()));
                    self.skip(format!("{} (empty file)", op.kind()));
                    return Ok(());
                }
                let off = off % size;
                let len = len.min(size - off);
                self.log(format!(
                    "#{n} {} {off:#x} len {len:#x} (size {size:#x})",
                    op.kind()
                ));
                self.mmap_op(off, len, write)?;
            }
            Op::Fsync => {
                self.log(format!("#{n} fsync"));
                self.io(sys::fsync(&self.fd), "fsync")?;
            }
            Op::Reopen => {
                self.log(format!("#{n} close+reopen"));
                let fd = self.io(sys::open(&self.path, libc::O_RDWR, 0), "reopen")?;
                self.fd = fd; // drops (closes) the old descriptor
                self.check_all("full check after reopen")?;
            }
        }
        *self.stats.done.entry(op.kind()).or_insert(0) += 1;
        self.check_size()
    }

    fn mmap_op(&mut self, off: u64, len: u64, write: bool) -> Result<(), FsxFailure> {
        let n = self.opno;
        let pg = off & !(self.page - 1);
        let maplen = (off + len - pg) as usize;
        let prot = if write {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                maplen,
                prot,
                libc::MAP_SHARED,
                self.fd.as_raw_fd(),
                pg as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(self.fail(format!("mmap {pg:#x}+{maplen:#x}: {e}")));
        }
        let slice = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), maplen) };
        let inner = (off - pg) as usize..maplen;
        let res = if write {
            let data: Vec<u8> = (0..len).map(|i| pattern_byte(n, off + i)).collect();
            slice[inner].copy_from_slice(&data);
            let r = unsafe { libc::msync(p, maplen, libc::MS_SYNC) };
            if r != 0 {
                Err(self.fail(format!("msync: {}", std::io::Error::last_os_error())))
            } else {
                self.shadow[off as usize..(off + len) as usize].copy_from_slice(&data);
                self.owner[off as usize..(off + len) as usize].fill(n);
                Ok(())
            }
        } else {
            let got = slice[inner].to_vec();
            self.compare(off, &got, "mapread")
        };
        unsafe { libc::munmap(p, maplen) };
        res?;
        if write {
            // The mapped write must be visible to read(2) as well.
            let mut back = vec![0u8; len as usize];
            self.io(
                sys::pread_exact(&self.fd, &mut back, off),
                "pread after mapwrite",
            )?;
            self.compare(off, &back, "read-back after mapwrite")?;
        }
        Ok(())
    }
}

/// Runs fsx; `Ok(Err(failure))` is a detected data/semantics failure,
/// `Err` is a setup problem.
pub fn run(opts: &FsxOpts) -> Result<std::result::Result<FsxStats, FsxFailure>> {
    if opts.file_size == 0 {
        bail!("--file-size must be > 0");
    }
    let path = opts
        .dir
        .join(format!("fsx.{}.{}", opts.seed, std::process::id()));
    let fd = sys::open(&path, libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644)
        .with_context(|| format!("create {}", path.display()))?;
    let mut fsx = Fsx {
        opts: opts.clone(),
        path: path.clone(),
        fd,
        shadow: Vec::new(),
        owner: Vec::new(),
        log: VecDeque::new(),
        stats: FsxStats::default(),
        opno: 0,
        page: (unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64).max(4096),
        unsupported: [false; 5],
    };
    let mut gen = OpGen::new(opts.seed, opts.file_size, opts.max_len);
    for i in 1..=opts.ops {
        fsx.opno = i;
        let op = gen.next_op();
        if let Err(f) = fsx.apply(op) {
            return Ok(Err(f));
        }
        if opts.corrupt_after == Some(i) && !fsx.shadow.is_empty() {
            let at = fsx.shadow.len() as u64 / 2;
            let bad = [fsx.shadow[at as usize] ^ 0x5a];
            sys::pwrite_all(&fsx.fd, &bad, at).context("self-test corruption write")?;
            fsx.log(format!("#{i} self-test: corrupted byte at {at:#x}"));
        }
    }
    fsx.opno = opts.ops;
    if let Err(f) = fsx.check_all("final full check") {
        return Ok(Err(f));
    }
    fsx.stats.final_size = fsx.shadow.len() as u64;
    drop(fsx.fd);
    sys::unlink(&path).with_context(|| format!("remove {}", path.display()))?;
    Ok(Ok(fsx.stats))
}
