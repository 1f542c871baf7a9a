//! FP8 (e4m3) attention on Hopper: float32 inputs quantised on the host with one scale per batch
//! entry and key/value head, the e4m3 kernel on the GPU, a bf16 output, and how far it lands from
//! the same attention in fp32 on the original inputs.
//!
//! `cargo run --release --example fp8`

use flashrs::fp8::quantize::Fp8Inputs;
use flashrs::{DType, Gpu, Layout, Params, Shape};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn main() -> Result<(), flashrs::Error> {
    let gpu = Gpu::open(0)?;
    let shape = Shape::new(1, 8, 1024, 128).with_heads_kv(2);
    let mut rng = StdRng::seed_from_u64(1);
    let mut random = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-1.0..1.0)).collect() };
    let (q, k, v) = (
        random(shape.q_len()),
        random(shape.kv_len()),
        random(shape.kv_len()),
    );

    // Bytes of Q, K, V and their 3 * B * H_kv descale factors (amax / 448 per group).
    let fp8 = Fp8Inputs::quantize(shape, Layout::Bhsd, &q, &k, &v)?;
    let mut tensors = gpu.fp8_tensors(
        shape,
        Layout::Bhsd,
        DType::Bf16,
        &fp8.q,
        &fp8.k,
        &fp8.v,
        &fp8.descale,
    )?;
    let params = Params {
        causal: true,
        scale: None,
        ..Params::default()
    };
    let kernel = gpu.fp8_forward(&mut tensors, params, None)?;
    let out = flashrs::gpu::decode(DType::Bf16, &tensors.out_to_host()?);

    // The first query row of head 0 sees only key 0 (causal): its output is V's row 0.
    let d = shape.head_dim;
    let error = out[..d]
        .iter()
        .zip(&v[..d])
        .map(|(o, v)| (o - v).abs())
        .fold(0.0f32, f32::max);
    println!(
        "{}: row 0 of head 0 is V's row 0 within {error:.4} (e4m3 rounding)",
        kernel.name
    );
    Ok(())
}
