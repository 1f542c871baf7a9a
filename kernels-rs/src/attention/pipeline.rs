//! The staged K/V pipeline of the tiled kernels: `STAGES` slots of one K and one V tile each,
//! filled by `cp.async` `STAGES - 1` tiles ahead of the one being computed on.
//!
//! Tile `t` lives in slot `t % STAGES` and is exactly one commit group, empty past the last tile,
//! so "the oldest pending group is the tile about to be used" holds at every wait and a single
//! `cp.async.wait_group STAGES - 1` finds it landed. The pipeline only orders each thread's own
//! copies: the kernel still needs its `KvLoaded` barrier before reading tiles other threads copied,
//! and its `BeforeSmemReuse` barrier before a slot is refilled.

use core::marker::PhantomData;

use crate::arch::{self, SharedAddr};
use crate::tile::{Rows, TileLayout};

/// One tile's copies: rows `first_row ..` of a source into the slot at `slot` (K's tile, then
/// V's right after it), spread over `threads` threads of which this is `thread`. One value, so
/// that every source's `load_tile` takes the same single argument.
#[derive(Clone, Copy)]
pub struct TileCopy {
    /// The slot's first byte in shared memory.
    pub slot: SharedAddr,
    /// The source row that lands in the tiles' row 0.
    pub first_row: u32,
    /// This thread's index among the copying threads.
    pub thread: u32,
    /// How many threads share the copies.
    pub threads: u32,
}

/// Where a pipeline's K and V rows come from: a pair of `Rows` (contiguous tensors), or a paged
/// cache (`paged::PagedRows`, padded tiles only).
pub trait KvSource<L: TileLayout>: Copy {
    /// Issues the `cp.async` copies of K and V rows `copy.first_row .. + ROWS` into the slot
    /// (both `ROWS`-row tiles of layout `L`); rows past the source's end are zero-filled.
    ///
    /// # Safety
    /// The source must be readable for its rows, and the slot in this block's shared memory,
    /// not read by anyone until the copies have landed.
    unsafe fn load_tile<const D: usize, const ROWS: usize>(&self, copy: TileCopy);
}

/// K and V as two tensors of rows: the layout's own copies, K's tile then V's.
impl<L: TileLayout> KvSource<L> for (Rows, Rows) {
    /// # Safety
    /// As `KvSource::load_tile`.
    #[inline(always)]
    unsafe fn load_tile<const D: usize, const ROWS: usize>(&self, copy: TileCopy) {
        let rows = ROWS as u32;
        let v_slot = copy.slot + L::tile_bytes::<D>(rows);
        // Safety: the caller's contract.
        unsafe {
            L::load_async::<D>(copy.slot, self.0, copy.first_row, rows, copy.thread, copy.threads);
            L::load_async::<D>(v_slot, self.1, copy.first_row, rows, copy.thread, copy.threads);
        }
    }
}

/// The K/V tiles of one head, `BLOCK_N` keys each, staged through `STAGES` slots laid out as
/// `[K tile, V tile]` per slot in layout `L`, copied from `S`.
pub struct KvPipeline<
    L: TileLayout,
    const D: usize,
    const BLOCK_N: usize,
    const STAGES: usize,
    S: KvSource<L> = (Rows, Rows),
> {
    base: SharedAddr,
    source: S,
    tiles: u32,
    thread: u32,
    threads: u32,
    layout: PhantomData<L>,
}

impl<L: TileLayout, const D: usize, const BLOCK_N: usize, const STAGES: usize>
    KvPipeline<L, D, BLOCK_N, STAGES>
{
    /// A pipeline over `tiles` tiles of `k_rows` and `v_rows`, its slots from `base` on, its copies
    /// spread over `threads` threads of which this is `thread`.
    #[inline(always)]
    pub fn new(base: SharedAddr, k_rows: Rows, v_rows: Rows, tiles: u32, thread: u32, threads: u32) -> Self {
        Self::from_source(base, (k_rows, v_rows), tiles, thread, threads)
    }
}

impl<L: TileLayout, const D: usize, const BLOCK_N: usize, const STAGES: usize, S: KvSource<L>>
    KvPipeline<L, D, BLOCK_N, STAGES, S>
{
    /// A pipeline over `tiles` tiles of `source`, otherwise as `new`.
    #[inline(always)]
    pub fn from_source(base: SharedAddr, source: S, tiles: u32, thread: u32, threads: u32) -> Self {
        const { assert!(STAGES >= 1) };
        KvPipeline {
            base,
            source,
            tiles,
            thread,
            threads,
            layout: PhantomData,
        }
    }

    /// The number of KV tiles the block walks.
    #[inline(always)]
    pub fn tiles(&self) -> u32 {
        self.tiles
    }

    /// Where slot `stage`'s K tile starts.
    #[inline]
    pub fn k_tile(&self, stage: u32) -> SharedAddr {
        self.base + stage * (2 * L::tile_bytes::<D>(BLOCK_N as u32))
    }

    /// Where slot `stage`'s V tile starts.
    #[inline]
    pub fn v_tile(&self, stage: u32) -> SharedAddr {
        self.k_tile(stage) + L::tile_bytes::<D>(BLOCK_N as u32)
    }

    /// Fills the pipeline: issues tiles `0 .. STAGES - 1`.
    ///
    /// # Safety
    /// The rows must be readable for their `count` rows and the slots must lie in this block's
    /// shared memory, not yet read by anyone.
    #[inline(always)]
    pub unsafe fn start(&self) {
        for t in 0..STAGES as u32 - 1 {
            // Safety: the caller's contract; no slot is being read before the first tile.
            unsafe { self.issue(t) };
        }
    }

    /// Issues tile `t + STAGES - 1` into the slot tile `t - 1` used, then waits until this thread's
    /// copies of tile `t` have landed. Returns tile `t`'s slot.
    ///
    /// # Safety
    /// As `start`, and every thread of the block must be past reading tile `t - 1` (the kernel's
    /// `BeforeSmemReuse` barrier at the end of the previous tile).
    #[inline(always)]
    pub unsafe fn advance(&self, t: u32) -> u32 {
        // Safety: the caller's contract: the slot being refilled is no longer read.
        unsafe { self.issue(t + STAGES as u32 - 1) };
        arch::cp_async_wait_stage::<STAGES>();
        t % STAGES as u32
    }

    /// Waits for the groups still in flight (empty ones: the loop has issued nothing past the
    /// last tile), so that no copy outlives the kernel.
    #[inline(always)]
    pub fn finish(&self) {
        arch::cp_async_wait::<0>();
    }

    /// # Safety
    /// As `advance`.
    #[inline]
    unsafe fn issue(&self, t: u32) {
        if t < self.tiles {
            let stage = t % STAGES as u32;
            let first_key = t * BLOCK_N as u32;
            // Safety: the caller's contract (readable rows, an idle slot of `BLOCK_N` rows).
            unsafe {
                self.source.load_tile::<D, BLOCK_N>(TileCopy {
                    slot: self.k_tile(stage),
                    first_row: first_key,
                    thread: self.thread,
                    threads: self.threads,
                })
            }
        }
        // Committing even an empty group keeps "group t is tile t" true for the waits.
        arch::cp_async_commit();
    }
}
