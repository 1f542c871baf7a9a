//! `flash_ws`: warp-specialised FlashAttention for Hopper (sm_90a), in the manner of
//! FlashAttention-3.
//!
//! The block is one *producer* warpgroup and `CONSUMERS` *consumer* warpgroups (64 query rows
//! each, `BLOCK_M = 64 * CONSUMERS`: two, or three where rows are 128 bytes (16-bit head dim 64,
//! e4m3 head dim 128), where the softmax outweighs the products and a third warpgroup hides more
//! of it; four at 16-bit head dim 64, with 64-key tiles, so that a problem's blocks make one full
//! round on the SMs). They never meet at a block barrier
//! inside the KV loop:
//!
//! - The producer (one thread of warpgroup 0, its registers cut by `setmaxnreg`) copies Q once
//!   and then K and V tile by tile with the tensor memory accelerator, into a ring of `STAGES`
//!   slots. Each slot has four mbarriers: K full, V full
//!   (the copy's bytes landed), K empty, V empty (every consumer warp is done reading).
//! - The consumers (registers raised: `split_registers`) wait for "full", multiply with `wgmma`
//!   straight from the 128-byte-swizzled tiles the copy engine wrote, and arrive on "empty" as
//!   soon as their products have read a tile, so the producer refills it while they compute.
//!   K and V have barriers of their own, so S = Q K^T starts before V has landed.
//! - `PINGPONG`: the consumer warpgroups take turns at the tensor cores (named barriers in a
//!   ring), so one warpgroup's softmax runs under another's products.
//! - `OVERLAP`: inside a warpgroup, the next tile's S = Q K^T and this tile's O += P V are issued
//!   together and left running; the softmax of the new S runs while O += P V is still in the
//!   tensor cores (two chains in flight, `wgmma.wait_group 1`).
//!
//! Tails need no care: the copy engine fills rows past the end of a sequence with zeros, and
//! masking sends their scores to -inf.

use super::fragment::{self, Fragment, FragmentSoftmax};
use super::shape::{Accumulator, Tiles, WarpgroupShape};
use super::varlen::{Bounds, Varlen};
use super::{fp8, FP8_K_BOX_ROWS, FP8_MAP_V_ROWS, FP8_Q_BOX_ROWS, MAP_BYTES, MAP_K, MAP_O, MAP_Q, MAP_V};
use super::{item_marks, longest_first_block, record_barriers, start_counting, Buffers, Problem};
use crate::arch::{self, SharedAddr, SmemDescriptor};
use crate::launch::item_walk::{table, ItemWalk};
use crate::launch::{record, tail_split};
use crate::schedule::{exponentials_before_wait, speculative_exponentials};
use crate::softmax::{KeptFactor, RowState};
use crate::tile::swizzled::{self, ATOM_BYTES, ROW_BYTES};
use crate::tile::{Element, Operand};

/// Gives the producer warpgroup, which only issues copies, few registers and each of `consumers`
/// consumer warpgroups many, out of the 64K register file: 24 and 240 with two consumers
/// (128 x 24 + 256 x 240), 32 and 160 with three (128 x 32 + 384 x 160), FlashAttention-3's
/// splits. `warpgroup` 0 is the producer. A `busy` producer (one that walks the persistent item
/// loop, whose state did not fit in 24 registers: ptxas spilled 32 bytes of it at head dim 128,
/// or whose warps transpose V) gets 40, its two consumers 232 (128 x 40 + 256 x 232, the same
/// 64,512), which their KV loop fits in.
/// With four consumers, 640 threads start at 96 registers (65,536 / 640, rounded down to 8) and
/// `setmaxnreg.inc` takes only what the producer gave back to the block, not the rest of the
/// file: 24 and 112 (128 x 72 = 512 x 18, rounded down; 120 waited forever); a persistent
/// producer keeps 32 (its item loop at head dim 64 fits), which still leaves the consumers 112.
#[inline(always)]
fn split_registers(warpgroup: u32, consumers: usize, busy: bool) {
    match (warpgroup, consumers, busy) {
        (0, 2 | 4, false) => arch::setmaxnreg_dec::<24>(),
        (0, 2, true) => arch::setmaxnreg_dec::<40>(),
        (0, _, _) => arch::setmaxnreg_dec::<32>(),
        (_, 2, false) => arch::setmaxnreg_inc::<240>(),
        (_, 2, true) => arch::setmaxnreg_inc::<232>(),
        (_, 3, _) => arch::setmaxnreg_inc::<160>(),
        _ => arch::setmaxnreg_inc::<112>(),
    }
}

/// The last of a warpgroup's set-up, in its role's branch: its registers (`split_registers`), then
/// the wait for the launch before this one (programmatic dependent launch, `arch::grid`). The
/// block's set-up before it (its barriers, its one block barrier) and the split touch only shared
/// memory and registers, so they run while that launch may still be finishing; global memory
/// waits for it (docs/kernels/flash_ws.md, programmatic dependent launch).
#[inline(always)]
fn set_up_roles(warpgroup: u32, consumers: usize, busy: bool) {
    split_registers(warpgroup, consumers, busy);
    arch::wait_for_prerequisite_grids();
}

/// Named barrier of consumer warpgroup `c`'s epilogue (after the ping-pong turns' ids).
#[inline(always)]
fn epilogue_barrier(consumer: u32) -> u32 {
    const FIRST: u32 = arch::barrier_id::WARP_SPECIALISED_FIRST + MAX_CONSUMERS;
    const _: () = assert!(FIRST + MAX_CONSUMERS - 1 <= arch::barrier_id::WARP_SPECIALISED_LAST);
    FIRST + consumer
}

/// Slots a split item's merge reads at once (`Consumer::merge_slices`): as many as the
/// consumer's registers hold beside the merged result, at `D / 2 + 4` floats each.
const fn merge_batch_slots(d: usize) -> usize {
    match d {
        0..=64 => MAX_MERGE_BATCH,
        65..=128 => 2,
        _ => 1,
    }
}

/// The most slots `merge_batch_slots` gives.
const MAX_MERGE_BATCH: usize = 3;

/// Consumer warpgroups a block may have (named barrier ids are set aside for this many).
const MAX_CONSUMERS: u32 = 4;

/// The dynamic shared memory one block may have on sm_90.
const BLOCK_SMEM_LIMIT: u32 = 227 * 1024;

/// What sets a block's shared memory: head dim `d`, `block_m` query rows, a ring of `stages`
/// slots of `block_n` keys, `input_bytes` per element of Q, K and V, whether the block is
/// `persistent` (then it may get an output tile of its own: `output_buffer`), and whether it
/// `transposes_v` (`Operand::TRANSPOSES_V`: then V's tiles land in rows of their own first).
#[derive(Clone, Copy)]
pub struct SmemShape {
    pub d: usize,
    pub block_m: usize,
    pub block_n: usize,
    pub stages: usize,
    pub input_bytes: usize,
    pub persistent: bool,
    pub transposes_v: bool,
}

impl SmemShape {
    /// The bytes the kernel needs: slack to align the tiles to 1024 bytes, the Q tile (sized for
    /// 16-bit elements whatever the input: the output leaves through it), `stages` K and V tiles,
    /// V's row tiles (`row_tiles`), and the mbarriers (Q full, Q empty, then K full, V full, K
    /// empty, V empty per stage, then full and empty per row tile); then, where `output_buffer`,
    /// an output tile of its own.
    pub const fn bytes(self) -> u32 {
        let ring = self.ring_bytes(self.q_buffers());
        if self.output_buffer() {
            ring + self.output_tile_bytes()
        } else {
            ring
        }
    }

    /// Whether a block gets an output tile of its own in shared memory: a persistent block,
    /// whose Q buffer holds the next item's Q by the time this item's O is done, where the tile
    /// fits beside the ring in the 227 KB a block may have (not at head dim 256). O then leaves
    /// through it by the copy engine while the next item's products run (`OutputPath::OwnTile`);
    /// without it, straight from registers. Measured (docs/kernels/flash_ws.md, the epilogue):
    /// 2-5% faster at head dim 128; at 64, since the dependent launch and two Q buffers, 1-6%
    /// faster with two consumers and level to 1% faster with three, where the first measurement
    /// (before those two) had found it slower.
    pub const fn output_buffer(self) -> bool {
        self.persistent && self.ring_bytes(1) + self.output_tile_bytes() <= BLOCK_SMEM_LIMIT
    }

    /// Q's buffers: two for a persistent block where both fit beside the ring (and the output
    /// tile, which comes first), else one. With two the producer copies the next item's Q, and
    /// the ring its first KV tiles, while this item still runs; with one it could do so only once
    /// every consumer had issued the item's last S = Q K^T, and the next item's consumers waited
    /// for those copies. Measured (ncu, docs/kernels/flash_ws.md, persistence): 1-3% fewer
    /// cycles at head dim 128, level at 64, where the wait only moved to the next item's first
    /// turn.
    pub const fn q_buffers(self) -> u32 {
        let output = if self.output_buffer() {
            self.output_tile_bytes()
        } else {
            0
        };
        if self.persistent && self.ring_bytes(2) + output <= BLOCK_SMEM_LIMIT {
            2
        } else {
            1
        }
    }

    /// `bytes` without an output tile, with `q_buffers` Q tiles.
    const fn ring_bytes(self, q_buffers: u32) -> u32 {
        self.slots_bytes(q_buffers) + self.row_tiles() * self.row_tile_bytes()
    }

    /// `ring_bytes` without V's row tiles.
    const fn slots_bytes(self, q_buffers: u32) -> u32 {
        ATOM_BYTES
            + q_buffers * swizzled::tile_bytes(self.block_m, self.d)
            + self.stages as u32 * slot_bytes(self.block_n, self.d, self.input_bytes)
            + 8 * (2 * q_buffers + 4 * self.stages as u32)
    }

    /// Tiles of V in its own rows, where the copy engine puts them for the producer's warps to
    /// transpose into the ring (`transposes_v`): one per slot of the ring where they fit (head dim
    /// 128), else one (256), which the next tile's copy waits for.
    pub const fn row_tiles(self) -> u32 {
        if !self.transposes_v {
            0
        } else if self.slots_bytes(1) + self.stages as u32 * self.row_tile_bytes() <= BLOCK_SMEM_LIMIT {
            self.stages as u32
        } else {
            1
        }
    }

    /// Bytes of a row tile of V (as K's) and of its two barriers.
    const fn row_tile_bytes(self) -> u32 {
        k_tile_bytes(self.block_n, self.d, self.input_bytes) + 16
    }

    /// The output tile's bytes after the ring: its alignment slack and the tile.
    const fn output_tile_bytes(self) -> u32 {
        ATOM_BYTES + swizzled::tile_bytes(self.block_m, self.d)
    }
}

/// Bytes of a K tile of `keys` rows of `d` elements of `input_bytes`.
const fn k_tile_bytes(keys: usize, d: usize, input_bytes: usize) -> u32 {
    (keys * d * input_bytes) as u32
}

/// Bytes of a V tile: as K's, or for 8-bit inputs (V transposed, `[D, keys]`) whole 128-key
/// boxes of D rows. A tile of 192 or 224 keys then holds a second box of 128 of which the products
/// read 64 or 96: the copy engine's boxes in the 128-byte swizzle are at most 128 bytes wide, and
/// one width for every tile keeps V's map and the `wgmma` descriptors the 128-key tile's.
const fn v_tile_bytes(keys: usize, d: usize, input_bytes: usize) -> u32 {
    if input_bytes == 1 {
        (keys.div_ceil(128) * 128 * d) as u32
    } else {
        k_tile_bytes(keys, d, input_bytes)
    }
}

/// Bytes of a ring slot: a K tile, then a V tile.
const fn slot_bytes(keys: usize, d: usize, input_bytes: usize) -> u32 {
    k_tile_bytes(keys, d, input_bytes) + v_tile_bytes(keys, d, input_bytes)
}

/// Where the tiles and the barriers live in shared memory, for tiles of shape `G` (its keys, head
/// dim and operand) in a ring of `STAGES` slots.
struct Plan<G: WarpgroupShape, const STAGES: usize> {
    /// Q's first buffer; the second (`SmemShape::q_buffers`) follows it.
    q: SharedAddr,
    q_tile: u32,
    q_buffers: u32,
    kv: SharedAddr,
    /// V's row tiles (`SmemShape::row_tiles`), after the ring's slots.
    v_rows: SharedAddr,
    row_tiles: u32,
    barriers: SharedAddr,
    /// Where O is staged on its way out: Q's buffer, or a tile of its own (`SmemShape::output_buffer`).
    o: SharedAddr,
    _shape: core::marker::PhantomData<G>,
}

impl<G: WarpgroupShape, const STAGES: usize> Plan<G, STAGES> {
    /// Bytes of a K tile, of a V tile (`v_tile_bytes`), and of a ring slot (K, then V).
    const K_TILE: u32 = k_tile_bytes(G::KEYS, G::D, G::Input::BYTES);
    const V_TILE: u32 = v_tile_bytes(G::KEYS, G::D, G::Input::BYTES);
    const SLOT: u32 = Self::K_TILE + Self::V_TILE;
    /// Bytes of a row of Q or K: `D * BYTES`, in column blocks of 128.
    const ROW_BYTES: u32 = (G::D * G::Input::BYTES) as u32;

    /// The plan of `smem`'s block of `block_m` query rows: its Q tiles (`SmemShape::q_buffers`),
    /// V's row tiles, and, where `SmemShape::output_buffer`, O's tile of its own, 1024-byte
    /// aligned after the barriers.
    #[inline(always)]
    fn new(block_m: u32, smem: SmemShape) -> Self {
        let (q_buffers, row_tiles) = (smem.q_buffers(), smem.row_tiles());
        let q = swizzled::atom_aligned(arch::dynamic_smem_base());
        let q_tile = swizzled::tile_bytes(block_m as usize, G::D);
        let kv = q + q_buffers * q_tile;
        let v_rows = kv + STAGES as u32 * Self::SLOT;
        let barriers = v_rows + row_tiles * Self::K_TILE;
        let o = if smem.output_buffer() {
            swizzled::atom_aligned(barriers + 8 * (2 * q_buffers + 4 * STAGES as u32 + 2 * row_tiles))
        } else {
            q
        };
        Plan {
            q,
            q_tile,
            q_buffers,
            kv,
            v_rows,
            row_tiles,
            barriers,
            o,
            _shape: core::marker::PhantomData,
        }
    }
    #[inline(always)]
    fn k(&self, stage: u32) -> SharedAddr {
        self.kv + stage * Self::SLOT
    }
    #[inline(always)]
    fn v(&self, stage: u32) -> SharedAddr {
        self.k(stage) + Self::K_TILE
    }
    /// Initialises the plan's barriers: the full ones wait for the producer's one arrival (and
    /// its bytes), the empty ones for every one of `consumer_warps` once it has read the tile (Q's
    /// empty ones: its last S = Q K^T of an item), Q's only in a `persistent` block. Where the
    /// producer's warps transpose V, a slot's V is full when each of them has written its part,
    /// and a row tile is empty when each has read it.
    ///
    /// # Safety
    /// Called by one thread, before any thread waits on or arrives at these barriers.
    #[inline(always)]
    unsafe fn init_barriers(&self, consumer_warps: u32, persistent: bool) {
        const TRANSPOSERS: u32 = fp8::TRANSPOSER_WARPS;
        for buffer in 0..self.q_buffers {
            arch::mbarrier_init(self.q_full(buffer), 1);
            if persistent {
                arch::mbarrier_init(self.q_empty(buffer), consumer_warps);
            }
        }
        let v_writers = if G::Input::TRANSPOSES_V { TRANSPOSERS } else { 1 };
        for stage in 0..STAGES as u32 {
            arch::mbarrier_init(self.barrier(K_FULL, stage), 1);
            arch::mbarrier_init(self.barrier(V_FULL, stage), v_writers);
            arch::mbarrier_init(self.barrier(K_EMPTY, stage), consumer_warps);
            arch::mbarrier_init(self.barrier(V_EMPTY, stage), consumer_warps);
        }
        for tile in 0..self.row_tiles {
            arch::mbarrier_init(self.v_rows_full(tile), 1);
            arch::mbarrier_init(self.v_rows_empty(tile), TRANSPOSERS);
        }
        arch::fence_mbarrier_init();
    }
    /// V's row tile of the ring's `t`-th tile and the parity of its round.
    #[inline(always)]
    fn v_rows_slot(&self, t: u32) -> (u32, u32) {
        (t % self.row_tiles, (t / self.row_tiles) & 1)
    }
    #[inline(always)]
    fn v_rows(&self, tile: u32) -> SharedAddr {
        self.v_rows + tile * Self::K_TILE
    }
    /// The copy engine's bytes of V's row tile `tile` have landed.
    #[inline(always)]
    fn v_rows_full(&self, tile: u32) -> SharedAddr {
        self.barriers + 8 * (2 * self.q_buffers + 4 * STAGES as u32 + tile)
    }
    /// Every transposing thread has read V's row tile `tile`.
    #[inline(always)]
    fn v_rows_empty(&self, tile: u32) -> SharedAddr {
        self.v_rows_full(self.row_tiles + tile)
    }
    /// Q's buffer `buffer`.
    #[inline(always)]
    fn q(&self, buffer: u32) -> SharedAddr {
        self.q + buffer * self.q_tile
    }
    /// The Q buffer of the block's `item`-th work item and the parity of its round: items take
    /// the buffers in turn.
    #[inline(always)]
    fn q_slot(&self, item: u32) -> (u32, u32) {
        if self.q_buffers == 2 {
            (item & 1, (item >> 1) & 1)
        } else {
            (0, item & 1)
        }
    }
    #[inline(always)]
    fn q_full(&self, buffer: u32) -> SharedAddr {
        self.barriers + 8 * buffer
    }
    /// Q's buffer is free: every consumer warp's last S = Q K^T of a work item has completed.
    #[inline(always)]
    fn q_empty(&self, buffer: u32) -> SharedAddr {
        self.barriers + 8 * (self.q_buffers + buffer)
    }
    /// Barrier `kind` (0 K full, 1 V full, 2 K empty, 3 V empty) of `stage`.
    #[inline(always)]
    fn barrier(&self, kind: u32, stage: u32) -> SharedAddr {
        self.barriers + 8 * (2 * self.q_buffers + kind * STAGES as u32 + stage)
    }
}

const K_FULL: u32 = 0;
const V_FULL: u32 = 1;
const K_EMPTY: u32 = 2;
const V_EMPTY: u32 = 3;

/// Tile `t`'s slot in the ring and the parity of its round (the phase its barriers complete).
#[inline(always)]
fn slot<const STAGES: usize>(t: u32) -> (u32, u32) {
    (t % STAGES as u32, (t / STAGES as u32) & 1)
}

/// Runs `$body` (an expression of `$i`, the item's index in the block, `$work`, the item, and
/// `$ring`, the KV tiles of the items before, that yields the item's own KV tiles) on each of the
/// block's items; evaluates to the total of the tiles. Without `PERSISTENT` a straight call, no
/// loop: a loop around the kernel's body costs the non-persistent kernels registers (ptxas
/// spilled), and a closure in place of the macro was not inlined (its body ended up a PTX call).
macro_rules! for_each_item {
    ($schedule:expr, |$i:ident, $work:ident, $ring:ident| $body:expr) => {{
        let schedule = $schedule;
        let mut $ring: u32 = 0;
        if schedule.persistent() {
            let mut $i: u32 = 0;
            while let Some($work) = schedule.item($i) {
                $ring += $body;
                $i += 1;
            }
        } else {
            // Safety: the kernel returned at its start when the block has no item.
            let $work = unsafe { schedule.item(0).unwrap_unchecked() };
            let $i: u32 = 0;
            $ring = $body;
        }
        $ring
    }};
}

/// One work item: `BLOCK_M` query rows of a head, with all of their KV tiles or, for a slice of
/// a split item (`launch::tail_split`), a range of them.
#[derive(Clone, Copy)]
struct Work {
    head: usize,
    first_row: u32,
    split: Split,
    /// A varlen item's sequence (the persistent kernel's, from the host's table); unused (and
    /// folded away) otherwise.
    sequence: Bounds,
}

/// Which slice of its item a work item is: `part` of `parts` (1: the whole item), the item being
/// the `tail`-th of the persistent grid's last round (its counters and workspace slots). Packed
/// in one word (`tail << 16 | part << 8 | parts`): it lives through the KV loop of the persistent
/// consumers, which have no register to spare (three words of it spilled at head dim 64).
#[derive(Clone, Copy)]
struct Split(u32);

impl Split {
    const WHOLE: Split = Split(1);

    /// Slice `part` of `parts` of the `tail`-th item (`parts <= tail_split::MAX_SLICES`, `tail`
    /// below a grid's size).
    #[inline(always)]
    fn new(tail: u32, part: u32, parts: u32) -> Self {
        Split(tail << 16 | part << 8 | parts)
    }

    #[inline(always)]
    fn tail(&self) -> u32 {
        self.0 >> 16
    }

    #[inline(always)]
    fn part(&self) -> u32 {
        (self.0 >> 8) & 0xff
    }

    #[inline(always)]
    fn parts(&self) -> u32 {
        self.0 & 0xff
    }

    #[inline(always)]
    fn is_split(&self) -> bool {
        self.parts() > 1
    }

    /// The slice's share of an item's `tiles` KV tiles: (first tile, tiles), the parts differing
    /// by at most one tile and part 0 among the largest: it then usually finishes last and
    /// merges, its own partial result first in the slices' order (`merge_slices`).
    #[inline(always)]
    fn range(&self, tiles: u32) -> (u32, u32) {
        if !self.is_split() {
            return (0, tiles);
        }
        // Counted from the last part, whose share `floor` makes the smallest.
        let from_end = self.parts() - 1 - self.part();
        let first = tiles - (from_end + 1) * tiles / self.parts();
        let end = tiles - from_end * tiles / self.parts();
        (first, end - first)
    }
}

/// The work items one block computes: (query head, first query row) pairs of `BLOCK_M` rows.
///
/// Without `PERSISTENT` the grid has one block per item (`attention`'s convention: row block x,
/// head y and z; a causal problem's in the order of `longest_first_block`). With it, one block per
/// SM walks items `block, block + grid, ...`, so that the producer copies the next item's Q and
/// first K/V tiles while the consumers still finish this one's products and epilogue. Its items
/// run head by head, so that the blocks working at once share their heads' K and V in L2 (causal
/// items ordered longest first across all heads made every block read another head's K and V: 13%
/// slower at (1,16,16384,128), docs/kernels/flash_ws.md, persistence); inside a causal head the
/// last row blocks, which see the most keys, go first. (Not `longest_first_block`'s groups:
/// striding through those, the blocks whose first items were a group's longest got the longest of
/// every group, 1.5x slower: docs/history/perf-notes.md, causal blocks longest first.) With
/// `kv_splits > 1` the items of the last round, `launch::tail_split`'s tail, are cut into that
/// many slices each, and the walk takes the slices after the whole items.
#[derive(Clone, Copy)]
struct Schedule<const PERSISTENT: bool, const VARLEN: bool> {
    block_m: u32,
    block_n: u32,
    row_blocks: u32,
    batch_heads: u32,
    causal: bool,
    /// With `PERSISTENT`: the slices of each item of the last round (1 without a split).
    slices: u32,
    /// With `PERSISTENT`: the walk over the items, as the host prepared it for this grid.
    walk: ItemWalk,
    /// With `PERSISTENT` and `VARLEN`: the packed tensors' query and key rows.
    total_q: u32,
    total_k: u32,
    /// Without `PERSISTENT`: the block's one head (`None` past the last) and its KV tiles.
    head: Option<usize>,
    tiles: u32,
    /// Without `PERSISTENT`, for a causal problem that is not varlen: the most heads in a group of
    /// `longest_first_block`, whose item the block takes (0: the grid's order). The item is worked
    /// out again where it is needed (a few integer divisions), as the grid's item is, rather than
    /// carried from the kernel's start (docs/history/perf-notes.md, causal blocks longest first).
    longest_first: u32,
}

impl<const PERSISTENT: bool, const VARLEN: bool> Schedule<PERSISTENT, VARLEN> {
    /// The schedule of a warpgroup, made after `setmaxnreg` (values made before it and carried
    /// into the loops cost the persistent consumers spills). `single_tiles`: without
    /// `PERSISTENT`, the block's one item's KV tiles, counted before the warpgroups part (counted
    /// after it, they cost the head-dim-256 consumers spills: ptxas is that close to the edge).
    #[inline(always)]
    /// `head`: without `PERSISTENT`, the block's one head (the in-sequence head of a varlen
    /// block).
    fn new<const D: usize>(
        problem: &Problem,
        block_m: u32,
        block_n: u32,
        single_tiles: u32,
        head: Option<usize>,
        longest_first: bool,
    ) -> Self {
        Schedule {
            block_m,
            block_n,
            row_blocks: problem.seq_q.div_ceil(block_m),
            // A varlen table's heads are in-sequence ones.
            batch_heads: if PERSISTENT && VARLEN {
                problem.heads
            } else {
                problem.batch_heads
            },
            causal: problem.causal,
            // The host's plan (`launch::tail_split::slices`) for this grid, or 1.
            slices: if PERSISTENT { problem.kv_splits.max(1) } else { 1 },
            walk: problem.walk,
            total_q: problem.seq_q,
            total_k: problem.seq_k,
            head: if PERSISTENT { None } else { head },
            tiles: single_tiles,
            longest_first: if longest_first {
                problem.causal_group::<D>()
            } else {
                0
            },
        }
    }

    /// The KV tiles of `work`: (first tile, tiles).
    #[inline(always)]
    fn tiles(&self, problem: &Problem, work: &Work) -> (u32, u32) {
        let tiles = if PERSISTENT {
            problem.kv_tiles(work.first_row, self.block_m, self.block_n)
        } else {
            self.tiles
        };
        work.split.range(tiles)
    }

    #[inline(always)]
    fn persistent(&self) -> bool {
        PERSISTENT
    }

    /// Which slice of its item the block's `i`-th item is (`Split::WHOLE` for all of them
    /// without a split).
    #[inline(always)]
    fn split_of(&self, i: u32) -> Split {
        if !PERSISTENT || self.slices == 1 {
            return Split::WHOLE;
        }
        self.item(i).map_or(Split::WHOLE, |work| work.split)
    }

    /// The block's `i`-th item in the host's table (`launch::item_walk::table`): (query head, row
    /// block), `None` past its last.
    ///
    /// # Safety
    /// `walk.table` is the address of the table the host built for this grid.
    #[inline(always)]
    unsafe fn listed_item(&self, i: u32) -> Option<(u32, u32)> {
        let [head, row_block] = arch::ld_global_v2_u32(self.listed_entry(i)?);
        Some((head, row_block))
    }

    /// The block's `i`-th item in the host's varlen table (`item_walk::table::varlen_entry`):
    /// (in-sequence query head, row block, its sequence), `None` past its last.
    ///
    /// # Safety
    /// `walk.table` is the address of the varlen table the host built for this grid.
    #[inline(always)]
    unsafe fn listed_varlen_item(&self, i: u32) -> Option<(u32, u32, Bounds)> {
        let entry = self.listed_entry(i)?;
        let [head, row_block, q_start, seq_q] = arch::ld_global_v4_u32(entry);
        let [k_start, seq_k, _, _] = arch::ld_global_v4_u32(entry.add(4));
        let sequence = Bounds {
            q_start,
            seq_q,
            k_start,
            seq_k,
        };
        Some((head, row_block, sequence))
    }

    /// The words of one entry of the host's table: a (query head, row block) pair, or a varlen
    /// item's `table::varlen_entry`.
    const ENTRY_WORDS: u32 = if VARLEN { table::VARLEN_ENTRY_WORDS } else { 2 };

    /// The address of the block's `i`-th entry in the host's table (`launch::item_walk::table`),
    /// `None` past its last.
    ///
    /// # Safety
    /// `walk.table` is the address of the table the host built for this grid.
    #[inline(always)]
    unsafe fn listed_entry(&self, i: u32) -> Option<*const u32> {
        let (table, block) = (self.walk.table as *const u32, arch::block_idx_x() as usize);
        let (first, end) = (*table.add(block), *table.add(block + 1));
        let at = first.checked_add(i).filter(|&at| at < end)?;
        let grid = arch::grid_dim_x();
        let start = if VARLEN {
            table::varlen_entries_start(grid)
        } else {
            table::pairs_start(grid)
        };
        Some(table.add((start + Self::ENTRY_WORDS * at) as usize))
    }

    /// Brings the host table's entry of the block's `i`-th item (if it has one) into the SM's
    /// L1 cache, so that its lookups (`item`) find it there instead of a round trip to L2 away.
    /// The producer, which runs tiles ahead of the consumers, asks for the next item's at the
    /// start of each one (docs/kernels/varlen-paged.md, the persistent walk's table).
    #[inline(always)]
    fn prefetch(&self, i: u32) {
        if !PERSISTENT || (!VARLEN && self.walk.table == 0) {
            return;
        }
        // Safety: a persistent walk with a table (the branch above) has the host's.
        if let Some(entry) = unsafe { self.listed_entry(i) } {
            // Its first and last word: an entry's 16-byte halves may lie in two lines.
            // Safety: both inside the block's entry of the table.
            unsafe {
                arch::prefetch_global_l1(entry);
                arch::prefetch_global_l1(entry.add(Self::ENTRY_WORDS as usize - 1));
            }
        }
    }

    /// The block's `i`-th item, `None` past its last.
    #[inline(always)]
    fn item(&self, i: u32) -> Option<Work> {
        let whole = |head: usize, row_block: u32| Work {
            head,
            first_row: row_block * self.block_m,
            split: Split::WHOLE,
            sequence: Bounds::default(),
        };
        if !PERSISTENT {
            let head = self.head.filter(|_| i == 0)?;
            if self.longest_first > 0 {
                let (head, row_block) = longest_first_block(self.batch_heads, self.longest_first)?;
                return Some(whole(head, row_block));
            }
            return Some(whole(head, arch::block_idx_x()));
        }
        if VARLEN {
            // Safety: the host's varlen table for this grid (`item_walk::table`), read only.
            let (head, row_block, sequence) = unsafe { self.listed_varlen_item(i)? };
            // Every item inside the packed tensors whatever the table says.
            let first_row = row_block.checked_mul(self.block_m)?;
            let inside = sequence.inside(self.total_q, self.total_k);
            if head >= self.batch_heads || first_row >= sequence.seq_q || !inside {
                return None;
            }
            return Some(Work {
                sequence,
                ..whole(head as usize, row_block)
            });
        }
        if self.walk.table != 0 {
            // Safety: the host's table for this grid (`item_walk::table`), read only.
            let (head, row_block) = unsafe { self.listed_item(i)? };
            // Two compares keep every item inside the problem whatever the table says.
            if head >= self.batch_heads || row_block >= self.row_blocks {
                return None;
            }
            return Some(whole(head as usize, row_block));
        }
        // The walk's divisions are multiplies by the host's reciprocals (`ItemWalk`).
        let (w, walk) = (arch::block_idx_x() + i * arch::grid_dim_x(), self.walk);
        if w >= walk.length {
            return None;
        }
        let (item, split) = if w < walk.whole_items {
            (w, Split::WHOLE)
        } else {
            // The last round's items, a slice per block.
            let (tail, part) = walk.slices.div_rem(w - walk.whole_items, self.slices);
            (walk.whole_items + tail, Split::new(tail, part, self.slices))
        };
        let (head, row_block) = walk.row_blocks.div_rem(item, self.row_blocks);
        // Two compares keep every item inside the problem whatever the walk says.
        if head >= self.batch_heads || row_block >= self.row_blocks {
            return None;
        }
        // Causal: a head's last row blocks, which see the most keys, first.
        let row_block = if self.causal {
            self.row_blocks - 1 - row_block
        } else {
            row_block
        };
        Some(Work {
            split,
            ..whole(head as usize, row_block)
        })
    }
}

/// The shapes `flash_ws` is built for, checked when an entry point is compiled (no code).
#[inline(always)]
fn accepted_shape<
    const D: usize,
    const BLOCK_N: usize,
    const CONSUMERS: usize,
    const STAGES: usize,
    const VARLEN: bool,
    G: WarpgroupShape,
>() {
    const {
        assert!(G::KEYS == BLOCK_N && G::D == D);
        assert!(D.is_multiple_of(64) && BLOCK_N.is_multiple_of(16) && STAGES >= 1);
        // Three consumers have 160 registers each, four 112 (`split_registers`): room beside O
        // for a tile's scores with 128-byte rows only (16-bit head dim 64, e4m3 128).
        assert!(CONSUMERS == 2 || ((CONSUMERS == 3 || CONSUMERS == 4) && D * G::Input::BYTES == 128));
        // 8-bit inputs: whole 128-byte rows of Q and K, key tiles of whole boxes of K's rows
        // (`FP8_K_BOX_ROWS`; `FP8_Q_BOX_ROWS` divides 64 * CONSUMERS), dense (the descales are
        // per head of a batch, not per packed sequence).
        let bytes = G::Input::BYTES;
        assert!(
            bytes == 2
                || ((D * bytes).is_multiple_of(128) && BLOCK_N.is_multiple_of(FP8_K_BOX_ROWS as usize))
        );
        assert!(bytes == 2 || !VARLEN);
    };
}

/// The kernel body (see the module's documentation).
///
/// # Safety
/// Launched with `128 * (CONSUMERS + 1)` threads, `SmemShape::bytes` of dynamic shared memory, the
/// grid of `attention`'s convention (with `PERSISTENT`: any number of blocks along x, one y and z
/// slice), an output buffer of the shape `problem` describes and `maps` pointing at the encoded
/// tensor maps of Q, K, V and the output (`src/tma.rs`) for this shape and tiles. With `VARLEN`:
/// the tensors packed as `attention::varlen` says, the maps of a batch of one of `total_q`
/// (`total_k`) rows from the packed rows' start, `cu_q`/`cu_k` checked by the host, and grid x
/// the row blocks of the longest sequence, or, with `PERSISTENT`, the walk's table the host's
/// `varlen_item_table` for this grid (no split). With `PERSISTENT` and `kv_splits > 1`: the
/// workspace and zeroed slice counters of `launch::tail_split` for this grid and `kv_splits`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn flash_ws<
    T: Element,
    const COUNT: bool,
    const D: usize,
    const BLOCK_N: usize,
    const CONSUMERS: usize,
    const STAGES: usize,
    const PINGPONG: bool,
    const OVERLAP: bool,
    const PERSISTENT: bool,
    // Packed sequences of their own lengths (`attention::varlen`): the varlen entry points.
    const VARLEN: bool,
    // A consumer warpgroup's registers for a tile (`shape::Warpgroup`), and what Q, K and V hold:
    // `T` itself, or `E4m3` (then V arrives transposed, `attention::fp8`).
    G: WarpgroupShape,
>(
    io: Buffers,
    problem: Problem,
) {
    accepted_shape::<D, BLOCK_N, CONSUMERS, STAGES, VARLEN, G>();
    let block_m = 64 * CONSUMERS as u32;
    let thread = arch::thread_idx_x();
    let smem = SmemShape {
        d: D,
        block_m: block_m as usize,
        block_n: BLOCK_N,
        stages: STAGES,
        input_bytes: G::Input::BYTES,
        persistent: PERSISTENT,
        transposes_v: G::Input::TRANSPOSES_V,
    };
    let output_buffer = smem.output_buffer();
    // A persistent grid has no block without work (the host launches at most one per item).
    let head = if PERSISTENT { None } else { problem.head() };
    if !PERSISTENT && head.is_none() {
        return; // past the last head (the grid's z slices round B*H up): before any barrier
    }
    // Varlen: the block's sequence as a batch of one, its head the in-sequence one (persistent: per item).
    let (io, problem, head) = if VARLEN && !PERSISTENT {
        // The sequence's bounds are in global memory, which the kernel before may still write.
        arch::wait_for_prerequisite_grids();
        // Safety: not persistent (the branch's condition), so the block has a head.
        let block_head = unsafe { head.unwrap_unchecked() };
        let heads = problem.heads as usize;
        let first_row = arch::block_idx_x() * block_m;
        match Varlen::sequence::<D>(io, &problem, block_head / heads, first_row, 1) {
            Some((io, sequence)) => (io, sequence, Some(block_head % heads)),
            None => return, // past the sequence's last row block: before any barrier
        }
    } else {
        (io, problem, head)
    };
    // Q, K and V are read through the tensor maps.
    let (barrier_log, maps) = (io.barrier_log, io.tensor_maps);
    let plan = Plan::<G, STAGES>::new(block_m, smem);

    if thread == 0 {
        plan.init_barriers(4 * CONSUMERS as u32, PERSISTENT);
    }
    // The one block barrier: the mbarriers exist before anyone waits on them.
    arch::sync_threads();
    // The instrumented twin's clock and record belong to the first consumer thread: the producer
    // finishes issuing long before the block is done, and a block barrier at the end to wait for
    // the consumers is what the warp-specialised kernel must not have (the producer thread's warp
    // has parted ways; such a barrier hung the counted twin on the H100).
    const RECORDER: u32 = 128;
    let loop_start = start_counting::<COUNT>(RECORDER);

    // Causal blocks run longest first (`launch::causal_order`); varlen ones in the grid's order,
    // their sequences' lengths being the host's to know.
    let longest_first = !PERSISTENT && !VARLEN && problem.causal;
    let single_tiles = single_tiles::<D, PERSISTENT>(&problem, block_m, BLOCK_N as u32, longest_first);
    let schedule = || {
        Schedule::<PERSISTENT, VARLEN>::new::<D>(
            &problem,
            block_m,
            BLOCK_N as u32,
            single_tiles,
            head,
            longest_first,
        )
    };
    // Lane 0's, so that ptxas knows it is warp-uniform: the consumers' descriptors, derived
    // from it, then stay in uniform registers (docs/kernels/flash_ws.md, the products).
    let warpgroup = arch::warp_uniform(arch::warp_id() / 4);
    let busy_producer = PERSISTENT || G::Input::TRANSPOSES_V;
    let mut tiles = 0;
    if warpgroup == 0 {
        set_up_roles(warpgroup, CONSUMERS, busy_producer);
        producer_warpgroup::<G, STAGES, PERSISTENT, VARLEN>(&plan, &problem, maps, &schedule());
    } else {
        set_up_roles(warpgroup, CONSUMERS, busy_producer);
        let (schedule, consumer) = (schedule(), warpgroup - 1);
        let staged_output = OutputPath::of::<PERSISTENT, VARLEN>(output_buffer, maps.add(MAP_O * MAP_BYTES));
        let mut items = 0u32;
        tiles = for_each_item!(&schedule, |i, work, ring| {
            items += 1;
            // The instrumented twin's timelines of the item and of its tiles (no code otherwise).
            // Safety: the instrumented twin's log has a record per block (the launch's contract).
            let (mark, mark_tile) = unsafe { item_marks::<COUNT>(barrier_log, i, consumer, RECORDER) };
            mark(record::START);
            // Safety: a varlen item's bounds were checked inside the packed tensors.
            let (sequence, out, staged_output) =
                unsafe { item_output::<PERSISTENT, VARLEN, D>(io, &problem, &work, consumer, staged_output) };
            // Safety: `work.head` is one of the problem's heads.
            let (item_problem, value_scale) = unsafe { descaled::<G::Input>(&sequence, work.head) };
            let item = Item::of(&schedule, &sequence, i, &work, ring, value_scale);
            let tiles = Consumer::<G, STAGES, PINGPONG>::new(
                &plan,
                &item_problem,
                consumer,
                CONSUMERS as u32,
                &item,
                PERSISTENT,
            )
            .run::<T, D>(
                &item_problem,
                out,
                &item,
                consumer,
                CONSUMERS as u32,
                OVERLAP,
                staged_output,
                // Worked out again after the KV loop rather than kept through it: the persistent
                // consumers at head dim 64 have no register to spare there (it spilled).
                || schedule.split_of(i),
                (mark, mark_tile),
            );
            mark(record::DONE);
            tiles
        });
        // A persistent block's last item's final hand-over of the turn (leave no barrier
        // half-arrived), here rather than in the item, which would have to look up whether another
        // follows (a table entry's round trip per item on a listed walk: docs/history/perf-notes.md,
        // the persistent item's lookups).
        if PERSISTENT && PINGPONG && consumer == 0 && items > 0 {
            Turns::<PINGPONG>::new(consumer, CONSUMERS as u32).wait();
        }
        // The copy engine's reads of the last item's O out of the block's own tile, which the
        // block's shared memory must outlive (after the item loop, as the final hand-over).
        if staged_output.own_tile() && thread.is_multiple_of(128) {
            arch::bulk_wait_group_read_all();
        }
    }
    if COUNT {
        record_barriers(barrier_log, tiles, loop_start, RECORDER);
    }
}

/// Without `PERSISTENT`, the KV tiles of the block's one item, counted before the warpgroups part
/// (see `Schedule::new`); 0 with it. `longest_first`: the block's item is `longest_first_block`'s.
#[inline(always)]
fn single_tiles<const D: usize, const PERSISTENT: bool>(
    problem: &Problem,
    block_m: u32,
    block_n: u32,
    longest_first: bool,
) -> u32 {
    if PERSISTENT {
        return 0;
    }
    let first_row = if longest_first {
        // (`None` only past the last head, where the block returned before.)
        longest_first_block(problem.batch_heads, problem.causal_group::<D>())
            .map_or(0, |(_, rb)| rb * block_m)
    } else {
        arch::block_idx_x() * block_m
    };
    problem.kv_tiles(first_row, block_m, block_n)
}

/// The problem of `work`: with `PERSISTENT` and `VARLEN`, its sequence's (`Varlen::problem`,
/// from the host's table); otherwise the launch's `problem` itself.
///
/// # Safety
/// A varlen item's bounds lie inside the packed tensors (`Schedule::item` checked them).
#[inline(always)]
unsafe fn item_problem<const PERSISTENT: bool, const VARLEN: bool>(
    problem: &Problem,
    work: &Work,
) -> Problem {
    if PERSISTENT && VARLEN {
        // Safety: the caller's contract.
        unsafe { Varlen::problem(problem, work.sequence) }
    } else {
        *problem
    }
}

/// `work`'s problem (`item_problem`) and output, and the path of consumer `consumer`'s 64 rows
/// out of `path`: with `PERSISTENT` and `VARLEN`, the sequence's output rows, by row stores where
/// the warpgroup's rows pass the sequence's end (`OutputPath::of_rows`); otherwise the launch's.
///
/// # Safety
/// As `item_problem`; `io` are the launch's buffers.
#[inline(always)]
unsafe fn item_output<const PERSISTENT: bool, const VARLEN: bool, const D: usize>(
    io: Buffers,
    problem: &Problem,
    work: &Work,
    consumer: u32,
    path: OutputPath,
) -> (Problem, *mut u16, OutputPath) {
    // Safety: the caller's contract.
    let sequence = unsafe { item_problem::<PERSISTENT, VARLEN>(problem, work) };
    if !(PERSISTENT && VARLEN) {
        return (sequence, io.out, path);
    }
    // Safety: the caller's contract.
    let out = unsafe { Varlen::buffers::<D>(io, problem, work.sequence).out };
    let path = path.of_rows(work.first_row + 64 * consumer, sequence.seq_q);
    (sequence, out, path)
}

/// The problem as the consumers of query head `head` see it, and the factor of its output. With
/// 8-bit inputs the scores and values are their e4m3 values times the head's descales: Q's and
/// K's fold into the softmax scale (the scores, the masking and the log-sum-exp are then the true
/// ones), V's into the output's normaliser.
///
/// # Safety
/// With 8-bit inputs, as `Problem::descales`.
#[inline(always)]
unsafe fn descaled<I: Operand>(problem: &Problem, head: usize) -> (Problem, f32) {
    if I::BYTES == 2 {
        return (*problem, 1.0);
    }
    // Safety: the caller's contract.
    let [q, k, v] = unsafe { problem.descales(head) };
    let scaled = Problem {
        scale_log2: problem.scale_log2 * q * k,
        ..*problem
    };
    (scaled, v)
}

/// The producer: one thread issues every copy of the block. The ring's slots and phases run on
/// across work items (`ring` counts the KV tiles issued so far).
#[inline(always)]
unsafe fn produce<G: WarpgroupShape, const STAGES: usize, const PERSISTENT: bool, const VARLEN: bool>(
    plan: &Plan<G, STAGES>,
    problem: &Problem,
    maps: *const u8,
    schedule: &Schedule<PERSISTENT, VARLEN>,
) {
    let map = |i: usize| maps.add(i * MAP_BYTES);
    let map_v = if G::Input::TRANSPOSES_V {
        FP8_MAP_V_ROWS
    } else {
        MAP_V
    };
    for i in [MAP_Q, MAP_K, map_v] {
        arch::prefetch_tensormap(map(i));
    }
    let block_m = schedule.block_m;
    let (k_bytes, v_bytes) = (Plan::<G, STAGES>::K_TILE, Plan::<G, STAGES>::V_TILE);
    // A box is 128 bytes of a row (the swizzle span) by a tile's rows (`128 / BYTES` elements),
    // but for 8-bit Q and K: by `FP8_Q_BOX_ROWS` and `FP8_K_BOX_ROWS` rows.
    let box_columns = 128 / G::Input::BYTES as i32;
    let (q_box_rows, k_box_rows) = if G::Input::BYTES == 1 {
        (FP8_Q_BOX_ROWS, FP8_K_BOX_ROWS)
    } else {
        (block_m, G::KEYS as u32)
    };
    for_each_item!(schedule, |i, work, ring| {
        schedule.prefetch(i + 1);
        let (head, first_row) = (work.head, work.first_row);
        // A persistent varlen item's sequence as a batch of one.
        // Safety: the table's bounds were checked inside the packed tensors (`Schedule::item`).
        let problem = &unsafe { item_problem::<PERSISTENT, VARLEN>(problem, &work) };
        // The maps are 4-d, innermost first: (head dim, sequence, head, batch), in either layout.
        let (batch, q_head) = if PERSISTENT {
            problem.walked_map_coordinates(head)
        } else {
            problem.map_coordinates(head)
        };
        let kv_head = q_head / problem.kv_group as i32;
        // A tile of Q or K is a box per 128 bytes of its rows (one column block each) and
        // `box_rows` of its rows (rows are 128-byte lines inside a column block).
        let row_bytes = Plan::<G, STAGES>::ROW_BYTES;
        let load =
            |dst: SharedAddr, rows: u32, box_rows: u32, m: usize, bar: SharedAddr, row: u32, head: i32| {
                for block in 0..row_bytes / 128 {
                    for part in 0..rows / box_rows {
                        let at = [
                            box_columns * block as i32,
                            (row + part * box_rows) as i32,
                            head,
                            batch,
                        ];
                        let to = dst + block * swizzled::column_block_bytes(rows) + part * box_rows * 128;
                        arch::tma_load_4d(to, map(m), bar, at);
                    }
                }
            };
        // Transposed V (`[D, keys]` per head): a box per 128 keys (or part of 128), D rows each.
        let load_transposed = |dst: SharedAddr, bar: SharedAddr, first_key: u32, head: i32| {
            for block in 0..G::KEYS.div_ceil(128) as u32 {
                let at = [first_key as i32 + box_columns * block as i32, 0, head, batch];
                arch::tma_load_4d(
                    dst + block * swizzled::column_block_bytes(G::D as u32),
                    map(MAP_V),
                    bar,
                    at,
                );
            }
        };
        let (q_buffer, q_parity) = plan.q_slot(i);
        if PERSISTENT {
            // Parity flipped, as for the ring's slots: the first items find Q's buffers free.
            arch::mbarrier_wait(plan.q_empty(q_buffer), q_parity ^ 1);
        }
        let q_full = plan.q_full(q_buffer);
        arch::mbarrier_arrive_expect_tx(q_full, block_m * row_bytes);
        // Varlen: the sequence's rows start at its first packed row (0 otherwise).
        let q_row = problem.varlen.q_start + first_row;
        load(
            plan.q(q_buffer),
            block_m,
            q_box_rows,
            MAP_Q,
            q_full,
            q_row,
            q_head,
        );
        let (first_tile, tiles) = work
            .split
            .range(problem.kv_tiles(first_row, block_m, G::KEYS as u32));
        for t in 0..tiles {
            let (stage, parity) = slot::<STAGES>(ring + t);
            let first_key = problem.varlen.k_start + (first_tile + t) * G::KEYS as u32;
            arch::mbarrier_wait(plan.barrier(K_EMPTY, stage), parity ^ 1);
            arch::mbarrier_arrive_expect_tx(plan.barrier(K_FULL, stage), k_bytes);
            let k_full = plan.barrier(K_FULL, stage);
            load(
                plan.k(stage),
                G::KEYS as u32,
                k_box_rows,
                MAP_K,
                k_full,
                first_key,
                kv_head,
            );
            if G::Input::TRANSPOSES_V {
                // V's rows into a row tile, for the producer's other warps to transpose.
                let (tile, tile_parity) = plan.v_rows_slot(ring + t);
                arch::mbarrier_wait(plan.v_rows_empty(tile), tile_parity ^ 1);
                let rows_full = plan.v_rows_full(tile);
                arch::mbarrier_arrive_expect_tx(rows_full, k_bytes);
                let keys = G::KEYS as u32;
                load(
                    plan.v_rows(tile),
                    keys,
                    k_box_rows,
                    map_v,
                    rows_full,
                    first_key,
                    kv_head,
                );
                continue;
            }
            arch::mbarrier_wait(plan.barrier(V_EMPTY, stage), parity ^ 1);
            arch::mbarrier_arrive_expect_tx(plan.barrier(V_FULL, stage), v_bytes);
            let v_full = plan.barrier(V_FULL, stage);
            if G::Input::V_TRANSPOSED {
                load_transposed(plan.v(stage), v_full, first_key, kv_head);
            } else {
                let keys = G::KEYS as u32;
                load(plan.v(stage), keys, keys, MAP_V, v_full, first_key, kv_head);
            }
        }
        tiles
    });
}

/// The producer warpgroup: its first thread issues the copies (`produce`); where V comes in its
/// own rows, its other three warps transpose V's tiles (`transpose_v_tiles`); the rest is idle.
///
/// # Safety
/// Run by the producer warpgroup's threads, with `flash_ws`'s plan, problem, maps and schedule
/// (its contract).
#[inline(always)]
unsafe fn producer_warpgroup<
    G: WarpgroupShape,
    const STAGES: usize,
    const PERSISTENT: bool,
    const VARLEN: bool,
>(
    plan: &Plan<G, STAGES>,
    problem: &Problem,
    maps: *const u8,
    schedule: &Schedule<PERSISTENT, VARLEN>,
) {
    let warp = arch::warp_uniform(arch::warp_id());
    if arch::thread_idx_x() == 0 {
        produce::<G, STAGES, PERSISTENT, VARLEN>(plan, problem, maps, schedule);
    } else if G::Input::TRANSPOSES_V && warp > 0 {
        transpose_v_tiles::<G, STAGES, PERSISTENT, VARLEN>(plan, problem, schedule, warp - 1);
    }
}

/// The producer warpgroup's other warps where V comes in its own rows (`Operand::TRANSPOSES_V`),
/// `part` of `fp8::TRANSPOSER_WARPS`: each KV tile the producer copies, once its rows have landed
/// and the consumers have read the slot's V before, turned around into the slot
/// (`fp8::transpose_tile`). Their writes are made visible to the products (the async proxy)
/// before they count on the slot's V full barrier.
#[inline(always)]
unsafe fn transpose_v_tiles<
    G: WarpgroupShape,
    const STAGES: usize,
    const PERSISTENT: bool,
    const VARLEN: bool,
>(
    plan: &Plan<G, STAGES>,
    problem: &Problem,
    schedule: &Schedule<PERSISTENT, VARLEN>,
    part: u32,
) {
    // Whole 128-key tiles of V, one item per block.
    const { assert!(!G::Input::TRANSPOSES_V || (G::KEYS as u32 == fp8::TRANSPOSED_KEYS && !PERSISTENT)) };
    let block_m = schedule.block_m;
    for_each_item!(schedule, |i, work, ring| {
        let _ = i;
        let (_, tiles) = work
            .split
            .range(problem.kv_tiles(work.first_row, block_m, G::KEYS as u32));
        for t in 0..tiles {
            let (stage, parity) = slot::<STAGES>(ring + t);
            let (tile, tile_parity) = plan.v_rows_slot(ring + t);
            arch::mbarrier_wait(plan.v_rows_full(tile), tile_parity);
            arch::mbarrier_wait(plan.barrier(V_EMPTY, stage), parity ^ 1);
            fp8::transpose_tile(plan.v_rows(tile), plan.v(stage), part, G::D as u32);
            // Each lane's writes to the async proxy, the warp's to its first lane, which counts
            // the warp once (96 arrivals on one barrier word cost more than the transpose).
            arch::fence_proxy_async_shared();
            arch::sync_warp();
            if arch::lane_id() == 0 {
                arch::mbarrier_arrive(plan.barrier(V_FULL, stage));
                arch::mbarrier_arrive(plan.v_rows_empty(tile));
            }
        }
        tiles
    });
}

/// How a consumer warpgroup's O leaves the block (`Consumer::run`).
#[derive(Clone, Copy)]
enum OutputPath {
    /// Straight from the accumulators, 4 bytes per store (a persistent block's Q buffer holds
    /// the next item's Q).
    Registers,
    /// Through Q's buffer and the copy engine's tensor store; the output's map, in boxes of 64
    /// rows.
    TensorStore(*const u8),
    /// As `TensorStore`, through the block's own output tile (`Plan::o`, a persistent block):
    /// the copy engine reads it while the next item runs.
    OwnTile(*const u8),
    /// Through Q's buffer, then 16-byte stores of the rows inside the sequence: a box of a
    /// packed varlen output could reach into the next sequence's rows.
    RowStores,
    /// As `RowStores`, through the block's own output tile: a persistent varlen item whose
    /// warpgroup's 64 rows reach past its sequence's end.
    OwnTileRows,
}

impl OutputPath {
    /// The path of a block's O: through shared memory where Q's buffer is free at the end (one
    /// item per block) or the block has an output tile of its own (persistent, `output_buffer`):
    /// by the copy engine (the output's map `map`), or, where the output map's boxes could spill
    /// into another sequence's rows (varlen), by 16-byte stores of the sequence's rows; otherwise
    /// (a persistent block without room for the tile) straight from registers.
    #[inline(always)]
    fn of<const PERSISTENT: bool, const VARLEN: bool>(output_buffer: bool, map: *const u8) -> Self {
        match (PERSISTENT, output_buffer, VARLEN) {
            (true, true, _) => OutputPath::OwnTile(map),
            (true, false, _) => OutputPath::Registers,
            (false, _, false) => OutputPath::TensorStore(map),
            (false, _, true) => OutputPath::RowStores,
        }
    }

    /// The path of a warpgroup's 64 rows from `first_row` of a sequence of `seq_q` rows: a
    /// tensor store's box past the end would reach into the next sequence's rows, so an own
    /// tile's rows then leave by row stores.
    #[inline(always)]
    fn of_rows(self, first_row: u32, seq_q: u32) -> Self {
        match self {
            OutputPath::OwnTile(_) if first_row + 64 > seq_q => OutputPath::OwnTileRows,
            path => path,
        }
    }

    /// Whether the rows are staged in the block's own output tile.
    #[inline(always)]
    fn own_tile(self) -> bool {
        matches!(self, OutputPath::OwnTile(_) | OutputPath::OwnTileRows)
    }
}

impl Item {
    /// The block's `i`-th item `work`, its tiles starting at `ring` in the ring, its output
    /// scaled by `value_scale`.
    #[inline(always)]
    fn of<const PERSISTENT: bool, const VARLEN: bool>(
        schedule: &Schedule<PERSISTENT, VARLEN>,
        problem: &Problem,
        i: u32,
        work: &Work,
        ring: u32,
        value_scale: f32,
    ) -> Self {
        let (first_tile, tiles) = schedule.tiles(problem, work);
        Item {
            index: i,
            head: work.head,
            first_row: work.first_row,
            ring,
            first_tile,
            tiles,
            value_scale,
        }
    }
}

/// One work item as a consumer warpgroup sees it.
struct Item {
    /// The item's place in the block's list (0, 1, ...): the parity of Q's barriers.
    index: u32,
    head: usize,
    first_row: u32,
    /// KV tiles of the block's items before this one: where its tiles start in the ring.
    ring: u32,
    /// The item's KV tiles `first_tile ..` (all of them unless it is a slice of a split item).
    first_tile: u32,
    tiles: u32,
    /// The factor of the item's output (V's descale; 1 for 16-bit inputs).
    value_scale: f32,
}

/// The `wgmma` descriptors of one consumer warpgroup's operands: its 64 rows of Q, and the K and
/// V tiles of ring slot 0, all in the 128-byte swizzle layout the copy engine wrote. The operand of
/// each product is one of them moved by a constant and a slot's stride: one add, where building
/// the descriptor per `wgmma` cost ten instructions (docs/kernels/flash_ws.md, the products).
struct Operands<G: WarpgroupShape, const STAGES: usize> {
    q: SmemDescriptor,
    k: SmemDescriptor,
    v: SmemDescriptor,
    /// Bytes of one 128-byte column block of Q (K-major: `block_m` rows of 128 bytes).
    q_column_block: u32,
    _shape: core::marker::PhantomData<G>,
}

impl<G: WarpgroupShape, const STAGES: usize> Operands<G, STAGES> {
    /// Bytes from one ring slot to the next (its K tile and its V tile).
    const SLOT_BYTES: u32 = Plan::<G, STAGES>::SLOT;

    #[inline(always)]
    fn new(plan: &Plan<G, STAGES>, q: SharedAddr, block_m: u32, group_row0: u32) -> Self {
        // V as it sits: transposed, K-major like K (column blocks of D rows); or its own rows,
        // read MN-major (column blocks of BLOCK_N rows).
        let v = if G::Input::V_TRANSPOSED {
            SmemDescriptor::sw128(plan.v(0), 16, ATOM_BYTES)
        } else {
            SmemDescriptor::sw128(
                plan.v(0),
                swizzled::column_block_bytes(G::KEYS as u32),
                ATOM_BYTES,
            )
        };
        Operands {
            q: SmemDescriptor::sw128(q + group_row0 * ROW_BYTES, 16, ATOM_BYTES),
            k: SmemDescriptor::sw128(plan.k(0), 16, ATOM_BYTES),
            v,
            q_column_block: swizzled::column_block_bytes(block_m),
            _shape: core::marker::PhantomData,
        }
    }

    /// Q's 32 bytes of each row `32 ks ..` (K-major: column block `ks / 4`, 32 bytes per step
    /// inside it).
    #[inline(always)]
    fn q(&self, ks: usize) -> u64 {
        let ks = ks as u32;
        self.q
            .offset((ks / 4) * self.q_column_block + (ks % 4) * 32)
            .get()
    }

    /// K's 32 bytes of each row `32 ks ..` of slot `stage`.
    #[inline(always)]
    fn k(&self, stage: u32, ks: usize) -> u64 {
        let ks = ks as u32;
        let column = (ks / 4) * swizzled::column_block_bytes(G::KEYS as u32) + (ks % 4) * 32;
        self.k.offset(stage * Self::SLOT_BYTES + column).get()
    }

    /// V's keys `K_STEP kk ..` of slot `stage`. Transposed V is K-major like K (column block
    /// `kk / 4` of D rows, 32 bytes per step inside it); V's own rows are read MN-major, 16 keys
    /// being two 8-row atoms.
    #[inline(always)]
    fn v(&self, stage: u32, kk: usize) -> u64 {
        let kk = kk as u32;
        let step = if G::Input::V_TRANSPOSED {
            (kk / 4) * swizzled::column_block_bytes(G::D as u32) + (kk % 4) * 32
        } else {
            kk * 2 * ATOM_BYTES
        };
        self.v.offset(stage * Self::SLOT_BYTES + step).get()
    }
}

/// Ping-pong between the consumer warpgroups: named barrier `WARP_SPECIALISED_FIRST + c` is
/// consumer c's turn at the tensor cores; a hand-over counts the waiting and the arriving
/// warpgroup, 256 threads. Without `PINGPONG` both calls are nothing.
struct Turns<const PINGPONG: bool> {
    mine: u32,
    next: u32,
}

impl<const PINGPONG: bool> Turns<PINGPONG> {
    #[inline(always)]
    fn new(consumer: u32, consumers: u32) -> Self {
        let turn = |c: u32| arch::barrier_id::WARP_SPECIALISED_FIRST + c;
        Turns {
            mine: turn(consumer),
            next: turn((consumer + 1) % consumers),
        }
    }
    #[inline(always)]
    fn wait(&self) {
        if PINGPONG {
            arch::named_barrier_sync(self.mine, 256);
        }
    }
    #[inline(always)]
    fn pass(&self) {
        if PINGPONG {
            arch::named_barrier_arrive(self.next, 256);
        }
    }
}

/// One consumer warpgroup's state through the KV loop, for tiles of shape `G`. The output's
/// element type and row length are the epilogue's alone (`run`).
struct Consumer<'a, G: WarpgroupShape, const STAGES: usize, const PINGPONG: bool> {
    plan: &'a Plan<G, STAGES>,
    operands: Operands<G, STAGES>,
    turns: Turns<PINGPONG>,
    softmax: FragmentSoftmax<1>,
    /// `key_end` of the group's last row, the largest: tiles from there on have no key for it.
    group_key_end: u32,
    lane: u32,
    /// KV tiles of the block's earlier work items: where this item's tiles start in the ring.
    ring: u32,
    /// Q's buffer takes another item's Q after this one (persistent): release it when done.
    reuses_q: bool,
    /// The item's Q buffer and the parity of its round (`Plan::q_slot`).
    q_buffer: u32,
    q_parity: u32,
    o_acc: G::Output,
    s_acc: G::Scores,
    p_frag: G::Packed,
}

impl<'a, G: WarpgroupShape, const STAGES: usize, const PINGPONG: bool> Consumer<'a, G, STAGES, PINGPONG> {
    /// Consumer warpgroup `consumer` of `consumers` at the start of `item`. With `reuses_q` (the
    /// persistent kernel) it releases Q's buffer once its last S = Q K^T of the item is done.
    #[inline(always)]
    fn new(
        plan: &'a Plan<G, STAGES>,
        problem: &Problem,
        consumer: u32,
        consumers: u32,
        item: &Item,
        reuses_q: bool,
    ) -> Self {
        let group_row0 = 64 * consumer;
        // A slice of a split item counts its keys from its first tile's (so that its loop's tile
        // numbers start at 0, as a whole item's).
        let first_key = item.first_tile * G::KEYS as u32;
        let warp_first_row = item.first_row + group_row0 + 16 * (arch::warp_id() % 4);
        let (q_buffer, q_parity) = plan.q_slot(item.index);
        Consumer {
            plan,
            operands: Operands::new(plan, plan.q(q_buffer), 64 * consumers, group_row0),
            q_buffer,
            q_parity,
            turns: Turns::new(consumer, consumers),
            softmax: FragmentSoftmax::new(problem, warp_first_row).keys_from(first_key),
            group_key_end: problem
                .key_end(item.first_row + group_row0 + 63)
                .saturating_sub(first_key),
            lane: arch::lane_id(),
            ring: item.ring,
            reuses_q,
            o_acc: G::Output::zero(),
            // S is never zeroed: the first product of a chain overwrites it (`accumulate` false),
            // and reusing one array keeps non-wgmma writes out of the chains that ptxas would have
            // to fence.
            s_acc: G::Scores::zero(),
            p_frag: G::Packed::zero(),
        }
    }

    /// The item's KV loop (`overlap`: the overlapped one) and epilogue, for consumer `consumer` of
    /// `consumers`; returns the item's KV tiles. Unless `staged_output` is `Registers`, O goes out
    /// through Q's buffer, which the block's item must be the last to use. `marks`: `mark(event)`
    /// at the points of the item's timeline and `mark_tile(tile, event)` at those of each KV tile
    /// in the overlapped loop (`launch::record`; the instrumented twin's, no code otherwise).
    ///
    /// # Safety
    /// `out` is the problem's output and `item.head` one of its heads; the plan's barriers exist;
    /// a `TensorStore`'s map is the encoded map of `out` in boxes of 64 rows; where
    /// `split_of_item` says the item is a slice of a split one, as `merge_slices`. `D` is the
    /// shape's head dim, `G::D`, as the const parameter that `finish` needs (stable Rust cannot
    /// pass an associated constant as one).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn run<T: Element, const D: usize>(
        mut self,
        problem: &Problem,
        out: *mut u16,
        item: &Item,
        consumer: u32,
        consumers: u32,
        overlap: bool,
        staged_output: OutputPath,
        split_of_item: impl Fn() -> Split,
        (mark, mark_tile): (impl Fn(u32), impl Fn(u32, u32)),
    ) -> u32 {
        const { assert!(D == G::D) };
        if PINGPONG && item.index == 0 && consumer + 1 == consumers {
            self.turns.pass(); // consumer 0 goes first
        }
        arch::mbarrier_wait(self.plan.q_full(self.q_buffer), self.q_parity);
        mark(record::READY);
        let tiles = item.tiles;
        if overlap {
            self.overlapped(tiles, mark_tile);
        } else {
            self.serial(tiles);
        }
        mark(record::LOOP_END);
        if PINGPONG && consumer == 0 && !self.reuses_q {
            // A grid block's one item is its last: the last warpgroup's final hand-over (leave no
            // barrier half-arrived). A persistent block takes it after its item loop.
            self.turns.wait();
        }
        let split = split_of_item();
        let writes_output = !split.is_split()
            // Safety: a split item's workspace slots and counters are the launch's (the
            // caller's contract).
            || unsafe { self.merge_slices::<D>(problem, split, consumer, consumers) };
        mark(record::MERGED);
        if !writes_output {
            // Another slice writes the item's output.
            return item.tiles;
        }
        match staged_output {
            OutputPath::Registers => {
                // V's descale, which `store_staged` folds into its normaliser (1 for 16-bit
                // inputs, where this is no code).
                if G::Input::BYTES == 1 {
                    for o in self.o_acc.registers_mut() {
                        *o *= item.value_scale;
                    }
                }
                // The head's rows worked out by every thread, before the per-row branches (a
                // division: see `store_staged`'s coordinates; this path is the persistent
                // kernel's).
                let rows = problem.q_rows::<D>(out, item.head);
                let row_start = |row: u32| rows.base.add(row as usize * rows.stride as usize) as *mut u16;
                let acc = core::array::from_ref(&self.o_acc);
                self.softmax.finish_at::<T, _>(acc, problem, item.head, row_start)
            }
            path => self.store_staged::<T, D>(problem, out, item, (consumer, consumers), path),
        }
        item.tiles
    }

    /// A slice of a split item (`launch::tail_split`). Thread 0 first counts the slice done on
    /// the item's counter, whose low half counts the slices done and whose high half
    /// (`PUBLISHED`) those whose partial result is in the workspace. Every slice writes this
    /// warpgroup's partial O and row states to its slot, except the last done when it is part 0,
    /// whose result comes first in the merge's order and enters from its registers. One that is
    /// not the last done then counts its slot published and returns false. The last done waits
    /// until every other slice has published, sets the counter back to 0 for the next launch,
    /// reads the slots (`merge_batch_slots` at a time) and merges them, in the slices' order,
    /// into its accumulators and row states, and returns true: it writes the item's output.
    /// (Where the last to finish published and counted first and then read one slot after
    /// another, its merge waited for about six round trips to memory, now about two: 1.5% at
    /// (2,8,2048,64); the rest measured as bytes, not round trips: docs/kernels/flash_ws.md, the
    /// split-KV merge.)
    ///
    /// The wait cannot hang: the slices it waits for counted done before it, so they are
    /// running, and they publish without waiting on anything. Each thread writes and reads only
    /// the accumulators it holds (a slot is laid out by register, then thread, so that a warp's
    /// accesses are whole lines), so the merge needs no shared memory; the slices' row maxima and
    /// sums of one row meet in the same thread.
    ///
    /// # Safety
    /// `problem.workspace` holds `launch::tail_split::workspace_floats` floats and
    /// `problem.split_counters` its `counters` for this grid and `split.parts`, the counters 0
    /// before the launch's first slice counted; every thread of the warpgroup calls it.
    #[inline(always)]
    unsafe fn merge_slices<const D: usize>(
        &mut self,
        problem: &Problem,
        split: Split,
        consumer: u32,
        consumers: u32,
    ) -> bool {
        const PUBLISHED: u32 = 1 << 16;
        const { assert!(tail_split::MAX_SLICES < PUBLISHED) };
        let thread = arch::thread_idx_x() % 128;
        let parts = split.parts();
        let regs = G::Output::REGS;
        // Slot `part` of this warpgroup, at this thread's first float.
        let slot = |part: u32| {
            let index = (split.tail() * parts + part) * consumers + consumer;
            problem
                .workspace
                .add(index as usize * tail_split::slot_floats(D as u32) as usize + thread as usize)
        };
        // (maximum, sum) of the thread's row `half`, after its accumulators.
        let state_at = |at: *mut f32, half: usize| {
            (
                at.add((regs + 2 * half) * 128),
                at.add((regs + 2 * half + 1) * 128),
            )
        };
        let counter = problem
            .split_counters
            .add((split.tail() * consumers + consumer) as usize);
        let barrier = epilogue_barrier(consumer);
        let mut seen = 0;
        if thread == 0 {
            // Acquire only: nothing of this slice is published yet, so there is nothing to release
            // (which would cost a `MEMBAR.GPU` before the atomic).
            seen = arch::atomic_add_acquire_u32(counter, 1);
        }
        let last = thread == 0 && seen % PUBLISHED + 1 == parts;
        // Part 0 comes first in the merge's order and has the most tiles, so it usually merges:
        // then its partial result enters from its registers and never goes through its slot (a
        // third of the merge's bytes at three slices). The other parts write theirs at once,
        // under the count's round trip (after the broadcast below, their counts came ~0.6k
        // cycles later: docs/kernels/flash_ws.md, the split-KV merge); part 0 only once it knows
        // it is not merging.
        let write_slot = || {
            let mine = slot(split.part());
            for (r, &o) in self.o_acc.registers().iter().enumerate() {
                *mine.add(r * 128) = o;
            }
            for (half, state) in self.softmax.states()[0].iter().enumerate() {
                let (max, sum) = state_at(mine, half);
                (*max, *sum) = (state.row_max, state.row_sum);
            }
        };
        let part_zero = split.part() == 0;
        if !part_zero {
            write_slot();
        }
        // The same in every thread; made provably warp-uniform, so that the epilogue after it
        // (its quad sums' shuffles) stays on the converged path.
        let last_done = arch::warp_uniform(arch::named_barrier_any(barrier, 128, last) as u32) != 0;
        let own_first = last_done && part_zero;
        if part_zero && !last_done {
            write_slot();
        }
        if !last_done {
            // Every thread's slot before thread 0's fence (the barrier), which releases them all
            // (a release is cumulative) before the count: one `MEMBAR.GPU` for the warpgroup, not
            // one per thread.
            arch::named_barrier_sync(barrier, 128);
            if thread == 0 {
                arch::fence_acq_rel_gpu();
                arch::atomic_add_u32(counter, PUBLISHED);
            }
            return false;
        }
        if thread == 0 {
            // Acquires the other slots, written before their counts; then nobody adds any more.
            while seen / PUBLISHED + 1 < parts {
                seen = arch::ld_acquire_u32(counter);
            }
            arch::st_global_u32(counter, 0);
        }
        // Thread 0's acquire before every thread's reads. Every slot, this one's too (the
        // thread's own writes), is merged from memory in the slices' order: the output is then
        // the same whichever slice finished last (`verify --repeat` wants it bit-identical).
        arch::named_barrier_sync(barrier, 128);
        // Slots in batches: each batch's reads all in flight before its merges.
        let batch = merge_batch_slots(D) as u32;
        let scale_log2 = problem.scale_log2;
        let mut merged = [RowState::EMPTY; 2];
        let mut first = 0;
        while first < parts {
            let (slot, counted) = (
                |b: u32| slot((first + b).min(parts - 1)),
                |b: u32| first + b < parts,
            );
            if first > 0 {
                self.merge_batch::<false, false>(&mut merged, batch, slot, counted, state_at, scale_log2);
            } else if own_first {
                self.merge_batch::<true, true>(&mut merged, batch, slot, counted, state_at, scale_log2);
            } else {
                self.merge_batch::<true, false>(&mut merged, batch, slot, counted, state_at, scale_log2);
            }
            first += batch;
        }
        self.softmax.states_mut()[0] = merged;
        true
    }

    /// One batch of `merge_slices`' merge (`FIRST`: the first one): `batch` slots, `slot(b)`
    /// being the `b`-th's at this thread's first float and `state_at(slot, half)` where its row
    /// `half`'s (maximum, sum) are, those that are not `counted(b)` weighing 0; with `OWN_FIRST`
    /// the first slot's result is the one in this consumer's registers, not read. Merges them, in
    /// order, into the accumulators and the row states `merged` of the slots before. Every read
    /// comes before the merges that use it, so that ptxas may have all of them in flight; the
    /// merged row maxima cover the whole batch, so that the accumulators are scaled once per
    /// batch.
    ///
    /// # Safety
    /// Every slot `slot` gives holds a slice's partial result, written before this thread's reads.
    #[inline(always)]
    unsafe fn merge_batch<const FIRST: bool, const OWN_FIRST: bool>(
        &mut self,
        merged: &mut [RowState; 2],
        batch: u32,
        slot: impl Fn(u32) -> *mut f32,
        counted: impl Fn(u32) -> bool,
        state_at: impl Fn(*mut f32, usize) -> (*mut f32, *mut f32),
        scale_log2: f32,
    ) {
        const { assert!(FIRST || !OWN_FIRST) };
        let own_states = self.softmax.states()[0];
        let mut scales = [0.0; 2];
        let mut weights = [[0.0; 2]; MAX_MERGE_BATCH];
        for (half, state) in merged.iter_mut().enumerate() {
            let part = |b: u32| {
                if OWN_FIRST && b == 0 {
                    return own_states[half];
                }
                let (max, sum) = state_at(slot(b), half);
                let max = if counted(b) { *max } else { f32::NEG_INFINITY };
                RowState {
                    row_max: max,
                    row_sum: *sum,
                }
            };
            let max = (0..batch).fold(state.row_max, |max, b| arch::max(max, part(b).row_max));
            scales[half] = state.weight(max, scale_log2);
            state.row_sum *= scales[half];
            for b in 0..batch {
                let part = part(b);
                weights[b as usize][half] = part.weight(max, scale_log2);
                state.row_sum = arch::fma(weights[b as usize][half], part.row_sum, state.row_sum);
            }
            state.row_max = max;
        }
        // Row `half`'s accumulators are registers 4j + 2 half and the one after. (Looped over as
        // here, LLVM unrolls the loops at head dim 256 too; one loop over all registers it left
        // rolled, and the consumer's arrays went to local memory.)
        let o = self.o_acc.registers_mut();
        for half in 0..2 {
            for j in 0..G::Output::REGS / 4 {
                for r in [4 * j + 2 * half, 4 * j + 2 * half + 1] {
                    // The first batch's accumulators start at 0 (the item's are in its slot,
                    // or with `OWN_FIRST` are slot 0's value): the same operations whichever
                    // slice merges, so the output is bit-identical.
                    let own = o[r];
                    o[r] = if FIRST { 0.0 } else { o[r] * scales[half] };
                    for b in 0..batch {
                        let value = if OWN_FIRST && b == 0 {
                            own
                        } else {
                            *slot(b).add(r * 128)
                        };
                        o[r] = arch::fma(weights[b as usize][half], value, o[r]);
                    }
                }
            }
        }
    }

    /// The epilogue through shared memory: the warpgroup writes its 64 normalised rows of O into
    /// its rows of Q's buffer (or of O's own tile, `Plan::o`), in the 128-byte swizzle layout the
    /// copy engine reads, and sends
    /// them out: one thread with a tensor store per 64 columns (`TensorStore`, rows past the
    /// sequence's end clipped by the copy engine), or every thread with 16-byte stores of the
    /// rows inside the sequence (`RowStores`), a warp writing two whole rows at a time. Where each
    /// thread stored 4 bytes per instruction straight to memory, the warps waited for those
    /// stores to drain before they could exit (docs/kernels/flash_ws.md, the epilogue). The LSE
    /// is written per row as before.
    ///
    /// # Safety
    /// As `run` with `staged_output` not `Registers`: every S = Q K^T of the block has completed
    /// or reads other rows of Q than this warpgroup's.
    #[inline(always)]
    unsafe fn store_staged<T: Element, const D: usize>(
        self,
        problem: &Problem,
        out: *mut u16,
        item: &Item,
        (consumer, consumers): (u32, u32),
        path: OutputPath,
    ) {
        let block_m = 64 * consumers;
        let group_row0 = 64 * consumer;
        let barrier = epilogue_barrier(consumer);
        // O's own tile (a persistent block) is left to the copy engine after each item: before
        // it is written again, the thread that stored the last item's rows waits until the copy
        // engine has read them.
        let own_tile = path.own_tile();
        if own_tile && arch::thread_idx_x().is_multiple_of(128) {
            arch::bulk_wait_group_read_all();
        }
        // Each warp's last product has completed; this waits for the warpgroup's other warps, whose
        // products read the rows that this warp's stores overwrite (in Q's buffer), or for the
        // issuing thread's wait (in O's own).
        arch::named_barrier_sync(barrier, 128);
        // `plan.o` is `plan.q` without an own tile; chosen by the path, which folds at compile
        // time, the grid kernels' SASS stays what it was (read through `plan.o` it did not).
        let staging = if own_tile {
            self.plan.o
        } else {
            self.plan.q(self.q_buffer)
        };
        let (q, o_acc, pair) = (staging, self.o_acc, self.lane % 4);
        let head = item.head;
        // Inlined by demand: at head dim 256, where each call is 32 unrolled stores, LLVM's own
        // measure left the varlen kernels' closure a function, its captures in local memory.
        self.softmax.finish_with(
            #[inline(always)]
            |_, half, row, state| {
                if pair == 0 && row < problem.seq_q {
                    // Safety: `head` and `row` are inside the problem (the caller's contract).
                    unsafe { problem.write_lse(head, row, state) };
                }
                let norm = state.normaliser() * item.value_scale;
                let tile_row = row - item.first_row;
                for j in 0..G::Output::REGS / 4 {
                    let o = o_acc.registers();
                    let (lo, hi) = (o[4 * j + 2 * half], o[4 * j + 2 * half + 1]);
                    let at = q + swizzled::chunk_offset(tile_row, j as u32, block_m) + 4 * pair;
                    // Safety: inside this warpgroup's rows of Q's buffer, which no product reads now.
                    unsafe { arch::st_shared_u32(at, T::pack(lo * norm, hi * norm)) };
                }
            },
        );
        if let OutputPath::RowStores | OutputPath::OwnTileRows = path {
            arch::named_barrier_sync(barrier, 128);
            let rows = problem.q_rows::<D>(out, head);
            let chunks_per_row = D as u32 / 8;
            for i in (arch::thread_idx_x() % 128..64 * chunks_per_row).step_by(128) {
                let (r, chunk) = (i / chunks_per_row, i % chunks_per_row);
                let row = item.first_row + group_row0 + r;
                if row < problem.seq_q {
                    let at = q + swizzled::chunk_offset(group_row0 + r, chunk, block_m);
                    let dst = rows
                        .base
                        .add(row as usize * rows.stride as usize + 8 * chunk as usize);
                    // Safety: a row of the sequence's output (the caller's contract), 16 bytes
                    // aligned (D and the strides are multiples of 8 elements).
                    arch::st_global_v4_u32(dst as *mut u32, arch::ld_shared_v4_u32(at));
                }
            }
            return;
        }
        arch::fence_proxy_async_shared();
        arch::named_barrier_sync(barrier, 128);
        // The tensor store's coordinates. With O's own tile (the persistent kernel, whose item
        // loop runs around this) every thread works them out, before the one thread's branch:
        // in it, the division's divide-by-zero check (a call to the panic handler) sat in a
        // per-thread branch inside the item loop, ptxas no longer proved that loop
        // warp-converged, and the KV loop's descriptor arithmetic left the uniform datapath
        // (docs/kernels/flash_ws.md, persistence). The grid kernels, with no loop around it, keep
        // their code.
        let early = if own_tile {
            problem.walked_map_coordinates(head)
        } else {
            (0, 0)
        };
        if let (OutputPath::TensorStore(map) | OutputPath::OwnTile(map), true) =
            (path, arch::thread_idx_x().is_multiple_of(128))
        {
            let (batch, q_head) = if own_tile {
                early
            } else {
                problem.map_coordinates(head)
            };
            // Varlen: the sequence's rows start at its first packed row (0 otherwise).
            let first_row = (problem.varlen.q_start + item.first_row + group_row0) as i32;
            for block in 0..G::D as u32 / 64 {
                let src = q + block * swizzled::column_block_bytes(block_m) + group_row0 * ROW_BYTES;
                arch::tma_store_4d(map, src, [64 * block as i32, first_row, q_head, batch]);
            }
            arch::bulk_commit_group();
            // The block's shared memory must outlive the copy engine's reads of it; O's own tile
            // is read while the next item runs, then waited for above (or after the block's last
            // item: `flash_ws`).
            if !own_tile {
                arch::bulk_wait_group_read_all();
            }
        }
    }

    /// Whether tile `t` has a key for some row of the group: a warpgroup-uniform test, as `wgmma`
    /// needs all four warps. A group's active tiles are a prefix of the loop.
    #[inline(always)]
    fn active(&self, t: u32) -> bool {
        t * (G::KEYS as u32) < self.group_key_end
    }

    /// The ring slot of this item's tile `t` and the parity of its round.
    #[inline(always)]
    fn slot(&self, t: u32) -> (u32, u32) {
        slot::<STAGES>(self.ring + t)
    }

    /// One arrival per warp on an "empty" barrier, once this warp's products have read the tile.
    #[inline(always)]
    fn release(&self, kind: u32, stage: u32) {
        self.arrive(self.plan.barrier(kind, stage));
    }

    /// One arrival per warp on Q's "empty" barrier, once its last S = Q K^T of the item is done:
    /// the producer then copies the next item's Q while this one's last P V and epilogue run.
    #[inline(always)]
    fn release_q(&self) {
        if self.reuses_q {
            self.arrive(self.plan.q_empty(self.q_buffer));
        }
    }

    #[inline(always)]
    fn arrive(&self, barrier: SharedAddr) {
        if self.lane == 0 {
            // Safety: the plan's mbarriers were initialised before the kernel's one block barrier.
            unsafe { arch::mbarrier_arrive(barrier) };
        }
    }

    /// Issues S = Q K^T on slot `stage`; with `LEAVE_RUNNING` the chain is committed, not waited
    /// for (`wgmma_wait` collects it).
    #[inline(always)]
    unsafe fn scores<const LEAVE_RUNNING: bool>(&mut self, stage: u32) {
        let (s_acc, ops) = (&mut self.s_acc, &self.operands);
        let steps = G::D * G::Input::BYTES / 32;
        for ks in 0..steps {
            chained!(
                ks,
                steps,
                LEAVE_RUNNING,
                G::scores(s_acc, ops.q(ks), ops.k(stage, ks), ks > 0)
            );
        }
    }

    /// Issues O += P V on slot `stage`, P from registers.
    #[inline(always)]
    unsafe fn attend<const LEAVE_RUNNING: bool>(&mut self, stage: u32) {
        let (o_acc, ops) = (&mut self.o_acc, &self.operands);
        for (kk, &a) in self.p_frag.tiles().iter().enumerate() {
            chained!(
                kk,
                G::PV_STEPS,
                LEAVE_RUNNING,
                G::attend(o_acc, a, ops.v(stage, kk), true)
            );
        }
    }

    /// The softmax of tile `t`'s scores, in place; returns the corrections of O.
    #[inline(always)]
    fn probabilities(&mut self, t: u32) -> [[f32; 2]; 1] {
        let scores = core::array::from_mut(&mut self.s_acc);
        self.softmax
            .probabilities(scores, t * G::KEYS as u32, Self::kept_factor())
    }

    /// How a kept row maximum's factor comes about (`RowState::rescale_lazily`): the branch
    /// around its `ex2` measured 4-5% faster for e4m3 at head dim 256 and within the noise at
    /// 128; the select for 16-bit inputs (docs/history/perf-notes.md: the lazy rescale, and FP8's
    /// kept factor per head dim).
    #[inline(always)]
    fn kept_factor() -> KeptFactor {
        if G::Input::BYTES == 1 && G::D == 256 {
            KeptFactor::Skipped
        } else {
            KeptFactor::Computed
        }
    }

    /// `probabilities` up to the exponentials of the first `head` registers of S
    /// (`FragmentSoftmax::probabilities_head`).
    #[inline(always)]
    fn probabilities_head(&mut self, t: u32, head: usize) -> [[f32; 2]; 1] {
        let scores = core::array::from_mut(&mut self.s_acc);
        self.softmax
            .probabilities_head(scores, t * G::KEYS as u32, head, Self::kept_factor())
    }

    /// `probabilities_head` with the head's exponentials taken from the kept row maxima, beside
    /// the search for the tile's own (`FragmentSoftmax::probabilities_speculatively`).
    #[inline(always)]
    fn probabilities_speculatively(&mut self, t: u32, head: usize) -> [[f32; 2]; 1] {
        let scores = core::array::from_mut(&mut self.s_acc);
        self.softmax
            .probabilities_speculatively(scores, t * G::KEYS as u32, head, Self::kept_factor())
    }

    /// Packs the probabilities into `wgmma` A fragments, one per `K_STEP` keys
    /// (`Operand::pack_probabilities`). Each packed register is pinned, so that all of P exists
    /// before the first product that reads it and the chain runs without a fence.
    #[inline(always)]
    fn pack(&mut self) {
        for (kk, frag) in self.p_frag.tiles_mut().iter_mut().enumerate() {
            *frag = G::pack(&self.s_acc, kk);
            for word in frag.iter_mut() {
                arch::fence_operand(word);
            }
        }
    }

    /// In the overlapped loop's tile t: waits for tile t's V (slot `stage`, `parity`) and for tile
    /// t - 1's P V, then releases tile t - 1's V (slot `prev_stage`).
    ///
    /// # Safety
    /// `stage` and `parity` are tile t's slot in the plan's ring.
    #[inline(always)]
    unsafe fn retire_previous(&mut self, stage: u32, parity: u32, prev_stage: u32) {
        arch::mbarrier_wait(self.plan.barrier(V_FULL, stage), parity);
        arch::wgmma_wait::<0>(self.o_acc.registers_mut());
        self.release(V_EMPTY, prev_stage);
    }

    /// The KV loop one product at a time: S, its softmax, then P V. With ping-pong the turns
    /// go round the exponentials, not the products: the warpgroups take the exponential unit in
    /// turn while the others' products run (docs/history/perf-notes.md, the serial loop's
    /// ping-pong turns round the exponentials).
    #[inline(always)]
    unsafe fn serial(&mut self, tiles: u32) {
        if tiles == 0 {
            self.release_q();
        }
        for t in 0..tiles {
            let (stage, parity) = self.slot(t);
            arch::mbarrier_wait(self.plan.barrier(K_FULL, stage), parity);
            if self.active(t) {
                self.scores::<false>(stage);
            }
            if t + 1 == tiles {
                self.release_q();
            }
            self.release(K_EMPTY, stage);
            let active = self.active(t);
            // The row maxima before the turn (a chain of shuffles): only the exponentials take it.
            // The turn's wait and hand-over stay outside the branches: inside them (one pair in
            // each arm) the loop measured 15-22% slower (docs/history/perf-notes.md, the serial
            // loop's ping-pong turns).
            let correction = if active {
                self.probabilities_head(t, 0)
            } else {
                [[1.0f32; 2]; 1]
            };
            self.turns.wait();
            if active {
                self.softmax
                    .probabilities_tail(core::array::from_mut(&mut self.s_acc), 0);
                fragment::rescale(core::array::from_mut(&mut self.o_acc), correction);
                self.pack();
            }
            self.turns.pass();
            arch::mbarrier_wait(self.plan.barrier(V_FULL, stage), parity);
            if self.active(t) {
                self.attend::<false>(stage);
            }
            self.release(V_EMPTY, stage);
        }
    }

    /// The KV loop with two chains in flight: tile t's S = Q K^T is issued with tile t - 1's
    /// O += P V, and the softmax of the new S runs while P V is still in the tensor cores.
    ///
    /// Tile t's V is waited for right after its softmax (at head dim 128, after its first
    /// exponentials: `schedule::exponentials_before_wait`) rather than before its product: the
    /// mbarrier wait is a loop, so it ends the basic block that holds those exponentials, and
    /// ptxas, which schedules within a basic block, can no longer hoist the `wait_group 0` that
    /// follows above them (it did: docs/kernels/flash_ws.md, overlap; `tests/sass_schedule.rs`
    /// checks).
    /// The exponentials after the wait share their block with the packing of P.
    /// Every warp of the warpgroup reaches that one `wait_group` at the same instruction, as
    /// `.aligned` requires (an earlier fix that put a wait in each arm of the rescale branch
    /// broke that: compute-sanitizer's synccheck).
    #[inline(always)]
    unsafe fn overlapped(&mut self, tiles: u32, mark_tile: impl Fn(u32, u32)) {
        if tiles == 0 {
            self.release_q();
            return;
        }
        // Tile 0's scores alone.
        let (first_stage, first_parity) = self.slot(0);
        arch::mbarrier_wait(self.plan.barrier(K_FULL, first_stage), first_parity);
        // The turn is held for the issue only, here and after the loop as inside it: one rule
        // for every turn (waiting inside it measured the same: docs/history/perf-notes.md, the
        // item's first S and last P V waited for after the turn).
        self.turns.wait();
        mark_tile(0, record::TILE_TURN);
        if self.active(0) {
            self.scores::<true>(first_stage);
        }
        self.turns.pass();
        mark_tile(0, record::TILE_ISSUED);
        arch::wgmma_wait::<0>(self.s_acc.registers_mut());
        mark_tile(0, record::TILE_SCORES);
        self.release(K_EMPTY, first_stage);
        if self.active(0) {
            // Nothing is accumulated yet, so the correction has nothing to scale.
            let _ = self.probabilities(0);
            // No P V to wait for: the whole softmax is the head, the tail only the packing.
            mark_tile(0, record::TILE_HEAD);
            mark_tile(0, record::TILE_RETIRED);
            self.pack();
        }
        mark_tile(0, record::TILE_PACKED);
        arch::mbarrier_wait(self.plan.barrier(V_FULL, first_stage), first_parity);
        // The correction of O that the last softmax asked for, applied just before that tile's
        // P V is issued (tile 0's: nothing is accumulated yet).
        let mut correction = [[1.0f32; 2]; 1];
        for t in 1..tiles {
            let (stage, parity) = self.slot(t);
            let prev_stage = self.slot(t - 1).0;
            arch::mbarrier_wait(self.plan.barrier(K_FULL, stage), parity);
            self.turns.wait();
            mark_tile(t, record::TILE_TURN);
            if self.active(t) {
                // Tile t - 1 is active too: active tiles are a prefix.
                self.scores::<true>(stage);
                // Here, under the product just issued, rather than at the end of the last
                // iteration: there the multiplies sat between the softmax and the next turn at
                // the tensor cores (docs/kernels/flash_ws.md, overlap).
                fragment::rescale(core::array::from_mut(&mut self.o_acc), correction);
                self.attend::<true>(prev_stage);
                self.turns.pass();
                mark_tile(t, record::TILE_ISSUED);
                arch::wgmma_wait::<1>(self.s_acc.registers_mut());
                mark_tile(t, record::TILE_SCORES);
                self.release(K_EMPTY, stage);
                let speculative = const { speculative_exponentials(G::D, G::Input::BYTES, G::KEYS) };
                correction = match exponentials_before_wait(G::D) {
                    Some(head) => {
                        let head = speculative.unwrap_or(head);
                        let correction = if speculative.is_some() {
                            self.probabilities_speculatively(t, head)
                        } else {
                            self.probabilities_head(t, head)
                        };
                        mark_tile(t, record::TILE_HEAD);
                        self.retire_previous(stage, parity, prev_stage);
                        mark_tile(t, record::TILE_RETIRED);
                        self.softmax
                            .probabilities_tail(core::array::from_mut(&mut self.s_acc), head);
                        correction
                    }
                    None => {
                        let correction = self.probabilities(t);
                        mark_tile(t, record::TILE_HEAD);
                        self.retire_previous(stage, parity, prev_stage);
                        mark_tile(t, record::TILE_RETIRED);
                        correction
                    }
                };
                self.pack();
                mark_tile(t, record::TILE_PACKED);
            } else {
                if self.active(t - 1) {
                    fragment::rescale(core::array::from_mut(&mut self.o_acc), correction);
                    self.attend::<false>(prev_stage);
                }
                self.turns.pass();
                self.release(K_EMPTY, stage);
                self.release(V_EMPTY, prev_stage);
                arch::mbarrier_wait(self.plan.barrier(V_FULL, stage), parity);
            }
        }
        // Every S = Q K^T of the item has completed (waited for in its iteration, or not issued).
        self.release_q();
        let stage = self.slot(tiles - 1).0;
        self.turns.wait();
        if self.active(tiles - 1) {
            fragment::rescale(core::array::from_mut(&mut self.o_acc), correction);
            self.attend::<true>(stage);
        }
        self.turns.pass();
        arch::wgmma_wait::<0>(self.o_acc.registers_mut());
        self.release(V_EMPTY, stage);
    }
}
