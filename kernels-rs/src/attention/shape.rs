//! Tile shapes as types. A tensor-core kernel's register arrays have lengths derived from its tile
//! (keys per step, head dim), and stable Rust cannot compute an array length from generic
//! parameters. So a shape is one type whose parameters are those lengths, worked out once by the
//! family's export macro ([`Warp`], [`Warpgroup`]); a kernel takes it as a single type parameter
//! and checks it against its own tile with the shape's `KEYS` and `D`. The arrays the shape names
//! carry their own length, which is how the const-generic products underneath get it back.

use super::fragment::Fragment;
use crate::arch::SharedAddr;
use crate::tile::Operand;

/// A register's type: `f32` accumulators, `u32` packed operands.
pub trait Register: Copy {
    /// `N` zeroed fragments. A repeat expression of a literal zero, not a constant: a constant
    /// array is copied from a global, and LLVM orders the registers it starts differently.
    fn zero_tiles<const N: usize>() -> [[Self; 4]; N];
}

impl Register for f32 {
    #[inline(always)]
    fn zero_tiles<const N: usize>() -> [[Self; 4]; N] {
        [[0.0; 4]; N]
    }
}

impl Register for u32 {
    #[inline(always)]
    fn zero_tiles<const N: usize>() -> [[Self; 4]; N] {
        [[0; 4]; N]
    }
}

/// `N` `mma.sync` fragments of one thread, four registers each: `[[E; 4]; N]`.
pub trait Tiles<E>: Copy {
    const LEN: usize;
    /// All zeros (`Register::zero_tiles`).
    fn zero() -> Self;
    /// Fragment `i`.
    fn tile(&self, i: usize) -> &[E; 4];
    /// The same, to write.
    fn tile_mut(&mut self, i: usize) -> &mut [E; 4];
    /// The fragments, in order.
    fn tiles(&self) -> &[[E; 4]];
    /// The same, to write.
    fn tiles_mut(&mut self) -> &mut [[E; 4]];
}

impl<E: Register, const N: usize> Tiles<E> for [[E; 4]; N] {
    const LEN: usize = N;
    #[inline(always)]
    fn zero() -> Self {
        E::zero_tiles()
    }
    #[inline(always)]
    fn tile(&self, i: usize) -> &[E; 4] {
        &self[i]
    }
    #[inline(always)]
    fn tile_mut(&mut self, i: usize) -> &mut [E; 4] {
        &mut self[i]
    }
    #[inline(always)]
    fn tiles(&self) -> &[[E; 4]] {
        self
    }
    #[inline(always)]
    fn tiles_mut(&mut self) -> &mut [[E; 4]] {
        self
    }
}

/// One warp's `mma.sync.m16n8k16` fragments of a row tile (16 rows) for a step of `KEYS` keys and
/// head dim `D` (`flash_mma`, `flash_decode`; the products are `warp_mma`'s).
pub trait WarpShape {
    const KEYS: usize;
    const D: usize;
    /// The scores: a 16 x 8 accumulator per 8 keys.
    type Scores: Tiles<f32> + Fragment;
    /// The output: a 16 x 8 accumulator per 8 columns of the head dim.
    type Output: Tiles<f32> + Fragment;
    /// Q as A fragments: a 16 x 16 per 16 columns of the head dim (a k-step of S = Q K^T).
    type Query: Tiles<u32>;

    /// Q's A fragments of `ROW_TILES` row tiles (`warp_mma::a_fragments` at this shape's k-steps).
    /// A method of the shape, not a loop over `Query` in the kernel: written against the array's
    /// own length, the loop compiles as it did before shapes were types.
    ///
    /// # Safety
    /// As `warp_mma::a_fragments`.
    unsafe fn q_fragments<const ROW_TILES: usize>(
        tile: SharedAddr,
        first_row: u32,
        stride: u32,
    ) -> [Self::Query; ROW_TILES];
}

/// One thread's `wgmma` accumulators of a 64-row product, `[f32; R]` for `2R` columns.
pub trait Accumulator: Fragment + Copy {
    const REGS: usize;
    /// All zeros, from a repeat expression (see `Register::zero_tiles`).
    fn zero() -> Self;
}

impl<const R: usize> Accumulator for [f32; R] {
    const REGS: usize = R;
    #[inline(always)]
    fn zero() -> Self {
        [0.0; R]
    }
}

/// One consumer warpgroup's `wgmma` registers for a tile of `KEYS` keys and head dim `D`, Q, K and
/// V read as `Input` (`flash_wgmma`, `flash_ws`). The operand belongs to the shape: O += P V
/// takes `Input::K_STEP` keys per product.
pub trait WarpgroupShape {
    type Input: Operand;
    const KEYS: usize;
    const D: usize;
    /// Products of O += P V per tile.
    const PV_STEPS: usize;
    /// S: `KEYS / 2` registers.
    type Scores: Accumulator;
    /// O: `D / 2` registers.
    type Output: Accumulator;
    /// P as the A fragments of O += P V, one per product.
    type Packed: Tiles<u32>;

    /// `scores (+)= A B`, A and B shared-memory descriptors (`Operand::wgmma_ss`).
    ///
    /// # Safety
    /// As `arch::wgmma_ss`.
    unsafe fn scores<const CHAIN: u8>(scores: &mut Self::Scores, a: u64, b: u64, accumulate: bool);

    /// `out (+)= A B`, A from registers (`Operand::wgmma_rs`).
    ///
    /// # Safety
    /// As `arch::wgmma_rs`.
    unsafe fn attend<const CHAIN: u8>(out: &mut Self::Output, a: [u32; 4], b: u64, accumulate: bool);

    /// Product `step`'s A fragment of P (`Operand::pack_probabilities`).
    fn pack(scores: &Self::Scores, step: usize) -> [u32; 4];
}

/// The [`WarpgroupShape`] of `2 S_REGS = PV_STEPS I::K_STEP` keys and head dim `2 O_REGS`.
pub struct Warpgroup<I, const S_REGS: usize, const O_REGS: usize, const PV_STEPS: usize>(
    core::marker::PhantomData<I>,
);

impl<I: Operand, const S_REGS: usize, const O_REGS: usize, const PV_STEPS: usize> WarpgroupShape
    for Warpgroup<I, S_REGS, O_REGS, PV_STEPS>
{
    type Input = I;
    const KEYS: usize = {
        assert!(PV_STEPS * I::K_STEP == 2 * S_REGS);
        2 * S_REGS
    };
    const D: usize = 2 * O_REGS;
    const PV_STEPS: usize = PV_STEPS;
    type Scores = [f32; S_REGS];
    type Output = [f32; O_REGS];
    type Packed = [[u32; 4]; PV_STEPS];

    #[inline(always)]
    unsafe fn scores<const CHAIN: u8>(scores: &mut Self::Scores, a: u64, b: u64, accumulate: bool) {
        I::wgmma_ss::<CHAIN, S_REGS>(scores, a, b, accumulate)
    }

    #[inline(always)]
    unsafe fn attend<const CHAIN: u8>(out: &mut Self::Output, a: [u32; 4], b: u64, accumulate: bool) {
        I::wgmma_rs::<CHAIN, O_REGS>(out, a, b, accumulate)
    }

    #[inline(always)]
    fn pack(scores: &Self::Scores, step: usize) -> [u32; 4] {
        I::pack_probabilities(scores, step)
    }
}
