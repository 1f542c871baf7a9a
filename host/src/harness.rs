//! What `verify` and its stress modes share: one kernel run on host-side inputs, output back as
//! `[B,H,S,D]` f32.

use flashrs::{Gpu, Layout, Params, Shape, VariantSpec};

use crate::inputs::Inputs;
use crate::Failure;

/// Runs one variant on a NaN-poisoned output buffer, with the inputs (kept `[B,H,S,D]` on the
/// host) laid out as `layout` on the device, and returns the output as `[B,H,S,D]` f32.
pub fn run_kernel(
    gpu: &Gpu,
    variant: &'static VariantSpec,
    shape: Shape,
    params: Params,
    inputs: &Inputs,
    lse: bool,
    layout: Layout,
) -> Result<(Vec<f32>, Option<Vec<f32>>), Failure> {
    let kernel = gpu.kernel(variant, shape.head_dim, inputs.dtype, false)?;
    let (b, d) = (shape.batch, shape.head_dim);
    let q = layout.from_bhsd(&inputs.q, b, shape.heads, shape.seq_q, d);
    let k = layout.from_bhsd(&inputs.k, b, shape.heads_kv, shape.seq_k, d);
    let v = layout.from_bhsd(&inputs.v, b, shape.heads_kv, shape.seq_k, d);
    // The output starts as NaN: an element the kernel fails to write stays NaN, which never passes.
    let mut tensors = gpu.tensors_in(layout, shape, inputs.dtype, &q, &k, &v)?;
    if lse {
        gpu.request_lse(&mut tensors)?;
    }
    gpu.launch(&kernel, &mut tensors, params, None)?;
    let out = flashrs::gpu::decode(inputs.dtype, &gpu.download(tensors.out())?);
    let out = layout.to_bhsd(&out, b, shape.heads, shape.seq_q, d);
    let lse = tensors.lse().map(|l| gpu.download(l)).transpose()?;
    Ok((out, lse))
}

/// The variants that can run `shape` on this GPU: compiled for its head dim (or, `flash_ws`, the
/// head dim that pads it) and architecture.
pub fn runnable<'a>(
    gpu: &'a Gpu,
    variants: &'a [&'static VariantSpec],
    shape: Shape,
) -> impl Iterator<Item = &'a &'static VariantSpec> + 'a {
    variants
        .iter()
        .filter(move |v| v.runs_head_dim(shape.head_dim) && v.min_arch <= gpu.arch)
}
