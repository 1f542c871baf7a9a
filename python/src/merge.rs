//! The merge of two partial attention results behind `flashrs.merge_states`: outputs `[B, H,
//! S, D]` (or `[B, S, H, D]` with layout "bshd"), contiguous in one layout, and their
//! log-sum-exps `[B, H, S]` fp32.

use flashrs::api::{bf16, f16};
use flashrs::{merge_states_raw, Element};
use pyo3::prelude::*;

use crate::{dim_order, gpu, lse_address, named_operands, to_py, view, Described, Operand};

/// Merges `(out_a, lse_a)` and `(out_b, lse_b)` into `(out, lse)` (which may be exactly the
/// first pair), enqueued on `stream`. Every check runs before the launch.
#[pyfunction]
#[pyo3(signature = (out_a, lse_a, out_b, lse_b, out, lse, layout, stream))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments, one by one.
pub(crate) fn merge_states(
    py: Python<'_>,
    out_a: Described,
    lse_a: Described,
    out_b: Described,
    lse_b: Described,
    out: Described,
    lse: Described,
    layout: Option<&str>,
    stream: usize,
) -> PyResult<()> {
    let named = [("out_a", &out_a), ("out_b", &out_b), ("out", &out)];
    let ops = named_operands(&named, dim_order(layout)?)?;
    for (what, side) in [("out_b", &ops[1]), ("out", &ops[2])] {
        if side.dims != ops[0].dims {
            return Err(crate::invalid(format!(
                "merge: {what} is {:?} and out_a {:?}: the sides need one shape",
                side.dims, ops[0].dims
            )));
        }
    }
    let [batch, heads, seq, _] = ops[0].dims;
    let device = ops[0].device;
    let rows = [batch, heads, seq];
    let lses = [
        lse_address(&lse_a, rows, device)?,
        lse_address(&lse_b, rows, device)?,
        lse_address(&lse, rows, device)?,
    ];
    let f16 = ops[0].dtype == "torch.float16";
    py.detach(move || {
        let gpu = gpu(device)?;
        // Safety: the wrapper hands over torch tensors it holds until this returns, of device
        // `device` (checked), whose data pointers address the elements their dims say, in the
        // primary context torch shares with the library; `stream` is torch's current stream of
        // that device, on which torch orders the later uses and frees of all of them.
        unsafe {
            match f16 {
                true => run::<f16>(gpu, &ops, lses, stream),
                false => run::<bf16>(gpu, &ops, lses, stream),
            }
        }
    })
    .map_err(to_py)
}

/// # Safety
/// `merge_states_raw`'s contract for the views of `ops` (a, b, out), the log-sum-exps and
/// `stream`.
unsafe fn run<T: Element>(
    gpu: &flashrs::Gpu,
    ops: &[Operand],
    [la, lb, lo]: [u64; 3],
    stream: usize,
) -> flashrs::Result<()> {
    let side = |i: usize, lse: u64| (view::<T>(&ops[i]), lse);
    // Safety: this function's contract.
    unsafe {
        merge_states_raw(
            gpu,
            side(0, la),
            side(1, lb),
            side(2, lo),
            stream as *mut std::ffi::c_void,
        )
    }
}
