//! The backward pass: the gradients dQ, dK and dV of attention from what its forward saved (the
//! output O and each query row's log-sum-exp) and the gradient dO of the loss by O.
//!
//! ```no_run
//! use flashrs::api::{attention, f16, DeviceTensor, LseBuffer};
//! use flashrs::backward::{attention_backward, BackwardOptions};
//! use flashrs::{Gpu, Layout};
//!
//! # fn main() -> Result<(), flashrs::Error> {
//! let gpu = Gpu::open(0)?;
//! let dims = [2, 8, 512, 64];
//! let host = vec![f16::from_f32(0.5); 2 * 8 * 512 * 64];
//! let [q, k, v, d_out] = [0; 4].map(|_| DeviceTensor::from_host(&gpu, &host, dims, Layout::Bhsd));
//! let (q, k, v, d_out) = (q?, k?, v?, d_out?);
//! let mut lse = LseBuffer::for_queries(&gpu, &q)?;
//! let out = attention(&q, &k, &v).causal(true).lse(&mut lse).run(&gpu)?;
//! let options = BackwardOptions { causal: true, ..BackwardOptions::default() };
//! let grads = attention_backward(&gpu, [&q, &k, &v], &out, &lse, &d_out, options)?;
//! let d_q: Vec<f16> = grads.d_q.to_host()?;
//! # Ok(())
//! # }
//! ```
//!
//! Three kernels per call, in one stream (`kernels-rs/src/attention/backward`): a row kernel
//! that prepares each query row's statistics and clears dQ's fp32 accumulator in the workspace,
//! the main kernel (a block per 64 keys of a KV head: dK and dV whole, dQ added into the
//! accumulator), and a row kernel that writes dQ. The workspace is the caller's on the raw path
//! ([`workspace_bytes`]), so that a call allocates nothing and can be captured in a CUDA graph.
//!
//! With [`BackwardOptions::deterministic`] the key blocks add into each query tile's dQ in a
//! fixed order (lowest first), so every run gives the same bits, at every head dim; without it
//! they add in the order they arrive, which is faster and differs in the last bits between runs.

#![warn(missing_docs)]

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};

use crate::api::{check_views, DeviceTensor, Element, LseBuffer, RawOptions, TensorView};
use crate::backward_launch::{smem, warpgroup, workspace, BackwardArgs, BLOCK_N, ROWS_PER_BLOCK, THREADS};
use crate::error::{Error, Result};
use crate::gpu::{check_alignment, Gpu, TENSOR_ALIGN};
use crate::problem::{Params, Shape, Window};

/// The head dims the backward kernels take.
pub const HEAD_DIMS: &[usize] = &[64, 128, 256];

/// The grid's y dimension limit: heads beyond it go to z.
const MAX_GRID_Y: u32 = 65_535;

/// The options of a backward call: the forward's mask and scale (they must be the ones the
/// forward ran with), and the order of dQ's accumulation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BackwardOptions {
    /// The forward's causal mask (bottom-right aligned).
    pub causal: bool,
    /// The forward's softmax scale; `1 / sqrt(D)` when `None`.
    pub scale: Option<f32>,
    /// The forward's sliding window.
    pub window: Window,
    /// The forward's logit softcap.
    pub softcap: Option<f32>,
    /// Adds the key blocks' parts of dQ in a fixed order, so that every run gives the same bits.
    pub deterministic: bool,
}

impl BackwardOptions {
    fn forward(&self) -> RawOptions {
        RawOptions {
            causal: self.causal,
            scale: self.scale,
            window: self.window,
            softcap: self.softcap,
            // The forward's sinks are in its log-sum-exp, which is all the backward needs of
            // them for dQ, dK and dV (a sink's own gradient is the caller's: see `Sinks`).
            sinks: None,
        }
    }
}

/// The bytes of workspace a backward call of `shape` needs (dQ's fp32 accumulator and each query
/// row's statistics, [`backward_launch::workspace`]), 16-byte aligned.
pub fn workspace_bytes(shape: Shape) -> usize {
    let floats = workspace::floats(
        (shape.batch * shape.heads) as u32,
        shape.seq_q as u32,
        shape.head_dim as u32,
    );
    4 * floats as usize
}

/// The tensors of one backward call on caller-owned memory: the forward's inputs and output, its
/// log-sum-exp (`[B, H, S_q]` fp32, the address), the gradient by the output, and the three
/// gradients to write. All share one layout: dQ and dO Q's dims, dK and dV K's.
#[derive(Clone, Copy, Debug)]
pub struct BackwardViews<'a, T: Element> {
    /// The forward's queries.
    pub q: TensorView<'a, T>,
    /// The forward's keys.
    pub k: TensorView<'a, T>,
    /// The forward's values.
    pub v: TensorView<'a, T>,
    /// The forward's output.
    pub out: TensorView<'a, T>,
    /// The gradient of the loss by the output.
    pub d_out: TensorView<'a, T>,
    /// The address of the forward's log-sum-exp, `[B, H, S_q]` fp32.
    pub lse: u64,
    /// Written: the gradient by Q.
    pub d_q: TensorView<'a, T>,
    /// Written: the gradient by K.
    pub d_k: TensorView<'a, T>,
    /// Written: the gradient by V.
    pub d_v: TensorView<'a, T>,
}

/// Every check [`attention_backward_raw`] makes before it touches the GPU: the forward's checks
/// of Q, K, V, O and the log-sum-exp, dO and the gradients against them, the head dim, null,
/// misaligned and overlapping addresses, and the workspace (`workspace`: address and bytes;
/// `None` before it is allocated, to learn its size from the shape). Returns the problem's shape.
pub fn check_backward<T: Element>(
    views: &BackwardViews<'_, T>,
    workspace: Option<(u64, usize)>,
    options: BackwardOptions,
) -> Result<Shape> {
    let BackwardViews {
        q,
        k,
        v,
        out,
        d_out,
        lse,
        d_q,
        d_k,
        d_v,
    } = views;
    let shape = check_views(q, k, v, Some(out), Some(*lse), options.forward())?;
    // One head dim for Q, K and V (PyTorch's autograd pads V's where the forward took its own).
    shape.require_one_head_dim()?;
    // The backward's kernels read every tensor in place, in one layout (`seq_major`).
    for (what, view) in [("q", q), ("k", k), ("v", v), ("out", out)] {
        if !view.is_contiguous() || view.layout() != q.layout() {
            return Err(Error::Incompatible(format!(
                "{what} has strides {:?}: the backward takes q, k, v and the output contiguous in one \
                 layout ({})",
                view.strides().0,
                q.layout()
            )));
        }
    }
    if !HEAD_DIMS.contains(&shape.head_dim) {
        return Err(Error::UnsupportedHeadDim(shape.head_dim, HEAD_DIMS));
    }
    for (what, view, like, like_name) in [
        ("d_out", d_out, q, "q"),
        ("d_q", d_q, q, "q"),
        ("d_k", d_k, k, "k"),
        ("d_v", d_v, k, "k"),
    ] {
        if view.dims() != like.dims() || view.layout() != like.layout() || !view.is_contiguous() {
            return Err(Error::Incompatible(format!(
                "{what} is {:?} {} and {like_name} is {:?} {}: {what} takes {like_name}'s dims and layout",
                view.dims(),
                view.layout(),
                like.dims(),
                like.layout()
            )));
        }
    }
    let needed = workspace_bytes(shape);
    if let Some((_, len)) = workspace {
        if len < needed {
            return Err(Error::Incompatible(format!(
                "the workspace has {len} bytes; this call needs {needed} (backward::workspace_bytes)"
            )));
        }
    }
    let element = std::mem::size_of::<T>() as u128;
    let (q_bytes, kv_bytes) = (element * shape.q_len() as u128, element * shape.kv_len() as u128);
    let lse_bytes = 4 * (shape.batch * shape.heads * shape.seq_q) as u128;
    let read = [
        ("q", q.ptr(), q_bytes),
        ("k", k.ptr(), kv_bytes),
        ("v", v.ptr(), kv_bytes),
        ("out", out.ptr(), q_bytes),
        ("d_out", d_out.ptr(), q_bytes),
        ("lse", *lse, lse_bytes),
    ];
    let mut written = vec![
        ("d_q", d_q.ptr(), q_bytes),
        ("d_k", d_k.ptr(), kv_bytes),
        ("d_v", d_v.ptr(), kv_bytes),
    ];
    written.extend(workspace.map(|(ptr, _)| ("workspace", ptr, needed as u128)));
    for &(what, ptr, _) in read.iter().chain(&written) {
        if ptr == 0 {
            return Err(Error::NullPointer { what });
        }
        let align = if what == "lse" { 4 } else { TENSOR_ALIGN };
        check_alignment(what, ptr, align)?;
    }
    // What is written must overlap nothing else of the call: other blocks read the inputs while
    // one writes, and each output is written by blocks that know nothing of the others.
    for (i, &(what, ptr, len)) in written.iter().enumerate() {
        let others = read.iter().chain(written.iter().skip(i + 1));
        for &(other, other_ptr, other_len) in others {
            let (start, end) = (ptr as u128, ptr as u128 + len);
            if start < other_ptr as u128 + other_len && (other_ptr as u128) < end {
                return Err(Error::Incompatible(format!(
                    "{what} overlaps {other}: the gradients and the workspace need memory of their own"
                )));
            }
        }
    }
    Ok(shape)
}

/// The backward pass on caller-owned device memory, enqueued on the caller's stream: the checks
/// of [`check_backward`] (a mismatch is a typed error and nothing is launched), then the three
/// kernels. Asynchronous; allocates nothing, so it can be captured in a CUDA graph.
///
/// # Safety
/// - every view satisfies the contract of [`TensorView::from_raw`] until the stream has run the
///   call (`d_q`, `d_k`, `d_v` for writes), `lse` points at `B * H * S_q` fp32 likewise, and
///   `workspace` at `workspace_len` bytes valid for reads and writes;
/// - `out` and `lse` are what the forward wrote for these Q, K, V and `options` (else the
///   gradients are wrong, though every access stays inside the buffers);
/// - `stream` is a valid `CUstream` of the `Gpu`'s context, or null for the legacy default
///   stream, and stays valid for the call;
/// - nothing else writes the inputs or touches the outputs and the workspace until the stream has
///   run the call, unless ordered after it.
pub unsafe fn attention_backward_raw<T: Element>(
    gpu: &Gpu,
    views: BackwardViews<'_, T>,
    workspace: u64,
    workspace_len: usize,
    options: BackwardOptions,
    stream: *mut std::ffi::c_void,
) -> Result<()> {
    let shape = check_backward(&views, Some((workspace, workspace_len)), options)?;
    crate::api::keeping_current_context(|| {
        // Safety: `stream` is null or a live stream handle for this call (this function's contract).
        let stream = unsafe { crate::api::borrow_stream(gpu, stream) }?;
        // Safety: check_backward checked the views against the shape and each other; the
        // addresses are valid for the call (this function's contract).
        unsafe { launch_backward::<T>(gpu, &stream, &views, (workspace, workspace_len), shape, options) }
    })
}

/// The gradients of one [`attention_backward`] call.
pub struct Gradients<T: Element> {
    /// The gradient by Q, with Q's dims and layout.
    pub d_q: DeviceTensor<T>,
    /// The gradient by K.
    pub d_k: DeviceTensor<T>,
    /// The gradient by V.
    pub d_v: DeviceTensor<T>,
}

/// The backward pass on the library's own tensors: the gradients by `q`, `k`, `v` of a forward
/// call that produced `out` and wrote `lse` ([`crate::api::Attention::lse`]), given the
/// gradient `d_out` by `out`. `options` holds the forward's mask and scale. Every tensor must be
/// of `gpu`. Enqueued on `gpu`'s stream; [`DeviceTensor::to_host`] waits for it.
pub fn attention_backward<T: Element>(
    gpu: &Gpu,
    [q, k, v]: [&DeviceTensor<T>; 3],
    out: &DeviceTensor<T>,
    lse: &LseBuffer,
    d_out: &DeviceTensor<T>,
    options: BackwardOptions,
) -> Result<Gradients<T>> {
    let stream = gpu.stream();
    for (what, on) in [
        ("q", q.stream()),
        ("k", k.stream()),
        ("v", v.stream()),
        ("out", out.stream()),
        ("d_out", d_out.stream()),
        ("lse", lse.stream()),
    ] {
        if on.context().cu_ctx() != stream.context().cu_ctx() {
            return Err(Error::OtherGpu { what });
        }
    }
    if lse.dims() != [q.dims()[0], q.dims()[1], q.dims()[2]] {
        return Err(Error::Incompatible(format!(
            "the log-sum-exp buffer is {:?}, q needs [B, H, S_q] = {:?}",
            lse.dims(),
            &q.dims()[..3]
        )));
    }
    let gradients = Gradients {
        d_q: DeviceTensor::zeros(gpu, q.dims(), q.layout())?,
        d_k: DeviceTensor::zeros(gpu, k.dims(), k.layout())?,
        d_v: DeviceTensor::zeros(gpu, v.dims(), v.layout())?,
    };
    let views = BackwardViews {
        q: q.view(),
        k: k.view(),
        v: v.view(),
        out: out.view(),
        d_out: d_out.view(),
        lse: lse.device_address(),
        d_q: gradients.d_q.view(),
        d_k: gradients.d_k.view(),
        d_v: gradients.d_v.view(),
    };
    // Checked before the workspace is allocated, so that a refused call allocates nothing more.
    let shape = check_backward(&views, None, options)?;
    let workspace = stream.alloc_zeros::<u8>(workspace_bytes(shape))?;
    let (workspace_ptr, _record) = cudarc::driver::DevicePtr::device_ptr(&workspace, stream);
    // Safety: the views are of live tensors of this GPU (checked above) whose lengths their
    // dims give by construction, the gradients fresh allocations of their own; the workspace is
    // freed (stream-ordered) only after the stream has run the call; all on `gpu`'s stream.
    unsafe {
        launch_backward::<T>(
            gpu,
            stream,
            &views,
            (workspace_ptr, workspace.len()),
            shape,
            options,
        )?;
    }
    Ok(gradients)
}

/// The backward's main kernel for a call: on Hopper at the head dims it covers, the `wgmma` one
/// (`attention::backward::warpgroup`), else the `mma.sync` one (`attention::backward::kv_block`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MainKernel {
    MmaSync,
    Wgmma,
}

impl MainKernel {
    fn for_call(arch: u32, d: u32) -> Self {
        // The row kernels of the sm_90a module read dQ's accumulator in the wgmma kernel's order
        // exactly where this holds.
        if warpgroup::covers(d, arch >= 90) {
            MainKernel::Wgmma
        } else {
            MainKernel::MmaSync
        }
    }

    /// The entry point for head dim `d` and `dtype`; `softcap`: the problem has one (the wgmma
    /// kernel has a copy for it).
    fn symbol(self, d: u32, dtype: &str, softcap: bool) -> String {
        match (self, softcap) {
            (MainKernel::MmaSync, _) => format!("flash_backward_d{d}_{dtype}"),
            (MainKernel::Wgmma, false) => format!("flash_backward_wgmma_d{d}_{dtype}"),
            (MainKernel::Wgmma, true) => format!("flash_backward_wgmma_softcap_d{d}_{dtype}"),
        }
    }

    /// Keys per block: the grid's x extent is `S_k` over it.
    fn block_n(self) -> u32 {
        match self {
            MainKernel::MmaSync => BLOCK_N,
            MainKernel::Wgmma => warpgroup::BLOCK_N,
        }
    }

    fn smem_bytes(self, d: u32) -> u32 {
        match self {
            MainKernel::MmaSync => smem::bytes(d, smem::stages(d)),
            MainKernel::Wgmma => warpgroup::bytes(d),
        }
    }
}

/// The three launches of a checked call.
///
/// # Safety
/// `check_backward` accepted `views` and `workspace` for `shape` and `options`, and the memory
/// they address is valid on `stream` (of `gpu`'s context) until the stream has run the call.
unsafe fn launch_backward<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    views: &BackwardViews<'_, T>,
    (workspace, workspace_len): (u64, usize),
    shape: Shape,
    options: BackwardOptions,
) -> Result<()> {
    let d = shape.head_dim as u32;
    let params = Params::from(options.forward());
    let scale = params.scale_for(shape.head_dim);
    let (window_left, window_right) = params.window.encoded(params.causal);
    let (softcap, softcap_inverse) = params.raw_softcap(shape.head_dim);
    let batch_heads = (shape.batch * shape.heads) as u32;
    let kv_group = (shape.heads / shape.heads_kv) as u32;
    let args = BackwardArgs {
        seq_q: shape.seq_q as u32,
        seq_k: shape.seq_k as u32,
        scale_log2: scale * std::f32::consts::LOG2_E,
        scale,
        causal: options.causal as u32,
        window_left,
        window_right,
        softcap,
        softcap_inverse,
        kv_group,
        heads: shape.heads as u32,
        seq_major: (views.q.layout() == crate::Layout::Bshd) as u32,
        batch_heads,
        deterministic: options.deterministic as u32,
        ..BackwardArgs::default()
    };
    let dtype = T::DTYPE.name();
    let main_kernel = MainKernel::for_call(gpu.arch, d);
    let prepare = gpu.cached_function(&format!("flash_backward_prepare_d{d}_{dtype}"))?;
    let main = gpu.cached_function_with_shared(
        &main_kernel.symbol(d, dtype, params.softcap.is_some()),
        main_kernel.smem_bytes(d),
    )?;
    let finish = gpu.cached_function(&format!("flash_backward_dq_d{d}_{dtype}"))?;
    let rows = |heads: u32, x: u32, shared: u32| {
        let y = heads.min(MAX_GRID_Y);
        LaunchConfig {
            grid_dim: (x, y, heads.div_ceil(y)),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: shared,
        }
    };
    let row_blocks = (workspace::padded_rows(shape.seq_q as u32) / ROWS_PER_BLOCK as u64) as u32;
    let key_blocks = (shape.seq_k as u32).div_ceil(main_kernel.block_n());
    // The grids are the ones the kernels' modules document (rows: padded rows / 8 by B*H; main:
    // key blocks by B*H_kv, with the shared memory it was opted into); the three run in stream
    // order, each waiting for the one before.
    let grids = [
        (&prepare, rows(batch_heads, row_blocks, 0)),
        (
            &main,
            rows(batch_heads / kv_group, key_blocks, main_kernel.smem_bytes(d)),
        ),
        (&finish, rows(batch_heads, row_blocks, 0)),
    ];
    let element = std::mem::size_of::<T>();
    let (q_bytes, kv_bytes) = (element * shape.q_len(), element * shape.kv_len());
    let lse_bytes = 4 * shape.batch * shape.heads * shape.seq_q;
    for (function, config) in grids {
        let mut launch = crate::gpu::Launch::function(gpu, function, stream, config, &shape, args);
        // The caller's views (this function's contract: `check_backward` accepted them, so each
        // holds what its dims say, and the dims are the problem's), and the workspace.
        let bind = [
            (
                "q",
                views.q.ptr(),
                q_bytes,
                (|a, p| a.q = p) as fn(&mut BackwardArgs, u64),
            ),
            ("k", views.k.ptr(), kv_bytes, |a, p| a.k = p),
            ("v", views.v.ptr(), kv_bytes, |a, p| a.v = p),
            ("out", views.out.ptr(), q_bytes, |a, p| a.out = p),
            ("d_out", views.d_out.ptr(), q_bytes, |a, p| a.d_out = p),
            ("lse", views.lse, lse_bytes, |a, p| a.lse = p),
            ("d_q", views.d_q.ptr(), q_bytes, |a, p| a.d_q = p),
            ("d_k", views.d_k.ptr(), kv_bytes, |a, p| a.d_k = p),
            ("d_v", views.d_v.ptr(), kv_bytes, |a, p| a.d_v = p),
        ];
        for (what, address, bytes, set) in bind {
            launch.memory(what, address, bytes, bytes, set);
        }
        launch.scratch(
            "workspace",
            workspace,
            workspace_len,
            workspace_bytes(shape),
            |a, p| a.workspace = p,
        );
        launch.enqueue()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::f16;
    use crate::Layout;

    fn view(ptr: u64, dims: [usize; 4]) -> TensorView<'static, f16> {
        // Safety: never dereferenced; only the checks read it.
        unsafe { TensorView::from_raw(ptr, dims, Layout::Bhsd) }
    }

    /// A well-formed call of (2, 4 q heads, 2 kv heads, 100 queries, 70 keys, 64), each buffer
    /// 1 MiB apart, and its workspace.
    fn views() -> (BackwardViews<'static, f16>, Option<(u64, usize)>) {
        let (q, kv) = ([2, 4, 100, 64], [2, 2, 70, 64]);
        let at = |i: u64| (1 + i) << 20;
        let views = BackwardViews {
            q: view(at(0), q),
            k: view(at(1), kv),
            v: view(at(2), kv),
            out: view(at(3), q),
            d_out: view(at(4), q),
            lse: at(5),
            d_q: view(at(6), q),
            d_k: view(at(7), kv),
            d_v: view(at(8), kv),
        };
        let shape = Shape {
            batch: 2,
            heads: 4,
            heads_kv: 2,
            seq_q: 100,
            seq_k: 70,
            head_dim: 64,
            head_dim_v: 64,
        };
        (views, Some((at(9), workspace_bytes(shape))))
    }

    #[test]
    fn a_well_formed_call_passes_and_its_workspace_is_the_kernels_layout() {
        let (views, workspace) = views();
        let shape = check_backward(&views, workspace, BackwardOptions::default()).unwrap();
        // 8 heads of 100 rows padded to 128: the accumulator, two row arrays, two turns a head.
        assert_eq!(workspace_bytes(shape), 4 * (8 * 128 * 64 + 2 * 8 * 128 + 8 * 2));
    }

    /// A change to a well-formed call's views or workspace.
    type Change = dyn Fn(&mut BackwardViews<'static, f16>, &mut Option<(u64, usize)>);

    #[test]
    fn mismatches_are_typed_errors_that_name_the_tensor() {
        let options = BackwardOptions::default();
        let cases: Vec<(&str, Box<Change>)> = vec![
            (
                "d_out is [2, 4, 99, 64]",
                Box::new(|v, _| v.d_out = view(v.d_out.ptr(), [2, 4, 99, 64])),
            ),
            (
                "d_k is [2, 4, 70, 64]",
                Box::new(|v, _| v.d_k = view(v.d_k.ptr(), [2, 4, 70, 64])),
            ),
            (
                "workspace has 16 bytes",
                Box::new(|_, w| *w = w.map(|(ptr, _)| (ptr, 16))),
            ),
            ("lse: the device pointer is null", Box::new(|v, _| v.lse = 0)),
            (
                "d_q overlaps q",
                Box::new(|v, _| v.d_q = view(v.q.ptr() + 64, [2, 4, 100, 64])),
            ),
            (
                "d_k overlaps d_v",
                Box::new(|v, _| v.d_v = view(v.d_k.ptr() + 16, [2, 2, 70, 64])),
            ),
            (
                "workspace overlaps d_out",
                Box::new(|v, w| *w = w.map(|(_, len)| (v.d_out.ptr(), len))),
            ),
            (
                "d_q: device address",
                Box::new(|v, _| v.d_q = view(v.d_q.ptr() + 2, [2, 4, 100, 64])),
            ),
        ];
        for (expected, change) in cases {
            let (mut views, mut workspace) = views();
            change(&mut views, &mut workspace);
            let error = check_backward(&views, workspace, options)
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{expected}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }

    #[test]
    fn a_head_dim_without_backward_kernels_is_refused() {
        let (q, kv) = ([1, 2, 16, 32], [1, 2, 16, 32]);
        let at = |i: u64| (1 + i) << 20;
        let views = BackwardViews {
            q: view(at(0), q),
            k: view(at(1), kv),
            v: view(at(2), kv),
            out: view(at(3), q),
            d_out: view(at(4), q),
            lse: at(5),
            d_q: view(at(6), q),
            d_k: view(at(7), kv),
            d_v: view(at(8), kv),
        };
        let error = check_backward(&views, None, BackwardOptions::default()).unwrap_err();
        assert!(matches!(error, Error::UnsupportedHeadDim(32, _)), "{error}");
    }

    #[test]
    fn every_backward_kernel_is_compiled() {
        for &d in HEAD_DIMS {
            for dtype in ["f16", "bf16"] {
                for arch in [80, 90] {
                    // A build for fewer architectures (`FLASHRS_ARCHES`) checks the ones it has.
                    let Some(ptx) = crate::embedded::ptx(arch) else {
                        continue;
                    };
                    let main = MainKernel::for_call(arch, d as u32);
                    for name in [
                        format!("flash_backward_prepare_d{d}_{dtype}"),
                        main.symbol(d as u32, dtype, false),
                        main.symbol(d as u32, dtype, true),
                        format!("flash_backward_dq_d{d}_{dtype}"),
                    ] {
                        assert!(ptx.contains(&format!(".entry {name}(")), "sm_{arch}: {name}");
                    }
                }
            }
        }
        // The wgmma kernel replaces the mma.sync one on Hopper at its head dims only.
        assert_eq!(MainKernel::for_call(90, 128), MainKernel::Wgmma);
        assert_eq!(MainKernel::for_call(90, 256), MainKernel::MmaSync);
        assert_eq!(MainKernel::for_call(80, 64), MainKernel::MmaSync);
    }

    #[test]
    fn the_host_and_device_lists_of_head_dims_agree() {
        let device: Vec<usize> = crate::backward_launch::HEAD_DIMS
            .iter()
            .map(|&d| d as usize)
            .collect();
        assert_eq!(device, HEAD_DIMS);
    }
}
