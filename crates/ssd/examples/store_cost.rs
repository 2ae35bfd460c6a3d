//! A fixed, deterministic sequence of RAM page store operations, for instruction counts of
//! the store alone (no clocks, no threads, no device model), before and after a change:
//!
//! `valgrind --tool=callgrind target/release/examples/store_cost [BLOCKS] [OPS]` (defaults
//! 65536, 200000): writes blocks `0..BLOCKS`, then OPS random operations over `2 x BLOCKS`
//! addresses: 50 % overwrites, 20 % a discard plus a write elsewhere, 10 % relocations
//! (`Store::relocate`, as a remapping FTL's GC), 20 % reads (half of them of blocks with no
//! content). Prints a checksum of the bytes read.
use flashlog_ssd::store::Store;

fn rng(x: &mut u64) -> u64 {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = a.first().map_or(65536, |s| s.parse().unwrap());
    let ops: u64 = a.get(1).map_or(200_000, |s| s.parse().unwrap());
    let s = Store::ram();
    let mut buf = vec![7u8; 4096];
    for lpn in 0..n {
        s.write(lpn, &buf).unwrap();
    }
    let mut x = 42u64;
    let mut sum = 0u64;
    for _ in 0..ops {
        let r = rng(&mut x);
        let lpn = (r >> 8) % (2 * n);
        match r % 10 {
            0..=4 => s.write(lpn, &buf).unwrap(),
            5 | 6 => {
                s.discard(lpn, 1).unwrap();
                s.write((lpn + n) % (2 * n), &buf).unwrap();
            }
            7 => s.relocate(lpn, (r >> 32) % (2 * n)).unwrap(),
            _ => {
                s.read(lpn, &mut buf).unwrap();
                sum += buf[0] as u64;
            }
        }
    }
    println!("{sum}");
}
