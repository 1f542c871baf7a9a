//! Barrier policies: which synchronisation each point of the KV-tile loop gets.
//!
//! The kernels call `sync::<P, COUNT>(point, ..)` at every point where some design could want a
//! barrier. The policy maps each point to a scope; only `Scope::Block` emits a CTA-wide barrier
//! (`bar.sync`), so `BARRIERS_PER_TILE` is, by construction, the number of `bar.sync` executed per
//! KV tile. The host checks that number three ways: this constant (exported into the PTX),
//! `bar.sync` instructions counted inside the loop of the PTX, and a run-time count.

use crate::arch;

/// A point in the KV-tile loop where threads may need to agree on shared memory.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SyncPoint {
    /// The tile's K and V rows have landed in shared memory (written by every thread's copies).
    KvLoaded = 0,
    /// S = Q K^T is computed for the tile.
    ScoresComputed = 1,
    /// Each row's running maximum has been exchanged.
    RowMaxExchanged = 2,
    /// Each row's running sum has been exchanged.
    RowSumExchanged = 3,
    /// Probabilities P have been staged in shared memory for the P V product.
    ProbsStaged = 4,
    /// Every thread is done reading this tile's shared memory, which the next copies overwrite.
    BeforeSmemReuse = 5,
}

/// How far a synchronisation point reaches.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Nothing: the data never crosses threads, or crosses them through shuffles.
    None,
    /// The 32 lanes of one warp (`bar.warp.sync`): data shared inside a warp only.
    Warp,
    /// The whole block (`bar.sync`).
    Block,
}

/// A barrier policy, one scope per `SyncPoint` (indexed by its discriminant).
pub trait BarrierPolicy {
    const SCOPES: [Scope; 6];
    /// CTA-wide barriers executed per KV tile; derived from `SCOPES`, never written by hand.
    const BARRIERS_PER_TILE: u32 = block_scopes(&Self::SCOPES);
}

const fn block_scopes(scopes: &[Scope; 6]) -> u32 {
    let mut count = 0;
    let mut i = 0;
    while i < scopes.len() {
        if matches!(scopes[i], Scope::Block) {
            count += 1;
        }
        i += 1;
    }
    count
}

/// The style of the early CUDA experiments: a block-wide barrier after every phase, whether or
/// not a shared-memory dependency crosses warps there. Six per tile.
pub struct Legacy;
impl BarrierPolicy for Legacy {
    const SCOPES: [Scope; 6] = [Scope::Block; 6];
}

/// Only the barriers that shared-memory dependencies between warps need: the tile must be
/// visible before anyone reads it, and nobody may overwrite it while it is being read. Row
/// statistics move through warp shuffles and each warp's probabilities stay in its own slice of
/// shared memory, so those points need at most a warp barrier. Two per tile.
pub struct Light;
impl BarrierPolicy for Light {
    const SCOPES: [Scope; 6] = [
        Scope::Block, // KvLoaded: copies by all threads, read by all warps
        Scope::None,  // ScoresComputed: each warp reads only its own scores
        Scope::None,  // RowMaxExchanged: shuffles
        Scope::None,  // RowSumExchanged: shuffles
        Scope::Warp,  // ProbsStaged: a warp's lanes read each other's probabilities
        Scope::Block, // BeforeSmemReuse: the next copies overwrite what other warps read
    ];
}

/// The warp-specialised kernels' policy: no block barrier at all inside the KV loop. Tiles are
/// handed between the copy-issuing producer and the consumers by mbarriers (full / empty per
/// pipeline slot), which wait for exactly the data they guard instead of for the whole block.
pub struct Mbarrier;
impl BarrierPolicy for Mbarrier {
    const SCOPES: [Scope; 6] = [Scope::None; 6];
}

/// Synchronises as policy `P` says for `point`. With `COUNT` (the instrumented build that checks
/// `BARRIERS_PER_TILE` at run time), thread 0 also counts the block barrier in shared memory.
#[inline(always)]
pub fn sync<P: BarrierPolicy, const COUNT: bool>(point: SyncPoint) {
    match P::SCOPES[point as usize] {
        Scope::None => {}
        Scope::Warp => arch::sync_warp(),
        Scope::Block => {
            arch::sync_threads();
            if COUNT && arch::thread_idx_x() == 0 {
                arch::barrier_counter_store(arch::barrier_counter_load() + 1);
            }
        }
    }
}
