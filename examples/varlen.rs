//! A packed batch of sequences of different lengths (`[total_tokens, H, D]` with prefix sums of
//! the lengths, as `flash_attn_varlen_func` takes them) through the typed API's
//! `varlen_attention`, causal per sequence, grouped-query heads. The first sequence is checked
//! against a float64 computation on the CPU.
//!
//! `cargo run --release --example varlen`

use flashrs::api::{f16, varlen_attention, PackedTensor};
use flashrs::{Gpu, Params, VarlenBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn main() -> Result<(), flashrs::Error> {
    let gpu = Gpu::open(0)?;
    let lengths = [17, 300, 1, 1024];
    let (heads, heads_kv, head_dim) = (8, 2, 128);
    // Self-attention: each sequence's queries are its keys. The prefix sums are checked here,
    // on the host, before anything reaches the GPU.
    let batch = VarlenBatch::from_lengths(&lengths, &lengths)?;
    let (total_q, total_k) = (batch.total_q(), batch.total_k());

    let mut rng = StdRng::seed_from_u64(7);
    let mut random = |n: usize| -> Vec<f16> {
        (0..n)
            .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
            .collect()
    };
    let q = random(total_q * heads * head_dim);
    let k = random(total_k * heads_kv * head_dim);
    let v = random(total_k * heads_kv * head_dim);

    let dq = PackedTensor::from_host(&gpu, &q, [total_q, heads, head_dim])?;
    let dk = PackedTensor::from_host(&gpu, &k, [total_k, heads_kv, head_dim])?;
    let dv = PackedTensor::from_host(&gpu, &v, [total_k, heads_kv, head_dim])?;
    // The packed rows are checked against the prefix sums (the last entries are the totals).
    let mut out = PackedTensor::zeros(&gpu, dq.dims())?;
    let variant = varlen_attention(&dq, &dk, &dv, &batch)
        .causal(true)
        .run_into(&gpu, &mut out)?;
    let out = out.to_host()?;
    let params = Params {
        causal: true,
        scale: None,
        ..Params::default()
    };

    // Sequence 0 on the CPU: rows 0..17 of the packed tensors, head h reads KV head h / 4.
    let value = |x: f16| f64::from(x.to_f32());
    let scale = f64::from(params.scale_for(head_dim));
    let mut max_error = 0.0f64;
    for h in 0..heads {
        let kv_head = h / (heads / heads_kv);
        for i in batch.q_range(0) {
            let q_row = |d: usize| value(q[(i * heads + h) * head_dim + d]);
            let kv = |t: &[f16], j: usize, d: usize| value(t[(j * heads_kv + kv_head) * head_dim + d]);
            let scores: Vec<f64> = (0..=i)
                .map(|j| (0..head_dim).map(|d| q_row(d) * kv(&k, j, d)).sum::<f64>() * scale)
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = weights.iter().sum();
            for d in 0..head_dim {
                let expected = (0..=i).map(|j| weights[j] * kv(&v, j, d)).sum::<f64>() / sum;
                let got = value(out[(i * heads + h) * head_dim + d]);
                // `f64::max` would pass over a NaN: an unwritten or non-finite output fails.
                let error = if got.is_finite() {
                    (got - expected).abs()
                } else {
                    f64::INFINITY
                };
                max_error = max_error.max(error);
            }
        }
    }
    println!(
        "varlen {lengths:?} ({total_q} tokens, {heads}/{heads_kv} heads) through {}: sequence 0 max abs error {max_error:.2e}",
        variant.name
    );
    if max_error >= 2e-3 {
        eprintln!("error: sequence 0 differs from the float64 reference by {max_error:e}");
        std::process::exit(1);
    }
    Ok(())
}
