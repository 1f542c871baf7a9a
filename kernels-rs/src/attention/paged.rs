//! The paged KV cache of `flash_decode`'s paged entry points: K and V as `[num_blocks,
//! block_size, H_kv, D]`, each sequence's keys spread over pages listed in its block-table row,
//! and its own length in `seqlens_k`.
//!
//! A page holds `block_size` consecutive keys of every KV head, so inside a page a head's keys
//! are `H_kv * D` elements apart, as in the `[B, S, H, D]` layout; only the page's own address
//! comes from the table. The tile copies look the page up per copied row (`load_tile`): one
//! 4-byte load that the consecutive rows of a page share through L1, while the 16-byte copies
//! of K and V stay what the contiguous path issues. The contiguous entry points never reach
//! this code (`PAGED` is a const parameter of the kernel body), so they keep their PTX.

use super::pipeline::{KvSource, TileBoxes, TileCopy};
use super::Problem;
use crate::arch::{self, SharedAddr};
use crate::tile::{self, swizzled, Padded};

/// The paged-cache launch parameters (see `launch.rs`); all zero for contiguous K/V.
#[derive(Clone, Copy)]
pub struct PageTable {
    /// `[B, max_blocks]` page numbers.
    pub table: *const u32,
    /// `[B]` key counts.
    pub seqlens: *const u32,
    /// Keys per page, a power of two.
    pub block_size: u32,
    /// Entries per table row.
    pub max_blocks: u32,
}

impl PageTable {
    /// No paged cache: what every non-paged kernel gets.
    pub const NONE: PageTable = PageTable {
        table: core::ptr::null(),
        seqlens: core::ptr::null(),
        block_size: 0,
        max_blocks: 0,
    };

    /// Batch entry `batch`'s view: `problem` with `seq_k` its own length, so that the causal
    /// alignment, the key slices and the masks are per sequence.
    ///
    /// # Safety
    /// `seqlens` holds `B` lengths and `batch < B`.
    #[inline(always)]
    pub unsafe fn sequence(&self, problem: &Problem, batch: u32) -> Problem {
        Problem {
            seq_k: *self.seqlens.add(batch as usize),
            ..*problem
        }
    }

    /// The K and V rows of KV head `h_kv` of sequence `batch`, from key `first_key` on.
    ///
    /// # Safety
    /// `k` and `v` hold the cache `[num_blocks, block_size, heads_kv, D]`; the table's row
    /// `batch` lists pages below `num_blocks` for every key below `seq_k`.
    #[inline(always)]
    pub unsafe fn rows<const D: usize>(
        &self,
        k: *const u16,
        v: *const u16,
        (batch, h_kv, heads_kv): (u32, u32, u32),
        first_key: u32,
        seq_k: u32,
    ) -> PagedRows {
        let head = h_kv as usize * D;
        PagedRows {
            k: k.add(head),
            v: v.add(head),
            pages: self.table.add(batch as usize * self.max_blocks as usize),
            shift: self.block_size.trailing_zeros(),
            key_stride: heads_kv * D as u32,
            first_key,
            seq_k,
        }
    }

    /// The copy engine's view of KV head `h_kv` of sequence `batch` (`seq_k` keys): `maps` are
    /// the tensor maps of the K and V caches as (64 columns, `num_blocks * block_size` key
    /// slots, `D / 64` column blocks, `H_kv` heads) (`src/tma.rs`), in boxes of `min(block_size,
    /// BLOCK_N)` rows by every column block.
    #[inline(always)]
    pub fn boxes(
        &self,
        (k_map, v_map): (*const u8, *const u8),
        batch: u32,
        h_kv: u32,
        seq_k: u32,
    ) -> PagedBoxes {
        PagedBoxes {
            k_map,
            v_map,
            head: h_kv as i32,
            pages: self.table.wrapping_add(batch as usize * self.max_blocks as usize),
            shift: self.block_size.trailing_zeros(),
            seq_k,
        }
    }
}

/// Most boxes one tile of a paged cache takes: `BLOCK_N` (at most 128 for the paged copy engine)
/// over the smallest page, 16 keys.
const MOST_PAGES_PER_TILE: usize = 8;

/// A sequence's keys of one KV head in a paged cache, as the copy engine reads them: a box per
/// page a tile covers (or per tile, where a page holds several), placed by the block table, each
/// box a page's rows with all their columns (so a tile of short pages is a run of page-sized
/// tiles, `TileBoxes::group_shift`; one box per page and tensor, not one per 64 columns). Rows
/// of a page past the sequence's end arrive as whatever the page holds (`stale_from`); boxes
/// wholly past it are aimed outside the map and arrive as zeros, their table entries unread.
#[derive(Clone, Copy)]
pub struct PagedBoxes {
    k_map: *const u8,
    v_map: *const u8,
    head: i32,
    /// This sequence's block-table row.
    pages: *const u32,
    /// `log2(block_size)`.
    shift: u32,
    seq_k: u32,
}

impl PagedBoxes {
    /// Rows per box: a page, or a whole tile where a page holds more.
    #[inline(always)]
    fn box_rows<const BLOCK_N: usize>(&self) -> u32 {
        1 << self.group_shift::<BLOCK_N>()
    }
}

impl TileBoxes for PagedBoxes {
    /// The map row (page x block size + offset) of each box of the tile.
    type Lookup = [i32; MOST_PAGES_PER_TILE];

    #[inline(always)]
    unsafe fn prefetch(&self) {
        arch::prefetch_tensormap(self.k_map);
        arch::prefetch_tensormap(self.v_map);
    }

    /// # Safety
    /// The table row lists a page of the cache for every key below `seq_k` (`PageTable::rows`).
    #[inline(always)]
    unsafe fn lookup<const BLOCK_N: usize>(&self, first_key: u32) -> Self::Lookup {
        const { assert!(BLOCK_N <= 16 * MOST_PAGES_PER_TILE) };
        let box_rows = self.box_rows::<BLOCK_N>();
        let offset_mask = (1u32 << self.shift) - 1;
        // Unrolled to the most boxes, so the rows stay in registers; the loads are independent.
        let mut rows = [-(BLOCK_N as i32); MOST_PAGES_PER_TILE];
        for (j, row) in rows.iter_mut().enumerate() {
            let key = first_key + j as u32 * box_rows;
            if (j as u32) < BLOCK_N as u32 / box_rows && key < self.seq_k {
                let page = *self.pages.add((key >> self.shift) as usize);
                *row = ((page << self.shift) + (key & offset_mask)) as i32;
            }
        }
        rows
    }

    #[inline(always)]
    unsafe fn issue<const D: usize, const BLOCK_N: usize>(
        &self,
        rows: Self::Lookup,
        _first_key: u32,
        (k_tile, v_tile): (SharedAddr, SharedAddr),
        full: SharedAddr,
    ) {
        let box_rows = self.box_rows::<BLOCK_N>();
        // A box is at least 16 rows of whole 128-byte column blocks: every box starts on a
        // swizzle atom, so its 8-row pattern lines up.
        let box_bytes = swizzled::tile_bytes(1, D) * box_rows;
        // Every box tested, none broken out of: the loop unrolls and the rows stay in registers.
        for (j, &row) in rows.iter().enumerate() {
            if (j as u32) < BLOCK_N as u32 / box_rows {
                let at = [0, row, 0, self.head];
                let offset = j as u32 * box_bytes;
                arch::tma_load_4d(k_tile + offset, self.k_map, full, at);
                arch::tma_load_4d(v_tile + offset, self.v_map, full, at);
            }
        }
    }

    #[inline(always)]
    fn stale_from(&self) -> Option<u32> {
        Some(self.seq_k)
    }

    /// A box per page shorter than the tile, else one per tile.
    #[inline(always)]
    fn group_shift<const BLOCK_N: usize>(&self) -> u32 {
        self.shift.min(BLOCK_N.trailing_zeros())
    }
}

/// One KV head's keys in the paged cache, counted from `first_key` (the key slice's start).
#[derive(Clone, Copy)]
pub struct PagedRows {
    k: *const u16,
    v: *const u16,
    /// This sequence's block-table row.
    pages: *const u32,
    /// `log2(block_size)`.
    shift: u32,
    /// Elements from one key to the next inside a page: `H_kv * D`.
    key_stride: u32,
    first_key: u32,
    seq_k: u32,
}

impl KvSource<Padded> for PagedRows {
    /// As `tile::load_async` for K and V at once, with each row's address through the table:
    /// thread `t` copies chunk `t % (D / 8)` of rows `t / (D / 8) + i * step`; keys at or past
    /// `seq_k` are zero-filled and look nothing up (their table entries may be anything). The
    /// page numbers are all loaded before the first copy: a copy is a memory clobber to the
    /// compiler, so a lookup after it would wait out its own latency once per row.
    ///
    /// # Safety
    /// As `KvSource::load_tile`; `PageTable::rows`' contract for the cache and the table.
    #[inline(always)]
    unsafe fn load_tile<const D: usize, const ROWS: usize>(&self, copy: TileCopy) {
        let TileCopy {
            slot,
            first_row,
            thread,
            threads,
        } = copy;
        let (k_dst, v_dst) = (slot, slot + tile::tile_bytes(ROWS, D));
        let chunks_per_row = D as u32 / 8;
        if !threads.is_multiple_of(chunks_per_row) {
            arch::trap(); // every compiled variant has a multiple of 16 threads
        }
        let stride = tile::row_stride_bytes(D);
        let step = threads / chunks_per_row;
        let (row0, chunk) = (thread / chunks_per_row, thread % chunks_per_row);
        let first = self.first_key + first_row + row0;
        let passes = (ROWS as u32).div_ceil(step);
        let in_tile = |pass: u32| row0 + pass * step < ROWS as u32;
        let in_sequence = |pass: u32| in_tile(pass) && first + pass * step < self.seq_k;
        // `threads` is a compile-time constant at every call site: both loops unroll and the
        // array lives in registers.
        let mut pages = [0u32; ROWS];
        for pass in 0..passes {
            if in_sequence(pass) {
                pages[pass as usize] = *self.pages.add(((first + pass * step) >> self.shift) as usize);
            }
        }
        let mask = (1u32 << self.shift) - 1;
        for pass in 0..passes {
            if !in_tile(pass) {
                continue;
            }
            let dst = (row0 + pass * step) * stride + chunk * 16;
            if in_sequence(pass) {
                let key = first + pass * step;
                let slot = ((pages[pass as usize] as usize) << self.shift) + (key & mask) as usize;
                let offset = slot * self.key_stride as usize + 8 * chunk as usize;
                arch::cp_async_16(k_dst + dst, self.k.add(offset) as *const u8, 16);
                arch::cp_async_16(v_dst + dst, self.v.add(offset) as *const u8, 16);
            } else {
                arch::cp_async_16(k_dst + dst, self.k as *const u8, 0);
                arch::cp_async_16(v_dst + dst, self.v as *const u8, 0);
            }
        }
    }
}

/// `flash_decode`'s K/V source, contiguous or paged by a const parameter, so that one body serves
/// both entry points and each keeps only its own copies (the other field is never read, and
/// the optimiser drops it).
#[derive(Clone, Copy)]
pub struct DecodeKv<const PAGED: bool> {
    contiguous: (tile::Rows, tile::Rows),
    paged: PagedRows,
}

impl<const PAGED: bool> DecodeKv<PAGED> {
    /// K and V as tensors of rows (the contiguous entry points).
    #[inline(always)]
    pub fn contiguous(k: tile::Rows, v: tile::Rows) -> Self {
        let none = PagedRows {
            k: core::ptr::null(),
            v: core::ptr::null(),
            pages: core::ptr::null(),
            shift: 0,
            key_stride: 0,
            first_key: 0,
            seq_k: 0,
        };
        DecodeKv {
            contiguous: (k, v),
            paged: none,
        }
    }

    /// K and V in a paged cache (the paged entry points).
    #[inline(always)]
    pub fn paged(paged: PagedRows) -> Self {
        let none = tile::Rows {
            base: core::ptr::null(),
            stride: 0,
            count: 0,
        };
        DecodeKv {
            contiguous: (none, none),
            paged,
        }
    }
}

impl<const PAGED: bool> KvSource<Padded> for DecodeKv<PAGED> {
    /// # Safety
    /// As `KvSource::load_tile`, for the source `PAGED` names.
    #[inline(always)]
    unsafe fn load_tile<const D: usize, const ROWS: usize>(&self, copy: TileCopy) {
        // Safety: the caller's contract.
        unsafe {
            if PAGED {
                self.paged.load_tile::<D, ROWS>(copy)
            } else {
                KvSource::<Padded>::load_tile::<D, ROWS>(&self.contiguous, copy)
            }
        }
    }
}
