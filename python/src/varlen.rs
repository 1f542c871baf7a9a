//! The packed variable-length call behind `flashrs.varlen_attention`: q, k, v and the output
//! `[total, heads, D]`, contiguous (as `flash_attn_varlen_func` takes them), the prefix sums as
//! host integers, which the library checks and stages for the kernels itself.

use flashrs::api::{bf16, f16, RawOptions};
use flashrs::{check_packed_views, varlen_attention_raw, Element, PackedView, VarlenBatch};
use pyo3::prelude::*;

use crate::{cuda_half, device_name, gpu, invalid, options, sinks_address, to_py, Described};

/// A packed tensor's address, dims, dtype name and device, once its description is a
/// contiguous 3-dim CUDA tensor of a 16-bit float type.
struct Packed {
    ptr: u64,
    dims: [usize; 3],
    dtype: String,
    device: i64,
}

fn packed(what: &'static str, t: &Described) -> PyResult<Packed> {
    let device = cuda_half(what, t)?;
    let Described(ptr, shape, strides, dtype, ..) = t;
    let &[total, heads, head_dim] = shape.as_slice() else {
        return Err(invalid(format!(
            "{what} has {} dims {shape:?}: varlen_attention takes 3, [total, H, D]",
            shape.len()
        )));
    };
    let dims = [total, heads, head_dim];
    let contiguous = [heads * head_dim, head_dim, 1];
    if strides.len() != 3 || (0..3).any(|i| dims[i] > 1 && strides[i] != contiguous[i] as i64) {
        return Err(invalid(format!(
            "{what} {shape:?} has strides {strides:?}: varlen_attention takes contiguous tensors"
        )));
    }
    Ok(Packed {
        ptr: *ptr,
        dims,
        dtype: dtype.clone(),
        device,
    })
}

fn view<T: Element>(p: &Packed) -> PackedView<'static, T> {
    // Safety: a view is only an address with dims; `check_packed_views` and
    // `varlen_attention_raw` check it, and `varlen_attention` below states what makes it valid.
    unsafe { PackedView::from_raw(p.ptr, p.dims) }
}

/// Runs variable-length attention on the described packed tensors, writing `out` (and `lse`,
/// `[H, total_q]` fp32, when given), enqueued on `stream`; returns the kernel's name. The
/// prefix sums are `B + 1` int32 each, checked here with everything else before any launch.
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, causal, scale, stream, window_size=(-1, -1), softcap=0.0, sinks=None))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments, one by one.
pub(crate) fn varlen_attention(
    py: Python<'_>,
    q: Described,
    k: Described,
    v: Described,
    out: Described,
    lse: Option<Described>,
    cu_seqlens_q: Vec<i32>,
    cu_seqlens_k: Vec<i32>,
    causal: bool,
    scale: Option<f32>,
    stream: usize,
    window_size: (i64, i64),
    softcap: f64,
    sinks: Option<Described>,
) -> PyResult<&'static str> {
    let tensors = [("q", &q), ("k", &k), ("v", &v), ("out", &out)].map(|(what, t)| packed(what, t));
    let [q, k, v, out] = tensors;
    let (q, k, v, out) = (q?, k?, v?, out?);
    for (what, other) in [("k", &k), ("v", &v), ("out", &out)] {
        if other.dtype != q.dtype || other.device != q.device {
            return Err(invalid(format!(
                "q is {} on cuda:{} and {what} is {} on cuda:{}: the tensors of a call need one dtype and device",
                q.dtype, q.device, other.dtype, other.device
            )));
        }
    }
    let batch = VarlenBatch::new(cu_seqlens_q, cu_seqlens_k).map_err(to_py)?;
    let mut options = options(causal, scale, window_size, softcap)?;
    options.sinks = sinks_address(sinks.as_ref(), q.dims[1], q.device)?;
    let f16 = q.dtype == "torch.float16";
    let heads = match f16 {
        true => check::<f16>([&q, &k, &v, &out], &batch, options),
        false => check::<bf16>([&q, &k, &v, &out], &batch, options),
    }
    .map_err(to_py)?;
    let lse = lse
        .map(|lse| lse_address(&lse, [heads.0, batch.total_q()], q.device))
        .transpose()?;
    let device = q.device;
    py.detach(move || {
        let gpu = gpu(device)?;
        // Safety: the wrapper hands over contiguous torch tensors it holds until this returns,
        // of device `device` (checked above), whose data pointers address the elements their
        // dims say, in the primary context torch shares with the library; the output and
        // log-sum-exp are fresh `torch.empty` tensors; `stream` is torch's current stream of that
        // device, on which torch orders the later uses and the frees of all of them.
        unsafe {
            match f16 {
                true => run::<f16>(gpu, [&q, &k, &v, &out], lse, &batch, options, stream),
                false => run::<bf16>(gpu, [&q, &k, &v, &out], lse, &batch, options, stream),
            }
        }
    })
    .map(|variant| variant.name)
    .map_err(to_py)
}

fn check<T: Element>(
    [q, k, v, out]: [&Packed; 4],
    batch: &VarlenBatch,
    options: RawOptions,
) -> flashrs::Result<(usize, usize, usize)> {
    let out = view::<T>(out);
    check_packed_views([&view(q), &view(k), &view(v)], Some(&out), None, batch, options)
}

/// # Safety
/// `varlen_attention_raw`'s contract for the views of q, k, v, out, `lse` and `stream`.
unsafe fn run<T: Element>(
    gpu: &flashrs::Gpu,
    [q, k, v, out]: [&Packed; 4],
    lse: Option<u64>,
    batch: &VarlenBatch,
    options: RawOptions,
    stream: usize,
) -> flashrs::Result<&'static flashrs::VariantSpec> {
    let stream = stream as *mut std::ffi::c_void;
    // Safety: this function's contract.
    unsafe {
        varlen_attention_raw(
            gpu,
            view::<T>(q),
            view(k),
            view(v),
            view(out),
            lse,
            batch,
            options,
            stream,
        )
    }
}

/// The log-sum-exp's address, once its description is a contiguous fp32 `[H, total_q]` on
/// q's device.
fn lse_address(lse: &Described, rows: [usize; 2], device: i64) -> PyResult<u64> {
    let Described(ptr, shape, strides, dtype, kind, index) = lse;
    if kind != "cuda" || *index != Some(device) {
        return Err(invalid(format!(
            "lse is on {}, q on cuda:{device}: they need one device",
            device_name(kind, *index)
        )));
    }
    // An empty one has no element to place; else [H, total_q] row-major.
    let strides_fit = strides.len() == 2
        && (rows.contains(&0)
            || (rows[0] <= 1 || strides[0] == rows[1] as i64) && (rows[1] <= 1 || strides[1] == 1));
    if dtype != "torch.float32" || shape.as_slice() != rows || !strides_fit {
        return Err(invalid(format!(
            "lse is {dtype} {shape:?} with strides {strides:?}: it must be a contiguous torch.float32 [H, total_q] = {rows:?}"
        )));
    }
    Ok(*ptr)
}
