//! The one launch: a kernel's parameter list filled from checked buffers, and the one `unsafe` call that enqueues it.

use crate::gpu::kernel::Kernel;

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, SyncOnDrop,
};

use crate::gpu::{Entry, Gpu};
use crate::staging::Staged;

use crate::error::{Error, Result};
use crate::launch::LaunchArgs;
use crate::problem::{DType, Shape};
use crate::tma;

/// The address of every field of a `LaunchArgs`, in parameter order: the driver's parameter list.
macro_rules! launch_arg_addresses {
    ($args:ident; $($(#[$doc:meta])* $field:ident: $host:ty $(as $device:ty)?,)*) => {
        [$(&$args.$field as *const $host as *mut std::ffi::c_void),*]
    };
}

/// A kernel parameter list as the host fills it in: a struct whose fields are the entry points'
/// parameters in order (`LaunchArgs` for the forward's, `BackwardArgs` for the backward's), each
/// declared once for both sides by a `with_*_params!` list.
pub(crate) trait ParamList {
    /// Calls `f` with the address of every field, in parameter order: the driver's list.
    fn with_addresses<R>(&self, f: impl FnOnce(&mut [*mut std::ffi::c_void]) -> R) -> R;
}

impl ParamList for LaunchArgs {
    fn with_addresses<R>(&self, f: impl FnOnce(&mut [*mut std::ffi::c_void]) -> R) -> R {
        let args = self;
        f(&mut with_launch_params!(launch_arg_addresses!(args;)))
    }
}

impl ParamList for crate::merge_launch::MergeArgs {
    fn with_addresses<R>(&self, f: impl FnOnce(&mut [*mut std::ffi::c_void]) -> R) -> R {
        let args = self;
        f(&mut with_merge_params!(launch_arg_addresses!(args;)))
    }
}

impl ParamList for crate::backward_launch::BackwardArgs {
    fn with_addresses<R>(&self, f: impl FnOnce(&mut [*mut std::ffi::c_void]) -> R) -> R {
        let args = self;
        f(&mut with_backward_params!(launch_arg_addresses!(args;)))
    }
}

/// One buffer a launch hands its kernel, as [`Launch::enqueue`] checks it: where it is, how many
/// bytes it holds and how many the kernel may touch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Bound {
    /// The buffer's name in errors (`"q"`, `"tensor maps"`, ...).
    pub what: &'static str,
    /// Its device address.
    pub address: u64,
    /// Bytes it holds.
    pub held: usize,
    /// Bytes the kernel may touch, from the problem (`None`: a count past `usize`).
    pub needed: Option<usize>,
    /// Bytes per element, for the error's counts.
    pub element: usize,
    /// Whether it must hold exactly `needed` (a tensor sized for the problem: any other size
    /// means it was made for another one) or may hold more (scratch grown by powers of two).
    pub exact: bool,
    /// The alignment the kernel reads it with, in bytes.
    pub align: u64,
}

impl Bound {
    /// Refuses a buffer shorter than the kernel's reach (or of another size, when `exact`), null
    /// or misaligned, naming it and the problem.
    pub(crate) fn check(&self, problem: &str) -> Result<()> {
        let Some(needed) = self.needed else {
            return Err(Error::InvalidProblem(format!(
                "{problem} has more elements than memory can address"
            )));
        };
        let fits = match self.exact {
            true => self.held == needed,
            false => self.held >= needed,
        };
        if !fits {
            return Err(Error::Length {
                what: self.what,
                expected: needed / self.element,
                actual: self.held / self.element,
                shape: problem.to_string(),
            });
        }
        check_alignment(self.what, self.address, self.align)
    }
}

impl<'a> Launch<'a, LaunchArgs> {
    /// Binds the log-sum-exp the kernel writes (`rows` floats), when the call asks for it.
    pub(crate) fn lse(&mut self, lse: Option<&'a mut CudaSlice<f32>>, rows: Option<usize>) {
        if let Some(lse) = lse {
            self.writes("lse", lse, rows, |a, p| a.lse = p);
        }
    }

    /// Binds the attention sinks the kernel reads (one per query head), when the call has them.
    pub(crate) fn sinks(&mut self, sinks: Option<&'a CudaSlice<f32>>, heads: usize) {
        if let Some(sinks) = sinks {
            self.reads("sinks", sinks, Some(heads), |a, p| a.sinks = p);
        }
    }
}

/// A launch as a family's front end describes it: the entry point, its grid, its parameter list's
/// scalars, and every buffer it may touch, bound to its parameter with what the problem needs of
/// it. [`Launch::enqueue`] is the library's one launch: it checks every buffer, then enqueues.
/// The borrows of the buffers live as long as the `Launch`, so none can be freed or replaced
/// before the launch is enqueued.
pub(crate) struct Launch<'a, A: ParamList = LaunchArgs> {
    function: &'a CudaFunction,
    /// The entry point's launch facts, for a variant's kernel (`None` for the common kernels:
    /// V's transpose, the backward's), and which launch it is made for.
    kernel: Option<(&'a Kernel, Entry)>,
    config: LaunchConfig,
    stream: &'a CudaStream,
    dependent: bool,
    /// The problem, as errors name it.
    problem: String,
    /// The parameter list: the scalars as the front end set them, the buffers' addresses as
    /// bound.
    args: A,
    bound: Vec<Bound>,
    guards: Vec<SyncOnDrop<'a>>,
}

impl<'a, A: ParamList> Launch<'a, A> {
    /// A launch of a variant's `kernel`, made for the `entry` launch, on `stream` with `config`;
    /// `args` holds the scalars (its buffer addresses are what [`Launch::reads`] and friends
    /// bind).
    pub(crate) fn kernel(
        gpu: &Gpu,
        kernel: &'a Kernel,
        entry: Entry,
        stream: &'a CudaStream,
        config: LaunchConfig,
        problem: &dyn std::fmt::Display,
        args: A,
    ) -> Self {
        Launch {
            function: &kernel.function,
            kernel: Some((kernel, entry)),
            config,
            stream,
            dependent: gpu.dependent_launches,
            problem: problem.to_string(),
            args,
            bound: Vec::new(),
            guards: Vec::new(),
        }
    }

    /// A launch of one of the common kernels (loaded by name: [`Gpu::cached_function`]), whose
    /// grid and parameter contract the caller states.
    pub(crate) fn function(
        gpu: &Gpu,
        function: &'a CudaFunction,
        stream: &'a CudaStream,
        config: LaunchConfig,
        problem: &dyn std::fmt::Display,
        args: A,
    ) -> Self {
        Launch {
            function,
            kernel: None,
            config,
            stream,
            dependent: gpu.dependent_launches,
            problem: problem.to_string(),
            args,
            bound: Vec::new(),
            guards: Vec::new(),
        }
    }

    /// Binds `buffer`, which the kernel reads, to the parameter `set` writes: it must hold
    /// exactly `needed` elements (`None`: a count past `usize`).
    pub(crate) fn reads<T>(
        &mut self,
        what: &'static str,
        buffer: &'a CudaSlice<T>,
        needed: Option<usize>,
        set: fn(&mut A, u64),
    ) {
        let (address, guard) = buffer.device_ptr(self.stream);
        self.bind(what, address, buffer.len(), needed, std::mem::size_of::<T>(), set);
        self.guards.push(guard);
    }

    /// [`Launch::reads`] for a buffer the kernel writes.
    pub(crate) fn writes<T>(
        &mut self,
        what: &'static str,
        buffer: &'a mut CudaSlice<T>,
        needed: Option<usize>,
        set: fn(&mut A, u64),
    ) {
        let len = buffer.len();
        let (address, guard) = buffer.device_ptr_mut(self.stream);
        self.bind(what, address, len, needed, std::mem::size_of::<T>(), set);
        self.guards.push(guard);
    }

    /// Binds caller-described memory at `address` (a [`TensorView`](crate::api::TensorView) of the
    /// raw paths, whose validity is the caller's `unsafe` contract) of `held` bytes, of which the
    /// kernel may touch `needed`.
    pub(crate) fn memory(
        &mut self,
        what: &'static str,
        address: u64,
        held: usize,
        needed: usize,
        set: fn(&mut A, u64),
    ) {
        self.bound.push(Bound {
            what,
            address,
            held,
            needed: Some(needed),
            element: 1,
            exact: true,
            align: TENSOR_ALIGN,
        });
        set(&mut self.args, address);
    }

    /// Binds library-owned scratch at `address` (tensor maps, an item table, a split's workspace
    /// or counters), which holds `held` bytes and which the kernel may touch `needed` bytes of.
    pub(crate) fn scratch(
        &mut self,
        what: &'static str,
        address: u64,
        held: usize,
        needed: usize,
        set: fn(&mut A, u64),
    ) {
        self.bound.push(Bound {
            what,
            address,
            held,
            needed: Some(needed),
            element: 1,
            exact: false,
            align: TENSOR_ALIGN,
        });
        set(&mut self.args, address);
    }

    /// Binds bytes staged for this launch (tensor maps, an item table: `staging`), of which the
    /// kernel reads `needed`.
    pub(crate) fn staged(
        &mut self,
        what: &'static str,
        staged: &Staged,
        needed: usize,
        set: fn(&mut A, u64),
    ) {
        self.scratch(what, staged.address(self.stream), staged.len(), needed, set);
    }

    fn bind(
        &mut self,
        what: &'static str,
        address: u64,
        len: usize,
        needed: Option<usize>,
        element: usize,
        set: fn(&mut A, u64),
    ) {
        self.bound.push(Bound {
            what,
            address,
            held: len.saturating_mul(element),
            needed: needed.and_then(|n| n.checked_mul(element)),
            element,
            exact: true,
            align: if element >= 2 { TENSOR_ALIGN } else { 1 },
        });
        set(&mut self.args, address);
    }

    /// The parameter list, for a front end to offset an address it bound into its buffer (the
    /// varlen output's first row after its guard elements).
    pub(crate) fn args_mut(&mut self) -> &mut A {
        &mut self.args
    }

    /// What [`Launch::enqueue`] checks before it launches: the entry point is the one this launch
    /// is made for (a varlen or paged entry point reads buffers a dense launch does not pass), a
    /// counted kernel has its barrier log and only it has one, and every bound buffer holds what
    /// the kernel may touch, aligned as it reads it.
    pub(crate) fn check(&self) -> Result<()> {
        if let Some((kernel, entry)) = self.kernel {
            let has_log = self.bound.iter().any(|b| b.what == "barrier log");
            kernel.check_launch(entry, has_log)?;
        }
        self.bound.iter().try_for_each(|bound| bound.check(&self.problem))
    }

    /// Checks the launch ([`Launch::check`]), then enqueues it. A parameter left unbound is 0,
    /// which every kernel reads as "absent" for the buffers that are optional and which no front
    /// end leaves unbound for the others (each binds Q, K, V and the output).
    pub(crate) fn enqueue(self) -> Result<()> {
        self.check()?;
        // Safety: the one launch. `function` takes the parameter list `A` (a variant's entry point
        // takes `LaunchArgs`, checked against the PTX's declarations by the test
        // `every_kernel_declares_the_launch_parameters`; the backward's and the common kernels'
        // lists are their front ends' contract), made for this launch (checked above). Every
        // buffer the kernel may touch was bound with the bytes its front end computed from the
        // problem (the kernel's reach for that problem and grid), and holds them (checked above),
        // in `stream`'s context (the front ends launch on the stream the buffers are ordered on),
        // alive until the launch is enqueued (the borrows and guards held by `self`). Scratch is
        // the library's own, sized for this problem. `dependent` is on for sm_90a only, whose
        // entry points wait for the kernel before them.
        unsafe {
            launch_with_args(
                self.stream,
                self.function,
                self.config,
                &self.args,
                self.dependent,
            )
        }
    }
}

/// Launches `function` on `stream` with `args` pushed as its parameter list; with `dependent`,
/// as a programmatic dependent launch (`GpuOptions::dependent_launches`). Every launch of the library
/// goes through here.
///
/// # Safety
/// `function` takes the parameter list `A` describes (`kernels-rs/src/launch.rs` or
/// `backward_launch.rs`), and `args` and `config` satisfy its contract: buffers as long as the
/// shape says, live in `stream`'s context, the grid it expects. With `dependent`, `function` is
/// an sm_90a entry point (which waits for the kernel before it at its first instruction).
unsafe fn launch_with_args<A: ParamList>(
    stream: &CudaStream,
    function: &CudaFunction,
    config: LaunchConfig,
    args: &A,
    dependent: bool,
) -> Result<()> {
    use cudarc::driver::sys;
    let mut attribute = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value: sys::CUlaunchAttributeValue {
            programmaticStreamSerializationAllowed: 1,
        },
    };
    let (grid, block) = (config.grid_dim, config.block_dim);
    let launch = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: config.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attribute,
        numAttrs: dependent as u32,
    };
    stream.context().bind_to_thread()?;
    args.with_addresses(|params| {
        // Safety: the caller's contract; `params` points at `args`' fields, which outlive the
        // call (the driver copies the parameters before it returns).
        unsafe {
            sys::cuLaunchKernelEx(
                &launch,
                function.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
    })?;
    Ok(())
}

/// The grid's y dimension limit: query heads beyond it go to z.
pub(crate) const MAX_GRID_Y: u32 = 65_535;

/// Words (`u32`) a barrier-counting twin records per block in the barrier log of its launch,
/// indexed by the block's linear index (`launch::record`): the block barriers counted, the KV
/// tiles processed, the SM clock cycles from the start of the KV loop to the end of the
/// epilogue, the SM the block ran on (`record_barriers` in `kernels-rs/src/attention/mod.rs`
/// writes them), then `flash_ws`'s timeline of the block's first work items (`record_event`).
pub const RECORD_WORDS: usize = crate::launch::record::WORDS as usize;

/// The grid for `kernel` on `shape`: `(query blocks, batch * heads)`, or for a persistent
/// variant as many blocks as the GPU holds at once (fewer if there are fewer work items), each
/// walking its share of the `(query block, head)` items.
pub fn launch_config(kernel: &Kernel, shape: Shape) -> LaunchConfig {
    let v = kernel.variant;
    // Heads on y, spilling into z past the 65,535 that y allows; blocks past B*H return at once.
    let heads = (shape.batch * shape.heads) as u32;
    let row_blocks = (shape.seq_q as u32).div_ceil(v.block_m);
    let y = heads.min(MAX_GRID_Y);
    let grid_dim = if v.persistent {
        (
            row_blocks.saturating_mul(heads).min(kernel.resident_grid).max(1),
            1,
            1,
        )
    } else {
        (row_blocks, y, heads.div_ceil(y))
    };
    LaunchConfig {
        grid_dim,
        block_dim: (v.threads(), 1, 1),
        shared_mem_bytes: kernel.smem_bytes,
    }
}

pub(crate) fn blocks(config: &LaunchConfig) -> usize {
    config.grid_dim.0 as usize * config.grid_dim.1 as usize * config.grid_dim.2 as usize
}

/// The lengths of one launch's buffers, as allocated, in elements of their own type: u16 for Q,
/// K, V and the output, f32 for the log-sum-exp, u32 for the barrier log, bytes for the tensor
/// maps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BufferLens {
    pub(crate) q: usize,
    pub(crate) k: usize,
    pub(crate) v: usize,
    pub(crate) out: usize,
    pub(crate) lse: Option<usize>,
    pub(crate) barrier_log: Option<usize>,
    pub(crate) tensor_maps: Option<usize>,
}

/// Every buffer a launch on `shape` in `dtype` over `blocks` blocks touches holds exactly what the
/// kernels read or write, so that the unsafe launch cannot go past one. Checked right before every
/// launch, not only when the `Tensors` were made, so that no later change (a new log-sum-exp
/// buffer, a barrier log, the tensor maps) goes unchecked. Compared in bytes, so an element type
/// of another size (a future dtype) cannot pass by its element count.
pub(crate) fn check_buffers(
    shape: Shape,
    dtype: DType,
    lens: BufferLens,
    blocks: usize,
    uses_maps: bool,
) -> Result<()> {
    let element = dtype.bytes();
    check_buffer("q", lens.q, 2, shape.checked_q_len(), element, shape)?;
    check_buffer("k", lens.k, 2, shape.checked_kv_len(), element, shape)?;
    check_buffer("v", lens.v, 2, shape.checked_v_len(), element, shape)?;
    check_buffer("out", lens.out, 2, shape.checked_out_len(), element, shape)?;
    if let Some(lse) = lens.lse {
        check_buffer("lse", lse, 4, shape.lse_len(), 4, shape)?;
    }
    if let Some(log) = lens.barrier_log {
        check_buffer("barrier log", log, 4, RECORD_WORDS.checked_mul(blocks), 4, shape)?;
    }
    match (uses_maps, lens.tensor_maps) {
        (true, Some(maps)) => {
            check_buffer("tensor maps", maps, 1, Some(tma::MAPS * tma::MAP_BYTES), 1, shape)
        }
        (true, None) => Err(Error::Length {
            what: "tensor maps",
            expected: tma::MAPS * tma::MAP_BYTES,
            actual: 0,
            shape: shape.to_string(),
        }),
        (false, _) => Ok(()),
    }
}

/// Checks that a buffer of `actual` elements of `actual_size` bytes holds exactly the `expected`
/// elements of `expected_size` bytes (`None`: a count past `usize`) the shape implies. The error
/// counts in the expected element type.
pub(crate) fn check_buffer(
    what: &'static str,
    actual: usize,
    actual_size: usize,
    expected: Option<usize>,
    expected_size: usize,
    shape: Shape,
) -> Result<()> {
    let expected = expected.ok_or_else(|| too_large(shape))?;
    let expected_bytes = expected
        .checked_mul(expected_size)
        .ok_or_else(|| too_large(shape))?;
    if actual.checked_mul(actual_size) == Some(expected_bytes) {
        Ok(())
    } else {
        Err(Error::Length {
            what,
            expected,
            actual: actual.saturating_mul(actual_size) / expected_size,
            shape: shape.to_string(),
        })
    }
}

/// Refuses the first of `checks` (a buffer's name, its length and the length the problem needs,
/// in elements) whose lengths differ, naming it and the problem (`shape`).
pub(crate) fn check_lens(
    checks: &[(&'static str, usize, usize)],
    shape: &dyn std::fmt::Display,
) -> Result<()> {
    match checks.iter().find(|(_, actual, expected)| actual != expected) {
        Some(&(what, actual, expected)) => Err(Error::Length {
            what,
            expected,
            actual,
            shape: shape.to_string(),
        }),
        None => Ok(()),
    }
}

/// `check_buffer` for Q, K, V handed in as host slices of u16 bits.
pub(crate) fn check_bytes(
    what: &'static str,
    actual_bytes: usize,
    expected: usize,
    element: usize,
    shape: Shape,
) -> Result<()> {
    check_buffer(what, actual_bytes, 1, Some(expected), element, shape)
}

/// The error of a shape whose element count does not fit in memory's address space.
pub(crate) fn too_large(shape: Shape) -> Error {
    Error::InvalidProblem(format!("{shape} has more elements than memory can address"))
}

/// Alignment of Q, K, V and the output: the kernels copy 16 bytes at a time (`cp.async`,
/// vector loads) and TMA needs 16-byte-aligned tensors.
pub(crate) const TENSOR_ALIGN: u64 = 16;

pub(crate) fn check_alignment(what: &'static str, ptr: u64, align: u64) -> Result<()> {
    if ptr != 0 && ptr.is_multiple_of(align) {
        Ok(())
    } else {
        Err(Error::Misaligned { what, ptr, align })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded;
    use crate::variants::VARIANTS;

    fn bound(held: usize, needed: Option<usize>, exact: bool, address: u64) -> Bound {
        Bound {
            what: "q",
            address,
            held,
            needed,
            element: 2,
            exact,
            align: TENSOR_ALIGN,
        }
    }

    /// The one launch refuses a tensor of any size but the problem's, scratch shorter than the
    /// kernel's reach, a count past `usize`, and null or misaligned addresses; each error names
    /// the buffer and the problem.
    #[test]
    fn a_launch_checks_every_bound_buffer() {
        let at = 1 << 20;
        assert!(bound(256, Some(256), true, at).check("p").is_ok());
        assert!(bound(512, Some(256), false, at).check("p").is_ok());
        for refused in [
            bound(258, Some(256), true, at),
            bound(254, Some(256), true, at),
            bound(254, Some(256), false, at),
        ] {
            let err = refused.check("(1, 2, 3, 64)").unwrap_err().to_string();
            assert!(
                err.starts_with("q: expected 128 elements for shape (1, 2, 3, 64)"),
                "{err}"
            );
        }
        let err = bound(256, None, true, at).check("(1, 2, 3, 64)").unwrap_err();
        assert!(
            err.to_string().contains("more elements than memory can address"),
            "{err}"
        );
        assert!(matches!(
            bound(256, Some(256), true, 0).check("p"),
            Err(Error::Misaligned { .. })
        ));
        assert!(matches!(
            bound(256, Some(256), true, at + 8).check("p"),
            Err(Error::Misaligned { .. })
        ));
    }

    /// The sizes of the parameters PTX entry `name` declares, in order.
    fn declared_param_bytes(ptx: &str, name: &str) -> Vec<usize> {
        let header = format!(".visible .entry {name}(");
        let start = ptx.find(&header).unwrap_or_else(|| panic!("no entry {name}")) + header.len();
        let list = &ptx[start..start + ptx[start..].find(')').expect("parameter list closes")];
        list.split(',')
            .map(|param| {
                let ty = param
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_else(|| panic!("{name}: {param}"));
                match ty {
                    ".u64" | ".b64" | ".s64" => 8,
                    ".u32" | ".b32" | ".s32" | ".f32" => 4,
                    other => panic!("{name}: unexpected parameter type {other}"),
                }
            })
            .collect()
    }

    /// Host and device build the argument list from the same declaration, but the device's is
    /// what the PTX says: every entry point of every variant (and its counted twin) must declare
    /// exactly the parameters `launch` pushes.
    #[test]
    fn every_kernel_declares_the_launch_parameters() {
        let mut checked = 0;
        for (_, arch, ptx) in embedded::modules() {
            for v in crate::variants::built(VARIANTS).filter(|v| v.min_arch <= arch) {
                for &d in v.head_dims {
                    for dtype in crate::variants::DTYPES {
                        let twins = [false, true].into_iter().filter(|&c| !c || v.counted_built);
                        let paged = twins.clone().map(|counted| v.paged_symbol(d, dtype, counted));
                        let varlen = twins.clone().map(|counted| v.varlen_symbol(d, dtype, counted));
                        let plain = twins.map(|counted| match counted {
                            true => v.counted_symbol(d, dtype),
                            false => v.symbol(d, dtype),
                        });
                        for symbol in plain.chain(paged.flatten()).chain(varlen.flatten()) {
                            assert_eq!(
                                declared_param_bytes(ptx, &symbol),
                                LaunchArgs::PARAM_BYTES,
                                "{symbol} on sm_{arch}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 40, "only {checked} entry points checked");
    }

    #[test]
    fn launch_args_pass_pointers_and_scalars_at_their_own_sizes() {
        // Pointers as u64 (q, k, v, out; lse, the sinks and the barrier log; the tensor maps;
        // the decode workspace and its slice counters; the block table and lengths; the varlen
        // prefix sums; the e4m3 descales; the item walk's table) and the item walk's three
        // divisors as u64, the scalars (the window's two sides and the softcap's two numbers
        // among them) as 32 bits: a field's type changing silently would change every kernel's
        // signature.
        let bytes = LaunchArgs::PARAM_BYTES;
        assert_eq!(bytes.len(), 37);
        assert_eq!(bytes.iter().filter(|&&b| b == 8).count(), 19);
        assert_eq!(bytes.iter().filter(|&&b| b == 4).count(), 18);
    }

    fn lens_for(shape: Shape) -> BufferLens {
        BufferLens {
            q: shape.q_len(),
            k: shape.kv_len(),
            v: shape.kv_len(),
            out: shape.q_len(),
            lse: Some(shape.batch * shape.heads * shape.seq_q),
            barrier_log: Some(RECORD_WORDS * 6),
            tensor_maps: Some(tma::MAPS * tma::MAP_BYTES),
        }
    }

    /// What `check_buffers` says about `lens`: `None` when it accepts them, else the buffer
    /// its length error names (any other error fails the test).
    fn refused(shape: Shape, lens: BufferLens, uses_maps: bool) -> Option<&'static str> {
        match check_buffers(shape, DType::F16, lens, 6, uses_maps) {
            Ok(()) => None,
            Err(Error::Length { what, .. }) => Some(what),
            Err(other) => panic!("not a length error: {other}"),
        }
    }

    #[test]
    fn buffers_are_checked_against_the_shape_before_a_launch() {
        let shape = Shape {
            seq_k: 80,
            ..Shape::new(2, 4, 100, 64).with_heads_kv(2)
        };
        let exact = lens_for(shape);
        assert_eq!(refused(shape, exact, true), None);
        let bare = BufferLens {
            lse: None,
            barrier_log: None,
            tensor_maps: None,
            ..exact
        };
        assert_eq!(refused(shape, bare, false), None);
        // Every buffer one element short, and one element long (a buffer made for another shape
        // is refused either way), names itself.
        for delta in [-1isize, 1] {
            let off = |n: usize| n.checked_add_signed(delta).unwrap();
            let wrong: [(&str, BufferLens); 7] = [
                (
                    "q",
                    BufferLens {
                        q: off(exact.q),
                        ..exact
                    },
                ),
                (
                    "k",
                    BufferLens {
                        k: off(exact.k),
                        ..exact
                    },
                ),
                (
                    "v",
                    BufferLens {
                        v: off(exact.v),
                        ..exact
                    },
                ),
                (
                    "out",
                    BufferLens {
                        out: off(exact.out),
                        ..exact
                    },
                ),
                (
                    "lse",
                    BufferLens {
                        lse: exact.lse.map(off),
                        ..exact
                    },
                ),
                (
                    "barrier log",
                    BufferLens {
                        barrier_log: exact.barrier_log.map(off),
                        ..exact
                    },
                ),
                (
                    "tensor maps",
                    BufferLens {
                        tensor_maps: exact.tensor_maps.map(off),
                        ..exact
                    },
                ),
            ];
            for (what, lens) in wrong {
                assert_eq!(refused(shape, lens, true), Some(what), "{what} off by {delta}");
            }
        }
        // The warp-specialised kernels read tensor maps: a launch without them is refused.
        assert_eq!(
            refused(
                shape,
                BufferLens {
                    tensor_maps: None,
                    ..exact
                },
                true
            ),
            Some("tensor maps")
        );
        // Buffers of the grouped-query shape's Q size given for K (kv heads ignored) are refused.
        assert_eq!(
            refused(
                shape,
                BufferLens {
                    k: shape.q_len(),
                    ..exact
                },
                false
            ),
            Some("k")
        );
    }

    #[test]
    fn counts_past_usize_are_errors_not_wrapped_lengths() {
        // A shape whose element count wraps to a small number must not accept a small buffer.
        let huge = Shape {
            batch: usize::MAX / 2 + 1,
            ..Shape::new(1, 2, 1, 64)
        };
        assert_eq!(huge.checked_q_len(), None);
        let small = BufferLens {
            q: huge.q_len(),
            k: huge.kv_len(),
            v: huge.kv_len(),
            out: huge.q_len(),
            lse: None,
            barrier_log: None,
            tensor_maps: None,
        };
        assert!(matches!(
            check_buffers(huge, DType::F16, small, 1, false),
            Err(Error::InvalidProblem(_))
        ));
        assert!(huge.validate().is_err());
    }

    #[test]
    fn caller_pointers_must_be_aligned_and_not_null() {
        assert!(check_alignment("q", 0x7f00_0000_0100, TENSOR_ALIGN).is_ok());
        for ptr in [0, 0x7f00_0000_0102, 0x7f00_0000_0108] {
            match check_alignment("q", ptr, TENSOR_ALIGN) {
                Err(Error::Misaligned {
                    what: "q", align: 16, ..
                }) => {}
                other => panic!("{ptr:#x}: {other:?}"),
            }
        }
        assert!(check_alignment("lse", 0x7f00_0000_0104, 4).is_ok());
    }
}
