//! What the masks', the sinks' and the head dims' GPU tests share: the GPU, a printed seed, the
//! log-sum-exp check, which errors are a variant's refusal, the builder under a `Masking`, a paged
//! cache whose sequences take consecutive pages, and a dense problem checked on the dispatch's
//! choice and every variant tried ([`DenseCase::check_every_variant`]).
// Each test crate compiles this module and uses part of it.
#![allow(dead_code)]

use flashrs::api::{attention, Attention, DeviceTensor, LseBuffer, Sinks};
use flashrs::{Error, Gpu, Layout, PagedKv, Shape, VariantSpec};
use flashrs_lab::backward_check::{random, widen, Half, Masking};
use flashrs_lab::reference::{self, DTypeTolerance, ReferenceDims};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub fn gpu() -> Gpu {
    Gpu::open_with(0, flashrs::GpuOptions::from_env())
        .unwrap_or_else(|e| panic!("these tests need a GPU: {e}"))
}

pub fn seeded() -> (u64, StdRng) {
    let seed = rand::rng().random();
    println!("seed {seed}");
    (seed, StdRng::seed_from_u64(seed))
}

/// Every row of `lse` within 1e-3 of the reference's, or equal to it (`-inf` for a row that sees
/// no key).
pub fn assert_lse(lse: &LseBuffer, expected: &[f64], what: &str) {
    let rows = lse.to_host().unwrap();
    assert_eq!(rows.len(), expected.len(), "{what}");
    for (row, (&a, &r)) in rows.iter().zip(expected).enumerate() {
        let ok = (a as f64 == r) || (a as f64 - r).abs() <= 1e-3;
        assert!(ok, "{what}: lse row {row}: {a} vs {r}");
    }
}

/// Whether an error is a refusal of the problem by a named kernel (not every variant takes every
/// shape: a decode variant takes few query rows per KV head).
pub fn refused(error: &Error) -> bool {
    matches!(
        error,
        Error::InvalidProblem(_) | Error::Incompatible(_) | Error::UnsupportedHeadDim(..)
    )
}

/// The builder with `masking`'s mask and softcap.
#[macro_export]
macro_rules! masked {
    ($call:expr, $masking:expr) => {{
        let m: flashrs_lab::backward_check::Masking = $masking;
        let call = $call.causal(m.causal).window(m.window.left, m.window.right);
        match m.softcap {
            Some(cap) => call.softcap(cap),
            None => call,
        }
    }};
}

/// A cache of `block_size`-key pages for sequences of `lens` keys, each on consecutive pages from
/// the first free one (table rows of 4 pages), with 3 pages to spare: `(cache, pages)`.
pub fn consecutive_pages(lens: &[i32], block_size: usize) -> (PagedKv, usize) {
    let pages_of = |l: i32| (l as usize).div_ceil(block_size);
    let pages: usize = lens.iter().map(|&l| pages_of(l)).sum::<usize>() + 3;
    let mut table = vec![0i32; lens.len() * 4];
    let mut next = 0;
    for (b, &l) in lens.iter().enumerate() {
        for p in 0..pages_of(l) {
            table[b * 4 + p] = next;
            next += 1;
        }
    }
    (
        PagedKv::new(block_size, pages, table, lens.to_vec()).unwrap(),
        pages,
    )
}

/// A dense problem, its float64 reference and the options of every call on it, for
/// [`DenseCase::check_every_variant`].
pub struct DenseCase<'a, T: Half> {
    /// The problem; V's head dim (and the output's) may be below Q's and K's.
    pub shape: Shape,
    /// Q's, K's, V's and the outputs' layout.
    pub layout: Layout,
    /// Q, `[B, H, S_q, D]` order.
    pub q: Vec<T>,
    /// K, `[B, H_kv, S_k, D]` order.
    pub k: Vec<T>,
    /// V, `[B, H_kv, S_k, D_v]` order.
    pub v: Vec<T>,
    /// The mask and softcap of every call.
    pub masking: Masking,
    /// Attention sinks every call takes, if any.
    pub sinks: Option<&'a Sinks>,
    /// The reference output, `[B, H, S_q, D_v]` order.
    pub expected: Vec<f64>,
    /// The reference log-sum-exp, `[B, H, S_q]`: where given, the dispatch's call writes one and
    /// is checked on it; where not, no call asks for one.
    pub expected_lse: Option<Vec<f64>>,
    /// Whether each named variant writes the log-sum-exp too and is checked on it.
    pub variants_lse: bool,
}

impl<'a, T: Half> DenseCase<'a, T> {
    /// Q, K and V of `shape` (one head dim for all three) drawn from `rng` in that order, and the
    /// reference's output and log-sum-exp under `masking` at the scale `1 / sqrt(D)`; no sinks,
    /// the log-sum-exp asked of the dispatch's call only.
    pub fn random(shape: Shape, layout: Layout, masking: Masking, rng: &mut StdRng) -> Self {
        assert!(
            !shape.split_head_dims(),
            "{shape}: the reference here takes one head dim"
        );
        let (q, k, v): (Vec<T>, Vec<T>, Vec<T>) = (
            random(shape.q_len(), rng),
            random(shape.kv_len(), rng),
            random(shape.v_len(), rng),
        );
        let scale = 1.0 / (shape.head_dim as f64).sqrt();
        let dims = shape.reference_dims();
        let (qf, kf, vf) = (widen(&q), widen(&k), widen(&v));
        let expected = reference::attention_f64(&qf, &kf, &vf, dims, masking.reference(), scale);
        let expected_lse = reference::log_sum_exp_f64(&qf, &kf, dims, masking.reference(), scale);
        DenseCase {
            shape,
            layout,
            q,
            k,
            v,
            masking,
            sinks: None,
            expected,
            expected_lse: Some(expected_lse),
            variants_lse: false,
        }
    }

    /// Uploads Q, K and V in the case's layout and checks against the reference (the type's
    /// tolerance; the log-sum-exp within 1e-3 where asked for) first the dispatch's choice (its
    /// output of `[B, H, S_q, D_v]` dims), then every built variant that `tried` takes, named,
    /// each into a NaN-poisoned output so that an element left unwritten fails. A variant that
    /// refuses the problem with a typed refusal ([`refused`]) is skipped, any other error fails,
    /// and so does no variant running. Failures name the call, then `what`.
    pub fn check_every_variant(&self, gpu: &Gpu, tried: impl Fn(&VariantSpec) -> bool, what: &str) {
        let (shape, layout) = (self.shape, self.layout);
        let what = |name: &str| format!("{name} {what}");
        let upload = |data: &[T], [b, h, s, d]: [usize; 4]| {
            DeviceTensor::from_host(gpu, &layout.from_bhsd(data, b, h, s, d), [b, h, s, d], layout).unwrap()
        };
        let (dq, dk, dv) = (
            upload(&self.q, shape.q_dims()),
            upload(&self.k, shape.kv_dims()),
            upload(&self.v, shape.v_dims()),
        );
        let check = |out: &DeviceTensor<T>, lse: Option<&LseBuffer>, name: &str| {
            let host = layout.to_bhsd(
                &out.to_host().unwrap(),
                shape.batch,
                shape.heads,
                shape.seq_q,
                shape.head_dim_v,
            );
            let cmp = reference::compare(&widen(&host), &self.expected);
            assert!(cmp.passes(T::DTYPE.tolerance()), "{}: {cmp:?}", what(name));
            if let Some(lse) = lse {
                let expected = self
                    .expected_lse
                    .as_deref()
                    .expect("a log-sum-exp to check against");
                assert_lse(lse, expected, &what(name));
            }
        };
        let mut lse = self
            .expected_lse
            .as_ref()
            .map(|_| LseBuffer::for_queries(gpu, &dq).unwrap());
        let out = self
            .options(attention(&dq, &dk, &dv), lse.as_mut())
            .run(gpu)
            .unwrap();
        assert_eq!(out.dims(), shape.out_dims(), "{}", what("dispatch"));
        check(&out, lse.as_ref(), "dispatch");
        let mut ran = 0;
        for variant in flashrs::variants::built(flashrs::VARIANTS).filter(|v| tried(v)) {
            let mut into =
                DeviceTensor::from_host(gpu, &vec![T::nan(); shape.out_len()], shape.out_dims(), layout)
                    .unwrap();
            let mut lse = self
                .variants_lse
                .then(|| LseBuffer::for_queries(gpu, &dq).unwrap());
            let call = self.options(attention(&dq, &dk, &dv).kernel(variant), lse.as_mut());
            match call.run_into(gpu, &mut into) {
                Ok(_) => {
                    check(&into, lse.as_ref(), variant.name);
                    ran += 1;
                }
                Err(e) if refused(&e) => {}
                Err(e) => panic!("{}: {e}", what(variant.name)),
            }
        }
        assert!(ran > 0, "{}: no variant ran", what("variants"));
    }

    /// `call` writing the log-sum-exp into `lse` where given, with the case's sinks, mask and
    /// softcap.
    fn options<'c>(&'c self, call: Attention<'c, T>, lse: Option<&'c mut LseBuffer>) -> Attention<'c, T> {
        let call = match lse {
            Some(lse) => call.lse(lse),
            None => call,
        };
        let call = match self.sinks {
            Some(sinks) => call.sinks(sinks),
            None => call,
        };
        masked!(call, self.masking)
    }
}
