//! Atomic bitmap on `AtomicU64` words: set/clear/test and claim-first-zero with a CAS loop.
//! Used for free sections, free nids and dirty metadata blocks. No locks.
//!
//! Also [`zeroed_atomics`]: large tables of atomics allocated as zeroed memory, so that the
//! pages of a table's untouched part (the NAT of a mostly empty volume) cost no memory.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Types for which all-zero bytes are a valid value: atomic integers (the value 0), and
/// structs made only of them.
///
/// # Safety
/// Implement only for types of which all-zero bytes are a valid value.
pub(crate) unsafe trait ZeroIsValid {}
// SAFETY: the standard library documents each atomic integer as having "the same size and
// bit validity as the underlying integer type".
unsafe impl ZeroIsValid for AtomicU64 {}
// SAFETY: as above.
unsafe impl ZeroIsValid for AtomicU32 {}
// SAFETY: as above.
unsafe impl ZeroIsValid for AtomicU8 {}

/// `n` atomics, all 0, from zeroed memory: a large allocation comes from fresh pages that
/// the kernel maps only when first written, where building the slice element by element
/// would touch (and so make resident) all of it (a 4 TiB volume's NAT: ~870 MB).
/// (`Box::new_zeroed_slice` would do, from Rust 1.92; the crates' MSRV is 1.85.)
pub(crate) fn zeroed_atomics<T: ZeroIsValid>(n: usize) -> Box<[T]> {
    try_zeroed(n).unwrap_or_else(|| {
        std::alloc::handle_alloc_error(
            std::alloc::Layout::array::<T>(n).unwrap_or(std::alloc::Layout::new::<T>()),
        )
    })
}

/// [`zeroed_atomics`], or `None` where the allocator refuses (or `n` overflows the address
/// space), for tables whose size comes from the volume.
pub(crate) fn try_zeroed<T: ZeroIsValid>(n: usize) -> Option<Box<[T]>> {
    // A zero-sized `T` would come back as an empty slice, not `n` elements.
    const { assert!(std::mem::size_of::<T>() > 0) };
    let layout = std::alloc::Layout::array::<T>(n).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new().into_boxed_slice());
    }
    // SAFETY: the layout's size is not zero.
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is a live allocation of the global allocator with the layout of `[T; n]`
    // (what dropping the box frees), and zeroed memory is `n` valid values of `T`
    // (`ZeroIsValid`).
    Some(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) })
}

pub struct AtomicBitmap {
    words: Box<[AtomicU64]>,
    bits: u64,
}

impl AtomicBitmap {
    pub fn new(bits: u64) -> Self {
        AtomicBitmap {
            words: zeroed_atomics(bits.div_ceil(64) as usize),
            bits,
        }
    }
    pub fn len(&self) -> u64 {
        self.bits
    }
    pub fn is_empty(&self) -> bool {
        self.bits == 0
    }
    pub fn test(&self, i: u64) -> bool {
        i < self.bits
            && self.words[(i / 64) as usize].load(Ordering::Acquire) & (1 << (i % 64)) != 0
    }
    /// Set bit `i`; returns its previous value.
    pub fn set(&self, i: u64) -> bool {
        debug_assert!(i < self.bits);
        self.words[(i / 64) as usize].fetch_or(1 << (i % 64), Ordering::AcqRel) & (1 << (i % 64))
            != 0
    }
    /// Clear bit `i`; returns its previous value.
    pub fn clear(&self, i: u64) -> bool {
        debug_assert!(i < self.bits);
        self.words[(i / 64) as usize].fetch_and(!(1 << (i % 64)), Ordering::AcqRel)
            & (1 << (i % 64))
            != 0
    }
    pub fn count_ones(&self) -> u64 {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as u64)
            .sum()
    }
    /// Find a zero bit at or after `hint` (wrapping once), set it, and return it.
    pub fn claim_zero(&self, hint: u64) -> Option<u64> {
        let n = self.words.len();
        if n == 0 {
            return None;
        }
        let start = ((hint % self.bits.max(1)) / 64) as usize;
        for k in 0..=n {
            let wi = (start + k) % n;
            let w = &self.words[wi];
            let mut cur = w.load(Ordering::Acquire);
            loop {
                let free = !cur;
                if free == 0 {
                    break;
                }
                let bit = free.trailing_zeros() as u64;
                let idx = wi as u64 * 64 + bit;
                if idx >= self.bits {
                    break;
                }
                match w.compare_exchange_weak(
                    cur,
                    cur | (1 << bit),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(idx),
                    Err(now) => cur = now,
                }
            }
        }
        None
    }
    /// Find a zero bit in `[lo, hi)` at or after `hint`'s word (wrapping once inside the
    /// range), set it, and return it. Bits outside the range are never touched, so callers
    /// that own disjoint ranges (the mlogs' free sections) never take each other's bits.
    pub fn claim_zero_in(&self, lo: u64, hi: u64, hint: u64) -> Option<u64> {
        let hi = hi.min(self.bits);
        if lo >= hi {
            return None;
        }
        let (w0, w1) = ((lo / 64) as usize, ((hi - 1) / 64) as usize);
        let nw = w1 - w0 + 1;
        let hint = if (lo..hi).contains(&hint) { hint } else { lo };
        let start = (hint / 64) as usize - w0;
        for k in 0..=nw {
            let wi = w0 + (start + k) % nw;
            let base = wi as u64 * 64;
            let mut mask = u64::MAX;
            if base < lo {
                mask &= u64::MAX << (lo - base);
            }
            if base + 64 > hi {
                mask &= (1u64 << (hi - base)) - 1;
            }
            let w = &self.words[wi];
            let mut cur = w.load(Ordering::Acquire);
            loop {
                let free = !cur & mask;
                if free == 0 {
                    break;
                }
                let bit = free.trailing_zeros() as u64;
                match w.compare_exchange_weak(
                    cur,
                    cur | (1 << bit),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(base + bit),
                    Err(now) => cur = now,
                }
            }
        }
        None
    }
    /// Iterate set bits.
    pub fn ones(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().enumerate().flat_map(move |(wi, w)| {
            let mut v = w.load(Ordering::Acquire);
            std::iter::from_fn(move || {
                if v == 0 {
                    return None;
                }
                let b = v.trailing_zeros() as u64;
                v &= v - 1;
                Some(wi as u64 * 64 + b)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn zeroed_atomics_are_zero_and_usable() {
        use std::sync::atomic::{AtomicU32, AtomicU8};
        assert!(zeroed_atomics::<AtomicU64>(0).is_empty());
        let a = zeroed_atomics::<AtomicU64>(1 << 20);
        let b = zeroed_atomics::<AtomicU32>(3);
        let c = zeroed_atomics::<AtomicU8>(5);
        assert_eq!(a.len(), 1 << 20);
        assert!(a.iter().all(|x| x.load(Ordering::Relaxed) == 0));
        assert!(b.iter().all(|x| x.load(Ordering::Relaxed) == 0));
        assert!(c.iter().all(|x| x.load(Ordering::Relaxed) == 0));
        a[(1 << 20) - 1].store(u64::MAX, Ordering::Relaxed);
        c[4].store(7, Ordering::Relaxed);
        assert_eq!(a[(1 << 20) - 1].load(Ordering::Relaxed), u64::MAX);
        assert_eq!(c[4].load(Ordering::Relaxed), 7);
    }

    proptest! {
        #[test]
        fn matches_a_set(ops in proptest::collection::vec((0u8..3, 0u64..200), 1..300)) {
            let b = AtomicBitmap::new(200);
            let mut m = BTreeSet::new();
            for (op, i) in ops {
                match op {
                    0 => prop_assert_eq!(b.set(i), !m.insert(i)),
                    1 => prop_assert_eq!(b.clear(i), m.remove(&i)),
                    _ => {
                        let got = b.claim_zero(i);
                        let want = (i..200).chain(0..i).find(|x| !m.contains(x));
                        prop_assert_eq!(got.is_some(), want.is_some());
                        if let Some(g) = got { prop_assert!(m.insert(g)); }
                    }
                }
            }
            prop_assert_eq!(b.ones().collect::<BTreeSet<_>>(), m);
        }
    }

    proptest! {
        /// A range claim takes a zero bit inside its range whenever one exists, and never a
        /// bit outside it (the mlogs' section supplies rely on this).
        #[test]
        fn range_claims_stay_in_range(
            pre in proptest::collection::vec(0u64..300, 0..300),
            lo in 0u64..300, len in 0u64..200, hint in 0u64..400,
        ) {
            let b = AtomicBitmap::new(300);
            for &i in &pre { b.set(i); }
            let before: BTreeSet<u64> = b.ones().collect();
            let hi = (lo + len).min(300);
            let got = b.claim_zero_in(lo, lo + len, hint);
            let want_any = (lo..hi).any(|i| !before.contains(&i));
            prop_assert_eq!(got.is_some(), want_any);
            let after: BTreeSet<u64> = b.ones().collect();
            match got {
                Some(g) => {
                    prop_assert!((lo..hi).contains(&g) && !before.contains(&g));
                    let mut exp = before.clone();
                    exp.insert(g);
                    prop_assert_eq!(after, exp);
                }
                None => prop_assert_eq!(after, before),
            }
        }
    }

    #[test]
    fn concurrent_claims_are_unique() {
        let b = std::sync::Arc::new(AtomicBitmap::new(10_000));
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let b = b.clone();
                std::thread::spawn(move || {
                    (0..2500)
                        .map(|i| b.claim_zero(t * 977 + i).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let all: BTreeSet<u64> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        assert_eq!(all.len(), 10_000);
        assert!(b.claim_zero(0).is_none());
    }
}
