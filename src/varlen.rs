//! Variable-length batches (docs/kernels/varlen-paged.md): sequences of their own lengths packed
//! one after another, Q and the output as `[total_q, H, D]`, K and V as `[total_k, H_kv, D]`,
//! with `cu_seqlens_q` and `cu_seqlens_k` (int32 prefix sums, `B + 1` entries) saying where each
//! sequence's rows are. Causal masks are aligned bottom-right per sequence, as for dense
//! problems with `S_q != S_k`; the log-sum-exp is `[H, total_q]`.
//!
//! [`VarlenBatch`] is the host's copy of the prefix sums, checked in full when made. The device
//! copies are staged from it at each launch (as the tensor maps are: in the stream's order, in a
//! way a CUDA graph replays) and never handed out, so a kernel only ever sees prefix sums that
//! were checked: taking device-only prefix sums would mean either
//! trusting them (a decreasing entry would send a kernel outside its buffers) or downloading
//! them on every call (a synchronisation the caller did not ask for). [`Gpu::launch_varlen`]
//! runs a variant's `_varlen` entry point (`kernels-rs/src/attention/varlen.rs`): `flash_ws`
//! without `persistent` (Hopper) and `flash_decode` (with its split-KV plan and combine) have one.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, LaunchConfig};

use crate::error::{Error, Result};
use crate::gpu::{check_lens, DeviceBuffer, Entry, Gpu, Kernel, KeySlices, Launch, RawTensors};
use crate::launch::item_walk::{Divisor, ItemWalk};
use crate::launch::LaunchArgs;
use crate::layout::Layout;
use crate::problem::{DType, Params, Shape};
use crate::tma;
use crate::variants::{Family, VariantSpec, VARIANTS};

fn refuse<T>(message: String) -> Result<T> {
    Err(Error::InvalidProblem(format!("varlen: {message}")))
}

/// The prefix sums of a variable-length batch, checked: `B + 1` entries each, starting at 0,
/// never decreasing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VarlenBatch {
    cu_q: Vec<i32>,
    cu_k: Vec<i32>,
}

/// Checks one prefix-sum array: at least two entries, the first 0, none decreasing.
fn check_prefix_sums(name: &str, cu: &[i32]) -> Result<()> {
    if cu.len() < 2 {
        return refuse(format!(
            "{name} has {} entries: need B + 1 >= 2 (a 0, then each sequence's end)",
            cu.len()
        ));
    }
    if cu[0] != 0 {
        return refuse(format!("{name}[0] = {}: the first entry must be 0", cu[0]));
    }
    for (i, pair) in cu.windows(2).enumerate() {
        if pair[1] < pair[0] {
            return refuse(format!(
                "{name} decreases at entry {}: {} after {}",
                i + 1,
                pair[1],
                pair[0]
            ));
        }
    }
    Ok(())
}

/// The largest step of checked (never decreasing) prefix sums: the longest sequence.
fn longest(cu: &[i32]) -> usize {
    cu.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0)
}

impl VarlenBatch {
    /// Checks `cu_seqlens_q` and `cu_seqlens_k`: each `B + 1` entries (the same `B`), the first
    /// 0, none decreasing. One-line refusals name the array and the entry.
    pub fn new(cu_seqlens_q: Vec<i32>, cu_seqlens_k: Vec<i32>) -> Result<VarlenBatch> {
        check_prefix_sums("cu_seqlens_q", &cu_seqlens_q)?;
        check_prefix_sums("cu_seqlens_k", &cu_seqlens_k)?;
        if cu_seqlens_q.len() != cu_seqlens_k.len() {
            return refuse(format!(
                "cu_seqlens_q has {} entries and cu_seqlens_k {}: both must be B + 1",
                cu_seqlens_q.len(),
                cu_seqlens_k.len()
            ));
        }
        Ok(VarlenBatch {
            cu_q: cu_seqlens_q,
            cu_k: cu_seqlens_k,
        })
    }

    /// The batch of sequences with these query and key lengths (`B` each).
    pub fn from_lengths(seqlens_q: &[usize], seqlens_k: &[usize]) -> Result<VarlenBatch> {
        let sums = |name: &str, lens: &[usize]| -> Result<Vec<i32>> {
            let mut cu = vec![0i32];
            for &len in lens {
                let next = i32::try_from(len)
                    .ok()
                    .and_then(|len| cu.last().unwrap().checked_add(len));
                match next {
                    Some(next) => cu.push(next),
                    None => return refuse(format!("{name}: the lengths add up past {}", i32::MAX)),
                }
            }
            Ok(cu)
        };
        VarlenBatch::new(sums("seqlens_q", seqlens_q)?, sums("seqlens_k", seqlens_k)?)
    }

    /// Sequences (`B`).
    pub fn batch(&self) -> usize {
        self.cu_q.len() - 1
    }

    /// `cu_seqlens_q`.
    pub fn cu_seqlens_q(&self) -> &[i32] {
        &self.cu_q
    }

    /// `cu_seqlens_k`.
    pub fn cu_seqlens_k(&self) -> &[i32] {
        &self.cu_k
    }

    /// Query rows in all (`total_q`, the last entry of `cu_seqlens_q`).
    pub fn total_q(&self) -> usize {
        *self.cu_q.last().unwrap() as usize
    }

    /// Key rows in all (`total_k`).
    pub fn total_k(&self) -> usize {
        *self.cu_k.last().unwrap() as usize
    }

    /// Sequence `b`'s query rows, as a range of the packed rows.
    pub fn q_range(&self, b: usize) -> std::ops::Range<usize> {
        self.cu_q[b] as usize..self.cu_q[b + 1] as usize
    }

    /// Sequence `b`'s key rows, as a range of the packed rows.
    pub fn k_range(&self, b: usize) -> std::ops::Range<usize> {
        self.cu_k[b] as usize..self.cu_k[b + 1] as usize
    }

    /// The longest sequence's query count.
    pub fn max_q(&self) -> usize {
        longest(&self.cu_q)
    }

    /// The longest sequence's key count.
    pub fn max_k(&self) -> usize {
        longest(&self.cu_k)
    }

    /// The launch grid's shape: `B` sequences of the longest lengths (at least 1), which sizes
    /// the grid (and `flash_decode`'s split plan and workspace). Validated.
    pub fn grid_shape(&self, heads: usize, heads_kv: usize, head_dim: usize) -> Result<Shape> {
        let shape = Shape {
            batch: self.batch(),
            heads,
            heads_kv,
            seq_q: self.max_q().max(1),
            seq_k: self.max_k().max(1),
            head_dim,
            head_dim_v: head_dim,
        };
        shape.validate()?;
        self.packed_shape(heads, heads_kv, head_dim)?;
        Ok(shape)
    }

    /// The packed tensors as a batch of one: `[1, total_q, H, D]` and `[1, total_k, H_kv, D]`.
    /// Validated (sizes, head counts, head dim); an empty batch of keys is refused (there would
    /// be no key for any query, and the copy engine takes no empty tensor).
    pub fn packed_shape(&self, heads: usize, heads_kv: usize, head_dim: usize) -> Result<Shape> {
        if self.total_k() == 0 && self.total_q() > 0 {
            return refuse("cu_seqlens_k ends at 0: the batch has queries but no keys".into());
        }
        let shape = Shape {
            batch: 1,
            heads,
            heads_kv,
            seq_q: self.total_q().max(1),
            seq_k: self.total_k().max(1),
            head_dim,
            head_dim_v: head_dim,
        };
        shape.validate()?;
        Ok(shape)
    }

    /// Elements of Q (and of the output), of K (and of V), and rows of the log-sum-exp.
    pub fn lens(&self, heads: usize, heads_kv: usize, head_dim: usize) -> (usize, usize, usize) {
        (
            self.total_q() * heads * head_dim,
            self.total_k() * heads_kv * head_dim,
            heads * self.total_q(),
        )
    }

    /// Useful floating-point operations: `4 * H * D * sum_b S_q(b) * S_k(b)` without a mask; with
    /// the causal mask, each query counts the keys it sees (bottom-right aligned).
    pub fn flops(&self, heads: usize, head_dim: usize, causal: bool) -> f64 {
        let pairs: f64 = (0..self.batch())
            .map(|b| {
                let (sq, sk) = (self.q_range(b).len(), self.k_range(b).len());
                if causal {
                    (0..sq).map(|i| sk.saturating_sub(sq - 1 - i) as f64).sum()
                } else {
                    (sq * sk) as f64
                }
            })
            .sum();
        4.0 * heads as f64 * head_dim as f64 * pairs
    }
}

/// The packed Q, K, V, the output (and optionally the log-sum-exp) and the prefix sums on the
/// device: made by [`Gpu::varlen_tensors`], run by [`Gpu::launch_varlen`].
pub struct VarlenTensors {
    q: DeviceBuffer<u16>,
    k: DeviceBuffer<u16>,
    v: DeviceBuffer<u16>,
    out: DeviceBuffer<u16>,
    lse: Option<DeviceBuffer<f32>>,
    /// Each query head's attention sink (`[H]` fp32), read when present.
    sinks: Option<DeviceBuffer<f32>>,
    /// The device copies of `batch`'s prefix sums, staged at each launch.
    cu_q: Option<crate::staging::Staged>,
    cu_k: Option<crate::staging::Staged>,
    batch: VarlenBatch,
    /// Where launches on these tensors are enqueued: the GPU's own stream, or the caller's for
    /// [`varlen_attention_raw`](crate::api::varlen_attention_raw).
    stream: Arc<CudaStream>,
    heads: usize,
    heads_kv: usize,
    head_dim: usize,
    dtype: DType,
    /// flash_ws's tensor maps: the bytes last encoded and their device copy.
    maps: Option<crate::staging::Staged>,
    /// Elements of the output (and of the log-sum-exp) before and after the packed rows that
    /// no kernel may write (`verify`'s guards); 0 unless asked for.
    out_guard: usize,
    lse_guard: usize,
    /// The persistent flash_ws's item table (`varlen_item_table`) and its device copy.
    item_table: Option<(TableKey, crate::staging::Staged)>,
}

/// What a varlen item table was dealt for: the variant, the mask (causal or not) and the grid.
type TableKey = (&'static str, bool, u32);

impl VarlenTensors {
    /// The prefix sums.
    pub fn batch(&self) -> &VarlenBatch {
        &self.batch
    }

    /// `(H, H_kv, D)`.
    pub fn heads(&self) -> (usize, usize, usize) {
        (self.heads, self.heads_kv, self.head_dim)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    lab_pub! {
        /// The output buffer: `[total_q, H, D]`, after and before `guards().0` guard elements when
        /// made with guards.
        fn out(&self) -> &CudaSlice<u16> {
            &self.out
        }
    }

    lab_pub! {
        /// The log-sum-exp buffer (`[H, total_q]`, natural log, between `guards().1` guard floats
        /// when made with guards), once asked for.
        fn lse(&self) -> Option<&CudaSlice<f32>> {
            self.lse.as_deref()
        }
    }

    /// Elements of the guard before and after the output's rows, and the log-sum-exp's.
    pub fn guards(&self) -> (usize, usize) {
        (self.out_guard, self.lse_guard)
    }

    /// The launch grid's shape (`VarlenBatch::grid_shape`).
    pub fn grid_shape(&self) -> Shape {
        self.batch
            .grid_shape(self.heads, self.heads_kv, self.head_dim)
            .expect("checked when the tensors were made")
    }
}

/// The staged prefix sums of a launch (`Gpu::stage_varlen_scratch`).
fn staged_sums(sums: &Option<crate::staging::Staged>) -> Result<&crate::staging::Staged> {
    sums.as_ref()
        .map_or_else(|| refuse("the prefix sums were not staged".into()), Ok)
}

/// Checks packed Q, K and V of these lengths (elements) against `batch` and the heads
/// `(H, H_kv, D)`, which are validated too.
fn check_inputs(
    batch: &VarlenBatch,
    (heads, heads_kv, head_dim): (usize, usize, usize),
    [q, k, v]: [usize; 3],
) -> Result<()> {
    let packed = batch
        .grid_shape(heads, heads_kv, head_dim)
        .and_then(|_| batch.packed_shape(heads, heads_kv, head_dim))?;
    let (q_len, kv_len, _) = batch.lens(heads, heads_kv, head_dim);
    check_lens(
        &[("q", q, q_len), ("k", k, kv_len), ("v", v, kv_len)],
        &format_args!("varlen {packed}"),
    )
}

/// A variant's `_varlen` entry point, resolved by [`Gpu::varlen_kernel`]: only these reach
/// [`Gpu::launch_varlen`], so a kernel that indexes dense tensors never gets packed ones.
#[derive(Clone)]
pub struct VarlenKernel(Kernel);

impl VarlenKernel {
    /// The kernel (variant, symbol, launch facts).
    pub fn kernel(&self) -> &Kernel {
        &self.0
    }
}

/// The scalars of a varlen launch: the packed problem `packed` (one sequence of every query row,
/// `[total, H, D]`, so `seq_major`), `batch` sequences of its grid, `heads_kv` KV heads, `splits`
/// key slices; the item walk's head count (its other fields are the persistent kernel's table).
fn varlen_args(packed: Shape, batch: usize, heads_kv: usize, params: Params, splits: u32) -> LaunchArgs {
    let heads = packed.heads;
    LaunchArgs {
        seq_q: packed.seq_q as u32,
        seq_k: packed.seq_k as u32,
        scale_log2: params.scale_for(packed.head_dim) * std::f32::consts::LOG2_E,
        causal: params.causal as u32,
        kv_group: (heads / heads_kv) as u32,
        heads: heads as u32,
        seq_major: 1,
        batch_heads: (batch * heads) as u32,
        kv_splits: splits,
        ..LaunchArgs::default()
    }
    .masked(params, packed.head_dim)
    .walking(ItemWalk {
        heads: Divisor::new(heads as u32),
        ..ItemWalk::default()
    })
}

/// The variants with a varlen entry point for `head_dim` on architecture `arch` (x10).
pub fn varlen_variants(head_dim: usize, arch: u32) -> impl Iterator<Item = &'static VariantSpec> {
    crate::variants::built(VARIANTS)
        .filter(move |v| v.has_varlen_at(head_dim) && v.min_arch <= arch && v.head_dims.contains(&head_dim))
}

/// The dense dispatch's kernel for causal problems of one wave at `head_dim` on `arch` (the
/// fastest measured), and its grid twin (for a persistent pick without varlen entry points).
/// `None` where the dispatch has no such entry.
fn dense_tiles(head_dim: usize, arch: u32) -> Option<[crate::spec::Spec; 2]> {
    crate::dispatch::DISPATCH
        .iter()
        .find(|e| e.arch <= arch && e.head_dim == head_dim && e.min_waves == 1 && !e.non_causal_only)
        .and_then(|e| VariantSpec::by_name(e.kernel))
        .map(|v| {
            let grid = crate::spec::Spec {
                persistent: false,
                ..v.spec
            };
            [v.spec, grid]
        })
}

/// Work items of the persistent `flash_ws` on `batch` with `heads` query heads: each sequence's
/// row blocks of `block_m` rows, per head.
fn varlen_items(batch: &VarlenBatch, heads: usize, block_m: u32) -> usize {
    let row_blocks: usize = (0..batch.batch())
        .map(|b| batch.q_range(b).len().div_ceil(block_m as usize))
        .sum();
    row_blocks.saturating_mul(heads)
}

/// The item table (`launch::item_walk::table`, varlen entries) of a persistent `flash_ws`
/// launch of `variant` on `batch` with `heads` query heads over `grid` blocks; `None` when there
/// is no block or the table does not count in `u32`.
///
/// The sequences go longest first (by their KV tiles), a sequence's heads one after another, a
/// head's row blocks side by side (causal: those that see the most keys first), each item to the
/// block whose items so far end first (list scheduling, `gpu::dealt_item_table`, by KV tiles
/// and a fixed cost per item). The blocks at work at once then share a few heads' K and V in L2
/// (a first order that spread them over all heads was 3-6% slower: docs/history/perf-notes.md, the
/// host-built row-block list for varlen), and the last items dealt are the shortest.
fn varlen_item_table(
    batch: &VarlenBatch,
    heads: usize,
    variant: &VariantSpec,
    causal: bool,
    grid: u32,
) -> Option<Vec<u32>> {
    use crate::launch::item_walk::table;
    use std::cmp::Reverse;
    let (block_m, block_n) = (variant.block_m as usize, variant.block_n as usize);
    let heads = u32::try_from(heads).ok()?;
    // Per sequence: its bounds and its row blocks with their KV tiles, most tiles first.
    let mut sequences = Vec::with_capacity(batch.batch());
    for b in 0..batch.batch() {
        let (q, k) = (batch.q_range(b), batch.k_range(b));
        let (seq_q, seq_k) = (q.len(), k.len());
        // The sequence as a shape of its own, for the causal mask's rule (`causal_key_end`).
        let sequence = Shape {
            seq_k,
            ..Shape::new(1, 1, seq_q, 64)
        };
        let tiles = |row_block: usize| {
            let last_row = ((row_block + 1) * block_m).min(seq_q) - 1;
            let key_end = if causal {
                sequence.causal_key_end(last_row as u32) as usize
            } else {
                seq_k
            };
            key_end.div_ceil(block_n) as u64
        };
        let mut row_blocks: Vec<(u64, u32)> = (0..seq_q.div_ceil(block_m))
            .map(|rb| Some((tiles(rb), u32::try_from(rb).ok()?)))
            .collect::<Option<_>>()?;
        row_blocks.sort_by_key(|&(tiles, rb)| (Reverse(tiles), rb));
        let bounds = [q.start, seq_q, k.start, seq_k].map(u32::try_from);
        let bounds = [bounds[0].ok()?, bounds[1].ok()?, bounds[2].ok()?, bounds[3].ok()?];
        let work: u64 = row_blocks.iter().map(|&(tiles, _)| tiles).sum();
        sequences.push((work, b, bounds, row_blocks));
    }
    sequences.sort_by_key(|&(work, b, _, _)| (Reverse(work), b));
    let entries = sequences.iter().flat_map(|(_, _, bounds, row_blocks)| {
        (0..heads).flat_map(move |head| {
            row_blocks
                .iter()
                .map(move |&(tiles, row_block)| (table::varlen_entry(head, row_block, *bounds), tiles))
        })
    });
    crate::gpu::dealt_item_table(grid, table::varlen_entries_start(grid), entries)
}

impl Gpu {
    lab_pub! {
        /// The `_varlen` entry point of `variant` for `head_dim` and `dtype`, or its
        /// barrier-counting twin; a variant without one is refused in one line.
        fn varlen_kernel(
            &self,
            variant: &'static VariantSpec,
            head_dim: usize,
            dtype: DType,
            counted: bool,
        ) -> Result<VarlenKernel> {
            let head_dim = variant.entry_head_dim(head_dim);
            let symbol = variant
                .varlen_symbol(head_dim, dtype.name(), counted)
                .ok_or_else(|| {
                    Error::InvalidProblem(format!(
                        "varlen: {} has no variable-length entry point at head dim {head_dim} (flash_decode \
                         and flash_ws without persistent have one, and the persistent 128 x 128 flash_ws \
                         at head dim 128)",
                        variant.name
                    ))
                })?;
            self.kernel_with_symbol(
                variant,
                head_dim,
                dtype,
                symbol,
                crate::gpu::Entry::Varlen,
                counted,
            )
            .map(VarlenKernel)
        }
    }

    /// The library's varlen kernel: `flash_decode` when every sequence's grouped queries fit one
    /// of its tiles (decode steps) or on GPUs without `flash_ws`, else the first non-persistent
    /// `flash_ws` variant.
    pub fn choose_varlen(
        &self,
        batch: &VarlenBatch,
        heads: usize,
        heads_kv: usize,
        head_dim: usize,
    ) -> Result<&'static VariantSpec> {
        let group = heads / heads_kv.max(1);
        let few_rows = group * batch.max_q() <= 32;
        // A padded head dim (`kernel_head_dim`) runs on flash_ws's tiles of the head dim that
        // pads it.
        let tiles = crate::problem::kernel_head_dim(head_dim).unwrap_or(head_dim);
        let padded = tiles != head_dim;
        // The dense dispatch's pick where it has varlen entry points, else its grid twin, else
        // the family's first compiled variant.
        let dense = dense_tiles(tiles, self.arch);
        let rank =
            |v: &&VariantSpec| dense.map_or(2, |specs| specs.iter().position(|s| *s == v.spec).unwrap_or(2));
        let pick = |family: Family| {
            varlen_variants(tiles, self.arch)
                .filter(|v| v.family == family)
                .min_by_key(rank)
        };
        let chosen = if padded {
            pick(Family::FlashWs)
        } else if few_rows {
            pick(Family::FlashDecode).or_else(|| pick(Family::FlashWs))
        } else {
            pick(Family::FlashWs).or_else(|| pick(Family::FlashDecode))
        };
        chosen.ok_or_else(|| {
            Error::InvalidProblem(format!(
                "varlen: no compiled variant takes variable-length batches at head dim {head_dim} on sm_{}",
                self.arch
            ))
        })
    }

    lab_pub! {
        /// Uploads packed Q (`[total_q, H, D]`), K and V (`[total_k, H_kv, D]`, the bits of
        /// `dtype`), the prefix sums of `batch`, and a NaN-poisoned output. Every length is checked
        /// against `batch` first.
        fn varlen_tensors(
            &self,
            batch: VarlenBatch,
            heads: (usize, usize, usize),
            dtype: DType,
            (q, k, v): (&[u16], &[u16], &[u16]),
        ) -> Result<VarlenTensors> {
            self.varlen_tensors_guarded(batch, heads, dtype, (q, k, v), false)
        }
    }

    lab_pub! {
        /// As [`Gpu::varlen_tensors`]; with `guard`, the output and log-sum-exp buffers get a
        /// NaN-poisoned guard before and after their rows (one packed row, `H * D` elements, for the
        /// output; 64 floats for the log-sum-exp), which no launch may change: `verify` checks them.
        fn varlen_tensors_guarded(
            &self,
            batch: VarlenBatch,
            heads: (usize, usize, usize),
            dtype: DType,
            (q, k, v): (&[u16], &[u16], &[u16]),
            guard: bool,
        ) -> Result<VarlenTensors> {
            check_inputs(&batch, heads, [q.len(), k.len(), v.len()])?;
            let (out_guard, lse_guard) = if guard { (heads.0 * heads.2, 64) } else { (0, 0) };
            // An empty buffer cannot be allocated; a batch with no query has nothing to launch.
            let upload = |data: &[u16]| -> Result<DeviceBuffer<u16>> {
                let data = if data.is_empty() { &[0u16][..] } else { data };
                Ok(DeviceBuffer::owned(self.upload(data)?))
            };
            let poison = vec![crate::gpu::nan(dtype); q.len().max(1) + 2 * out_guard];
            let buffers = [upload(q)?, upload(k)?, upload(v)?, upload(&poison)?];
            let mut tensors = self.assemble_varlen(self.stream(), batch, heads, dtype, buffers, None);
            (tensors.out_guard, tensors.lse_guard) = (out_guard, lse_guard);
            Ok(tensors)
        }
    }

    /// The typed API's packed tensors (`api::varlen_attention`) as [`VarlenTensors`], lent
    /// without a copy; the prefix sums are uploaded from `batch`, so a kernel sees only checked
    /// ones. The inputs' lengths are checked here, every length again at each launch.
    ///
    /// # Safety
    /// `raw`'s buffers satisfy the contract of [`Gpu::tensors_from_raw`] on this GPU's own
    /// stream for as long as the returned tensors live.
    pub(crate) unsafe fn varlen_tensors_lent(
        &self,
        batch: VarlenBatch,
        heads: (usize, usize, usize),
        dtype: DType,
        raw: RawTensors,
    ) -> Result<VarlenTensors> {
        // Safety: this function's contract.
        unsafe { self.varlen_tensors_on(self.stream(), batch, heads, dtype, raw) }
    }

    /// As [`Gpu::varlen_tensors_lent`], for launches on `stream` (the caller's, of this GPU's
    /// context: checked here and at each launch).
    ///
    /// # Safety
    /// `raw`'s buffers satisfy the contract of [`Gpu::tensors_from_raw`] on `stream` for as long
    /// as the returned tensors live.
    pub(crate) unsafe fn varlen_tensors_on(
        &self,
        stream: &Arc<CudaStream>,
        batch: VarlenBatch,
        heads: (usize, usize, usize),
        dtype: DType,
        raw: RawTensors,
    ) -> Result<VarlenTensors> {
        self.check_stream(stream)?;
        check_inputs(&batch, heads, [raw.q.len, raw.k.len, raw.v.len])?;
        // Safety: this function's contract; the borrowed buffers are never freed here.
        let borrow = |raw| unsafe { DeviceBuffer::borrowed(stream, raw) };
        let buffers = [borrow(raw.q), borrow(raw.k), borrow(raw.v), borrow(raw.out)];
        // Safety: as above.
        let lse = raw.lse.map(|lse| unsafe { DeviceBuffer::borrowed(stream, lse) });
        if let Some(sinks) = raw.sinks.filter(|sinks| sinks.len != heads.0) {
            return Err(Error::Length {
                what: "sinks",
                expected: heads.0,
                actual: sinks.len,
                shape: format!("varlen, {} query heads", heads.0),
            });
        }
        // Safety: as above.
        let sinks = raw
            .sinks
            .map(|sinks| unsafe { DeviceBuffer::borrowed(stream, sinks) });
        let mut tensors = self.assemble_varlen(stream, batch, heads, dtype, buffers, lse);
        tensors.sinks = sinks;
        Ok(tensors)
    }

    /// The tensors around Q, K, V and the output (`buffers`, in that order), on `stream`, with
    /// no guards.
    fn assemble_varlen(
        &self,
        stream: &Arc<CudaStream>,
        batch: VarlenBatch,
        (heads, heads_kv, head_dim): (usize, usize, usize),
        dtype: DType,
        [q, k, v, out]: [DeviceBuffer<u16>; 4],
        lse: Option<DeviceBuffer<f32>>,
    ) -> VarlenTensors {
        VarlenTensors {
            q,
            k,
            v,
            out,
            lse,
            sinks: None,
            cu_q: None,
            cu_k: None,
            batch,
            stream: stream.clone(),
            heads,
            heads_kv,
            head_dim,
            dtype,
            maps: None,
            out_guard: 0,
            lse_guard: 0,
            item_table: None,
        }
    }

    lab_pub! {
        /// Makes the next varlen launches also write each row's log-sum-exp (NaN-poisoned here).
        fn request_varlen_lse(&self, tensors: &mut VarlenTensors) -> Result<()> {
            let rows = tensors.heads * tensors.batch.total_q();
            let poison = vec![f32::NAN; rows.max(1) + 2 * tensors.lse_guard];
            tensors.lse = Some(DeviceBuffer::owned(tensors.stream.clone_htod(&poison)?));
            Ok(())
        }
    }

    lab_pub! {
        /// Refills the output with NaN.
        fn poison_varlen(&self, tensors: &mut VarlenTensors) -> Result<()> {
            let poison = vec![crate::gpu::nan(tensors.dtype); tensors.out.len()];
            tensors.stream.memcpy_htod(&poison, &mut *tensors.out)?;
            Ok(())
        }
    }

    lab_pub! {
        /// The length in `u32` of the barrier log a counted launch of `kernel` on `tensors` writes
        /// (`gpu::RECORD_WORDS` per block of its grid).
        fn varlen_barrier_log_len(&self, kernel: &VarlenKernel, tensors: &VarlenTensors) -> Result<usize> {
            let (config, _) = self.varlen_grid(&kernel.0, tensors)?;
            Ok(crate::gpu::RECORD_WORDS * crate::gpu::blocks(&config))
        }
    }

    /// The grid (and, for `flash_decode`, the split plan) of `kernel` on `tensors`: for a
    /// persistent `flash_ws`, a block per item up to the blocks resident at once.
    fn varlen_grid(
        &self,
        kernel: &Kernel,
        tensors: &VarlenTensors,
    ) -> Result<(LaunchConfig, Option<crate::decode::Plan>)> {
        let shape = tensors.grid_shape();
        if kernel.variant().persistent {
            let items = varlen_items(&tensors.batch, tensors.heads, kernel.variant().block_m);
            let blocks = u32::try_from(items).unwrap_or(u32::MAX);
            let config = crate::gpu::launch_config(kernel, shape);
            let grid = blocks.min(config.grid_dim.0).max(1);
            return Ok((
                LaunchConfig {
                    grid_dim: (grid, 1, 1),
                    ..config
                },
                None,
            ));
        }
        match self.decode_plan(kernel, shape, crate::decode::DecodeOptions::default())? {
            Some(plan) => Ok((
                plan.grid(kernel.variant().threads(), kernel.smem_bytes()),
                Some(plan),
            )),
            None => Ok((crate::gpu::launch_config(kernel, shape), None)),
        }
    }

    /// Encodes flash_ws's maps of the packed tensors (batches of one of `total_q` and
    /// `total_k` rows) and copies them to the GPU unless unchanged.
    fn prepare_varlen_maps(&self, variant: &VariantSpec, tensors: &mut VarlenTensors) -> Result<()> {
        let packed = tensors
            .batch
            .packed_shape(tensors.heads, tensors.heads_kv, tensors.head_dim)?;
        let q_map = tma::MapGeometry::q(Layout::Bshd, packed, variant.block_m);
        let kv_map = tma::MapGeometry::kv(Layout::Bshd, packed, variant.block_n);
        let out_map = tma::MapGeometry::out(Layout::Bshd, packed);
        let stream = tensors.stream.clone();
        let mut bytes = Vec::with_capacity(tma::MAPS * tma::MAP_BYTES);
        // The output's rows start after its guard (none unless asked for), as the kernel's
        // output pointer does (`launch_varlen`).
        let out_guard_bytes = 2 * tensors.out_guard as u64;
        for (geometry, buffer, skip) in [
            (q_map, &tensors.q, 0),
            (kv_map, &tensors.k, 0),
            (kv_map, &tensors.v, 0),
            (out_map, &tensors.out, out_guard_bytes),
        ] {
            let (address, _sync) = buffer.device_ptr(&stream);
            bytes.extend_from_slice(&geometry.encode(
                tensors.dtype,
                address + skip,
                self.options.l2_promotion,
            )?);
        }
        self.stage(&stream, bytes, &mut tensors.maps)
    }

    /// Refuses tensors of another device (the launch goes on their stream, which must be of
    /// this GPU's context, where its kernels and their pointers mean something) and a kernel of
    /// another dtype or head dim.
    fn check_varlen_kernel(&self, kernel: &Kernel, tensors: &VarlenTensors) -> Result<()> {
        if self.check_stream(&tensors.stream).is_err() {
            return refuse(
                "the tensors were made for another device: launch them with a Gpu of that device".into(),
            );
        }
        if kernel.dtype() != tensors.dtype {
            return refuse(format!(
                "kernel {} does not take {}",
                kernel.symbol(),
                tensors.dtype
            ));
        }
        crate::gpu::check_head_dim(kernel, tensors.grid_shape())
    }

    /// Stages the item table a persistent `flash_ws` varlen launch of `kernel` over `grid` blocks
    /// walks: dealt once per variant, mask and grid from the batch's checked prefix sums, and
    /// copied in the stream's order.
    fn stage_varlen_item_table(
        &self,
        kernel: &Kernel,
        tensors: &mut VarlenTensors,
        causal: bool,
        grid: u32,
    ) -> Result<()> {
        let table_key = (kernel.variant().name, causal, grid);
        let (bytes, mut staged) = match tensors.item_table.take() {
            Some((key, staged)) if key == table_key => (staged.bytes().to_vec(), Some(staged)),
            cached => {
                let table = varlen_item_table(&tensors.batch, tensors.heads, kernel.variant(), causal, grid)
                    .ok_or_else(|| Error::InvalidProblem("varlen: too many work items".into()))?;
                (
                    crate::staging::words_bytes(&table),
                    cached.map(|(_, staged)| staged),
                )
            }
        };
        self.stage(&tensors.stream, bytes, &mut staged)?;
        tensors.item_table = staged.map(|staged| (table_key, staged));
        Ok(())
    }

    /// Stages what a launch of `kernel` over `grid` blocks reads besides the tensors, in their
    /// stream's order: the prefix sums (from the checked host copy), and for `flash_ws` its
    /// tensor maps and, when persistent, its item table.
    fn stage_varlen_scratch(
        &self,
        kernel: &Kernel,
        tensors: &mut VarlenTensors,
        causal: bool,
        grid: u32,
    ) -> Result<()> {
        if kernel.variant().family == Family::FlashWs {
            self.prepare_varlen_maps(kernel.variant(), tensors)?;
        }
        if kernel.variant().persistent {
            self.stage_varlen_item_table(kernel, tensors, causal, grid)?;
        }
        let stream = tensors.stream.clone();
        let words = |sums: &[i32]| sums.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.stage(&stream, words(&tensors.batch.cu_q), &mut tensors.cu_q)?;
        self.stage(&stream, words(&tensors.batch.cu_k), &mut tensors.cu_k)
    }

    lab_pub! {
        /// Launches `kernel` on the packed tensors (asynchronously, on their stream); for a
        /// `flash_decode` kernel that splits the keys, then the combine. `barrier_log`, for a counted
        /// kernel, gets four `u32` per block. A batch with no query launches nothing.
        fn launch_varlen(
            &self,
            kernel: &VarlenKernel,
            tensors: &mut VarlenTensors,
            params: Params,
            barrier_log: Option<&mut CudaSlice<u32>>,
        ) -> Result<()> {
            let kernel = &kernel.0;
            params.validate()?;
            self.check_varlen_kernel(kernel, tensors)?;
            let (heads, heads_kv, d) = (tensors.heads, tensors.heads_kv, tensors.head_dim);
            let shape = tensors.grid_shape();
            let packed = tensors.batch.packed_shape(heads, heads_kv, d)?;
            let (config, plan) = self.varlen_grid(kernel, tensors)?;
            let blocks = crate::gpu::blocks(&config);
            let runs = tensors.batch.total_q() > 0;
            let uses_maps = kernel.variant().family == Family::FlashWs;
            let persistent = kernel.variant().persistent;
            if runs {
                self.stage_varlen_scratch(kernel, tensors, params.causal, config.grid_dim.0)?;
            }
            let slices = KeySlices {
                splits: plan.map_or(1, |p| p.splits),
                floats: plan.map_or(0, |p| p.workspace_floats(shape)),
                counters: plan.map_or(0, |p| p.counters()),
            };
            let stream = tensors.stream.clone();
            let slice_buffers = self.slice_buffers(slices, &stream)?;
            // Every buffer holds what the prefix sums imply (re-checked before each launch).
            let (q_len, kv_len, lse_len) = tensors.batch.lens(heads, heads_kv, d);
            let b1 = tensors.batch.batch() + 1;
            let (out_guard, lse_guard) = (tensors.out_guard, tensors.lse_guard);
            let VarlenTensors {
                q,
                k,
                v,
                out,
                lse,
                sinks,
                cu_q,
                cu_k,
                maps,
                item_table,
                ..
            } = tensors;
            let args = varlen_args(packed, shape.batch, heads_kv, params, slices.splits).padded(d, kernel.head_dim());
            let problem = format!("varlen {packed}");
            let mut launch = Launch::kernel(self, kernel, Entry::Varlen, &stream, config, &problem, args);
            launch.reads("q", q, Some(q_len.max(1)), |a, p| a.q = p);
            launch.reads("k", k, Some(kv_len.max(1)), |a, p| a.k = p);
            launch.reads("v", v, Some(kv_len.max(1)), |a, p| a.v = p);
            // The output and the LSE have `out_guard` and `lse_guard` elements on both sides (none
            // unless asked for: `VarlenTensors::with_guards`); the kernel gets their first row.
            launch.writes("out", out, Some(q_len.max(1) + 2 * out_guard), |a, p| a.out = p);
            launch.args_mut().out += 2 * out_guard as u64;
            if let Some(lse) = lse.as_deref_mut() {
                launch.writes("lse", lse, Some(lse_len.max(1) + 2 * lse_guard), |a, p| a.lse = p);
                launch.args_mut().lse += 4 * lse_guard as u64;
            }
            launch.sinks(sinks.as_deref(), heads);
            if let Some(log) = barrier_log {
                launch.writes(
                    "barrier log",
                    log,
                    crate::gpu::RECORD_WORDS.checked_mul(blocks),
                    |a, p| a.barrier_log = p,
                );
            }
            if !runs {
                // No query rows: nothing to launch, but the buffers are checked all the same.
                return launch.check();
            }
            // The prefix sums on the device are the host copy that `VarlenBatch::new` checked (0
            // first, never decreasing, B + 1 entries, the last equal to the packed rows), staged
            // above and private.
            launch.staged("cu_seqlens_q", staged_sums(cu_q)?, 4 * b1, |a, p| {
                a.cu_seqlens_q = p
            });
            launch.staged("cu_seqlens_k", staged_sums(cu_k)?, 4 * b1, |a, p| {
                a.cu_seqlens_k = p
            });
            if uses_maps {
                let maps = maps
                    .as_ref()
                    .map_or_else(|| refuse("the tensor maps were not prepared".into()), Ok)?;
                launch.staged("tensor maps", maps, tma::MAPS * tma::MAP_BYTES, |a, p| {
                    a.tensor_maps = p
                });
            }
            if persistent {
                // The item table, dealt for this grid from the same checked prefix sums (its bounds
                // are checked again per item by the kernel).
                let (_, table) = item_table
                    .as_ref()
                    .map_or_else(|| refuse("the item table was not prepared".into()), Ok)?;
                launch.staged("item table", table, table.len(), |a, p| a.walk_table = p);
            }
            slice_buffers.bind(&mut launch, slices, &stream);
            launch.enqueue()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On Hopper a varlen batch takes the dense dispatch's one-wave pick itself at head dim 128,
    /// the persistent kernel, and its grid twin at 64, where the persistent one has no varlen
    /// entry point.
    #[test]
    fn varlen_takes_the_dense_pick_or_its_grid_twin() {
        for (head_dim, persistent) in [(64, false), (128, true)] {
            let [pick, grid] = dense_tiles(head_dim, 90).expect("a one-wave entry");
            let named = |spec| {
                varlen_variants(head_dim, 90)
                    .find(|v| v.spec == spec)
                    .map(|v| v.name)
            };
            let ps = persistent.then_some("flash_ws_m128_n128_s2_pp_ov_ps_mbarrier");
            assert_eq!(named(pick), ps, "{head_dim}");
            assert_eq!(
                named(grid),
                Some("flash_ws_m128_n128_s2_pp_ov_mbarrier"),
                "{head_dim}"
            );
        }
    }

    /// The persistent kernel's table: every (sequence, head, row block) once, with its
    /// sequence's bounds, the blocks' offsets in order, the longest sequence dealt first.
    #[test]
    fn the_varlen_item_table_deals_every_item_once() {
        use crate::launch::item_walk::table;
        let batch = VarlenBatch::from_lengths(&[300, 0, 1000, 1], &[300, 5, 900, 2000]).unwrap();
        let variant = VariantSpec::by_name("flash_ws_m128_n128_s2_pp_ov_ps_mbarrier").unwrap();
        let (heads, grid) = (3, 5);
        for causal in [false, true] {
            let words = varlen_item_table(&batch, heads, variant, causal, grid).unwrap();
            let items = varlen_items(&batch, heads, 128);
            assert_eq!(items, (3 + 8 + 1) * 3, "sequence 1 has no rows");
            assert_eq!(words.len(), table::varlen_words(grid, items as u32));
            let offsets = &words[..=grid as usize];
            assert!(offsets.windows(2).all(|w| w[0] <= w[1]) && offsets[grid as usize] as usize == items);
            let entries: Vec<&[u32]> = words[table::varlen_entries_start(grid) as usize..]
                .chunks(table::VARLEN_ENTRY_WORDS as usize)
                .collect();
            let mut seen: Vec<[u32; 3]> = entries
                .iter()
                .map(|e| {
                    let b = (0..batch.batch())
                        .find(|&b| batch.q_range(b).start as u32 == e[2] && !batch.q_range(b).is_empty())
                        .unwrap();
                    let (q, k) = (batch.q_range(b), batch.k_range(b));
                    assert_eq!(
                        e[2..6],
                        [q.start as u32, q.len() as u32, k.start as u32, k.len() as u32]
                    );
                    assert!(e[1] * 128 < e[3] && e[0] < heads as u32);
                    [b as u32, e[0], e[1]]
                })
                .collect();
            // Block 0's first item is the longest sequence's (sequence 2, 8 row blocks).
            assert_eq!(entries[0][3], 1000);
            seen.sort();
            let mut expected = Vec::new();
            for (b, row_blocks) in [(0, 3), (2, 8), (3, 1)] {
                for head in 0..3 {
                    for rb in 0..row_blocks {
                        expected.push([b, head, rb]);
                    }
                }
            }
            expected.sort();
            assert_eq!(seen, expected, "causal {causal}");
        }
        assert!(varlen_item_table(&batch, heads, variant, false, 0).is_none());
    }

    /// Every refusal is one line naming varlen.
    fn refused<T: std::fmt::Debug>(result: Result<T>) -> String {
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains("varlen") && message.lines().count() == 1,
            "{message}"
        );
        message
    }

    #[test]
    fn well_formed_prefix_sums_are_accepted() {
        let b = VarlenBatch::new(vec![0, 3, 3, 10], vec![0, 5, 6, 6]).unwrap();
        assert_eq!((b.batch(), b.total_q(), b.total_k()), (3, 10, 6));
        assert_eq!((b.max_q(), b.max_k()), (7, 5));
        assert_eq!((b.q_range(2), b.k_range(1)), (3..10, 5..6));
        assert_eq!(b, VarlenBatch::from_lengths(&[3, 0, 7], &[5, 1, 0]).unwrap());
    }

    #[test]
    fn decreasing_prefix_sums_are_refused() {
        assert!(refused(VarlenBatch::new(vec![0, 4, 2], vec![0, 1, 2]))
            .contains("cu_seqlens_q decreases at entry 2"));
        assert!(refused(VarlenBatch::new(vec![0, 1, 2], vec![0, 3, 1])).contains("cu_seqlens_k decreases"));
    }

    #[test]
    fn a_first_entry_other_than_zero_is_refused() {
        assert!(refused(VarlenBatch::new(vec![1, 4], vec![0, 1])).contains("cu_seqlens_q[0] = 1"));
        assert!(refused(VarlenBatch::new(vec![0, 4], vec![-2, 1])).contains("cu_seqlens_k[0] = -2"));
    }

    #[test]
    fn batch_sizes_must_agree_and_be_at_least_one() {
        assert!(refused(VarlenBatch::new(vec![0, 1, 2], vec![0, 1])).contains("both must be B + 1"));
        assert!(refused(VarlenBatch::new(vec![0], vec![0])).contains("B + 1 >= 2"));
        assert!(refused(VarlenBatch::new(vec![], vec![0, 1])).contains("cu_seqlens_q has 0 entries"));
    }

    #[test]
    fn lengths_past_int32_are_refused() {
        let huge = i32::MAX as usize;
        assert!(refused(VarlenBatch::from_lengths(&[huge, 1], &[1, 1])).contains("past"));
        assert!(refused(VarlenBatch::from_lengths(&[1], &[huge + 1])).contains("past"));
    }

    #[test]
    fn shapes_are_validated() {
        let b = VarlenBatch::from_lengths(&[3, 0, 7], &[5, 1, 0]).unwrap();
        let grid = b.grid_shape(8, 2, 128).unwrap();
        assert_eq!((grid.batch, grid.seq_q, grid.seq_k, grid.heads_kv), (3, 7, 5, 2));
        let packed = b.packed_shape(8, 2, 128).unwrap();
        assert_eq!((packed.batch, packed.seq_q, packed.seq_k), (1, 10, 6));
        assert_eq!(b.lens(8, 2, 128), (10 * 8 * 128, 6 * 2 * 128, 80));
        assert!(b.grid_shape(8, 3, 128).is_err(), "heads_kv must divide heads");
        assert!(b.grid_shape(8, 2, 100).is_err(), "head dim");
        assert!(b.grid_shape(8, 2, 96).is_ok(), "a padded head dim");
        let no_keys = VarlenBatch::from_lengths(&[3], &[0]).unwrap();
        assert!(refused(no_keys.packed_shape(8, 8, 128)).contains("no keys"));
        // No query at all is fine (nothing to launch).
        assert!(VarlenBatch::from_lengths(&[0, 0], &[0, 0])
            .unwrap()
            .packed_shape(8, 8, 64)
            .is_ok());
    }

    #[test]
    fn useful_flops_count_each_sequence_and_the_causal_mask() {
        let b = VarlenBatch::from_lengths(&[2, 3], &[2, 5]).unwrap();
        // Non-causal: 2*2 + 3*5 = 19 pairs. Causal, bottom-right: (1+2) + (3+4+5) = 15.
        assert_eq!(b.flops(1, 1, false), 4.0 * 19.0);
        assert_eq!(b.flops(2, 64, true), 4.0 * 2.0 * 64.0 * 15.0);
        let dense = Shape::new(2, 4, 16, 64);
        let same = VarlenBatch::from_lengths(&[16, 16], &[16, 16]).unwrap();
        assert_eq!(same.flops(4, 64, false), dense.flops(false));
    }
}
