//! GPU tests of the padded head dims (`flashrs::problem::kernel_head_dim`): multiples of 8 up to
//! 256 that no kernel is compiled for run on sm_90 on `flash_ws`'s tiles of the next compiled head
//! dim, the copy engine reading the columns past the tensors' as zeros and writing none of the
//! output's past them. Dense calls (both layouts, grouped heads, S_q != S_k, a mask and a softcap,
//! every built `flash_ws` variant of the padding head dim, each into a NaN-poisoned output) and
//! varlen calls against the float64 reference; the paths without padding refuse such a head dim
//! in one line. `#[ignore]`d like `tests/gpu.rs`: they need an NVIDIA GPU and run there with
//! `--ignored`.

mod common;

use common::{assert_lse, gpu, refused, seeded};
use flashrs::api::{attention, bf16, f16, varlen_attention, DeviceTensor, LseBuffer, PackedTensor};
use flashrs::backward::{attention_backward, BackwardOptions};
use flashrs::problem::kernel_head_dim;
use flashrs::{DType, Error, Family, Gpu, Layout, Shape, VarlenBatch};
use flashrs_lab::backward_check::{maskings, random, widen, Half, Masking};
use flashrs_lab::reference::{self, DTypeTolerance, Dims, ReferenceDims};
use rand::rngs::StdRng;

/// The output of `out` in `[B, H, S, D]` order, checked against `expected`.
fn check<T: Half>(out: &DeviceTensor<T>, shape: Shape, layout: Layout, expected: &[f64], what: &str) {
    let host = layout.to_bhsd(
        &out.to_host().unwrap(),
        shape.batch,
        shape.heads,
        shape.seq_q,
        shape.head_dim_v,
    );
    let cmp = reference::compare(&widen(&host), expected);
    assert!(cmp.passes(T::DTYPE.tolerance()), "{what}: {cmp:?}");
}

fn dense<T: Half>(gpu: &Gpu, shape: Shape, layout: Layout, masking: Masking, rng: &mut StdRng, seed: u64) {
    let (q, k, v): (Vec<T>, Vec<T>, Vec<T>) = (
        random(shape.q_len(), rng),
        random(shape.kv_len(), rng),
        random(shape.kv_len(), rng),
    );
    let scale = 1.0 / (shape.head_dim as f64).sqrt();
    let dims = shape.reference_dims();
    let (qf, kf, vf) = (widen(&q), widen(&k), widen(&v));
    let expected = reference::attention_f64(&qf, &kf, &vf, dims, masking.reference(), scale);
    let expected_lse = reference::log_sum_exp_f64(&qf, &kf, dims, masking.reference(), scale);
    let upload = |data: &[T], [b, h, s, d]: [usize; 4]| {
        DeviceTensor::from_host(gpu, &layout.from_bhsd(data, b, h, s, d), [b, h, s, d], layout).unwrap()
    };
    let (dq, dk, dv) = (
        upload(&q, shape.q_dims()),
        upload(&k, shape.kv_dims()),
        upload(&v, shape.kv_dims()),
    );
    let what = |name: &str| format!("{name} on {shape} {} {layout} {masking}, seed {seed}", T::DTYPE);
    // The dispatch's choice, with the log-sum-exp.
    let mut lse = LseBuffer::for_queries(gpu, &dq).unwrap();
    let out = masked!(attention(&dq, &dk, &dv).lse(&mut lse), masking)
        .run(gpu)
        .unwrap();
    check(&out, shape, layout, &expected, &what("dispatch"));
    assert_lse(&lse, &expected_lse, &what("dispatch"));
    // Every built flash_ws variant of the padding head dim, named, into a NaN-poisoned output:
    // an element left unwritten, or overwritten by a neighbour's padded columns, fails.
    let tiles = shape.kernel_head_dim();
    let mut ran = 0;
    for variant in flashrs::variants::built(flashrs::VARIANTS)
        .filter(|v| v.family == Family::FlashWs && v.head_dims.contains(&tiles))
    {
        let mut into =
            DeviceTensor::from_host(gpu, &vec![T::nan(); shape.q_len()], shape.q_dims(), layout).unwrap();
        match masked!(attention(&dq, &dk, &dv).kernel(variant), masking).run_into(gpu, &mut into) {
            Ok(_) => {
                check(&into, shape, layout, &expected, &what(variant.name));
                ran += 1;
            }
            Err(e) if refused(&e) => {}
            Err(e) => panic!("{}: {e}", what(variant.name)),
        }
    }
    assert!(ran > 0, "{}: no variant ran", what("variants"));
}

/// Head dims below, between and above the compiled ones, with grouped heads and S_q != S_k.
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
        shape(2, 4, 2, 300, 300, 96),
        shape(1, 4, 1, 70, 500, 96),
        shape(1, 2, 2, 333, 200, 192),
        shape(2, 8, 2, 4, 777, 192),
        shape(1, 4, 4, 190, 190, 8),
        shape(1, 4, 2, 129, 260, 40),
        shape(1, 4, 2, 65, 300, 72),
        shape(1, 2, 1, 200, 200, 136),
        shape(1, 2, 2, 100, 150, 248),
    ]
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn padded_head_dims_match_the_reference_on_every_flash_ws_variant() {
    let gpu = gpu();
    assert!(gpu.arch >= 90, "padded head dims run on sm_90's flash_ws");
    let (seed, mut rng) = seeded();
    let masks = maskings();
    for (i, shape) in shapes().into_iter().enumerate() {
        assert!(shape.padded_head_dim() && kernel_head_dim(shape.head_dim).is_some());
        let layout = [Layout::Bhsd, Layout::Bshd][i % 2];
        // Two of the masks per shape, turn about (none and causal first).
        for masking in [masks[i % masks.len()], masks[(i + 1) % masks.len()]] {
            match i % 2 {
                0 => dense::<bf16>(&gpu, shape, layout, masking, &mut rng, seed),
                _ => dense::<f16>(&gpu, shape, layout, masking, &mut rng, seed),
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn varlen_calls_take_padded_head_dims() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    let (heads, heads_kv) = (8, 2);
    for (d, masking) in [(96, maskings()[0]), (192, maskings()[1]), (40, maskings()[2])] {
        let scale = 1.0 / (d as f64).sqrt();
        // An empty sequence, a single row, queries shorter than their keys, a long one.
        let (lens_q, lens_k) = ([17, 0, 300, 1], [40, 5, 300, 1]);
        let batch = VarlenBatch::from_lengths(&lens_q, &lens_k).unwrap();
        let (total_q, total_k) = (batch.total_q(), batch.total_k());
        let q: Vec<bf16> = random(total_q * heads * d, &mut rng);
        let k: Vec<bf16> = random(total_k * heads_kv * d, &mut rng);
        let v: Vec<bf16> = random(total_k * heads_kv * d, &mut rng);
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
        let what = format!("varlen d{d} {masking}, seed {seed}");
        assert!(cmp.passes(DType::Bf16.tolerance()), "{what}: {cmp:?}");
        assert_lse(&lse, &expected_lse, &what);
    }
}

/// V with a head dim of its own below Q's and K's (DeepSeek's MLA prefill: 192 and 128; also
/// 128 and 64, both compiled): the reference on V with zero columns up to Q's head dim, its
/// output's first `D_v` columns; the dispatch's pick and every built `flash_ws` variant.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn v_head_dims_of_their_own_match_the_reference() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    for (i, (shape, dv)) in [
        (Shape::new(2, 8, 300, 192).with_heads_kv(2), 128),
        (
            Shape {
                seq_k: 777,
                ..Shape::new(1, 4, 65, 128)
            },
            64,
        ),
        (Shape::new(1, 2, 200, 96), 40),
    ]
    .into_iter()
    .enumerate()
    {
        let layout = [Layout::Bshd, Layout::Bhsd][i % 2];
        let causal = i != 1;
        let split = shape.with_head_dim_v(dv);
        let q: Vec<bf16> = random(shape.q_len(), &mut rng);
        let k: Vec<bf16> = random(shape.kv_len(), &mut rng);
        let v: Vec<bf16> = random(split.v_len(), &mut rng);
        // V with zero columns up to Q's head dim, for the reference of one head dim.
        let d = shape.head_dim;
        let mut v_wide = vec![0.0f32; shape.kv_len()];
        for (row, values) in widen(&v).chunks(dv).enumerate() {
            v_wide[row * d..row * d + dv].copy_from_slice(values);
        }
        let dims = shape.reference_dims();
        let scale = 1.0 / (d as f64).sqrt();
        let wide = reference::attention_f64(&widen(&q), &widen(&k), &v_wide, dims, causal, scale);
        let expected: Vec<f64> = wide.chunks(d).flat_map(|row| row[..dv].to_vec()).collect();
        let upload = |data: &[bf16], [b, h, s, d]: [usize; 4]| {
            DeviceTensor::from_host(&gpu, &layout.from_bhsd(data, b, h, s, d), [b, h, s, d], layout).unwrap()
        };
        let (dq, dk, dvt) = (
            upload(&q, split.q_dims()),
            upload(&k, split.kv_dims()),
            upload(&v, split.v_dims()),
        );
        let what = |name: &str| format!("{name} on {split} {layout} causal {causal}, seed {seed}");
        let out = attention(&dq, &dk, &dvt).causal(causal).run(&gpu).unwrap();
        assert_eq!(out.dims(), split.out_dims());
        check(&out, split, layout, &expected, &what("dispatch"));
        let mut ran = 0;
        for variant in flashrs::variants::built(flashrs::VARIANTS)
            .filter(|v| v.family == Family::FlashWs && v.head_dims.contains(&shape.kernel_head_dim()))
        {
            let poison = vec![bf16::nan(); split.out_len()];
            let mut into = DeviceTensor::from_host(&gpu, &poison, split.out_dims(), layout).unwrap();
            match attention(&dq, &dk, &dvt)
                .causal(causal)
                .kernel(variant)
                .run_into(&gpu, &mut into)
            {
                Ok(_) => {
                    check(&into, split, layout, &expected, &what(variant.name));
                    ran += 1;
                }
                Err(e) if refused(&e) => {}
                Err(e) => panic!("{}: {e}", what(variant.name)),
            }
        }
        assert!(ran > 0, "{}: no variant ran", what("variants"));
    }
}

/// What cannot pad refuses a padded head dim in one line before any launch: another family's
/// kernel named for it, and the backward.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn paths_without_padding_refuse_it() {
    let gpu = gpu();
    let (_, mut rng) = seeded();
    let shape = Shape::new(1, 2, 64, 96);
    let q: Vec<f16> = random(shape.q_len(), &mut rng);
    let t = DeviceTensor::from_host(&gpu, &q, shape.q_dims(), Layout::Bhsd).unwrap();
    let mma = flashrs::variants::built(flashrs::VARIANTS)
        .find(|v| v.family == Family::FlashMma)
        .unwrap();
    let error = attention(&t, &t, &t).kernel(mma).run(&gpu).unwrap_err();
    assert!(matches!(error, Error::InvalidProblem(_)), "{error}");
    assert_eq!(error.to_string().lines().count(), 1);
    let mut lse = LseBuffer::for_queries(&gpu, &t).unwrap();
    let out = attention(&t, &t, &t).lse(&mut lse).run(&gpu).unwrap();
    match attention_backward(&gpu, [&t, &t, &t], &out, &lse, &t, BackwardOptions::default()) {
        Err(Error::UnsupportedHeadDim(96, _)) => {}
        Err(other) => panic!("the backward at head dim 96: {other}"),
        Ok(_) => panic!("the backward ran at head dim 96"),
    }
}
