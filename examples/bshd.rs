//! Inputs laid out `[B, S, H, D]` (FlashAttention's convention, and most models' projection
//! output): no transpose, the output comes back in the same layout. Dims are always given in
//! the logical order `[B, H, S, D]`; the layout says how the elements are stored.
//!
//! `cargo run --release --example bshd`

use flashrs::api::{attention, f16, DeviceTensor};
use flashrs::{Gpu, Layout};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn main() -> Result<(), flashrs::Error> {
    let gpu = Gpu::open(0)?;
    let (batch, heads, seq_q, seq_k, head_dim) = (2, 16, 256, 1024, 64);
    let mut rng = StdRng::seed_from_u64(2);
    let mut random = |n: usize| -> Vec<f16> {
        (0..n)
            .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
            .collect()
    };
    // Stored as [B, S, H, D]: element (b, s, h, x) at ((b * S + s) * H + h) * D + x.
    let q_dims = [batch, heads, seq_q, head_dim];
    let kv_dims = [batch, heads, seq_k, head_dim];
    let q = DeviceTensor::from_host(&gpu, &random(q_dims.iter().product()), q_dims, Layout::Bshd)?;
    let k = DeviceTensor::from_host(&gpu, &random(kv_dims.iter().product()), kv_dims, Layout::Bshd)?;
    let v = DeviceTensor::from_host(&gpu, &random(kv_dims.iter().product()), kv_dims, Layout::Bshd)?;

    let out = attention(&q, &k, &v).scale(0.125).run(&gpu)?;

    let host = out.to_host()?;
    // The first position's heads are contiguous in this layout.
    let first_position: f64 = host[..heads * head_dim]
        .iter()
        .map(|x| f64::from(x.to_f32()))
        .sum();
    println!(
        "{} output {:?}: position 0 sums to {first_position:.6} over its {heads} heads",
        out.layout(),
        out.dims()
    );
    Ok(())
}
