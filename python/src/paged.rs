//! The call against a paged KV cache behind `flashrs.paged_attention`: q and the output
//! `[B, H, S_q, D]` (or `[B, S_q, H, D]` with layout "bshd", `flash_attn_with_kvcache`'s order),
//! contiguous; the caches `[num_blocks, block_size, H_kv, D]`, contiguous; the block table and
//! lengths as host integers, which the library checks and stages for the kernels itself.

use flashrs::api::{bf16, f16, RawOptions, TensorView};
use flashrs::{check_paged_views, paged_attention_raw, CacheView, Element, PagedKv};
use pyo3::prelude::*;

use crate::{
    cuda_half, dim_order, gpu, invalid, lse_address, named_operands, options, sinks_address, to_py,
    Described, Operand,
};

/// A cache's address and dims, once its description is a contiguous 4-dim CUDA tensor of q's
/// dtype on q's device.
fn cache_view(what: &'static str, t: &Described, q: &Operand) -> PyResult<(u64, [usize; 4])> {
    let device = cuda_half(what, t)?;
    let Described(ptr, shape, strides, dtype, ..) = t;
    if *dtype != q.dtype || device != q.device {
        return Err(invalid(format!(
            "q is {} on cuda:{} and {what} is {dtype} on cuda:{device}: the tensors of a call need one dtype and device",
            q.dtype, q.device
        )));
    }
    let &[blocks, block_size, heads_kv, head_dim] = shape.as_slice() else {
        return Err(invalid(format!(
            "{what} has {} dims {shape:?}: a paged cache is [num_blocks, block_size, H_kv, D]",
            shape.len()
        )));
    };
    let dims = [blocks, block_size, heads_kv, head_dim];
    let contiguous = [block_size * heads_kv * head_dim, heads_kv * head_dim, head_dim, 1];
    if strides.len() != 4 || (0..4).any(|i| dims[i] > 1 && strides[i] != contiguous[i] as i64) {
        return Err(invalid(format!(
            "{what} {shape:?} has strides {strides:?}: a paged cache must be contiguous"
        )));
    }
    Ok((*ptr, dims))
}

/// Runs attention of the described q against the described paged caches, writing `out` (and
/// `lse`, `[B, H, S_q]` fp32, when given), enqueued on `stream`; returns the kernel's name. The
/// block table (`[B, max_blocks]`, row-major) and lengths (`[B]`) are checked here with
/// everything else before any launch.
#[pyfunction]
#[pyo3(signature = (q, k_cache, v_cache, out, lse, block_table, seqlens_k, layout, causal, scale, stream, window_size=(-1, -1), softcap=0.0, sinks=None))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments, one by one.
pub(crate) fn paged_attention(
    py: Python<'_>,
    q: Described,
    k_cache: Described,
    v_cache: Described,
    out: Described,
    lse: Option<Described>,
    block_table: Vec<i32>,
    seqlens_k: Vec<i32>,
    layout: Option<&str>,
    causal: bool,
    scale: Option<f32>,
    stream: usize,
    window_size: (i64, i64),
    softcap: f64,
    sinks: Option<Described>,
) -> PyResult<&'static str> {
    // q and the output as the dense call reads them (one order, contiguous: checked below).
    let ops = named_operands(&[("q", &q), ("out", &out)], dim_order(layout)?)?;
    let (q_op, out_op) = (&ops[0], &ops[1]);
    let k = cache_view("k_cache", &k_cache, q_op)?;
    let v = cache_view("v_cache", &v_cache, q_op)?;
    let cache = PagedKv::new(k.1[1], k.1[0], block_table, seqlens_k).map_err(to_py)?;
    let mut options = options(causal, scale, window_size, softcap)?;
    options.sinks = sinks_address(sinks.as_ref(), q_op.dims[1], q_op.device)?;
    let f16 = q_op.dtype == "torch.float16";
    let views = (q_op, [k, v], out_op);
    let shape = match f16 {
        true => check::<f16>(views, &cache, options),
        false => check::<bf16>(views, &cache, options),
    }
    .map_err(to_py)?;
    let lse = lse
        .map(|lse| lse_address(&lse, [shape.batch, shape.heads, shape.seq_q], q_op.device))
        .transpose()?;
    let device = q_op.device;
    let (q_op, out_op) = (ops[0].clone(), ops[1].clone());
    py.detach(move || {
        let gpu = gpu(device)?;
        // Safety: the wrapper hands over contiguous torch tensors it holds until this returns,
        // of device `device` (checked above), whose data pointers address the elements their
        // dims say, in the primary context torch shares with the library; the output and
        // log-sum-exp are fresh `torch.empty` tensors; `stream` is torch's current stream of that
        // device, on which torch orders the later uses and the frees of all of them.
        unsafe {
            let views = (&q_op, [k, v], &out_op);
            match f16 {
                true => run::<f16>(gpu, views, lse, &cache, options, stream),
                false => run::<bf16>(gpu, views, lse, &cache, options, stream),
            }
        }
    })
    .map(|variant| variant.name)
    .map_err(to_py)
}

/// q, the caches (address, dims) and the output.
type Views<'a> = (&'a Operand, [(u64, [usize; 4]); 2], &'a Operand);

fn views<T: Element>(
    (q, [k, v], out): Views<'_>,
) -> (
    TensorView<'static, T>,
    [CacheView<'static, T>; 2],
    TensorView<'static, T>,
) {
    // Safety: views are only addresses with dims; `check_paged_views` and `paged_attention_raw`
    // check them, and `paged_attention` above states what makes them valid.
    unsafe {
        (
            crate::view::<T>(q),
            [CacheView::from_raw(k.0, k.1), CacheView::from_raw(v.0, v.1)],
            crate::view::<T>(out),
        )
    }
}

fn check<T: Element>(
    views_: Views<'_>,
    cache: &PagedKv,
    options: RawOptions,
) -> flashrs::Result<flashrs::Shape> {
    let (q, [k, v], out) = views::<T>(views_);
    check_paged_views(&q, [&k, &v], Some(&out), None, cache, options)
}

/// # Safety
/// `paged_attention_raw`'s contract for the views, `lse` and `stream`.
unsafe fn run<T: Element>(
    gpu: &flashrs::Gpu,
    views_: Views<'_>,
    lse: Option<u64>,
    cache: &PagedKv,
    options: RawOptions,
    stream: usize,
) -> flashrs::Result<&'static flashrs::VariantSpec> {
    let (q, [k, v], out) = views::<T>(views_);
    let stream = stream as *mut std::ffi::c_void;
    // Safety: this function's contract.
    unsafe { paged_attention_raw(gpu, q, k, v, out, lse, cache, options, stream) }
}
