//! Causal grouped-query attention on candle CUDA tensors through flashrs, checked against
//! candle's own matmul-softmax attention and timed beside it.
//!
//! ```text
//! cd candle && cargo run --release --example candle_attention
//! ```

use std::time::Instant;

use candle_core::{DType, Device, Tensor, D};

/// candle's attention in f32: `[B, S, H, D]` in and out, key/value heads repeated per group,
/// causal mask for `S_q = S_k`.
fn candle_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
    let (batch, seq, heads, head_dim) = q.dims4()?;
    let heads_kv = k.dim(2)?;
    let bhsd = |t: &Tensor| t.to_dtype(DType::F32)?.transpose(1, 2)?.contiguous();
    let repeat = |t: Tensor| {
        t.unsqueeze(2)?
            .expand((batch, heads_kv, heads / heads_kv, seq, head_dim))?
            .reshape((batch, heads, seq, head_dim))
    };
    let (q, k, v) = (bhsd(q)?, repeat(bhsd(k)?)?, repeat(bhsd(v)?)?);
    let mask: Vec<f32> = (0..seq)
        .flat_map(|i| (0..seq).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    let mask = Tensor::from_vec(mask, (seq, seq), q.device())?;
    let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?.broadcast_add(&mask)?;
    let exp = scores.broadcast_sub(&scores.max_keepdim(D::Minus1)?)?.exp()?;
    let probs = exp.broadcast_div(&exp.sum_keepdim(D::Minus1)?)?;
    probs.matmul(&v)?.transpose(1, 2)
}

/// Median wall time of `runs` calls of `f`, each waited for.
fn time(
    device: &Device,
    runs: usize,
    mut f: impl FnMut() -> candle_core::Result<Tensor>,
) -> candle_core::Result<f64> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        f()?;
        device.synchronize()?;
        samples.push(start.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[runs / 2])
}

fn main() -> candle_core::Result<()> {
    let device = Device::new_cuda(0)?;
    // [batch, seq_len, num_heads, head_dim]: 32 query heads sharing 8 key/value heads.
    let (batch, seq, heads, heads_kv, head_dim) = (2, 2048, 32, 8, 128);
    let q = Tensor::randn(0f32, 1.0, (batch, seq, heads, head_dim), &device)?.to_dtype(DType::BF16)?;
    let k = Tensor::randn(0f32, 1.0, (batch, seq, heads_kv, head_dim), &device)?.to_dtype(DType::BF16)?;
    let v = Tensor::randn(0f32, 1.0, (batch, seq, heads_kv, head_dim), &device)?.to_dtype(DType::BF16)?;
    let scale = 1.0 / (head_dim as f32).sqrt();

    // The first call opens flashrs on candle's device (loads the kernels).
    let out = flashrs_candle::flash_attn(&q, &k, &v, scale, true)?;
    let expected = candle_attention(&q, &k, &v, scale as f64)?;
    let error = (out.to_dtype(DType::F32)? - &expected)?
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f32>()?;
    println!(
        "out {:?} {:?}, max |flashrs - candle f32| = {error:.2e}",
        out.dims(),
        out.dtype()
    );

    let ours = time(&device, 20, || {
        flashrs_candle::flash_attn(&q, &k, &v, scale, true)
    })?;
    let theirs = time(&device, 5, || candle_attention(&q, &k, &v, scale as f64))?;
    println!("flashrs: {ours:.0} us per call; candle's matmul-softmax in f32: {theirs:.0} us");
    if error >= 3e-2 {
        return Err(candle_core::Error::Msg(format!("max error {error} >= 3e-2")));
    }
    Ok(())
}
