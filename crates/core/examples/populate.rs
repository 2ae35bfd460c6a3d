//! Acceptance run for the core library (issue "core", done-when 1): mkfs a 1 GiB image file,
//! create 100,000 files in nested directories with sizes from 0 B to 64 MiB (sparse and
//! dense), unmount, remount, read everything back byte for byte, and run fsck.
//!
//! `cargo run --release -p flashlog-core --example populate -- [IMAGE] [FILES] [SEED]`

use flashlog_core::*;
use flashlog_dev::{BlockDevice, FileDevice};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::Instant;

/// Deterministic contents: byte `off` of file `id`.
fn fill(id: u64, off: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            ^ (off + i as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        *b = (x >> 29) as u8;
    }
}

struct Spec {
    path: String,
    size: u64,
    /// Written extents (offset, len); the rest is holes.
    extents: Vec<(u64, u64)>,
}

fn plan(files: usize, seed: u64) -> Vec<Spec> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = Vec::with_capacity(files);
    for id in 0..files as u64 {
        let path = format!("/d{}/s{}/f{id}", id % 10, (id / 10) % 10);
        let r = rng.random_range(0..10_000);
        let spec = if id == 0 {
            Spec {
                path,
                size: 64 << 20,
                extents: vec![(0, 64 << 20)],
            } // dense 64 MiB
        } else if id == 1 {
            Spec {
                path,
                size: 64 << 20,
                extents: vec![(5 << 20, 300_000), (63 << 20, 1 << 20)],
            } // sparse 64 MiB
        } else if r < 10 {
            // Large sparse files: a few extents in up to 64 MiB.
            let size = rng.random_range(1u64 << 20..64 << 20);
            let extents = (0..4)
                .map(|_| {
                    (
                        rng.random_range(0..size - 65536),
                        rng.random_range(1..65536),
                    )
                })
                .collect();
            Spec {
                path,
                size,
                extents,
            }
        } else if r < 200 {
            let size = rng.random_range(12_000..65_536);
            Spec {
                path,
                size,
                extents: vec![(0, size)],
            }
        } else if r < 1500 {
            let size = rng.random_range(2_000..12_000);
            Spec {
                path,
                size,
                extents: vec![(0, size)],
            }
        } else {
            let size = rng.random_range(0..2_000);
            Spec {
                path,
                size,
                extents: vec![(0, size)],
            }
        };
        v.push(spec);
    }
    v
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let image = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "/tmp/flashlog-populate.img".into());
    let files: usize = args
        .get(2)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let seed: u64 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(1);
    let t0 = Instant::now();
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::create(image.as_ref(), 1 << 30)?);
    let report = Fs::mkfs(
        dev.clone(),
        &MkfsOptions {
            force: true,
            ..Default::default()
        },
    )?;
    println!("{report}");
    let specs = plan(files, seed);
    let dense: u64 = specs
        .iter()
        .flat_map(|s| s.extents.iter().map(|e| e.1))
        .sum();
    println!(
        "plan: {files} files, {:.1} MiB written, {:.1} MiB apparent",
        dense as f64 / 1048576.0,
        specs.iter().map(|s| s.size).sum::<u64>() as f64 / 1048576.0
    );
    let opts = MountOptions {
        cp_interval: None,
        ..Default::default()
    };
    let fs = Fs::mount(dev.clone(), opts.clone())?;
    let mut buf = vec![0u8; 1 << 20];
    for (id, s) in specs.iter().enumerate() {
        let (dir, name) = s.path.rsplit_once('/').expect("absolute");
        let d = fs.mkdir_all(dir)?;
        let ino = fs.create(d, name.as_bytes(), 0o644, 0, 0)?.ino;
        for &(off, len) in &s.extents {
            let mut done = 0;
            while done < len {
                let n = (len - done).min(buf.len() as u64) as usize;
                fill(id as u64, off + done, &mut buf[..n]);
                fs.write(ino, off + done, &buf[..n])?;
                done += n as u64;
            }
        }
        if s.size > 0 {
            fs.setattr(
                ino,
                &SetAttr {
                    size: Some(s.size),
                    ..Default::default()
                },
            )?;
        }
        if id % 20_000 == 0 {
            println!("  created {id} files ({:.1}s)", t0.elapsed().as_secs_f64());
        }
    }
    let st = fs.statfs();
    println!(
        "written in {:.1}s; statfs: {} of {} blocks free; {:?}",
        t0.elapsed().as_secs_f64(),
        st.blocks_free,
        st.blocks,
        fs.stats()
    );
    fs.unmount()?;
    let t1 = Instant::now();
    let fs = Fs::mount(dev.clone(), opts)?;
    let mut want = vec![0u8; 1 << 20];
    for (id, s) in specs.iter().enumerate() {
        let ino = fs.resolve(&s.path)?;
        let a = fs.getattr(ino)?;
        anyhow::ensure!(
            a.size == s.size,
            "{}: size {} != {}",
            s.path,
            a.size,
            s.size
        );
        let mut off = 0;
        while off < s.size {
            let n = (s.size - off).min(buf.len() as u64) as usize;
            let got = fs.read(ino, off, &mut buf[..n])?;
            anyhow::ensure!(got == n, "{}: short read at {off}", s.path);
            // Expected: extent bytes where written (later extents win), zeros elsewhere.
            want[..n].fill(0);
            for &(eo, el) in &s.extents {
                let (a, b) = (eo.max(off), (eo + el).min(off + n as u64));
                if a < b {
                    fill(
                        id as u64,
                        a,
                        &mut want[(a - off) as usize..(b - off) as usize],
                    );
                }
            }
            anyhow::ensure!(
                buf[..n] == want[..n],
                "{}: contents differ in [{off}, {})",
                s.path,
                off + n as u64
            );
            off += n as u64;
        }
    }
    println!(
        "verified {files} files in {:.1}s after remount",
        t1.elapsed().as_secs_f64()
    );
    fs.unmount()?;
    let r = fsck(&*dev)?;
    println!("fsck: {r}");
    anyhow::ensure!(r.is_clean(), "fsck found errors");
    println!("PASS in {:.1}s", t0.elapsed().as_secs_f64());
    Ok(())
}
