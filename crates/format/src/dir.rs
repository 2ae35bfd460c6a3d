//! Directory entries: dentry blocks, inline dentries and the multi-level hash (F2FS 2.4).
//!
//! A dentry area has `nslots` slots of 8 name bytes; an entry uses ceil(len/8) consecutive
//! slots and its 12-byte record sits at its first slot. Dentry block layout:
//! `[0,8)` header · `[8,33)` slot bitmap · `[40,2440)` 200 records · `[2440,4040)` names.
//! Inline dentries use the same layout, smaller (180 slots), inside the inode's area.
//!
//! Multi-level hash: level L has `buckets(L)` buckets of 2 blocks; a name with hash h lives at
//! some level L <= depth, in bucket h % buckets(L). Lookup probes levels 0..depth; insertion
//! takes the first level with room. Entries never move once inserted, so a slot position is a
//! stable readdir offset. Inline slots map one-to-one onto block 0 when a directory grows out
//! of its inode, which keeps offsets stable across that conversion too.

use crate::codec::*;
use crate::{tag, Ino, NAME_MAX};

/// Record bytes per entry.
const REC: usize = 12;
/// Name bytes per slot.
pub const SLOT_LEN: usize = 8;

/// Slots in a dentry block.
pub const BLOCK_SLOTS: usize = 200;
/// Slots in an inline dentry area.
pub const INLINE_SLOTS: usize = 180;
/// Blocks per hash bucket.
pub const BUCKET_BLOCKS: u64 = 2;
/// Bucket count stops doubling at this level (2^20 buckets), as F2FS caps MAX_DIR_BUCKETS.
pub const MAX_BUCKET_BITS: u32 = 20;
/// Deepest hash level (bounds lookups and hostile depth values).
pub const MAX_DEPTH: u32 = 40;

/// File type codes stored in dentries (as in struct dirent's d_type).
pub mod ftype {
    pub const UNKNOWN: u8 = 0;
    pub const FIFO: u8 = 1;
    pub const CHR: u8 = 2;
    pub const DIR: u8 = 4;
    pub const BLK: u8 = 6;
    pub const REG: u8 = 8;
    pub const LNK: u8 = 10;
    pub const SOCK: u8 = 12;
}

/// Geometry of a dentry area inside some byte buffer.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub nslots: usize,
    pub bitmap: usize,
    pub recs: usize,
    pub names: usize,
}

pub const BLOCK_LAYOUT: Layout = Layout {
    nslots: BLOCK_SLOTS,
    bitmap: 8,
    recs: 40,
    names: 40 + BLOCK_SLOTS * REC,
};
pub const INLINE_LAYOUT: Layout = Layout {
    nslots: INLINE_SLOTS,
    bitmap: 0,
    recs: 24,
    names: 24 + INLINE_SLOTS * REC,
};

const _: () = assert!(BLOCK_LAYOUT.names + BLOCK_SLOTS * SLOT_LEN <= crate::BLOCK_SIZE);
const _: () =
    assert!(INLINE_LAYOUT.names + INLINE_SLOTS * SLOT_LEN <= crate::node::INODE_AREA_BYTES);
const _: () = assert!(INLINE_LAYOUT.bitmap + INLINE_SLOTS.div_ceil(8) <= INLINE_LAYOUT.recs);
const _: () = assert!(INLINE_SLOTS <= BLOCK_SLOTS);

/// A decoded entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dentry {
    pub slot: usize,
    pub hash: u32,
    pub ino: Ino,
    pub ftype: u8,
    pub name: Vec<u8>,
}

/// An entry in place (`Layout::scan`): the name borrows the block.
#[derive(Clone, Copy, Debug)]
pub struct EntryRef<'a> {
    pub slot: usize,
    pub hash: u32,
    pub ino: Ino,
    pub ftype: u8,
    pub name: &'a [u8],
}

impl EntryRef<'_> {
    pub fn to_dentry(self) -> Dentry {
        Dentry {
            slot: self.slot,
            hash: self.hash,
            ino: self.ino,
            ftype: self.ftype,
            name: self.name.to_vec(),
        }
    }
}

pub fn slots_for(name_len: usize) -> usize {
    name_len.div_ceil(SLOT_LEN).max(1)
}

/// Name hash: crc32c of the name, seeded per volume (so that colliding names cannot be
/// prepared without the seed).
pub fn name_hash(seed: u32, name: &[u8]) -> u32 {
    crc32c::crc32c_append(seed, name)
}

impl Layout {
    fn used(&self, a: &[u8], slot: usize) -> bool {
        test_bit(&a[self.bitmap..], slot)
    }

    /// All valid entries. Malformed records (a name running past the area, zero length,
    /// ino 0) are reported as errors, never trusted.
    pub fn entries(&self, a: &[u8]) -> FormatResult<Vec<Dentry>> {
        let mut out = Vec::new();
        self.scan(a, |e| {
            out.push(e.to_dentry());
            None::<()>
        })?;
        Ok(out)
    }

    /// Visit the entries in slot order until `f` returns `Some` (returned); every entry
    /// visited is checked as `entries` checks it. Nothing is allocated: a lookup on every
    /// create (the duplicate check) built every entry of the block with its name before,
    /// which was most of a create's CPU in a large directory (fxmark MWCL).
    pub fn scan<'a, T>(
        &self,
        a: &'a [u8],
        mut f: impl FnMut(EntryRef<'a>) -> Option<T>,
    ) -> FormatResult<Option<T>> {
        let mut slot = 0;
        while slot < self.nslots {
            if !self.used(a, slot) {
                slot += 1;
                continue;
            }
            let r = self.recs + slot * REC;
            let len = get_u16(a, r + 8) as usize;
            let n = slots_for(len);
            if len == 0 || len > NAME_MAX || slot + n > self.nslots {
                return Err(FormatError::BadField {
                    what: "dentry",
                    field: "name_len",
                    value: len as u64,
                });
            }
            let ino = get_u32(a, r + 4);
            if ino == 0 {
                return Err(FormatError::BadField {
                    what: "dentry",
                    field: "ino",
                    value: 0,
                });
            }
            let start = self.names + slot * SLOT_LEN;
            let e = EntryRef {
                slot,
                hash: get_u32(a, r),
                ino,
                ftype: get_u8(a, r + 10),
                name: &a[start..start + len],
            };
            if let Some(t) = f(e) {
                return Ok(Some(t));
            }
            slot += n;
        }
        Ok(None)
    }

    /// Find `name`. The scan every create's duplicate check makes over each level's bucket
    /// (hundreds of entries a block): free slots are skipped a bitmap byte at a time, and an
    /// entry's name is compared only when its hash and length match. Every record on the
    /// way is length-checked (a bad length is an error, as `entries` reports it); the inode
    /// number only of the one found. The checks are written out as in `scan`: the same
    /// code shared through a helper gave 9 % fewer MWCL creates at 2 threads (76 k against
    /// 83 k, 4 alternating runs on 2 cores), so the duplication stays.
    pub fn find(&self, a: &[u8], name: &[u8], hash: u32) -> FormatResult<Option<Dentry>> {
        let nslots = self.nslots;
        let bitmap = &a[self.bitmap..self.bitmap + nslots.div_ceil(8)];
        let recs = &a[self.recs..self.recs + nslots * REC];
        let names = &a[self.names..self.names + nslots * SLOT_LEN];
        let mut slot = 0;
        while slot < nslots {
            // Eight used slots from a byte boundary whose records are all names of one
            // slot, none with this name's length and hash: the walk would visit each in
            // turn, pass its checks and match none, so all eight are passed at once (the
            // usual group in a directory of short names). Anything else, or a possible
            // match, takes the entry-at-a-time walk below from the same slot.
            if slot % 8 == 0 && slot + 8 <= nslots && bitmap[slot / 8] == 0xff {
                let mut other = false;
                for rec in recs[slot * REC..(slot + 8) * REC].chunks_exact(REC) {
                    let len = u16::from_le_bytes([rec[8], rec[9]]) as usize;
                    let h = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
                    other |=
                        (len.wrapping_sub(1) >= SLOT_LEN) | ((len == name.len()) & (h == hash));
                }
                if !other {
                    slot += 8;
                    continue;
                }
            }
            // The used slots from here in this bitmap byte: jump to the first (or to the
            // next byte when there is none), as the slot-at-a-time walk would arrive.
            let bits = bitmap[slot / 8] >> (slot % 8);
            if bits == 0 {
                slot = (slot | 7) + 1;
                continue;
            }
            slot += bits.trailing_zeros() as usize;
            if slot >= nslots {
                break;
            }
            let rec: &[u8; REC] = recs[slot * REC..slot * REC + REC]
                .try_into()
                .expect("REC bytes");
            let len = u16::from_le_bytes([rec[8], rec[9]]) as usize;
            let n = slots_for(len);
            if len == 0 || len > NAME_MAX || slot + n > nslots {
                return Err(FormatError::BadField {
                    what: "dentry",
                    field: "name_len",
                    value: len as u64,
                });
            }
            if len == name.len()
                && u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]) == hash
                && &names[slot * SLOT_LEN..slot * SLOT_LEN + len] == name
            {
                let ino = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]);
                if ino == 0 {
                    return Err(FormatError::BadField {
                        what: "dentry",
                        field: "ino",
                        value: 0,
                    });
                }
                return Ok(Some(Dentry {
                    slot,
                    hash,
                    ino,
                    ftype: rec[10],
                    name: name.to_vec(),
                }));
            }
            slot += n;
        }
        Ok(None)
    }

    /// First run of `need` free slots. A bitmap byte wholly used or wholly free is taken
    /// in one step: an insert into a large directory runs this over every full bucket of the
    /// levels below the one with room (fxmark MWCL: a bit at a time it was 19 % of a
    /// create's instructions at 20,000 entries).
    pub fn find_space(&self, a: &[u8], need: usize) -> Option<usize> {
        let bitmap = &a[self.bitmap..self.bitmap + self.nslots.div_ceil(8)];
        let mut run = 0;
        let mut slot = 0;
        while slot < self.nslots {
            let byte = bitmap[slot / 8];
            if slot % 8 == 0 && slot + 8 <= self.nslots {
                if byte == 0xff {
                    run = 0;
                    slot += 8;
                    continue;
                }
                if byte == 0 {
                    if run + 8 >= need {
                        return Some(slot - run);
                    }
                    run += 8;
                    slot += 8;
                    continue;
                }
            }
            if byte & (1 << (slot % 8)) != 0 {
                run = 0;
            } else {
                run += 1;
                if run == need {
                    return Some(slot + 1 - need);
                }
            }
            slot += 1;
        }
        None
    }

    /// Write an entry at `slot` (which `find_space` returned for this name).
    pub fn insert(&self, a: &mut [u8], slot: usize, name: &[u8], hash: u32, ino: Ino, ftype: u8) {
        let r = self.recs + slot * REC;
        put_u32(a, r, hash);
        put_u32(a, r + 4, ino);
        put_u16(a, r + 8, name.len() as u16);
        put_u8(a, r + 10, ftype);
        put_u8(a, r + 11, 0);
        let start = self.names + slot * SLOT_LEN;
        let n = slots_for(name.len());
        a[start..start + n * SLOT_LEN].fill(0);
        a[start..start + name.len()].copy_from_slice(name);
        for s in slot..slot + n {
            set_bit(&mut a[self.bitmap..], s, true);
        }
    }

    /// Change the inode an entry points at (rename over an existing name).
    pub fn set_ino(&self, a: &mut [u8], slot: usize, ino: Ino, ftype: u8) {
        let r = self.recs + slot * REC;
        put_u32(a, r + 4, ino);
        put_u8(a, r + 10, ftype);
    }

    /// Remove the entry starting at `slot`.
    pub fn remove(&self, a: &mut [u8], slot: usize) {
        let r = self.recs + slot * REC;
        let n = slots_for(get_u16(a, r + 8) as usize).min(self.nslots - slot);
        a[r..r + REC].fill(0);
        for s in slot..slot + n {
            set_bit(&mut a[self.bitmap..], s, false);
        }
    }

    pub fn is_empty(&self, a: &[u8]) -> bool {
        self.used_outside(a, 0..0).is_none()
    }

    /// Whether the entry starting at `slot` is the only one in `a`: removing it leaves the
    /// area empty (`remove` then `is_empty`, without changing `a`). A bitmap byte at a
    /// time: every unlink asks this of its dentry block (fxmark MWUL: a slot at a time it
    /// was 12 % of an unlink's instructions).
    pub fn only_entry(&self, a: &[u8], slot: usize) -> bool {
        let r = self.recs + slot * REC;
        let n = slots_for(get_u16(a, r + 8) as usize).min(self.nslots - slot);
        self.used_outside(a, slot..slot + n).is_none()
    }

    /// The first bitmap byte with a used slot outside `skip` (slots past `nslots` are not
    /// looked at).
    fn used_outside(&self, a: &[u8], skip: std::ops::Range<usize>) -> Option<usize> {
        let bitmap = &a[self.bitmap..self.bitmap + self.nslots.div_ceil(8)];
        bitmap.iter().enumerate().position(|(i, &byte)| {
            let lo = i * 8;
            let mut mask: u8 = if lo + 8 > self.nslots {
                (1u8 << (self.nslots - lo)) - 1
            } else {
                0xff
            };
            for s in skip.start.max(lo)..skip.end.min(lo + 8) {
                mask &= !(1 << (s - lo));
            }
            byte & mask != 0
        })
    }

    /// Copy every entry of inline area `from` (laid out as `self`) into block layout `to`, at
    /// the same slot numbers.
    pub fn copy_into_block(&self, from: &[u8], to: &mut [u8]) -> FormatResult<()> {
        for d in self.entries(from)? {
            BLOCK_LAYOUT.insert(to, d.slot, &d.name, d.hash, d.ino, d.ftype);
        }
        Ok(())
    }
}

/// Check a dentry block read from disk. An all-zero block (a hole in the directory file
/// reads as zeros) is an empty block.
pub fn check_dentry_block(b: &Block) -> FormatResult<()> {
    if is_zero(b) {
        return Ok(());
    }
    check(b, tag::DENTRY, "dentry block")
}

/// Seal a dentry block before writing.
pub fn seal_dentry_block(b: &mut Block) {
    seal(b, tag::DENTRY);
}

/// Buckets at hash level `level`.
pub fn buckets(level: u32) -> u64 {
    1u64 << level.min(MAX_BUCKET_BITS)
}

/// First block (file block index) of hash level `level`.
pub fn level_start(level: u32) -> u64 {
    (0..level).map(|l| buckets(l) * BUCKET_BLOCKS).sum()
}

/// Block indexes of the bucket that `hash` maps to at `level`.
pub fn bucket_blocks(level: u32, hash: u32) -> std::ops::Range<u64> {
    let start = level_start(level) + (hash as u64 % buckets(level)) * BUCKET_BLOCKS;
    start..start + BUCKET_BLOCKS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BLOCK_SIZE;

    #[test]
    fn insert_find_remove_in_block() {
        let mut b = [0u8; BLOCK_SIZE];
        let l = BLOCK_LAYOUT;
        let long = vec![b'x'; 255];
        let h = name_hash(1, &long);
        let s = l.find_space(&b, slots_for(255)).unwrap();
        l.insert(&mut b, s, &long, h, 42, ftype::REG);
        let s2 = l.find_space(&b, 1).unwrap();
        assert_eq!(s2, 32);
        l.insert(&mut b, s2, b"a", name_hash(1, b"a"), 43, ftype::DIR);
        assert_eq!(l.find(&b, &long, h).unwrap().unwrap().ino, 42);
        assert_eq!(l.entries(&b).unwrap().len(), 2);
        assert!(!l.only_entry(&b, s) && !l.only_entry(&b, s2));
        l.remove(&mut b, s);
        assert!(l.find(&b, &long, h).unwrap().is_none());
        assert!(l.only_entry(&b, s2) && !l.is_empty(&b));
        l.remove(&mut b, s2);
        assert!(l.is_empty(&b));
        l.insert(&mut b, s2, b"a", name_hash(1, b"a"), 43, ftype::DIR);
        assert_eq!(l.find_space(&b, 32), Some(0));
        seal_dentry_block(&mut b);
        check_dentry_block(&b).unwrap();
    }

    /// `find_space` (a byte at a time where it can) against the plain bit-at-a-time scan,
    /// over bitmaps of runs and noise, both layouts, every name length.
    #[test]
    fn find_space_matches_bitwise_scan() {
        fn reference(l: &Layout, a: &[u8], need: usize) -> Option<usize> {
            let mut run = 0;
            for slot in 0..l.nslots {
                if l.used(a, slot) {
                    run = 0;
                } else {
                    run += 1;
                    if run == need {
                        return Some(slot + 1 - need);
                    }
                }
            }
            None
        }
        let mut x = 0x2545f4914f6cdd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for l in [BLOCK_LAYOUT, INLINE_LAYOUT] {
            for round in 0..3000 {
                let mut a = vec![0u8; BLOCK_SIZE];
                let bytes = l.nslots.div_ceil(8) + 1;
                for i in 0..bytes {
                    let r = next();
                    a[l.bitmap + i] = match (round + (r as usize % 5)) % 5 {
                        0 => 0xff,
                        1 => 0,
                        _ => (r >> 8) as u8 | if round % 7 == 0 { 0xf0 } else { 0 },
                    };
                }
                for need in 1..=slots_for(NAME_MAX) + 1 {
                    assert_eq!(
                        l.find_space(&a, need),
                        reference(&l, &a, need),
                        "nslots {} round {round} need {need}",
                        l.nslots
                    );
                }
            }
        }
    }

    /// `find`, `only_entry` and `is_empty` (a bitmap byte at a time) against the plain
    /// slot-at-a-time walks they replaced, over areas built by inserts and removes and over
    /// the same areas with random bytes written over them (bad records included).
    #[test]
    fn byte_walks_match_slot_walks() {
        fn find_ref(l: &Layout, a: &[u8], name: &[u8], hash: u32) -> FormatResult<Option<Dentry>> {
            let mut slot = 0;
            while slot < l.nslots {
                if !l.used(a, slot) {
                    slot += 1;
                    continue;
                }
                let r = l.recs + slot * REC;
                let len = get_u16(a, r + 8) as usize;
                let n = slots_for(len);
                if len == 0 || len > NAME_MAX || slot + n > l.nslots {
                    return Err(FormatError::BadField {
                        what: "dentry",
                        field: "name_len",
                        value: len as u64,
                    });
                }
                let start = l.names + slot * SLOT_LEN;
                if len == name.len() && get_u32(a, r) == hash && &a[start..start + len] == name {
                    let ino = get_u32(a, r + 4);
                    if ino == 0 {
                        return Err(FormatError::BadField {
                            what: "dentry",
                            field: "ino",
                            value: 0,
                        });
                    }
                    return Ok(Some(Dentry {
                        slot,
                        hash,
                        ino,
                        ftype: get_u8(a, r + 10),
                        name: name.to_vec(),
                    }));
                }
                slot += n;
            }
            Ok(None)
        }
        fn only_ref(l: &Layout, a: &[u8], slot: usize) -> bool {
            let r = l.recs + slot * REC;
            let n = slots_for(get_u16(a, r + 8) as usize).min(l.nslots - slot);
            (0..l.nslots).all(|s| (slot..slot + n).contains(&s) || !l.used(a, s))
        }
        let mut x = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for l in [BLOCK_LAYOUT, INLINE_LAYOUT] {
            for round in 0..1000 {
                let mut a = vec![0u8; BLOCK_SIZE];
                let mut names: Vec<Vec<u8>> = Vec::new();
                // Even rounds: names of one slot only, up to a full area (the groups of
                // eight that `find` passes at once).
                let short = round % 2 == 0;
                let fill = next() as usize % if short { 230 } else { 120 };
                for i in 0..fill {
                    let len = 1 + next() as usize
                        % if short {
                            SLOT_LEN
                        } else if i % 9 == 0 {
                            40
                        } else {
                            12
                        };
                    let name: Vec<u8> = (0..len).map(|_| b'a' + (next() % 3) as u8).collect();
                    let h = if next() % 4 == 0 {
                        7
                    } else {
                        name_hash(3, &name)
                    };
                    if let Some(s) = l.find_space(&a, slots_for(len)) {
                        l.insert(&mut a, s, &name, h, 1 + i as u32, ftype::REG);
                        names.push(name);
                    }
                }
                for _ in 0..next() % 40 {
                    let s = next() as usize % l.nslots;
                    if l.used(&a, s) && get_u16(&a, l.recs + s * REC + 8) != 0 {
                        l.remove(&mut a, s);
                    }
                }
                if round % 3 == 0 {
                    for _ in 0..1 + next() % 6 {
                        let at = next() as usize % (l.names + l.nslots * SLOT_LEN);
                        a[at] = next() as u8;
                    }
                }
                if round % 5 == 0 {
                    // A record's length out of one slot's range, or zero.
                    let s = next() as usize % l.nslots;
                    let len = [0u16, 9, 300, 8, 1][next() as usize % 5];
                    put_u16(&mut a, l.recs + s * REC + 8, len);
                }
                names.push(b"absent".to_vec());
                for name in &names {
                    for h in [name_hash(3, name), 7] {
                        assert_eq!(
                            format!("{:?}", l.find(&a, name, h)),
                            format!("{:?}", find_ref(&l, &a, name, h)),
                            "round {round} name {name:?}"
                        );
                    }
                }
                for s in 0..l.nslots {
                    assert_eq!(
                        l.only_entry(&a, s),
                        only_ref(&l, &a, s),
                        "round {round} slot {s}"
                    );
                }
                assert_eq!(l.is_empty(&a), (0..l.nslots).all(|s| !l.used(&a, s)));
            }
        }
    }

    #[test]
    fn hostile_record_is_an_error() {
        let mut b = [0u8; BLOCK_SIZE];
        let l = BLOCK_LAYOUT;
        l.insert(&mut b, 199, b"z", 0, 5, ftype::REG);
        put_u16(&mut b, l.recs + 199 * REC + 8, 200); // runs past the end
        assert!(l.entries(&b).is_err());
        assert!(
            l.find(&b, b"y", 1).is_err(),
            "a lookup reaches the bad record"
        );
    }

    #[test]
    fn find_compares_the_name_not_only_the_hash() {
        let mut b = [0u8; BLOCK_SIZE];
        let l = BLOCK_LAYOUT;
        // Two names under one hash (a collision): each finds its own entry.
        l.insert(&mut b, 3, b"first", 77, 10, ftype::REG);
        l.insert(&mut b, 9, b"second", 77, 11, ftype::DIR);
        let d = l.find(&b, b"second", 77).unwrap().unwrap();
        assert_eq!(
            (d.slot, d.ino, d.ftype, &d.name[..]),
            (9, 11, ftype::DIR, &b"second"[..])
        );
        assert_eq!(l.find(&b, b"first", 77).unwrap().unwrap().ino, 10);
        assert!(l.find(&b, b"third", 77).unwrap().is_none());
        assert!(l.find(&b, b"first", 78).unwrap().is_none());
        // Past runs of free slots (whole bitmap bytes skipped) to the last slot, in a
        // block and in the inline area.
        for (layout, last) in [
            (BLOCK_LAYOUT, BLOCK_SLOTS - 1),
            (INLINE_LAYOUT, INLINE_SLOTS - 1),
        ] {
            let mut a = vec![0u8; BLOCK_SIZE];
            layout.insert(&mut a, 16, b"mid", 5, 20, ftype::REG);
            layout.insert(&mut a, last, b"z", 6, 21, ftype::REG);
            assert_eq!(layout.find(&a, b"mid", 5).unwrap().unwrap().slot, 16);
            let d = layout.find(&a, b"z", 6).unwrap().unwrap();
            assert_eq!((d.slot, d.ino), (last, 21));
            assert!(layout.find(&a, b"y", 6).unwrap().is_none());
        }
    }

    #[test]
    fn inline_converts_to_block_at_same_slots() {
        let mut inl = vec![0u8; crate::node::INODE_AREA_BYTES];
        INLINE_LAYOUT.insert(&mut inl, 7, b"name", 9, 11, ftype::REG);
        let mut b = [0u8; BLOCK_SIZE];
        INLINE_LAYOUT.copy_into_block(&inl, &mut b).unwrap();
        assert_eq!(BLOCK_LAYOUT.entries(&b).unwrap()[0].slot, 7);
    }

    #[test]
    fn levels() {
        assert_eq!(level_start(0), 0);
        assert_eq!(level_start(1), 2);
        assert_eq!(level_start(2), 6);
        assert_eq!(bucket_blocks(1, 3), 4..6);
    }
}
