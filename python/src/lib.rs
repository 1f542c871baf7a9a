//! `flashrs._flashrs`: the native half of the Python package. It knows nothing of torch: the
//! wrapper `python/flashrs/__init__.py` describes each tensor by plain values (address, shape,
//! strides, dtype and device names) and hands over torch's current stream as an integer, so this
//! crate builds without torch or a GPU. Every check runs here, before the GPU is opened, so bad
//! input is a `ValueError` with the library's one-line message on any machine.

use std::sync::Mutex;

mod merge;
mod paged;
mod varlen;

use flashrs::api::{attention_raw, bf16, check_views, f16, keeping_current_context, RawOptions, TensorView};
use flashrs::backward::{attention_backward_raw, workspace_bytes, BackwardOptions, BackwardViews};
use flashrs::{Element, Error, Gpu, Layout, Strides, Window};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// A tensor as the wrapper describes it: `(data_ptr, shape, stride, dtype, device type, device
/// index)`, with torch's names for the dtype (`"torch.float16"`) and device type (`"cuda"`).
#[derive(FromPyObject)]
struct Described(u64, Vec<usize>, Vec<i64>, String, String, Option<i64>);

/// A checked description of q, k, v or the output.
#[derive(Clone)]
struct Operand {
    ptr: u64,
    dims: [usize; 4],
    /// Strides in the order of `dims`.
    strides: Strides,
    /// The contiguous layout it is in, if any.
    layout: Option<Layout>,
    dtype: String,
    device: i64,
}

/// The input errors, which Python callers expect as `ValueError`; the rest (no driver, a CUDA
/// fault, a missing kernel) are `RuntimeError`.
fn to_py(error: Error) -> PyErr {
    match error {
        Error::InvalidProblem(_)
        | Error::UnsupportedHeadDim(..)
        | Error::Length { .. }
        | Error::Misaligned { .. }
        | Error::NullPointer { .. }
        | Error::NotContiguous { .. }
        | Error::ForeignStream
        | Error::Incompatible(_)
        | Error::OtherGpu { .. } => PyValueError::new_err(error.to_string()),
        _ => PyRuntimeError::new_err(error.to_string()),
    }
}

fn invalid(message: String) -> PyErr {
    PyValueError::new_err(message)
}

/// Where the dims of a `[B, H, S, D]` tensor sit in the caller's shape, by the wrapper's
/// `layout` argument (the order of the dims, not of memory, which the strides tell).
fn dim_order(layout: Option<&str>) -> PyResult<[usize; 4]> {
    match layout {
        None | Some("bhsd") => Ok([0, 1, 2, 3]),
        Some("bshd") => Ok([0, 2, 1, 3]),
        Some(other) => Err(invalid(format!(
            "layout must be None, \"bhsd\" or \"bshd\", got {other:?}"
        ))),
    }
}

fn device_name(kind: &str, index: Option<i64>) -> String {
    match index {
        Some(i) => format!("{kind}:{i}"),
        None => kind.to_string(),
    }
}

/// The device index of a tensor described as on a CUDA device with a 16-bit float dtype, else
/// the one-line refusal.
fn cuda_half(what: &'static str, t: &Described) -> PyResult<i64> {
    let Described(_, _, _, dtype, kind, index) = t;
    let device = match (kind.as_str(), index) {
        ("cuda", Some(i)) if *i >= 0 => *i,
        _ => {
            return Err(invalid(format!(
                "{what} is on {}: flashrs needs CUDA tensors",
                device_name(kind, *index)
            )))
        }
    };
    if !matches!(dtype.as_str(), "torch.float16" | "torch.bfloat16") {
        return Err(invalid(format!(
            "{what} has dtype {dtype}: flashrs takes torch.float16 or torch.bfloat16"
        )));
    }
    Ok(device)
}

/// Checks what one tensor alone must satisfy and reads its strides (and the contiguous layout
/// they make, if any).
fn operand(what: &'static str, t: &Described, order: [usize; 4]) -> PyResult<Operand> {
    let device = cuda_half(what, t)?;
    let Described(ptr, shape, strides, dtype, ..) = t;
    if shape.len() != 4 || strides.len() != 4 {
        return Err(invalid(format!(
            "{what} has {} dims {shape:?}: flashrs takes 4, [B, H, S, D] (or [B, S, H, D] with layout=\"bshd\")",
            shape.len()
        )));
    }
    let dims = order.map(|axis| shape[axis]);
    let strides = order.map(|axis| strides[axis]);
    let Ok(strides) = strides
        .map(usize::try_from)
        .into_iter()
        .collect::<Result<Vec<usize>, _>>()
    else {
        return Err(to_py(Error::NotContiguous { what, dims, strides }));
    };
    let strides = Strides([strides[0], strides[1], strides[2], strides[3]]);
    let layout = strides.layout(dims);
    Ok(Operand {
        ptr: *ptr,
        dims,
        strides,
        layout,
        dtype: dtype.clone(),
        device,
    })
}

/// q, k, v (and the output when given) checked alone and against each other for what only the
/// wrapper's description shows (dtype, device); the attention checks come after, in the library.
fn operands(inputs: [&Described; 3], out: Option<&Described>, order: [usize; 4]) -> PyResult<Vec<Operand>> {
    let names = ["q", "k", "v", "out"];
    let all: Vec<(&'static str, &Described)> = names.into_iter().zip(inputs.into_iter().chain(out)).collect();
    named_operands(&all, order)
}

/// `operands` for any list of named tensors (the backward's nine), the first one q.
fn named_operands(tensors: &[(&'static str, &Described)], order: [usize; 4]) -> PyResult<Vec<Operand>> {
    let names: Vec<&'static str> = tensors.iter().map(|(what, _)| *what).collect();
    let mut operands = tensors
        .iter()
        .map(|(what, t)| operand(what, t, order))
        .collect::<PyResult<Vec<Operand>>>()?;
    // A tensor with one head (k and v under multi-query attention) or one position fits both
    // layouts: take one that fits every tensor, so that such a tensor does not read as the other
    // layout than q's.
    let fits_all = |layout| operands.iter().all(|o| o.strides.fits(layout, o.dims));
    if let Some(common) = Layout::ALL.into_iter().find(|&l| fits_all(l)) {
        for o in &mut operands {
            o.layout = Some(common);
        }
    }
    let q = &operands[0];
    for (what, other) in names.iter().zip(&operands).skip(1) {
        if other.dtype != q.dtype {
            return Err(invalid(format!(
                "q is {} and {what} is {}: the tensors of a call need one dtype",
                q.dtype, other.dtype
            )));
        }
        if other.device != q.device {
            return Err(invalid(format!(
                "q is on cuda:{} and {what} on cuda:{}: the tensors of a call need one device",
                q.device, other.device
            )));
        }
    }
    Ok(operands)
}

fn view<T: Element>(operand: &Operand) -> TensorView<'static, T> {
    // Safety: a view is only an address with dims; `check_views` and `attention_raw` check it,
    // and `attention` below states what makes the address valid.
    unsafe {
        match operand.layout {
            Some(layout) => TensorView::from_raw(operand.ptr, operand.dims, layout),
            None => TensorView::from_strided(operand.ptr, operand.dims, operand.strides),
        }
    }
}

/// Whether the GPU of `ops` reads q, k and v as they are: always when they are contiguous in one
/// layout; otherwise on a GPU whose kernels read through the copy engine (sm_90), for strides it
/// takes (a unit last stride, the others multiples of 16 bytes). When not, the wrapper copies
/// them into one layout first.
fn in_place(ops: &[Operand]) -> flashrs::Result<bool> {
    if one_layout(ops) {
        return Ok(true);
    }
    let inputs = &ops[..3];
    let copy_engine_takes = inputs.iter().all(|o| {
        let s = o.strides.0;
        (o.dims[3] <= 1 || s[3] == 1)
            && (0..3).all(|axis| o.dims[axis] <= 1 || (s[axis] > 0 && s[axis].is_multiple_of(8)))
    });
    if !copy_engine_takes {
        return Ok(false);
    }
    let device = ops[0].device;
    let arch = gpu(device)?.arch;
    Ok(arch >= 90)
}

/// Whether q, k and v (the first three of `ops`) are contiguous in one layout, which every GPU's
/// kernels read as they are.
fn one_layout(ops: &[Operand]) -> bool {
    let inputs = &ops[..3];
    inputs
        .iter()
        .all(|o| o.layout.is_some() && o.layout == inputs[0].layout)
}

/// The log-sum-exp's address, once its description fits q's `[B, H, S_q]` as fp32, contiguous.
fn lse_address(lse: &Described, rows: [usize; 3], device: i64) -> PyResult<u64> {
    let Described(ptr, shape, strides, dtype, kind, index) = lse;
    if kind != "cuda" || *index != Some(device) {
        return Err(invalid(format!(
            "lse is on {}, q on cuda:{device}: they need one device",
            device_name(kind, *index)
        )));
    }
    let contiguous = [rows[1] * rows[2], rows[2], 1];
    let strides_fit =
        strides.len() == 3 && (0..3).all(|i| rows[i] <= 1 || strides[i] == contiguous[i] as i64);
    if dtype != "torch.float32" || shape.as_slice() != rows || !strides_fit {
        return Err(invalid(format!(
            "lse is {dtype} {shape:?} with strides {strides:?}: it must be a contiguous torch.float32 [B, H, S_q] = {rows:?}"
        )));
    }
    Ok(*ptr)
}

/// The attention sinks' address, when given: their description must be a contiguous
/// torch.float32 `[H]` (one logit per query head) on q's device, 16-byte aligned (the wrapper
/// copies one that is not).
pub(crate) fn sinks_address(sinks: Option<&Described>, heads: usize, device: i64) -> PyResult<Option<u64>> {
    let Some(Described(ptr, shape, strides, dtype, kind, index)) = sinks else {
        return Ok(None);
    };
    if kind != "cuda" || *index != Some(device) {
        return Err(invalid(format!(
            "sinks are on {}, q on cuda:{device}: they need one device",
            device_name(kind, *index)
        )));
    }
    let contiguous = heads <= 1 || strides.as_slice() == [1];
    if dtype != "torch.float32" || shape.as_slice() != [heads] || !contiguous {
        return Err(invalid(format!(
            "sinks are {dtype} {shape:?} with strides {strides:?}: they must be a contiguous torch.float32 [H] = [{heads}], one per query head"
        )));
    }
    if ptr % 16 != 0 {
        return Err(invalid(format!(
            "sinks at {ptr:#x} are not 16-byte aligned: pass a copy (sinks.clone())"
        )));
    }
    Ok(Some(*ptr))
}

/// The sliding window of FlashAttention's `window_size=(left, right)`: keys a query sees before and
/// after its diagonal (aligned bottom-right), -1 for no bound on that side.
fn window((left, right): (i64, i64)) -> PyResult<Window> {
    if left < -1 || right < -1 {
        return Err(invalid(format!(
            "window_size must be (left, right) with each side -1 (no bound) or a key count of at least 0, got ({left}, {right})"
        )));
    }
    Window::from_sizes(left, right).map_err(to_py)
}

/// FlashAttention's `softcap`: 0.0 for none; otherwise the library checks that it is positive and
/// finite (a negative, NaN or infinite one is its one-line error).
fn softcap(softcap: f64) -> Option<f32> {
    (softcap != 0.0).then_some(softcap as f32)
}

/// The options of a forward call, with the window and softcap as Python passes them.
fn options(causal: bool, scale: Option<f32>, window_size: (i64, i64), softcap_: f64) -> PyResult<RawOptions> {
    Ok(RawOptions {
        causal,
        scale,
        window: window(window_size)?,
        softcap: softcap(softcap_),
        sinks: None,
    })
}

/// Checks q, k and v as `attention` will; returns `((B, H, S_q), in_place)`: the dims of the
/// log-sum-exp, so that the wrapper allocates the outputs only for a call that will be accepted,
/// and whether the kernels read q, k and v as they are (else the wrapper copies them into one
/// layout: `in_place`). Needs no GPU unless q, k and v are strided otherwise than one layout.
#[pyfunction]
#[pyo3(signature = (q, k, v, layout, causal, scale, window_size=(-1, -1), softcap=0.0))]
#[allow(clippy::too_many_arguments)] // Python's arguments, one by one.
fn check(
    py: Python<'_>,
    q: Described,
    k: Described,
    v: Described,
    layout: Option<&str>,
    causal: bool,
    scale: Option<f32>,
    window_size: (i64, i64),
    softcap: f64,
) -> PyResult<((usize, usize, usize), bool)> {
    let ops = operands([&q, &k, &v], None, dim_order(layout)?)?;
    let options = options(causal, scale, window_size, softcap)?;
    // Everything but the strides first, on the tensors as the copies the wrapper would make.
    let shape = typed_check(&with_contiguous_inputs(&ops), options).map_err(to_py)?;
    // Opening the GPU (the first call, when it must be asked) takes seconds: other threads run.
    let in_place = py.detach(|| in_place(&ops)).map_err(to_py)?;
    if in_place {
        typed_check(&ops, options).map_err(to_py)?;
    }
    Ok(((shape.batch, shape.heads, shape.seq_q), in_place))
}

fn typed_check(ops: &[Operand], options: RawOptions) -> flashrs::Result<flashrs::Shape> {
    match ops[0].dtype.as_str() {
        "torch.float16" => check_typed::<f16>(ops, options),
        _ => check_typed::<bf16>(ops, options),
    }
}

fn check_typed<T: Element>(ops: &[Operand], options: RawOptions) -> flashrs::Result<flashrs::Shape> {
    check_views(
        &view::<T>(&ops[0]),
        &view::<T>(&ops[1]),
        &view::<T>(&ops[2]),
        ops.get(3).map(view::<T>).as_ref(),
        None,
        options,
    )
}

/// One `Gpu` per device for the life of the process: opening one loads (and the first time
/// JIT-compiles) the kernels, far too slow for every call. Never dropped, since the CUDA
/// teardown at interpreter exit is torch's.
static GPUS: Mutex<Vec<(i64, &'static Gpu)>> = Mutex::new(Vec::new());

fn gpu(device: i64) -> flashrs::Result<&'static Gpu> {
    let mut gpus = GPUS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, gpu)) = gpus.iter().find(|(d, _)| *d == device) {
        return Ok(gpu);
    }
    // Opening binds the GPU's context: the caller's (torch's current device) is current again after.
    let gpu: &'static Gpu = Box::leak(Box::new(keeping_current_context(|| {
        Gpu::open_with(device as usize, flashrs::GpuOptions::from_env())
    })?));
    gpus.push((device, gpu));
    Ok(gpu)
}

/// Runs attention on the described tensors, writing `out` (and `lse` when given), enqueued on
/// `stream` (torch's current stream of the tensors' device; 0 is the legacy default stream).
/// Returns the kernel's name, or `None` when this GPU does not read q, k and v as they are
/// strided (the wrapper then copies them into one order and calls again). Every check of
/// `check` runs, with the output and log-sum-exp, before anything is launched.
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse, layout, causal, scale, stream, window_size=(-1, -1), softcap=0.0, sinks=None))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments, one by one.
fn attention(
    py: Python<'_>,
    q: Described,
    k: Described,
    v: Described,
    out: Described,
    lse: Option<Described>,
    layout: Option<&str>,
    causal: bool,
    scale: Option<f32>,
    stream: usize,
    window_size: (i64, i64),
    softcap: f64,
    sinks: Option<Described>,
) -> PyResult<Option<&'static str>> {
    let ops = operands([&q, &k, &v], Some(&out), dim_order(layout)?)?;
    let mut options = options(causal, scale, window_size, softcap)?;
    options.sinks = sinks_address(sinks.as_ref(), ops[0].dims[1], ops[0].device)?;
    let f16 = ops[0].dtype == "torch.float16";
    // Inputs in one layout are read as they are on every GPU (the common case: no GPU needed to
    // answer, nor a release of the GIL). Others: everything but their strides first (on the
    // copies the wrapper would make), then whether this GPU reads them as they are; if not, the
    // wrapper copies them and calls again.
    if !one_layout(&ops) {
        typed_check(&with_contiguous_inputs(&ops), options).map_err(to_py)?;
        if !py.detach(|| in_place(&ops)).map_err(to_py)? {
            return Ok(None);
        }
    }
    let shape = typed_check(&ops, options).map_err(to_py)?;
    let lse = lse
        .map(|lse| lse_address(&lse, [shape.batch, shape.heads, shape.seq_q], ops[0].device))
        .transpose()?;
    let device = ops[0].device;
    // The first call opens the GPU (seconds); other Python threads run meanwhile.
    // Opening the GPU and the launch bind its context; torch's current one is current again after.
    let ran = py.detach(move || {
        // `gpu` and `attention_raw` each leave torch's current context current.
        let gpu = gpu(device)?;
        {
            // Safety: the wrapper hands over torch tensors it holds until this returns, of the device
            // `device` (checked above), whose data pointers address their elements as the shape and
            // strides describe (the elements the strides reach), in the primary
            // context torch shares with cudarc; the output and log-sum-exp are fresh `torch.empty`
            // tensors; `stream` is torch's current stream of that device, on which torch orders the
            // later uses and the frees of all of them (its caching allocator is stream-ordered).
            unsafe {
                if f16 {
                    run::<f16>(gpu, &ops, lse, options, stream)
                } else {
                    run::<bf16>(gpu, &ops, lse, options, stream)
                }
            }
        }
    });
    ran.map(|variant| Some(variant.name)).map_err(to_py)
}

/// `ops` with q, k and v contiguous in `[B, H, S, D]` (as copies of them would be), the output
/// as it is.
fn with_contiguous_inputs(ops: &[Operand]) -> Vec<Operand> {
    ops.iter()
        .enumerate()
        .map(|(i, o)| Operand {
            layout: if i < 3 { Some(Layout::Bhsd) } else { o.layout },
            strides: if i < 3 {
                Strides::contiguous(Layout::Bhsd, o.dims)
            } else {
                o.strides
            },
            dtype: o.dtype.clone(),
            ..*o
        })
        .collect()
}

/// # Safety
/// `attention_raw`'s contract for the views of `ops` (q, k, v, out), `lse` and `stream`.
unsafe fn run<T: Element>(
    gpu: &Gpu,
    ops: &[Operand],
    lse: Option<u64>,
    options: RawOptions,
    stream: usize,
) -> flashrs::Result<&'static flashrs::VariantSpec> {
    let [q, k, v, out] = [0, 1, 2, 3].map(|i| view::<T>(&ops[i]));
    // Safety: this function's contract.
    unsafe { attention_raw(gpu, q, k, v, out, lse, options, stream as *mut std::ffi::c_void) }
}

/// The backward's tensors checked alone and against each other, in the order q, k, v, out,
/// d_out, d_q, d_k, d_v, and the log-sum-exp's address.
fn backward_operands(
    tensors: [&Described; 8],
    lse: &Described,
    layout: Option<&str>,
) -> PyResult<(Vec<Operand>, u64)> {
    let names = ["q", "k", "v", "out", "d_out", "d_q", "d_k", "d_v"];
    let named: Vec<(&'static str, &Described)> = names.into_iter().zip(tensors).collect();
    let ops = named_operands(&named, dim_order(layout)?)?;
    let [b, h, s, _] = ops[0].dims;
    let lse = lse_address(lse, [b, h, s], ops[0].device)?;
    Ok((ops, lse))
}

fn backward_views<T: Element>(ops: &[Operand], lse: u64) -> BackwardViews<'static, T> {
    BackwardViews {
        q: view(&ops[0]),
        k: view(&ops[1]),
        v: view(&ops[2]),
        out: view(&ops[3]),
        d_out: view(&ops[4]),
        lse,
        d_q: view(&ops[5]),
        d_k: view(&ops[6]),
        d_v: view(&ops[7]),
    }
}

/// The options of a backward call: the forward's mask, scale, window and softcap (as `options`
/// reads them), and the order of dQ's accumulation.
fn backward_options(
    causal: bool,
    scale: Option<f32>,
    deterministic: bool,
    window_size: (i64, i64),
    softcap_: f64,
) -> PyResult<BackwardOptions> {
    Ok(BackwardOptions {
        causal,
        scale,
        window: window(window_size)?,
        softcap: softcap(softcap_),
        deterministic,
    })
}

/// Checks a backward call as `backward` will, without a GPU (the workspace aside); returns the
/// bytes of workspace it needs.
#[pyfunction]
#[pyo3(signature = (q, k, v, out, d_out, lse, d_q, d_k, d_v, layout, causal, scale, deterministic, window_size=(-1, -1), softcap=0.0))]
#[allow(clippy::too_many_arguments)] // Python's arguments, one by one.
fn check_backward(
    q: Described,
    k: Described,
    v: Described,
    out: Described,
    d_out: Described,
    lse: Described,
    d_q: Described,
    d_k: Described,
    d_v: Described,
    layout: Option<&str>,
    causal: bool,
    scale: Option<f32>,
    deterministic: bool,
    window_size: (i64, i64),
    softcap: f64,
) -> PyResult<usize> {
    let (ops, lse) = backward_operands([&q, &k, &v, &out, &d_out, &d_q, &d_k, &d_v], &lse, layout)?;
    let options = backward_options(causal, scale, deterministic, window_size, softcap)?;
    let shape = if ops[0].dtype == "torch.float16" {
        flashrs::backward::check_backward(&backward_views::<f16>(&ops, lse), None, options)
    } else {
        flashrs::backward::check_backward(&backward_views::<bf16>(&ops, lse), None, options)
    }
    .map_err(to_py)?;
    Ok(workspace_bytes(shape))
}

/// The backward pass on the described tensors: writes `d_q`, `d_k` and `d_v` from the forward's
/// `out` and `lse` and the gradient `d_out`, with `workspace` (`(address, bytes)`, at least what
/// `check_backward` said) as scratch, enqueued on `stream`.
#[pyfunction]
#[pyo3(signature = (q, k, v, out, d_out, lse, d_q, d_k, d_v, workspace, layout, causal, scale, deterministic, stream, window_size=(-1, -1), softcap=0.0))]
#[allow(clippy::too_many_arguments)] // Python's arguments, one by one.
fn backward(
    py: Python<'_>,
    q: Described,
    k: Described,
    v: Described,
    out: Described,
    d_out: Described,
    lse: Described,
    d_q: Described,
    d_k: Described,
    d_v: Described,
    workspace: (u64, usize),
    layout: Option<&str>,
    causal: bool,
    scale: Option<f32>,
    deterministic: bool,
    stream: usize,
    window_size: (i64, i64),
    softcap: f64,
) -> PyResult<()> {
    let (ops, lse) = backward_operands([&q, &k, &v, &out, &d_out, &d_q, &d_k, &d_v], &lse, layout)?;
    let options = backward_options(causal, scale, deterministic, window_size, softcap)?;
    let (f16, device) = (ops[0].dtype == "torch.float16", ops[0].device);
    // Checked before the GPU is opened, so that bad input is a ValueError on any machine.
    if f16 {
        flashrs::backward::check_backward(&backward_views::<f16>(&ops, lse), Some(workspace), options)
    } else {
        flashrs::backward::check_backward(&backward_views::<bf16>(&ops, lse), Some(workspace), options)
    }
    .map_err(to_py)?;
    // Opening the GPU binds its context; torch's current one is current again after.
    let ran = py.detach(move || {
        let gpu = gpu(device)?;
        let stream = stream as *mut std::ffi::c_void;
        // Safety: as `attention`'s: torch tensors the wrapper holds until this returns, of
        // `device`, addressed as their shapes and strides say (checked contiguous), the
        // gradients and the workspace fresh `torch.empty` tensors of their own, all ordered on
        // torch's current stream `stream`; `out` and `lse` are the forward's, saved by autograd.
        unsafe {
            if f16 {
                attention_backward_raw(
                    gpu,
                    backward_views::<f16>(&ops, lse),
                    workspace.0,
                    workspace.1,
                    options,
                    stream,
                )
            } else {
                attention_backward_raw(
                    gpu,
                    backward_views::<bf16>(&ops, lse),
                    workspace.0,
                    workspace.1,
                    options,
                    stream,
                )
            }
        }
    });
    ran.map_err(to_py)
}

/// The native module; `flashrs` (the Python package) is its user-facing wrapper.
#[pymodule]
fn _flashrs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(attention, m)?)?;
    m.add_function(wrap_pyfunction!(varlen::varlen_attention, m)?)?;
    m.add_function(wrap_pyfunction!(paged::paged_attention, m)?)?;
    m.add_function(wrap_pyfunction!(merge::merge_states, m)?)?;
    m.add_function(wrap_pyfunction!(check_backward, m)?)?;
    m.add_function(wrap_pyfunction!(backward, m)?)?;
    Ok(())
}
