//! `softmax_rows`: the middle step of the cuBLAS-composed attention (`S = Q K^T` and `O = P V` are
//! cuBLAS GEMMs): turns one row of fp32 scores into fp16 probabilities. One warp per row, three
//! passes (max, sum, write) over the row, which stays in L1/L2 between passes.

use super::Problem;
use crate::arch;
use crate::softmax::{self, RowState};
use crate::tile::Element;

/// Warps per block; each block covers this many query rows.
pub const WARPS: u32 = 4;

/// # Safety
/// `scores` (fp32) and `probs` must hold `[B*H, S_q, S_k]` for the grid `(ceil(S_q / WARPS), B*H)`
/// of `WARPS` warps per block.
#[inline(always)]
pub unsafe fn softmax_rows<T: Element>(scores: *const f32, probs: *mut u16, problem: Problem) {
    let row = arch::block_idx_x() * WARPS + arch::warp_id();
    if row >= problem.seq_q {
        return;
    }
    let head = arch::block_idx_y() as usize;
    let lane = arch::lane_id() as usize;
    let offset = (head * problem.seq_q as usize + row as usize) * problem.seq_k as usize;
    let (scores, probs) = (scores.add(offset), probs.add(offset));
    let keys = problem.key_end(row) as usize;
    let seq_k = problem.seq_k as usize;

    let mut state = RowState::EMPTY;
    let mut max = f32::NEG_INFINITY;
    let mut j = lane;
    while j < keys {
        max = arch::max(max, *scores.add(j));
        j += 32;
    }
    state.rescale(arch::warp_max(max), problem.scale_log2);
    let subtract = state.offset(problem.scale_log2);
    let mut sum = 0.0f32;
    j = lane;
    while j < keys {
        sum += softmax::probability(*scores.add(j), problem.scale_log2, subtract);
        j += 32;
    }
    state.row_sum = arch::warp_sum(sum);
    let norm = state.normaliser();
    // Masked keys (and every key of a row that sees none) get probability 0.
    j = lane;
    while j < seq_k {
        let p = if j < keys {
            softmax::probability(*scores.add(j), problem.scale_log2, subtract) * norm
        } else {
            0.0
        };
        arch::st_global_u16(probs.add(j), T::from_f32(p));
        j += 32;
    }
}
