//! Timing statistics: percentiles, and a bootstrap confidence interval for a speedup.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Order statistics of a set of timings.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

impl Summary {
    /// `None` for no samples or any NaN sample (a broken measurement must not be summarised).
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

fn sorted(samples: &[f64]) -> Option<Vec<f64>> {
    if samples.is_empty() || samples.iter().any(|x| x.is_nan()) {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    Some(v)
}

/// Linear interpolation between order statistics (numpy's default).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let position = q * (sorted.len() - 1) as f64;
    let low = position.floor() as usize;
    let high = (low + 1).min(sorted.len() - 1);
    sorted[low] + (sorted[high] - sorted[low]) * (position - low as f64)
}

pub fn median(samples: &[f64]) -> Option<f64> {
    sorted(samples).map(|s| percentile(&s, 0.5))
}

/// 95% percentile-bootstrap interval of `median(baseline) / median(candidate)` (above 1: the
/// candidate is faster), resampling both lists with replacement `resamples` times. Seeded, so a
/// report can be reproduced.
pub fn bootstrap_speedup_ci(
    baseline: &[f64],
    candidate: &[f64],
    resamples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    sorted(baseline)?;
    sorted(candidate)?;
    if resamples == 0 {
        return None;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut draw = |xs: &[f64], buf: &mut Vec<f64>| {
        buf.clear();
        buf.extend((0..xs.len()).map(|_| xs[rng.random_range(0..xs.len())]));
        buf.sort_by(f64::total_cmp);
        percentile(buf, 0.5)
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut ratios: Vec<f64> = (0..resamples)
        .map(|_| draw(baseline, &mut a) / draw(candidate, &mut b))
        .collect();
    ratios.sort_by(f64::total_cmp);
    Some((percentile(&ratios, 0.025), percentile(&ratios, 0.975)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_data() {
        let data: Vec<f64> = (1..=101).rev().map(f64::from).collect();
        let s = Summary::from_samples(&data).unwrap();
        assert_eq!(
            (s.n, s.min, s.p50, s.p90, s.p99, s.max),
            (101, 1.0, 51.0, 91.0, 100.0, 101.0)
        );
        assert_eq!(s.mean, 51.0);
        assert_eq!(median(&[3.0, 1.0]), Some(2.0));
        assert!(Summary::from_samples(&[]).is_none());
        assert!(Summary::from_samples(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn bootstrap_interval_brackets_the_estimate_and_shrinks_with_less_noise() {
        let noisy = |centre: f64, spread: f64| -> Vec<f64> {
            (0..200)
                .map(|i| centre + spread * (((i * 7919) % 200) as f64 / 200.0 - 0.5))
                .collect()
        };
        let (lo, hi) = bootstrap_speedup_ci(&noisy(10.0, 2.0), &noisy(5.0, 1.0), 2000, 1).unwrap();
        assert!(lo < 2.0 && 2.0 < hi, "({lo}, {hi})");
        let (lo2, hi2) = bootstrap_speedup_ci(&noisy(10.0, 0.2), &noisy(5.0, 0.1), 2000, 1).unwrap();
        assert!(hi2 - lo2 < hi - lo);
        assert_eq!(
            bootstrap_speedup_ci(&noisy(10.0, 2.0), &noisy(5.0, 1.0), 2000, 1),
            Some((lo, hi))
        );
        assert!(bootstrap_speedup_ci(&[], &[1.0], 10, 1).is_none());
    }
}
