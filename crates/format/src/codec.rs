//! Byte-level helpers shared by every decoder: bounds-checked little-endian access, the block
//! header (tag + crc32c), and the error type.

use crate::BLOCK_SIZE;

/// One on-disk block.
pub type Block = [u8; BLOCK_SIZE];

/// A zeroed block on the heap.
pub fn zero_block() -> Box<Block> {
    Box::new([0u8; BLOCK_SIZE])
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("{what}: wrong block tag {found:#010x} (expected {expected:#010x})")]
    BadTag {
        what: &'static str,
        expected: u32,
        found: u32,
    },
    #[error("{what}: checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BadCrc {
        what: &'static str,
        stored: u32,
        computed: u32,
    },
    #[error("{what}: field {field} has invalid value {value}")]
    BadField {
        what: &'static str,
        field: &'static str,
        value: u64,
    },
    #[error("{what}: buffer of {len} bytes, expected {expected}")]
    BadLength {
        what: &'static str,
        len: usize,
        expected: usize,
    },
}

pub type FormatResult<T> = Result<T, FormatError>;

/// Byte range covered by the header crc.
pub const CRC_START: usize = 8;

pub fn crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Stamp `tag` and the crc of bytes 8.. into the header of `b`.
pub fn seal(b: &mut Block, tag: u32) {
    put_u32(b, 0, tag);
    let c = crc(&b[CRC_START..]);
    put_u32(b, 4, c);
}

/// Check the header of `b`: tag, then crc.
pub fn check(b: &Block, tag: u32, what: &'static str) -> FormatResult<()> {
    let found = get_u32(b, 0);
    if found != tag {
        return Err(FormatError::BadTag {
            what,
            expected: tag,
            found,
        });
    }
    let stored = get_u32(b, 4);
    let computed = crc(&b[CRC_START..]);
    if stored != computed {
        return Err(FormatError::BadCrc {
            what,
            stored,
            computed,
        });
    }
    Ok(())
}

/// True if every byte of `b` is zero (a block never written: decodes as empty where the
/// format allows it).
pub fn is_zero(b: &Block) -> bool {
    b.iter().all(|&x| x == 0)
}

pub fn as_block<'a>(buf: &'a [u8], what: &'static str) -> FormatResult<&'a Block> {
    buf.try_into().map_err(|_| FormatError::BadLength {
        what,
        len: buf.len(),
        expected: BLOCK_SIZE,
    })
}

// Accessors. Offsets come from the format constants; a caller computing an offset from disk
// data must check it first (see `fits`). They index a slice and panic only on a programming
// error in the constants, which the unit tests cover.
pub fn get_u8(b: &[u8], off: usize) -> u8 {
    b[off]
}
pub fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}
pub fn get_i64(b: &[u8], off: usize) -> i64 {
    get_u64(b, off) as i64
}
pub fn put_u8(b: &mut [u8], off: usize, v: u8) {
    b[off] = v;
}
pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
pub fn put_i64(b: &mut [u8], off: usize, v: i64) {
    put_u64(b, off, v as u64)
}

/// Test a bit of a little-endian bitmap.
pub fn test_bit(map: &[u8], i: usize) -> bool {
    map.get(i / 8)
        .is_some_and(|byte| byte & (1 << (i % 8)) != 0)
}
pub fn set_bit(map: &mut [u8], i: usize, v: bool) {
    if let Some(byte) = map.get_mut(i / 8) {
        if v {
            *byte |= 1 << (i % 8);
        } else {
            *byte &= !(1 << (i % 8));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_check_and_detect_flip() {
        let mut b = [0u8; BLOCK_SIZE];
        b[100] = 5;
        seal(&mut b, 0x1234);
        check(&b, 0x1234, "t").unwrap();
        assert!(matches!(
            check(&b, 0x1235, "t"),
            Err(FormatError::BadTag { .. })
        ));
        b[4000] ^= 1;
        assert!(matches!(
            check(&b, 0x1234, "t"),
            Err(FormatError::BadCrc { .. })
        ));
    }
}
