//! Variable-length attention on caller-owned device memory, enqueued on the caller's stream:
//! [`varlen_attention_raw`] is to [`varlen_attention`](crate::api::varlen_attention) what
//! [`attention_raw`](crate::api::attention_raw) is to the dense call, for packed tensors of
//! another library (PyTorch's `flash_attn_varlen_func` layout). The prefix sums stay a checked
//! host [`VarlenBatch`]: the kernels index by a device copy the library stages from it at each
//! launch (replayable under CUDA-graph capture), never by memory the caller could change.

use std::marker::PhantomData;

use crate::api::{borrow_stream, check_addresses, plan_varlen, CurrentContext, Element, RawOptions};
use crate::error::Result;
use crate::gpu::{Gpu, RawBuffer, RawTensors};
use crate::variants::VariantSpec;
use crate::varlen::VarlenBatch;

/// A borrowed packed tensor `[total, heads, D]` of `T` in device memory, contiguous (row `i`,
/// head `h`, element `d` at `(i * heads + h) * D + d`): an input or the output of
/// [`varlen_attention_raw`], made from its address with [`PackedView::from_raw`].
pub struct PackedView<'a, T: Element> {
    ptr: u64,
    dims: [usize; 3],
    _borrow: PhantomData<&'a T>,
}

impl<T: Element> Clone for PackedView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Element> Copy for PackedView<'_, T> {}

impl<T: Element> std::fmt::Debug for PackedView<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedView<{}>({:#x}, {:?})", T::DTYPE, self.ptr, self.dims)
    }
}

impl<'a, T: Element> PackedView<'a, T> {
    /// Views `dims` (`[total, heads, D]`) contiguous elements of `T` at device address `ptr`.
    /// Nothing is checked here; [`varlen_attention_raw`] and [`check_packed_views`] check the
    /// dims against each other and the batch, and the address for null and alignment.
    ///
    /// # Safety
    /// `ptr` is a device pointer in the context of the [`Gpu`] the view will be used with, to
    /// `dims` contiguous elements of `T`, 16-byte aligned (checked anyway), valid for reads and,
    /// for an output, writes, for `'a`.
    pub unsafe fn from_raw(ptr: u64, dims: [usize; 3]) -> Self {
        PackedView {
            ptr,
            dims,
            _borrow: PhantomData,
        }
    }

    /// The dims `[total, heads, D]`.
    pub fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// The device address of the first element.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    fn bytes(&self) -> u128 {
        self.dims.iter().map(|&d| d as u128).product::<u128>() * std::mem::size_of::<T>() as u128
    }

    /// The view as the launches take buffers: 16-bit elements (what `T` is).
    fn buffer(&self) -> RawBuffer<u16> {
        RawBuffer::new(self.ptr, self.dims.iter().product())
    }
}

/// Every check [`varlen_attention_raw`] makes before it touches the GPU, without one: the
/// packed dims against each other and against `batch` (as [`check_varlen`](crate::check_varlen)
/// checks them), the head dim and options, and null, misaligned and overlapping addresses. `out`
/// and `lse` are optional so that inputs can be checked before their output is allocated.
/// Returns `(H, H_kv, D)`.
pub fn check_packed_views<T: Element>(
    [q, k, v]: [&PackedView<'_, T>; 3],
    out: Option<&PackedView<'_, T>>,
    lse: Option<u64>,
    batch: &VarlenBatch,
    options: RawOptions,
) -> Result<(usize, usize, usize)> {
    let heads = plan_varlen(
        [q.dims, k.dims, v.dims],
        out.map(|out| out.dims),
        None,
        batch,
        options.into(),
    )?;
    let mut buffers = vec![
        ("q", q.ptr, q.bytes()),
        ("k", k.ptr, k.bytes()),
        ("v", v.ptr, v.bytes()),
    ];
    buffers.extend(out.map(|out| ("out", out.ptr, out.bytes())));
    let lse_bytes = 4 * heads.0 as u128 * batch.total_q() as u128;
    buffers.extend(options.sinks.map(|ptr| ("sinks", ptr, 4 * heads.0 as u128)));
    check_addresses(&buffers, lse.map(|ptr| (ptr, lse_bytes)))?;
    Ok(heads)
}

/// Variable-length attention on packed views of caller-owned memory, enqueued on the caller's
/// stream: `q` and `out` are `[total_q, H, D]`, `k` and `v` `[total_k, H_kv, D]`, sequence `b`
/// at rows `cu_seqlens[b]..cu_seqlens[b + 1]` of `batch`; a causal mask is aligned bottom-right
/// per sequence. `lse`, when given, receives each query row's log-sum-exp, `[H, total_q]` fp32
/// (`-inf` for a row that sees no key). The checks of [`check_packed_views`] run first (a
/// mismatch is a typed error and nothing is launched); the kernel is the one
/// [`Gpu::choose_varlen`] picks, and is returned. A batch with no query launches nothing.
/// Asynchronous: the work is ordered on `stream` after what the caller enqueued there before.
/// Under CUDA-graph capture the launch reads, at every replay, the prefix sums and shapes of
/// the captured call and the views' current contents.
///
/// # Safety
/// - every view satisfies the contract of [`PackedView::from_raw`] until the stream has run the
///   launch (`out` for writes);
/// - `lse`, when `Some`, points at `H * total_q` f32, valid for writes likewise;
/// - `stream` is a valid `CUstream` of the `Gpu`'s context, or null for the legacy default
///   stream, and stays valid for the call;
/// - nothing else writes `q`, `k`, `v` or touches `out` and `lse` until the stream has run the
///   launch, unless ordered after it.
// The inputs one by one, as foreign callers hold them (as `attention_raw` takes them).
#[allow(clippy::too_many_arguments)]
pub unsafe fn varlen_attention_raw<T: Element>(
    gpu: &Gpu,
    q: PackedView<'_, T>,
    k: PackedView<'_, T>,
    v: PackedView<'_, T>,
    out: PackedView<'_, T>,
    lse: Option<u64>,
    batch: &VarlenBatch,
    options: RawOptions,
    stream: *mut std::ffi::c_void,
) -> Result<&'static VariantSpec> {
    let heads = check_packed_views([&q, &k, &v], Some(&out), lse, batch, options)?;
    let (h, h_kv, d) = heads;
    let variant = gpu.choose_varlen(batch, h, h_kv, d)?;
    if batch.total_q() == 0 {
        return Ok(variant);
    }
    let kernel = gpu.varlen_kernel(variant, d, T::DTYPE, false)?;
    // The caller's current context (torch's current device) is current again on return.
    let _restore = CurrentContext::save()?;
    // Safety: `stream` is null or a live stream handle for this call (this function's contract).
    let stream = unsafe { borrow_stream(gpu, stream) }?;
    let raw = RawTensors {
        q: q.buffer(),
        k: k.buffer(),
        v: v.buffer(),
        out: out.buffer(),
        lse: lse.map(|ptr| RawBuffer::new(ptr, h * batch.total_q())),
        sinks: options.sinks.map(|ptr| RawBuffer::new(ptr, h)),
    };
    // Safety (the contract of `varlen_tensors_on`): the views address allocations of this GPU's
    // context holding the elements their dims say, which `check_packed_views` checked against
    // the batch, valid until `stream` has run the work, touched by nothing unordered with it
    // meanwhile (this function's contract); the output and log-sum-exp overlap nothing else
    // (checked).
    let mut tensors = unsafe { gpu.varlen_tensors_on(&stream, batch.clone(), heads, T::DTYPE, raw) }?;
    gpu.launch_varlen(&kernel, &mut tensors, options.into(), None)?;
    Ok(variant)
}
