//! GPU tests of attention sinks (one logit per query head in each row's softmax denominator,
//! GPT-OSS's): every built variant on dense problems (prefill-like, S_q < S_k, grouped decode
//! with split keys, head dim 256), under no mask, causal, a causal window and a softcap, and the
//! varlen and paged entry points, each against the float64 reference with the sinks joined to
//! its finished rows (`reference::join_sink`); outputs NaN-poisoned so that an unwritten element
//! fails; the log-sum-exp includes the sink. One head's sink is `-inf` (none) and one row set
//! sees no key. `#[ignore]`d like `tests/gpu.rs`: they need an NVIDIA GPU and run there with
//! `--ignored`.

mod common;

use common::{assert_lse, consecutive_pages, gpu, seeded, DenseCase};
use flashrs::api::{
    attention, bf16, f16, paged_attention, varlen_attention, DeviceTensor, LseBuffer, PackedTensor,
    PagedCache, Sinks,
};
use flashrs::{DType, Error, Gpu, Layout, Shape, VarlenBatch};
use flashrs_lab::backward_check::{random, widen, Half, Masking};
use flashrs_lab::reference::{self, DTypeTolerance, Dims};
use rand::rngs::StdRng;
use rand::Rng;

/// One sink per head, from well below to well above a row's log-sum-exp (about 4 to 7 here),
/// head 1's `-inf` (no sink).
fn sinks(heads: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..heads)
        .map(|h| match h {
            1 => f32::NEG_INFINITY,
            _ => rng.random_range(-2.0f32..10.0),
        })
        .collect()
}

/// The reference's rows (`[rows, D]` in row order, `lse[row]` alongside) with each row's head's
/// sink joined; `head_of(row)` names the row's query head.
fn join(out: &mut [f64], lse: &mut [f64], d: usize, sinks: &[f32], head_of: impl Fn(usize) -> usize) {
    for (row, l) in lse.iter_mut().enumerate() {
        reference::join_sink(&mut out[row * d..][..d], l, sinks[head_of(row)] as f64);
    }
}

fn maskings() -> Vec<Masking> {
    let all = flashrs_lab::backward_check::maskings();
    let plain = Masking::default();
    let causal = Masking {
        causal: true,
        ..plain
    };
    // A causal window and a softcap alone, from the masks' own list.
    let window = all.iter().copied().find(|m| m.causal && m.window.is_bounded());
    let softcap = all.iter().copied().find(|m| m.softcap.is_some() && !m.causal);
    [Some(plain), Some(causal), window, softcap]
        .into_iter()
        .flatten()
        .collect()
}

/// The dispatch's choice and every built variant that runs here on `shape` under `masking` with
/// sinks, each checked on the log-sum-exp too.
fn dense<T: Half>(gpu: &Gpu, shape: Shape, masking: Masking, rng: &mut StdRng, seed: u64) {
    let layout = if shape.seq_q.is_multiple_of(2) {
        Layout::Bshd
    } else {
        Layout::Bhsd
    };
    let mut case = DenseCase::<T>::random(shape, layout, masking, rng);
    let logits = sinks(shape.heads, rng);
    // Rows in [B, H, S_q] order.
    let expected_lse = case.expected_lse.as_mut().unwrap();
    join(&mut case.expected, expected_lse, shape.head_dim, &logits, |row| {
        (row / shape.seq_q) % shape.heads
    });
    let device_sinks = Sinks::from_host(gpu, &logits).unwrap();
    case.sinks = Some(&device_sinks);
    case.variants_lse = true;
    let what = format!(
        "on {shape} {} {layout} {masking} with sinks, seed {seed}",
        T::DTYPE
    );
    case.check_every_variant(
        gpu,
        |v| v.head_dims.contains(&shape.head_dim) && v.min_arch <= gpu.arch,
        &what,
    );
}

/// Prefill-like, S_q < S_k, S_q > S_k (rows that see no key under causal), grouped decode over
/// long keys (split into slices: the sink joins once, in the merge), head dims 64 to 256.
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
        shape(2, 8, 2, 1, 6000, 64),
        shape(1, 4, 4, 190, 190, 256),
    ]
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn every_variant_joins_the_sinks_to_the_softmax() {
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
fn varlen_and_paged_calls_join_the_sinks() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    let (heads, heads_kv, d) = (8, 2, 128);
    let scale = 1.0 / (d as f64).sqrt();
    let logits = sinks(heads, &mut rng);
    let device_sinks = Sinks::from_host(&gpu, &logits).unwrap();
    for causal in [false, true] {
        let masking = Masking {
            causal,
            ..Masking::default()
        };
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
        let (mut expected, mut expected_lse) = reference::varlen_attention_f64(
            (&widen(&q), &widen(&k), &widen(&v)),
            &batch,
            dims,
            masking.reference(),
            scale,
        );
        // The output is packed `[total_q, H, D]`, the log-sum-exp `[H, total_q]`.
        for head in 0..heads {
            for row in 0..total_q {
                let at = (row * heads + head) * d;
                let lse = &mut expected_lse[head * total_q + row];
                reference::join_sink(&mut expected[at..at + d], lse, logits[head] as f64);
            }
        }
        let dq = PackedTensor::from_host(&gpu, &q, [total_q, heads, d]).unwrap();
        let dk = PackedTensor::from_host(&gpu, &k, [total_k, heads_kv, d]).unwrap();
        let dv = PackedTensor::from_host(&gpu, &v, [total_k, heads_kv, d]).unwrap();
        let mut lse = LseBuffer::for_packed(&gpu, &dq).unwrap();
        let call = varlen_attention(&dq, &dk, &dv, &batch)
            .lse(&mut lse)
            .sinks(&device_sinks);
        let out = masked!(call, masking).run(&gpu).unwrap();
        let cmp = reference::compare(&widen(&out.to_host().unwrap()), &expected);
        let what = format!("varlen {masking} with sinks, seed {seed}");
        assert!(cmp.passes(DType::F16.tolerance()), "{what}: {cmp:?}");
        assert_lse(&lse, &expected_lse, &what);

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
        let (mut expected, mut expected_lse) = reference::paged_attention_f64(
            &widen(&q),
            (&widen(&k), &widen(&v)),
            &cache,
            dims,
            masking.reference(),
            scale,
        );
        join(&mut expected, &mut expected_lse, d, &logits, |row| {
            (row / seq_q) % heads
        });
        let dq = DeviceTensor::from_host(&gpu, &q, [lens.len(), heads, seq_q, d], Layout::Bhsd).unwrap();
        let dk = PagedCache::from_host(&gpu, &k, cache_dims).unwrap();
        let dv = PagedCache::from_host(&gpu, &v, cache_dims).unwrap();
        let mut lse = LseBuffer::for_queries(&gpu, &dq).unwrap();
        let call = paged_attention(&dq, &dk, &dv, &cache)
            .lse(&mut lse)
            .sinks(&device_sinks);
        let out = masked!(call, masking).run(&gpu).unwrap();
        let cmp = reference::compare(&widen(&out.to_host().unwrap()), &expected);
        let what = format!("paged {masking} with sinks, seed {seed}");
        assert!(cmp.passes(DType::Bf16.tolerance()), "{what}: {cmp:?}");
        assert_lse(&lse, &expected_lse, &what);
    }
}

/// Sinks for another number of heads, and NaN or `+inf` logits, are refused before a launch.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn bad_sinks_are_refused() {
    let gpu = gpu();
    let (_, mut rng) = seeded();
    let shape = Shape::new(1, 4, 64, 64);
    let q: Vec<f16> = random(shape.q_len(), &mut rng);
    let t = DeviceTensor::from_host(&gpu, &q, shape.q_dims(), Layout::Bhsd).unwrap();
    let three = Sinks::from_host(&gpu, &[0.0; 3]).unwrap();
    let result = attention(&t, &t, &t).sinks(&three).run(&gpu);
    assert!(
        matches!(
            result,
            Err(Error::Length {
                what: "sinks",
                expected: 4,
                actual: 3,
                ..
            })
        ),
        "{result:?}"
    );
    for bad in [f32::NAN, f32::INFINITY] {
        let result = Sinks::from_host(&gpu, &[0.0, bad, 0.0, 0.0]);
        assert!(matches!(result, Err(Error::InvalidProblem(_))), "sink {bad}");
    }
    assert!(matches!(
        Sinks::from_host(&gpu, &[]),
        Err(Error::InvalidProblem(_))
    ));
}
