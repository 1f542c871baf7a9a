//! The backward pass: dQ, dK and dV of `O = softmax(Q K^T scale) V` from the forward's O, its
//! log-sum-exp and the gradient dO (FlashAttention-2's algorithm, on `mma.sync`), in three
//! kernels that take one parameter list (`backward_launch.rs`):
//! 1. `rows::prepare`: each query row's `delta = rowsum(dO * O)` and base-2 log-sum-exp into the
//!    workspace, dQ's fp32 accumulator cleared;
//! 2. `kv_block::kv_block`: a block per 64 keys of a KV head computes that block's dK and dV
//!    whole, and adds its part of dQ into the accumulator;
//! 3. `rows::finish_dq`: dQ from the accumulator, scaled, in the input type.
//!
//! On Hopper (sm_90a) at head dims 64 and 128 the host launches `warpgroup::kv_block_wgmma` in
//! place of `kv_block`: the same walk and workspace, its five products on `wgmma`.
//!
//! P is recomputed from the log-sum-exp rather than stored by the forward, so the forward saves
//! only O and one float per row. Masks and layouts are the forward's (`Problem`).

pub mod gemm;
pub mod kv_block;
pub mod rows;
pub mod walk;
#[cfg(any(not(flashrs_unit), family = "backward_wgmma"))]
#[macro_use]
pub mod warpgroup;

use super::Problem;
use crate::backward_launch::{workspace, BackwardArgs};

/// The buffers of one backward call, typed, with the workspace cut into its parts.
#[derive(Clone, Copy)]
pub struct Grads {
    pub q: *const u16,
    pub k: *const u16,
    pub v: *const u16,
    pub out: *const u16,
    pub d_out: *const u16,
    pub d_q: *mut u16,
    pub d_k: *mut u16,
    pub d_v: *mut u16,
    pub lse: *const f32,
    /// The softmax scale (dQ and dK carry it).
    pub scale: f32,
    /// `[B*H, padded rows, D]` fp32.
    pub dq_accum: *mut f32,
    /// `[B*H, padded rows]`: the log-sum-exps in base 2.
    pub lse2: *mut f32,
    /// `[B*H, padded rows]`: `rowsum(dO * O)`.
    pub delta: *mut f32,
    /// `[B*H, padded rows / BLOCK_M]`: the deterministic order's turn counters.
    pub turns: *mut u32,
}

impl BackwardArgs {
    /// The buffers, the workspace cut as `workspace` lays it out for head dim `d`.
    #[inline(always)]
    pub fn grads(&self, d: u32) -> Grads {
        let ws = self.workspace as *mut f32;
        let at = |floats: u64| ws.wrapping_add(floats as usize);
        let (bh, s) = (self.batch_heads, self.seq_q);
        Grads {
            q: self.q as *const u16,
            k: self.k as *const u16,
            v: self.v as *const u16,
            out: self.out as *const u16,
            d_out: self.d_out as *const u16,
            d_q: self.d_q as *mut u16,
            d_k: self.d_k as *mut u16,
            d_v: self.d_v as *mut u16,
            lse: self.lse as *const f32,
            scale: self.scale,
            dq_accum: ws,
            lse2: at(workspace::lse2(bh, s, d)),
            delta: at(workspace::delta(bh, s, d)),
            turns: at(workspace::turns(bh, s, d)) as *mut u32,
        }
    }

    /// The forward's problem facts, for the masks and the tensors' rows.
    #[inline(always)]
    pub fn problem(&self) -> Problem {
        Problem {
            seq_q: self.seq_q,
            seq_k: self.seq_k,
            scale_log2: self.scale_log2,
            causal: self.causal != 0,
            window_left: self.window_left,
            window_right: self.window_right,
            softcap: self.softcap,
            softcap_inverse: self.softcap_inverse,
            kv_group: self.kv_group,
            lse: core::ptr::null_mut(),
            sinks: core::ptr::null(),
            heads: self.heads,
            head_dim: 0,
            seq_major: self.seq_major != 0,
            batch_heads: self.batch_heads,
            kv_splits: 1,
            workspace: core::ptr::null_mut(),
            split_counters: core::ptr::null_mut(),
            pages: super::paged::PageTable::NONE,
            varlen: super::varlen::Varlen::dense(core::ptr::null(), core::ptr::null(), self.seq_q),
            descale: core::ptr::null(),
            walk: crate::launch::item_walk::ItemWalk::default(),
        }
    }
}

/// One backward entry point taking the `with_backward_params!` list.
macro_rules! backward_entry {
    ($name:ident, |$args:ident| $body:expr;
     $($(#[$doc:meta])* $field:ident: $host:ty $(as $device:ty)?,)*) => {
        /// # Safety
        /// Launched by the host with the backward parameter list (`backward_launch.rs`):
        /// buffers as long as the shape says, the grid and block of the kernel's module.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name($($field: launch_param_type!($host $(as $device)?)),*) {
            // As the forward's entry points: wait for the kernel before (a dependent launch),
            // then let the next one's blocks be scheduled.
            $crate::arch::wait_for_prerequisite_grids();
            $crate::arch::launch_dependents();
            let $args = $crate::backward_launch::BackwardArgs { $($field: $field as $host),* };
            $body
        }
    };
}

/// Exports the backward's three kernels for one head dim and element type:
/// `flash_backward_prepare_d<D>_<dtype>`, `flash_backward_d<D>_<dtype>` and
/// `flash_backward_dq_d<D>_<dtype>` (the host's `backward` module names them the same way).
macro_rules! flash_backward {
    ($prepare:ident $main:ident $finish:ident, $t:ty, d = $d:literal) => {
        with_backward_params!(backward_entry!($prepare, |a|
            $crate::attention::backward::rows::prepare::<$t, $d>(a.grads($d), a.problem());));
        with_backward_params!(backward_entry!($main, |a|
            $crate::attention::backward::kv_block::kv_block::<
                $t, $d, { $crate::backward_launch::smem::stages($d) as usize }, { $d / 16 },
                { if $d / 16 > 8 { 8 } else { $d / 16 } },
            >(a.grads($d), a.problem(), a.deterministic != 0);));
        // The accumulator's order is the main kernel's that the host launches on this
        // architecture (`src/backward.rs`).
        with_backward_params!(backward_entry!($finish, |a|
            $crate::attention::backward::rows::finish_dq::<
                $t, $d, { $crate::backward_launch::warpgroup::covers($d, cfg!(sm90a)) },
            >(a.grads($d), a.problem());));
    };
}
