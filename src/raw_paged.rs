//! Attention against a paged KV cache on caller-owned device memory, enqueued on the caller's
//! stream: [`paged_attention_raw`] is to [`paged_attention`](crate::api::paged_attention) what
//! [`attention_raw`](crate::api::attention_raw) is to the dense call (PyTorch's
//! `flash_attn_with_kvcache` layout). The block table and lengths stay a checked host
//! [`PagedKv`]: the kernels index by a device copy the library stages from it at each launch
//! (replayable under CUDA-graph capture), never by memory the caller could change.

use std::marker::PhantomData;

use crate::api::{
    borrow_stream, check_addresses, plan_paged, CurrentContext, Element, RawOptions, TensorView,
};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, RawBuffer, RawTensors};
use crate::paged::PagedKv;
use crate::problem::Shape;
use crate::variants::VariantSpec;

/// A borrowed paged cache `[num_blocks, block_size, H_kv, D]` of `T` in device memory,
/// contiguous: the K or V cache of [`paged_attention_raw`], made with [`CacheView::from_raw`].
pub struct CacheView<'a, T: Element> {
    ptr: u64,
    dims: [usize; 4],
    _borrow: PhantomData<&'a T>,
}

impl<T: Element> Clone for CacheView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Element> Copy for CacheView<'_, T> {}

impl<T: Element> std::fmt::Debug for CacheView<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheView<{}>({:#x}, {:?})", T::DTYPE, self.ptr, self.dims)
    }
}

impl<T: Element> CacheView<'_, T> {
    /// Views `dims` (`[num_blocks, block_size, H_kv, D]`) contiguous elements of `T` at device
    /// address `ptr`. Nothing is checked here; [`paged_attention_raw`] checks the dims against
    /// the query and the block table, and the address for null and alignment.
    ///
    /// # Safety
    /// `ptr` is a device pointer in the context of the [`Gpu`] the view will be used with, to
    /// `dims` contiguous elements of `T`, 16-byte aligned (checked anyway), valid for reads for
    /// the view's lifetime.
    pub unsafe fn from_raw(ptr: u64, dims: [usize; 4]) -> Self {
        CacheView {
            ptr,
            dims,
            _borrow: PhantomData,
        }
    }

    /// The dims `[num_blocks, block_size, H_kv, D]`.
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }

    /// The device address of the first element.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    fn elements(&self) -> usize {
        self.dims.iter().product()
    }
}

/// Every check [`paged_attention_raw`] makes before it touches the GPU, without one: `q`
/// (contiguous, either layout) and the caches against each other and against `cache`'s table and
/// lengths (as [`check_paged`](crate::check_paged) checks them), the output (q's dims and
/// layout), the head dim and options, and null, misaligned and overlapping addresses. Returns the
/// problem's shape (`seq_k`: the longest sequence).
pub fn check_paged_views<T: Element>(
    q: &TensorView<'_, T>,
    [k, v]: [&CacheView<'_, T>; 2],
    out: Option<&TensorView<'_, T>>,
    lse: Option<u64>,
    cache: &PagedKv,
    options: RawOptions,
) -> Result<Shape> {
    if !q.is_contiguous() || out.is_some_and(|out| !out.is_contiguous()) {
        return Err(Error::Incompatible(
            "paged KV cache: q and the output must be contiguous in one layout".into(),
        ));
    }
    let shape = plan_paged(
        q.operand(),
        [k.dims, v.dims],
        out.map(|o| o.operand()),
        None,
        cache,
        options.into(),
    )?;
    let bytes = |elements: usize| elements as u128 * std::mem::size_of::<T>() as u128;
    let mut buffers = vec![
        ("q", q.ptr(), bytes(shape.q_len())),
        ("k cache", k.ptr, bytes(k.elements())),
        ("v cache", v.ptr, bytes(v.elements())),
    ];
    buffers.extend(out.map(|out| ("out", out.ptr(), bytes(shape.q_len()))));
    let lse_bytes = 4 * shape.lse_len().unwrap_or(usize::MAX) as u128;
    buffers.extend(options.sinks.map(|ptr| ("sinks", ptr, 4 * shape.heads as u128)));
    check_addresses(&buffers, lse.map(|ptr| (ptr, lse_bytes)))?;
    Ok(shape)
}

/// Attention of `q` (`[B, H, S_q, D]`, contiguous in either layout) against a paged KV cache on
/// caller-owned memory, enqueued on the caller's stream: the caches are `[num_blocks,
/// block_size, H_kv, D]`, sequence `b`'s keys the first `seqlens_k[b]` of the pages its row of
/// `cache`'s block table lists; a causal mask is aligned bottom-right per sequence. `out` takes
/// q's dims and layout; `lse`, when given, receives each query row's log-sum-exp (`[B, H, S_q]`
/// fp32). The checks of [`check_paged_views`] run first (a mismatch is a typed error and nothing
/// is launched); the kernel is the one [`Gpu::choose_paged`] picks, and is returned.
/// Asynchronous. Under CUDA-graph capture the launch reads, at every replay, the block table and
/// lengths of the captured call and the views' current contents.
///
/// # Safety
/// - `q`, `out` satisfy the contract of [`TensorView::from_raw`] and the caches that of
///   [`CacheView::from_raw`], until the stream has run the launch (`out` for writes);
/// - `lse`, when `Some`, points at `B * H * S_q` f32, valid for writes likewise;
/// - `stream` is a valid `CUstream` of the `Gpu`'s context, or null for the legacy default
///   stream, and stays valid for the call;
/// - nothing else writes `q` or the caches or touches `out` and `lse` until the stream has run
///   the launch, unless ordered after it.
// The inputs one by one, as foreign callers hold them (as `attention_raw` takes them).
#[allow(clippy::too_many_arguments)]
pub unsafe fn paged_attention_raw<T: Element>(
    gpu: &Gpu,
    q: TensorView<'_, T>,
    k_cache: CacheView<'_, T>,
    v_cache: CacheView<'_, T>,
    out: TensorView<'_, T>,
    lse: Option<u64>,
    cache: &PagedKv,
    options: RawOptions,
    stream: *mut std::ffi::c_void,
) -> Result<&'static VariantSpec> {
    let shape = check_paged_views(&q, [&k_cache, &v_cache], Some(&out), lse, cache, options)?;
    let variant = gpu.choose_paged(shape, cache.block_size())?;
    let kernel = gpu.paged_kernel(variant, shape.head_dim, T::DTYPE, false)?;
    // The caller's current context (torch's current device) is current again on return.
    let _restore = CurrentContext::save()?;
    // Safety: `stream` is null or a live stream handle for this call (this function's contract).
    let stream = unsafe { borrow_stream(gpu, stream) }?;
    let raw = RawTensors {
        q: RawBuffer::new(q.ptr(), shape.q_len()),
        k: RawBuffer::new(k_cache.ptr, k_cache.elements()),
        v: RawBuffer::new(v_cache.ptr, v_cache.elements()),
        out: RawBuffer::new(out.ptr(), shape.q_len()),
        lse: lse.map(|ptr| RawBuffer::new(ptr, shape.lse_len().unwrap_or(0))),
        sinks: options.sinks.map(|ptr| RawBuffer::new(ptr, shape.heads)),
    };
    // Safety (the contract of `paged_tensors_on`): the views address allocations of this GPU's
    // context holding the elements their dims say, which `check_paged_views` checked against the
    // shape and table, valid until `stream` has run the work, touched by nothing unordered with
    // it meanwhile (this function's contract); the output and log-sum-exp overlap nothing else
    // (checked).
    let layout = q.layout();
    let mut tensors =
        unsafe { gpu.paged_tensors_on(&stream, (layout, shape, T::DTYPE), cache.clone(), raw) }?;
    gpu.launch_paged(&kernel, &mut tensors, options.into(), None)?;
    Ok(variant)
}
