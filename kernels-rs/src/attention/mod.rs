//! The attention kernels' generic bodies. The exported `extern "ptx-kernel"` entry points are
//! generated from `kernels.toml` (see `lib.rs`); everything here is plain generic Rust over the
//! device layer.
//!
//! All kernels share one calling convention:
//! `launch.rs`'s list, Q and the output `[B, H, S_q, D]`, K and V
//! `[B, H/kv_group, S_k, D]` (or all `[B, S, H, D]` with `seq_major`), contiguous 16-bit, grid
//! `(ceil(seq_q / BLOCK_M), min(B*H, 65535), ceil(B*H / 65535))`: a block per row block and head
//! (`flash_ws` runs causal problems' blocks in the order of `launch::causal_order`:
//! `longest_first_block`).
//!
//! The tiled families are built from shared pieces, so that a new family adds its own products
//! and scheduling only: `pipeline::KvPipeline` (the staged K/V copies), `fragment` (masking, online
//! softmax and the epilogue on `mma.sync.m16n8`-layout register fragments, which `wgmma` shares)
//! and `finish_row` (one row's log-sum-exp and output address, for any register layout).

/// Calls `T::$call` as product `$i` of a chain of `$n` `wgmma`s: the chain position is a
/// compile-time choice once the loop is unrolled. With `$leave_running` the chain's end commits
/// without waiting (a later `arch::wgmma_wait` collects it); otherwise it waits for the chain.
macro_rules! chained {
    // The chain position as a constant `$c` that the call names (for products generic in more
    // than the position).
    ($i:expr, $n:expr, $leave_running:expr, |$c:ident| $call:expr) => {{
        use $crate::arch::chain;
        if $n == 1 {
            if $leave_running {
                const $c: u8 = chain::ONLY_ASYNC;
                $call
            } else {
                const $c: u8 = chain::ONLY;
                $call
            }
        } else if $i == 0 {
            const $c: u8 = chain::FIRST;
            $call
        } else if $i + 1 == $n {
            if $leave_running {
                const $c: u8 = chain::LAST_ASYNC;
                $call
            } else {
                const $c: u8 = chain::LAST;
                $call
            }
        } else {
            const $c: u8 = chain::MIDDLE;
            $call
        }
    }};
    ($i:expr, $n:expr, $leave_running:expr, $t:ident::$call:ident($($arg:expr),*)) => {{
        use $crate::arch::chain;
        if $n == 1 {
            if $leave_running {
                $t::$call::<{ chain::ONLY_ASYNC }>($($arg),*)
            } else {
                $t::$call::<{ chain::ONLY }>($($arg),*)
            }
        } else if $i == 0 {
            $t::$call::<{ chain::FIRST }>($($arg),*)
        } else if $i + 1 == $n {
            if $leave_running {
                $t::$call::<{ chain::LAST_ASYNC }>($($arg),*)
            } else {
                $t::$call::<{ chain::LAST }>($($arg),*)
            }
        } else {
            $t::$call::<{ chain::MIDDLE }>($($arg),*)
        }
    }};
}

// The family modules carry their export macros (`#[macro_use]`), which the generated table
// invokes. `build.rs` compiles the crate once per device unit (one variant, or the common
// kernels) with `--cfg flashrs_unit` and a `family` cfg per family the unit exports, so that a
// unit reads only its own families' bodies: an edit to one family's file rebuilds only that
// family's units. A build without `flashrs_unit` (clippy, rustdoc) compiles every family.
#[cfg(any(not(flashrs_unit), family = "backward"))]
#[macro_use]
pub mod backward;
#[cfg(any(not(flashrs_unit), family = "flash_decode"))]
#[macro_use]
pub mod decode;
pub mod fp8;
pub mod fragment;
pub mod merge;
#[cfg(any(not(flashrs_unit), family = "flash_mma"))]
#[macro_use]
pub mod mma;
#[cfg(any(not(flashrs_unit), family = "naive"))]
#[macro_use]
pub mod naive;
pub mod packing;
pub mod paged;
pub mod pipeline;
pub mod rows;
#[cfg(any(not(flashrs_unit), family = "flash_scalar"))]
#[macro_use]
pub mod scalar;
pub mod shape;
pub mod varlen;
pub mod warp_mma;
#[cfg(any(not(flashrs_unit), family = "flash_wgmma"))]
#[macro_use]
pub mod wgmma;
#[cfg(any(not(flashrs_unit), family = "flash_ws", family = "flash_ws_fp8"))]
pub mod ws;

use crate::backward_launch::mask::Mask;
use crate::launch::{causal_order, record};
use crate::softmax::RowState;
use crate::tile::Rows;

/// The buffers of one launch, as every kernel body takes them.
#[derive(Clone, Copy)]
pub struct Buffers {
    /// Q, K, V and the output (layouts: `launch.rs`), the element type's bits.
    pub q: *const u16,
    pub k: *const u16,
    pub v: *const u16,
    pub out: *mut u16,
    /// The `_counted` twin's record (`record_barriers`); unused by the plain kernels.
    pub barrier_log: *mut u32,
    /// The tensor maps the host encoded for this call (`flash_ws`, and `flash_decode` under the
    /// mbarrier policy); null for the other kernels.
    pub tensor_maps: *const u8,
}

pub use crate::launch::maps::{
    FP8_K_BOX_ROWS, FP8_MAP_V_ROWS, FP8_Q_BOX_ROWS, MAP_BYTES, MAP_K, MAP_O, MAP_Q, MAP_V,
};

impl Buffers {
    /// Tensor map `which` (`MAP_Q` ..) of the call.
    #[inline(always)]
    pub fn tensor_map(&self, which: usize) -> *const u8 {
        self.tensor_maps.wrapping_add(which * MAP_BYTES)
    }

    /// The rows of Q, K and V that query head `head` (`b * H + h`) reads.
    ///
    /// # Safety
    /// The buffers must hold the tensors `problem` describes, and `head` be one of its heads.
    #[inline(always)]
    pub unsafe fn rows<const D: usize>(&self, problem: &Problem, head: usize) -> (Rows, Rows, Rows) {
        // Safety: the caller's contract.
        unsafe {
            (
                problem.q_rows::<D>(self.q, head),
                problem.kv_rows::<D>(self.k, head),
                problem.kv_rows::<D>(self.v, head),
            )
        }
    }
}

/// The per-launch facts every kernel needs about the problem.
#[derive(Clone, Copy)]
pub struct Problem {
    pub seq_q: u32,
    pub seq_k: u32,
    /// `scale * log2(e)`: scores are turned into base-2 exponents with one multiply.
    pub scale_log2: f32,
    pub causal: bool,
    /// One more than the keys a query row sees before its diagonal (the sliding window's left
    /// size), 0 for all of them: `key_start`. The launch parameter as it is (`launch.rs`), so
    /// that ptxas can read it from the parameter bank where it is used rather than keep it live.
    pub window_left: u32,
    /// One more than the keys a query row sees after its diagonal, 0 for all of them; the host
    /// sends 1 (none) under the causal mask: `key_end`.
    pub window_right: u32,
    /// The logit softcap in raw-score units (`cap / scale`), 0 for none: `soft_capped`.
    pub softcap: f32,
    /// `1 / softcap`, 0 without a softcap (`softcap_tanh`).
    pub softcap_inverse: f32,
    /// Query heads per key/value head (grouped-query attention; 1 for ordinary attention). Q is
    /// `[B, H, S_q, D]`, K and V `[B, H / kv_group, S_k, D]`.
    pub kv_group: u32,
    /// Where to write each row's log-sum-exp (`[B, H, S_q]` fp32), or null for none.
    pub lse: *mut f32,
    /// Each query head's attention sink (`[H]` fp32, natural-log units of the scaled scores),
    /// or null for none: `with_sink`.
    pub sinks: *const f32,
    /// Query heads per batch entry (`H`).
    pub heads: u32,
    /// The tensors' head dim where it is below the kernel's compiled `D`, else 0: `columns`.
    pub head_dim: u32,
    /// The tensors are `[B, S, H, D]` (a head's rows interleaved with the other heads'), else
    /// `[B, H, S, D]`.
    pub seq_major: bool,
    /// `B * H`: the heads are spread over the grid's y and z (y is limited to 65,535), so the
    /// last z slice may have blocks past the end.
    pub batch_heads: u32,
    /// flash_decode: slices of the key range, one block each (1: no split).
    pub kv_splits: u32,
    /// flash_decode: the split partials (see `launch.rs`), null when `kv_splits` is 1.
    pub workspace: *mut f32,
    /// flash_decode with `kv_splits > 1`: the grid's per-(KV head, row block) slice counters
    /// (`launch.rs`).
    pub split_counters: *mut u32,
    /// flash_decode's paged entry points: the block table and the sequence lengths; null and 0
    /// for every other kernel.
    pub pages: paged::PageTable,
    /// The `_varlen` entry points' prefix sums and, per block, where its sequence sits in the
    /// packed tensors; `Varlen::dense` (offsets 0) for every other kernel.
    pub varlen: varlen::Varlen,
    /// flash_ws_fp8: the descale factors of Q, K and V per KV head (`launch.rs`); null for every
    /// other kernel.
    pub descale: *const f32,
    /// The persistent flash_ws: its walk over the work items, as the host prepared it for the
    /// launch's grid (`ItemWalk::default()` for every other kernel).
    pub walk: crate::launch::item_walk::ItemWalk,
}

impl Problem {
    /// The factors that turn the e4m3 values of Q, K and V that query head `head` reads into true
    /// values (`descale`'s entries of its KV head).
    ///
    /// # Safety
    /// `descale` must hold `[3, B, H_kv]` floats and `head < batch_heads`.
    #[inline(always)]
    pub unsafe fn descales(&self, head: usize) -> [f32; 3] {
        let (kv_head, kv_heads) = (
            self.kv_head(head),
            self.batch_heads as usize / self.kv_group as usize,
        );
        // Safety: the caller's contract; each of the three arrays has `kv_heads` entries.
        unsafe { [0, 1, 2].map(|i| *self.descale.add(i * kv_heads + kv_head)) }
    }

    /// The mask's bounds (`backward_launch::mask`, shared with the host's tests).
    #[inline(always)]
    pub fn mask(&self) -> Mask {
        Mask {
            seq_q: self.seq_q,
            seq_k: self.seq_k,
            window_left: self.window_left,
            window_right: self.window_right,
        }
    }

    /// One past the last key that query `row` may attend. The mask is aligned bottom-right (as in
    /// FlashAttention): row `i`'s diagonal is key `i + seq_k - seq_q`, and it sees up to
    /// `window_right - 1` keys past it (none under the causal mask, all when 0).
    #[inline(always)]
    pub fn key_end(&self, row: u32) -> u32 {
        if self.window_right == 0 {
            return self.seq_k;
        }
        let end = row as i64 + self.seq_k as i64 - self.seq_q as i64 + self.window_right as i64;
        end.clamp(0, self.seq_k as i64) as u32
    }

    /// The first key that query `row` may attend: `window_left - 1` keys before its diagonal (0
    /// without a left bound). Grows with the row, as `key_end` does.
    #[inline(always)]
    pub fn key_start(&self, row: u32) -> u32 {
        if self.window_left == 0 {
            return 0;
        }
        let start = row as i64 + 1 + self.seq_k as i64 - self.seq_q as i64 - self.window_left as i64;
        start.clamp(0, self.seq_k as i64) as u32
    }

    /// The query rows that see key `key`: `first..end` (both at most `seq_q`; empty for a key
    /// past `seq_k`). The inverse of `key_start` and `key_end`, for a kernel whose threads each
    /// hold fixed keys over many rows (the backward's): two registers a key in place of the
    /// mask's terms.
    #[inline(always)]
    pub fn rows_seeing(&self, key: u32) -> (u32, u32) {
        self.mask().rows_seeing(key)
    }

    /// Whether the scores go through the logit softcap (`soft_capped`).
    #[inline(always)]
    pub fn has_softcap(&self) -> bool {
        self.softcap != 0.0
    }

    /// `tanh(s / softcap)` for a raw score `s`, by `tanh.approx` (one MUFU op, 2^-11 relative:
    /// a logit `x` is off by at most about `5e-4 x`, less than bf16's rounding of the
    /// probabilities for |x| < 4; FlashAttention-3 makes the same choice). An exact form through
    /// `ex2` and `rcp` took two MUFU ops and spilled the forward's tightest kernels.
    #[inline(always)]
    pub fn softcap_tanh(&self, s: f32) -> f32 {
        crate::arch::tanh_approx(s * self.softcap_inverse)
    }

    /// A raw score under the softcap (if any) and the softcap's derivative there, `1 - tanh^2`
    /// (1 without one): the backward's P takes the capped score, and dS the derivative.
    #[inline(always)]
    pub fn capped_with_slope(&self, s: f32) -> (f32, f32) {
        if self.has_softcap() {
            let t = self.softcap_tanh(s);
            (self.softcap * t, 1.0 - t * t)
        } else {
            (s, 1.0)
        }
    }

    /// The raw score `s` under the logit softcap, `softcap * tanh(s / softcap)` (in raw-score
    /// units, so the scale still applies after). Only with `has_softcap`.
    #[inline(always)]
    pub fn soft_capped(&self, s: f32) -> f32 {
        self.softcap * self.softcap_tanh(s)
    }

    /// The key/value head that query head `head` (= b * H + h) reads: `b * H_kv + h / kv_group`,
    /// which is `head / kv_group` because the heads of one batch are contiguous.
    #[inline(always)]
    pub fn kv_head(&self, head: usize) -> usize {
        head / self.kv_group as usize
    }

    /// This block's query head (= b * H + h), `None` for a block past the last one.
    #[inline(always)]
    pub fn head(&self) -> Option<usize> {
        use crate::arch;
        let head = arch::block_idx_y() as usize + arch::block_idx_z() as usize * arch::grid_dim_y() as usize;
        (head < self.batch_heads as usize).then_some(head)
    }

    /// The most query heads in a group of `launch::causal_order` for this problem's K and V.
    #[inline(always)]
    pub fn causal_group<const D: usize>(&self) -> u32 {
        causal_order::max_heads_per_group(self.seq_k, D as u32, self.kv_group)
    }

    /// The columns of a row of Q, K, V and the output in memory: the kernel's `D`, or the
    /// tensors' smaller head dim, whose remaining columns a `flash_ws` kernel reads as the copy
    /// engine's zeros (they add nothing to Q K^T, and P V's columns past it are not written).
    #[inline(always)]
    pub fn columns<const D: usize>(&self) -> u32 {
        match self.head_dim {
            0 => D as u32,
            d => d,
        }
    }

    /// Query head `head`'s rows of Q (and of the output): `(b, h)` = `(head / H, head % H)`.
    ///
    /// # Safety
    /// `q` must point to a tensor laid out as `self` says for Q (or the output), `head < batch_heads`.
    #[inline(always)]
    pub unsafe fn q_rows<const D: usize>(&self, q: *const u16, head: usize) -> Rows {
        // Safety: the caller's contract.
        unsafe { self.q_rows_of(q, head, D) }
    }

    /// `q_rows` for rows of `d` elements (`columns`).
    ///
    /// # Safety
    /// As `q_rows`, the tensor's rows `d` elements.
    #[inline(always)]
    pub unsafe fn q_rows_of(&self, q: *const u16, head: usize, d: usize) -> Rows {
        let (seq, heads) = (self.seq_q as usize, self.heads as usize);
        let (offset, stride): (usize, usize) = if self.seq_major {
            ((head / heads) * seq * heads * d + (head % heads) * d, heads * d)
        } else {
            (head * seq * d, d)
        };
        Rows {
            base: q.add(offset),
            stride: stride as u32,
            count: self.seq_q,
        }
    }

    /// The rows of K (or V) that query head `head` reads (see `kv_head`).
    ///
    /// # Safety
    /// `kv` must point to a K or V tensor laid out as `self` says, `head < batch_heads`.
    #[inline(always)]
    pub unsafe fn kv_rows<const D: usize>(&self, kv: *const u16, head: usize) -> Rows {
        let (seq, heads, group) = (self.seq_k as usize, self.heads as usize, self.kv_group as usize);
        let kv_heads = heads / group;
        let (offset, stride): (usize, usize) = if self.seq_major {
            (
                (head / heads) * seq * kv_heads * D + (head % heads) / group * D,
                kv_heads * D,
            )
        } else {
            (self.kv_head(head) * seq * D, D)
        };
        Rows {
            base: kv.add(offset),
            stride: stride as u32,
            count: self.seq_k,
        }
    }

    /// The (batch, head in the batch) of query head `head` (of `batch_heads`): a tensor map's
    /// two outer coordinates.
    #[inline(always)]
    pub fn map_coordinates(&self, head: usize) -> (i32, i32) {
        let heads = self.heads as usize;
        ((head / heads) as i32, (head % heads) as i32)
    }

    /// `map_coordinates` by the launch's prepared divisor of the heads (`ItemWalk::heads`): the
    /// persistent flash_ws's, which works them out per item.
    #[inline(always)]
    pub fn walked_map_coordinates(&self, head: usize) -> (i32, i32) {
        let (batch, head) = self.walk.heads.div_rem(head as u32, self.heads);
        (batch as i32, head as i32)
    }

    /// Where query `row` of `head` goes in the output (laid out like Q).
    ///
    /// # Safety
    /// As `q_rows`, for the output; `row < seq_q`.
    #[inline(always)]
    pub unsafe fn out_row<const D: usize>(&self, out: *mut u16, head: usize, row: u32) -> *mut u16 {
        let rows = self.q_rows::<D>(out, head);
        (rows.base as *mut u16).add(row as usize * rows.stride as usize)
    }

    /// Writes the log-sum-exp of query `row` of `head`, when asked for.
    ///
    /// # Safety
    /// `lse`, when not null, must hold `[B, H, S_q]` fp32 (varlen: `[H, total_q]` from the
    /// sequence's first row on); `head < batch_heads`, `row < seq_q`.
    #[inline(always)]
    pub unsafe fn write_lse(&self, head: usize, row: u32, state: &RowState) {
        if !self.lse.is_null() {
            *self.lse.add(self.lse_index(head, row)) = state.log_sum_exp(self.scale_log2);
        }
    }

    /// Query head `head`'s attention sink in base-2 units of the scaled scores (`sinks[head %
    /// H] * log2(e)`), `-inf` without sinks.
    ///
    /// # Safety
    /// `sinks`, when not null, must hold `[H]` fp32.
    #[inline(always)]
    pub unsafe fn sink_log2(&self, head: usize) -> f32 {
        if self.sinks.is_null() {
            f32::NEG_INFINITY
        } else {
            // A u32 remainder by a divisor known to be nonzero: neither a 64-bit remainder (a
            // subroutine in SASS) nor a division-by-zero panic (a call), either of which costs
            // flash_ws a stack frame and serialized `wgmma`s.
            let head = head as u32 % self.heads.max(1);
            *self.sinks.add(head as usize) * core::f32::consts::LOG2_E
        }
    }

    /// `state` with query head `head`'s attention sink in its denominator and the factor of the
    /// output accumulated against `state` (`RowState::with_sink`); `(state, 1)` without sinks.
    ///
    /// # Safety
    /// As `sink_log2`.
    #[inline(always)]
    pub unsafe fn with_sink(&self, head: usize, state: &RowState) -> (RowState, f32) {
        if self.sinks.is_null() {
            (*state, 1.0)
        } else {
            state.with_sink(self.sink_log2(head), self.scale_log2)
        }
    }

    /// Where query `row` of `head` sits in the log-sum-exp: `head * S_q + row` (varlen: rows
    /// of a head are `total_q` apart).
    #[inline(always)]
    pub fn lse_index(&self, head: usize, row: u32) -> usize {
        head * self.varlen.lse_rows as usize + row as usize
    }

    /// Number of `block_n`-key tiles that queries `first_row .. first_row + block_m` need, from
    /// tile 0.
    #[inline(always)]
    pub fn kv_tiles(&self, first_row: u32, block_m: u32, block_n: u32) -> u32 {
        let last_row = (first_row + block_m).min(self.seq_q).max(first_row + 1) - 1;
        self.key_end(last_row).div_ceil(block_n)
    }

    /// The `block_n`-key tiles that queries `first_row .. first_row + block_m` need: (first tile,
    /// tiles), skipping the tiles before a sliding window reaches the first row (`key_start`
    /// grows with the row); `(0, kv_tiles)` without a left bound.
    #[inline(always)]
    pub fn kv_tile_range(&self, first_row: u32, block_m: u32, block_n: u32) -> (u32, u32) {
        let first = self.key_start(first_row) / block_n;
        (
            first,
            self.kv_tiles(first_row, block_m, block_n).saturating_sub(first),
        )
    }
}

/// This block's work item when a causal problem's blocks run longest first: (query head, row
/// block) in the order of `launch::causal_order` with groups of at most `group` of the
/// `batch_heads` heads, `None` for a block past the last head. (The grid's own order is row block
/// x of head `Problem::head`.) `flash_ws` takes its causal items from here; the older families
/// keep the grid's order.
#[inline(always)]
pub fn longest_first_block(batch_heads: u32, group: u32) -> Option<(usize, u32)> {
    use crate::arch;
    let row_blocks = arch::grid_dim_x();
    let y = arch::block_idx_y() + arch::block_idx_z() * arch::grid_dim_y();
    let item = arch::block_idx_x() + y * row_blocks;
    if item >= row_blocks * batch_heads {
        return None;
    }
    let (head, row_block) = causal_order::item(item, row_blocks, batch_heads, group);
    Some((head as usize, row_block))
}

/// The epilogue of one query row: when `row` is inside the problem, the one thread per row that
/// `writes_lse` stores its log-sum-exp, and this thread gets where the row's output goes (in pairs
/// of elements) and the factor that normalises its accumulators; `None` for a row past the end.
///
/// # Safety
/// `out` must be the problem's output tensor and `head` a query head inside it.
#[inline(always)]
pub unsafe fn finish_row<const D: usize>(
    problem: &Problem,
    out: *mut u16,
    head: usize,
    row: u32,
    state: &RowState,
    writes_lse: bool,
) -> Option<(*mut u32, f32)> {
    finish_row_at(problem, head, row, state, writes_lse, |row| {
        problem.out_row::<D>(out, head, row)
    })
}

/// As `finish_row`, the row's output starting at `row_start(row)`.
///
/// # Safety
/// `head` must be a query head of the problem, and `row_start(row)`, for a row inside it, the
/// start of that row of `head` in the problem's output tensor.
#[inline(always)]
pub unsafe fn finish_row_at(
    problem: &Problem,
    head: usize,
    row: u32,
    state: &RowState,
    writes_lse: bool,
    row_start: impl FnOnce(u32) -> *mut u16,
) -> Option<(*mut u32, f32)> {
    if row >= problem.seq_q {
        return None;
    }
    let (state, kept) = problem.with_sink(head, state);
    if writes_lse {
        problem.write_lse(head, row, &state);
    }
    let norm = state.normaliser() * kept;
    Some((row_start(row) as *mut u32, norm))
}

/// The instrumented build's start of the KV loop: thread `recorder` (0, or a warp-specialised
/// kernel's first consumer thread) zeroes the block's barrier counter and reads the SM clock.
/// Returns the clock (meaningful in that thread only), 0 when not counting.
#[inline(always)]
pub fn start_counting<const COUNT: bool>(recorder: u32) -> u64 {
    use crate::arch;
    if COUNT && arch::thread_idx_x() == recorder {
        arch::barrier_counter_store(0);
        arch::clock64()
    } else {
        0
    }
}

/// What the instrumented build records per block, the header of its record
/// (`launch::record`), indexed by the block's linear index: the block barriers thread 0 counted
/// (see `policy::sync`), the KV tiles, the SM clock cycles from `start_counting` to here (the KV
/// loop and the epilogue), and the SM the block ran on. The cycles per tile are what `micro`
/// ranks configurations by. Written by thread `recorder`, the one that called `start_counting`.
///
/// # Safety
/// `barrier_log` must hold `launch::record::WORDS` `u32` per block of the grid.
#[inline(always)]
pub unsafe fn record_barriers(barrier_log: *mut u32, tiles: u32, started: u64, recorder: u32) {
    use crate::arch;
    if arch::thread_idx_x() == recorder {
        let cycles = arch::clock64().wrapping_sub(started).min(u32::MAX as u64) as u32;
        let barriers = arch::barrier_counter_load();
        let record = barrier_log.add(linear_block() * record::WORDS as usize);
        arch::st_global_u32(record, barriers);
        arch::st_global_u32(record.add(1), tiles);
        arch::st_global_u32(record.add(2), cycles);
        arch::st_global_u32(record.add(3), arch::sm_id());
    }
}

/// The instrumented build's timeline: thread `recorder` records the SM clock (its low 32 bits)
/// at point `event` of the block's `item`-th work item (`launch::record`), for the first
/// `TRACED_ITEMS` items; nothing when not counting. Where an item's cycles go beyond its tiles
/// (its start, the wait for its Q, a split item's merge, the epilogue) is read from these.
///
/// # Safety
/// As `record_barriers`.
#[inline(always)]
pub unsafe fn record_event<const COUNT: bool>(barrier_log: *mut u32, item: u32, event: u32, recorder: u32) {
    use crate::arch;
    if COUNT && arch::thread_idx_x() == recorder && item < record::TRACED_ITEMS {
        let word = record::HEADER + item * record::EVENTS + event;
        let at = barrier_log.add(linear_block() * record::WORDS as usize + word as usize);
        arch::st_global_u32(at, arch::clock64() as u32);
    }
}

/// The instrumented build's tile timeline: the first thread of consumer warpgroup `consumer`
/// records the SM clock (its low 32 bits) at point `event` of KV tile `tile` of the block's first
/// work item (`launch::record::TILES_AT`), for the first `TRACED_TILES` tiles of the first
/// `TRACED_CONSUMERS` consumers; nothing when not counting. The store is predicated, not
/// branched around, so that the loop's basic blocks are the production kernel's.
///
/// # Safety
/// As `record_barriers`.
#[inline(always)]
pub unsafe fn record_tile_event<const COUNT: bool>(
    barrier_log: *mut u32,
    item: u32,
    consumer: u32,
    tile: u32,
    event: u32,
) {
    use crate::arch;
    if COUNT {
        let traced = item == 0
            && consumer < record::TRACED_CONSUMERS
            && tile < record::TRACED_TILES
            && arch::thread_idx_x().is_multiple_of(128);
        // In the record whatever is traced (an untraced tile's address is never written).
        let (consumer, tile) = (
            consumer.min(record::TRACED_CONSUMERS - 1),
            tile.min(record::TRACED_TILES - 1),
        );
        let word = record::TILES_AT + (consumer * record::TRACED_TILES + tile) * record::TILE_EVENTS + event;
        let at = barrier_log.add(linear_block() * record::WORDS as usize + word as usize);
        arch::st_global_u32_if(traced, at, arch::clock64() as u32);
    }
}

/// The instrumented build's two recorders for the block's `item`-th work item, as consumer
/// `consumer` works on it: the item's timeline (`record_event`, by thread `recorder`) and its KV
/// tiles' (`record_tile_event`); no code when not counting.
///
/// # Safety
/// As `record_barriers`.
#[inline(always)]
pub unsafe fn item_marks<const COUNT: bool>(
    barrier_log: *mut u32,
    item: u32,
    consumer: u32,
    recorder: u32,
) -> (impl Fn(u32) + Copy, impl Fn(u32, u32) + Copy) {
    (
        // Safety: the caller's contract.
        move |event| unsafe { record_event::<COUNT>(barrier_log, item, event, recorder) },
        // Safety: the caller's contract.
        move |tile, event| unsafe { record_tile_event::<COUNT>(barrier_log, item, consumer, tile, event) },
    )
}

/// The block's linear index in its grid (x fastest, then y, then z).
#[inline(always)]
fn linear_block() -> usize {
    use crate::arch;
    let y = arch::block_idx_y() as usize + arch::block_idx_z() as usize * arch::grid_dim_y() as usize;
    y * arch::grid_dim_x() as usize + arch::block_idx_x() as usize
}
