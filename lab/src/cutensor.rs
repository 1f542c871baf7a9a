//! `cutensor`: the `cublas` path's sibling, attention composed of cuTENSOR 2 contractions around
//! our own row softmax. `S = Q K^T` and `O = P V` are einsum-like contractions over modes
//! `b` (batch), `k` (key/value head), `g` (query head within its group), `i` (query), `j` (key),
//! `d` (head dim): `S[b,k,g,i,j] = sum_d Q[b,k,g,i,d] K[b,k,j,d]` and
//! `O[b,k,g,i,d] = sum_j P[b,k,g,i,j] V[b,k,j,d]`. Splitting the query head into `(k, g)` gives
//! grouped-query attention for free, and the tensor descriptors' strides read `[B,H,S,D]` and
//! `[B,S,H,D]` in place.
//!
//! cuTENSOR 2 contracts 16-bit operands into 16-bit results only, while the row softmax (shared
//! with `cublas`, see `composed`) reads fp32 scores. So Q and K are first widened to fp32 by a
//! cuTENSOR permutation (fp16 -> fp32 is one of its conversions; bf16 -> fp32 is not, so a bf16
//! input is written into the upper halves of zeroed fp32 words, which is the same number), and
//! the score contraction runs on fp32 operands with a 16-bit compute descriptor: tensor cores,
//! exact since the values came from 16 bits, fp32 scores as cuBLAS writes them.
//!
//! The library is loaded at run time (`libcutensor.so.2`, e.g. from PyPI's `cutensor-cu13`): a
//! machine without it gets [`LabError::NoCutensor`]. cudarc 0.19 has cuTENSOR bindings, but
//! enabling them here would make every build that links cudarc to the CUDA libraries (candle's,
//! through `dynamic-linking`) link `-lcutensor` too, and they lack the compute descriptors, which
//! are data symbols; so the few entry points this path calls are declared below.

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

use crate::composed::{self, RowSoftmax, Supports};
use crate::error::{LabError, Result};
use flashrs::Error;
use flashrs::Layout;
use flashrs::{DType, Params, Shape};
use flashrs::{Gpu, Tensors};

/// The kernel name `verify`, `bench` and `attend` use for this path.
pub const NAME: &str = "cutensor";

/// Grouped heads and both layouts, through the modes and strides of the tensor descriptors.
pub const SUPPORTS: Supports = Supports {
    grouped_heads: true,
    bshd: true,
};

/// The names tried, in order, by the dynamic loader (so `LD_LIBRARY_PATH` applies).
pub const LIBRARY_NAMES: &[&str] = &["libcutensor.so.2", "libcutensor.so", "cutensor.dll"];

// The C API's opaque handles and enumerations (C `enum`s are `int`), with the values of
// cuTENSOR 2's public headers.
type Status = i32;
type Handle = *mut c_void;
type TensorDesc = *mut c_void;
type OpDesc = *mut c_void;
type PlanPref = *mut c_void;
type Plan = *mut c_void;
type ComputeDesc = *const c_void;
type Stream = *mut c_void;

const STATUS_SUCCESS: Status = 0;
const STATUS_INVALID_VALUE: Status = 7;
const STATUS_NOT_SUPPORTED: Status = 15;
const CUDA_R_32F: i32 = 0;
const CUDA_R_16F: i32 = 2;
const CUDA_R_16BF: i32 = 14;
const OP_IDENTITY: i32 = 1;
const ALGO_DEFAULT: i32 = -1;
const JIT_MODE_NONE: i32 = 0;
const WORKSPACE_DEFAULT: i32 = 2;

/// The alignment, in bytes, declared for Q, K, V and the output (what the fused kernels need
/// too); checked on every launch, since a plan may rely on it.
const ALIGNMENT: u64 = 16;

/// The entry points this path calls, resolved once from the loaded library.
#[allow(clippy::type_complexity)]
struct Api {
    create: unsafe extern "C" fn(*mut Handle) -> Status,
    destroy: unsafe extern "C" fn(Handle) -> Status,
    create_tensor_descriptor:
        unsafe extern "C" fn(Handle, *mut TensorDesc, u32, *const i64, *const i64, i32, u32) -> Status,
    destroy_tensor_descriptor: unsafe extern "C" fn(TensorDesc) -> Status,
    create_permutation: unsafe extern "C" fn(
        Handle,
        *mut OpDesc,
        TensorDesc,
        *const i32,
        i32,
        TensorDesc,
        *const i32,
        ComputeDesc,
    ) -> Status,
    create_contraction: unsafe extern "C" fn(
        Handle,
        *mut OpDesc,
        TensorDesc,
        *const i32,
        i32,
        TensorDesc,
        *const i32,
        i32,
        TensorDesc,
        *const i32,
        i32,
        TensorDesc,
        *const i32,
        ComputeDesc,
    ) -> Status,
    destroy_operation_descriptor: unsafe extern "C" fn(OpDesc) -> Status,
    create_plan_preference: unsafe extern "C" fn(Handle, *mut PlanPref, i32, i32) -> Status,
    destroy_plan_preference: unsafe extern "C" fn(PlanPref) -> Status,
    estimate_workspace_size: unsafe extern "C" fn(Handle, OpDesc, PlanPref, i32, *mut u64) -> Status,
    create_plan: unsafe extern "C" fn(Handle, *mut Plan, OpDesc, PlanPref, u64) -> Status,
    destroy_plan: unsafe extern "C" fn(Plan) -> Status,
    permute: unsafe extern "C" fn(Handle, Plan, *const c_void, *const c_void, *mut c_void, Stream) -> Status,
    contract: unsafe extern "C" fn(
        Handle,
        Plan,
        *const c_void,
        *const c_void,
        *const c_void,
        *const c_void,
        *const c_void,
        *mut c_void,
        *mut c_void,
        u64,
        Stream,
    ) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    compute_16f: ComputeDesc,
    compute_16bf: ComputeDesc,
    compute_32f: ComputeDesc,
    /// Keeps the code behind the pointers above mapped (the `Api` lives in a static).
    _library: libloading::Library,
}

// Safety: the function pointers and compute descriptors point into the library, which stays
// loaded for the life of the process, and the descriptors are immutable globals that cuTENSOR
// itself reads from any thread; nothing in `Api` is ever written after loading.
unsafe impl Send for Api {}
// Safety: as for `Send`: `Api` is read-only once built.
unsafe impl Sync for Api {}

/// The loaded library, or why it could not be loaded (tried once per process).
fn api() -> Result<&'static Api> {
    static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();
    API.get_or_init(load)
        .as_ref()
        .map_err(|reason| LabError::NoCutensor(reason.clone()))
}

/// Whether cuTENSOR can be loaded here; `Err` says why not. Needs no GPU.
pub fn available() -> Result<()> {
    api().map(|_| ())
}

fn load() -> std::result::Result<Api, String> {
    let mut first_failure = None;
    for &name in LIBRARY_NAMES {
        // Safety: loading runs cuTENSOR's initialisers, which only register the library's own
        // state; no other code of ours runs meanwhile.
        match unsafe { libloading::Library::new(name) } {
            // Safety: the symbols are resolved with the signatures of cuTENSOR 2's API, which
            // `resolve` then checks the library's version for.
            Ok(library) => return unsafe { resolve(library) }.map_err(|e| format!("{name}: {e}")),
            Err(e) => {
                first_failure.get_or_insert(e.to_string());
            }
        }
    }
    Err(first_failure.unwrap_or_else(|| "no library name to try".into()))
}

/// A symbol of `library` as a value of type `T` (a function pointer, or a data symbol's address).
///
/// # Safety
/// `T` must be the symbol's type.
unsafe fn symbol<T: Copy>(library: &libloading::Library, name: &str) -> std::result::Result<T, String> {
    library
        .get::<T>(name)
        .map(|symbol| *symbol)
        .map_err(|e| e.to_string())
}

/// # Safety
/// `library` must be cuTENSOR 2 (checked through `cutensorGetVersion`, which every version has).
unsafe fn resolve(library: libloading::Library) -> std::result::Result<Api, String> {
    let version: unsafe extern "C" fn() -> usize = symbol(&library, "cutensorGetVersion")?;
    let version = version();
    if !(20_000..30_000).contains(&version) {
        return Err(format!(
            "version {version} found, the cutensor path needs cuTENSOR 2 (2.x.y is 2xxyy)"
        ));
    }
    // Data symbols: `extern const cutensorComputeDescriptor_t NAME;`, so the symbol's address
    // holds the descriptor.
    let descriptor = |name: &str| -> std::result::Result<ComputeDesc, String> {
        let address: *const ComputeDesc = symbol(&library, name)?;
        Ok(*address)
    };
    Ok(Api {
        create: symbol(&library, "cutensorCreate")?,
        destroy: symbol(&library, "cutensorDestroy")?,
        create_tensor_descriptor: symbol(&library, "cutensorCreateTensorDescriptor")?,
        destroy_tensor_descriptor: symbol(&library, "cutensorDestroyTensorDescriptor")?,
        create_permutation: symbol(&library, "cutensorCreatePermutation")?,
        create_contraction: symbol(&library, "cutensorCreateContraction")?,
        destroy_operation_descriptor: symbol(&library, "cutensorDestroyOperationDescriptor")?,
        create_plan_preference: symbol(&library, "cutensorCreatePlanPreference")?,
        destroy_plan_preference: symbol(&library, "cutensorDestroyPlanPreference")?,
        estimate_workspace_size: symbol(&library, "cutensorEstimateWorkspaceSize")?,
        create_plan: symbol(&library, "cutensorCreatePlan")?,
        destroy_plan: symbol(&library, "cutensorDestroyPlan")?,
        permute: symbol(&library, "cutensorPermute")?,
        contract: symbol(&library, "cutensorContract")?,
        error_string: symbol(&library, "cutensorGetErrorString")?,
        compute_16f: descriptor("CUTENSOR_COMPUTE_DESC_16F")?,
        compute_16bf: descriptor("CUTENSOR_COMPUTE_DESC_16BF")?,
        compute_32f: descriptor("CUTENSOR_COMPUTE_DESC_32F")?,
        _library: library,
    })
}

impl Api {
    fn describe(&self, status: Status) -> String {
        // Safety: cutensorGetErrorString takes any status and returns a static C string.
        let text = unsafe { (self.error_string)(status) };
        if text.is_null() {
            return format!("status {status}");
        }
        // Safety: non-null, NUL-terminated and static, as above.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }

    /// A set-up call's status: a problem cuTENSOR refuses is the problem's error; anything
    /// else is the library failing.
    fn setup(&self, call: &str, shape: Shape, status: Status) -> Result<()> {
        match status {
            STATUS_SUCCESS => Ok(()),
            STATUS_NOT_SUPPORTED | STATUS_INVALID_VALUE => Err(Error::InvalidProblem(format!(
                "the cutensor path on {shape}: {call} refused it ({})",
                self.describe(status)
            ))
            .into()),
            _ => Err(LabError::Cutensor(format!("{call}: {}", self.describe(status)))),
        }
    }

    /// A call that runs work on the GPU: any failure is the library's (or the GPU's).
    fn run(&self, call: &str, status: Status) -> Result<()> {
        match status {
            STATUS_SUCCESS => Ok(()),
            _ => Err(LabError::Cutensor(format!("{call}: {}", self.describe(status)))),
        }
    }
}

/// Everything created through the handle, destroyed with it (in reverse order of dependence).
struct Owned {
    api: &'static Api,
    handle: Handle,
    tensors: Vec<TensorDesc>,
    operations: Vec<OpDesc>,
    preferences: Vec<PlanPref>,
    plans: Vec<Plan>,
}

impl Drop for Owned {
    fn drop(&mut self) {
        let api = self.api;
        // Safety: each object was created once through this handle and is destroyed once, here;
        // the GPU work that used the plans was enqueued on a stream whose buffers outlive this
        // (cuTENSOR's objects are host-side descriptions, not device memory in use).
        unsafe {
            for &plan in &self.plans {
                (api.destroy_plan)(plan);
            }
            for &preference in &self.preferences {
                (api.destroy_plan_preference)(preference);
            }
            for &operation in &self.operations {
                (api.destroy_operation_descriptor)(operation);
            }
            for &tensor in &self.tensors {
                (api.destroy_tensor_descriptor)(tensor);
            }
            (api.destroy)(self.handle);
        }
    }
}

/// One tensor as cuTENSOR sees it: modes, extents and strides (in elements), element type.
struct TensorSpec {
    modes: Vec<i32>,
    extents: Vec<i64>,
    strides: Vec<i64>,
    dtype: i32,
    alignment: u32,
}

const MODE_B: i32 = b'b' as i32;
const MODE_K: i32 = b'k' as i32;
const MODE_G: i32 = b'g' as i32;
const MODE_I: i32 = b'i' as i32;
const MODE_J: i32 = b'j' as i32;
const MODE_D: i32 = b'd' as i32;

/// The specs of one layout's four operations (each input, then the output).
struct Specs {
    widen_q: [TensorSpec; 2],
    widen_k: [TensorSpec; 2],
    scores: [TensorSpec; 3],
    output: [TensorSpec; 3],
}

fn element_type(dtype: DType) -> i32 {
    match dtype {
        DType::F16 => CUDA_R_16F,
        DType::Bf16 => CUDA_R_16BF,
    }
}

/// The modes, extents and strides of every operand, for tensors in `layout`. The widened copies
/// and the scores are always `[B,H,S,D]`-ordered and dense.
fn specs(shape: Shape, dtype: DType, layout: Layout) -> Specs {
    let (b, h, hk, sq, sk, d) = (
        shape.batch as i64,
        shape.heads as i64,
        shape.heads_kv as i64,
        shape.seq_q as i64,
        shape.seq_k as i64,
        shape.head_dim as i64,
    );
    let g = h / hk;
    let q_modes = vec![MODE_B, MODE_K, MODE_G, MODE_I, MODE_D];
    let k_modes = vec![MODE_B, MODE_K, MODE_J, MODE_D];
    let s_modes = vec![MODE_B, MODE_K, MODE_G, MODE_I, MODE_J];
    let q_extents = vec![b, hk, g, sq, d];
    let k_extents = vec![b, hk, sk, d];
    // Query head h = k * g_count + g: its stride is g's, times the group for k.
    let (q_strides, k_strides) = match layout {
        Layout::Bhsd => (
            vec![h * sq * d, g * sq * d, sq * d, d, 1],
            vec![hk * sk * d, sk * d, d, 1],
        ),
        Layout::Bshd => (
            vec![sq * h * d, g * d, d, h * d, 1],
            vec![sk * hk * d, d, hk * d, 1],
        ),
    };
    let dense_q = vec![h * sq * d, g * sq * d, sq * d, d, 1];
    let dense_k = vec![hk * sk * d, sk * d, d, 1];
    let element = element_type(dtype);
    let spec = |modes: &Vec<i32>, extents: &Vec<i64>, strides: Vec<i64>, dtype, alignment| TensorSpec {
        modes: modes.clone(),
        extents: extents.clone(),
        strides,
        dtype,
        alignment,
    };
    // The fp32 copy a widening writes: fp32 itself, or for bf16 the upper (little-endian: second)
    // 16-bit half of each fp32 word, seen as bf16 with every stride doubled.
    let widened = |strides: &Vec<i64>| match dtype {
        DType::F16 => (strides.clone(), CUDA_R_32F, 16),
        DType::Bf16 => (strides.iter().map(|s| 2 * s).collect(), CUDA_R_16BF, 2),
    };
    let (wq_strides, wq_type, wq_align) = widened(&dense_q);
    let (wk_strides, wk_type, wk_align) = widened(&dense_k);
    let align = ALIGNMENT as u32;
    let s_extents = vec![b, hk, g, sq, sk];
    let s_strides = vec![h * sq * sk, g * sq * sk, sq * sk, sk, 1];
    Specs {
        widen_q: [
            spec(&q_modes, &q_extents, q_strides.clone(), element, align),
            spec(&q_modes, &q_extents, wq_strides, wq_type, wq_align),
        ],
        widen_k: [
            spec(&k_modes, &k_extents, k_strides.clone(), element, align),
            spec(&k_modes, &k_extents, wk_strides, wk_type, wk_align),
        ],
        scores: [
            spec(&q_modes, &q_extents, dense_q, CUDA_R_32F, 16),
            spec(&k_modes, &k_extents, dense_k, CUDA_R_32F, 16),
            spec(&s_modes, &s_extents, s_strides.clone(), CUDA_R_32F, 16),
        ],
        output: [
            spec(&s_modes, &s_extents, s_strides, element, 16),
            spec(&k_modes, &k_extents, k_strides, element, align),
            spec(&q_modes, &q_extents, q_strides, element, align),
        ],
    }
}

/// A plan and the workspace it was planned with.
#[derive(Clone, Copy)]
struct Step {
    plan: Plan,
    workspace: u64,
}

/// The four steps of one layout.
struct Plans {
    layout: Layout,
    widen_q: Step,
    widen_k: Step,
    scores: Step,
    output: Step,
}

/// A cuTENSOR handle, the plans of the layouts launched so far, and scratch buffers sized for
/// one shape.
pub struct CutensorAttention {
    owned: Owned,
    rows: RowSoftmax,
    /// Q and K widened to fp32, `[B,H,S_q,D]` and `[B,H_kv,S_k,D]`.
    q32: CudaSlice<f32>,
    k32: CudaSlice<f32>,
    workspace: Option<CudaSlice<u8>>,
    plans: Vec<Plans>,
    shape: Shape,
    dtype: DType,
}

impl CutensorAttention {
    /// Loads cuTENSOR (`LabError::NoCutensor` when the library is missing) and allocates the
    /// widened Q and K, the scores and the probabilities for `shape`. The plans are made on
    /// the first launch of each layout.
    pub fn new(gpu: &Gpu, shape: Shape, dtype: DType) -> Result<CutensorAttention> {
        composed::check(NAME, SUPPORTS, shape, Layout::Bhsd, false)?;
        let api = api()?;
        let widened = shape
            .q_len()
            .checked_add(shape.kv_len())
            .and_then(|n| n.checked_mul(4))
            .ok_or_else(|| {
                Error::InvalidProblem(format!("the cutensor path's inputs of {shape} overflow"))
            })?;
        let rows = RowSoftmax::new(gpu, NAME, shape, dtype, widened)?;
        let stream = gpu.stream();
        // Zeroed: for bf16, the lower halves of these words are never written again.
        let q32 = stream.alloc_zeros(shape.q_len())?;
        let k32 = stream.alloc_zeros(shape.kv_len())?;
        gpu.context().bind_to_thread()?;
        let mut handle: Handle = std::ptr::null_mut();
        // Safety: `handle` is a valid place for the new handle; the GPU's context is current.
        api.run("cutensorCreate", unsafe { (api.create)(&mut handle) })?;
        Ok(CutensorAttention {
            owned: Owned {
                api,
                handle,
                tensors: Vec::new(),
                operations: Vec::new(),
                preferences: Vec::new(),
                plans: Vec::new(),
            },
            rows,
            q32,
            k32,
            workspace: None,
            plans: Vec::new(),
            shape,
            dtype,
        })
    }

    /// The tensor descriptor of `spec`, owned by the handle's objects.
    fn descriptor(&mut self, spec: &TensorSpec) -> Result<TensorDesc> {
        let api = self.owned.api;
        let mut desc: TensorDesc = std::ptr::null_mut();
        // Safety: the extents and strides hold `modes.len()` entries each, as the count says;
        // `desc` is a valid place for the result.
        let status = unsafe {
            (api.create_tensor_descriptor)(
                self.owned.handle,
                &mut desc,
                spec.modes.len() as u32,
                spec.extents.as_ptr(),
                spec.strides.as_ptr(),
                spec.dtype,
                spec.alignment,
            )
        };
        api.setup("cutensorCreateTensorDescriptor", self.shape, status)?;
        self.owned.tensors.push(desc);
        Ok(desc)
    }

    /// Plans `operation` (already owned) with the default algorithm, no JIT and the default
    /// workspace.
    fn plan(&mut self, operation: OpDesc) -> Result<Step> {
        let (api, handle, shape) = (self.owned.api, self.owned.handle, self.shape);
        let mut preference: PlanPref = std::ptr::null_mut();
        // Safety: `preference` is a valid place for the result; the handle is live.
        let status =
            unsafe { (api.create_plan_preference)(handle, &mut preference, ALGO_DEFAULT, JIT_MODE_NONE) };
        api.setup("cutensorCreatePlanPreference", shape, status)?;
        self.owned.preferences.push(preference);
        let mut workspace = 0u64;
        // Safety: live handle, operation and preference; `workspace` is a valid place.
        let status = unsafe {
            (api.estimate_workspace_size)(handle, operation, preference, WORKSPACE_DEFAULT, &mut workspace)
        };
        api.setup("cutensorEstimateWorkspaceSize", shape, status)?;
        let mut plan: Plan = std::ptr::null_mut();
        // Safety: as above; the plan may use at most `workspace` bytes, which `launch` provides.
        let status = unsafe { (api.create_plan)(handle, &mut plan, operation, preference, workspace) };
        api.setup("cutensorCreatePlan", shape, status)?;
        self.owned.plans.push(plan);
        Ok(Step { plan, workspace })
    }

    fn permutation(&mut self, [from, to]: &[TensorSpec; 2]) -> Result<Step> {
        let (a, b) = (self.descriptor(from)?, self.descriptor(to)?);
        let api = self.owned.api;
        let mut operation: OpDesc = std::ptr::null_mut();
        // Safety: live handle and descriptors; each mode array has its descriptor's mode count.
        let status = unsafe {
            (api.create_permutation)(
                self.owned.handle,
                &mut operation,
                a,
                from.modes.as_ptr(),
                OP_IDENTITY,
                b,
                to.modes.as_ptr(),
                api.compute_32f,
            )
        };
        api.setup("cutensorCreatePermutation", self.shape, status)?;
        self.owned.operations.push(operation);
        self.plan(operation)
    }

    fn contraction(&mut self, [a, b, c]: &[TensorSpec; 3], compute: ComputeDesc) -> Result<Step> {
        let (da, db, dc) = (self.descriptor(a)?, self.descriptor(b)?, self.descriptor(c)?);
        let api = self.owned.api;
        let mut operation: OpDesc = std::ptr::null_mut();
        // Safety: live handle and descriptors; each mode array has its descriptor's mode count;
        // C and D are the same tensor, as cuTENSOR 2 requires.
        let status = unsafe {
            (api.create_contraction)(
                self.owned.handle,
                &mut operation,
                da,
                a.modes.as_ptr(),
                OP_IDENTITY,
                db,
                b.modes.as_ptr(),
                OP_IDENTITY,
                dc,
                c.modes.as_ptr(),
                OP_IDENTITY,
                dc,
                c.modes.as_ptr(),
                compute,
            )
        };
        api.setup("cutensorCreateContraction", self.shape, status)?;
        self.owned.operations.push(operation);
        self.plan(operation)
    }

    /// The plans for `layout`, made (and the workspace grown) on its first launch.
    fn plans_for(&mut self, gpu: &Gpu, layout: Layout) -> Result<usize> {
        if let Some(index) = self.plans.iter().position(|p| p.layout == layout) {
            return Ok(index);
        }
        let specs = specs(self.shape, self.dtype, layout);
        let api = self.owned.api;
        let scores_compute = match self.dtype {
            DType::F16 => api.compute_16f,
            DType::Bf16 => api.compute_16bf,
        };
        let plans = Plans {
            layout,
            widen_q: self.permutation(&specs.widen_q)?,
            widen_k: self.permutation(&specs.widen_k)?,
            scores: self.contraction(&specs.scores, scores_compute)?,
            output: self.contraction(&specs.output, api.compute_32f)?,
        };
        let needed = [plans.widen_q, plans.widen_k, plans.scores, plans.output]
            .iter()
            .map(|s| s.workspace)
            .max()
            .unwrap_or(0)
            .max(1) as usize;
        if self.workspace.as_ref().is_none_or(|w| w.len() < needed) {
            self.workspace = Some(gpu.stream().alloc_zeros(needed)?);
        }
        self.plans.push(plans);
        Ok(self.plans.len() - 1)
    }

    /// Runs the five steps (widen Q, widen K, scores, softmax, output) on the GPU's stream
    /// (asynchronously). Refuses tensors that asked for a log-sum-exp: this path has none.
    pub fn launch(&mut self, gpu: &Gpu, tensors: &mut Tensors, params: Params) -> Result<()> {
        let shape = tensors.shape();
        if shape != self.shape || tensors.dtype() != self.dtype {
            return Err(Error::InvalidProblem(format!(
                "cutensor buffers are for {} {}, not {shape} {}",
                self.shape,
                self.dtype,
                tensors.dtype()
            ))
            .into());
        }
        composed::check(NAME, SUPPORTS, shape, tensors.layout(), tensors.lse().is_some())?;
        params.validate()?;
        // The plans run on the GPU's stream; the tensors' buffers are checked like a launch's.
        gpu.check_tensors_on_own_stream(tensors)?;
        if **self.rows.scores.stream() != **tensors.stream() {
            return Err(Error::ForeignStream.into());
        }
        gpu.context().bind_to_thread()?;
        let index = self.plans_for(gpu, tensors.layout())?;
        let plans = &self.plans[index];
        let (api, handle) = (self.owned.api, self.owned.handle);
        let stream = gpu.stream().clone();
        let raw_stream = stream.cu_stream() as Stream;
        let (one, zero) = (1.0f32, 0.0f32);
        let (one, zero) = (
            &one as *const f32 as *const c_void,
            &zero as *const f32 as *const c_void,
        );
        let (workspace, _workspace) = match self.workspace.as_mut() {
            Some(w) => w.device_ptr_mut(&stream),
            None => return Err(Error::InvalidProblem("the cutensor path has no workspace".into()).into()),
        };
        let (q, _q) = tensors.q().device_ptr(&stream);
        let (k, _k) = tensors.k().device_ptr(&stream);
        let (v, _v) = tensors.v().device_ptr(&stream);
        for (what, ptr) in [("q", q), ("k", k), ("v", v)] {
            check_alignment(what, ptr)?;
        }
        {
            let (q32, _q32) = self.q32.device_ptr_mut(&stream);
            let (k32, _k32) = self.k32.device_ptr_mut(&stream);
            // For bf16 the widened view starts at the upper half of the first fp32 word.
            let upper = match self.dtype {
                DType::F16 => 0,
                DType::Bf16 => 2,
            };
            // Safety: each plan was made for these tensors' shape, dtype and layout (checked
            // above), so it reads and writes within the buffers: Q and K as checked against the
            // shape, the fp32 copies allocated for it; the scalars are host fp32 as the compute
            // descriptor wants; the stream is the GPU's, on which every buffer here lives.
            unsafe {
                api.run(
                    "cutensorPermute (Q)",
                    (api.permute)(
                        handle,
                        plans.widen_q.plan,
                        one,
                        q as *const c_void,
                        (q32 + upper) as *mut c_void,
                        raw_stream,
                    ),
                )?;
                api.run(
                    "cutensorPermute (K)",
                    (api.permute)(
                        handle,
                        plans.widen_k.plan,
                        one,
                        k as *const c_void,
                        (k32 + upper) as *mut c_void,
                        raw_stream,
                    ),
                )?;
            }
            let (s, _s) = self.rows.scores.device_ptr_mut(&stream);
            // Safety: as above; the scores hold B*H*S_q*S_k fp32 (sized by `RowSoftmax::new`),
            // C and D are the same buffer (beta is 0, C is not read), and the workspace holds at
            // least the plan's size (grown in `plans_for`).
            unsafe {
                api.run(
                    "cutensorContract (scores)",
                    (api.contract)(
                        handle,
                        plans.scores.plan,
                        one,
                        q32 as *const c_void,
                        k32 as *const c_void,
                        zero,
                        s as *const c_void,
                        s as *mut c_void,
                        workspace as *mut c_void,
                        plans.scores.workspace,
                        raw_stream,
                    ),
                )?;
            }
        }
        self.rows.launch(&stream, shape, params)?;
        let (p, _p) = self.rows.probs.device_ptr(&stream);
        // The output is lent shared (see cublas.rs); `&mut tensors` keeps it from other use until the stream ran.
        let (o, _o) = tensors.out().device_ptr(&stream);
        check_alignment("out", o)?;
        // Safety: as for the scores: the probabilities hold B*H*S_q*S_k 16-bit values, V and the
        // output were checked against the shape in the planned layout.
        unsafe {
            api.run(
                "cutensorContract (output)",
                (api.contract)(
                    handle,
                    plans.output.plan,
                    one,
                    p as *const c_void,
                    v as *const c_void,
                    zero,
                    o as *const c_void,
                    o as *mut c_void,
                    workspace as *mut c_void,
                    plans.output.workspace,
                    raw_stream,
                ),
            )
        }
    }
}

fn check_alignment(what: &'static str, ptr: u64) -> Result<()> {
    if ptr.is_multiple_of(ALIGNMENT) {
        Ok(())
    } else {
        Err(Error::Misaligned {
            what,
            ptr,
            align: ALIGNMENT,
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_heads_and_both_layouts_are_supported_but_not_lse() {
        let gqa = Shape::new(2, 8, 100, 64).with_heads_kv(2);
        for layout in [Layout::Bhsd, Layout::Bshd] {
            assert!(composed::check(NAME, SUPPORTS, gqa, layout, false).is_ok());
            let lse = composed::check(NAME, SUPPORTS, gqa, layout, true).err().unwrap();
            assert!(
                lse.to_string()
                    .contains("the cutensor path writes no log-sum-exp"),
                "{lse}"
            );
        }
    }

    /// Where element (b, h, s, d) of a `[B,H,S,D]` problem sits, by the layout's definition and by
    /// the strides `specs` gives cuTENSOR, for every element of small grouped problems.
    #[test]
    fn strides_address_every_element_where_the_layout_puts_it() {
        let shape = Shape {
            seq_k: 5,
            ..Shape::new(2, 6, 3, 64).with_heads_kv(2)
        };
        let group = shape.heads / shape.heads_kv;
        for layout in [Layout::Bhsd, Layout::Bshd] {
            for dtype in [DType::F16, DType::Bf16] {
                let specs = specs(shape, dtype, layout);
                let at = |spec: &TensorSpec, index: [i64; 5]| -> i64 {
                    spec.strides.iter().zip(index).map(|(s, i)| s * i).sum()
                };
                for (b, h, s, d) in itertools(shape.batch, shape.heads, shape.seq_q, shape.head_dim) {
                    let (k, g) = (h / group, h % group);
                    let expected = match layout {
                        Layout::Bhsd => ((b * shape.heads + h) * shape.seq_q + s) * shape.head_dim + d,
                        Layout::Bshd => ((b * shape.seq_q + s) * shape.heads + h) * shape.head_dim + d,
                    };
                    let index = [b, k, g, s, d].map(|x| x as i64);
                    assert_eq!(at(&specs.widen_q[0], index), expected as i64);
                    assert_eq!(at(&specs.output[2], index), expected as i64);
                    let dense = ((b * shape.heads + h) * shape.seq_q + s) * shape.head_dim + d;
                    let widened = match dtype {
                        DType::F16 => dense,
                        DType::Bf16 => 2 * dense,
                    };
                    assert_eq!(at(&specs.widen_q[1], index), widened as i64);
                    assert_eq!(at(&specs.scores[0], index), dense as i64);
                }
                for (b, k, j, d) in itertools(shape.batch, shape.heads_kv, shape.seq_k, shape.head_dim) {
                    let expected = match layout {
                        Layout::Bhsd => ((b * shape.heads_kv + k) * shape.seq_k + j) * shape.head_dim + d,
                        Layout::Bshd => ((b * shape.seq_k + j) * shape.heads_kv + k) * shape.head_dim + d,
                    };
                    let index = [b, k, j, d, 0].map(|x| x as i64);
                    assert_eq!(at(&specs.widen_k[0], index), expected as i64);
                    assert_eq!(at(&specs.output[1], index), expected as i64);
                }
                // Scores and probabilities: dense [B*H, S_q, S_k], as the row softmax reads them.
                for (b, h, i, j) in itertools(shape.batch, shape.heads, shape.seq_q, shape.seq_k) {
                    let index = [b, h / group, h % group, i, j].map(|x| x as i64);
                    let expected = ((b * shape.heads + h) * shape.seq_q + i) * shape.seq_k + j;
                    assert_eq!(at(&specs.scores[2], index), expected as i64);
                    assert_eq!(at(&specs.output[0], index), expected as i64);
                }
                // Every operand's modes, extents and strides agree in count.
                let all = specs
                    .widen_q
                    .iter()
                    .chain(&specs.widen_k)
                    .chain(&specs.scores)
                    .chain(&specs.output);
                for spec in all {
                    assert_eq!(spec.modes.len(), spec.extents.len());
                    assert_eq!(spec.modes.len(), spec.strides.len());
                }
            }
        }
    }

    fn itertools(
        a: usize,
        b: usize,
        c: usize,
        d: usize,
    ) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        (0..a).flat_map(move |w| {
            (0..b).flat_map(move |x| (0..c).flat_map(move |y| (0..d).map(move |z| (w, x, y, z))))
        })
    }

    #[test]
    fn a_machine_without_the_library_gets_the_one_line_note() {
        // This test's machines have no cuTENSOR; where one does, loading must succeed instead.
        match available() {
            Ok(()) => {}
            Err(e) => {
                assert!(matches!(e, LabError::NoCutensor(_)), "{e}");
                let line = e.to_string();
                assert_eq!(line.lines().count(), 1, "{line}");
                assert!(line.contains("libcutensor.so.2"), "{line}");
            }
        }
    }
}
