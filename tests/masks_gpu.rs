//! GPU tests of the sliding window and the logit softcap in the forward: every built variant on
//! dense problems (prefill-like, S_q < S_k, multi-token decode, head dim 256), the varlen and
//! paged entry points, each against the float64 reference under the same mask
//! (`flashrs_lab::reference::Mask`), outputs NaN-poisoned so that an unwritten element fails.
//! The masks are `backward_check::maskings`: windows narrower and wider than a key tile, left only
//! and both sides, with and without causal, softcaps alone and with causal. `#[ignore]`d like
//! `tests/gpu.rs`: they need an NVIDIA GPU and run there with `--ignored`.

mod common;

use common::{assert_lse, consecutive_pages, gpu, seeded, DenseCase};
use flashrs::api::{
    attention, bf16, f16, paged_attention, varlen_attention, DeviceTensor, LseBuffer, PackedTensor,
    PagedCache,
};
use flashrs::{DType, Error, Gpu, Layout, Shape, VarlenBatch};
use flashrs_lab::backward_check::{maskings, random, widen, Half, Masking};
use flashrs_lab::reference::{self, DTypeTolerance, Dims};
use rand::rngs::StdRng;

/// The dispatch's choice and every built variant that runs here on `shape` under `masking`.
fn dense<T: Half>(gpu: &Gpu, shape: Shape, masking: Masking, rng: &mut StdRng, seed: u64) {
    let layout = if shape.seq_q.is_multiple_of(2) {
        Layout::Bshd
    } else {
        Layout::Bhsd
    };
    let what = format!("on {shape} {} {layout} {masking}, seed {seed}", T::DTYPE);
    DenseCase::<T>::random(shape, layout, masking, rng).check_every_variant(
        gpu,
        |v| v.head_dims.contains(&shape.head_dim) && v.min_arch <= gpu.arch,
        &what,
    );
}

/// Prefill-like, S_q < S_k and S_q > S_k, multi-token decode (grouped), head dims 64 to 256.
fn shapes() -> Vec<Shape> {
    let shape = |batch, heads, heads_kv, seq_q, seq_k, head_dim| Shape {
        batch,
        heads,
        heads_kv,
        seq_q,
        seq_k,
        head_dim,
        head_dim_v: head_dim,
    };
    vec![
        shape(2, 4, 2, 300, 300, 64),
        shape(1, 4, 2, 70, 500, 128),
        shape(1, 2, 2, 333, 200, 128),
        shape(2, 8, 2, 4, 777, 128),
        shape(1, 4, 4, 190, 190, 256),
    ]
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn every_variant_matches_the_reference_under_windows_and_softcaps() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    for shape in shapes() {
        for (i, masking) in maskings().into_iter().enumerate() {
            match i % 2 {
                0 => dense::<f16>(&gpu, shape, masking, &mut rng, seed),
                _ => dense::<bf16>(&gpu, shape, masking, &mut rng, seed),
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn varlen_and_paged_calls_match_the_reference_under_windows_and_softcaps() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    let (heads, heads_kv, d) = (8, 2, 128);
    let scale = 1.0 / (d as f64).sqrt();
    for masking in maskings() {
        // Varlen: an empty sequence, a single row, queries shorter than their keys, a long one.
        let (lens_q, lens_k) = ([17, 0, 300, 1], [40, 5, 300, 1]);
        let batch = VarlenBatch::from_lengths(&lens_q, &lens_k).unwrap();
        let (total_q, total_k) = (batch.total_q(), batch.total_k());
        let q: Vec<f16> = random(total_q * heads * d, &mut rng);
        let k: Vec<f16> = random(total_k * heads_kv * d, &mut rng);
        let v: Vec<f16> = random(total_k * heads_kv * d, &mut rng);
        let dims = Dims {
            batch: 1,
            heads,
            heads_kv,
            seq_q: 0,
            seq_k: 0,
            head_dim: d,
        };
        let (expected, expected_lse) = reference::varlen_attention_f64(
            (&widen(&q), &widen(&k), &widen(&v)),
            &batch,
            dims,
            masking.reference(),
            scale,
        );
        let dq = PackedTensor::from_host(&gpu, &q, [total_q, heads, d]).unwrap();
        let dk = PackedTensor::from_host(&gpu, &k, [total_k, heads_kv, d]).unwrap();
        let dv = PackedTensor::from_host(&gpu, &v, [total_k, heads_kv, d]).unwrap();
        let mut lse = LseBuffer::for_packed(&gpu, &dq).unwrap();
        let out = masked!(varlen_attention(&dq, &dk, &dv, &batch).lse(&mut lse), masking)
            .run(&gpu)
            .unwrap();
        let cmp = reference::compare(&widen(&out.to_host().unwrap()), &expected);
        let what = format!("varlen {masking}, seed {seed}");
        assert!(cmp.passes(DType::F16.tolerance()), "{what}: {cmp:?}");
        assert_lse(&lse, &expected_lse, &what);

        // Paged: lengths from 0, two new tokens per sequence (causal among them).
        let (block_size, seq_q) = (16, 2);
        let lens = [37i32, 1, 0, 64];
        let (cache, pages) = consecutive_pages(&lens, block_size);
        let cache_dims = [pages, block_size, heads_kv, d];
        let cache_len = cache_dims.iter().product();
        let q: Vec<bf16> = random(lens.len() * heads * seq_q * d, &mut rng);
        let k: Vec<bf16> = random(cache_len, &mut rng);
        let v: Vec<bf16> = random(cache_len, &mut rng);
        let dims = Dims {
            batch: lens.len(),
            heads,
            heads_kv,
            seq_q,
            seq_k: 0,
            head_dim: d,
        };
        let (expected, expected_lse) = reference::paged_attention_f64(
            &widen(&q),
            (&widen(&k), &widen(&v)),
            &cache,
            dims,
            masking.reference(),
            scale,
        );
        let dq = DeviceTensor::from_host(&gpu, &q, [lens.len(), heads, seq_q, d], Layout::Bhsd).unwrap();
        let dk = PagedCache::from_host(&gpu, &k, cache_dims).unwrap();
        let dv = PagedCache::from_host(&gpu, &v, cache_dims).unwrap();
        let mut lse = LseBuffer::for_queries(&gpu, &dq).unwrap();
        let out = masked!(paged_attention(&dq, &dk, &dv, &cache).lse(&mut lse), masking)
            .run(&gpu)
            .unwrap();
        let cmp = reference::compare(&widen(&out.to_host().unwrap()), &expected);
        let what = format!("paged {masking}, seed {seed}");
        assert!(cmp.passes(DType::Bf16.tolerance()), "{what}: {cmp:?}");
        assert_lse(&lse, &expected_lse, &what);
    }
}

/// A softcap that is not positive and finite is refused before a launch, as is one for e4m3.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn bad_softcaps_are_refused() {
    let gpu = gpu();
    let (_, mut rng) = seeded();
    let shape = Shape::new(1, 2, 64, 64);
    let q: Vec<f16> = random(shape.q_len(), &mut rng);
    let t = DeviceTensor::from_host(&gpu, &q, shape.q_dims(), Layout::Bhsd).unwrap();
    for cap in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let result = attention(&t, &t, &t).softcap(cap).run(&gpu);
        assert!(matches!(result, Err(Error::InvalidProblem(_))), "softcap {cap}");
    }
}
