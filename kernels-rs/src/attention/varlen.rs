//! Variable-length batches (`_varlen` entry points): Q and the output packed as `[total_q, H, D]`,
//! K and V as `[total_k, H_kv, D]`, sequence `b` owning rows `cu_q[b] .. cu_q[b + 1]` of Q and
//! `cu_k[b] .. cu_k[b + 1]` of K and V; the log-sum-exp is `[H, total_q]`.
//!
//! A block's sequence is seen as a batch of one in the `[B, S, H, D]` layout: its `Problem` has
//! the sequence's own lengths (so causal alignment, tile counts and masks are per sequence), its
//! head is the in-sequence head `h`, and the buffers start at the sequence's first row. Keys past
//! the sequence's end in the packed tensor are the next sequence's: the per-sequence `seq_k`
//! masks them, and output rows past its `seq_q` are never stored. The contiguous entry points
//! never reach this code (`VARLEN` is a const parameter of the bodies) and keep their PTX.

use super::{Buffers, Problem};

/// The varlen launch parameters and, inside a block, where its sequence sits in the packed
/// tensors. Every non-varlen kernel gets `Varlen::dense(seq_q)`: offsets 0, which fold away.
#[derive(Clone, Copy)]
pub struct Varlen {
    /// `[B + 1]` prefix sums of the query and key counts; null for dense launches.
    pub cu_q: *const u32,
    pub cu_k: *const u32,
    /// The sequence's first packed query and key row (0 for dense launches).
    pub q_start: u32,
    pub k_start: u32,
    /// Rows per head of the log-sum-exp (and of `flash_decode`'s split partials): `S_q` for
    /// dense launches, `total_q` for varlen ones.
    pub lse_rows: u32,
}

impl Varlen {
    /// What a dense launch of `seq_q` query rows per head gets.
    #[inline(always)]
    pub fn dense(cu_q: *const u32, cu_k: *const u32, seq_q: u32) -> Varlen {
        Varlen {
            cu_q,
            cu_k,
            q_start: 0,
            k_start: 0,
            lse_rows: seq_q,
        }
    }

    /// Sequence `batch` of a varlen launch (`problem.seq_q` is `total_q`, the tensors packed as
    /// the module says): its problem (batch of one, `batch_heads` = `H`), and the buffers moved
    /// to its first rows. `None` when `first_row` (a block's first packed row of the sequence,
    /// in the units the caller counts: query rows, or `flash_decode`'s `group x S_q` packed
    /// rows with `rows_per_query` = group) is past its end.
    ///
    /// # Safety
    /// `cu_q` and `cu_k` hold `B + 1` non-decreasing entries from 0 to `total_q` and `total_k`
    /// (checked by the host), `batch < B`, and the buffers hold the packed tensors.
    #[inline(always)]
    pub unsafe fn sequence<const D: usize>(
        io: Buffers,
        problem: &Problem,
        batch: usize,
        first_row: u32,
        rows_per_query: u32,
    ) -> Option<(Buffers, Problem)> {
        let v = problem.varlen;
        let (q_start, q_end) = (*v.cu_q.add(batch), *v.cu_q.add(batch + 1));
        let seq_q = q_end - q_start;
        if first_row >= seq_q * rows_per_query {
            return None;
        }
        let (k_start, k_end) = (*v.cu_k.add(batch), *v.cu_k.add(batch + 1));
        let bounds = Bounds {
            q_start,
            seq_q,
            k_start,
            seq_k: k_end - k_start,
        };
        Some((
            Self::buffers::<D>(io, problem, bounds),
            Self::problem(problem, bounds),
        ))
    }

    /// The problem of the sequence at `bounds` in a varlen launch's `problem` (a batch of one,
    /// `batch_heads` = `H`, its own lengths, its log-sum-exp rows from its first row on).
    ///
    /// # Safety
    /// `bounds` lie inside the packed tensors (`q_start + seq_q <= total_q`).
    #[inline(always)]
    pub unsafe fn problem(problem: &Problem, bounds: Bounds) -> Problem {
        let lse = if problem.lse.is_null() {
            problem.lse
        } else {
            problem.lse.add(bounds.q_start as usize)
        };
        Problem {
            seq_q: bounds.seq_q,
            seq_k: bounds.seq_k,
            lse,
            seq_major: true,
            batch_heads: problem.heads,
            varlen: Varlen {
                q_start: bounds.q_start,
                k_start: bounds.k_start,
                lse_rows: problem.seq_q,
                ..problem.varlen
            },
            ..*problem
        }
    }

    /// The buffers of a varlen launch moved to the first rows of the sequence at `bounds`: rows
    /// of the tensors' head dim (`Problem::columns`: a padded one's rows are narrower than the
    /// kernel's `D`; varlen tensors have one head dim).
    ///
    /// # Safety
    /// As `problem`, for the buffers `io` of that launch.
    #[inline(always)]
    pub unsafe fn buffers<const D: usize>(io: Buffers, problem: &Problem, bounds: Bounds) -> Buffers {
        let heads = problem.heads as usize;
        let heads_kv = heads / problem.kv_group as usize;
        let columns = problem.columns::<D>() as usize;
        let q_offset = bounds.q_start as usize * heads * columns;
        let kv_offset = bounds.k_start as usize * heads_kv * columns;
        Buffers {
            q: io.q.add(q_offset),
            k: io.k.add(kv_offset),
            v: io.v.add(kv_offset),
            out: io.out.add(q_offset),
            ..io
        }
    }
}

/// Where one sequence sits in a varlen launch's packed tensors: its first query and key rows and
/// its lengths. The persistent `flash_ws` reads them per work item from the host's table
/// (`launch::item_walk::table::varlen_entry`), not from the prefix sums: one load, not two in a
/// row, at every item's start.
#[derive(Clone, Copy, Default)]
pub struct Bounds {
    pub q_start: u32,
    pub seq_q: u32,
    pub k_start: u32,
    pub seq_k: u32,
}

impl Bounds {
    /// Whether the sequence lies inside a launch's `total_q` query and `total_k` key rows (the
    /// sums cannot wrap).
    #[inline(always)]
    pub fn inside(&self, total_q: u32, total_k: u32) -> bool {
        self.q_start <= total_q
            && self.seq_q <= total_q - self.q_start
            && self.k_start <= total_k
            && self.seq_k <= total_k - self.k_start
    }
}
