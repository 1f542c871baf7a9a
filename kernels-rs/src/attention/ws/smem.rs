//! `flash_ws`'s shared memory: its size (`SmemShape`, which the export macros read), where the
//! tiles and barriers lie in it (`Plan`), and the ring's slots and barrier kinds.

use crate::arch::{self, SharedAddr};
use crate::attention::fp8;
use crate::attention::shape::WarpgroupShape;
use crate::tile::swizzled::{self, ATOM_BYTES};
use crate::tile::Operand;

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
pub(super) struct Plan<G: WarpgroupShape, const STAGES: usize> {
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
    pub(super) o: SharedAddr,
    _shape: core::marker::PhantomData<G>,
}

impl<G: WarpgroupShape, const STAGES: usize> Plan<G, STAGES> {
    /// Bytes of a K tile, of a V tile (`v_tile_bytes`), and of a ring slot (K, then V).
    pub(super) const K_TILE: u32 = k_tile_bytes(G::KEYS, G::D, G::Input::BYTES);
    pub(super) const V_TILE: u32 = v_tile_bytes(G::KEYS, G::D, G::Input::BYTES);
    pub(super) const SLOT: u32 = Self::K_TILE + Self::V_TILE;
    /// Bytes of a row of Q or K: `D * BYTES`, in column blocks of 128.
    pub(super) const ROW_BYTES: u32 = (G::D * G::Input::BYTES) as u32;

    /// The plan of `smem`'s block of `block_m` query rows: its Q tiles (`SmemShape::q_buffers`),
    /// V's row tiles, and, where `SmemShape::output_buffer`, O's tile of its own, 1024-byte
    /// aligned after the barriers.
    #[inline(always)]
    pub(super) fn new(block_m: u32, smem: SmemShape) -> Self {
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
    pub(super) fn k(&self, stage: u32) -> SharedAddr {
        self.kv + stage * Self::SLOT
    }
    #[inline(always)]
    pub(super) fn v(&self, stage: u32) -> SharedAddr {
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
    pub(super) unsafe fn init_barriers(&self, consumer_warps: u32, persistent: bool) {
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
    pub(super) fn v_rows_slot(&self, t: u32) -> (u32, u32) {
        (t % self.row_tiles, (t / self.row_tiles) & 1)
    }
    #[inline(always)]
    pub(super) fn v_rows(&self, tile: u32) -> SharedAddr {
        self.v_rows + tile * Self::K_TILE
    }
    /// The copy engine's bytes of V's row tile `tile` have landed.
    #[inline(always)]
    pub(super) fn v_rows_full(&self, tile: u32) -> SharedAddr {
        self.barriers + 8 * (2 * self.q_buffers + 4 * STAGES as u32 + tile)
    }
    /// Every transposing thread has read V's row tile `tile`.
    #[inline(always)]
    pub(super) fn v_rows_empty(&self, tile: u32) -> SharedAddr {
        self.v_rows_full(self.row_tiles + tile)
    }
    /// Q's buffer `buffer`.
    #[inline(always)]
    pub(super) fn q(&self, buffer: u32) -> SharedAddr {
        self.q + buffer * self.q_tile
    }
    /// The Q buffer of the block's `item`-th work item and the parity of its round: items take
    /// the buffers in turn.
    #[inline(always)]
    pub(super) fn q_slot(&self, item: u32) -> (u32, u32) {
        if self.q_buffers == 2 {
            (item & 1, (item >> 1) & 1)
        } else {
            (0, item & 1)
        }
    }
    #[inline(always)]
    pub(super) fn q_full(&self, buffer: u32) -> SharedAddr {
        self.barriers + 8 * buffer
    }
    /// Q's buffer is free: every consumer warp's last S = Q K^T of a work item has completed.
    #[inline(always)]
    pub(super) fn q_empty(&self, buffer: u32) -> SharedAddr {
        self.barriers + 8 * (self.q_buffers + buffer)
    }
    /// Barrier `kind` (0 K full, 1 V full, 2 K empty, 3 V empty) of `stage`.
    #[inline(always)]
    pub(super) fn barrier(&self, kind: u32, stage: u32) -> SharedAddr {
        self.barriers + 8 * (2 * self.q_buffers + kind * STAGES as u32 + stage)
    }
}

pub(super) const K_FULL: u32 = 0;
pub(super) const V_FULL: u32 = 1;
pub(super) const K_EMPTY: u32 = 2;
pub(super) const V_EMPTY: u32 = 3;

/// Tile `t`'s slot in the ring and the parity of its round (the phase its barriers complete).
#[inline(always)]
pub(super) fn slot<const STAGES: usize>(t: u32) -> (u32, u32) {
    (t % STAGES as u32, (t / STAGES as u32) & 1)
}
