//! Decoding against a paged KV cache (docs/kernels/varlen-paged.md): K and V as `[num_blocks,
//! block_size, H_kv, D]`, a block table `[B, max_blocks]` (int32) naming the page of each
//! `block_size` keys of each sequence, and each sequence's own length `seqlens_k` `[B]` (int32).
//! Queries are `[B, H, S_q, D]` (or `[B, S_q, H, D]`), the same `S_q` for every sequence, causal
//! masks aligned bottom-right per sequence.
//!
//! [`PagedKv`] is the host's description, checked in full before anything reaches a GPU (table
//! entries inside the cache, lengths inside the table, block sizes); [`PagedTensors`] holds it on
//! the device beside Q, the caches and the output; [`Gpu::launch_paged`] runs a `flash_decode`
//! variant's paged entry point (`kernels-rs/src/attention/paged.rs`) with the split-KV plan and
//! combine of `decode.rs`, the plan sized by the longest sequence.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use crate::error::{Error, Result};
use crate::gpu::{check_lens, DeviceBuffer, Entry, Gpu, Kernel, KeySlices, Launch, RawTensors};
use crate::launch::LaunchArgs;
use crate::layout::Layout;
use crate::problem::{DType, Params, Shape};
use crate::tma;
use crate::variants::{Family, VariantSpec};

/// Smallest and largest keys per page the kernels take (powers of two in between).
pub const BLOCK_SIZES: std::ops::RangeInclusive<usize> = 16..=256;

/// A paged KV cache's index: which page holds which keys of which sequence. The pages
/// themselves (K and V) live in [`PagedTensors`]. Entries of the table past a sequence's last
/// page are never read and may hold anything (`-1` is customary).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PagedKv {
    block_size: usize,
    num_blocks: usize,
    max_blocks: usize,
    block_table: Vec<i32>,
    seqlens_k: Vec<i32>,
}

fn refuse<T>(message: String) -> Result<T> {
    Err(Error::InvalidProblem(format!("paged KV cache: {message}")))
}

impl PagedKv {
    /// The index of a cache of `num_blocks` pages of `block_size` keys: `block_table` is
    /// `[B, max_blocks]` row-major (`B = seqlens_k.len()`), `seqlens_k` each sequence's key
    /// count. Refuses (one line each) a block size that is not a power of two in
    /// [`BLOCK_SIZES`], an empty batch, a table that is not `B` equal rows, a negative length or
    /// one beyond its table row, and a table entry of a used page outside `0..num_blocks`.
    pub fn new(
        block_size: usize,
        num_blocks: usize,
        block_table: Vec<i32>,
        seqlens_k: Vec<i32>,
    ) -> Result<PagedKv> {
        if !block_size.is_power_of_two() || !BLOCK_SIZES.contains(&block_size) {
            return refuse(format!(
                "block size {block_size} is not a power of two from {} to {}",
                BLOCK_SIZES.start(),
                BLOCK_SIZES.end()
            ));
        }
        let batch = seqlens_k.len();
        if batch == 0 {
            return refuse("seqlens_k is empty: no sequence".into());
        }
        if block_table.is_empty() || !block_table.len().is_multiple_of(batch) {
            return refuse(format!(
                "the block table's {} entries are not {batch} equal rows (one per sequence)",
                block_table.len()
            ));
        }
        if num_blocks == 0 || num_blocks > i32::MAX as usize {
            return refuse(format!("{num_blocks} pages: need 1 to {}", i32::MAX));
        }
        let max_blocks = block_table.len() / batch;
        let capacity = max_blocks.saturating_mul(block_size);
        for (b, &len) in seqlens_k.iter().enumerate() {
            if len < 0 || len as usize > capacity {
                return refuse(format!(
                    "seqlens_k[{b}] = {len} is outside 0..={capacity} (max_blocks {max_blocks} x block size {block_size})"
                ));
            }
            let used = (len as usize).div_ceil(block_size);
            for (j, &page) in block_table[b * max_blocks..][..used].iter().enumerate() {
                if page < 0 || page as usize >= num_blocks {
                    return refuse(format!(
                        "block_table[{b}, {j}] = {page} is outside the cache's {num_blocks} pages"
                    ));
                }
            }
        }
        Ok(PagedKv {
            block_size,
            num_blocks,
            max_blocks,
            block_table,
            seqlens_k,
        })
    }

    /// Sequences (`B`).
    pub fn batch(&self) -> usize {
        self.seqlens_k.len()
    }

    /// Keys per page.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Pages in the cache.
    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    /// Entries per block-table row.
    pub fn max_blocks(&self) -> usize {
        self.max_blocks
    }

    /// The block table, `[B, max_blocks]` row-major.
    pub fn block_table(&self) -> &[i32] {
        &self.block_table
    }

    /// Each sequence's key count.
    pub fn seqlens_k(&self) -> &[i32] {
        &self.seqlens_k
    }

    /// The longest sequence's key count.
    pub fn max_len(&self) -> usize {
        self.seqlens_k.iter().map(|&l| l as usize).max().unwrap_or(0)
    }

    /// Keys held by the sequences together: what a decode step reads once per KV head.
    pub fn total_len(&self) -> usize {
        self.seqlens_k.iter().map(|&l| l as usize).sum()
    }

    /// The problem's [`Shape`] for queries `[B, heads, seq_q, head_dim]` and `heads_kv` KV heads:
    /// `seq_k` is the longest sequence's length (at least 1), which sizes the split-KV plan.
    /// Validated, and refused when the batch differs from the cache's.
    pub fn shape(&self, heads: usize, heads_kv: usize, seq_q: usize, head_dim: usize) -> Result<Shape> {
        let shape = Shape {
            batch: self.batch(),
            heads,
            heads_kv,
            seq_q,
            seq_k: self.max_len().max(1),
            head_dim,
            head_dim_v: head_dim,
        };
        shape.validate()?;
        // Only flash_decode reads pages, at its compiled head dims.
        shape.require_compiled_head_dim()?;
        self.cache_len(shape)?;
        Ok(shape)
    }

    /// Elements of K (and of V): `num_blocks * block_size * H_kv * D`; refused past what memory
    /// addresses or when `shape`'s batch is not the cache's.
    pub fn cache_len(&self, shape: Shape) -> Result<usize> {
        if shape.batch != self.batch() {
            return refuse(format!(
                "{} sequences in seqlens_k, the queries have batch {}",
                self.batch(),
                shape.batch
            ));
        }
        [self.block_size, shape.heads_kv, shape.head_dim]
            .iter()
            .try_fold(self.num_blocks, |n, &d| n.checked_mul(d))
            .filter(|&n| n.checked_mul(4).is_some_and(|b| b <= isize::MAX as usize))
            .map_or_else(
                || {
                    refuse(format!(
                        "{} pages of {shape} are more than memory addresses",
                        self.num_blocks
                    ))
                },
                Ok,
            )
    }

    /// Sequence `b`'s keys (or values) of `cache` (`[num_blocks, block_size, heads_kv, D]`),
    /// gathered through the table into a contiguous `[heads_kv, seqlens_k[b], D]`.
    pub fn gather(&self, cache: &[f32], b: usize, heads_kv: usize, head_dim: usize) -> Vec<f32> {
        let len = self.seqlens_k[b] as usize;
        let mut out = Vec::with_capacity(heads_kv * len * head_dim);
        for h in 0..heads_kv {
            for key in 0..len {
                let page = self.block_table[b * self.max_blocks + key / self.block_size] as usize;
                let slot = page * self.block_size + key % self.block_size;
                out.extend_from_slice(&cache[(slot * heads_kv + h) * head_dim..][..head_dim]);
            }
        }
        out
    }
}

/// Q, the paged K and V caches, the output (and optionally the log-sum-exp) on the device, with
/// the block table and lengths: made by [`Gpu::paged_tensors`], run by [`Gpu::launch_paged`].
pub struct PagedTensors {
    q: DeviceBuffer<u16>,
    k: DeviceBuffer<u16>,
    v: DeviceBuffer<u16>,
    out: DeviceBuffer<u16>,
    lse: Option<DeviceBuffer<f32>>,
    /// Each query head's attention sink (`[H]` fp32), read when present.
    sinks: Option<DeviceBuffer<f32>>,
    /// The device copies of `cache`'s table and lengths, staged at each launch.
    block_table: Option<crate::staging::Staged>,
    seqlens_k: Option<crate::staging::Staged>,
    cache: PagedKv,
    /// Where launches on these tensors are enqueued: the GPU's own stream, or the caller's for
    /// [`paged_attention_raw`](crate::paged_attention_raw).
    stream: Arc<CudaStream>,
    shape: Shape,
    dtype: DType,
    layout: Layout,
    /// The copy-engine variants' tensor maps of the K and V caches, as last encoded.
    maps: Option<crate::staging::Staged>,
}

impl PagedTensors {
    /// The problem's shape (`seq_k`: the longest sequence).
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The cache's index.
    pub fn cache(&self) -> &PagedKv {
        &self.cache
    }

    lab_pub! {
        /// The output, laid out as Q.
        fn out(&self) -> &CudaSlice<u16> {
            &self.out
        }
    }

    lab_pub! {
        /// The log-sum-exp (`[B, H, S_q]`, natural log), once asked for.
        fn lse(&self) -> Option<&CudaSlice<f32>> {
            self.lse.as_deref()
        }
    }

    /// Bytes of K and V a decode step reads: each sequence's keys once per KV head.
    pub fn kv_bytes(&self) -> usize {
        2 * self.cache.total_len() * self.shape.heads_kv * self.shape.head_dim * self.dtype.bytes()
    }
}

/// The parameters of a paged launch of `shape` split `splits` ways over `cache`.
fn paged_args(shape: Shape, params: Params, splits: u32, cache: &PagedKv, layout: Layout) -> LaunchArgs {
    LaunchArgs {
        seq_q: shape.seq_q as u32,
        seq_k: shape.seq_k as u32,
        scale_log2: params.scale_for(shape.head_dim) * std::f32::consts::LOG2_E,
        causal: params.causal as u32,
        kv_group: shape.kv_group() as u32,
        heads: shape.heads as u32,
        seq_major: (layout == Layout::Bshd) as u32,
        batch_heads: (shape.batch * shape.heads) as u32,
        kv_splits: splits,
        block_size: cache.block_size as u32,
        max_blocks: cache.max_blocks as u32,
        // Not the persistent flash_ws: no item walk.
        ..LaunchArgs::default()
    }
    .masked(params, shape.head_dim)
}

/// A table or the lengths as the launch staged them.
fn staged(table: &Option<crate::staging::Staged>) -> Result<&crate::staging::Staged> {
    table
        .as_ref()
        .map_or_else(|| refuse("the block table was not staged".into()), Ok)
}

/// Checks Q and the caches of these lengths (elements) against `shape` (made by
/// [`PagedKv::shape`]) and `cache`.
fn check_inputs(shape: Shape, cache: &PagedKv, [q, k, v]: [usize; 3]) -> Result<()> {
    shape.validate()?;
    shape.require_compiled_head_dim()?;
    if shape.seq_k != cache.max_len().max(1) {
        return refuse(format!(
            "{shape}: seq_k must be the longest sequence ({}); build the shape with PagedKv::shape",
            cache.max_len()
        ));
    }
    let cache_len = cache.cache_len(shape)?;
    check_lens(
        &[
            ("q", q, shape.q_len()),
            ("k cache", k, cache_len),
            ("v cache", v, cache_len),
        ],
        &shape,
    )
}

/// A `flash_decode` variant's paged entry point, resolved by [`Gpu::paged_kernel`]: only these
/// reach [`Gpu::launch_paged`], so a contiguous kernel never reads a paged cache.
#[derive(Clone)]
pub struct PagedKernel(Kernel);

impl PagedKernel {
    /// The kernel (variant, symbol, launch facts).
    pub fn kernel(&self) -> &Kernel {
        &self.0
    }
}

impl Gpu {
    lab_pub! {
        /// The paged entry point of `variant` (a `flash_decode` one) for `head_dim` and `dtype`, or
        /// its barrier-counting twin.
        fn paged_kernel(
            &self,
            variant: &'static VariantSpec,
            head_dim: usize,
            dtype: DType,
            counted: bool,
        ) -> Result<PagedKernel> {
            let symbol = variant
                .paged_symbol(head_dim, dtype.name(), counted)
                .ok_or_else(|| {
                    Error::InvalidProblem(format!(
                        "{} has no paged entry point: only flash_decode variants read a paged KV cache",
                        variant.name
                    ))
                })?;
            self.kernel_with_symbol(
                variant,
                head_dim,
                dtype,
                symbol,
                crate::gpu::Entry::Paged,
                counted,
            )
            .map(PagedKernel)
        }
    }

    /// The library's paged kernel for `shape` (made by [`PagedKv::shape`]) on pages of
    /// `block_size` keys: a `flash_decode` variant ([`crate::decode::paged_variant`]), or a
    /// one-line refusal where none runs.
    pub fn choose_paged(&self, shape: Shape, block_size: usize) -> Result<&'static VariantSpec> {
        crate::decode::paged_variant(shape, self.arch, block_size, self.sm_count).ok_or_else(|| {
            Error::InvalidProblem(format!(
                "paged KV cache: no flash_decode variant at head dim {} on sm_{}",
                shape.head_dim, self.arch
            ))
        })
    }

    lab_pub! {
        /// Uploads Q (`layout`), the K and V caches (`[num_blocks, block_size, H_kv, D]`, the bits of
        /// `dtype`), the table and lengths, and a NaN-poisoned output. Every length is checked
        /// against `shape` (made by [`PagedKv::shape`]) and `cache` first.
        #[allow(clippy::too_many_arguments)]
        fn paged_tensors(
            &self,
            layout: Layout,
            shape: Shape,
            dtype: DType,
            q: &[u16],
            k_cache: &[u16],
            v_cache: &[u16],
            cache: PagedKv,
        ) -> Result<PagedTensors> {
            check_inputs(shape, &cache, [q.len(), k_cache.len(), v_cache.len()])?;
            let poison = vec![crate::gpu::nan(dtype); shape.q_len()];
            let upload =
                |data: &[u16]| -> Result<DeviceBuffer<u16>> { Ok(DeviceBuffer::owned(self.upload(data)?)) };
            let buffers = [upload(q)?, upload(k_cache)?, upload(v_cache)?, upload(&poison)?];
            Ok(self.assemble_paged(self.stream(), (layout, shape, dtype), cache, buffers, None))
        }
    }

    /// The typed API's query tensor, caches and output (`api::paged_attention`) as
    /// [`PagedTensors`], lent without a copy; the table and lengths are uploaded from `cache`, so
    /// a kernel sees only checked ones. The inputs' lengths are checked here, every length again
    /// at each launch.
    ///
    /// # Safety
    /// `raw`'s buffers (K and V being the caches) satisfy the contract of
    /// [`Gpu::tensors_from_raw`] on this GPU's own stream for as long as the returned tensors
    /// live.
    pub(crate) unsafe fn paged_tensors_lent(
        &self,
        layout: Layout,
        shape: Shape,
        dtype: DType,
        cache: PagedKv,
        raw: RawTensors,
    ) -> Result<PagedTensors> {
        // Safety: this function's contract.
        unsafe { self.paged_tensors_on(self.stream(), (layout, shape, dtype), cache, raw) }
    }

    /// As [`Gpu::paged_tensors_lent`], for launches on `stream` (the caller's, of this GPU's
    /// context: checked here and at each launch).
    ///
    /// # Safety
    /// `raw`'s buffers (K and V being the caches) satisfy the contract of
    /// [`Gpu::tensors_from_raw`] on `stream` for as long as the returned tensors live.
    pub(crate) unsafe fn paged_tensors_on(
        &self,
        stream: &Arc<CudaStream>,
        (layout, shape, dtype): (Layout, Shape, DType),
        cache: PagedKv,
        raw: RawTensors,
    ) -> Result<PagedTensors> {
        self.check_stream(stream)?;
        check_inputs(shape, &cache, [raw.q.len, raw.k.len, raw.v.len])?;
        // Safety: this function's contract; the borrowed buffers are never freed here.
        let borrow = |raw| unsafe { DeviceBuffer::borrowed(stream, raw) };
        let buffers = [borrow(raw.q), borrow(raw.k), borrow(raw.v), borrow(raw.out)];
        // Safety: as above.
        let lse = raw.lse.map(|lse| unsafe { DeviceBuffer::borrowed(stream, lse) });
        // Safety: as above.
        if let Some(sinks) = raw.sinks.filter(|sinks| sinks.len != shape.heads) {
            return Err(Error::Length {
                what: "sinks",
                expected: shape.heads,
                actual: sinks.len,
                shape: shape.to_string(),
            });
        }
        let sinks = raw
            .sinks
            .map(|sinks| unsafe { DeviceBuffer::borrowed(stream, sinks) });
        let mut tensors = self.assemble_paged(stream, (layout, shape, dtype), cache, buffers, lse);
        tensors.sinks = sinks;
        Ok(tensors)
    }

    /// The tensors around Q, the caches and the output (`buffers`, in that order), on `stream`.
    fn assemble_paged(
        &self,
        stream: &Arc<CudaStream>,
        (layout, shape, dtype): (Layout, Shape, DType),
        cache: PagedKv,
        [q, k, v, out]: [DeviceBuffer<u16>; 4],
        lse: Option<DeviceBuffer<f32>>,
    ) -> PagedTensors {
        PagedTensors {
            q,
            k,
            v,
            out,
            lse,
            sinks: None,
            block_table: None,
            seqlens_k: None,
            cache,
            stream: stream.clone(),
            shape,
            dtype,
            layout,
            maps: None,
        }
    }

    lab_pub! {
        /// Makes the next paged launches also write each row's log-sum-exp (NaN-poisoned here).
        fn request_paged_lse(&self, tensors: &mut PagedTensors) -> Result<()> {
            let rows = tensors.shape.batch * tensors.shape.heads * tensors.shape.seq_q;
            tensors.lse = Some(DeviceBuffer::owned(
                tensors.stream.clone_htod(&vec![f32::NAN; rows])?,
            ));
            Ok(())
        }
    }

    /// Refuses tensors of another device (the launch goes on their stream, as in
    /// `launch_varlen`) and a kernel of another dtype or head dim.
    fn check_paged_kernel(&self, kernel: &Kernel, tensors: &PagedTensors) -> Result<()> {
        if self.check_stream(&tensors.stream).is_err() {
            return refuse(
                "the tensors were made for another device: launch them with a Gpu of that device".into(),
            );
        }
        if kernel.dtype() != tensors.dtype || kernel.head_dim() != tensors.shape.head_dim {
            return refuse(format!(
                "kernel {} does not take {} at head dim {}",
                kernel.symbol(),
                tensors.dtype,
                tensors.shape.head_dim
            ));
        }
        debug_assert_eq!(kernel.variant().family, Family::FlashDecode);
        Ok(())
    }

    lab_pub! {
        /// Launches `kernel` on the paged tensors (asynchronously, on their stream): the
        /// split-KV plan of `decode.rs` for the longest sequence, then the combine when it splits.
        /// `barrier_log`, for a counted kernel, gets four `u32` per block.
        fn launch_paged(
            &self,
            kernel: &PagedKernel,
            tensors: &mut PagedTensors,
            params: Params,
            barrier_log: Option<&mut CudaSlice<u32>>,
        ) -> Result<()> {
            let (kernel, shape) = (&kernel.0, tensors.shape);
            params.validate()?;
            self.check_paged_kernel(kernel, tensors)?;
            let plan = self
                .decode_plan(kernel, shape, crate::decode::DecodeOptions::default())?
                .expect("a paged kernel is a flash_decode one");
            let config = plan.grid(kernel.variant().threads(), kernel.smem_bytes());
            let blocks = crate::gpu::blocks(&config);
            let uses_maps = kernel.variant().copy_engine();
            self.stage_paged_scratch(kernel, tensors)?;
            let slices = KeySlices {
                splits: plan.splits,
                floats: plan.workspace_floats(shape),
                counters: plan.counters(),
            };
            let stream = tensors.stream.clone();
            let slice_buffers = self.slice_buffers(slices, &stream)?;
            let cache_len = tensors.cache.cache_len(shape)?;
            let PagedTensors {
                q,
                k,
                v,
                out,
                lse,
                sinks,
                block_table,
                seqlens_k,
                cache,
                layout,
                maps,
                ..
            } = tensors;
            let args = paged_args(shape, params, plan.splits, cache, *layout);
            let problem = shape;
            let mut launch = Launch::kernel(self, kernel, Entry::Paged, &stream, config, &problem, args);
            // Q, the output and the LSE hold what the shape implies, the caches `num_blocks *
            // block_size * H_kv * D` elements; the table and lengths on the device are the host copy
            // that `PagedKv::new` checked (every page a sequence uses is inside the cache, every
            // length inside its table row), staged above and private.
            launch.reads("q", q, Some(shape.q_len()), |a, p| a.q = p);
            launch.reads("k cache", k, Some(cache_len), |a, p| a.k = p);
            launch.reads("v cache", v, Some(cache_len), |a, p| a.v = p);
            launch.writes("out", out, Some(shape.q_len()), |a, p| a.out = p);
            let table_bytes = 4 * cache.block_table.len();
            launch.staged("block table", staged(block_table)?, table_bytes, |a, p| {
                a.block_table = p
            });
            launch.staged("seqlens_k", staged(seqlens_k)?, 4 * shape.batch, |a, p| {
                a.seqlens_k = p
            });
            launch.lse(lse.as_deref_mut(), shape.lse_len());
            launch.sinks(sinks.as_deref(), shape.heads);
            if let Some(log) = barrier_log {
                launch.writes(
                    "barrier log",
                    log,
                    crate::gpu::RECORD_WORDS.checked_mul(blocks),
                    |a, p| a.barrier_log = p,
                );
            }
            if uses_maps {
                // The caches' maps (every box inside them, by the copy engine's own bounds).
                let maps = maps
                    .as_ref()
                    .ok_or_else(|| Error::InvalidProblem("the tensor maps were not prepared".into()))?;
                launch.staged("tensor maps", maps, tma::MAPS * tma::MAP_BYTES, |a, p| {
                    a.tensor_maps = p
                });
            }
            slice_buffers.bind(&mut launch, slices, &stream);
            launch.enqueue()
        }
    }

    /// Stages what a launch of `kernel` reads besides the tensors, in their stream's order: the
    /// block table and lengths (from the checked host copy) and, through the copy engine, the
    /// caches' maps (in boxes of a page, or of a tile).
    fn stage_paged_scratch(&self, kernel: &Kernel, tensors: &mut PagedTensors) -> Result<()> {
        if kernel.variant().copy_engine() {
            self.prepare_paged_maps(kernel.variant(), tensors)?;
        }
        let stream = tensors.stream.clone();
        let words = |values: &[i32]| values.iter().flat_map(|w| w.to_le_bytes()).collect();
        let cache = &tensors.cache;
        self.stage(&stream, words(&cache.block_table), &mut tensors.block_table)?;
        self.stage(&stream, words(&cache.seqlens_k), &mut tensors.seqlens_k)
    }

    /// Encodes the maps of the K and V caches for `variant`'s tiles (`tma::MapGeometry::paged`,
    /// in the K and V places of the map buffer; Q's and the output's places are unused and
    /// zero) and copies them to the GPU unless unchanged.
    fn prepare_paged_maps(&self, variant: &VariantSpec, tensors: &mut PagedTensors) -> Result<()> {
        let (cache, shape) = (&tensors.cache, tensors.shape);
        let slots = cache.num_blocks * cache.block_size;
        let box_rows = cache.block_size.min(variant.block_n as usize) as u32;
        let geometry = tma::MapGeometry::paged(slots, shape.heads_kv, shape.head_dim, box_rows);
        let stream = tensors.stream.clone();
        let mut bytes = vec![0u8; tma::MAPS * tma::MAP_BYTES];
        for (place, buffer) in [(tma::MAP_K, &tensors.k), (tma::MAP_V, &tensors.v)] {
            let (address, _sync) = buffer.device_ptr(&stream);
            bytes[place * tma::MAP_BYTES..][..tma::MAP_BYTES].copy_from_slice(&geometry.encode(
                tensors.dtype,
                address,
                self.options.l2_promotion,
            )?);
        }
        self.stage(&stream, bytes, &mut tensors.maps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(block_size: usize, num_blocks: usize, table: &[i32], lens: &[i32]) -> Result<PagedKv> {
        PagedKv::new(block_size, num_blocks, table.to_vec(), lens.to_vec())
    }

    /// Every refusal is one line naming the paged cache.
    fn refused(result: Result<PagedKv>) -> String {
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains("paged KV cache") && message.lines().count() == 1,
            "{message}"
        );
        message
    }

    #[test]
    fn a_well_formed_cache_is_accepted() {
        let c = cache(16, 4, &[3, 1, -1, 0, 2, 9], &[20, 1]).unwrap();
        assert_eq!(
            (c.batch(), c.max_blocks(), c.max_len(), c.total_len()),
            (2, 3, 20, 21)
        );
        // Entries past a sequence's last page (-1, 9) are never read: not checked.
        assert!(cache(256, 1, &[0], &[0]).is_ok(), "an empty sequence");
        assert!(cache(64, 2, &[0, 1], &[128]).is_ok(), "a full table row");
    }

    #[test]
    fn block_sizes_are_powers_of_two_from_16_to_256() {
        for bad in [0, 8, 24, 48, 512, 1000] {
            assert!(refused(cache(bad, 4, &[0], &[1])).contains("block size"));
        }
        for good in [16, 32, 64, 128, 256] {
            assert!(cache(good, 4, &[0], &[1]).is_ok());
        }
    }

    #[test]
    fn table_entries_outside_the_cache_are_refused() {
        assert!(refused(cache(16, 4, &[0, 4], &[17])).contains("block_table[0, 1] = 4"));
        assert!(refused(cache(16, 4, &[0, -1], &[17])).contains("block_table[0, 1] = -1"));
        assert!(refused(cache(16, 4, &[0, 1, 2, 7], &[1, 17])).contains("block_table[1, 1] = 7"));
    }

    #[test]
    fn lengths_beyond_the_table_or_negative_are_refused() {
        assert!(refused(cache(16, 4, &[0, 1], &[33])).contains("seqlens_k[0] = 33"));
        assert!(refused(cache(16, 4, &[0, 1], &[-1])).contains("seqlens_k[0] = -1"));
    }

    #[test]
    fn shapes_of_the_table_and_batch_must_agree() {
        assert!(refused(cache(16, 4, &[0, 1, 2], &[1, 1])).contains("equal rows"));
        assert!(refused(cache(16, 4, &[], &[1])).contains("equal rows"));
        assert!(refused(cache(16, 4, &[0], &[])).contains("empty"));
        assert!(refused(cache(16, 0, &[0], &[0])).contains("pages"));
        let c = cache(16, 4, &[0, 1], &[5, 16]).unwrap();
        let message = c.cache_len(Shape::new(3, 8, 1, 128)).unwrap_err().to_string();
        assert!(
            message.contains("batch 3") && message.lines().count() == 1,
            "{message}"
        );
        let shape = c.shape(8, 2, 1, 128).unwrap();
        assert_eq!((shape.batch, shape.seq_k, shape.heads_kv), (2, 16, 2));
        assert_eq!(c.cache_len(shape).unwrap(), 4 * 16 * 2 * 128);
        assert!(c.shape(8, 3, 1, 128).is_err(), "heads_kv must divide heads");
        assert!(c.shape(8, 2, 1, 96).is_err(), "head dim");
        let huge = cache(256, i32::MAX as usize, &[0], &[1]).unwrap();
        assert!(huge.cache_len(Shape::new(1, 1 << 20, 1, 128)).is_err());
    }

    #[test]
    fn gather_follows_the_table() {
        // Two pages of 16 keys, one KV head of dim 1: key i of page p holds 100 p + i.
        let k: Vec<f32> = (0..2 * 16).map(|i| (100 * (i / 16) + i % 16) as f32).collect();
        let c = cache(16, 2, &[1, 0], &[20]).unwrap();
        let gathered = c.gather(&k, 0, 1, 1);
        let expected: Vec<f32> = (0..16)
            .map(|i| (100 + i) as f32)
            .chain((0..4).map(|i| i as f32))
            .collect();
        assert_eq!(gathered, expected);
    }
}
