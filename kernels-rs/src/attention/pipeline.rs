//! The staged K/V pipeline of the tiled kernels: `STAGES` slots of one K and one V tile each,
//! filled by `cp.async` `STAGES - 1` tiles ahead of the one being computed on.
//!
//! Tile `t` lives in slot `t % STAGES` and is exactly one commit group, empty past the last tile,
//! so "the oldest pending group is the tile about to be used" holds at every wait and a single
//! `cp.async.wait_group STAGES - 1` finds it landed. The pipeline only orders each thread's own
//! copies: the kernel still needs its `KvLoaded` barrier before reading tiles other threads copied,
//! and its `BeforeSmemReuse` barrier before a slot is refilled.

use core::cell::Cell;
use core::marker::PhantomData;

use crate::arch::{self, SharedAddr};
use crate::policy::{sync, BarrierPolicy, SyncPoint};
use crate::tile::{swizzled, Rows, Swizzled128, TileLayout};

/// What a KV loop asks of the tiles it walks, however they arrive: `acquire` a tile (its K and
/// V visible to the calling thread), read it, `release` it. Every thread of the block calls each
/// method for every tile, in order.
pub trait TileStream {
    /// How the K and V tiles sit in shared memory.
    type Layout: TileLayout;

    /// Waits until tile `t`'s K and V are visible to this thread; returns its slot.
    ///
    /// # Safety
    /// `t` counts up from 0 below the stream's tiles; tile `t - 1` was released.
    unsafe fn acquire(&self, t: u32) -> u32;

    /// This thread (and its warp) is done reading tile `t`.
    ///
    /// # Safety
    /// After `acquire(t)`, by every thread of the block.
    unsafe fn release(&self, t: u32);

    /// Makes the V rows `rows` (first, count) of tile `t`, in slot `stage`, that lie past the
    /// keys' end read as zeros, for a stream whose copies may bring something else there; the
    /// calling warp's own rows only, between `acquire` and `release`. Nothing by default: the
    /// copies zero-fill past the end.
    ///
    /// # Safety
    /// Between `acquire(t)` and `release(t)`; no other warp reads these rows of the slot.
    #[inline(always)]
    unsafe fn clear_stale(&self, _t: u32, _stage: u32, _rows: (u32, u32)) {}

    /// The rows from `row` on of the tile at `tile` (`tile_rows` rows in `Self::Layout`) as a
    /// tile of their own: (its start, its rows, `row`'s place in it). A tile the copy engine
    /// fills a page at a time is a run of such tiles, one per page (`TileBoxes::group_shift`);
    /// every other tile is one. The rows asked for (a warp's keys) lie inside one of them.
    #[inline(always)]
    fn rows_from(&self, tile: SharedAddr, tile_rows: u32, row: u32) -> (SharedAddr, u32, u32) {
        (tile, tile_rows, row)
    }

    /// Where slot `stage`'s K tile starts.
    fn k_tile(&self, stage: u32) -> SharedAddr;

    /// Where slot `stage`'s V tile starts.
    fn v_tile(&self, stage: u32) -> SharedAddr;
}

/// A `KvPipeline` whose hand-overs are policy `P`'s: its `KvLoaded` point after each wait for
/// this thread's copies, its `BeforeSmemReuse` point after the reads (block barriers under the
/// light and legacy policies, counted when `COUNT`).
pub struct Synced<P: BarrierPolicy, const COUNT: bool, Pipe>(pub Pipe, pub PhantomData<P>);

impl<P, const COUNT: bool, L, const D: usize, const BLOCK_N: usize, const STAGES: usize, S> TileStream
    for Synced<P, COUNT, KvPipeline<L, D, BLOCK_N, STAGES, S>>
where
    P: BarrierPolicy,
    L: TileLayout,
    S: KvSource<L>,
{
    type Layout = L;

    /// # Safety
    /// As `KvPipeline::advance`, whose refill this is (the previous tile's `release` was the
    /// barrier it needs).
    #[inline(always)]
    unsafe fn acquire(&self, t: u32) -> u32 {
        // Safety: the caller's contract.
        let stage = unsafe { self.0.advance(t) };
        sync::<P, COUNT>(SyncPoint::KvLoaded);
        stage
    }

    #[inline(always)]
    unsafe fn release(&self, _t: u32) {
        sync::<P, COUNT>(SyncPoint::BeforeSmemReuse);
    }

    #[inline(always)]
    fn k_tile(&self, stage: u32) -> SharedAddr {
        self.0.k_tile(stage)
    }

    #[inline(always)]
    fn v_tile(&self, stage: u32) -> SharedAddr {
        self.0.v_tile(stage)
    }
}

/// What a `TmaRing`'s producer copies for one tile: the copy engine's boxes of K and V, from a
/// contiguous tensor (`MapBoxes`) or a paged cache (`paged::PagedBoxes`).
pub trait TileBoxes: Copy {
    /// What the producer reads before it may issue a tile (a paged cache's page numbers): read
    /// a tile ahead of its issue (`TmaRing::acquire`), so that the reads' latency passes under
    /// a tile's work instead of holding the issue back.
    type Lookup: Copy + Default;

    /// Brings the maps into the copy engine's descriptor cache.
    ///
    /// # Safety
    /// The maps are encoded tensor maps in global memory (`arch::prefetch_tensormap`).
    unsafe fn prefetch(&self);

    /// What tile `BLOCK_N` keys from `first_key` on needs looked up.
    ///
    /// # Safety
    /// As the implementation says of its own tables.
    unsafe fn lookup<const BLOCK_N: usize>(&self, first_key: u32) -> Self::Lookup;

    /// Issues the boxes of keys `first_key .. + BLOCK_N`: K's into the first of `k_v_tiles`, V's
    /// into the second (each `BLOCK_N` rows in groups of `group_shift`'s rows, every group in
    /// the 128-byte swizzle layout), all counted on `full`, `2 * swizzled::tile_bytes(BLOCK_N,
    /// D)` bytes in all.
    ///
    /// # Safety
    /// The tiles are free (nobody reads or writes them until `full` completes); `lookup` is the
    /// tile's; the maps describe memory that stays allocated until the copies land.
    unsafe fn issue<const D: usize, const BLOCK_N: usize>(
        &self,
        lookup: Self::Lookup,
        first_key: u32,
        k_v_tiles: (SharedAddr, SharedAddr),
        full: SharedAddr,
    );

    /// The key from which on a tile's rows may hold what is not the sequence's (the rest of a
    /// paged cache's last page): `TileStream::clear_stale` zeroes them before anyone reads their V.
    /// `None` where the copies zero-fill past the end.
    fn stale_from(&self) -> Option<u32> {
        None
    }

    /// `log2` of the rows of each box group: the tile is that many rows with all their column
    /// blocks, then the next as many (one box copies a group's every column), each group in the
    /// 128-byte swizzle layout of a tile of its own rows. `BLOCK_N`'s (one group) by default.
    #[inline(always)]
    fn group_shift<const BLOCK_N: usize>(&self) -> u32 {
        BLOCK_N.trailing_zeros()
    }
}

/// A contiguous K and V through their tensor maps (`src/tma.rs`: 4-d, boxes of 64 columns by
/// `BLOCK_N` rows, zero fill past `S_k`).
#[derive(Clone, Copy)]
pub struct MapBoxes {
    pub k_map: *const u8,
    pub v_map: *const u8,
    /// The maps' head and batch coordinates of the KV head read.
    pub head: i32,
    pub batch: i32,
}

impl TileBoxes for MapBoxes {
    type Lookup = ();

    #[inline(always)]
    unsafe fn prefetch(&self) {
        arch::prefetch_tensormap(self.k_map);
        arch::prefetch_tensormap(self.v_map);
    }

    #[inline(always)]
    unsafe fn lookup<const BLOCK_N: usize>(&self, _first_key: u32) {}

    #[inline(always)]
    unsafe fn issue<const D: usize, const BLOCK_N: usize>(
        &self,
        _lookup: (),
        first_key: u32,
        (k_tile, v_tile): (SharedAddr, SharedAddr),
        full: SharedAddr,
    ) {
        for block in 0..D as u32 / 64 {
            let at = [64 * block as i32, first_key as i32, self.head, self.batch];
            let offset = block * swizzled::column_block_bytes(BLOCK_N as u32);
            arch::tma_load_4d(k_tile + offset, self.k_map, full, at);
            arch::tma_load_4d(v_tile + offset, self.v_map, full, at);
        }
    }
}

/// K and V tiles brought by the copy engine (TMA, sm_90): a ring of `STAGES` slots, each a
/// `BLOCK_N`-key K tile and V tile in the 128-byte swizzle layout, with two mbarriers per slot:
/// *full* (the copies' bytes landed) and *empty* (every warp has read the slot). One thread,
/// the producer, issues every copy (`B`'s boxes): the first `STAGES` tiles at `start`, then tile
/// `t - 1 + STAGES` when it acquires tile `t`, into the slot every warp has released by then.
/// No block barrier: a warp waits for exactly the tile it reads next.
pub struct TmaRing<const D: usize, const BLOCK_N: usize, const STAGES: usize, B: TileBoxes> {
    /// Slot 0's K tile (1024-byte aligned); the barriers follow the last slot.
    base: SharedAddr,
    boxes: B,
    /// The producer's lookup of the next tile it issues, made when it issued the one before.
    next_lookup: Cell<B::Lookup>,
    /// The key of tile 0's first row, and the tiles walked.
    first_key: u32,
    tiles: u32,
    /// This thread issues the copies.
    producer: bool,
}

impl<const D: usize, const BLOCK_N: usize, const STAGES: usize, B: TileBoxes> TmaRing<D, BLOCK_N, STAGES, B> {
    /// Bytes of one K or V tile.
    const TILE_BYTES: u32 = swizzled::tile_bytes(BLOCK_N, D);

    /// Shared memory of the ring from its (1024-byte aligned) base: the slots, then the barriers.
    pub const fn smem_bytes() -> u32 {
        STAGES as u32 * (2 * Self::TILE_BYTES + 16)
    }

    /// A ring at `base` over `tiles` tiles of `boxes`, tile 0 at key `first_key`; `producer` is
    /// one thread of the block.
    #[inline(always)]
    pub fn new(base: SharedAddr, boxes: B, first_key: u32, tiles: u32, producer: bool) -> Self {
        const { assert!(STAGES >= 1 && D.is_multiple_of(64) && BLOCK_N <= 256) };
        TmaRing {
            base,
            boxes,
            next_lookup: Cell::new(B::Lookup::default()),
            first_key,
            tiles,
            producer,
        }
    }

    /// Slot `stage`'s full (`kind` 0) or empty (1) barrier.
    #[inline(always)]
    fn barrier(&self, kind: u32, stage: u32) -> SharedAddr {
        self.base + STAGES as u32 * 2 * Self::TILE_BYTES + 8 * (kind * STAGES as u32 + stage)
    }

    /// The first key of tile `t`.
    #[inline(always)]
    fn tile_key(&self, t: u32) -> u32 {
        self.first_key + t * BLOCK_N as u32
    }

    /// The producer sets up the barriers (`warps` arrivals empty a slot) and issues the first
    /// tiles. A block barrier must follow before any other thread acquires a tile.
    ///
    /// # Safety
    /// The ring's shared memory is this block's, unused by anyone else; the boxes' maps describe
    /// K and V of the launch, which stay allocated until the copies land.
    #[inline(always)]
    pub unsafe fn start(&self, warps: u32) {
        if !self.producer {
            return;
        }
        self.boxes.prefetch();
        for stage in 0..STAGES as u32 {
            arch::mbarrier_init(self.barrier(0, stage), 1);
            arch::mbarrier_init(self.barrier(1, stage), warps);
        }
        arch::fence_mbarrier_init();
        // Primes the lookahead: each issue below takes the lookup made one tile before.
        self.look_up(0);
        for t in 0..(STAGES as u32).min(self.tiles) {
            let lookup = self.look_up(t + 1);
            // Safety: fresh slots; the caller's contract.
            unsafe { self.issue(t, lookup) };
        }
    }

    /// Starts the lookup of tile `t` (if the ring has it) and returns the one made before, of
    /// tile `t - 1`: the reads are issued a tile before their values are needed.
    #[inline(always)]
    fn look_up(&self, t: u32) -> B::Lookup {
        let ahead = if t < self.tiles {
            // Safety: `t` is one of the ring's tiles (`new`'s contract on `boxes`).
            unsafe { self.boxes.lookup::<BLOCK_N>(self.tile_key(t)) }
        } else {
            B::Lookup::default()
        };
        self.next_lookup.replace(ahead)
    }

    /// Copies tile `t`'s K and V into its slot, counted on the slot's full barrier.
    ///
    /// # Safety
    /// The slot is free (empty barrier passed for the tile before it in the slot); `lookup` is
    /// tile `t`'s; the maps' contract (`start`).
    #[inline(always)]
    unsafe fn issue(&self, t: u32, lookup: B::Lookup) {
        let stage = t % STAGES as u32;
        let full = self.barrier(0, stage);
        arch::mbarrier_arrive_expect_tx(full, 2 * Self::TILE_BYTES);
        let tiles = (self.k_tile(stage), self.v_tile(stage));
        self.boxes
            .issue::<D, BLOCK_N>(lookup, self.tile_key(t), tiles, full);
    }
}

impl<const D: usize, const BLOCK_N: usize, const STAGES: usize, B: TileBoxes> TileStream
    for TmaRing<D, BLOCK_N, STAGES, B>
{
    type Layout = Swizzled128;

    /// # Safety
    /// As `TileStream::acquire`, after `start` and the block barrier that follows it.
    #[inline(always)]
    unsafe fn acquire(&self, t: u32) -> u32 {
        let next = t + STAGES as u32 - 1;
        if self.producer && t > 0 && next < self.tiles {
            let lookup = self.look_up(next + 1);
            // Tile t - 1's slot, once every warp has released it.
            let previous = t - 1;
            let parity = (previous / STAGES as u32) & 1;
            // Safety: the barriers exist (`start`); the slot is free once the phase completes.
            unsafe {
                arch::mbarrier_wait(self.barrier(1, previous % STAGES as u32), parity);
                self.issue(next, lookup);
            }
        }
        // The producer's lanes part from their warp's above; the tile's reads are warp-wide.
        arch::sync_warp();
        let stage = t % STAGES as u32;
        // Safety: the barriers exist; the tile was issued (t < tiles, issued in order).
        unsafe { arch::mbarrier_wait(self.barrier(0, stage), (t / STAGES as u32) & 1) };
        stage
    }

    /// Zeroes the V rows of tile `t` among the calling warp's `rows` that lie at or past the
    /// boxes' `stale_from` key (a page's leftovers: their scores are masked, but 0 x NaN is NaN
    /// in P V). Only the sequence's last tile has any; the writes are made visible to the copy
    /// engine before the warp releases the slot, which the producer then refills.
    #[inline(always)]
    unsafe fn clear_stale(&self, t: u32, stage: u32, (first_row, row_count): (u32, u32)) {
        let Some(end) = self.boxes.stale_from() else {
            return;
        };
        let tile_key = self.tile_key(t);
        if tile_key + first_row + row_count <= end {
            return;
        }
        let first = first_row.max(end.saturating_sub(tile_key));
        let chunks_per_row = D as u32 / 8;
        for i in (arch::lane_id()..(first_row + row_count - first) * chunks_per_row).step_by(32) {
            let (row, chunk) = (first + i / chunks_per_row, i % chunks_per_row);
            let (group, group_rows, row) = self.rows_from(self.v_tile(stage), BLOCK_N as u32, row);
            arch::st_shared_v4_u32(group + swizzled::chunk_offset(row, chunk, group_rows), [0; 4]);
        }
        arch::fence_proxy_async_shared();
        arch::sync_warp();
    }

    /// The box group holding `row` (`TileBoxes::group_shift`): one per page of a paged cache
    /// with pages shorter than the tile, the whole tile otherwise.
    #[inline(always)]
    fn rows_from(&self, tile: SharedAddr, _tile_rows: u32, row: u32) -> (SharedAddr, u32, u32) {
        let shift = self.boxes.group_shift::<BLOCK_N>();
        let group = row >> shift;
        let group_bytes = swizzled::tile_bytes(1, D) << shift;
        (tile + group * group_bytes, 1 << shift, row - (group << shift))
    }

    #[inline(always)]
    unsafe fn release(&self, t: u32) {
        // Every lane's reads of the slot are done before its warp's one arrival.
        arch::sync_warp();
        if arch::lane_id() == 0 {
            // Safety: the barriers exist; one arrival per warp and tile, as counted at `start`.
            unsafe { arch::mbarrier_arrive(self.barrier(1, t % STAGES as u32)) };
        }
    }

    #[inline(always)]
    fn k_tile(&self, stage: u32) -> SharedAddr {
        self.base + stage * 2 * Self::TILE_BYTES
    }

    #[inline(always)]
    fn v_tile(&self, stage: u32) -> SharedAddr {
        self.k_tile(stage) + Self::TILE_BYTES
    }
}

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
