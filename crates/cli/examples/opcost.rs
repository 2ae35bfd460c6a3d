//! Fixed-work driver for per-operation CPU cost: `opcost WORKLOAD N [DEVICE] [POLICY]`.
//! WORKLOAD: dwol (overwrite block 0 of one file), dwal (append), mwcl (create in one
//! directory), mwul (unlink what was created, unmeasured), rand (random 4 KiB overwrites of
//! a file filled to 80 % of the volume). DEVICE: `ram:SIZE` or an emulator preset
//! (`970pro-like:256MiB`, virtual clock). Setup (mkfs, mount, fill) is unmeasured; the
//! measured phase is N operations then `sync`, in `measured` (so that callgrind's
//! `--toggle-collect` can select it). `OPCOST_SKIP=1` runs the setup alone: instructions
//! per operation are (run - skipped run) / N, e.g.
//!   valgrind --tool=callgrind opcost mwcl 20000; OPCOST_SKIP=1 valgrind ... (same args)
//! The machines these run on have no hardware counters (perf stat's instructions are
//! "not supported"), hence callgrind. With PERF_CTL/PERF_ACK fifos (perf stat --delay=-1
//! --control fifo:ctl,ack) the measured phase is bracketed with enable/disable.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use flashlog_bench::device::DeviceSpec;
use flashlog_bench::policy::PolicySpec;
use flashlog_core::{Fs, MkfsOptions, ROOT_INO};
use std::io::{Read, Write};
use std::time::Instant;

fn ctl(cmd: &str) {
    if let (Ok(c), Ok(a)) = (std::env::var("PERF_CTL"), std::env::var("PERF_ACK")) {
        let mut f = std::fs::OpenOptions::new().write(true).open(c).unwrap();
        f.write_all(format!("{cmd}\n").as_bytes()).unwrap();
        let mut g = std::fs::File::open(a).unwrap();
        let mut b = [0u8; 5];
        let _ = g.read(&mut b);
    }
}

fn main() {
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
    let a: Vec<String> = std::env::args().collect();
    let w = a[1].as_str();
    let n: u64 = a[2].parse().unwrap();
    let device = a.get(3).map(String::as_str).unwrap_or("ram:1GiB");
    let policy = PolicySpec::parse(a.get(4).map(String::as_str).unwrap_or("f2fs")).unwrap();
    let spec = DeviceSpec::from_args(device, None, None, &[], "virtual").unwrap();
    let bd = spec.for_policy_spec(&policy).open().unwrap();
    Fs::mkfs(
        bd.dev.clone(),
        &MkfsOptions {
            force: true,
            ..Default::default()
        },
    )
    .unwrap();
    let opts = policy.mount_options(&flashlog_bench::exp::base_mount_options());
    let fs = Fs::mount(bd.dev.clone(), opts).unwrap();
    let buf: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 1) as u8).collect();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &buf).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let names: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
    let mut blocks = 0u64;
    match w {
        "mwul" => {
            for nm in &names {
                fs.create(d, nm.as_bytes(), 0o644, 0, 0).unwrap();
            }
        }
        "rand" => {
            let s = fs.statfs();
            let bytes = s.blocks * u64::from(s.block_size) * 8 / 10;
            let chunk = vec![0x5au8; 1 << 20];
            let mut off = 0;
            while off + (1 << 20) <= bytes {
                fs.write(f, off, &chunk).unwrap();
                off += 1 << 20;
            }
            fs.fsync(f, false).unwrap();
            blocks = off / 4096;
        }
        _ => {}
    }
    fs.sync().unwrap();
    let st0 = fs.stats();
    ctl("enable");
    let t0 = Instant::now();
    if std::env::var_os("OPCOST_SKIP").is_none() {
        measured(&fs, w, n, f, d, &buf, &names, blocks);
    }
    let secs = t0.elapsed().as_secs_f64();
    ctl("disable");
    let st1 = fs.stats();
    eprintln!(
        "opcost {w} n={n} {device} {}: {secs:.3}s {:.0} ops/s gc_runs={} checkpoints={}",
        policy.label,
        n as f64 / secs,
        (st1.gc_fg_runs + st1.gc_bg_runs) - (st0.gc_fg_runs + st0.gc_bg_runs),
        st1.checkpoints - st0.checkpoints
    );
    fs.unmount().unwrap();
}

#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn measured(
    fs: &Fs,
    w: &str,
    n: u64,
    f: flashlog_core::Ino,
    d: flashlog_core::Ino,
    buf: &[u8],
    names: &[String],
    blocks: u64,
) {
    let mut rng = 0x9e3779b97f4a7c15u64;
    match w {
        "dwol" => {
            for _ in 0..n {
                fs.write(f, 0, buf).unwrap();
            }
        }
        "dwal" => {
            for i in 0..n {
                fs.write(f, (i + 1) * 4096, buf).unwrap();
            }
        }
        "mwcl" => {
            for nm in names {
                fs.create(d, nm.as_bytes(), 0o644, 0, 0).unwrap();
            }
        }
        "mwul" => {
            for nm in names {
                fs.unlink(d, nm.as_bytes()).unwrap();
            }
        }
        "rand" => {
            for _ in 0..n {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                fs.write(f, (rng % blocks) * 4096, buf).unwrap();
            }
        }
        _ => panic!("workload?"),
    }
    fs.sync().unwrap();
}
