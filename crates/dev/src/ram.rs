//! RAM backend: a sparse, sharded map of 256 KiB chunks. Unwritten and discarded blocks read
//! as zeros, so a RAM device of many TiB costs only what is written.
//!
//! That cost is paid on the first write of each chunk: fresh memory from the kernel, which
//! zero-fills each page on its first touch. In fxmark DWAL on 2 cores that fault-and-zero
//! was a third of all CPU time (`perf`: `clear_page_rep` under the chunk's allocation, in
//! the I/O threads), so a RAM device measured the kernel's page allocator as much as the
//! file system. `RamDevice::resident` allocates and touches every chunk when it is made
//! (the bench's `ram-resident:SIZE`), for runs that must see the file system alone.
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

#[derive(Default)]
struct ShardMap {
    chunks: HashMap<u64, Box<[u8]>>,
    /// `resident`: chunks a whole-chunk discard took out of `chunks`, their memory kept
    /// (touched) for the next chunk a write needs.
    spare: Vec<Box<[u8]>>,
}

type Shard = RwLock<ShardMap>;

pub struct RamDevice {
    caps: Capabilities,
    shards: Box<[Shard]>,
    /// The whole capacity is held (`resident`): discarded chunks are kept as spares.
    resident: bool,
}

impl RamDevice {
    /// A zero-filled device of `block_count` blocks.
    pub fn new(block_count: u64) -> Self {
        RamDevice {
            caps: Capabilities::plain("ram", block_count),
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            resident: false,
        }
    }

    /// A zero-filled device of `block_count` blocks whose whole capacity is allocated and
    /// touched now, so that no write pays the kernel's first-touch page faults. A discarded
    /// chunk's memory is kept for the next chunk written (zeroed then, unless the write
    /// covers all of it), so it stays resident.
    pub fn resident(block_count: u64) -> Self {
        let mut d = RamDevice::new(block_count);
        d.caps.kind = "ram-resident".into();
        d.resident = true;
        for chunk in 0..block_count.div_ceil(CHUNK_BLOCKS) {
            let mut buf = vec![0u8; CHUNK_BYTES].into_boxed_slice();
            // Fresh memory is mapped on its first write, and a zeroed allocation is not
            // written (nor may a store of zeros into it survive the optimiser): write an
            // opaque value into every page, then zero it again.
            for page in buf.chunks_mut(BLOCK_SIZE) {
                page[0] = std::hint::black_box(1);
            }
            std::hint::black_box(&mut *buf);
            for page in buf.chunks_mut(BLOCK_SIZE) {
                page[0] = 0;
            }
            d.shard(chunk).write().chunks.insert(chunk, buf);
        }
        d
    }

    /// Bytes of RAM holding data (chunks ever written and not discarded), and spare chunks
    /// of a resident device.
    pub fn resident_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                let s = s.read();
                (s.chunks.len() + s.spare.len()) as u64
            })
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
                .map(|s| {
                    RwLock::new(ShardMap {
                        chunks: s.read().chunks.clone(),
                        spare: Vec::new(),
                    })
                })
                .collect(),
            resident: self.resident,
        }
    }

    fn shard(&self, chunk: u64) -> &Shard {
        &self.shards[(chunk as usize) % SHARDS]
    }

    /// Copy one block into `out`.
    pub(crate) fn read_block(&self, addr: u64, out: &mut [u8]) {
        let chunk = addr / CHUNK_BLOCKS;
        let off = (addr % CHUNK_BLOCKS) as usize * BLOCK_SIZE;
        match self.shard(chunk).read().chunks.get(&chunk) {
            Some(data) => out.copy_from_slice(&data[off..off + BLOCK_SIZE]),
            None => out.fill(0),
        }
    }

    /// Overwrite one block (or part of it: `data` may be shorter, from byte `at`).
    pub(crate) fn write_partial(&self, addr: u64, at: usize, data: &[u8]) {
        self.write_in_chunk(
            addr / CHUNK_BLOCKS,
            (addr % CHUNK_BLOCKS) as usize * BLOCK_SIZE + at,
            data,
        );
    }

    /// Copy `data` into chunk `chunk` from byte `off` (within the chunk), creating the chunk:
    /// from a spare when there is one (zeroed first unless `data` covers all of it), else
    /// fresh zeroed memory.
    fn write_in_chunk(&self, chunk: u64, off: usize, data: &[u8]) {
        let mut guard = self.shard(chunk).write();
        let map = &mut *guard;
        let buf = map
            .chunks
            .entry(chunk)
            .or_insert_with(|| match map.spare.pop() {
                Some(mut b) => {
                    if data.len() < CHUNK_BYTES {
                        b.fill(0);
                    }
                    b
                }
                None => vec![0u8; CHUNK_BYTES].into_boxed_slice(),
            });
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
        // A chunk at a time: one shard lock per chunk, not per block.
        let (mut a, mut done) = (addr, 0);
        while done < buf.len() {
            let off = (a % CHUNK_BLOCKS) as usize * BLOCK_SIZE;
            let n = (CHUNK_BYTES - off).min(buf.len() - done);
            self.write_in_chunk(a / CHUNK_BLOCKS, off, &buf[done..done + n]);
            done += n;
            a += (n / BLOCK_SIZE) as u64;
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
                let mut map = self.shard(chunk).write();
                if let Some(buf) = map.chunks.remove(&chunk) {
                    if self.resident {
                        map.spare.push(buf);
                    }
                }
                a += CHUNK_BLOCKS;
            } else {
                if self.shard(chunk).read().chunks.contains_key(&chunk) {
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

    /// A resident device holds its whole capacity from the start, reads zeros, keeps
    /// writes, and a discard zeroes without giving the memory back.
    #[test]
    fn a_resident_device_holds_its_capacity_and_behaves_as_a_sparse_one() {
        let blocks = 3 * CHUNK_BLOCKS + 5;
        let d = RamDevice::resident(blocks);
        assert_eq!(d.resident_bytes(), 4 * CHUNK_BYTES as u64);
        assert_eq!(d.capabilities().block_count, blocks);
        let mut back = vec![1u8; BLOCK_SIZE];
        d.read(blocks - 1, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0));
        let data = vec![7u8; 2 * BLOCK_SIZE];
        d.write(CHUNK_BLOCKS - 1, &data).unwrap();
        let mut two = vec![0u8; 2 * BLOCK_SIZE];
        d.read(CHUNK_BLOCKS - 1, &mut two).unwrap();
        assert_eq!(two, data);
        d.discard(0, 2 * CHUNK_BLOCKS).unwrap();
        d.read(CHUNK_BLOCKS - 1, &mut two).unwrap();
        assert!(two.iter().all(|&b| b == 0));
        assert_eq!(d.resident_bytes(), 4 * CHUNK_BYTES as u64);
        // A spare taken back by a partial write reads zeros around what was written.
        d.write(CHUNK_BLOCKS + 3, &data[..BLOCK_SIZE]).unwrap();
        let mut chunk = vec![1u8; CHUNK_BYTES];
        d.read(CHUNK_BLOCKS, &mut chunk).unwrap();
        for (i, b) in chunk.chunks(BLOCK_SIZE).enumerate() {
            let want = if i == 3 { 7 } else { 0 };
            assert!(b.iter().all(|&x| x == want), "block {i}");
        }
        // And one a whole-chunk write takes back holds just what was written.
        let whole = vec![9u8; CHUNK_BYTES];
        d.write(0, &whole).unwrap();
        d.read(0, &mut chunk).unwrap();
        assert_eq!(chunk, whole);
        assert_eq!(d.resident_bytes(), 4 * CHUNK_BYTES as u64);
    }
}
