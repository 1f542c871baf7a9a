//! flashrs's attention kernels as a [candle](https://crates.io/crates/candle-core) op:
//! [`flash_attn`] takes the arguments of `candle_flash_attn::flash_attn` (same tensor layout,
//! same conventions) and runs on candle's CUDA stream, writing an output candle allocates.
//!
//! ```no_run
//! use candle_core::{DType, Device, Tensor};
//!
//! # fn main() -> candle_core::Result<()> {
//! let device = Device::new_cuda(0)?;
//! // [batch, seq_len, num_heads, head_dim]; k and v with 2 heads: grouped-query attention.
//! let q = Tensor::randn(0f32, 1.0, (2, 512, 8, 64), &device)?.to_dtype(DType::F16)?;
//! let k = Tensor::randn(0f32, 1.0, (2, 512, 2, 64), &device)?.to_dtype(DType::F16)?;
//! let v = Tensor::randn(0f32, 1.0, (2, 512, 2, 64), &device)?.to_dtype(DType::F16)?;
//! let out = flashrs_candle::flash_attn(&q, &k, &v, 1.0 / 8.0, true)?; // (2, 512, 8, 64)
//! # Ok(())
//! # }
//! ```
//!
//! Every check (dtypes, dims, layouts, grouped heads, head dim, scale, alignment) runs before
//! anything is allocated or launched; a refusal is a [`candle_core::Error`] carrying flashrs's
//! one-line message, never a panic.

#![warn(missing_docs)]

use std::sync::Mutex;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::DevicePtr;
use candle_core::{CpuStorage, CudaStorage, DType, Layout as CandleLayout, Shape, Tensor};
use flashrs::api::{attention_raw, bf16, check_views, f16, RawOptions, TensorView};
use flashrs::{fits_layout, layout_from_strides, Element, Gpu};

pub use flashrs::Layout;

/// Scaled dot-product attention `softmax(softmax_scale * Q K^T) V` with flashrs's kernels, as
/// `candle_flash_attn::flash_attn` computes it.
///
/// - `q`: `[batch, seq_len_q, num_heads, head_dim]`; `k` and `v`: `[batch, seq_len_kv,
///   num_heads_kv, head_dim]`, where `num_heads_kv` divides `num_heads` (grouped-query attention;
///   multi-query when 1). Returns `[batch, seq_len_q, num_heads, head_dim]` in q's dtype.
/// - All three on one CUDA device, one dtype (`F16` or `BF16`, accumulated in f32); `head_dim`
///   64, 128 or 256 (256 on Hopper).
/// - Memory: contiguous `[batch, seq, heads, head_dim]`, or the transpose of a contiguous `[batch,
///   heads, seq, head_dim]` tensor (as `x.transpose(1, 2)` gives), read in place either way; the
///   output is laid out like q. Other strides are refused: call `.contiguous()` first.
/// - `causal` masks key `j` from query `i` unless `j <= i + seq_len_kv - seq_len_q` (aligned
///   bottom-right, as FlashAttention-2 does); a query that sees no key gets zeros.
/// - `softmax_scale` must be positive and finite (usually `1 / sqrt(head_dim)`).
///
/// The kernel is enqueued on the stream of candle's device, after the work candle enqueued
/// there, like any candle op; there is no backward pass.
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> candle_core::Result<Tensor> {
    let layout = check(q, k, v, softmax_scale, causal)?;
    for (what, t) in [("q", q), ("k", k), ("v", v)] {
        if !t.device().is_cuda() {
            return Err(message(format!(
                "{what} is on {:?}: flashrs needs CUDA tensors",
                t.device().location()
            )));
        }
    }
    for (what, t) in [("k", k), ("v", v)] {
        if !t.device().same_device(q.device()) {
            return Err(message(format!(
                "q is on {:?} and {what} on {:?}: they need one device",
                q.device().location(),
                t.device().location()
            )));
        }
    }
    let options = options(softmax_scale, causal);
    let out = q.apply_op3_no_bwd(k, v, &FlashAttn { options })?;
    match layout {
        Layout::Bshd => Ok(out),
        // The op returned `[B, H, S, D]` in q's memory order; the caller's convention is the
        // transpose, which is what q itself was.
        Layout::Bhsd => out.transpose(1, 2),
    }
}

/// Checks `q`, `k` and `v` as [`flash_attn`] will, on any device (a CPU tensor passes if a CUDA
/// tensor of its dtype, dims and strides would): the dtypes, ranks and layouts here, then
/// flashrs's own checks of dims, grouped heads, head dim, scale and alignment. Returns the
/// memory layout the kernels will read: [`Layout::Bshd`] for contiguous `[B, S, H, D]` tensors,
/// [`Layout::Bhsd`] for transposed `[B, H, S, D]` ones.
pub fn check(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> candle_core::Result<Layout> {
    let options = options(softmax_scale, causal);
    let descs = [("q", q), ("k", k), ("v", v)].map(|(what, t)| Desc {
        what,
        dtype: t.dtype(),
        dims: t.dims().to_vec(),
        strides: t.stride().to_vec(),
        offset: t.layout().start_offset(),
    });
    check_descs(&descs, options).map_err(message)
}

fn options(softmax_scale: f32, causal: bool) -> RawOptions {
    RawOptions {
        causal,
        scale: Some(softmax_scale), ..RawOptions::default() }
}

/// What the checks need of a tensor; pure values, so every refusal is testable without a GPU.
#[derive(Clone, Debug)]
struct Desc {
    what: &'static str,
    dtype: DType,
    dims: Vec<usize>,
    strides: Vec<usize>,
    /// Elements from the start of the storage.
    offset: usize,
}

impl Desc {
    fn of(what: &'static str, dtype: DType, layout: &CandleLayout) -> Desc {
        Desc {
            what,
            dtype,
            dims: layout.dims().to_vec(),
            strides: layout.stride().to_vec(),
            offset: layout.start_offset(),
        }
    }

    /// The logical `[B, H, S, D]` dims and the layout of a `[B, S, H, D]`-shaped tensor.
    fn operand(&self) -> Result<([usize; 4], Layout), String> {
        let (logical, strides) = self.logical()?;
        let layout = layout_from_strides(self.what, logical, strides).map_err(|e| e.to_string())?;
        Ok((logical, layout))
    }

    /// Dims and strides in flashrs's order, `[B, H, S, D]`.
    fn logical(&self) -> Result<([usize; 4], [i64; 4]), String> {
        let (dims, strides): ([usize; 4], [usize; 4]) = match (
            self.dims.as_slice().try_into(),
            self.strides.as_slice().try_into(),
        ) {
            (Ok(dims), Ok(strides)) => (dims, strides),
            _ => {
                return Err(format!(
                    "{} has {} dims {:?}: flashrs takes 4, [batch, seq_len, num_heads, head_dim]",
                    self.what,
                    self.dims.len(),
                    self.dims
                ))
            }
        };
        // [B, S, H, D] as the caller holds it, [B, H, S, D] as flashrs names the dims.
        let order = [0, 2, 1, 3];
        Ok((
            order.map(|axis| dims[axis]),
            order.map(|axis| strides[axis] as i64),
        ))
    }
}

/// q, k and v's dims and layouts, in one layout where one fits all three: a tensor with one head
/// (k and v under multi-query attention) or one position is contiguous in both, and must not read
/// as the other layout than q's (seen on the H100). Where none fits all, each keeps its own and
/// flashrs's check names the mismatch.
fn operands(descs: &[Desc; 3]) -> Result<Vec<([usize; 4], Layout)>, String> {
    let mut operands = descs.iter().map(Desc::operand).collect::<Result<Vec<_>, _>>()?;
    let logical = descs.iter().map(Desc::logical).collect::<Result<Vec<_>, _>>()?;
    let fits_all = |layout| {
        logical
            .iter()
            .all(|&(dims, strides)| fits_layout(dims, strides, layout))
    };
    if let Some(common) = [Layout::Bshd, Layout::Bhsd].into_iter().find(|&l| fits_all(l)) {
        for operand in &mut operands {
            operand.1 = common;
        }
    }
    Ok(operands)
}

/// The checks of [`check`] on descriptions. The addresses handed to flashrs's checks stand in for
/// the real ones (unknown off the GPU): distinct, 256-byte aligned bases, as candle's CUDA
/// allocations are, plus each tensor's offset, so the alignment they test is the offset's. The
/// real addresses are checked again before the launch.
fn check_descs(descs: &[Desc; 3], options: RawOptions) -> Result<Layout, String> {
    let dtype = descs[0].dtype;
    for desc in descs {
        if !matches!(desc.dtype, DType::F16 | DType::BF16) {
            return Err(format!(
                "{} has dtype {:?}: flashrs takes F16 or BF16",
                desc.what, desc.dtype
            ));
        }
        if desc.dtype != dtype {
            return Err(format!(
                "q is {dtype:?} and {} is {:?}: q, k and v need one dtype",
                desc.what, desc.dtype
            ));
        }
    }
    let operands = operands(descs)?;
    let stand_in = |i: usize| (1u64 << 40) * (i as u64 + 1) + 2 * descs[i].offset as u64;
    let checked = match dtype {
        DType::F16 => check_views_at::<f16>(&operands, stand_in, options),
        _ => check_views_at::<bf16>(&operands, stand_in, options),
    };
    match checked {
        Ok(_) => Ok(operands[0].1),
        // The stand-in address means nothing to the caller; the offset is what is wrong.
        Err(flashrs::Error::Misaligned { what, align, .. }) => {
            let desc = descs.iter().find(|d| d.what == what).unwrap_or(&descs[0]);
            Err(format!(
                "{what} starts {} elements ({} bytes) into its storage: flashrs needs {align}-byte aligned tensors",
                desc.offset,
                2 * desc.offset
            ))
        }
        Err(e) => Err(e.to_string()),
    }
}

fn check_views_at<T: Element>(
    operands: &[([usize; 4], Layout)],
    address: impl Fn(usize) -> u64,
    options: RawOptions,
) -> flashrs::Result<flashrs::Shape> {
    // Safety: `check_views` only compares the addresses and dims; nothing is dereferenced.
    let [q, k, v] =
        [0, 1, 2].map(|i| unsafe { TensorView::<T>::from_raw(address(i), operands[i].0, operands[i].1) });
    check_views(&q, &k, &v, None, None, options)
}

/// A candle error with `text` as its whole message (no backtrace appended, whatever
/// `RUST_BACKTRACE` says), so that a refusal reads as one line.
fn message(text: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(text.to_string())
}

/// The op [`flash_attn`] applies; its CUDA forward reads q, k and v in place.
struct FlashAttn {
    options: RawOptions,
}

impl candle_core::CustomOp3 for FlashAttn {
    fn name(&self) -> &'static str {
        "flashrs-attention"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &CandleLayout,
        _: &CpuStorage,
        _: &CandleLayout,
        _: &CpuStorage,
        _: &CandleLayout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(message("flashrs needs CUDA tensors, got CPU ones"))
    }

    fn cuda_fwd(
        &self,
        q: &CudaStorage,
        q_l: &CandleLayout,
        k: &CudaStorage,
        k_l: &CandleLayout,
        v: &CudaStorage,
        v_l: &CandleLayout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let descs = [
            Desc::of("q", q.dtype(), q_l),
            Desc::of("k", k.dtype(), k_l),
            Desc::of("v", v.dtype(), v_l),
        ];
        check_descs(&descs, self.options).map_err(message)?;
        match q.dtype() {
            DType::F16 => self.run::<f16>([q, k, v], &descs),
            _ => self.run::<bf16>([q, k, v], &descs),
        }
    }
}

impl FlashAttn {
    fn run<T>(
        &self,
        storages: [&CudaStorage; 3],
        descs: &[Desc; 3],
    ) -> candle_core::Result<(CudaStorage, Shape)>
    where
        T: Element + candle_core::cuda_backend::CudaDType,
    {
        let device = storages[0].device.clone();
        let stream = device.cuda_stream();
        let operands = operands(descs).map_err(message)?;
        let slices = storages
            .iter()
            .map(|s| s.as_cuda_slice::<T>())
            .collect::<candle_core::Result<Vec<_>>>()?;
        // The guards record the reads on candle's stream (when candle tracks events) once the
        // launch is enqueued, which is before they drop.
        let pointers: Vec<_> = slices.iter().map(|s| s.device_ptr(&stream)).collect();
        let views = [0, 1, 2].map(|i| {
            let (dims, layout) = operands[i];
            let address = pointers[i].0 + (descs[i].offset * std::mem::size_of::<T>()) as u64;
            // Safety: a view is only an address with dims; `attention_raw` checks them, and the
            // call below states what makes the address valid.
            unsafe { TensorView::<T>::from_raw(address, dims, layout) }
        });
        let [q, k, v] = views;
        let shape = check_views(&q, &k, &v, None, None, self.options).map_err(message)?;
        let gpu = gpu(stream.context().ordinal()).map_err(message)?;
        // Safety: every element is written by the launch below before anything reads it (the
        // kernels write each output row, zeros for a row that sees no key); if the launch is
        // refused, the slice is dropped unread.
        let out = unsafe { device.alloc::<T>(shape.q_len()) }?;
        let (out_ptr, out_guard) = out.device_ptr(&stream);
        // Safety: a view is only an address with dims, checked by `attention_raw`.
        let out_view = unsafe { TensorView::<T>::from_raw(out_ptr, q.dims(), q.layout()) };
        // Safety (`attention_raw`'s contract):
        // - q, k and v address `dims` elements of live candle storages of this device from their
        //   offsets, in the layout their strides were checked to have; the storages are borrowed
        //   for this call, and candle frees a storage on its stream, after the work enqueued here;
        // - the output is a fresh allocation of q's elements, owned here until it is handed to
        //   candle below; candle orders every later use of it on the same stream;
        // - the stream is candle's, of the primary context of this device, which `gpu` shares
        //   (both are cudarc's `CudaContext::new` of the ordinal), and outlives the call;
        // - nothing writes q, k or v unordered with that stream: candle's ops all run on it.
        let ran = unsafe {
            attention_raw(
                gpu,
                q,
                k,
                v,
                out_view,
                None,
                self.options,
                stream.cu_stream().cast(),
            )
        };
        drop(out_guard);
        drop(pointers);
        ran.map_err(message)?;
        let [batch, heads, seq_q, head_dim] = q.dims();
        let out_shape = match q.layout() {
            Layout::Bshd => Shape::from((batch, seq_q, heads, head_dim)),
            Layout::Bhsd => Shape::from((batch, heads, seq_q, head_dim)),
        };
        Ok((CudaStorage::wrap_cuda_slice(out, device), out_shape))
    }
}

/// One flashrs `Gpu` per device for the life of the process: opening one loads (the first time,
/// JIT-compiles) the kernels, far too slow for every call. Never dropped: the CUDA teardown at
/// exit is candle's.
static GPUS: Mutex<Vec<(usize, &'static Gpu)>> = Mutex::new(Vec::new());

fn gpu(ordinal: usize) -> flashrs::Result<&'static Gpu> {
    let mut gpus = GPUS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, gpu)) = gpus.iter().find(|(o, _)| *o == ordinal) {
        return Ok(gpu);
    }
    let gpu: &'static Gpu = Box::leak(Box::new(Gpu::open_with(
        ordinal,
        flashrs::GpuOptions::from_env(),
    )?));
    gpus.push((ordinal, gpu));
    Ok(gpu)
}

#[cfg(test)]
mod tests;
