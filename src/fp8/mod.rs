//! Attention on e4m3 (FP8) Q, K and V, on Hopper: `flash_ws_fp8`.
//!
//! The inputs are OCP E4M3 bytes (`torch.float8_e4m3fn`) with one float32 descale factor per
//! tensor, batch entry and KV head: the true value of a byte `x` of K at `(b, h_kv)` is
//! `e4m3(x) * descale_k[b, h_kv]`, and a query head uses its KV head's entry of Q's descales (as
//! FlashAttention-3 does). The output is fp16 or bf16, the log-sum-exp fp32, both as for the 16-bit
//! kernels.
//!
//! One call is two launches on the GPU's stream: V transposed into a scratch copy
//! (`fp8_transpose_v_d<D>`, `kernels-rs/src/attention/fp8.rs`: 8-bit `wgmma` reads V only with the
//! keys contiguous), then the attention kernel, which reads Q, K and the copy through tensor maps
//! encoded once, when the tensors are made (their buffers never change). A variant that reads V
//! in its own rows (`Spec::v_rows`) transposes V's tiles itself: one launch.

pub mod quantize;

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, LaunchConfig};

use crate::error::{Error, Result};
use crate::gpu::{
    blocks, fill_nan, launch_config, nan, nan_lse, DeviceBuffer, Entry, Gpu, KeySlices, Launch,
};
use crate::launch::{fp8_transpose, maps, LaunchArgs};
use crate::layout::Layout;
use crate::problem::{DType, Params, Shape};
use crate::tma::{self, MapGeometry};
use crate::variants::{VariantSpec, FP8_VARIANTS};

/// Keys of transposed V are padded to a multiple of this (the copy engine's row pitch must be a
/// multiple of 16 bytes).
const KEY_PAD: usize = 16;

/// The device buffers of one e4m3 attention call: Q, K, V (bytes), their descales, the scratch
/// copy of V transposed, the output and optionally the log-sum-exp, with the shape, layout and
/// output type they were made for. Private, checked when made and again before every launch, as
/// [`crate::Tensors`]' are.
pub struct Fp8Tensors {
    q: DeviceBuffer<u8>,
    k: DeviceBuffer<u8>,
    v: DeviceBuffer<u8>,
    /// `[3, B, H_kv]`: Q's, K's and V's descales.
    descale: DeviceBuffer<f32>,
    /// V as `[B, H_kv, D, keys_padded]`, keys in the kernel's order.
    v_transposed: DeviceBuffer<u8>,
    out: DeviceBuffer<u16>,
    lse: Option<DeviceBuffer<f32>>,
    /// The tensor maps of Q, K, transposed V, the output and V's rows (`maps::FP8_MAPS`).
    maps: CudaSlice<u8>,
    shape: Shape,
    layout: Layout,
    out_dtype: DType,
    stream: Arc<CudaStream>,
}

impl Fp8Tensors {
    /// The shape the buffers were made for.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// How Q, K, V and the output are laid out.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The output's element type.
    pub fn out_dtype(&self) -> DType {
        self.out_dtype
    }

    /// Copies the output to the host, after the launches enqueued before: laid out as Q, the
    /// bits of `out_dtype` ([`crate::gpu::decode`] turns them into `f32`).
    pub fn out_to_host(&self) -> Result<Vec<u16>> {
        Ok(self.out.stream().clone_dtoh(&*self.out)?)
    }

    /// Copies the log-sum-exp to the host (`[B, H, S_q]`, natural log), once
    /// [`Gpu::fp8_request_lse`] made one.
    pub fn lse_to_host(&self) -> Result<Option<Vec<f32>>> {
        self.lse
            .as_deref()
            .map(|lse| Ok(lse.stream().clone_dtoh(lse)?))
            .transpose()
    }

    lab_pub! {
        /// The output, laid out as Q (the bits of `out_dtype`).
        fn out(&self) -> &CudaSlice<u16> {
            &self.out
        }
    }

    lab_pub! {
        /// The log-sum-exp buffer (`[B, H, S_q]`, natural log), once [`Gpu::fp8_request_lse`] made one.
        fn lse(&self) -> Option<&CudaSlice<f32>> {
            self.lse.as_deref()
        }
    }
}

/// Keys of the transposed copy: `seq_k` rounded up to [`KEY_PAD`].
fn keys_padded(shape: Shape) -> usize {
    shape.seq_k.div_ceil(KEY_PAD) * KEY_PAD
}

/// Checks what the e4m3 kernels need of a problem beyond [`Shape::validate`]: a head dim some
/// e4m3 variant is compiled for (either 16-bit type is an output type).
fn check_problem(shape: Shape) -> Result<()> {
    shape.validate()?;
    let d = shape.head_dim;
    if !FP8_VARIANTS.iter().any(|v| v.head_dims.contains(&d)) {
        return Err(Error::InvalidProblem(format!(
            "e4m3 attention has kernels for head dims 128 and 256, not {d}"
        )));
    }
    Ok(())
}

/// The grid of V's transpose (`fp8_transpose_v_d<D>`) for `shape`: a block per KV head, key block
/// and column block.
fn transpose_grid(shape: Shape) -> Result<LaunchConfig> {
    let key_blocks = keys_padded(shape).div_ceil(fp8_transpose::KEYS_PER_BLOCK as usize);
    let key_blocks = u32::try_from(key_blocks)
        .ok()
        .filter(|&y| y <= 65_535)
        .ok_or_else(|| Error::InvalidProblem(format!("{shape}: too many keys for e4m3")))?;
    Ok(LaunchConfig {
        grid_dim: (
            (shape.batch * shape.heads_kv) as u32,
            key_blocks,
            shape.head_dim as u32 / fp8_transpose::COLUMNS_PER_BLOCK,
        ),
        block_dim: (fp8_transpose::THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

fn check_len(what: &str, actual: usize, expected: usize, shape: Shape) -> Result<()> {
    if actual == expected {
        Ok(())
    } else {
        Err(Error::InvalidProblem(format!(
            "{what}: {actual} elements, {shape} needs {expected}"
        )))
    }
}

impl Gpu {
    /// Uploads e4m3 Q, K and V (bytes in `layout` order, K and V with `H_kv` heads, exactly as
    /// [`Gpu::tensors_in`] takes 16-bit ones) and their descales (`3 * B * H_kv` floats: Q's
    /// `[B, H_kv]`, then K's, then V's, each positive and finite), and makes the output (NaN) and
    /// the scratch copy of V for an `out_dtype` output.
    #[allow(clippy::too_many_arguments)]
    pub fn fp8_tensors(
        &self,
        shape: Shape,
        layout: Layout,
        out_dtype: DType,
        q: &[u8],
        k: &[u8],
        v: &[u8],
        descale: &[f32],
    ) -> Result<Fp8Tensors> {
        check_problem(shape)?;
        check_len("q", q.len(), shape.q_len(), shape)?;
        check_len("k", k.len(), shape.kv_len(), shape)?;
        check_len("v", v.len(), shape.kv_len(), shape)?;
        let kv_heads = shape.batch * shape.heads_kv;
        check_len("descale", descale.len(), 3 * kv_heads, shape)?;
        if let Some(bad) = descale.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
            return Err(Error::InvalidProblem(format!(
                "descale factors must be positive and finite, got {bad}"
            )));
        }
        let stream = self.stream().clone();
        let transposed_len = kv_heads
            .checked_mul(shape.head_dim * keys_padded(shape))
            .ok_or_else(|| Error::InvalidProblem(format!("{shape} is too large")))?;
        let q = DeviceBuffer::owned(self.upload(q)?);
        let k = DeviceBuffer::owned(self.upload(k)?);
        let v = DeviceBuffer::owned(self.upload(v)?);
        let v_transposed = DeviceBuffer::owned(stream.alloc_zeros::<u8>(transposed_len)?);
        let out = DeviceBuffer::owned(self.upload(&vec![nan(out_dtype); shape.q_len()])?);
        let maps = encode_maps(
            &stream,
            shape,
            layout,
            out_dtype,
            [&q, &k, &v, &v_transposed],
            &out,
            self.options.l2_promotion,
        )?;
        Ok(Fp8Tensors {
            q,
            k,
            v,
            descale: DeviceBuffer::owned(self.upload(descale)?),
            v_transposed,
            out,
            lse: None,
            maps,
            shape,
            layout,
            out_dtype,
            stream,
        })
    }

    /// Makes the log-sum-exp buffer (NaN until a launch writes it).
    pub fn fp8_request_lse(&self, tensors: &mut Fp8Tensors) -> Result<()> {
        tensors.lse = Some(nan_lse(&tensors.stream, tensors.shape)?);
        Ok(())
    }

    lab_pub! {
        /// Refills the output with NaN before a launch whose every write must be checked.
        fn fp8_poison(&self, tensors: &mut Fp8Tensors) -> Result<()> {
            fill_nan(&tensors.stream, &mut tensors.out, tensors.out_dtype)
        }
    }

    /// The e4m3 variant a call without a named kernel runs for head dim `d`: the first of
    /// `FP8_VARIANTS` compiled for it.
    pub fn fp8_choose(&self, d: usize) -> Option<&'static VariantSpec> {
        crate::variants::built(FP8_VARIANTS).find(|v| v.head_dims.contains(&d))
    }

    /// Attention forward on e4m3 `tensors` with the named variant of `FP8_VARIANTS`, or
    /// [`Gpu::fp8_choose`]'s. Transposes V into the scratch copy, then runs the kernel; both are
    /// enqueued on the GPU's stream (asynchronous: `download` waits). Returns the variant used.
    pub fn fp8_forward(
        &self,
        tensors: &mut Fp8Tensors,
        params: Params,
        kernel: Option<&str>,
    ) -> Result<&'static VariantSpec> {
        self.fp8_launch(tensors, params, kernel, None)
    }

    lab_pub! {
        /// [`Gpu::fp8_forward`] through the variant's instrumented (counted) twin, which records into
        /// `barrier_log` ([`Gpu::fp8_barrier_log_len`] words: [`crate::gpu::RECORD_WORDS`] per block,
        /// `launch::record`'s layout). Lab tooling (`host trace --dtype e4m3`).
        fn fp8_forward_counted(
            &self,
            tensors: &mut Fp8Tensors,
            params: Params,
            kernel: Option<&str>,
            barrier_log: &mut CudaSlice<u32>,
        ) -> Result<&'static VariantSpec> {
            self.fp8_launch(tensors, params, kernel, Some(barrier_log))
        }
    }

    lab_pub! {
        /// The words of the barrier log that [`Gpu::fp8_forward_counted`] of `variant` on `tensors`
        /// takes: a record per block of its grid.
        fn fp8_barrier_log_len(&self, variant: &'static VariantSpec, tensors: &Fp8Tensors) -> Result<usize> {
            let shape = tensors.shape;
            let kernel = self.kernel(variant, shape.head_dim, tensors.out_dtype, true)?;
            Ok(crate::gpu::RECORD_WORDS * crate::gpu::blocks(&launch_config(&kernel, shape)))
        }
    }

    fn fp8_launch(
        &self,
        tensors: &mut Fp8Tensors,
        params: Params,
        kernel: Option<&str>,
        barrier_log: Option<&mut CudaSlice<u32>>,
    ) -> Result<&'static VariantSpec> {
        params.validate()?;
        if params.softcap.is_some() {
            // The e4m3 kernels' raw scores are scaled per KV head (the descales): a softcap in their
            // units would be a per-head constant the kernels do not take.
            return Err(Error::InvalidProblem(
                "the e4m3 kernels take no softcap (the 16-bit ones do)".into(),
            ));
        }
        let shape = tensors.shape;
        let variant = match kernel {
            Some(name) => {
                VariantSpec::fp8_by_name(name).ok_or_else(|| Error::UnknownKernel(name.to_string()))?
            }
            None => self.fp8_choose(shape.head_dim).ok_or_else(|| {
                Error::InvalidProblem(format!("no e4m3 kernel for head dim {}", shape.head_dim))
            })?,
        };
        // Checks the architecture, the head dim and the shared memory.
        let counted = barrier_log.is_some();
        let kernel = self.kernel(variant, shape.head_dim, tensors.out_dtype, counted)?;
        let kv_heads = shape.batch * shape.heads_kv;
        let transposed_len = kv_heads * shape.head_dim * keys_padded(shape);
        let transpose = self.cached_function(&format!("fp8_transpose_v_d{}", shape.head_dim))?;
        let transpose_grid = transpose_grid(shape)?;
        let config = launch_config(&kernel, shape);
        // A persistent variant's tail split (its workspace and zeroed counters live until the
        // launch is enqueued).
        let slices = KeySlices::tail_split(variant, shape, params.causal, &config, self.options.tail_split);
        let slice_buffers = self.slice_buffers(slices, &tensors.stream)?;
        let Fp8Tensors {
            q,
            k,
            v,
            descale,
            v_transposed,
            out,
            lse,
            maps,
            stream,
            layout,
            ..
        } = tensors;
        let stream: &CudaStream = stream;
        let common = LaunchArgs::dense(shape, params, (*layout == Layout::Bshd) as u32, 0);
        if !variant.v_rows {
            // V transposed into its copy (`fp8_transpose_v_d<D>`: V `kv_len` bytes in, `B * H_kv *
            // D * keys_padded` out, on the grid it documents for this shape).
            let problem = format!("e4m3 V transpose of {shape}");
            let mut transposing =
                Launch::function(self, &transpose, stream, transpose_grid, &problem, common);
            transposing.reads("v", v, Some(shape.kv_len()), |a, p| a.v = p);
            transposing.writes("transposed v", v_transposed, Some(transposed_len), |a, p| {
                a.out = p
            });
            transposing.enqueue()?;
        }
        let args = LaunchArgs {
            kv_splits: slices.splits,
            ..common
        }
        .walking(crate::gpu::item_walk(variant, shape, &config, slices.splits));
        let mut launch = Launch::kernel(self, &kernel, Entry::Dense, stream, config, &shape, args);
        // The maps were encoded from these buffers for this shape and layout when they were made
        // (private since), for the boxes every e4m3 variant loads (`encode_maps`).
        launch.reads("q", q, Some(shape.q_len()), |a, p| a.q = p);
        launch.reads("k", k, Some(shape.kv_len()), |a, p| a.k = p);
        match variant.v_rows {
            true => launch.reads("v", v, Some(shape.kv_len()), |a, p| a.v = p),
            false => launch.reads("transposed v", v_transposed, Some(transposed_len), |a, p| a.v = p),
        }
        launch.reads("descale", descale, Some(3 * kv_heads), |a, p| a.descale = p);
        launch.writes("out", out, Some(shape.q_len()), |a, p| a.out = p);
        launch.reads(
            "tensor maps",
            maps,
            Some(maps::FP8_MAPS * tma::MAP_BYTES),
            |a, p| a.tensor_maps = p,
        );
        if let Some(lse) = lse.as_deref_mut() {
            launch.writes("lse", lse, shape.lse_len(), |a, p| a.lse = p);
        }
        if let Some(log) = barrier_log {
            launch.writes(
                "barrier log",
                log,
                crate::gpu::RECORD_WORDS.checked_mul(blocks(&config)),
                |a, p| a.barrier_log = p,
            );
        }
        slice_buffers.bind(&mut launch, slices, stream);
        launch.enqueue()?;
        Ok(variant)
    }
}

/// Encodes the maps of Q, K, transposed V (e4m3 bytes), the output and V's own rows, for the tiles
/// of every e4m3 variant (Q and K in boxes of `FP8_Q_BOX_ROWS` and `FP8_K_BOX_ROWS` rows, which
/// every variant's tiles are a whole number of; transposed V in boxes of 128 keys; V's rows as
/// K's), and copies them to the GPU.
fn encode_maps(
    stream: &Arc<CudaStream>,
    shape: Shape,
    layout: Layout,
    out_dtype: DType,
    [q, k, v, v_transposed]: [&DeviceBuffer<u8>; 4],
    out: &DeviceBuffer<u16>,
    promotion: crate::gpu::L2Promotion,
) -> Result<CudaSlice<u8>> {
    debug_assert!(FP8_VARIANTS
        .iter()
        .all(|v| v.block_m % maps::FP8_Q_BOX_ROWS == 0 && v.block_n % maps::FP8_K_BOX_ROWS == 0));
    let heads_kv = shape.heads_kv;
    let q_map = MapGeometry::of_elements(
        1,
        layout,
        shape.batch,
        shape.heads,
        shape.seq_q,
        shape.head_dim,
        maps::FP8_Q_BOX_ROWS,
    );
    let k_map = MapGeometry::of_elements(
        1,
        layout,
        shape.batch,
        heads_kv,
        shape.seq_k,
        shape.head_dim,
        maps::FP8_K_BOX_ROWS,
    );
    let v_map = MapGeometry::transposed(shape.batch, heads_kv, keys_padded(shape), shape.head_dim);
    let mut bytes = Vec::with_capacity(tma::MAPS * tma::MAP_BYTES);
    for (geometry, buffer) in [(q_map, q), (k_map, k), (v_map, v_transposed)] {
        let (address, _sync) = buffer.device_ptr(stream);
        bytes.extend_from_slice(&geometry.encode_bytes(address, promotion)?);
    }
    let (address, _sync) = out.device_ptr(stream);
    bytes.extend_from_slice(&MapGeometry::out(layout, shape).encode(out_dtype, address, promotion)?);
    debug_assert_eq!(bytes.len(), maps::FP8_MAP_V_ROWS * tma::MAP_BYTES);
    let (address, _sync) = v.device_ptr(stream);
    bytes.extend_from_slice(&k_map.encode_bytes(address, promotion)?);
    Ok(stream.clone_htod(&bytes)?)
}
