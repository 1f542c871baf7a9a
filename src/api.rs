//! A typed front end in the spirit of PyTorch's `scaled_dot_product_attention` and
//! FlashAttention's `flash_attn_func`: device tensors that know their element type, dims and
//! layout, and one builder call.
//!
//! ```no_run
//! use flashrs::api::{attention, f16, DeviceTensor};
//! use flashrs::{Gpu, Layout};
//!
//! # fn main() -> Result<(), flashrs::Error> {
//! let gpu = Gpu::open(0)?;
//! let dims = [2, 8, 512, 64]; // [B, H, S, D]
//! let host = vec![f16::from_f32(0.5); 2 * 8 * 512 * 64];
//! let q = DeviceTensor::from_host(&gpu, &host, dims, Layout::Bhsd)?;
//! let k = DeviceTensor::from_host(&gpu, &host, dims, Layout::Bhsd)?;
//! let v = DeviceTensor::from_host(&gpu, &host, dims, Layout::Bhsd)?;
//! let out = attention(&q, &k, &v).causal(true).run(&gpu)?;
//! let out: Vec<f16> = out.to_host()?;
//! # Ok(())
//! # }
//! ```
//!
//! Every check between the tensors (layout, batch, head dim, heads, key/value dims, the
//! log-sum-exp's dims) happens before anything is launched and fails with a typed [`Error`].
//! The launch itself goes through [`Gpu::forward`], so the library's dispatch, its per-launch
//! buffer checks and its kernels are the same as for [`crate::Tensors`]; the tensors are lent to
//! it without a copy.
//!
//! Mixing element types does not compile:
//!
//! ```compile_fail,E0308
//! # use flashrs::api::{bf16, f16, DeviceTensor};
//! # fn mix(q: &DeviceTensor<f16>, kv: &DeviceTensor<bf16>) {
//! let _ = flashrs::api::attention(q, kv, kv);
//! # }
//! ```

#![warn(missing_docs)]

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{sys, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

use crate::error::{Error, Result};
use crate::gpu::{check_alignment, Gpu, RawBuffer, RawTensors, TENSOR_ALIGN};
use crate::layout::{Layout, Strides};
use crate::paged::PagedKv;
use crate::problem::{DType, Params, Shape, Window};
use crate::variants::VariantSpec;
use crate::varlen::VarlenBatch;

pub use half::{bf16, f16};

mod sealed {
    /// What a launch needs of an element type; outside the crate it cannot be named, so no type
    /// other than the two below can become an [`Element`](super::Element).
    pub trait Sealed:
        cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy + Send + Sync + 'static
    {
    }

    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

// The kernels and `RawTensors` count Q, K, V and the output in 16-bit elements.
const _: () = assert!(std::mem::size_of::<f16>() == 2 && std::mem::size_of::<bf16>() == 2);

/// An element type of Q, K, V and the output: [`f16`](struct@f16) or [`bf16`] (sealed, since
/// the kernels exist for those two only). Accumulation is fp32 either way.
pub trait Element: sealed::Sealed {
    /// The kernels' name for this type.
    const DTYPE: DType;
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
}

impl Element for bf16 {
    const DTYPE: DType = DType::Bf16;
}

/// A tensor of `T` on the GPU, with its logical dims `[B, H, S, D]` (batch, heads, sequence,
/// head dim) and the [`Layout`] its elements are stored in. The dims are always given in that
/// logical order: a [`Layout::Bshd`] tensor of dims `[2, 8, 512, 64]` holds 8 heads of 512
/// positions, stored position-major.
///
/// The buffer's length matches the dims by construction; the fields are private, so it stays so.
pub struct DeviceTensor<T: Element> {
    data: CudaSlice<T>,
    dims: [usize; 4],
    layout: Layout,
}

impl<T: Element> DeviceTensor<T> {
    /// Copies `data`, laid out as `layout`, to a new tensor on `gpu`. `data` must hold exactly
    /// `B * H * S * D` elements (else [`Error::Length`]) and every dim must be at least 1.
    pub fn from_host(gpu: &Gpu, data: &[T], dims: [usize; 4], layout: Layout) -> Result<Self> {
        Ok(DeviceTensor {
            data: upload_checked(gpu, data, &dims, || format!("{dims:?} {layout}"))?,
            dims,
            layout,
        })
    }

    /// A tensor of zeros on `gpu`, for instance an output for [`Attention::run_into`].
    pub fn zeros(gpu: &Gpu, dims: [usize; 4], layout: Layout) -> Result<Self> {
        let elements = elements(&dims, layout)?;
        Ok(DeviceTensor {
            data: gpu.stream().alloc_zeros(elements)?,
            dims,
            layout,
        })
    }

    /// Copies the tensor back, in its own layout, after the work already enqueued on it.
    pub fn to_host(&self) -> Result<Vec<T>> {
        Ok(self.data.stream().clone_dtoh(&self.data)?)
    }

    /// The logical dims `[B, H, S, D]`, whatever the layout.
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }

    /// How the elements are ordered in memory.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The stream the tensor's memory is ordered on (its GPU's).
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        self.data.stream()
    }

    fn operand(&self) -> Operand {
        Operand::contiguous(self.dims, self.layout)
    }
}

impl<T: Element> std::fmt::Debug for DeviceTensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceTensor<{}>({:?}, {})", T::DTYPE, self.dims, self.layout)
    }
}

/// A tensor of `T` on the GPU with `N` dims, stored row-major with no layout choice: what the
/// varlen and paged calls take beside [`DeviceTensor`]s, under the names that say which dims they
/// mean ([`PackedTensor`], [`PagedCache`]). The buffer's length matches the dims by
/// construction; the fields are private, so it stays so.
pub struct DeviceArray<T: Element, const N: usize> {
    data: CudaSlice<T>,
    dims: [usize; N],
}

/// A packed batch of sequences on the GPU, `[total, H, D]`: every sequence's rows one after
/// another (heads inside rows), as [`varlen_attention`] takes Q, K, V and gives its output.
/// Where each sequence starts is the [`VarlenBatch`]'s business.
pub type PackedTensor<T> = DeviceArray<T, 3>;

/// A paged K or V cache on the GPU, `[num_blocks, block_size, H_kv, D]`: pages of `block_size`
/// keys, each key's heads side by side, as [`paged_attention`] takes them. Which page holds which
/// keys of which sequence is the [`PagedKv`]'s business.
pub type PagedCache<T> = DeviceArray<T, 4>;

impl<T: Element> PackedTensor<T> {
    /// A view of this packed tensor for [`varlen_attention_raw`](crate::varlen_attention_raw),
    /// borrowing it.
    pub fn view(&self) -> crate::PackedView<'_, T> {
        let (ptr, _record) = self.data.device_ptr(self.data.stream());
        // Safety: the view borrows this tensor, whose buffer holds its dims' elements of `T`,
        // contiguous, in its GPU's context.
        unsafe { crate::PackedView::from_raw(ptr, self.dims) }
    }
}

impl<T: Element> PagedCache<T> {
    /// A view of this cache for [`paged_attention_raw`](crate::paged_attention_raw), borrowing it.
    pub fn view(&self) -> crate::CacheView<'_, T> {
        let (ptr, _record) = self.data.device_ptr(self.data.stream());
        // Safety: the view borrows this cache, whose buffer holds its dims' elements of `T`,
        // contiguous, in its GPU's context.
        unsafe { crate::CacheView::from_raw(ptr, self.dims) }
    }
}

impl<T: Element, const N: usize> DeviceArray<T, N> {
    /// Copies `data` (the product of `dims` elements, else [`Error::Length`]; every dim at
    /// least 1) to a new tensor on `gpu`.
    pub fn from_host(gpu: &Gpu, data: &[T], dims: [usize; N]) -> Result<Self> {
        Ok(DeviceArray {
            data: upload_checked(gpu, data, &dims, || format!("{dims:?}"))?,
            dims,
        })
    }

    /// A tensor of zeros on `gpu`, for instance an output for [`Attention::run_into`].
    pub fn zeros(gpu: &Gpu, dims: [usize; N]) -> Result<Self> {
        let elements = checked_elements(&dims, || format!("{dims:?}"))?;
        Ok(DeviceArray {
            data: gpu.stream().alloc_zeros(elements)?,
            dims,
        })
    }

    /// Copies the tensor back after the work already enqueued on it.
    pub fn to_host(&self) -> Result<Vec<T>> {
        Ok(self.data.stream().clone_dtoh(&self.data)?)
    }

    /// The dims, outermost first.
    pub fn dims(&self) -> [usize; N] {
        self.dims
    }
}

impl<T: Element, const N: usize> std::fmt::Debug for DeviceArray<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceArray<{}>({:?})", T::DTYPE, self.dims)
    }
}

/// Each query row's log-sum-exp of its scaled scores (natural log, fp32) on the GPU, `[B, H,
/// S_q]`: what a backward pass or a combine of partial attentions needs. Filled by a call given
/// it through [`Attention::lse`]; a row that sees no key gets `-inf`.
pub struct LseBuffer {
    data: CudaSlice<f32>,
    dims: [usize; 3],
}

impl LseBuffer {
    /// A buffer for `[B, H, S_q]` rows on `gpu`, filled with NaN until a call writes it.
    pub fn new(gpu: &Gpu, dims: [usize; 3]) -> Result<Self> {
        let rows = checked_elements(&dims, || format!("{dims:?}"))?;
        Ok(LseBuffer {
            data: gpu.stream().clone_htod(&vec![f32::NAN; rows])?,
            dims,
        })
    }

    /// A buffer for the queries `q`: its `[B, H, S_q]`.
    pub fn for_queries<T: Element>(gpu: &Gpu, q: &DeviceTensor<T>) -> Result<Self> {
        let [batch, heads, seq_q, _] = q.dims;
        LseBuffer::new(gpu, [batch, heads, seq_q])
    }

    /// A buffer for the packed queries `q` (`[total_q, H, D]`) of a [`varlen_attention`] call:
    /// `[1, H, total_q]`, each head's rows in packed order.
    pub fn for_packed<T: Element>(gpu: &Gpu, q: &PackedTensor<T>) -> Result<Self> {
        let [total_q, heads, _] = q.dims;
        LseBuffer::new(gpu, [1, heads, total_q])
    }

    /// Copies the rows back, after the work already enqueued on them.
    pub fn to_host(&self) -> Result<Vec<f32>> {
        Ok(self.data.stream().clone_dtoh(&self.data)?)
    }

    /// `[B, H, S_q]`.
    pub fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// The stream the buffer's memory is ordered on (its GPU's).
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        self.data.stream()
    }

    /// The device address of the first row, for the raw path's views
    /// ([`crate::backward::BackwardViews::lse`]).
    pub fn device_address(&self) -> u64 {
        let (ptr, _record) = self.data.device_ptr(self.data.stream());
        ptr
    }
}

impl std::fmt::Debug for LseBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LseBuffer({:?})", self.dims)
    }
}

/// Attention sinks on the GPU (GPT-OSS's): one logit per query head, in the units of the scaled
/// scores (`scale * q.k`), that joins each of the head's rows' softmax denominators and adds no
/// value: `out_i = sum_j e^(s_ij) v_j / (e^sink + sum_j e^(s_ij))`, and the log-sum-exp includes
/// it. Given to a call by [`Attention::sinks`]; `-inf` is no sink for that head.
pub struct Sinks {
    data: CudaSlice<f32>,
}

impl Sinks {
    /// Copies one logit per query head to `gpu`. A NaN or `+inf` logit is an error.
    pub fn from_host(gpu: &Gpu, logits: &[f32]) -> Result<Self> {
        if let Some(bad) = logits.iter().find(|x| x.is_nan() || **x == f32::INFINITY) {
            return Err(Error::InvalidProblem(format!(
                "attention sinks must be finite or -inf, got {bad}"
            )));
        }
        if logits.is_empty() {
            return Err(Error::InvalidProblem(
                "attention sinks: one per query head, got none".into(),
            ));
        }
        Ok(Sinks {
            data: gpu.stream().clone_htod(logits)?,
        })
    }

    /// The logits, after the work already enqueued on them.
    pub fn to_host(&self) -> Result<Vec<f32>> {
        Ok(self.data.stream().clone_dtoh(&self.data)?)
    }

    /// Query heads they are for.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Never true (a `Sinks` holds at least one logit); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Refuses sinks made for another number of query heads than `heads`.
    fn check(&self, heads: usize, shape: &dyn std::fmt::Display) -> Result<()> {
        match self.len() == heads {
            true => Ok(()),
            false => Err(Error::Length {
                what: "sinks",
                expected: heads,
                actual: self.len(),
                shape: shape.to_string(),
            }),
        }
    }
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sinks({})", self.len())
    }
}

/// Starts an attention call `softmax(scale * Q K^T) V` on `q` (`[B, H, S_q, D]`) with keys `k`
/// and values `v` (both `[B, H_kv, S_k, D]`). `H_kv` dividing `H` is grouped-query attention
/// (multi-query when 1); `S_q` and `S_k` may differ. All three share one layout, which the
/// output takes too. Configure the call with the builder's methods and launch it with
/// [`Attention::run`].
pub fn attention<'a, T: Element>(
    q: &'a DeviceTensor<T>,
    k: &'a DeviceTensor<T>,
    v: &'a DeviceTensor<T>,
) -> Attention<'a, T> {
    Attention::new(DenseInputs { q, k, v })
}

/// Starts an attention call on a packed batch of sequences of their own lengths, as
/// FlashAttention's `flash_attn_varlen_func` takes them: `q` is `[total_q, H, D]`, `k` and `v`
/// `[total_k, H_kv, D]`, and `batch` holds `cu_seqlens_q` and `cu_seqlens_k` (checked when it was
/// made: `B + 1` entries each, 0 first, none decreasing), whose last entries must be `total_q`
/// and `total_k`. Each sequence attends to its own keys only; a causal mask is aligned
/// bottom-right per sequence. The output is `[total_q, H, D]`, the log-sum-exp `[1, H, total_q]`
/// ([`LseBuffer::for_packed`]). The prefix sums are copied to the GPU at each run from `batch`,
/// so the kernels only ever see checked ones.
///
/// Element types do not mix here either:
///
/// ```compile_fail,E0308
/// # use flashrs::api::{bf16, f16, PackedTensor};
/// # fn mix(q: &PackedTensor<f16>, kv: &PackedTensor<bf16>, batch: &flashrs::VarlenBatch) {
/// let _ = flashrs::api::varlen_attention(q, kv, kv, batch);
/// # }
/// ```
pub fn varlen_attention<'a, T: Element>(
    q: &'a PackedTensor<T>,
    k: &'a PackedTensor<T>,
    v: &'a PackedTensor<T>,
    batch: &'a VarlenBatch,
) -> Attention<'a, T, VarlenInputs<'a, T>> {
    Attention::new(VarlenInputs { q, k, v, batch })
}

/// Starts an attention call against a paged KV cache, as FlashAttention's
/// `flash_attn_with_kvcache` takes one: `q` is `[B, H, S_q, D]` (either layout), `k_cache` and
/// `v_cache` are `[num_blocks, block_size, H_kv, D]`, and `cache` holds the block table
/// (`[B, max_blocks]`) and each sequence's key count (checked when it was made: every page a
/// sequence uses inside the cache, every length inside its table row). Causal masks are aligned
/// bottom-right per sequence. The output takes q's dims and layout. The table and lengths are
/// copied to the GPU at each run from `cache`, so the kernels only ever see checked ones. Runs on
/// `flash_decode` ([`Gpu::choose_paged`]).
///
/// ```compile_fail,E0308
/// # use flashrs::api::{bf16, f16, DeviceTensor, PagedCache};
/// # fn mix(q: &DeviceTensor<f16>, kv: &PagedCache<bf16>, cache: &flashrs::PagedKv) {
/// let _ = flashrs::api::paged_attention(q, kv, kv, cache);
/// # }
/// ```
pub fn paged_attention<'a, T: Element>(
    q: &'a DeviceTensor<T>,
    k_cache: &'a PagedCache<T>,
    v_cache: &'a PagedCache<T>,
    cache: &'a PagedKv,
) -> Attention<'a, T, PagedInputs<'a, T>> {
    Attention::new(PagedInputs {
        q,
        k: k_cache,
        v: v_cache,
        cache,
    })
}

/// The inputs of a dense call ([`attention`]).
pub struct DenseInputs<'a, T: Element> {
    q: &'a DeviceTensor<T>,
    k: &'a DeviceTensor<T>,
    v: &'a DeviceTensor<T>,
}

/// The inputs of a variable-length call ([`varlen_attention`]).
pub struct VarlenInputs<'a, T: Element> {
    q: &'a PackedTensor<T>,
    k: &'a PackedTensor<T>,
    v: &'a PackedTensor<T>,
    batch: &'a VarlenBatch,
}

/// The inputs of a paged call ([`paged_attention`]).
pub struct PagedInputs<'a, T: Element> {
    q: &'a DeviceTensor<T>,
    k: &'a PagedCache<T>,
    v: &'a PagedCache<T>,
    cache: &'a PagedKv,
}

/// One attention call being configured: dense ([`attention`]), variable-length
/// ([`varlen_attention`]) or against a paged cache ([`paged_attention`]). Nothing runs until
/// `run` or `run_into`.
#[must_use = "nothing runs until `run` or `run_into`"]
pub struct Attention<'a, T: Element, I = DenseInputs<'a, T>> {
    inputs: I,
    params: Params,
    lse: Option<&'a mut LseBuffer>,
    sinks: Option<&'a Sinks>,
    kernel: Option<&'static VariantSpec>,
    _element: PhantomData<T>,
}

impl<'a, T: Element, I> Attention<'a, T, I> {
    fn new(inputs: I) -> Self {
        Attention {
            inputs,
            params: Params {
                causal: false,
                scale: None,
                ..Params::default()
            },
            lse: None,
            sinks: None,
            kernel: None,
            _element: PhantomData,
        }
    }

    /// Masks key `j` from query `i` unless `j <= i + S_k - S_q` (aligned bottom-right, as
    /// FlashAttention-2, per sequence for varlen and paged calls; a query that sees no key gets
    /// zeros). Off by default.
    pub fn causal(mut self, causal: bool) -> Self {
        self.params.causal = causal;
        self
    }

    /// The softmax scale; `1 / sqrt(D)` unless set. Must be positive and finite.
    pub fn scale(mut self, scale: f32) -> Self {
        self.params.scale = Some(scale);
        self
    }

    /// A sliding window: query `i` sees the keys from `left` before its diagonal (key
    /// `i + S_k - S_q`) to `right` after it, `None` for no bound on a side (with `causal`, the
    /// right side is 0). FlashAttention's `window_size` with `-1` as `None`. None by default.
    pub fn window(mut self, left: Option<u32>, right: Option<u32>) -> Self {
        self.params.window = Window { left, right };
        self
    }

    /// Logit softcap: each scaled score `x` becomes `softcap * tanh(x / softcap)` before the
    /// softmax (Gemma 2). Must be positive and finite. None by default.
    pub fn softcap(mut self, softcap: f32) -> Self {
        self.params.softcap = Some(softcap);
        self
    }

    /// Also writes each query row's log-sum-exp into `lse`: `[B, H, S_q]` for dense and paged
    /// calls ([`LseBuffer::for_queries`]), `[1, H, total_q]` for varlen ones
    /// ([`LseBuffer::for_packed`]).
    pub fn lse(mut self, lse: &'a mut LseBuffer) -> Self {
        self.lse = Some(lse);
        self
    }

    /// Attention sinks, one per query head ([`Sinks`]): each row's softmax denominator also
    /// counts its head's sink. None by default.
    pub fn sinks(mut self, sinks: &'a Sinks) -> Self {
        self.sinks = Some(sinks);
        self
    }

    /// Refuses sinks made for another number of query heads.
    fn check_sinks(&self, heads: usize, shape: &dyn std::fmt::Display) -> Result<()> {
        self.sinks.map_or(Ok(()), |sinks| sinks.check(heads, shape))
    }

    /// Runs `variant` (one of [`crate::VARIANTS`] or the experimental ones) instead of the
    /// library's choice; for varlen and paged calls it must have such an entry point (else a
    /// typed error before anything runs).
    pub fn kernel(mut self, variant: &'static VariantSpec) -> Self {
        self.kernel = Some(variant);
        self
    }
}

impl<'a, T: Element> Attention<'a, T> {
    /// Checks the call and enqueues it on `gpu`'s stream; returns the output, `[B, H, S_q, D_v]`
    /// (`D_v` v's head dim, q's unless given smaller: [`Shape::head_dim_v`]) in q's layout.
    /// Asynchronous: [`DeviceTensor::to_host`] waits for it.
    pub fn run(self, gpu: &Gpu) -> Result<DeviceTensor<T>> {
        // Checked first so that a refused call allocates nothing.
        let shape = self.plan(None)?;
        let mut out = DeviceTensor::zeros(gpu, shape.out_dims(), self.inputs.q.layout)?;
        self.run_into(gpu, &mut out)?;
        Ok(out)
    }

    /// As [`Attention::run`], writing into `out` (q's dims with v's head dim, q's layout), for
    /// instance to reuse one output across calls. Returns the variant that ran.
    pub fn run_into(self, gpu: &Gpu, out: &mut DeviceTensor<T>) -> Result<&'static VariantSpec> {
        let shape = self.plan(Some(out.operand()))?;
        let kernel = self.kernel.map(compiled_variant).transpose()?;
        let DenseInputs { q, k, v } = self.inputs;
        let stream = gpu.stream();
        let lse = self.lse.map(|lse| &mut lse.data);
        let sinks = self.sinks.map(|sinks| &sinks.data);
        let (raw, _guards) = lend(stream, [&q.data, &k.data, &v.data], &mut out.data, lse, sinks)?;
        // Safety (the contract of `tensors_from_raw`): `lend`'s buffers (see there), held for
        // this whole function, longer than the `Tensors`.
        let strides = [q, k, v].map(|t| Strides::contiguous(t.layout, t.dims));
        let mut tensors =
            unsafe { gpu.tensors_from_strided(stream, out.layout, shape, T::DTYPE, raw, strides) }?;
        gpu.forward(&mut tensors, self.params, kernel.map(|v| v.name))
    }

    /// Every check between the tensors, before anything is allocated or launched.
    fn plan(&self, out: Option<Operand>) -> Result<Shape> {
        let DenseInputs { q, k, v } = self.inputs;
        let shape = plan(
            q.operand(),
            k.operand(),
            v.operand(),
            out,
            self.lse.as_ref().map(|lse| lse.dims),
            self.params,
        )?;
        self.check_sinks(shape.heads, &shape)?;
        Ok(shape)
    }
}

impl<'a, T: Element> Attention<'a, T, VarlenInputs<'a, T>> {
    /// Checks the call and enqueues it on `gpu`'s stream; returns the output, `[total_q, H, D]`.
    /// Asynchronous: [`PackedTensor::to_host`] waits for it.
    pub fn run(self, gpu: &Gpu) -> Result<PackedTensor<T>> {
        self.plan(None)?;
        let mut out = PackedTensor::zeros(gpu, self.inputs.q.dims)?;
        self.run_into(gpu, &mut out)?;
        Ok(out)
    }

    /// As [`run`](Self::run), writing into `out` (q's dims). Returns the variant that ran: the
    /// one named with [`Attention::kernel`], else [`Gpu::choose_varlen`]'s.
    pub fn run_into(self, gpu: &Gpu, out: &mut PackedTensor<T>) -> Result<&'static VariantSpec> {
        let heads = self.plan(Some(out.dims))?;
        let VarlenInputs { q, k, v, batch } = self.inputs;
        let (h, h_kv, d) = heads;
        let variant = match self.kernel {
            Some(variant) => compiled_variant(variant)?,
            None => gpu.choose_varlen(batch, h, h_kv, d)?,
        };
        let kernel = gpu.varlen_kernel(variant, d, T::DTYPE, false)?;
        let lse = self.lse.map(|lse| &mut lse.data);
        let sinks = self.sinks.map(|sinks| &sinks.data);
        let (raw, _guards) = lend(
            gpu.stream(),
            [&q.data, &k.data, &v.data],
            &mut out.data,
            lse,
            sinks,
        )?;
        // Safety (the contract of `varlen_tensors_lent`): `lend`'s buffers (see there), held for
        // this whole function, longer than the tensors.
        let mut tensors = unsafe { gpu.varlen_tensors_lent(batch.clone(), heads, T::DTYPE, raw) }?;
        gpu.launch_varlen(&kernel, &mut tensors, self.params, None)?;
        Ok(variant)
    }

    fn plan(&self, out: Option<[usize; 3]>) -> Result<(usize, usize, usize)> {
        let VarlenInputs { q, k, v, batch } = self.inputs;
        let heads = plan_varlen(
            [q.dims, k.dims, v.dims],
            out,
            self.lse.as_ref().map(|lse| lse.dims),
            batch,
            self.params,
        )?;
        self.check_sinks(heads.0, &format!("{:?}", q.dims))?;
        Ok(heads)
    }
}

impl<'a, T: Element> Attention<'a, T, PagedInputs<'a, T>> {
    /// Checks the call and enqueues it on `gpu`'s stream; returns the output, q's dims and
    /// layout. Asynchronous: [`DeviceTensor::to_host`] waits for it.
    pub fn run(self, gpu: &Gpu) -> Result<DeviceTensor<T>> {
        self.plan(None)?;
        let q = self.inputs.q;
        let mut out = DeviceTensor::zeros(gpu, q.dims, q.layout)?;
        self.run_into(gpu, &mut out)?;
        Ok(out)
    }

    /// As [`run`](Self::run), writing into `out` (q's dims and layout). Returns the variant
    /// that ran: the one named with [`Attention::kernel`], else [`Gpu::choose_paged`]'s.
    pub fn run_into(self, gpu: &Gpu, out: &mut DeviceTensor<T>) -> Result<&'static VariantSpec> {
        let shape = self.plan(Some(out.operand()))?;
        let PagedInputs { q, k, v, cache } = self.inputs;
        let variant = match self.kernel {
            Some(variant) => compiled_variant(variant)?,
            None => gpu.choose_paged(shape, cache.block_size())?,
        };
        let kernel = gpu.paged_kernel(variant, shape.head_dim, T::DTYPE, false)?;
        let lse = self.lse.map(|lse| &mut lse.data);
        let sinks = self.sinks.map(|sinks| &sinks.data);
        let (raw, _guards) = lend(
            gpu.stream(),
            [&q.data, &k.data, &v.data],
            &mut out.data,
            lse,
            sinks,
        )?;
        // Safety (the contract of `paged_tensors_lent`): `lend`'s buffers (see there), held for
        // this whole function, longer than the tensors.
        let mut tensors = unsafe { gpu.paged_tensors_lent(q.layout, shape, T::DTYPE, cache.clone(), raw) }?;
        gpu.launch_paged(&kernel, &mut tensors, self.params, None)?;
        Ok(variant)
    }

    fn plan(&self, out: Option<Operand>) -> Result<Shape> {
        let PagedInputs { q, k, v, cache } = self.inputs;
        let shape = plan_paged(
            q.operand(),
            [k.dims, v.dims],
            out,
            self.lse.as_ref().map(|lse| lse.dims),
            cache,
            self.params,
        )?;
        self.check_sinks(shape.heads, &shape)?;
        Ok(shape)
    }
}

/// Q, K, V, the output and the log-sum-exp of one call as the raw buffers the launches take, with
/// the guards that keep their addresses valid until the launch is enqueued (their event tracking
/// is off on the library's contexts). Every buffer must be on `stream`: one stream orders the
/// uploads, the launch, the downloads and the frees.
///
/// What the launches may assume of them (the contract of [`Gpu::tensors_from_raw`]): each is a
/// live `CudaSlice` of `len` elements of a 16-bit `T` (f32 for the log-sum-exp) allocated on
/// `stream`, so in its GPU's context; the caller holds the borrows for as long as it uses the
/// buffers, and a `CudaSlice` is freed on its own stream, after the work enqueued there; every
/// access to a typed tensor runs on its stream, so it is ordered with the launch, and the borrows
/// (`&` for the inputs, `&mut` for out and lse) rule out a write to the inputs and any other use
/// of out and lse meanwhile; out and lse are exclusive borrows of distinct objects, so they
/// overlap neither each other nor the inputs.
fn lend<'s, T: Element>(
    stream: &'s Arc<CudaStream>,
    [q, k, v]: [&'s CudaSlice<T>; 3],
    out: &'s mut CudaSlice<T>,
    lse: Option<&'s mut CudaSlice<f32>>,
    sinks: Option<&'s CudaSlice<f32>>,
) -> Result<(RawTensors, Vec<SyncOnDrop<'s>>)> {
    let on_stream = |what, other: &CudaStream| {
        if *other == **stream {
            Ok(())
        } else {
            Err(Error::OtherGpu { what })
        }
    };
    on_stream("q", q.stream())?;
    on_stream("k", k.stream())?;
    on_stream("v", v.stream())?;
    on_stream("out", out.stream())?;
    if let Some(lse) = &lse {
        on_stream("lse", lse.stream())?;
    }
    if let Some(sinks) = sinks {
        on_stream("sinks", sinks.stream())?;
    }
    let mut guards = Vec::with_capacity(6);
    let mut read = |slice: &'s CudaSlice<T>| {
        let (ptr, guard) = slice.device_ptr(stream);
        guards.push(guard);
        RawBuffer::new(ptr, slice.len())
    };
    let (q, k, v) = (read(q), read(k), read(v));
    let out_len = out.len();
    let (out_ptr, out_guard) = out.device_ptr_mut(stream);
    guards.push(out_guard);
    let lse = lse.map(|lse| {
        let len = lse.len();
        let (ptr, guard) = lse.device_ptr_mut(stream);
        guards.push(guard);
        RawBuffer::new(ptr, len)
    });
    let sinks = sinks.map(|sinks| {
        let (ptr, guard) = sinks.device_ptr(stream);
        guards.push(guard);
        RawBuffer::new(ptr, sinks.len())
    });
    let raw = RawTensors {
        q,
        k,
        v,
        out: RawBuffer::new(out_ptr, out_len),
        lse,
        sinks,
    };
    Ok((raw, guards))
}

/// The compiled variant `variant` names, refusing one whose fields were changed from those of
/// the compiled variant of that name (its fields are public, so a copy could carry other tiles).
fn compiled_variant(variant: &'static VariantSpec) -> Result<&'static VariantSpec> {
    match VariantSpec::by_name(variant.name) {
        Some(compiled) if compiled == variant => Ok(compiled),
        _ => Err(Error::UnknownKernel(variant.name.to_string())),
    }
}

/// A borrowed `[B, H, S, D]` tensor of `T` in device memory that the library does not own: a
/// [`DeviceTensor`]'s ([`DeviceTensor::view`]) or another library's (PyTorch's, candle's), made
/// from its address with [`TensorView::from_raw`]. [`attention_raw`] reads and writes through
/// views on the caller's stream. The dims are logical (`[B, H, S, D]`) whatever the layout.
pub struct TensorView<'a, T: Element> {
    ptr: u64,
    dims: [usize; 4],
    /// The contiguous layout it is in, or for a strided view the order of its head and sequence
    /// strides (what an output for it is allocated in).
    layout: Layout,
    strides: Strides,
    _borrow: PhantomData<&'a T>,
}

impl<T: Element> Clone for TensorView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Element> Copy for TensorView<'_, T> {}

impl<T: Element> std::fmt::Debug for TensorView<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TensorView<{}>({:#x}, {:?}, {}, strides {:?})",
            T::DTYPE,
            self.ptr,
            self.dims,
            self.layout,
            self.strides.0
        )
    }
}

impl<T: Element> DeviceTensor<T> {
    /// A view of this tensor for [`attention_raw`], borrowing it.
    pub fn view(&self) -> TensorView<'_, T> {
        let (ptr, _record) = self.data.device_ptr(self.data.stream());
        TensorView {
            ptr,
            dims: self.dims,
            layout: self.layout,
            strides: Strides::contiguous(self.layout, self.dims),
            _borrow: PhantomData,
        }
    }
}

impl<'a, T: Element> TensorView<'a, T> {
    /// Views `dims` (`[B, H, S, D]`) elements of `T` at device address `ptr`, stored in `layout`.
    /// Nothing is checked here; [`attention_raw`] and [`check_views`] check the dims against each
    /// other and the address for null and alignment.
    ///
    /// # Safety
    /// `ptr` is a device pointer in the context of the [`Gpu`] the view will be used with, to
    /// `dims` elements of `T`, contiguous in `layout` (`[B, H, S, D]` or `[B, S, H, D]`), 16-byte
    /// aligned (checked anyway), valid for reads and, for an output, writes, for `'a`.
    pub unsafe fn from_raw(ptr: u64, dims: [usize; 4], layout: Layout) -> Self {
        TensorView {
            ptr,
            dims,
            layout,
            strides: Strides::contiguous(layout, dims),
            _borrow: PhantomData,
        }
    }

    /// Views `dims` (`[B, H, S, D]`) elements of `T` at device address `ptr` whose neighbours
    /// along each dim are `strides` elements apart (D's must be 1): a slice of a KV cache, one of
    /// q, k and v of a fused projection, any view PyTorch hands over with a unit last stride. Q, K
    /// and V may be strided; an output is contiguous ([`check_views`] says which kernels take
    /// what). Nothing is checked here.
    ///
    /// # Safety
    /// As [`TensorView::from_raw`], for the elements the strides reach from `ptr`: the
    /// [`Strides::extent`] of `dims`.
    pub unsafe fn from_strided(ptr: u64, dims: [usize; 4], strides: Strides) -> Self {
        // An output for it is allocated in the order of its head and sequence strides.
        let layout = strides.layout(dims).unwrap_or(match strides.0[2] > strides.0[1] {
            true => Layout::Bshd,
            false => Layout::Bhsd,
        });
        TensorView {
            ptr,
            dims,
            layout,
            strides,
            _borrow: PhantomData,
        }
    }

    /// The logical dims `[B, H, S, D]`, whatever the layout.
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }

    /// How the elements are ordered in memory: the contiguous layout the view is in, or for a
    /// strided one the order of its head and sequence strides.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The distances between neighbouring elements along each dim, in elements.
    pub fn strides(&self) -> Strides {
        self.strides
    }

    /// Whether the view is contiguous in its layout (what every kernel reads in place).
    pub fn is_contiguous(&self) -> bool {
        self.strides.fits(self.layout, self.dims)
    }

    /// The device address of the first element.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub(crate) fn operand(&self) -> Operand {
        Operand {
            dims: self.dims,
            layout: self.layout,
            strides: self.strides,
        }
    }
}

/// The options of an [`attention_raw`] call: what [`Attention::causal`] and [`Attention::scale`]
/// set on the safe path. The default is no mask and a scale of `1 / sqrt(D)`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RawOptions {
    /// Masks key `j` from query `i` unless `j <= i + S_k - S_q` (aligned bottom-right).
    pub causal: bool,
    /// The softmax scale; `1 / sqrt(D)` when `None`. Must be positive and finite.
    pub scale: Option<f32>,
    /// A sliding window around each row's diagonal ([`Params::window`]).
    pub window: Window,
    /// Logit softcap ([`Params::softcap`]); `None` for none.
    pub softcap: Option<f32>,
    /// The device address of the attention sinks, `[H]` fp32 (one per query head, as
    /// [`Sinks`] holds them), or `None`. The raw entry points read `H` floats there.
    pub sinks: Option<u64>,
}

impl From<RawOptions> for Params {
    fn from(options: RawOptions) -> Params {
        Params {
            causal: options.causal,
            scale: options.scale,
            window: options.window,
            softcap: options.softcap,
        }
    }
}

/// The layout of a tensor of logical dims `[B, H, S, D]` whose elements are `strides` apart
/// (in elements, in the order of `dims`), when it is one the kernels read in place: contiguous
/// `[B, H, S, D]`, or contiguous `[B, S, H, D]` (for instance a `[B, S, H, D]` tensor viewed as
/// `[B, H, S, D]` through a transpose, as models hand to PyTorch's SDPA). The stride of a dim of
/// size 1 is never used, so it may be anything (as in PyTorch's own contiguity test). `what`
/// names the tensor in the error.
pub fn layout_from_strides(what: &'static str, dims: [usize; 4], strides: [i64; 4]) -> Result<Layout> {
    // When both fit (one head or one position) the memory order is the same either way.
    [Layout::Bhsd, Layout::Bshd]
        .into_iter()
        .find(|&layout| fits_layout(dims, strides, layout))
        .ok_or(Error::NotContiguous { what, dims, strides })
}

/// Whether a tensor of `dims` (`[B, H, S, D]`) with `strides` (elements, same order) is
/// contiguous in `layout`; a dim of size 1 fits any stride. A tensor with one head or one
/// position fits both layouts: callers that read several tensors' layouts should pick one that
/// fits them all (see the Python package's `operands`).
pub fn fits_layout(dims: [usize; 4], strides: [i64; 4], layout: Layout) -> bool {
    let order = match layout {
        Layout::Bhsd => [0, 1, 2, 3],
        Layout::Bshd => [0, 2, 1, 3],
    };
    let mut expected: i64 = 1;
    order.iter().rev().all(|&axis| {
        let fits = dims[axis] <= 1 || strides[axis] == expected;
        expected = expected.saturating_mul(dims[axis] as i64);
        fits
    })
}

/// Every check [`attention_raw`] makes before it touches the GPU, without one: the dims and
/// layouts of the views against each other (as the safe path checks them), the head dim and
/// options the kernels take, and null, misaligned and overlapping addresses. `out` and `lse` are
/// optional so that inputs can be checked before their output is allocated. Returns the
/// problem's shape.
pub fn check_views<T: Element>(
    q: &TensorView<'_, T>,
    k: &TensorView<'_, T>,
    v: &TensorView<'_, T>,
    out: Option<&TensorView<'_, T>>,
    lse: Option<u64>,
    options: RawOptions,
) -> Result<Shape> {
    let shape = plan(
        q.operand(),
        k.operand(),
        v.operand(),
        out.map(TensorView::operand),
        None,
        options.into(),
    )?;
    let bytes = |elements: usize| elements as u128 * std::mem::size_of::<T>() as u128;
    // The bytes each view spans, from its first element to its last (the inputs' strides may
    // leave gaps, which other tensors may fill: the three of a fused projection interleave).
    let span = |view: &TensorView<'_, T>| {
        view.strides.extent(view.dims).map(bytes).ok_or_else(|| {
            Error::InvalidProblem(format!("{shape} has more elements than memory can address"))
        })
    };
    let lse_rows = shape.lse_len().unwrap_or(usize::MAX);
    let mut buffers = vec![
        ("q", q.ptr, span(q)?),
        ("k", k.ptr, span(k)?),
        ("v", v.ptr, span(v)?),
    ];
    buffers.extend(out.map(|out| ("out", out.ptr, bytes(shape.out_len()))));
    buffers.extend(options.sinks.map(|ptr| ("sinks", ptr, 4 * shape.heads as u128)));
    check_addresses(&buffers, lse.map(|ptr| (ptr, 4 * lse_rows as u128)))?;
    Ok(shape)
}

/// The address checks of the raw paths: each of `buffers` (`(what, address, bytes)`, the
/// output named "out") and the log-sum-exp (`(address, bytes)`) not null and aligned (an empty
/// buffer is never read: it may be anything), and what is written (the output and log-sum-exp)
/// overlapping nothing else of the call (the kernels read Q, K, V while other blocks write).
pub(crate) fn check_addresses(buffers: &[(&'static str, u64, u128)], lse: Option<(u64, u128)>) -> Result<()> {
    for &(what, ptr, len) in buffers {
        if len == 0 {
            continue;
        }
        if ptr == 0 {
            return Err(Error::NullPointer { what });
        }
        check_alignment(what, ptr, TENSOR_ALIGN)?;
    }
    if let Some((ptr, _)) = lse.filter(|&(_, len)| len > 0) {
        if ptr == 0 {
            return Err(Error::NullPointer { what: "lse" });
        }
        check_alignment("lse", ptr, 4)?;
    }
    let written = buffers
        .iter()
        .filter(|(what, ..)| *what == "out")
        .copied()
        .chain(lse.map(|(ptr, len)| ("lse", ptr, len)));
    for (what, ptr, len) in written {
        for &(other, other_ptr, other_len) in buffers.iter().filter(|b| b.0 != what) {
            let (start, end) = (ptr as u128, ptr as u128 + len);
            if start < other_ptr as u128 + other_len && (other_ptr as u128) < end {
                return Err(Error::Incompatible(format!(
                    "{what} overlaps {other}: the output and log-sum-exp need memory of their own"
                )));
            }
        }
    }
    Ok(())
}

/// The buffers of views that `check_views` accepted for `shape`, as `Gpu::tensors_from_raw`
/// takes them.
fn raw_tensors<T: Element>(
    [q, k, v, out]: [&TensorView<'_, T>; 4],
    lse: Option<u64>,
    sinks: Option<u64>,
    shape: Shape,
) -> RawTensors {
    // Each input holds what its strides reach (`check_views` checked the extents fit in `usize`).
    let extent = |view: &TensorView<'_, T>| view.strides.extent(view.dims).unwrap_or(usize::MAX);
    RawTensors {
        q: RawBuffer::new(q.ptr, extent(q)),
        k: RawBuffer::new(k.ptr, extent(k)),
        v: RawBuffer::new(v.ptr, extent(v)),
        out: RawBuffer::new(out.ptr, shape.out_len()),
        lse: lse.map(|ptr| RawBuffer::new(ptr, shape.lse_len().unwrap_or(0))),
        sinks: sinks.map(|ptr| RawBuffer::new(ptr, shape.heads)),
    }
}

/// Attention on caller-owned device memory, enqueued on the caller's stream: what
/// [`Attention::run_into`] does for [`DeviceTensor`]s, for views of another library's tensors
/// (PyTorch's, candle's). The same checks run first ([`check_views`]: dims, layouts, GQA from the
/// shapes, head dim, output dims and layout, null and misaligned addresses; a mismatch is a typed
/// error and nothing is launched), then the library's dispatch picks the kernel, which is
/// returned. `lse`, when given, receives each query row's log-sum-exp (`[B, H, S_q]` fp32).
/// Asynchronous: the work is ordered on `stream` after what the caller enqueued there before.
///
/// Views of two element types do not mix:
///
/// ```compile_fail,E0308
/// # use flashrs::api::{attention_raw, bf16, f16, RawOptions, TensorView};
/// # unsafe fn mix(gpu: &flashrs::Gpu, q: TensorView<'_, f16>, kv: TensorView<'_, bf16>) {
/// let _ = attention_raw(gpu, q, kv, kv, q, None, RawOptions::default(), std::ptr::null_mut());
/// # }
/// ```
///
/// # Safety
/// - every view satisfies the contract of [`TensorView::from_raw`] until the stream has run the
///   launch (`out` for writes);
/// - `lse`, when `Some`, points at `B * H * S_q` f32 laid out `[B, H, S_q]`, valid for writes
///   likewise;
/// - `stream` is a valid `CUstream` of the `Gpu`'s context (cudarc uses the device's primary
///   context, as PyTorch and candle do), or null for the legacy default stream, and stays valid
///   for the call;
/// - nothing else writes `q`, `k`, `v` or touches `out` and `lse` until the stream has run the
///   launch, unless ordered after it.
// The signature mirrors the safe path's inputs one by one, as foreign callers hold them (a candle
// op is written against it), rather than bundled into a struct of its own.
#[allow(clippy::too_many_arguments)]
pub unsafe fn attention_raw<T: Element>(
    gpu: &Gpu,
    q: TensorView<'_, T>,
    k: TensorView<'_, T>,
    v: TensorView<'_, T>,
    out: TensorView<'_, T>,
    lse: Option<u64>,
    options: RawOptions,
    stream: *mut std::ffi::c_void,
) -> Result<&'static VariantSpec> {
    let shape = check_views(&q, &k, &v, Some(&out), lse, options)?;
    let raw = raw_tensors([&q, &k, &v, &out], lse, options.sinks, shape);
    // The call makes `gpu`'s context current (the legacy stream is the current context's); the
    // caller's (torch's current device, say) is current again when it returns.
    let _restore = CurrentContext::save()?;
    // Safety: `stream` is null or a live stream handle for this call (this function's contract).
    let stream = unsafe { borrow_stream(gpu, stream) }?;
    // Safety (the contract of `tensors_from_raw`): the views address allocations of this GPU's
    // context holding the elements their dims imply, which check_views checked against the
    // shape, and stay valid until `stream` has run the work (this function's contract); nothing
    // else touches them unordered with `stream` meanwhile (same); the output and log-sum-exp
    // overlap neither each other nor Q, K, V (checked by check_views).
    let strides = [q.strides, k.strides, v.strides];
    let mut tensors =
        unsafe { gpu.tensors_from_strided(&stream, out.layout, shape, T::DTYPE, raw, strides) }?;
    gpu.forward(&mut tensors, options.into(), None)
}

/// Runs `f`, then makes the CUDA context that was current on this thread before it current
/// again: opening a [`Gpu`] or launching through [`attention_raw`] binds the GPU's context, and a
/// caller that shares the thread with another CUDA user (torch's current device) keeps its own.
pub fn keeping_current_context<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
    let _restore = CurrentContext::save()?;
    f()
}

/// The CUDA context current on this thread when made, current again when dropped.
pub(crate) struct CurrentContext(sys::CUcontext);

impl CurrentContext {
    pub(crate) fn save() -> Result<Self> {
        // cudarc aborts the process when libcuda is missing: ask first (as `Gpu::open` does).
        static DRIVER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if !*DRIVER.get_or_init(|| crate::gpu::library_present(&["libcuda.so.1", "libcuda.so", "nvcuda.dll"]))
        {
            return Err(Error::NoDriver);
        }
        let mut current: sys::CUcontext = std::ptr::null_mut();
        // Safety: `current` is a valid place for the driver to write the answer. Before the
        // driver is initialised no context is current, which is the null the call leaves.
        if unsafe { sys::cuCtxGetCurrent(&mut current) }.result().is_err() {
            current = std::ptr::null_mut();
        }
        Ok(CurrentContext(current))
    }
}

impl Drop for CurrentContext {
    fn drop(&mut self) {
        // Safety: the handle was current on this thread when saved (or null, which unbinds);
        // the caller owns that context and keeps it alive across the call.
        unsafe { sys::cuCtxSetCurrent(self.0) };
    }
}

/// `stream` as a cudarc stream of `gpu`'s context that the library never destroys, refusing a
/// stream of another context (its launches could not see this context's module or memory).
///
/// # Safety
/// `stream` is null (the legacy default stream) or a `CUstream` handle that stays valid while the
/// returned wrapper lives.
pub(crate) unsafe fn borrow_stream(gpu: &Gpu, stream: *mut std::ffi::c_void) -> Result<Arc<CudaStream>> {
    let ctx = gpu.context();
    // The null handle means the legacy stream of the context current on this thread: make it ours.
    ctx.bind_to_thread()?;
    let stream: sys::CUstream = stream.cast();
    if !stream.is_null() {
        let mut owner: sys::CUcontext = std::ptr::null_mut();
        // Safety: `stream` is a valid handle (this function's contract) and `owner` a valid place
        // for the driver to write the answer.
        unsafe { sys::cuStreamGetCtx(stream, &mut owner) }.result()?;
        if owner != ctx.cu_ctx() {
            return Err(Error::ForeignStream);
        }
    }
    // Safety: the stream belongs to `ctx` (checked above, or the legacy stream, which every
    // context has) and outlives the wrapper (this function's contract); the wrapper is not an
    // owner, so dropping it never destroys the caller's stream.
    Ok(unsafe { ctx.wrap_borrowed_stream(stream) })
}

/// What the checks need of a tensor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operand {
    dims: [usize; 4],
    layout: Layout,
    strides: Strides,
}

impl Operand {
    /// A contiguous tensor's.
    fn contiguous(dims: [usize; 4], layout: Layout) -> Operand {
        Operand {
            dims,
            layout,
            strides: Strides::contiguous(layout, dims),
        }
    }

    /// Refuses strides the copy engine cannot read: a D stride other than 1, or another stride
    /// not a positive multiple of 16 bytes (its rule for every stride but the innermost; a
    /// broadcast dim, stride 0, is not one).
    fn check_strides(&self, what: &'static str) -> Result<()> {
        let strides = self.strides.0;
        let unit_d = self.dims[3] <= 1 || strides[3] == 1;
        let aligned =
            (0..3).all(|axis| self.dims[axis] <= 1 || (strides[axis] > 0 && strides[axis].is_multiple_of(8)));
        if unit_d && aligned {
            return Ok(());
        }
        Err(Error::NotContiguous {
            what,
            dims: self.dims,
            strides: strides.map(|s| s as i64),
        })
    }

    /// Whether the tensor is contiguous in its layout.
    fn is_contiguous(&self) -> bool {
        self.strides.fits(self.layout, self.dims)
    }
}

/// The shape of an attention call on `q`, `k`, `v` (and `out`, `lse` when given), or the typed
/// error of the first mismatch between them. Pure, so every refusal is tested without a GPU.
fn plan(
    q: Operand,
    k: Operand,
    v: Operand,
    out: Option<Operand>,
    lse: Option<[usize; 3]>,
    params: Params,
) -> Result<Shape> {
    let incompatible = |message: String| Err(Error::Incompatible(message));
    // V may have a head dim of its own (`Shape::head_dim_v`); its other dims are K's.
    if v.dims[..3] != k.dims[..3] {
        return incompatible(format!(
            "k is {:?} and v is {:?}: keys and values need the same dims (but for v's head dim)",
            k.dims, v.dims
        ));
    }
    let [batch, heads, seq_q, head_dim] = q.dims;
    let [batch_kv, heads_kv, seq_k, head_dim_kv] = k.dims;
    let head_dim_v = v.dims[3];
    if batch_kv != batch {
        return incompatible(format!(
            "q has batch {batch}, k and v have {batch_kv}: they need the same batch"
        ));
    }
    if head_dim_kv != head_dim {
        return incompatible(format!(
            "q has head dim {head_dim}, k and v have {head_dim_kv}: they need the same head dim"
        ));
    }
    if heads_kv == 0 || !heads.is_multiple_of(heads_kv) {
        return incompatible(format!(
            "k and v have {heads_kv} heads, which must divide q's {heads} (grouped-query attention)"
        ));
    }
    let out_dims = [batch, heads, seq_q, head_dim_v];
    if let Some(out) = out {
        if out.dims != out_dims || !out.is_contiguous() {
            return incompatible(format!(
                "the output is {:?} with strides {:?}: it takes q's dims with v's head dim, {out_dims:?}, \
                 contiguous in either layout",
                out.dims, out.strides.0
            ));
        }
    }
    if let Some(lse) = lse {
        if lse != [batch, heads, seq_q] {
            return incompatible(format!(
                "the log-sum-exp buffer is {lse:?}, q needs [B, H, S_q] = {:?}",
                [batch, heads, seq_q]
            ));
        }
    }
    let shape = Shape {
        batch,
        heads,
        heads_kv,
        seq_q,
        seq_k,
        head_dim,
        head_dim_v,
    };
    shape.validate()?;
    params.validate()?;
    // Each input has its own strides (the kernels that read through the copy engine take any;
    // the launch refuses a kernel that would read one in place in another layout than the
    // output's).
    q.check_strides("q")?;
    k.check_strides("k")?;
    v.check_strides("v")?;
    Ok(shape)
}

/// Every check a [`varlen_attention`] call makes on its inputs before it touches the GPU,
/// without one, for callers that hold only dims (a command line reading files): packed `q`
/// (`[total_q, H, D]`), `k` and `v` (`[total_k, H_kv, D]`) against each other and against
/// `batch`'s prefix sums, the head dim and the options. Returns `(H, H_kv, D)`.
pub fn check_varlen(
    q: [usize; 3],
    k: [usize; 3],
    v: [usize; 3],
    batch: &VarlenBatch,
    params: Params,
) -> Result<(usize, usize, usize)> {
    plan_varlen([q, k, v], None, None, batch, params)
}

/// Every check a [`paged_attention`] call makes on its inputs before it touches the GPU,
/// without one: `q` (logical dims `[B, H, S_q, D]` in `layout`) and the caches (`[num_blocks,
/// block_size, H_kv, D]`) against each other and against `cache`'s table and lengths, the head
/// dim and the options. Returns the problem's shape (`seq_k`: the longest sequence).
pub fn check_paged(
    q: [usize; 4],
    layout: Layout,
    k_cache: [usize; 4],
    v_cache: [usize; 4],
    cache: &PagedKv,
    params: Params,
) -> Result<Shape> {
    plan_paged(
        Operand::contiguous(q, layout),
        [k_cache, v_cache],
        None,
        None,
        cache,
        params,
    )
}

/// The heads `(H, H_kv, D)` of a varlen call on packed `q`, `k`, `v` (`[total, heads, D]`, and
/// `out`, `lse` when given) split by `batch`, or the typed error of the first mismatch. Pure,
/// like `plan`.
pub(crate) fn plan_varlen(
    [q, k, v]: [[usize; 3]; 3],
    out: Option<[usize; 3]>,
    lse: Option<[usize; 3]>,
    batch: &VarlenBatch,
    params: Params,
) -> Result<(usize, usize, usize)> {
    let incompatible = |message: String| Err(Error::Incompatible(format!("varlen: {message}")));
    if v != k {
        return incompatible(format!(
            "k is {k:?} and v is {v:?}: keys and values need the same dims"
        ));
    }
    let [total_q, heads, head_dim] = q;
    let [total_k, heads_kv, head_dim_kv] = k;
    if head_dim_kv != head_dim {
        return incompatible(format!(
            "q has head dim {head_dim}, k and v have {head_dim_kv}: they need the same head dim"
        ));
    }
    if heads_kv == 0 || !heads.is_multiple_of(heads_kv) {
        return incompatible(format!(
            "k and v have {heads_kv} heads, which must divide q's {heads} (grouped-query attention)"
        ));
    }
    let packed = [
        ("q has", total_q, "cu_seqlens_q", batch.total_q()),
        ("k and v have", total_k, "cu_seqlens_k", batch.total_k()),
    ];
    for (tensors, rows, sums, total) in packed {
        if rows != total {
            return incompatible(format!(
                "{tensors} {rows} packed rows, but {sums} ends at {total}: its last entry is the rows in all"
            ));
        }
    }
    if out.is_some_and(|out| out != q) {
        return incompatible(format!(
            "the output is {:?} and q is {q:?}: the output takes q's dims",
            out.unwrap_or_default()
        ));
    }
    if let Some(lse) = lse.filter(|&lse| lse != [1, heads, total_q]) {
        return incompatible(format!(
            "the log-sum-exp buffer is {lse:?}, packed queries need [1, H, total_q] = {:?}",
            [1, heads, total_q]
        ));
    }
    batch.grid_shape(heads, heads_kv, head_dim)?;
    params.validate()?;
    Ok((heads, heads_kv, head_dim))
}

/// The shape of a paged call on `q` (`[B, H, S_q, D]`, and `out`, `lse` when given) against
/// caches of dims `[k, v]` (`[num_blocks, block_size, H_kv, D]`) indexed by `cache`, or the typed
/// error of the first mismatch. `seq_k` is the longest sequence's length. Pure, like `plan`.
pub(crate) fn plan_paged(
    q: Operand,
    [k, v]: [[usize; 4]; 2],
    out: Option<Operand>,
    lse: Option<[usize; 3]>,
    cache: &PagedKv,
    params: Params,
) -> Result<Shape> {
    let incompatible = |message: String| Err(Error::Incompatible(format!("paged KV cache: {message}")));
    if v != k {
        return incompatible(format!(
            "the k cache is {k:?} and the v cache {v:?}: they need the same dims"
        ));
    }
    let [num_blocks, block_size, heads_kv, head_dim_kv] = k;
    if [num_blocks, block_size] != [cache.num_blocks(), cache.block_size()] {
        return incompatible(format!(
            "the caches hold {num_blocks} pages of {block_size} keys, the block table indexes {} pages of {}",
            cache.num_blocks(),
            cache.block_size()
        ));
    }
    let [batch, heads, seq_q, head_dim] = q.dims;
    if batch != cache.batch() {
        return incompatible(format!(
            "q has batch {batch}, seqlens_k has {} sequences: one per query batch entry",
            cache.batch()
        ));
    }
    if head_dim_kv != head_dim {
        return incompatible(format!(
            "q has head dim {head_dim}, the caches have {head_dim_kv}: they need the same head dim"
        ));
    }
    if heads_kv == 0 || !heads.is_multiple_of(heads_kv) {
        return incompatible(format!(
            "the caches have {heads_kv} heads, which must divide q's {heads} (grouped-query attention)"
        ));
    }
    if let Some(out) = out.filter(|out| out.dims != q.dims || out.layout != q.layout) {
        return incompatible(format!(
            "the output is {:?} {} and q is {:?} {}: the output takes q's dims and layout",
            out.dims, out.layout, q.dims, q.layout
        ));
    }
    if let Some(lse) = lse.filter(|&lse| lse != [batch, heads, seq_q]) {
        return incompatible(format!(
            "the log-sum-exp buffer is {lse:?}, q needs [B, H, S_q] = {:?}",
            [batch, heads, seq_q]
        ));
    }
    let shape = cache.shape(heads, heads_kv, seq_q, head_dim)?;
    params.validate()?;
    Ok(shape)
}

/// `data` on `gpu` as a tensor of `dims` (`describe` names it in errors), refusing data that
/// does not fill it exactly.
fn upload_checked<T: Element>(
    gpu: &Gpu,
    data: &[T],
    dims: &[usize],
    describe: impl Fn() -> String,
) -> Result<CudaSlice<T>> {
    check_host_len(dims, data.len(), describe)?;
    Ok(gpu.stream().clone_htod(data)?)
}

/// Checks that host data of `len` elements fills a tensor of `dims`.
fn check_host_len(dims: &[usize], len: usize, describe: impl Fn() -> String) -> Result<()> {
    let expected = checked_elements(dims, &describe)?;
    if len == expected {
        Ok(())
    } else {
        Err(Error::Length {
            what: "host data",
            expected,
            actual: len,
            shape: describe(),
        })
    }
}

/// Elements of a tensor of `dims`, each at least 1.
fn elements(dims: &[usize; 4], layout: Layout) -> Result<usize> {
    checked_elements(dims, || format!("{dims:?} {layout}"))
}

/// The product of `dims`, refusing a zero dim (no kernel takes an empty tensor, and an empty
/// device allocation is not a thing) and a count whose bytes `isize` cannot hold.
fn checked_elements(dims: &[usize], describe: impl Fn() -> String) -> Result<usize> {
    if dims.contains(&0) {
        return Err(Error::InvalidProblem(format!(
            "every dimension must be at least 1, got {}",
            describe()
        )));
    }
    dims.iter()
        .try_fold(1usize, |product, &dim| product.checked_mul(dim))
        // 4 bytes per element at most (the log-sum-exp's).
        .filter(|&n| n.checked_mul(4).is_some_and(|bytes| bytes <= isize::MAX as usize))
        .ok_or_else(|| {
            Error::InvalidProblem(format!(
                "{} has more elements than memory can address",
                describe()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bhsd(dims: [usize; 4]) -> Operand {
        Operand::contiguous(dims, Layout::Bhsd)
    }

    fn plain() -> Params {
        Params {
            causal: false,
            scale: None,
            ..Params::default()
        }
    }

    /// `plan` on q, k, v (and out, lse), for tests.
    fn check(
        q: Operand,
        k: Operand,
        v: Operand,
        out: Option<Operand>,
        lse: Option<[usize; 3]>,
    ) -> Result<Shape> {
        plan(q, k, v, out, lse, plain())
    }

    /// The message of an `Incompatible` error (anything else fails the test); one line.
    fn incompatible(result: Result<Shape>) -> String {
        match result {
            Err(Error::Incompatible(message)) => {
                let line = format!("{:?}", Error::Incompatible(message.clone()));
                assert_eq!(line.lines().count(), 1, "{line}");
                message
            }
            other => panic!("expected Incompatible, got {other:?}"),
        }
    }

    #[test]
    fn grouped_query_and_cross_attention_shapes_are_accepted() {
        let q = bhsd([2, 8, 100, 64]);
        let kv = bhsd([2, 2, 37, 64]);
        let shape = check(q, kv, kv, Some(q), Some([2, 8, 100])).unwrap();
        assert_eq!(
            shape,
            Shape {
                batch: 2,
                heads: 8,
                heads_kv: 2,
                seq_q: 100,
                seq_k: 37,
                head_dim: 64,
                head_dim_v: 64,
            }
        );
        assert_eq!(shape.kv_group(), 4);
        // Multi-query (one key/value head), and plain self-attention in the other layout.
        let mqa = check(q, bhsd([2, 1, 300, 64]), bhsd([2, 1, 300, 64]), None, None).unwrap();
        assert_eq!((mqa.heads_kv, mqa.seq_k), (1, 300));
        let bshd = Operand::contiguous([1, 4, 50, 128], Layout::Bshd);
        assert_eq!(
            check(bshd, bshd, bshd, Some(bshd), None).unwrap(),
            Shape::new(1, 4, 50, 128)
        );
    }

    #[test]
    fn inputs_may_mix_layouts_and_strides_and_the_output_is_contiguous() {
        let q = bhsd([1, 2, 16, 64]);
        let bshd = Operand::contiguous([1, 2, 16, 64], Layout::Bshd);
        // A KV cache's first 16 positions of 40, and one of q, k, v of a fused projection.
        let cache = Operand {
            strides: Strides([2 * 40 * 64, 40 * 64, 64, 1]),
            ..q
        };
        let fused = Operand {
            strides: Strides([16 * 3 * 2 * 64, 64, 3 * 2 * 64, 1]),
            layout: Layout::Bshd,
            ..q
        };
        for (k, v) in [(bshd, q), (cache, cache), (fused, bshd)] {
            assert_eq!(
                check(fused, k, v, Some(bshd), None).unwrap(),
                Shape::new(1, 2, 16, 64)
            );
        }
        let message = incompatible(check(q, q, q, Some(cache), None));
        assert!(message.contains("contiguous in either layout"), "{message}");
        // The copy engine's rules: a unit D stride, the others multiples of 16 bytes.
        for strides in [[2048, 1024, 64, 2], [2048, 1024, 68, 1]] {
            let odd = Operand {
                strides: Strides(strides),
                ..q
            };
            assert!(matches!(
                check(q, odd, q, None, None),
                Err(Error::NotContiguous { what: "k", .. })
            ));
        }
    }

    #[test]
    fn keys_and_values_must_have_the_same_dims() {
        let q = bhsd([1, 4, 16, 64]);
        for v in [[1, 4, 17, 64], [1, 2, 16, 64], [2, 4, 16, 64]] {
            let message = incompatible(check(q, q, bhsd(v), None, None));
            assert!(message.contains("keys and values"), "{v:?}: {message}");
        }
    }

    #[test]
    fn v_may_have_a_smaller_head_dim_of_its_own() {
        // DeepSeek's MLA prefill: q and k 192, v 128; the output takes v's head dim.
        let (q, k) = (bhsd([1, 4, 16, 192]), bhsd([1, 2, 32, 192]));
        let v = bhsd([1, 2, 32, 128]);
        let shape = check(q, k, v, Some(bhsd([1, 4, 16, 128])), Some([1, 4, 16])).unwrap();
        assert_eq!((shape.head_dim, shape.head_dim_v), (192, 128));
        assert!(shape.split_head_dims() && shape.needs_flash_ws());
        assert_eq!(shape.out_dims(), [1, 4, 16, 128]);
        assert_eq!((shape.v_len(), shape.out_len()), (2 * 32 * 128, 4 * 16 * 128));
        assert_eq!(shape.to_string(), "(1, 4 (kv 2), 16/32, 192 (v 128))");
        // An output with q's head dim is refused, as are a larger v head dim and one that is not
        // a multiple of 8.
        let message = incompatible(check(q, k, v, Some(q), None));
        assert!(
            message.contains("q's dims with v's head dim, [1, 4, 16, 128]"),
            "{message}"
        );
        for dv in [256, 100] {
            let v = bhsd([1, 2, 32, dv]);
            let refused = check(q, k, v, None, None).unwrap_err().to_string();
            assert!(refused.contains(&format!("v's head dim {dv}")), "{refused}");
        }
        // The paths without it refuse it in one line (the backward here).
        let message = shape.require_one_head_dim().unwrap_err().to_string();
        assert!(message.contains("only the dense forward on sm_90"), "{message}");
    }

    #[test]
    fn batch_head_dim_and_heads_must_fit_q() {
        let q = bhsd([2, 8, 16, 64]);
        let kv = |dims| (bhsd(dims), bhsd(dims));
        let (k, v) = kv([1, 8, 16, 64]);
        assert!(incompatible(check(q, k, v, None, None)).contains("batch"));
        let (k, v) = kv([2, 8, 16, 128]);
        assert!(incompatible(check(q, k, v, None, None)).contains("head dim"));
        for heads_kv in [3, 16, 0] {
            let (k, v) = kv([2, heads_kv, 16, 64]);
            let message = incompatible(check(q, k, v, None, None));
            assert!(message.contains("must divide q's 8"), "{heads_kv}: {message}");
        }
    }

    #[test]
    fn the_output_takes_qs_dims() {
        let q = bhsd([1, 4, 16, 64]);
        let kv = bhsd([1, 4, 32, 64]);
        // Shaped like the keys (S_k) rather than the queries (S_q): refused.
        let message = incompatible(check(q, kv, kv, Some(kv), None));
        assert!(
            message.contains("it takes q's dims with v's head dim"),
            "{message}"
        );
    }

    #[test]
    fn the_log_sum_exp_is_batch_heads_query_rows() {
        let q = bhsd([2, 8, 100, 64]);
        let kv = bhsd([2, 2, 37, 64]);
        // Key heads or key length instead of the queries': refused.
        for lse in [[2, 2, 100], [2, 8, 37], [1, 8, 100], [2, 8, 101]] {
            let message = incompatible(check(q, kv, kv, None, Some(lse)));
            assert!(
                message.contains("[B, H, S_q] = [2, 8, 100]"),
                "{lse:?}: {message}"
            );
        }
    }

    #[test]
    fn what_the_kernels_cannot_take_is_refused_too() {
        let d100 = bhsd([1, 2, 16, 100]);
        assert!(matches!(
            check(d100, d100, d100, None, None),
            Err(Error::UnsupportedHeadDim(100, _))
        ));
        let d264 = bhsd([1, 2, 16, 264]);
        assert!(matches!(
            check(d264, d264, d264, None, None),
            Err(Error::UnsupportedHeadDim(264, _))
        ));
        // Multiples of 8 up to 256 run padded on sm_90 (`kernel_head_dim`).
        for d in [8, 96, 192, 248] {
            let t = bhsd([1, 2, 16, d]);
            assert!(check(t, t, t, None, None).is_ok(), "{d}");
        }
        let q = bhsd([1, 2, 16, 64]);
        for scale in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let params = Params {
                causal: true,
                scale: Some(scale),
                ..Params::default()
            };
            assert!(
                matches!(plan(q, q, q, None, None, params), Err(Error::InvalidProblem(_))),
                "{scale}"
            );
        }
        let empty = bhsd([1, 2, 0, 64]);
        assert!(matches!(
            check(empty, empty, empty, None, None),
            Err(Error::InvalidProblem(_))
        ));
    }

    #[test]
    fn host_data_must_fill_the_dims() {
        let named = || "x".to_string();
        // 4-D dense, 3-D packed and 4-D paged tensors go through the same check.
        for dims in [&[2, 3, 5, 64][..], &[30, 1, 64], &[1, 15, 2, 64]] {
            assert!(check_host_len(dims, 1920, named).is_ok(), "{dims:?}");
            for len in [0, 1919, 1921] {
                match check_host_len(dims, len, named) {
                    Err(Error::Length {
                        expected: 1920,
                        actual,
                        ..
                    }) if actual == len => {}
                    other => panic!("{dims:?} {len}: {other:?}"),
                }
            }
        }
        assert!(matches!(
            check_host_len(&[1, 0, 5, 64], 0, named),
            Err(Error::InvalidProblem(_))
        ));
        // A count that wraps must not match a small slice.
        let huge = [usize::MAX / 2 + 1, 2, 1, 1];
        assert!(matches!(
            check_host_len(&huge, 0, named),
            Err(Error::InvalidProblem(_))
        ));
    }

    /// `plan_varlen` on prefix sums straight from the caller, as the typed path meets them:
    /// `VarlenBatch::new` first, then the packed tensors' dims.
    fn varlen_plan(
        cu_q: &[i32],
        cu_k: &[i32],
        q: [usize; 3],
        kv: [usize; 3],
        out: Option<[usize; 3]>,
        lse: Option<[usize; 3]>,
    ) -> Result<(usize, usize, usize)> {
        let batch = VarlenBatch::new(cu_q.to_vec(), cu_k.to_vec())?;
        plan_varlen([q, kv, kv], out, lse, &batch, plain())
    }

    /// The one-line message of any error.
    fn refusal<T: std::fmt::Debug>(result: Result<T>) -> String {
        let message = format!("{:?}", result.unwrap_err());
        assert_eq!(message.lines().count(), 1, "{message}");
        message
    }

    #[test]
    fn varlen_calls_check_the_prefix_sums_against_the_packed_rows() {
        // Three sequences: 3, 0 and 7 queries (10 rows), 5, 1 and 0 keys (6 rows).
        let (cu_q, cu_k) = (&[0, 3, 3, 10][..], &[0, 5, 6, 6][..]);
        let (q, kv) = ([10, 8, 128], [6, 2, 128]);
        assert_eq!(
            varlen_plan(cu_q, cu_k, q, kv, Some(q), Some([1, 8, 10])).unwrap(),
            (8, 2, 128)
        );
        let refused = |cu_q: &[i32], cu_k: &[i32]| refusal(varlen_plan(cu_q, cu_k, q, kv, None, None));
        assert!(refused(&[0, 4, 3, 10], cu_k).contains("cu_seqlens_q decreases at entry 2"));
        assert!(refused(cu_q, &[0, 5, 6, 6, 6]).contains("both must be B + 1"));
        assert!(refused(&[1, 3, 3, 10], cu_k).contains("cu_seqlens_q[0] = 1"));
        // The last entry is the packed rows in all: one short or long either way is refused.
        for (cu_q, cu_k, needle) in [
            (
                &[0, 3, 3, 9][..],
                cu_k,
                "q has 10 packed rows, but cu_seqlens_q ends at 9",
            ),
            (&[0, 3, 3, 11][..], cu_k, "cu_seqlens_q ends at 11"),
            (
                cu_q,
                &[0, 5, 6, 7][..],
                "k and v have 6 packed rows, but cu_seqlens_k ends at 7",
            ),
        ] {
            let message = refused(cu_q, cu_k);
            assert!(message.contains(needle), "{message}");
            assert!(matches!(
                varlen_plan(cu_q, cu_k, q, kv, None, None),
                Err(Error::Incompatible(_))
            ));
        }
    }

    #[test]
    fn varlen_calls_check_heads_output_and_log_sum_exp() {
        let (cu_q, cu_k) = (&[0, 3, 10][..], &[0, 5, 6][..]);
        let q = [10, 8, 64];
        let check = |q: [usize; 3], k: [usize; 3], v: [usize; 3], out, lse| {
            let batch = VarlenBatch::new(cu_q.to_vec(), cu_k.to_vec()).unwrap();
            refusal(plan_varlen([q, k, v], out, lse, &batch, plain()))
        };
        let kv = [6, 2, 64];
        assert!(check(q, kv, [6, 4, 64], None, None).contains("the same dims"));
        assert!(check(q, [6, 2, 128], [6, 2, 128], None, None).contains("the same head dim"));
        assert!(check(q, [6, 3, 64], [6, 3, 64], None, None).contains("must divide q's 8"));
        assert!(check(q, kv, kv, Some(kv), None).contains("takes q's dims"));
        // The log-sum-exp is [1, H, total_q]; [B, H, S] of the padded batch is refused.
        for lse in [[8, 10, 1], [2, 8, 7], [1, 2, 10]] {
            assert!(
                check(q, kv, kv, None, Some(lse)).contains("[1, H, total_q]"),
                "{lse:?}"
            );
        }
        assert!(check([10, 8, 100], [6, 2, 100], [6, 2, 100], None, None).contains("100"));
        let batch = VarlenBatch::new(cu_q.to_vec(), cu_k.to_vec()).unwrap();
        let nan_scale = Params {
            causal: true,
            scale: Some(f32::NAN),
            ..Params::default()
        };
        assert!(matches!(
            plan_varlen([q, kv, kv], None, None, &batch, nan_scale),
            Err(Error::InvalidProblem(_))
        ));
    }

    /// `plan_paged` on a table and lengths straight from the caller: `PagedKv::new` first, then
    /// the tensors' dims.
    fn paged_plan(table: &[i32], lens: &[i32], q: [usize; 4], cache_dims: [usize; 4]) -> Result<Shape> {
        let [num_blocks, block_size, ..] = cache_dims;
        let cache = PagedKv::new(block_size, num_blocks, table.to_vec(), lens.to_vec())?;
        plan_paged(
            bhsd(q),
            [cache_dims, cache_dims],
            Some(bhsd(q)),
            Some([q[0], q[1], q[2]]),
            &cache,
            plain(),
        )
    }

    #[test]
    fn paged_calls_check_the_table_and_lengths_before_anything_runs() {
        // Two sequences of 20 and 1 keys in 4 pages of 16: the first uses pages 3 and 1.
        let table = [3, 1, -1, 0, 9, 9];
        let (q, caches) = ([2, 8, 1, 128], [4, 16, 2, 128]);
        let shape = paged_plan(&table, &[20, 1], q, caches).unwrap();
        assert_eq!(
            (shape.batch, shape.seq_k, shape.heads_kv, shape.seq_q),
            (2, 20, 2, 1)
        );
        let refused = |table: &[i32], lens: &[i32], q, caches| refusal(paged_plan(table, lens, q, caches));
        assert!(refused(&[3, 4, -1, 0, 9, 9], &[20, 1], q, caches).contains("block_table[0, 1] = 4"));
        assert!(refused(&[3, 1, -1, -1, 9, 9], &[20, 1], q, caches).contains("block_table[1, 0] = -1"));
        // Lengths past what the table row holds (3 pages of 16), or negative.
        assert!(refused(&table, &[49, 1], q, caches).contains("seqlens_k[0] = 49"));
        assert!(refused(&table, &[20, -1], q, caches).contains("seqlens_k[1] = -1"));
        assert!(refused(&table, &[20, 1, 1, 1], q, caches).contains("equal rows"));
        // Caches that are not the ones the table indexes, or a batch of other sequences.
        let k_only = |dims| {
            let cache = PagedKv::new(16, 4, table.to_vec(), vec![20, 1]).unwrap();
            refusal(plan_paged(bhsd(q), [dims, caches], None, None, &cache, plain()))
        };
        assert!(k_only([4, 16, 2, 64]).contains("the same dims"));
        let wrong_pages = PagedKv::new(16, 5, table.to_vec(), vec![20, 1]).unwrap();
        let message = refusal(plan_paged(
            bhsd(q),
            [caches, caches],
            None,
            None,
            &wrong_pages,
            plain(),
        ));
        assert!(
            message.contains("hold 4 pages of 16 keys, the block table indexes 5"),
            "{message}"
        );
        let message = refused(&table[..3], &[20], q, [4, 16, 2, 128]);
        assert!(message.contains("q has batch 2, seqlens_k has 1"), "{message}");
    }

    #[test]
    fn paged_calls_check_heads_output_and_log_sum_exp() {
        let cache = PagedKv::new(16, 4, vec![0, 1], vec![17]).unwrap();
        let caches = [4, 16, 2, 64];
        let check = |q: [usize; 4], caches: [usize; 4], out: Option<Operand>, lse| {
            refusal(plan_paged(bhsd(q), [caches, caches], out, lse, &cache, plain()))
        };
        let q = [1, 8, 3, 64];
        assert!(check(q, [4, 16, 2, 128], None, None).contains("the same head dim"));
        assert!(check(q, [4, 16, 3, 64], None, None).contains("must divide q's 8"));
        assert!(check(q, caches, Some(bhsd([1, 8, 17, 64])), None).contains("q's dims and layout"));
        let bshd = Operand {
            layout: Layout::Bshd,
            ..bhsd(q)
        };
        assert!(check(q, caches, Some(bshd), None).contains("q's dims and layout"));
        assert!(check(q, caches, None, Some([1, 2, 3])).contains("[B, H, S_q] = [1, 8, 3]"));
        assert!(check([1, 8, 3, 96], [4, 16, 2, 96], None, None).contains("96"));
        // q in [B, S, H, D] with the output alike is fine.
        assert!(plan_paged(bshd, [caches, caches], Some(bshd), None, &cache, plain()).is_ok());
    }

    #[test]
    fn element_types_name_their_dtype() {
        assert_eq!(<f16 as Element>::DTYPE, DType::F16);
        assert_eq!(<bf16 as Element>::DTYPE, DType::Bf16);
    }

    #[test]
    fn a_named_variant_must_be_a_compiled_one() {
        let compiled = &crate::VARIANTS[0];
        assert_eq!(compiled_variant(compiled).unwrap(), compiled);
        // A copy with other tiles under a compiled variant's name is refused, not launched with
        // the compiled variant's facts or its own.
        let forged: &'static VariantSpec = Box::leak(Box::new(VariantSpec {
            spec: crate::Spec {
                block_m: compiled.block_m * 2,
                ..compiled.spec
            },
            ..*compiled
        }));
        assert!(matches!(compiled_variant(forged), Err(Error::UnknownKernel(_))));
    }

    /// A view at `ptr`; nothing dereferences it in these tests.
    fn view(ptr: u64, dims: [usize; 4], layout: Layout) -> TensorView<'static, f16> {
        // Safety: the checks below only read the address and dims.
        unsafe { TensorView::from_raw(ptr, dims, layout) }
    }

    /// Q, K, V and an output of `[1, 4, 64, 64]` (32 KiB each) at distinct, aligned addresses.
    fn views() -> [TensorView<'static, f16>; 4] {
        let base = 0x7f00_0000_0000;
        [0, 1, 2, 3].map(|i| view(base + i * 0x10_0000, [1, 4, 64, 64], Layout::Bhsd))
    }

    fn raw_check(
        [q, k, v, out]: [TensorView<'static, f16>; 4],
        lse: Option<u64>,
    ) -> Result<(Shape, RawTensors)> {
        let shape = check_views(&q, &k, &v, Some(&out), lse, RawOptions::default())?;
        Ok((shape, raw_tensors([&q, &k, &v, &out], lse, None, shape)))
    }

    #[test]
    fn views_pass_the_safe_paths_checks_and_name_their_buffers() {
        let [q, k, v, out] = views();
        let (shape, raw) = raw_check([q, k, v, out], Some(0x7f00_1000_0000)).unwrap();
        assert_eq!(shape, Shape::new(1, 4, 64, 64));
        assert_eq!((raw.q.ptr, raw.q.len), (q.ptr(), 4 * 64 * 64));
        assert_eq!((raw.out.ptr, raw.out.len), (out.ptr(), 4 * 64 * 64));
        assert_eq!(raw.lse.map(|l| (l.ptr, l.len)), Some((0x7f00_1000_0000, 4 * 64)));
        // Inputs alone (before an output exists), grouped heads from the shapes.
        let kv = view(k.ptr(), [1, 2, 100, 64], Layout::Bhsd);
        let shape = check_views(&q, &kv, &kv, None, None, RawOptions::default()).unwrap();
        assert_eq!((shape.heads_kv, shape.seq_k), (2, 100));
    }

    #[test]
    fn a_wrong_output_or_mismatched_view_is_a_typed_error() {
        let [q, k, v, out] = views();
        let long = view(out.ptr(), [1, 4, 65, 64], Layout::Bhsd);
        assert!(incompatible(raw_check([q, k, v, long], None).map(|r| r.0)).contains("output"));
        // Safety: never dereferenced; only the checks read it.
        let strided_out = unsafe {
            TensorView::<f16>::from_strided(out.ptr(), [1, 4, 64, 64], Strides([32768, 8192, 64, 1]))
        };
        assert!(incompatible(raw_check([q, k, v, strided_out], None).map(|r| r.0)).contains("contiguous"));
        // Inputs and the output each in their own layout are the launch's to judge (the kernels
        // that read through the copy engine take them).
        let v_bshd = view(v.ptr(), [1, 4, 64, 64], Layout::Bshd);
        let out_bshd = view(out.ptr(), [1, 4, 64, 64], Layout::Bshd);
        assert!(raw_check([q, k, v_bshd, out_bshd], None).is_ok());
        // A head dim the kernels pad (96 on 128's tiles) passes the checks; one that is not a
        // multiple of 8 does not.
        let d96 = [q, k, v, out].map(|t| view(t.ptr(), [1, 4, 64, 96], Layout::Bhsd));
        assert!(raw_check(d96, None).is_ok());
        let d100 = [q, k, v, out].map(|t| view(t.ptr(), [1, 4, 64, 100], Layout::Bhsd));
        assert!(matches!(
            raw_check(d100, None),
            Err(Error::UnsupportedHeadDim(100, _))
        ));
        let bad_scale = RawOptions {
            causal: true,
            scale: Some(f32::NAN),
            ..RawOptions::default()
        };
        assert!(matches!(
            check_views(&q, &k, &v, Some(&out), None, bad_scale),
            Err(Error::InvalidProblem(_))
        ));
    }

    #[test]
    fn null_misaligned_and_overlapping_addresses_are_typed_errors() {
        let names = ["q", "k", "v", "out"];
        for (i, name) in names.into_iter().enumerate() {
            let mut null = views();
            null[i] = view(0, null[i].dims(), Layout::Bhsd);
            assert!(
                matches!(raw_check(null, None), Err(Error::NullPointer { what }) if what == name),
                "{name}"
            );
            let mut odd = views();
            odd[i] = view(odd[i].ptr() + 8, odd[i].dims(), Layout::Bhsd);
            assert!(
                matches!(raw_check(odd, None), Err(Error::Misaligned { what, align: 16, .. }) if what == name),
                "{name}"
            );
        }
        assert!(matches!(
            raw_check(views(), Some(0)),
            Err(Error::NullPointer { what: "lse" })
        ));
        assert!(matches!(
            raw_check(views(), Some(0x7f00_1000_0002)),
            Err(Error::Misaligned {
                what: "lse",
                align: 4,
                ..
            })
        ));
        // The output on top of V's last half, the log-sum-exp inside Q or the output.
        let [q, k, v, _] = views();
        let out = view(v.ptr() + 0x4000, v.dims(), Layout::Bhsd);
        let message = incompatible(raw_check([q, k, v, out], None).map(|r| r.0));
        assert!(message.contains("out overlaps v"), "{message}");
        for (inside, name) in [(q.ptr(), "q"), (views()[3].ptr() + 0x7ffc, "out")] {
            let message = incompatible(raw_check(views(), Some(inside)).map(|r| r.0));
            assert!(message.contains(&format!("lse overlaps {name}")), "{message}");
        }
        // Adjacent is fine: the output right after V.
        let out = view(v.ptr() + 0x8000, v.dims(), Layout::Bhsd);
        assert!(raw_check([q, k, v, out], None).is_ok());
    }

    #[test]
    fn the_sinks_address_is_checked_with_the_views() {
        let [q, k, v, out] = views();
        let with_sinks = |sinks| RawOptions {
            sinks: Some(sinks),
            ..RawOptions::default()
        };
        let check = |sinks| check_views(&q, &k, &v, Some(&out), None, with_sinks(sinks));
        // Four heads' floats of their own, the sinks reach the raw buffers with that length.
        let own = 0x7f00_2000_0000;
        let shape = check(own).unwrap();
        let raw = raw_tensors([&q, &k, &v, &out], None, Some(own), shape);
        assert_eq!(raw.sinks.map(|s| (s.ptr, s.len)), Some((own, 4)));
        assert!(matches!(check(0), Err(Error::NullPointer { what: "sinks" })));
        assert!(matches!(
            check(own + 4),
            Err(Error::Misaligned {
                what: "sinks",
                align: 16,
                ..
            })
        ));
        // Read only: inside an input is allowed, inside the output (which the kernels write) is
        // refused.
        assert!(check(q.ptr()).is_ok());
        let message = incompatible(check(out.ptr() + 0x100));
        assert!(message.contains("out overlaps sinks"), "{message}");
    }

    #[test]
    fn strides_tell_the_layout_or_are_refused() {
        let dims = [2, 8, 100, 64];
        assert_eq!(
            layout_from_strides("q", dims, [8 * 100 * 64, 100 * 64, 64, 1]).unwrap(),
            Layout::Bhsd
        );
        // A [B, S, H, D] tensor transposed to [B, H, S, D].
        assert_eq!(
            layout_from_strides("q", dims, [100 * 8 * 64, 64, 8 * 64, 1]).unwrap(),
            Layout::Bshd
        );
        // Size-1 dims may have any stride.
        assert_eq!(
            layout_from_strides("q", [1, 8, 1, 64], [0, 64, 7, 1]).unwrap(),
            Layout::Bhsd
        );
        for strides in [
            [8 * 100 * 64, 100 * 64, 64, 2],
            [8 * 100 * 128, 100 * 128, 128, 1],
            [64, 100 * 64, 8 * 100 * 64, 1],
            [-(8 * 100 * 64), 100 * 64, 64, 1],
        ] {
            match layout_from_strides("k", dims, strides) {
                Err(e @ Error::NotContiguous { what: "k", .. }) => {
                    assert_eq!(e.to_string().lines().count(), 1)
                }
                other => panic!("{strides:?}: {other:?}"),
            }
        }
    }
}
