//! Timing statistics: order statistics of a run, and a bootstrap confidence interval for the
//! speedup of one implementation over another.
//!
//! A broken measurement must not be summarised into a plausible number, so every function returns
//! `None` for no samples or any non-finite one, rather than a NaN that sorts somewhere arbitrary.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Order statistics and the mean of a set of timings (in whatever unit the samples are).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// The smallest sample.
    pub min: f64,
    /// The median (50th percentile).
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The arithmetic mean.
    pub mean: f64,
    /// The largest sample.
    pub max: f64,
}

impl Summary {
    /// `None` for no samples or any NaN or infinite sample. Percentiles interpolate linearly
    /// between order statistics (numpy's default method).
    pub fn from_samples(samples: &[f64]) -> Option<Summary> {
        let sorted = sorted(samples)?;
        Some(Summary {
            n: sorted.len(),
            min: sorted[0],
            p50: percentile(&sorted, 0.50),
            p90: percentile(&sorted, 0.90),
            p99: percentile(&sorted, 0.99),
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            max: sorted[sorted.len() - 1],
        })
    }
}

/// The samples in ascending order, `None` if there are none or any is not finite.
fn sorted(samples: &[f64]) -> Option<Vec<f64>> {
    if samples.is_empty() || !samples.iter().all(|x| x.is_finite()) {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    Some(v)
}

/// The `q` quantile (0..=1) of non-empty ascending `sorted`, interpolating linearly between the
/// two order statistics around position `q * (n - 1)`.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let position = q * (sorted.len() - 1) as f64;
    let low = position.floor() as usize;
    let high = (low + 1).min(sorted.len() - 1);
    sorted[low] + (sorted[high] - sorted[low]) * (position - low as f64)
}

/// The median (the mean of the middle two for an even count); `None` for no samples or any
/// non-finite one.
pub fn median(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() || !samples.iter().all(|x| x.is_finite()) {
        return None;
    }
    Some(median_in_place(&mut samples.to_vec()))
}

/// The median of non-empty, finite `xs`, reordering them. Selection instead of a full sort keeps
/// a bootstrap of many resamples linear in the sample count; the arithmetic is the same as
/// `percentile(sorted, 0.5)`, so both give bit-identical results.
fn median_in_place(xs: &mut [f64]) -> f64 {
    let odd = xs.len() % 2 == 1;
    let (below, &mut upper, _) = xs.select_nth_unstable_by(xs.len() / 2, f64::total_cmp);
    if odd {
        return upper;
    }
    let lower = below.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    lower + (upper - lower) * 0.5
}

/// 95% percentile-bootstrap confidence interval of `median(baseline) / median(candidate)`, a
/// speedup: above 1 means the candidate is faster. Each resample draws both lists with
/// replacement (each at its own size); the interval is the 2.5th and 97.5th percentiles of the
/// `resamples` ratios. The RNG is seeded, so a report can be reproduced exactly (for a given
/// version of `rand`, whose `StdRng` algorithm may change between releases).
///
/// `None` if either list is empty, any sample is not finite and positive (a duration of zero or
/// less means a broken timer and makes the ratio meaningless), or `resamples` is 0.
pub fn bootstrap_speedup_ci(
    baseline: &[f64],
    candidate: &[f64],
    resamples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    let valid = |xs: &[f64]| !xs.is_empty() && xs.iter().all(|x| x.is_finite() && *x > 0.0);
    if !valid(baseline) || !valid(candidate) || resamples == 0 {
        return None;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    // One buffer per list, reused by every resample.
    let (mut base_buf, mut cand_buf) = (Vec::new(), Vec::new());
    let mut resampled_median = |xs: &[f64], buf: &mut Vec<f64>| {
        buf.clear();
        buf.extend((0..xs.len()).map(|_| xs[rng.random_range(0..xs.len())]));
        median_in_place(buf)
    };
    let mut ratios: Vec<f64> = (0..resamples)
        .map(|_| resampled_median(baseline, &mut base_buf) / resampled_median(candidate, &mut cand_buf))
        .collect();
    ratios.sort_by(f64::total_cmp);
    Some((percentile(&ratios, 0.025), percentile(&ratios, 0.975)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` samples spread evenly over `centre ± spread / 2`, in a scrambled order.
    fn spread(n: usize, centre: f64, spread: f64) -> Vec<f64> {
        (0..n)
            .map(|i| centre + spread * (((i * 7919) % n) as f64 / n as f64 - 0.5))
            .collect()
    }

    #[test]
    fn percentiles_of_known_data() {
        // 101 values, 1..=101 in reverse: the q quantile is exactly 1 + 100 q.
        let data: Vec<f64> = (1..=101).rev().map(f64::from).collect();
        let s = Summary::from_samples(&data).unwrap();
        assert_eq!(
            (s.n, s.min, s.p50, s.p90, s.p99, s.mean, s.max),
            (101, 1.0, 51.0, 91.0, 100.0, 51.0, 101.0)
        );
        // Four values: positions 1.5, 2.7 and 2.97 interpolate between order statistics.
        let s = Summary::from_samples(&[40.0, 10.0, 30.0, 20.0]).unwrap();
        assert_eq!((s.min, s.p50, s.mean, s.max), (10.0, 25.0, 25.0, 40.0));
        assert!(
            (s.p90 - 37.0).abs() < 1e-12 && (s.p99 - 39.7).abs() < 1e-12,
            "{s:?}"
        );
        // One value is every statistic.
        let s = Summary::from_samples(&[7.5]).unwrap();
        assert_eq!(
            (s.n, s.min, s.p50, s.p99, s.max, s.mean),
            (1, 7.5, 7.5, 7.5, 7.5, 7.5)
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0]), Some(2.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[5.0]), Some(5.0));
        assert_eq!(median(&[4.0, 4.0, 1.0, 9.0]), Some(4.0));
        // Selection agrees bit for bit with interpolation on the sorted samples.
        for n in 1..40 {
            let xs = spread(n, 3.0, 1.7);
            assert_eq!(median(&xs), Summary::from_samples(&xs).map(|s| s.p50), "n = {n}");
        }
    }

    #[test]
    fn broken_samples_are_not_summarised() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(Summary::from_samples(&[1.0, bad]).is_none());
            assert!(median(&[bad, 1.0, 2.0]).is_none());
            assert!(bootstrap_speedup_ci(&[1.0, bad], &[1.0], 10, 1).is_none());
            assert!(bootstrap_speedup_ci(&[1.0], &[bad], 10, 1).is_none());
        }
        assert!(Summary::from_samples(&[]).is_none());
        assert!(median(&[]).is_none());
        assert!(bootstrap_speedup_ci(&[], &[1.0], 10, 1).is_none());
        assert!(bootstrap_speedup_ci(&[1.0], &[], 10, 1).is_none());
        assert!(bootstrap_speedup_ci(&[1.0], &[0.0, 1.0], 10, 1).is_none());
        assert!(bootstrap_speedup_ci(&[-1.0], &[1.0], 10, 1).is_none());
        assert!(bootstrap_speedup_ci(&[1.0], &[1.0], 0, 1).is_none());
    }

    #[test]
    fn bootstrap_interval_brackets_the_estimate() {
        // Baseline around 10, candidate around 5: a speedup of 2.
        let (baseline, candidate) = (spread(200, 10.0, 2.0), spread(150, 5.0, 1.0));
        let estimate = median(&baseline).unwrap() / median(&candidate).unwrap();
        let (lo, hi) = bootstrap_speedup_ci(&baseline, &candidate, 2000, 1).unwrap();
        assert!(lo < estimate && estimate < hi, "{estimate} not in ({lo}, {hi})");
        assert!(lo > 1.8 && hi < 2.2, "({lo}, {hi})");
        // Swapping the roles inverts the speedup.
        let (lo_inv, hi_inv) = bootstrap_speedup_ci(&candidate, &baseline, 2000, 1).unwrap();
        assert!(lo_inv < 1.0 / estimate && 1.0 / estimate < hi_inv);
        // Identical constant timings: no uncertainty at all.
        assert_eq!(
            bootstrap_speedup_ci(&[2.0; 5], &[1.0; 9], 100, 3),
            Some((2.0, 2.0))
        );
    }

    #[test]
    fn bootstrap_interval_narrows_with_less_noise() {
        let width = |noise: f64| {
            let (lo, hi) =
                bootstrap_speedup_ci(&spread(200, 10.0, noise), &spread(200, 5.0, noise / 2.0), 2000, 1)
                    .unwrap();
            hi - lo
        };
        let (wide, narrow, narrower) = (width(4.0), width(0.4), width(0.04));
        assert!(wide > narrow && narrow > narrower, "{wide} {narrow} {narrower}");
        // The width scales with the noise (here linearly, as the samples are a scaled copy).
        assert!((wide / narrow - 10.0).abs() < 2.0, "{wide} / {narrow}");
    }

    #[test]
    fn bootstrap_is_deterministic_per_seed() {
        let (baseline, candidate) = (spread(100, 10.0, 3.0), spread(80, 7.0, 2.0));
        let run = |seed| bootstrap_speedup_ci(&baseline, &candidate, 500, seed).unwrap();
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }
}
