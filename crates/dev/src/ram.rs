//! RAM backend: a sparse, sharded map of 256 KiB chunks. Unwritten and discarded blocks read
//! as zeros, so a RAM device of many TiB costs only what is written.
//!
//! Lock order: one shard lock at a time (leaf).

use crate::{
    check_range, check_request, BlockDevice, Capabilities, Completion, DevResult, BLOCK_SIZE,
};
use parking_lot::RwLock;
use std::collections::HashMap;

/// Blocks per chunk: large enough that the map stays small, small enough that sparse use is
/// cheap.
const CHUNK_BLOCKS: u64 = 64;
const CHUNK_BYTES: usize = CHUNK_BLOCKS as usize * BLOCK_SIZE;
/// Shards of the chunk map, so that concurrent requests rarely meet on a lock.
const SHARDS: usize = 64;

type Shard = RwLock<HashMap<u64, Box<[u8]>>>;

pub struct RamDevice {
    caps: Capabilities,
    shards: Box<[Shard]>,
}

impl RamDevice {
    /// A zero-filled device of `block_count` blocks.
    pub fn new(block_count: u64) -> Self {
        RamDevice {
            caps: Capabilities::plain("ram", block_count),
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
        }
    }

    /// Bytes of RAM holding data (chunks ever written and not discarded).
    pub fn resident_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.read().len() as u64)
            .sum::<u64>()
            * CHUNK_BYTES as u64
    }

    /// A deep copy of the contents (used by crash simulation to snapshot images).
    pub fn deep_clone(&self) -> RamDevice {
        RamDevice {
            caps: self.caps.clone(),
            shards: self
                .shards
                .iter()
                .map(|s| RwLock::new(s.read().clone()))
                .collect(),
        }
    }

    fn shard(&self, chunk: u64) -> &Shard {
        &self.shards[(chunk as usize) % SHARDS]
    }

    /// Copy one block into `out`.
    pub(crate) fn read_block(&self, addr: u64, out: &mut [u8]) {
        let chunk = addr / CHUNK_BLOCKS;
        let off = (addr % CHUNK_BLOCKS) as usize * BLOCK_SIZE;
        match self.shard(chunk).read().get(&chunk) {
            Some(data) => out.copy_from_slice(&data[off..off + BLOCK_SIZE]),
            None => out.fill(0),
        }
    }

    /// Overwrite one block (or part of it: `data` may be shorter, from byte `at`).
    pub(crate) fn write_partial(&self, addr: u64, at: usize, data: &[u8]) {
        let chunk = addr / CHUNK_BLOCKS;
        let off = (addr % CHUNK_BLOCKS) as usize * BLOCK_SIZE + at;
        let mut map = self.shard(chunk).write();
        let buf = map
            .entry(chunk)
            .or_insert_with(|| vec![0u8; CHUNK_BYTES].into_boxed_slice());
        buf[off..off + data.len()].copy_from_slice(data);
    }
}

impl BlockDevice for RamDevice {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        check_request(&self.caps, addr, buf.len())?;
        for (i, out) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            self.read_block(addr + i as u64, out);
        }
        Ok(Completion::empty())
    }

    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        check_request(&self.caps, addr, buf.len())?;
        for (i, data) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            self.write_partial(addr + i as u64, 0, data);
        }
        Ok(Completion::empty())
    }

    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        check_range(&self.caps, addr, count)?;
        let zero = [0u8; BLOCK_SIZE];
        let mut a = addr;
        let end = addr + count;
        while a < end {
            let chunk = a / CHUNK_BLOCKS;
            let chunk_start = chunk * CHUNK_BLOCKS;
            if a == chunk_start && end >= chunk_start + CHUNK_BLOCKS {
                self.shard(chunk).write().remove(&chunk);
                a += CHUNK_BLOCKS;
            } else {
                if self.shard(chunk).read().contains_key(&chunk) {
                    self.write_partial(a, 0, &zero);
                }
                a += 1;
            }
        }
        Ok(Completion::empty())
    }

    fn flush(&self) -> DevResult<Completion> {
        Ok(Completion::empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DevError;

    #[test]
    fn write_read_discard() {
        let d = RamDevice::new(1000);
        let mut buf = vec![0u8; 2 * BLOCK_SIZE];
        buf[0] = 7;
        buf[BLOCK_SIZE] = 9;
        d.write(63, &buf).unwrap();
        let mut back = vec![1u8; 2 * BLOCK_SIZE];
        d.read(63, &mut back).unwrap();
        assert_eq!(back, buf);
        d.discard(0, 64).unwrap();
        d.read(63, &mut back).unwrap();
        assert_eq!(back[0], 0);
        assert_eq!(back[BLOCK_SIZE], 9);
        assert!(matches!(
            d.read(999, &mut back),
            Err(DevError::OutOfRange { .. })
        ));
        assert!(matches!(
            d.write(0, &buf[..100]),
            Err(DevError::Misaligned { .. })
        ));
    }
}
