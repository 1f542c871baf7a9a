//! The backward's two row kernels, a warp per query row (`ROWS_PER_BLOCK` rows a block, grid
//! `(padded_rows / ROWS_PER_BLOCK, B*H over y and z)`):
//! - `prepare`, before the main kernel: each row's `delta = rowsum(dO * O)` and log-sum-exp in
//!   base 2 (`+inf` for a padding row, or a row that saw no key, so that its probabilities are
//!   0), its dQ accumulator cleared, and its tile's turn counter reset;
//! - `finish_dq`, after it: dQ = scale * accumulator, in the input type and Q's layout.

use super::Grads;
use crate::arch;
use crate::attention::Problem;
use crate::backward_launch::warpgroup::dq_index;
use crate::backward_launch::{BLOCK_M, ROWS_PER_BLOCK};
use crate::tile::Element;

/// This warp's (query head, row), `None` past the last head or the padded rows.
#[inline(always)]
fn warp_row(problem: &Problem) -> Option<(usize, u32, u32)> {
    let head = problem.head()?;
    let padded_rows = problem.seq_q.div_ceil(BLOCK_M) * BLOCK_M;
    let row = arch::block_idx_x() * ROWS_PER_BLOCK + arch::warp_id();
    (row < padded_rows).then_some((head, row, padded_rows))
}

/// # Safety
/// Launched as the module says, with the buffers of `backward_launch.rs`.
#[inline(always)]
pub unsafe fn prepare<T: Element, const D: usize>(g: Grads, problem: Problem) {
    let Some((head, row, padded_rows)) = warp_row(&problem) else {
        return;
    };
    let lane = arch::lane_id();
    let stat = head * padded_rows as usize + row as usize;
    let (mut delta, mut lse2) = (0.0f32, f32::INFINITY);
    if row < problem.seq_q {
        let o = problem.out_row::<D>(g.out as *mut u16, head, row) as *const u32;
        let d_o = problem.out_row::<D>(g.d_out as *mut u16, head, row) as *const u32;
        // Each lane takes D / 32 elements: pairs `lane + 32 i`.
        let mut sum = 0.0f32;
        for i in 0..D / 64 {
            let at = lane as usize + 32 * i;
            let (o0, o1) = T::unpack(*o.add(at));
            let (g0, g1) = T::unpack(*d_o.add(at));
            sum = arch::fma(o0, g0, arch::fma(o1, g1, sum));
        }
        delta = arch::warp_sum(sum);
        let lse = *g.lse.add(head * problem.seq_q as usize + row as usize);
        if lse != f32::NEG_INFINITY {
            lse2 = lse * core::f32::consts::LOG2_E;
        }
    }
    if lane == 0 {
        *g.delta.add(stat) = delta;
        *g.lse2.add(stat) = lse2;
        if row.is_multiple_of(BLOCK_M) {
            *g.turns
                .add(head * (padded_rows / BLOCK_M) as usize + (row / BLOCK_M) as usize) = 0;
        }
    }
    let accumulator = g.dq_accum.add(stat * D);
    for i in 0..D / 32 {
        *accumulator.add(lane as usize + 32 * i) = 0.0;
    }
}

/// `WGMMA_ORDER`: the accumulator is in the order the Hopper main kernel adds in
/// (`backward_launch::warpgroup::dq_index`, per query tile), else row-major.
///
/// # Safety
/// As `prepare`, after the main kernel has added every key block into the accumulator.
#[inline(always)]
pub unsafe fn finish_dq<T: Element, const D: usize, const WGMMA_ORDER: bool>(g: Grads, problem: Problem) {
    let Some((head, row, padded_rows)) = warp_row(&problem) else {
        return;
    };
    if row >= problem.seq_q {
        return;
    }
    let lane = arch::lane_id() as usize;
    let d_q = problem.out_row::<D>(g.d_q, head, row) as *mut u32;
    for i in 0..D / 64 {
        let pair = lane + 32 * i;
        let at = if WGMMA_ORDER {
            // The tile's block, then the pair's place in it.
            let block = (head * padded_rows as usize + (row - row % BLOCK_M) as usize) * D;
            block + dq_index(row % BLOCK_M, 2 * pair as u32, D as u32) as usize
        } else {
            (head * padded_rows as usize + row as usize) * D + 2 * pair
        };
        let [lo, hi] = arch::ld_global_v2_u32(g.dq_accum.add(at) as *const u32).map(f32::from_bits);
        arch::st_global_u32(d_q.add(pair), T::pack(lo * g.scale, hi * g.scale));
    }
}
