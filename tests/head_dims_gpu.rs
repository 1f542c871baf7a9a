//! GPU tests of the padded head dims (`flashrs::problem::kernel_head_dim`): multiples of 8 up to
//! 256 that no kernel is compiled for run on sm_90 on `flash_ws`'s tiles of the next compiled head
//! dim, the copy engine reading the columns past the tensors' as zeros and writing none of the
//! output's past them. Dense calls (both layouts, grouped heads, S_q != S_k, a mask and a softcap,
//! every built `flash_ws` variant of the padding head dim, each into a NaN-poisoned output) and
//! varlen calls against the float64 reference; the paths without padding refuse such a head dim
//! in one line. `#[ignore]`d like `tests/gpu.rs`: they need an NVIDIA GPU and run there with
//! `--ignored`.

mod common;

use common::{assert_lse, gpu, seeded, DenseCase};
use flashrs::api::{attention, bf16, f16, varlen_attention, DeviceTensor, LseBuffer, PackedTensor};
use flashrs::backward::{attention_backward, BackwardOptions};
use flashrs::problem::kernel_head_dim;
use flashrs::{DType, Error, Family, Gpu, Layout, Shape, VarlenBatch};
use flashrs_lab::backward_check::{maskings, random, widen, Half, Masking};
use flashrs_lab::reference::{self, DTypeTolerance, Dims, ReferenceDims};
use rand::rngs::StdRng;

/// Every built `flash_ws` variant of the padding head dim, named, into a NaN-poisoned output
/// (an element left unwritten, or overwritten by a neighbour's padded columns, fails), after the
/// dispatch's choice with the log-sum-exp.
fn dense<T: Half>(gpu: &Gpu, shape: Shape, layout: Layout, masking: Masking, rng: &mut StdRng, seed: u64) {
    let what = format!("on {shape} {} {layout} {masking}, seed {seed}", T::DTYPE);
    let tiles = shape.kernel_head_dim();
    DenseCase::<T>::random(shape, layout, masking, rng).check_every_variant(
        gpu,
        |v| v.family == Family::FlashWs && v.head_dims.contains(&tiles),
        &what,
    );
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
        let case = DenseCase {
            shape: split,
            layout,
            q,
            k,
            v,
            masking: causal.into(),
            sinks: None,
            expected,
            expected_lse: None,
            variants_lse: false,
        };
        let what = format!("on {split} {layout} causal {causal}, seed {seed}");
        case.check_every_variant(
            &gpu,
            |v| v.family == Family::FlashWs && v.head_dims.contains(&shape.kernel_head_dim()),
            &what,
        );
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
