//! `attend`: attention on the user's own `.npy` tensors.

use std::path::PathBuf;

use flashrs::{DType, Layout, Params, Shape, VariantSpec};
use flashrs_lab::npy::{self, NpyData};

use crate::inputs;
use crate::library;
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// Queries, [B,H,S_q,D] (or [B,S_q,H,D] with `--layout bshd`), float16 or float32.
    #[arg(long)]
    q: PathBuf,
    /// Keys, [B,H_kv,S_k,D] (or [B,S_k,H_kv,D]), same dtype as q; H_kv divides H (grouped-query
    /// attention).
    #[arg(long)]
    k: PathBuf,
    /// Values, shaped like k.
    #[arg(long)]
    v: PathBuf,
    /// Output file, laid out like q, in the input's dtype.
    #[arg(long)]
    out: PathBuf,
    /// Also write each query row's log-sum-exp (natural log, [B,H,S_q] float32) to this file.
    #[arg(long)]
    lse: Option<PathBuf>,
    /// Causal masking (aligned bottom-right when S_q != S_k).
    #[arg(long)]
    causal: bool,
    /// Softmax scale (default 1/sqrt(D)).
    #[arg(long)]
    scale: Option<f32>,
    /// Variant to run (default: the library's choice; see `list`), or a library-composed path:
    /// `cublas` (bhsd, no grouped heads) or `cutensor`; neither writes `--lse`.
    #[arg(long)]
    kernel: Option<String>,
    /// Precision the kernel computes in: f16 or bf16 (float32 inputs are rounded to it; float16
    /// inputs with bf16 are converted). The output keeps the input's dtype.
    #[arg(long, default_value = "f16")]
    dtype: DType,
    /// How the tensors are laid out: bhsd ([B,H,S,D]) or bshd ([B,S,H,D]); the kernels read both
    /// in place through strides.
    #[arg(long, default_value = "bhsd")]
    layout: Layout,
}

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    // Everything about the inputs and options is checked here, before the GPU is opened: bad
    // input gets its own one-line error on any machine, with or without a GPU.
    let path = args.kernel.as_deref().and_then(library::Path::from_name);
    if let Some(name) = args.kernel.as_ref().filter(|_| path.is_none()) {
        VariantSpec::by_name(name).ok_or_else(|| flashrs::Error::UnknownKernel(name.clone()))?;
    }
    let params = Params {
        causal: args.causal,
        scale: args.scale,
    };
    params.validate()?;
    for out in std::iter::once(&args.out).chain(&args.lse) {
        inputs::check_output(out)?;
    }
    let q = npy::read_npy(&args.q)?;
    let k = npy::read_npy(&args.k)?;
    let v = npy::read_npy(&args.v)?;
    let shape = shape_of(&q, &k, &v, &args)?;
    shape.validate()?;
    if let Some(path) = path {
        path.check(shape, args.layout, args.lse.is_some())?;
    }

    let gpu = inputs::open_gpu(device)?;
    let dtype = args.dtype;
    let encode = |a: &npy::NpyArray| -> Vec<u16> { a.to_f32().iter().map(|&x| dtype.encode(x)).collect() };
    let mut tensors = gpu.tensors_in(args.layout, shape, dtype, &encode(&q), &encode(&k), &encode(&v))?;
    if args.lse.is_some() {
        gpu.request_lse(&mut tensors)?;
    }
    let used = if let Some(path) = path {
        path.make(&gpu, shape, dtype)?
            .launch(&gpu, &mut tensors, params)?;
        path.name()
    } else {
        gpu.forward(&mut tensors, params, args.kernel.as_deref())?.name
    };
    let out = flashrs::gpu::decode(dtype, &gpu.download(tensors.out())?);
    let data = match q.data {
        NpyData::F16(_) => NpyData::F16(out.iter().map(|&x| half::f16::from_f32(x)).collect()),
        NpyData::F32(_) => NpyData::F32(out),
    };
    npy::write_npy(&args.out, &q.shape, &data)?;
    if let (Some(path), Some(lse)) = (&args.lse, tensors.lse()) {
        let lse = gpu.download(lse)?;
        npy::write_npy(path, &[shape.batch, shape.heads, shape.seq_q], &NpyData::F32(lse))?;
    }
    println!(
        "{}: {} {} computed in {dtype} with {} (causal={})",
        args.out.display(),
        q.dtype_name(),
        shape,
        used,
        args.causal
    );
    Ok(())
}

/// Checks ranks, agreement between q, k and v, and dtypes; returns the problem's shape.
pub fn shape_of(
    q: &npy::NpyArray,
    k: &npy::NpyArray,
    v: &npy::NpyArray,
    args: &Args,
) -> Result<Shape, Failure> {
    let rank4 = |a: &npy::NpyArray, path: &PathBuf| -> Result<[usize; 4], Failure> {
        <[usize; 4]>::try_from(a.shape.as_slice()).map_err(|_| {
            Failure::Usage(format!(
                "{}: expected a 4-D {} tensor, got shape {:?}",
                path.display(),
                match args.layout {
                    Layout::Bhsd => "[B,H,S,D]",
                    Layout::Bshd => "[B,S,H,D]",
                },
                a.shape
            ))
        })
    };
    // Checked as [B,H,S,D] whatever the layout.
    let as_bhsd = |dims: [usize; 4]| {
        let (b, h, s, d) = args.layout.split(dims);
        [b, h, s, d]
    };
    let (qs, ks, vs) = (
        as_bhsd(rank4(q, &args.q)?),
        as_bhsd(rank4(k, &args.k)?),
        as_bhsd(rank4(v, &args.v)?),
    );
    if q.dtype_name() != k.dtype_name() || q.dtype_name() != v.dtype_name() {
        return Err(Failure::Usage(format!(
            "q, k, v must share a dtype, got {}, {}, {}",
            q.dtype_name(),
            k.dtype_name(),
            v.dtype_name()
        )));
    }
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
    })
}
