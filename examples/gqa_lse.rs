//! Grouped-query attention in bf16: 8 query heads share 2 key/value heads, and each query row's
//! log-sum-exp comes back too (what a backward pass or a merge of partial attentions needs).
//!
//! `cargo run --release --example gqa_lse`

use flashrs::api::{attention, bf16, DeviceTensor, LseBuffer};
use flashrs::{Gpu, Layout};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn main() -> Result<(), flashrs::Error> {
    let gpu = Gpu::open(0)?;
    let (batch, heads, heads_kv, seq, head_dim) = (1, 8, 2, 1024, 128);
    let mut rng = StdRng::seed_from_u64(1);
    let mut random = |n: usize| -> Vec<bf16> {
        (0..n)
            .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
            .collect()
    };
    let q_dims = [batch, heads, seq, head_dim];
    let kv_dims = [batch, heads_kv, seq, head_dim];
    let q = DeviceTensor::from_host(&gpu, &random(q_dims.iter().product()), q_dims, Layout::Bhsd)?;
    let k = DeviceTensor::from_host(&gpu, &random(kv_dims.iter().product()), kv_dims, Layout::Bhsd)?;
    let v = DeviceTensor::from_host(&gpu, &random(kv_dims.iter().product()), kv_dims, Layout::Bhsd)?;
    let mut lse = LseBuffer::for_queries(&gpu, &q)?; // [B, H, S_q]

    let out = attention(&q, &k, &v).causal(true).lse(&mut lse).run(&gpu)?;

    let out = out.to_host()?;
    let lse = lse.to_host()?;
    let checksum: f64 = out.iter().map(|x| f64::from(x.to_f32())).sum();
    let mean_lse = lse.iter().map(|&x| f64::from(x)).sum::<f64>() / lse.len() as f64;
    println!("gqa {heads}/{heads_kv} heads: checksum {checksum:.6}, mean log-sum-exp {mean_lse:.6}");
    Ok(())
}
