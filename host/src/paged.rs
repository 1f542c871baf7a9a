//! The paged KV cache in the CLI: problems (random page permutations, per-sequence lengths),
//! their float64 verdicts for `verify`, and their timing inputs for `bench`.

use flashrs::{DType, Gpu, Layout, PagedKv, PagedTensors, Params, Shape, VariantSpec};
use flashrs_lab::reference::{self, DTypeTolerance, Dims, ReferenceDims};
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::Failure;

/// One paged decode problem: queries `[B, heads, seq_q, head_dim]`, each sequence's length.
#[derive(Clone, Debug)]
pub struct Problem {
    pub heads: usize,
    pub heads_kv: usize,
    pub seq_q: usize,
    pub head_dim: usize,
    pub block_size: usize,
    pub lens: Vec<i32>,
    pub causal: bool,
    pub dtype: DType,
}

impl Problem {
    /// Batch size, heads, and the lengths, for messages and reports.
    pub fn describe(&self) -> String {
        format!(
            "B={} H={} H_kv={} S_q={} D={} block={} lens={:?}",
            self.lens.len(),
            self.heads,
            self.heads_kv,
            self.seq_q,
            self.head_dim,
            self.block_size,
            self.lens
        )
    }
}

/// Host data of one problem: Q and both caches (dtype bits), the cache's index, and the shape.
pub struct Data {
    pub shape: Shape,
    pub cache: PagedKv,
    pub q: Vec<u16>,
    pub k_cache: Vec<u16>,
    pub v_cache: Vec<u16>,
}

/// Random inputs laid out in a cache of `block_size` pages in a random order (a few pages more
/// than the sequences use, left as NaN: a page read by mistake poisons the output), table
/// entries past a sequence's last page set to -1, and the rows of a sequence's last page past
/// its length NaN too: a kernel that copies whole pages must mask or clear them. With `timing`, values come from a cheap hash
/// instead of normal draws (gigabytes of cache in seconds).
pub fn data(problem: &Problem, seed: u64, timing: bool) -> Result<Data, Failure> {
    let mut rng = StdRng::seed_from_u64(seed);
    let bs = problem.block_size;
    let used: Vec<usize> = problem.lens.iter().map(|&l| (l as usize).div_ceil(bs)).collect();
    let max_blocks = used.iter().copied().max().unwrap_or(0).max(1);
    let num_blocks = used.iter().sum::<usize>() + 3;
    let mut pages: Vec<i32> = (0..num_blocks as i32).collect();
    pages.shuffle(&mut rng);
    let mut table = vec![-1i32; problem.lens.len() * max_blocks];
    let mut next = pages.iter();
    for (b, &n) in used.iter().enumerate() {
        for slot in &mut table[b * max_blocks..][..n] {
            *slot = *next.next().expect("enough pages were made");
        }
    }
    let cache = PagedKv::new(bs, num_blocks, table, problem.lens.clone())?;
    let shape = cache.shape(problem.heads, problem.heads_kv, problem.seq_q, problem.head_dim)?;
    let dtype = problem.dtype;
    let page_elements = bs * problem.heads_kv * problem.head_dim;
    let mut draw = |n: usize| crate::inputs::draw_bits(&mut rng, dtype, n, timing);
    let q = draw(shape.q_len());
    let mut k_cache = draw(num_blocks * page_elements);
    let mut v_cache = draw(num_blocks * page_elements);
    // The pages no sequence uses, and the rest of each sequence's last page: NaN.
    let key_elements = problem.heads_kv * problem.head_dim;
    let unused_pages = next.map(|&page| (page as usize * page_elements, page_elements));
    let page_tails = problem.lens.iter().enumerate().filter_map(|(b, &len)| {
        let (len, last) = (len as usize, used[b].checked_sub(1)?);
        let page = cache.block_table()[b * max_blocks + last] as usize;
        let keys = len - last * bs;
        Some((
            page * page_elements + keys * key_elements,
            (bs - keys) * key_elements,
        ))
    });
    for (start, count) in unused_pages.chain(page_tails) {
        for x in k_cache[start..][..count]
            .iter_mut()
            .chain(v_cache[start..][..count].iter_mut())
        {
            *x = flashrs::gpu::nan(dtype);
        }
    }
    Ok(Data {
        shape,
        cache,
        q,
        k_cache,
        v_cache,
    })
}

/// One paged kernel run against float64.
#[derive(Serialize)]
pub struct Case {
    pub kernel: &'static str,
    pub problem: String,
    pub causal: bool,
    pub dtype: &'static str,
    /// The layout of Q and the output (the cache has its own).
    pub layout: Layout,
    pub splits_max_len: usize,
    pub max_abs_err: f64,
    pub rel_l2_err: f64,
    pub non_finite: usize,
    pub lse_max_abs_err: f64,
    pub pass: bool,
}

/// Runs every runnable `flash_decode` variant's paged entry point on `problem` (fresh inputs
/// from `seed`), with Q and the output in each of `layouts`, and judges output and log-sum-exp
/// against the float64 paged reference.
pub fn check(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    problem: &Problem,
    seed: u64,
    layouts: &[Layout],
    lse_tolerance: f64,
    lse_error: impl Fn(&[f32], &[f64]) -> f64,
) -> Result<Vec<Case>, Failure> {
    let data = data(problem, seed, false)?;
    let shape = data.shape;
    let decode = |x: &[u16]| flashrs::gpu::decode(problem.dtype, x);
    let params = Params {
        causal: problem.causal,
        scale: None,
        ..Params::default()
    };
    let dims = Dims {
        seq_k: 0,
        ..shape.reference_dims()
    };
    let scale = params.scale_for(shape.head_dim) as f64;
    let (reference, reference_lse) = reference::paged_attention_f64(
        &decode(&data.q),
        (&decode(&data.k_cache), &decode(&data.v_cache)),
        &data.cache,
        dims,
        problem.causal,
        scale,
    );
    let mut cases = Vec::new();
    for &variant in variants
        .iter()
        .filter(|v| v.has_paged() && v.head_dims.contains(&shape.head_dim) && v.min_arch <= gpu.arch)
    {
        let kernel = gpu.paged_kernel(variant, shape.head_dim, problem.dtype, false)?;
        for &layout in layouts {
            let mut tensors = upload(gpu, &data, problem.dtype, layout)?;
            gpu.request_paged_lse(&mut tensors)?;
            gpu.launch_paged(&kernel, &mut tensors, params, None)?;
            let (b, h, s, d) = (shape.batch, shape.heads, shape.seq_q, shape.head_dim);
            let out = layout.to_bhsd(&decode(&gpu.download(tensors.out())?), b, h, s, d);
            let lse = gpu.download(tensors.lse().expect("requested above"))?;
            let cmp = reference::compare(&out, &reference);
            let lse_err = lse_error(&lse, &reference_lse);
            cases.push(Case {
                kernel: variant.name,
                problem: problem.describe(),
                causal: problem.causal,
                dtype: problem.dtype.name(),
                layout,
                splits_max_len: shape.seq_k,
                max_abs_err: cmp.max_abs_err,
                rel_l2_err: cmp.rel_l2_err,
                non_finite: cmp.non_finite,
                lse_max_abs_err: lse_err,
                pass: cmp.passes(problem.dtype.tolerance()) && lse_err <= lse_tolerance,
            });
        }
    }
    Ok(cases)
}

/// The problem's tensors on the GPU, Q (and so the output) in `layout`.
pub fn upload(gpu: &Gpu, data: &Data, dtype: DType, layout: Layout) -> Result<PagedTensors, Failure> {
    let shape = data.shape;
    let q = layout.from_bhsd(&data.q, shape.batch, shape.heads, shape.seq_q, shape.head_dim);
    Ok(gpu.paged_tensors(
        layout,
        data.shape,
        dtype,
        &q,
        &data.k_cache,
        &data.v_cache,
        data.cache.clone(),
    )?)
}

/// `verify`'s paged set: block sizes 16, 64 and 256; lengths 0 and 1, page tails, lengths that
/// split; grouped and multi-query heads; causal with `S_q > 1` (also longer than a sequence).
pub fn problems(dtypes: &[DType], masks: &[bool]) -> Vec<Problem> {
    let shapes: [(usize, usize, usize, usize, &[i32]); 6] = [
        (8, 2, 1, 128, &[0, 1, 1000]),
        (4, 4, 1, 64, &[4097, 300]),
        (8, 1, 4, 64, &[7, 0, 64, 513]),
        (32, 8, 1, 128, &[20000]),
        (8, 2, 3, 128, &[2, 17, 3000]),
        (16, 2, 2, 64, &[1, 255, 256, 257]),
    ];
    let mut out = Vec::new();
    for block_size in [16, 64, 256] {
        for &(heads, heads_kv, seq_q, head_dim, lens) in &shapes {
            for &causal in masks {
                for &dtype in dtypes {
                    out.push(Problem {
                        heads,
                        heads_kv,
                        seq_q,
                        head_dim,
                        block_size,
                        lens: lens.to_vec(),
                        causal,
                        dtype,
                    });
                }
            }
        }
    }
    out
}

/// `verify --quick`'s paged set, small enough for compute-sanitizer: a length-0 sequence, a page
/// tail and a split length, grouped heads, in both block sizes the issue names.
pub fn quick_problems(dtypes: &[DType], masks: &[bool]) -> Vec<Problem> {
    let mut out = Vec::new();
    for block_size in [16, 256] {
        for &causal in masks {
            for &dtype in dtypes {
                out.push(Problem {
                    heads: 8,
                    heads_kv: 2,
                    seq_q: 2,
                    head_dim: 64,
                    block_size,
                    lens: vec![0, 17, 1100],
                    causal,
                    dtype,
                });
            }
        }
    }
    out
}

/// The small paged problem whose barriers `verify` counts at run time: two sequences of several
/// KV tiles each (one a page tail), grouped heads.
pub fn barrier_problem(head_dim: usize, dtype: DType) -> Problem {
    Problem {
        heads: 8,
        heads_kv: 2,
        seq_q: 1,
        head_dim,
        block_size: 64,
        lens: vec![700, 333],
        causal: false,
        dtype,
    }
}

/// A random paged problem: 1-6 sequences of 0-5000 keys (0 and 1 often), a random block size,
/// grouped heads with up to 32 packed rows, causal or not.
pub fn random_problem(rng: &mut StdRng) -> Problem {
    let head_dim = if rng.random_bool(0.5) { 64 } else { 128 };
    let heads_kv = *[1usize, 2, 4].choose(rng).expect("non-empty");
    let group = *[1usize, 2, 4, 8].choose(rng).expect("non-empty");
    let seq_q = rng.random_range(1..=(32 / group).min(4));
    let lens = (0..rng.random_range(1..=6))
        .map(|_| match rng.random_range(0..6) {
            0 => 0,
            1 => 1,
            _ => rng.random_range(0..=5000),
        })
        .collect();
    Problem {
        heads: heads_kv * group,
        heads_kv,
        seq_q,
        head_dim,
        block_size: 1 << rng.random_range(4..=8),
        lens,
        causal: rng.random_bool(0.5),
        dtype: if rng.random_bool(0.5) {
            DType::F16
        } else {
            DType::Bf16
        },
    }
}
