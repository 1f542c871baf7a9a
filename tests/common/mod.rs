//! What the masks' and the sinks' GPU tests share: the GPU, a printed seed, the log-sum-exp check,
//! which errors are a variant's refusal, the builder under a `Masking`, and a paged cache whose
//! sequences take consecutive pages.
// Each test crate compiles this module and uses part of it.
#![allow(dead_code)]

use flashrs::api::LseBuffer;
use flashrs::{Error, Gpu, PagedKv};
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
