//! Merging two partial attention results: [`merge_states`] (typed) and [`merge_states_raw`]
//! (views of another library's memory, on the caller's stream) combine `(O_a, LSE_a)` and
//! `(O_b, LSE_b)`, attention over two disjoint sets of keys, into attention over their union.
//! The log-sum-exp is in the natural log, as every entry point writes it (`lse` of
//! [`crate::api::Attention::lse`], FlashAttention's convention): `LSE = log(e^LSE_a + e^LSE_b)`,
//! `O = e^(LSE_a - LSE) O_a + e^(LSE_b - LSE) O_b`, computed in fp32 and rounded once to the
//! outputs' type. Context parallelism (each GPU holds a chunk of the keys), cascade attention (a
//! shared prefix attended once) and split decoding merge this way. The kernel is
//! `kernels-rs/src/attention/merge.rs`.

use crate::api::{
    borrow_stream, check_addresses, CurrentContext, DeviceTensor, Element, LseBuffer, TensorView,
};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, Launch};
use crate::layout::Layout;
use crate::merge_launch::{MergeArgs, ROWS_PER_BLOCK, THREADS};

/// One side of a merge, or its result: an output `[B, H, S, D]` and the address of its
/// log-sum-exps, `[B, H, S]` fp32.
pub type Partial<'a, T> = (TensorView<'a, T>, u64);

/// Merges `a` and `b` (attention of the same queries over two disjoint sets of keys, each with
/// its log-sum-exp) into a new output (their layout) and log-sum-exp: attention over both sets.
/// Asynchronous, on `gpu`'s stream.
pub fn merge_states<T: Element>(
    gpu: &Gpu,
    (out_a, lse_a): (&DeviceTensor<T>, &LseBuffer),
    (out_b, lse_b): (&DeviceTensor<T>, &LseBuffer),
) -> Result<(DeviceTensor<T>, LseBuffer)> {
    let dims = out_a.dims();
    for (what, lse) in [("lse_a", lse_a), ("lse_b", lse_b)] {
        if lse.dims() != [dims[0], dims[1], dims[2]] {
            return Err(Error::Incompatible(format!(
                "merge: {what} is {:?}, the outputs' rows need [B, H, S] = {:?}",
                lse.dims(),
                [dims[0], dims[1], dims[2]]
            )));
        }
    }
    let out = DeviceTensor::zeros(gpu, dims, out_a.layout())?;
    let lse = LseBuffer::new(gpu, [dims[0], dims[1], dims[2]])?;
    // Safety: views of live tensors of `gpu`, each holding what its dims say, and its own stream,
    // on which every use of them is ordered; `out` and `lse` are fresh.
    unsafe {
        merge_states_raw(
            gpu,
            partial(out_a, lse_a),
            partial(out_b, lse_b),
            partial(&out, &lse),
            gpu.stream().cu_stream().cast(),
        )
    }?;
    Ok((out, lse))
}

/// A typed tensor and log-sum-exp as one side of [`merge_states_raw`].
fn partial<'a, T: Element>(out: &'a DeviceTensor<T>, lse: &LseBuffer) -> Partial<'a, T> {
    (out.view(), lse.device_address())
}

/// [`merge_states`] on views of caller-owned memory, enqueued on `stream`: `a` and `b` are the
/// partial results (outputs of the same dims, contiguous in one layout; their log-sum-exps'
/// addresses), `out` the result's output (the same dims and layout) and log-sum-exp, which may be
/// exactly `a`'s (an in-place merge) but may not otherwise overlap anything. Checked first (a
/// mismatch is a typed error and nothing is launched).
///
/// # Safety
/// - the views satisfy the contract of [`TensorView::from_raw`] and each log-sum-exp address
///   points at `B * H * S` f32, until the stream has run the launch (`out`'s for writes);
/// - `stream` is a valid `CUstream` of the `Gpu`'s context, or null for the legacy default
///   stream, and stays valid for the call;
/// - nothing else writes the inputs or touches the outputs until the stream has run the launch,
///   unless ordered after it.
pub unsafe fn merge_states_raw<T: Element>(
    gpu: &Gpu,
    a: Partial<'_, T>,
    b: Partial<'_, T>,
    out: Partial<'_, T>,
    stream: *mut std::ffi::c_void,
) -> Result<()> {
    let args = check(&a, &b, &out)?;
    if args.rows == 0 {
        return Ok(());
    }
    let name = format!("merge_states_{}", T::DTYPE.name());
    let function = gpu.cached_function(&name)?;
    // The caller's current context (torch's current device) is current again on return.
    let _restore = CurrentContext::save()?;
    // Safety: `stream` is null or a live stream handle for this call (this function's contract).
    let stream = unsafe { borrow_stream(gpu, stream) }?;
    let config = cudarc::driver::LaunchConfig {
        grid_dim: (args.rows.div_ceil(ROWS_PER_BLOCK), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let problem = format!("merge of {:?} rows", a.0.dims());
    let mut launch = Launch::function(gpu, &function, &stream, config, &problem, args);
    let o_bytes = 2 * args.rows as usize * args.head_dim as usize;
    let l_bytes = 4 * args.rows as usize;
    launch.memory("out_a", a.0.ptr(), o_bytes, o_bytes, |p, x| p.out_a = x);
    launch.memory("lse_a", a.1, l_bytes, l_bytes, |p, x| p.lse_a = x);
    launch.memory("out_b", b.0.ptr(), o_bytes, o_bytes, |p, x| p.out_b = x);
    launch.memory("lse_b", b.1, l_bytes, l_bytes, |p, x| p.lse_b = x);
    launch.memory("out", out.0.ptr(), o_bytes, o_bytes, |p, x| p.out = x);
    launch.memory("lse", out.1, l_bytes, l_bytes, |p, x| p.lse = x);
    launch.enqueue()
}

/// The merge's parameters for the three sides, or the typed error of the first mismatch: one set
/// of dims and one contiguous layout, head dim at least 1, rows within `u32`, addresses not null,
/// aligned, and the result overlapping neither input unless it is exactly `a` (in place).
fn check<T: Element>(a: &Partial<'_, T>, b: &Partial<'_, T>, out: &Partial<'_, T>) -> Result<MergeArgs> {
    let dims = a.0.dims();
    let layout = a.0.layout();
    for (what, side) in [("b", b), ("out", out)] {
        if side.0.dims() != dims || side.0.layout() != layout {
            return Err(Error::Incompatible(format!(
                "merge: {what} is {:?} in {}, a is {dims:?} in {layout}: the sides need one shape and layout",
                side.0.dims(),
                side.0.layout()
            )));
        }
    }
    if [a, b, out].iter().any(|side| !side.0.is_contiguous()) {
        return Err(Error::Incompatible(
            "merge: the outputs must be contiguous".into(),
        ));
    }
    let [batch, heads, seq, head_dim] = dims;
    let rows = batch
        .checked_mul(heads)
        .and_then(|n| n.checked_mul(seq))
        .and_then(|n| u32::try_from(n).ok())
        .filter(|_| head_dim >= 1 && u32::try_from(head_dim).is_ok())
        .ok_or_else(|| Error::InvalidProblem(format!("merge: {dims:?} is empty or too large")))?;
    let (o_bytes, l_bytes) = (2 * rows as u128 * head_dim as u128, 4 * rows as u128);
    let in_place = out.0.ptr() == a.0.ptr() && out.1 == a.1;
    // The inputs may be the same memory (merging a result with itself is legal); the result must
    // not overlap them unless it is `a` exactly.
    let mut buffers = vec![("out_a", a.0.ptr(), o_bytes), ("lse_a", a.1, l_bytes)];
    buffers.extend([("out_b", b.0.ptr(), o_bytes), ("lse_b", b.1, l_bytes)]);
    if in_place {
        buffers.retain(|(what, ..)| !what.ends_with("_a"));
    }
    buffers.push(("out", out.0.ptr(), o_bytes));
    check_addresses(&buffers, Some((out.1, l_bytes)))?;
    if rows > 0 {
        let seq_major = u32::from(layout == Layout::Bshd);
        return Ok(MergeArgs {
            rows,
            heads: heads as u32,
            seq: seq as u32,
            head_dim: head_dim as u32,
            seq_major,
            ..MergeArgs::default()
        });
    }
    Ok(MergeArgs::default())
}
