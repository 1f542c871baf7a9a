//! Dense calls on `Tensors`: the dispatch's pick, and the launch of a dense entry point.

use crate::dispatch::{default_variant, dispatch_candidates, no_listed_kernel, Choice};
use crate::gpu::kernel::{Entry, Kernel};
use crate::gpu::launch::{blocks, launch_config, too_large, Launch, RECORD_WORDS};
use crate::gpu::schedule::{causal_item_table, item_walk, walks_item_table, KeySlices};
use crate::gpu::tensors::Tensors;
use crate::gpu::Gpu;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use crate::decode::DecodeOptions;
use crate::error::{Error, Result};
use crate::launch::LaunchArgs;
use crate::layout::Layout;
use crate::problem::{DType, Params, Shape};
use crate::staging::{self};
use crate::tma;
use crate::variants::{Family, VariantSpec};

impl Gpu {
    /// The library's choice for a problem: the first of [`dispatch_candidates`] for this GPU
    /// (`flash_decode` for decode-like problems, else the tuned table's entry for this GPU, dtype,
    /// head dim, sequence-length bucket and mask, written by `tune --save`, else the built-in
    /// `DISPATCH` heuristic).
    pub fn choose(&self, shape: Shape, dtype: DType, causal: bool) -> (&'static VariantSpec, Choice) {
        let candidates = self.dispatch_candidates(shape, dtype, causal);
        // The list always ends with the heuristic's entry; the fallback only keeps this total.
        candidates.first().copied().unwrap_or_else(|| {
            (
                default_variant(shape, causal, self.sm_count, self.arch),
                Choice::Heuristic,
            )
        })
    }

    lab_pub! {
        /// [`dispatch_candidates`] on this GPU.
        fn dispatch_candidates(
            &self,
            shape: Shape,
            dtype: DType,
            causal: bool,
        ) -> Vec<(&'static VariantSpec, Choice)> {
            dispatch_candidates(
                self.tuned_table(),
                &self.name,
                self.arch,
                self.sm_count,
                shape,
                dtype,
                causal,
            )
        }
    }

    lab_pub! {
        /// Attention forward on `tensors` with the named variant, or the library's choice when
        /// `kernel` is `None`. Returns the variant used. Asynchronous: `download` waits.
        fn forward(
            &self,
            tensors: &mut Tensors,
            params: Params,
            kernel: Option<&str>,
        ) -> Result<&'static VariantSpec> {
            let variant = match kernel {
                Some(name) => VariantSpec::by_name(name).ok_or_else(|| Error::UnknownKernel(name.to_string()))?,
                None => {
                    let (shape, causal) = (tensors.shape, params.causal);
                    let candidates = self.dispatch_candidates(shape, tensors.dtype, causal);
                    // The first candidate that reads the tensors as they are laid out: inputs in
                    // other strides than the output's layout need a kernel that reads them through
                    // the copy engine (the built-in table's, on sm_90).
                    let variant = candidates
                        .iter()
                        .map(|&(variant, _)| variant)
                        .find(|variant| takes_strides(variant, tensors))
                        .unwrap_or_else(|| default_variant(shape, causal, self.sm_count, self.arch));
                    let d = tensors.shape.kernel_head_dim();
                    if !variant.head_dims.contains(&d) {
                        return Err(Error::InvalidProblem(no_listed_kernel(d)));
                    }
                    variant
                }
            };
            let kernel = self.kernel(variant, tensors.shape.kernel_head_dim(), tensors.dtype, false)?;
            self.launch(&kernel, tensors, params, None)?;
            Ok(variant)
        }
    }

    lab_pub! {
        /// Launches `kernel` on the tensors' stream (asynchronously). `barrier_log`, for counted
        /// kernels, holds [`Gpu::barrier_log_len`] words and gets [`RECORD_WORDS`] per block. Every
        /// buffer the kernel gets is checked against the shape, dtype and grid right before the launch.
        fn launch(
            &self,
            kernel: &Kernel,
            tensors: &mut Tensors,
            params: Params,
            barrier_log: Option<&mut CudaSlice<u32>>,
        ) -> Result<()> {
            self.launch_with(kernel, tensors, params, barrier_log, DecodeOptions::default())
        }
    }

    lab_pub! {
        /// [`Gpu::launch`] with what `options` fixes of a `flash_decode` launch (its split count,
        /// checked against the problem: [`crate::decode::Plan::forced`]); the default options are
        /// `launch` itself. A forced split count on a kernel of another family is an error. A
        /// counted launch's `barrier_log` is sized by [`Gpu::barrier_log_len`], which knows the
        /// default plan only: with a forced count, size it from [`Gpu::split_plan`]'s grid.
        fn launch_with(
            &self,
            kernel: &Kernel,
            tensors: &mut Tensors,
            params: Params,
            barrier_log: Option<&mut CudaSlice<u32>>,
            options: DecodeOptions,
        ) -> Result<()> {
            let shape = tensors.shape;
            params.validate()?;
            self.check_stream(&tensors.stream)?;
            check_dense_kernel(kernel, tensors)?;
            // The grid, schedule and workspace follow the compiled tiles (a padded head dim's
            // too); the buffers, maps and scale the tensors' own head dim.
            let tiles = shape.at_kernel_head_dim();
            // The warp-specialised family, and flash_decode through the copy engine, read their
            // tiles through tensor maps built here per call.
            let uses_maps = kernel.variant.family == Family::FlashWs || kernel.variant.copy_engine();
            let [q_dims, kv_dims, v_dims] = [shape.q_dims(), shape.kv_dims(), shape.v_dims()];
            if uses_maps {
                self.prepare_maps(kernel.variant, tensors)?;
            }
            // flash_decode plans its own grid (key slices) and may need a workspace and a combine.
            let decode = self.decode_plan(kernel, tiles, options)?;
            let config = match &decode {
                Some(plan) => plan.grid(kernel.variant.threads(), kernel.smem_bytes),
                None => launch_config(kernel, tiles),
            };
            let seq_major = (tensors.layout == Layout::Bshd) as u32;
            // Key slices: flash_decode's plan, or the persistent flash_ws's tail split.
            let slices = match &decode {
                Some(plan) => KeySlices {
                    splits: plan.splits,
                    floats: plan.workspace_floats(tiles),
                    counters: plan.counters(),
                },
                None => KeySlices::tail_split(
                    kernel.variant,
                    tiles,
                    params.causal,
                    &config,
                    self.options.tail_split,
                ),
            };
            let slice_buffers = self.slice_buffers(slices, &tensors.stream)?;
            let has_table = walks_item_table(kernel.variant, params.causal);
            if has_table {
                self.stage_walk_table(kernel, tensors, config.grid_dim.0, params.window.left)?;
            }
            let Tensors {
                q,
                k,
                v,
                out,
                lse,
                sinks,
                maps,
                stream,
                walk_table,
                strides,
                ..
            } = tensors;
            let stream: &CudaStream = stream;
            // Contiguous K and V: no block table (the paged launch is `paged.rs`).
            // The output's columns: v's head dim (padded when below the kernel's).
            let args = LaunchArgs::dense(shape, params, seq_major, slices.splits)
                .padded(shape.head_dim_v, kernel.head_dim)
                .walking(item_walk(kernel.variant, tiles, &config, slices.splits));
            let mut launch = Launch::kernel(self, kernel, Entry::Dense, stream, config, &shape, args);
            // Q, K and V reach as far as their strides do (exactly their length when contiguous).
            let [q_strides, k_strides, v_strides] = strides;
            launch.reads("q", q, q_strides.extent(q_dims), |a, p| a.q = p);
            launch.reads("k", k, k_strides.extent(kv_dims), |a, p| a.k = p);
            launch.reads("v", v, v_strides.extent(v_dims), |a, p| a.v = p);
            launch.writes("out", out, shape.checked_out_len(), |a, p| a.out = p);
            launch.lse(lse.as_deref_mut(), shape.lse_len());
            launch.sinks(sinks.as_deref(), shape.heads);
            if let Some(log) = barrier_log {
                launch.writes(
                    "barrier log",
                    log,
                    RECORD_WORDS.checked_mul(blocks(&config)),
                    |a, p| a.barrier_log = p,
                );
            }
            let unprepared = || Error::InvalidProblem("the tensor maps or item table were not prepared".into());
            if uses_maps {
                let maps = maps.as_ref().ok_or_else(unprepared)?;
                launch.staged("tensor maps", maps, tma::MAPS * tma::MAP_BYTES, |a, p| {
                    a.tensor_maps = p
                });
            }
            if has_table {
                // One u32 per item of the grid's walk, as `causal_item_table` dealt them.
                let (_, table) = walk_table.as_ref().ok_or_else(unprepared)?;
                launch.staged("item table", table, table.len(), |a, p| a.walk_table = p);
            }
            slice_buffers.bind(&mut launch, slices, stream);
            launch.enqueue()
        }
    }

    /// Stages the item table a causal persistent launch of `kernel` on `tensors` over `grid` blocks
    /// walks, under a sliding window of `window_left` keys: dealt once per variant, shape, grid
    /// and window, and copied in the tensors' stream's order.
    fn stage_walk_table(
        &self,
        kernel: &Kernel,
        tensors: &mut Tensors,
        grid: u32,
        window_left: Option<u32>,
    ) -> Result<()> {
        let shape = tensors.shape.at_kernel_head_dim();
        let table_key = (kernel.variant.name, shape, grid, window_left);
        let (bytes, mut staged) = match tensors.walk_table.take() {
            Some((key, staged)) if key == table_key => (staged.bytes().to_vec(), Some(staged)),
            cached => {
                let table = causal_item_table(kernel.variant, shape, grid, window_left)
                    .ok_or_else(|| too_large(shape))?;
                (staging::words_bytes(&table), cached.map(|(_, staged)| staged))
            }
        };
        self.stage(&tensors.stream, bytes, &mut staged)?;
        tensors.walk_table = staged.map(|staged| (table_key, staged));
        Ok(())
    }

    /// Encodes the tensor maps of Q, K, V and the output for `variant`'s tiles and copies them to the GPU,
    /// unless the copy from the last launch still holds the same bytes (same buffers, shape,
    /// layout, tiles). The copy is ordered on the tensors' stream before the launch that reads it.
    fn prepare_maps(&self, variant: &VariantSpec, tensors: &mut Tensors) -> Result<()> {
        let (shape, layout, dtype) = (tensors.shape, tensors.layout, tensors.dtype);
        // Q, K and V with their own strides (the same coordinates whatever they are), the output
        // contiguous in its layout.
        let [q_strides, k_strides, v_strides] = tensors.strides;
        let q_map = tma::MapGeometry::strided(shape.q_dims(), q_strides, variant.block_m);
        let k_map = tma::MapGeometry::strided(shape.kv_dims(), k_strides, variant.block_n);
        let v_map = tma::MapGeometry::strided(shape.v_dims(), v_strides, variant.block_n);
        let out_map = tma::MapGeometry::out(layout, shape);
        let mut bytes = Vec::with_capacity(tma::MAPS * tma::MAP_BYTES);
        for (geometry, buffer) in [
            (q_map, &tensors.q),
            (k_map, &tensors.k),
            (v_map, &tensors.v),
            (out_map, &tensors.out),
        ] {
            let (address, _sync) = buffer.device_ptr(&tensors.stream);
            bytes.extend_from_slice(&geometry.encode(dtype, address, self.options.l2_promotion)?);
        }
        self.stage(&tensors.stream, bytes, &mut tensors.maps)
    }

    lab_pub! {
        /// The length in `u32` of the barrier log that a launch of the counted `kernel` (see
        /// [`Gpu::kernel`]) on a problem of `shape` takes: [`RECORD_WORDS`] per block of its grid,
        /// which for `flash_decode` depends on how this GPU splits the keys. For a paged launch pass
        /// the paged tensors' shape, for a varlen one
        /// [`VarlenTensors::grid_shape`](crate::VarlenTensors::grid_shape).
        fn barrier_log_len(&self, kernel: &Kernel, shape: Shape) -> Result<usize> {
            let shape = shape.at_kernel_head_dim();
            let config = match self.decode_plan(kernel, shape, DecodeOptions::default())? {
                Some(plan) => plan.grid(kernel.variant.threads(), kernel.smem_bytes),
                None => launch_config(kernel, shape),
            };
            RECORD_WORDS
                .checked_mul(blocks(&config))
                .ok_or_else(|| too_large(shape))
        }
    }
}

/// Which of Q (first) and K, V (second) `variant`'s kernels read in place, through the output's
/// layout (`seq_major`), rather than through a tensor map: those must be contiguous in that
/// layout; what a map reads may have any strides the copy engine takes.
pub(crate) fn reads_in_place(variant: &VariantSpec) -> (bool, bool) {
    match (variant.family, variant.copy_engine()) {
        (Family::FlashWs | Family::FlashWsFp8, _) => (false, false),
        // flash_decode through the copy engine: K and V by maps, Q by rows.
        (_, true) => (true, false),
        _ => (true, true),
    }
}

/// Whether `variant`'s kernels read `tensors` as they are laid out ([`reads_in_place`]).
fn takes_strides(variant: &VariantSpec, tensors: &Tensors) -> bool {
    let (q_in_place, kv_in_place) = reads_in_place(variant);
    let shape = tensors.shape;
    let contiguous = |strides: crate::Strides, dims| strides.fits(tensors.layout, dims);
    let [q, k, v] = tensors.strides;
    (!q_in_place || contiguous(q, shape.q_dims()))
        && (!kv_in_place || (contiguous(k, shape.kv_dims()) && contiguous(v, shape.v_dims())))
}

/// Refuses `kernel` for `tensors` when it was compiled for another dtype or head dim, takes e4m3
/// inputs, or would read an input in place (`reads_in_place`) that is not contiguous in the
/// output's layout.
fn check_dense_kernel(kernel: &Kernel, tensors: &Tensors) -> Result<()> {
    let shape = tensors.shape;
    if tensors.dtype != kernel.dtype {
        return Err(Error::InvalidProblem(format!(
            "kernel {} takes {}, the tensors hold {}",
            kernel.symbol, kernel.dtype, tensors.dtype
        )));
    }
    check_head_dim(kernel, shape)?;
    if kernel.variant.family.fp8() {
        return Err(Error::InvalidProblem(format!(
            "kernel {} takes e4m3 inputs: call it through Gpu::fp8_forward",
            kernel.symbol
        )));
    }
    let (q_in_place, kv_in_place) = reads_in_place(kernel.variant);
    let inputs = [
        ("q", q_in_place, shape.q_dims()),
        ("k", kv_in_place, shape.kv_dims()),
        ("v", kv_in_place, shape.v_dims()),
    ];
    for ((what, in_place, dims), strides) in inputs.into_iter().zip(tensors.strides) {
        if in_place && !strides.fits(tensors.layout, dims) {
            return Err(Error::Incompatible(format!(
                "{what} has strides {:?} and the output is {}: kernel {} reads {what} in place, in the \
                 output's layout; only the kernels that read through the copy engine (sm_90) take \
                 other strides",
                strides.0, tensors.layout, kernel.symbol
            )));
        }
    }
    Ok(())
}

/// Refuses `kernel` for `shape` unless compiled for its head dim, or, for a padded head dim
/// ([`crate::problem::kernel_head_dim`]), a `flash_ws` kernel compiled for the head dim that pads
/// it; V's head dim, where it is not Q's, also needs `flash_ws`.
pub(crate) fn check_head_dim(kernel: &Kernel, shape: Shape) -> Result<()> {
    let d = shape.head_dim;
    if shape.split_head_dims() && kernel.variant.family != Family::FlashWs {
        return Err(Error::InvalidProblem(format!(
            "v's head dim {} differs from q's {d}: that runs on flash_ws (sm_90); kernel {} cannot run it",
            shape.head_dim_v, kernel.symbol
        )));
    }
    if kernel.head_dim == d {
        return Ok(());
    }
    if kernel.head_dim != shape.kernel_head_dim() {
        return Err(Error::InvalidProblem(format!(
            "kernel {} is compiled for head dim {}, the problem has {d}",
            kernel.symbol, kernel.head_dim
        )));
    }
    if kernel.variant.family != Family::FlashWs {
        return Err(Error::InvalidProblem(format!(
            "head dim {d} runs padded on flash_ws's head-dim-{} tiles (sm_90); kernel {} cannot pad it",
            kernel.head_dim, kernel.symbol
        )));
    }
    Ok(())
}

impl LaunchArgs {
    /// These scalars for tensors of head dim `head_dim` on a kernel compiled for
    /// `kernel_head_dim`: the tensors' head dim when smaller (padded: `Problem::columns` in the
    /// kernels), else 0.
    pub(crate) fn padded(self, head_dim: usize, kernel_head_dim: usize) -> LaunchArgs {
        LaunchArgs {
            head_dim: if head_dim < kernel_head_dim {
                head_dim as u32
            } else {
                0
            },
            ..self
        }
    }

    /// The scalars of a launch on `shape` with `params`: the output (and what the kernel reads in
    /// place) in `[B, S, H, D]` order when `seq_major` is 1, `splits` key slices; every buffer 0,
    /// for the front end to bind.
    pub(crate) fn dense(shape: Shape, params: Params, seq_major: u32, splits: u32) -> LaunchArgs {
        LaunchArgs {
            seq_q: shape.seq_q as u32,
            seq_k: shape.seq_k as u32,
            scale_log2: params.scale_for(shape.head_dim) * std::f32::consts::LOG2_E,
            causal: params.causal as u32,
            kv_group: shape.kv_group() as u32,
            heads: shape.heads as u32,
            seq_major,
            batch_heads: (shape.batch * shape.heads) as u32,
            kv_splits: splits,
            ..LaunchArgs::default()
        }
        .masked(params, shape.head_dim)
    }

    /// These scalars with `params`' sliding window and softcap, as the kernels take them.
    pub(crate) fn masked(self, params: Params, head_dim: usize) -> LaunchArgs {
        let (window_left, window_right) = params.window.encoded(params.causal);
        let (softcap, softcap_inverse) = params.raw_softcap(head_dim);
        LaunchArgs {
            causal: params.causal as u32,
            window_left,
            window_right,
            softcap,
            softcap_inverse,
            ..self
        }
    }
}
