//! One warp's tensor-core products with `mma.sync.m16n8k16` on fragments in registers, the B
//! operand read from a row-major K or V tile in shared memory by `ldmatrix` (FlashAttention-2's
//! warp-level GEMMs). Shared by `flash_mma` and `flash_decode`.

use super::shape::{Tiles, WarpShape};
use crate::arch::{self, SharedAddr};
use crate::tile::{Element, TileLayout};

/// Row tile `mt`'s A fragment for k-step `ks`, from a row-major 16-bit tile in shared memory
/// (`stride` bytes per row) whose row tiles start at row `first_row`: the four 8 x 8 matrices
/// (rows 0-7 | 8-15) x (columns 0-7 | 8-15) of one `ldmatrix.x4`.
///
/// # Safety
/// `tile` must hold `first_row + 16 * (mt + 1)` rows of at least `16 * (ks + 1)` elements,
/// written and made visible to this warp.
#[inline(always)]
pub unsafe fn a_fragment(tile: SharedAddr, first_row: u32, stride: u32, mt: usize, ks: usize) -> [u32; 4] {
    let lane = arch::lane_id();
    let row = first_row + (16 * mt) as u32 + lane % 16;
    let col = (16 * ks) as u32 + (lane / 16) * 8;
    // Safety: inside the tile, the caller's contract.
    unsafe { arch::ldmatrix_x4(tile + row * stride + col * 2) }
}

/// Every A fragment of `ROW_TILES` row tiles and `K_STEPS` k-steps (`a_fragment`): Q kept in
/// registers for the whole KV loop. Kernels reach it through their shape
/// (`WarpShape::q_fragments`), which knows `K_STEPS`.
///
/// # Safety
/// As `a_fragment`, for every row tile and k-step.
#[inline(always)]
pub unsafe fn a_fragments<const ROW_TILES: usize, const K_STEPS: usize>(
    tile: SharedAddr,
    first_row: u32,
    stride: u32,
) -> [[[u32; 4]; K_STEPS]; ROW_TILES] {
    let mut frags = [[[0u32; 4]; K_STEPS]; ROW_TILES];
    for (mt, row_tile) in frags.iter_mut().enumerate() {
        for (ks, frag) in row_tile.iter_mut().enumerate() {
            // Safety: the caller's contract.
            *frag = unsafe { a_fragment(tile, first_row, stride, mt, ks) };
        }
    }
    frags
}

/// One 16-column k-step `ks` of S = Q K^T: `a[mt]` is row tile `mt`'s A fragment of Q for this
/// step; the keys are rows `first_key_row ..` of the K tile at `k_tile` (`tile_rows` rows in
/// layout `L`). One `ldmatrix.x4` gives the B fragments of two adjacent 8-key tiles, used by
/// every row tile.
///
/// # Safety
/// `k_tile` must hold `first_key_row + W::KEYS` rows of at least `16 * (ks + 1)` elements,
/// written and made visible to this warp.
#[inline(always)]
pub unsafe fn scores_step<T: Element, W: WarpShape, L: TileLayout, const ROW_TILES: usize>(
    s_acc: &mut [W::Scores; ROW_TILES],
    a: &[[u32; 4]; ROW_TILES],
    k_tile: SharedAddr,
    tile_rows: u32,
    first_key_row: u32,
    ks: usize,
) {
    let lane = arch::lane_id();
    for jp in 0..W::KEYS / 16 {
        let key_row = first_key_row + (16 * jp) as u32 + (lane / 16) * 8 + lane % 8;
        let chunk = (2 * ks) as u32 + (lane / 8) % 2;
        // Safety: inside the tile, the caller's contract.
        let b = unsafe { arch::ldmatrix_x4(L::chunk(k_tile, W::D, tile_rows, key_row, chunk)) };
        for mt in 0..ROW_TILES {
            T::mma(s_acc[mt].tile_mut(2 * jp), a[mt], [b[0], b[1]]);
            T::mma(s_acc[mt].tile_mut(2 * jp + 1), a[mt], [b[2], b[3]]);
        }
    }
}

/// O += P V, P straight from the score accumulators (tiles 2kk and 2kk + 1 of a row tile form
/// k-step kk's A fragment); V's rows `first_key_row ..` of the tile at `v_tile` (`tile_rows`
/// rows in layout `L`), read transposed.
///
/// # Safety
/// `v_tile` must hold `first_key_row + W::KEYS` rows of `W::D` elements, written and
/// made visible to this warp.
#[inline(always)]
pub unsafe fn attend<T: Element, W: WarpShape, L: TileLayout, const ROW_TILES: usize>(
    o_acc: &mut [W::Output; ROW_TILES],
    s_acc: &[W::Scores; ROW_TILES],
    v_tile: SharedAddr,
    tile_rows: u32,
    first_key_row: u32,
) {
    let lane = arch::lane_id();
    for kk in 0..W::KEYS / 16 {
        let mut a = [[0u32; 4]; ROW_TILES];
        for (mt, frag) in a.iter_mut().enumerate() {
            let (lo, hi) = (s_acc[mt].tile(2 * kk), s_acc[mt].tile(2 * kk + 1));
            *frag = [
                T::pack(lo[0], lo[1]),
                T::pack(lo[2], lo[3]),
                T::pack(hi[0], hi[1]),
                T::pack(hi[2], hi[3]),
            ];
        }
        for dp in 0..W::D / 16 {
            let key_row = first_key_row + (16 * kk) as u32 + lane % 8 + ((lane / 8) % 2) * 8;
            let chunk = (2 * dp) as u32 + lane / 16;
            // Safety: inside the tile, the caller's contract.
            let b = unsafe { arch::ldmatrix_x4_trans(L::chunk(v_tile, W::D, tile_rows, key_row, chunk)) };
            for mt in 0..ROW_TILES {
                T::mma(o_acc[mt].tile_mut(2 * dp), a[mt], [b[0], b[1]]);
                T::mma(o_acc[mt].tile_mut(2 * dp + 1), a[mt], [b[2], b[3]]);
            }
        }
    }
}

/// The [`WarpShape`] of `8 N_TILES` keys and head dim `8 D_TILES = 16 K_STEPS`.
pub struct Warp<const N_TILES: usize, const D_TILES: usize, const K_STEPS: usize>;

impl<const N_TILES: usize, const D_TILES: usize, const K_STEPS: usize> WarpShape
    for Warp<N_TILES, D_TILES, K_STEPS>
{
    const KEYS: usize = 8 * N_TILES;
    const D: usize = {
        assert!(16 * K_STEPS == 8 * D_TILES);
        8 * D_TILES
    };
    type Scores = [[f32; 4]; N_TILES];
    type Output = [[f32; 4]; D_TILES];
    type Query = [[u32; 4]; K_STEPS];

    #[inline(always)]
    unsafe fn q_fragments<const ROW_TILES: usize>(
        tile: SharedAddr,
        first_row: u32,
        stride: u32,
    ) -> [Self::Query; ROW_TILES] {
        // Safety: the caller's contract.
        unsafe { a_fragments::<ROW_TILES, K_STEPS>(tile, first_row, stride) }
    }
}
