//! `attend`: attention on the user's own `.npy` tensors: dense, a packed variable-length batch
//! (`--cu-seqlens-q/k`), or against a paged KV cache (`--block-table`, `--seqlens-k`).

use std::path::{Path, PathBuf};

use flashrs::{DType, Gpu, Layout, PagedKv, Params, Shape, VariantSpec, VarlenBatch};
use flashrs_lab::npy::{self, NpyArray, NpyData};

use crate::fp8::Elem;
use crate::inputs;
use crate::library;
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// Queries, [B,H,S_q,D] (or [B,S_q,H,D] with `--layout bshd`; [total_q,H,D] with
    /// `--cu-seqlens-q`), float16 or float32.
    #[arg(long)]
    q: PathBuf,
    /// Keys, [B,H_kv,S_k,D] (or [B,S_k,H_kv,D]; [total_k,H_kv,D] with `--cu-seqlens-k`;
    /// [num_blocks,block_size,H_kv,D] with `--block-table`), same dtype as q; H_kv divides H
    /// (grouped-query attention).
    #[arg(long)]
    k: PathBuf,
    /// Values, shaped like k.
    #[arg(long)]
    v: PathBuf,
    /// Output file, shaped and laid out like q, in the input's dtype.
    #[arg(long)]
    out: PathBuf,
    /// Also write each query row's log-sum-exp (natural log, float32) to this file: [B,H,S_q],
    /// or [H,total_q] for a varlen batch.
    #[arg(long)]
    lse: Option<PathBuf>,
    /// Causal masking (aligned bottom-right when S_q != S_k; per sequence for varlen and paged
    /// inputs).
    #[arg(long)]
    causal: bool,
    /// Softmax scale (default 1/sqrt(D)).
    #[arg(long)]
    scale: Option<f32>,
    /// Variant to run (default: the library's choice; see `list`), or a library-composed path:
    /// `cublas` (bhsd, no grouped heads) or `cutensor`; neither writes `--lse` nor takes varlen
    /// or paged inputs. Varlen inputs need a variant with a varlen entry point (flash_decode,
    /// flash_ws without persistent, and the persistent 128 x 128 flash_ws at head dim 128), paged
    /// ones a flash_decode variant.
    #[arg(long)]
    kernel: Option<String>,
    /// Precision the kernel computes in: f16 or bf16 (float32 inputs are rounded to it; float16
    /// inputs with bf16 are converted). The output keeps the input's dtype. Or e4m3: the FP8
    /// kernel, on float inputs quantised here with `--quantize` (one scale per batch and
    /// key/value head, amax / 448), or on e4m3 bytes as uint8 .npy files with `--descale`; dense
    /// inputs only; the output in `--out-dtype`.
    #[arg(long, default_value = "f16")]
    dtype: Elem,
    /// With `--dtype e4m3`: the output's type, f16 (written as float16) or bf16 (written as
    /// float32, exactly: numpy has no bfloat16).
    #[arg(long, value_name = "DTYPE")]
    out_dtype: Option<DType>,
    /// With `--dtype e4m3`: quantise the float16/float32 q, k, v to e4m3 on the host first.
    #[arg(long, conflicts_with = "descale")]
    quantize: bool,
    /// With `--dtype e4m3` and q, k, v given as e4m3 bytes (uint8 .npy, OCP E4M3FN bit
    /// patterns, e.g. `torch.float8_e4m3fn` tensors viewed as uint8): their descale factors, a
    /// float32 .npy of 3 x B x H_kv values (Q's [B, H_kv], then K's, then V's; shaped [3, B,
    /// H_kv] or flat), each finite and positive. The true value of a byte is its e4m3 value times
    /// its head's factor.
    #[arg(long, value_name = "FILE")]
    descale: Option<PathBuf>,
    /// How q, k, v (q only, for paged inputs) are laid out: bhsd ([B,H,S,D], the default) or
    /// bshd ([B,S,H,D]); the kernels read both in place through strides. Packed varlen tensors
    /// have one layout of their own.
    #[arg(long)]
    layout: Option<Layout>,
    /// A variable-length batch: the prefix sums of the sequences' query lengths, a 1-D int32
    /// .npy of B + 1 entries (0 first, none decreasing, the last total_q). q and the output are
    /// then packed [total_q,H,D], k and v [total_k,H_kv,D]; each sequence attends to its own
    /// keys. Needs --cu-seqlens-k.
    #[arg(long, requires = "cu_seqlens_k")]
    cu_seqlens_q: Option<PathBuf>,
    /// The prefix sums of the sequences' key lengths (1-D int32, B + 1 entries, the last
    /// total_k). Needs --cu-seqlens-q.
    #[arg(long, requires = "cu_seqlens_q")]
    cu_seqlens_k: Option<PathBuf>,
    /// A paged KV cache: the block table, a 2-D int32 .npy [B,max_blocks] naming the page of
    /// each block_size keys of each sequence (entries past a sequence's last page are not
    /// read). k and v are then the caches [num_blocks,block_size,H_kv,D] (block_size a power of
    /// two from 16 to 256), q [B,H,S_q,D]. Needs --seqlens-k.
    #[arg(long, requires = "seqlens_k", conflicts_with_all = ["cu_seqlens_q", "cu_seqlens_k"])]
    block_table: Option<PathBuf>,
    /// Each sequence's key count in the paged cache, a 1-D int32 .npy of B entries. Needs
    /// --block-table.
    #[arg(long, requires = "block_table")]
    seqlens_k: Option<PathBuf>,
}

/// What the files hold, checked in full before the GPU is opened.
#[derive(Debug)]
enum Problem {
    Dense(Shape),
    /// A packed batch, and its heads `(H, H_kv, D)`.
    Varlen {
        batch: VarlenBatch,
        heads: (usize, usize, usize),
    },
    /// Queries against a paged cache (`seq_k`: the longest sequence).
    Paged {
        shape: Shape,
        cache: PagedKv,
    },
}

impl Problem {
    /// Dims of the log-sum-exp file.
    fn lse_dims(&self) -> Vec<usize> {
        match self {
            Problem::Dense(shape) | Problem::Paged { shape, .. } => {
                vec![shape.batch, shape.heads, shape.seq_q]
            }
            Problem::Varlen { batch, heads } => vec![heads.0, batch.total_q()],
        }
    }

    fn describe(&self) -> String {
        match self {
            Problem::Dense(shape) => shape.to_string(),
            Problem::Varlen { batch, heads } => format!(
                "varlen B={} H={} H_kv={} D={} total_q={} total_k={}",
                batch.batch(),
                heads.0,
                heads.1,
                heads.2,
                batch.total_q(),
                batch.total_k()
            ),
            Problem::Paged { shape, cache } => format!(
                "{shape} against a paged cache of {} pages of {}",
                cache.num_blocks(),
                cache.block_size()
            ),
        }
    }
}

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    if args.dtype == Elem::E4m3 {
        return run_fp8(device, &args);
    }
    if args.out_dtype.is_some() || args.quantize || args.descale.is_some() {
        return Err(Failure::Usage(
            "--out-dtype, --quantize and --descale go with --dtype e4m3".into(),
        ));
    }
    // Everything about the inputs and options is checked here, before the GPU is opened: bad
    // input gets its own one-line error on any machine, with or without a GPU.
    let path = args.kernel.as_deref().and_then(library::Path::from_name);
    let named = match args.kernel.as_ref().filter(|_| path.is_none()) {
        Some(name) => {
            Some(VariantSpec::by_name(name).ok_or_else(|| flashrs::Error::UnknownKernel(name.clone()))?)
        }
        None => None,
    };
    let params = params_and_outputs(&args)?;
    let q = npy::read_npy(&args.q)?;
    let k = npy::read_npy(&args.k)?;
    let v = npy::read_npy(&args.v)?;
    let problem = problem(&q, &k, &v, &args)?;
    check_kernel(&problem, path, named, &args)?;

    let gpu = inputs::open_gpu(device)?;
    let dtype = args.dtype.sixteen();
    let encode = |a: &NpyArray| -> Vec<u16> { a.to_f32().iter().map(|&x| dtype.encode(x)).collect() };
    let (q_bits, k_bits, v_bits) = (encode(&q), encode(&k), encode(&v));
    let layout = args.layout.unwrap_or(Layout::Bhsd);
    let want_lse = args.lse.is_some();
    let (out, lse, used) = match &problem {
        Problem::Dense(shape) => {
            let mut tensors = gpu.tensors_in(layout, *shape, dtype, &q_bits, &k_bits, &v_bits)?;
            if want_lse {
                gpu.request_lse(&mut tensors)?;
            }
            let used = if let Some(path) = path {
                path.make(&gpu, *shape, dtype)?
                    .launch(&gpu, &mut tensors, params)?;
                path.name()
            } else {
                gpu.forward(&mut tensors, params, named.map(|v| v.name))?.name
            };
            (
                gpu.download(tensors.out())?,
                download_lse(&gpu, tensors.lse())?,
                used,
            )
        }
        Problem::Varlen { batch, heads } => {
            let (h, h_kv, d) = *heads;
            let mut tensors =
                gpu.varlen_tensors(batch.clone(), *heads, dtype, (&q_bits, &k_bits, &v_bits))?;
            if want_lse {
                gpu.request_varlen_lse(&mut tensors)?;
            }
            let variant = match named {
                Some(variant) => variant,
                None => gpu.choose_varlen(batch, h, h_kv, d)?,
            };
            let kernel = gpu.varlen_kernel(variant, d, dtype, false)?;
            gpu.launch_varlen(&kernel, &mut tensors, params, None)?;
            (
                gpu.download(tensors.out())?,
                download_lse(&gpu, tensors.lse())?,
                variant.name,
            )
        }
        Problem::Paged { shape, cache } => {
            let mut tensors =
                gpu.paged_tensors(layout, *shape, dtype, &q_bits, &k_bits, &v_bits, cache.clone())?;
            if want_lse {
                gpu.request_paged_lse(&mut tensors)?;
            }
            let variant = match named {
                Some(variant) => variant,
                None => gpu.choose_paged(*shape, cache.block_size())?,
            };
            let kernel = gpu.paged_kernel(variant, shape.head_dim, dtype, false)?;
            gpu.launch_paged(&kernel, &mut tensors, params, None)?;
            (
                gpu.download(tensors.out())?,
                download_lse(&gpu, tensors.lse())?,
                variant.name,
            )
        }
    };
    // A varlen batch without queries keeps a one-element placeholder on the GPU.
    let out = flashrs::gpu::decode(dtype, &out[..q_bits.len()]);
    let data = match q.data {
        NpyData::F16(_) => NpyData::F16(out.iter().map(|&x| half::f16::from_f32(x)).collect()),
        _ => NpyData::F32(out),
    };
    npy::write_npy(&args.out, &q.shape, &data)?;
    if let (Some(path), Some(mut lse)) = (&args.lse, lse) {
        let dims = problem.lse_dims();
        lse.truncate(dims.iter().product());
        npy::write_npy(path, &dims, &NpyData::F32(lse))?;
    }
    println!(
        "{}: {} {} computed in {dtype} with {} (causal={})",
        args.out.display(),
        q.dtype_name(),
        problem.describe(),
        used,
        args.causal
    );
    Ok(())
}

/// `--dtype e4m3`: dense float inputs quantised on the host, or e4m3 bytes with their descale
/// factors; the FP8 kernel, the output in `--out-dtype`. Everything is checked before the GPU
/// is opened.
fn run_fp8(device: usize, args: &Args) -> Result<(), Failure> {
    if args.cu_seqlens_q.is_some() || args.block_table.is_some() {
        return Err(Failure::Usage(
            "--dtype e4m3 takes dense tensors only: the FP8 kernel has no varlen or paged entry point".into(),
        ));
    }
    let kernel = match &args.kernel {
        Some(name) => Some(crate::fp8::variants(std::slice::from_ref(name))?[0].name),
        None => None,
    };
    let params = params_and_outputs(args)?;
    let (q, k, v) = (
        npy::read_npy(&args.q)?,
        npy::read_npy(&args.k)?,
        npy::read_npy(&args.v)?,
    );
    if q.as_i32().is_some() || k.as_i32().is_some() || v.as_i32().is_some() {
        return Err(Failure::Usage(
            "q, k and v must be float16 or float32 (with --quantize), or uint8 e4m3 bytes (with --descale)"
                .into(),
        ));
    }
    // Checked before the flags, so that a mix of bytes and floats gets its own message.
    let shape = shape_of(&q, &k, &v, args)?;
    crate::fp8::check_shape(&shape)?;
    let layout = args.layout.unwrap_or(Layout::Bhsd);
    let fp8 = match (q.as_u8(), k.as_u8(), v.as_u8()) {
        (Some(q), Some(k), Some(v)) => {
            let Some(path) = &args.descale else {
                return Err(Failure::Usage(
                    "--dtype e4m3 with uint8 (e4m3 byte) files needs --descale (their descale factors)"
                        .into(),
                ));
            };
            let descale = npy::read_npy(path)?;
            let NpyData::F32(factors) = &descale.data else {
                return Err(Failure::Usage(format!(
                    "{}: --descale must be float32 (<f4), got {}",
                    path.display(),
                    descale.dtype_name()
                )));
            };
            // A 3-d array must say [3, B, H_kv] itself: [3, H_kv, B] has the right length and
            // would pair the factors with the wrong heads.
            let expected = [3, shape.batch, shape.heads_kv];
            if descale.shape.len() != 1 && descale.shape != expected {
                return Err(Failure::Usage(format!(
                    "{}: --descale is {:?}, expected {expected:?} ([3, B, H_kv]) or 1-d",
                    path.display(),
                    descale.shape
                )));
            }
            flashrs::fp8::quantize::Fp8Inputs::from_parts(
                shape,
                q.to_vec(),
                k.to_vec(),
                v.to_vec(),
                factors.clone(),
            )
            .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?
        }
        _ => {
            if args.descale.is_some() {
                return Err(Failure::Usage(
                    "--descale goes with e4m3 bytes (uint8 .npy files); float16/float32 files take --quantize".into(),
                ));
            }
            if !args.quantize {
                return Err(Failure::Usage(
                    "--dtype e4m3 with float16/float32 files needs --quantize (quantise on the host), or give e4m3 bytes as uint8 files with --descale".into(),
                ));
            }
            flashrs::fp8::quantize::Fp8Inputs::quantize(shape, layout, &q.to_f32(), &k.to_f32(), &v.to_f32())?
        }
    };
    let out_dtype = args.out_dtype.unwrap_or(DType::Bf16);
    let gpu = inputs::open_gpu(device)?;
    let mut tensors = gpu.fp8_tensors(shape, layout, out_dtype, &fp8.q, &fp8.k, &fp8.v, &fp8.descale)?;
    if args.lse.is_some() {
        gpu.fp8_request_lse(&mut tensors)?;
    }
    let used = gpu.fp8_forward(&mut tensors, params, kernel)?.name;
    let out = flashrs::gpu::decode(out_dtype, &gpu.download(tensors.out())?);
    let data = match out_dtype {
        DType::F16 => NpyData::F16(out.iter().map(|&x| half::f16::from_f32(x)).collect()),
        DType::Bf16 => NpyData::F32(out),
    };
    npy::write_npy(&args.out, &q.shape, &data)?;
    if let (Some(path), Some(lse)) = (&args.lse, download_lse(&gpu, tensors.lse())?) {
        npy::write_npy(path, &[shape.batch, shape.heads, shape.seq_q], &NpyData::F32(lse))?;
    }
    println!(
        "{}: {} {shape} {}, computed with {used}, output {out_dtype} (causal={})",
        args.out.display(),
        q.dtype_name(),
        if q.as_u8().is_some() {
            "as e4m3 bytes with their descale factors"
        } else {
            "quantised to e4m3 on the host"
        },
        args.causal
    );
    Ok(())
}

/// The call's parameters, checked, and the output paths checked writable: before any input is
/// read or the GPU opened.
fn params_and_outputs(args: &Args) -> Result<Params, Failure> {
    let params = Params {
        causal: args.causal,
        scale: args.scale,
        ..Params::default()
    };
    params.validate()?;
    for out in std::iter::once(&args.out).chain(&args.lse) {
        inputs::check_output(out)?;
    }
    Ok(params)
}

fn download_lse(
    gpu: &Gpu,
    lse: Option<&cudarc::driver::CudaSlice<f32>>,
) -> Result<Option<Vec<f32>>, Failure> {
    Ok(lse.map(|lse| gpu.download(lse)).transpose()?)
}

/// The problem the files describe: dense, varlen or paged as the index flags say, every
/// dim and index checked (the library's own checks, run on the host).
fn problem(q: &NpyArray, k: &NpyArray, v: &NpyArray, args: &Args) -> Result<Problem, Failure> {
    for (a, path) in [(q, &args.q), (k, &args.k), (v, &args.v)] {
        if a.as_i32().is_some() || a.as_u8().is_some() {
            return Err(Failure::Usage(format!(
                "{}: {} data: q, k and v must be float16 or float32 (uint8 e4m3 bytes go with --dtype e4m3 --descale)",
                path.display(),
                a.dtype_name()
            )));
        }
    }
    let params = Params {
        causal: args.causal,
        scale: args.scale,
        ..Params::default()
    };
    match (
        &args.cu_seqlens_q,
        &args.cu_seqlens_k,
        &args.block_table,
        &args.seqlens_k,
    ) {
        (None, None, None, None) => {
            let shape = shape_of(q, k, v, args)?;
            shape.validate()?;
            Ok(Problem::Dense(shape))
        }
        (Some(cu_q), Some(cu_k), None, None) => {
            if let Some(layout) = args.layout {
                return Err(Failure::Usage(format!(
                    "--layout {layout}: packed varlen tensors are [total,H,D], they have no other layout"
                )));
            }
            let qs = rank::<3>(q, &args.q, "[total_q,H,D] (packed)")?;
            let ks = rank::<3>(k, &args.k, "[total_k,H_kv,D] (packed)")?;
            let vs = rank::<3>(v, &args.v, "[total_k,H_kv,D] (packed)")?;
            share_dtype(q, k, v)?;
            let batch = VarlenBatch::new(
                index(cu_q, "--cu-seqlens-q", "[B + 1]", 1)?.1,
                index(cu_k, "--cu-seqlens-k", "[B + 1]", 1)?.1,
            )?;
            let heads = flashrs::check_varlen(qs, ks, vs, &batch, params)?;
            Ok(Problem::Varlen { batch, heads })
        }
        (None, None, Some(table), Some(lens)) => {
            let layout = args.layout.unwrap_or(Layout::Bhsd);
            let qs = layout.split(rank::<4>(q, &args.q, layout_dims(layout))?);
            let qs = [qs.0, qs.1, qs.2, qs.3];
            let ks = rank::<4>(k, &args.k, "[num_blocks,block_size,H_kv,D] (paged)")?;
            let vs = rank::<4>(v, &args.v, "[num_blocks,block_size,H_kv,D] (paged)")?;
            share_dtype(q, k, v)?;
            let (table_dims, table) = index(table, "--block-table", "[B,max_blocks]", 2)?;
            let (_, lens) = index(lens, "--seqlens-k", "[B]", 1)?;
            // The table's rows are its own: the library's index takes it flat, rows by B.
            if table_dims[0] != lens.len() {
                return Err(Failure::Usage(format!(
                    "--block-table has {} rows and --seqlens-k {} entries: one of each per sequence",
                    table_dims[0],
                    lens.len()
                )));
            }
            let cache = PagedKv::new(ks[1], ks[0], table, lens)?;
            let shape = flashrs::check_paged(qs, layout, ks, vs, &cache, params)?;
            Ok(Problem::Paged { shape, cache })
        }
        // clap keeps each pair together and the two pairs apart; this only keeps the match total.
        _ => Err(Failure::Usage(
            "--cu-seqlens-q/--cu-seqlens-k and --block-table/--seqlens-k each go in pairs, one pair at most"
                .into(),
        )),
    }
}

/// Refuses a kernel or composed path that cannot run `problem`, before the GPU is opened.
fn check_kernel(
    problem: &Problem,
    path: Option<library::Path>,
    named: Option<&'static VariantSpec>,
    args: &Args,
) -> Result<(), Failure> {
    let head_dim = match problem {
        Problem::Dense(shape) | Problem::Paged { shape, .. } => shape.head_dim,
        Problem::Varlen { heads, .. } => heads.2,
    };
    if let Some(variant) = named.filter(|v| !v.head_dims.contains(&head_dim)) {
        return Err(Failure::Usage(format!(
            "--kernel {}: compiled for head dims {:?}, not {head_dim}",
            variant.name, variant.head_dims
        )));
    }
    match (problem, path, named) {
        (Problem::Dense(shape), Some(path), _) => {
            Ok(path.check(*shape, args.layout.unwrap_or(Layout::Bhsd), args.lse.is_some())?)
        }
        (Problem::Varlen { .. } | Problem::Paged { .. }, Some(path), _) => Err(Failure::Usage(format!(
            "--kernel {}: the composed paths take dense tensors only, not varlen or paged ones",
            path.name()
        ))),
        (Problem::Varlen { .. }, None, Some(variant)) if !variant.has_varlen_at(head_dim) => {
            Err(Failure::Usage(format!(
                "--kernel {}: no variable-length entry point at head dim {head_dim} (flash_decode and flash_ws \
                 without persistent have one, and the persistent 128 x 128 flash_ws at head dim 128)",
                variant.name
            )))
        }
        (Problem::Paged { .. }, None, Some(variant)) if !variant.has_paged() => {
            Err(Failure::Usage(format!(
                "--kernel {}: only flash_decode variants with cp.async copies (not the mbarrier ones) read a paged KV cache",
                variant.name
            )))
        }
        _ => Ok(()),
    }
}

/// `a`'s dims when it has `N` of them, else a one-line refusal naming the file and what was
/// expected (`what`).
fn rank<const N: usize>(a: &NpyArray, path: &Path, what: &str) -> Result<[usize; N], Failure> {
    <[usize; N]>::try_from(a.shape.as_slice()).map_err(|_| {
        Failure::Usage(format!(
            "{}: expected a {N}-D {what} tensor, got shape {:?}",
            path.display(),
            a.shape
        ))
    })
}

fn layout_dims(layout: Layout) -> &'static str {
    match layout {
        Layout::Bhsd => "[B,H,S,D]",
        Layout::Bshd => "[B,S,H,D]",
    }
}

fn share_dtype(q: &NpyArray, k: &NpyArray, v: &NpyArray) -> Result<(), Failure> {
    if q.dtype_name() != k.dtype_name() || q.dtype_name() != v.dtype_name() {
        return Err(Failure::Usage(format!(
            "q, k, v must share a dtype, got {}, {}, {}",
            q.dtype_name(),
            k.dtype_name(),
            v.dtype_name()
        )));
    }
    Ok(())
}

/// An int32 index array of `rank` dims (`dims` says which, for the message) from `path`,
/// given with `flag`.
fn index(path: &Path, flag: &str, dims: &str, rank: usize) -> Result<(Vec<usize>, Vec<i32>), Failure> {
    let array = npy::read_npy(path)?;
    let Some(values) = array.as_i32() else {
        return Err(Failure::Usage(format!(
            "{}: {flag} must be int32 (<i4), got {}",
            path.display(),
            array.dtype_name()
        )));
    };
    if array.shape.len() != rank {
        return Err(Failure::Usage(format!(
            "{}: {flag} must be a {rank}-D {dims} array, got shape {:?}",
            path.display(),
            array.shape
        )));
    }
    Ok((array.shape.clone(), values.to_vec()))
}

/// Checks ranks, agreement between q, k and v, and dtypes; returns the problem's shape.
pub fn shape_of(q: &NpyArray, k: &NpyArray, v: &NpyArray, args: &Args) -> Result<Shape, Failure> {
    let layout = args.layout.unwrap_or(Layout::Bhsd);
    // Checked as [B,H,S,D] whatever the layout.
    let as_bhsd = |a: &NpyArray, path: &PathBuf| -> Result<[usize; 4], Failure> {
        let (b, h, s, d) = layout.split(rank::<4>(a, path, layout_dims(layout))?);
        Ok([b, h, s, d])
    };
    let (qs, ks, vs) = (as_bhsd(q, &args.q)?, as_bhsd(k, &args.k)?, as_bhsd(v, &args.v)?);
    share_dtype(q, k, v)?;
    if ks != vs {
        return Err(Failure::Usage(format!(
            "k {ks:?} and v {vs:?} must have the same shape"
        )));
    }
    if qs[0] != ks[0] || qs[3] != ks[3] || ks[1] == 0 || qs[1] % ks[1] != 0 {
        return Err(Failure::Usage(format!(
            "q {qs:?} and k {ks:?} must agree in B and D, and k's heads must divide q's (grouped-query attention)"
        )));
    }
    Ok(Shape {
        batch: qs[0],
        heads: qs[1],
        heads_kv: ks[1],
        seq_q: qs[2],
        seq_k: ks[2],
        head_dim: qs[3],
        head_dim_v: qs[3],
    })
}
