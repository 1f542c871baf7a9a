//! One warp's `mma.sync.m16n8k16` products with both operands in shared memory, in either
//! orientation: the backward's five products read the same tiles as A or B, as they are stored
//! or transposed (S^T = K Q^T reads Q as stored, dK += dS^T Q reads it transposed), so each
//! operand says how its matrix holds it and `ldmatrix` (plain or `.trans`) does the rest.

use crate::arch::{self, SharedAddr};
use crate::tile::Element;

/// A row-major matrix of 16-bit elements in shared memory, `row_bytes` apart.
#[derive(Clone, Copy)]
pub struct SharedMatrix {
    pub base: SharedAddr,
    pub row_bytes: u32,
}

impl SharedMatrix {
    /// The address of element `(row, col)`.
    #[inline(always)]
    pub fn at(self, row: u32, col: u32) -> SharedAddr {
        self.base + row * self.row_bytes + col * 2
    }
}

/// The A fragment of rows `m0 .. m0 + 16`, columns `k0 .. k0 + 16` of the product's A operand.
/// With `TRANSPOSED` the matrix holds A's transpose (`[k][m]`), else A itself (`[m][k]`).
///
/// # Safety
/// The 16 x 16 elements must lie inside the matrix, written and made visible to this warp.
#[inline(always)]
pub unsafe fn a_fragment<const TRANSPOSED: bool>(a: SharedMatrix, m0: u32, k0: u32) -> [u32; 4] {
    let lane = arch::lane_id();
    // ldmatrix's matrices 0..3 are A's (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15),
    // (m 8-15, k 8-15); lane 8i + r gives row r of matrix i as the matrix holds it.
    let (matrix, r) = (lane / 8, lane % 8);
    let (m, k) = (m0 + (matrix % 2) * 8, k0 + (matrix / 2) * 8);
    // Safety: inside the matrix, the caller's contract.
    unsafe {
        if TRANSPOSED {
            arch::ldmatrix_x4_trans(a.at(k + r, m))
        } else {
            arch::ldmatrix_x4(a.at(m + r, k))
        }
    }
}

/// The B fragments of two adjacent 8-column tiles (`n0 ..` and `n0 + 8 ..`), rows
/// `k0 .. k0 + 16` of the product's B operand: registers 0-1 the first tile's, 2-3 the second's.
/// With `TRANSPOSED` the matrix holds B as `[k][n]`, else as `[n][k]` (the `col` operand's
/// natural order, as K is for Q K^T).
///
/// # Safety
/// As `a_fragment`, for the 16 x 16 elements.
#[inline(always)]
pub unsafe fn b_fragments<const TRANSPOSED: bool>(b: SharedMatrix, k0: u32, n0: u32) -> [u32; 4] {
    let lane = arch::lane_id();
    // Matrices 0..3: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
    let (matrix, r) = (lane / 8, lane % 8);
    let (k, n) = (k0 + (matrix % 2) * 8, n0 + (matrix / 2) * 8);
    // Safety: inside the matrix, the caller's contract.
    unsafe {
        if TRANSPOSED {
            arch::ldmatrix_x4_trans(b.at(k + r, n))
        } else {
            arch::ldmatrix_x4(b.at(n + r, k))
        }
    }
}

/// `acc += A[m0 .. m0 + 16, k0 .. k0 + 16 K_STEPS] * B[k0 .., n0 .. n0 + 8 N_TILES]`, `acc[j]`
/// the accumulator of columns `n0 + 8j ..` in the `mma.sync` layout (`fragment.rs`).
///
/// # Safety
/// Both operands' parts must lie inside their matrices, written and made visible to this warp;
/// the whole warp calls it together.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn product<
    T: Element,
    const A_T: bool,
    const B_T: bool,
    const N_TILES: usize,
    const K_STEPS: usize,
>(
    acc: &mut [[f32; 4]; N_TILES],
    a: SharedMatrix,
    m0: u32,
    b: SharedMatrix,
    n0: u32,
    k0: u32,
) {
    const { assert!(N_TILES.is_multiple_of(2)) };
    for ks in 0..K_STEPS {
        let k = k0 + 16 * ks as u32;
        // Safety: the caller's contract.
        let a_frag = unsafe { a_fragment::<A_T>(a, m0, k) };
        for pair in 0..N_TILES / 2 {
            // Safety: the caller's contract.
            let b_frag = unsafe { b_fragments::<B_T>(b, k, n0 + 16 * pair as u32) };
            T::mma(&mut acc[2 * pair], a_frag, [b_frag[0], b_frag[1]]);
            T::mma(&mut acc[2 * pair + 1], a_frag, [b_frag[2], b_frag[3]]);
        }
    }
}
