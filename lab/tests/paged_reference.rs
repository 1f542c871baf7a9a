//! The paged float64 reference (`reference::paged_attention_f64`) against the contiguous one: a
//! paged cache is only a different address for the same keys.

use flashrs::PagedKv;
use flashrs_lab::reference::{self, Dims};

/// A small deterministic generator: the tests need no seed plumbing.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn value(&mut self) -> f32 {
        (self.next() % 2001) as f32 / 1000.0 - 1.0
    }
}

/// Contiguous K `[B, H_kv, L, D]` scattered into a cache of shuffled pages (plus unused ones),
/// with the table that finds them again.
fn scatter(k: &[f32], dims: Dims, block_size: usize, lens: &[i32], rng: &mut Lcg) -> (Vec<f32>, PagedKv) {
    let (b_count, h_kv, l, d) = (dims.batch, dims.heads_kv, dims.seq_k, dims.head_dim);
    let max_blocks = l.div_ceil(block_size);
    let num_blocks = b_count * max_blocks + 3;
    let mut pages: Vec<usize> = (0..num_blocks).collect();
    for i in (1..pages.len()).rev() {
        pages.swap(i, rng.next() as usize % (i + 1));
    }
    let table: Vec<i32> = pages[..b_count * max_blocks].iter().map(|&p| p as i32).collect();
    let mut cache = vec![f32::NAN; num_blocks * block_size * h_kv * d];
    for b in 0..b_count {
        for key in 0..l {
            let slot = table[b * max_blocks + key / block_size] as usize * block_size + key % block_size;
            for h in 0..h_kv {
                let src = &k[((b * h_kv + h) * l + key) * d..][..d];
                cache[(slot * h_kv + h) * d..][..d].copy_from_slice(src);
            }
        }
    }
    (
        cache,
        PagedKv::new(block_size, num_blocks, table, lens.to_vec()).unwrap(),
    )
}

/// The paged reference equals the contiguous one on the same keys: the whole batch at full
/// length, and each sequence alone at its own length (0 and 1 included), causal or not.
#[test]
fn the_paged_reference_equals_the_contiguous_one() {
    let mut rng = Lcg(7);
    for (block_size, seq_q, heads, heads_kv) in [(16, 1, 4, 2), (64, 3, 4, 1), (256, 2, 2, 2)] {
        let dims = Dims {
            batch: 3,
            heads,
            heads_kv,
            seq_q,
            seq_k: 300,
            head_dim: 8,
        };
        let q: Vec<f32> = (0..dims.batch * heads * seq_q * 8).map(|_| rng.value()).collect();
        let k: Vec<f32> = (0..dims.batch * heads_kv * 300 * 8)
            .map(|_| rng.value())
            .collect();
        let v: Vec<f32> = (0..k.len()).map(|_| rng.value()).collect();
        for lens in [[300, 300, 300], [0, 1, 257]] {
            let (k_cache, cache) = scatter(&k, dims, block_size, &lens, &mut Lcg(lens[1] as u64));
            let (v_cache, _) = scatter(&v, dims, block_size, &lens, &mut Lcg(lens[1] as u64));
            for causal in [false, true] {
                let (out, lse) =
                    reference::paged_attention_f64(&q, (&k_cache, &v_cache), &cache, dims, causal, 0.4);
                for b in 0..dims.batch {
                    let len = lens[b] as usize;
                    let take = |x: &[f32]| -> Vec<f32> {
                        (0..heads_kv)
                            .flat_map(|h| x[((b * heads_kv + h) * 300) * 8..][..len * 8].to_vec())
                            .collect()
                    };
                    let one = Dims {
                        batch: 1,
                        seq_k: len,
                        ..dims
                    };
                    let rows = heads * seq_q;
                    let qb = &q[b * rows * 8..][..rows * 8];
                    let expected = reference::attention_f64(qb, &take(&k), &take(&v), one, causal, 0.4);
                    assert_eq!(
                        &out[b * rows * 8..][..rows * 8],
                        &expected[..],
                        "b {b} lens {lens:?}"
                    );
                    let expected_lse = reference::log_sum_exp_f64(qb, &take(&k), one, causal, 0.4);
                    assert_eq!(&lse[b * rows..][..rows], &expected_lse[..]);
                }
                if lens[0] == 300 {
                    let whole = reference::attention_f64(&q, &k, &v, dims, causal, 0.4);
                    assert_eq!(out, whole, "block size {block_size} causal {causal}");
                }
            }
        }
    }
}
