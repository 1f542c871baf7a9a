//! The GPU-independent half of the `tune` subcommand: an evolutionary search over the compiled
//! variants.
//!
//! Only variants listed in `kernels.toml` exist as PTX, so the search space is not a product of
//! parameter ranges but the set of compiled configurations ([`Space`]). Every genetic operator
//! therefore ends on a compiled variant: a mutation moves one parameter to its neighbouring value
//! among the variants that differ from the parent in that parameter alone, and a recombination
//! snaps the mixed parameters to the nearest compiled variant ([`Space::distance`]).
//!
//! Measuring is the caller's business ([`Evaluator`]): the search only sees an [`Outcome`] per
//! variant, asks for each variant at most once, and ranks nothing but [`Outcome::Timed`]. That keeps
//! this module pure CPU logic, testable with a fake evaluator, and keeps the gates (compiled,
//! correct, timed) in one place on the GPU side.
//!
//! The search, generation by generation ([`search`]):
//!
//! - generation 0 evaluates the seeds (micro's Top-K, in order), topped up with random variants to
//!   [`SearchConfig::population`];
//! - every later generation makes up to `population` children, each by recombination of two
//!   tournament-chosen parents (with probability [`SearchConfig::crossover`]) or else by mutation of
//!   one; a child already evaluated is proposed again (a few tries), then replaced by a random
//!   unevaluated variant (an immigrant), so every generation spends budget on something new;
//! - the next population is the best [`SearchConfig::elite`] of parents and children (elitism: the
//!   best correct variant seen so far is never lost), then the remaining children best first, then
//!   the remaining parents;
//! - it stops when `budget` distinct evaluations are spent or every variant of the space has been
//!   evaluated. The number of generations is whatever that takes: at least one evaluation happens
//!   per generation, so at most `budget` generations.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use flashrs::spec::Spec;
use flashrs::variants::{Family, Policy, VariantSpec};

/// One tunable parameter of a compiled variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Param {
    /// The kernel family ([`Spec::family`]).
    Family,
    /// Query rows per block ([`Spec::block_m`]).
    BlockM,
    /// Keys per KV tile ([`Spec::block_n`]).
    BlockN,
    /// Keys per compute step inside a KV tile ([`Spec::sub_n`]).
    SubN,
    /// Warps per block ([`Spec::warps`]).
    Warps,
    /// Elements per shared-memory vector load ([`Spec::vec`]).
    Vec,
    /// Depth of the K/V copy pipeline ([`Spec::stages`]).
    Stages,
    /// The barrier policy ([`Spec::policy`]).
    Policy,
    /// Whether Q stays in registers ([`Spec::q_in_regs`]).
    QInRegs,
    /// Whether consumer warpgroups take turns ([`Spec::pingpong`]).
    Pingpong,
    /// Launch bounds: blocks per SM ([`Spec::min_blocks_per_sm`]).
    MinBlocksPerSm,
    /// Whether QK^T overlaps the softmax ([`Spec::overlap`]).
    Overlap,
    /// Whether one block per SM walks the work items ([`Spec::persistent`]).
    Persistent,
}

impl Param {
    /// Every parameter, in the evaluation log's column order.
    pub const ALL: [Param; 13] = [
        Param::Family,
        Param::BlockM,
        Param::BlockN,
        Param::SubN,
        Param::Warps,
        Param::Vec,
        Param::Stages,
        Param::Policy,
        Param::QInRegs,
        Param::Pingpong,
        Param::MinBlocksPerSm,
        Param::Overlap,
        Param::Persistent,
    ];

    /// The column name in the evaluation log.
    pub fn name(self) -> &'static str {
        match self {
            Param::Family => "family",
            Param::BlockM => "block_m",
            Param::BlockN => "block_n",
            Param::SubN => "sub_n",
            Param::Warps => "warps",
            Param::Vec => "vec",
            Param::Stages => "stages",
            Param::Policy => "policy",
            Param::QInRegs => "q_in_regs",
            Param::Pingpong => "pingpong",
            Param::MinBlocksPerSm => "min_blocks_per_sm",
            Param::Overlap => "overlap",
            Param::Persistent => "persistent",
        }
    }
}

/// The search's view of a variant's parameters: each as an ordinal ([`Spec::key`]), so that
/// "neighbouring value" and "differs in one parameter" mean something for every parameter. A
/// trait since `Spec` is the library's and the search is the lab's.
pub trait SpecParams {
    /// The value of `p` as an ordinal (see the implementation for `Spec`).
    fn key(&self, p: Param) -> u32;
    /// This spec with parameter `p` taken from `other`.
    fn with(self, p: Param, other: &Spec) -> Spec;
    /// The parameters whose values differ.
    fn differences(&self, other: &Spec) -> Vec<Param>;
    /// The value of `p` as the log writes it.
    fn value_string(&self, p: Param) -> String;
}

impl SpecParams for Spec {
    /// The value of `p` as an ordinal: numbers as themselves, families in hardware order (their
    /// declaration order: CUDA cores < `mma.sync` < `wgmma` < warp-specialised), policies as none
    /// and then their declaration order (legacy < light), booleans as 0/1, an unsplit tile and no launch bounds as 0. The tile split
    /// is an option rather than defaulting to `block_n`, or no two variants would differ in
    /// `block_n` alone and mutation could never move it.
    fn key(&self, p: Param) -> u32 {
        match p {
            Param::Family => self.family as u32,
            Param::BlockM => self.block_m,
            Param::BlockN => self.block_n,
            Param::SubN => self.sub_n.unwrap_or(0),
            Param::Warps => self.warps,
            Param::Vec => self.vec,
            Param::Stages => self.stages,
            Param::Policy => self.policy.map_or(0, |policy| policy as u32 + 1),
            Param::QInRegs => u32::from(self.q_in_regs),
            Param::Pingpong => u32::from(self.pingpong),
            Param::MinBlocksPerSm => self.min_blocks_per_sm.unwrap_or(0),
            Param::Overlap => u32::from(self.overlap),
            Param::Persistent => u32::from(self.persistent),
        }
    }

    /// This spec with parameter `p` taken from `other`.
    fn with(mut self, p: Param, other: &Spec) -> Spec {
        match p {
            Param::Family => self.family = other.family,
            Param::BlockM => self.block_m = other.block_m,
            Param::BlockN => self.block_n = other.block_n,
            Param::SubN => self.sub_n = other.sub_n,
            Param::Warps => self.warps = other.warps,
            Param::Vec => self.vec = other.vec,
            Param::Stages => self.stages = other.stages,
            Param::Policy => self.policy = other.policy,
            Param::QInRegs => self.q_in_regs = other.q_in_regs,
            Param::Pingpong => self.pingpong = other.pingpong,
            Param::MinBlocksPerSm => self.min_blocks_per_sm = other.min_blocks_per_sm,
            Param::Overlap => self.overlap = other.overlap,
            Param::Persistent => self.persistent = other.persistent,
        }
        self
    }

    /// The parameters whose values differ.
    fn differences(&self, other: &Spec) -> Vec<Param> {
        Param::ALL
            .into_iter()
            .filter(|&p| self.key(p) != other.key(p))
            .collect()
    }

    /// The value of `p` as the log writes it.
    fn value_string(&self, p: Param) -> String {
        match p {
            Param::Family => self.family.name().to_string(),
            Param::Policy => self.policy.map_or("", Policy::name).to_string(),
            Param::QInRegs => self.q_in_regs.to_string(),
            Param::Pingpong => self.pingpong.to_string(),
            Param::Overlap => self.overlap.to_string(),
            Param::Persistent => self.persistent.to_string(),
            Param::SubN => self.sub_n.map(|n| n.to_string()).unwrap_or_default(),
            Param::MinBlocksPerSm => self.min_blocks_per_sm.map(|n| n.to_string()).unwrap_or_default(),
            _ => self.key(p).to_string(),
        }
    }
}

/// The search's random numbers: ChaCha8 from the `rand` project, seeded with
/// `SeedableRng::seed_from_u64`. Not `StdRng`, whose algorithm `rand` may change between
/// releases: this generator's output is fixed by its specification, so a seed names the same
/// search (and the same `evo_log.csv`) for as long as the evidence is kept.
pub type SearchRng = rand_chacha::ChaCha8Rng;

/// True with probability `p`; a `p` outside `[0, 1]` (or NaN) is clamped rather than a panic,
/// as `Rng::random_bool` would, since `SearchConfig::crossover` is the caller's.
fn chance(rng: &mut SearchRng, p: f64) -> bool {
    rng.random::<f64>() < p
}

/// The generator of a search seeded with `seed`.
pub fn search_rng(seed: u64) -> SearchRng {
    SearchRng::seed_from_u64(seed)
}

/// The compiled configurations usable at one head dim: what the search may visit.
#[derive(Clone, Debug)]
pub struct Space {
    head_dim: usize,
    variants: Vec<&'static VariantSpec>,
    specs: Vec<Spec>,
    /// Per parameter (in `Param::ALL` order), the sorted distinct keys present in the space.
    values: Vec<Vec<u32>>,
}

impl Space {
    /// The variants of `variants` compiled for `head_dim`, without the `naive` family (the GPU
    /// reference, never a candidate), in table order.
    pub fn from_variants(variants: &'static [VariantSpec], head_dim: usize) -> Space {
        Space::from_refs(
            variants
                .iter()
                .filter(|v| v.family != Family::Naive && v.head_dims.contains(&head_dim))
                .collect(),
            head_dim,
        )
    }

    /// [`Space::from_variants`] over the variants this build compiled ([`VariantSpec::built`]):
    /// what a search on the GPU can evaluate.
    pub fn from_built(variants: &'static [VariantSpec], head_dim: usize) -> Space {
        Space::from_refs(
            flashrs::variants::built(variants)
                .filter(|v| v.family != Family::Naive && v.head_dims.contains(&head_dim))
                .collect(),
            head_dim,
        )
    }

    fn from_refs(variants: Vec<&'static VariantSpec>, head_dim: usize) -> Space {
        let specs: Vec<Spec> = variants.iter().map(|v| v.spec).collect();
        let values = Param::ALL
            .iter()
            .map(|&p| {
                let mut keys: Vec<u32> = specs.iter().map(|g| g.key(p)).collect();
                keys.sort_unstable();
                keys.dedup();
                keys
            })
            .collect();
        Space {
            head_dim,
            variants,
            specs,
            values,
        }
    }

    /// Only the variants whose PTX exists for architecture `arch` (x10): on an sm_80 device the
    /// `wgmma` variants would only fail the first gate, spending budget for nothing.
    pub fn retain_arch(self, arch: u32) -> Space {
        let kept = self.variants.into_iter().filter(|v| v.min_arch <= arch).collect();
        Space::from_refs(kept, self.head_dim)
    }

    /// The head dim every variant of the space is compiled for.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// The number of variants in the space.
    pub fn len(&self) -> usize {
        self.variants.len()
    }

    /// Whether the space has no variants.
    pub fn is_empty(&self) -> bool {
        self.variants.is_empty()
    }

    /// The variants, in table order; an index into the space is an index into this.
    pub fn variants(&self) -> &[&'static VariantSpec] {
        &self.variants
    }

    /// The variant at `index`.
    pub fn variant(&self, index: usize) -> &'static VariantSpec {
        self.variants[index]
    }

    /// The parameters of the variant at `index`.
    pub fn spec(&self, index: usize) -> &Spec {
        &self.specs[index]
    }

    /// The index of the variant called `name`, if the space has it.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.variants.iter().position(|v| v.name == name)
    }

    fn rank(&self, p: Param, key: u32) -> u32 {
        let keys = &self.values[p as usize];
        match keys.binary_search(&key) {
            Ok(i) | Err(i) => i as u32,
        }
    }

    /// Weight of a family difference: one more than the largest possible sum of the other
    /// parameters' rank differences, so a variant of the same family is always nearer than any of
    /// another family (the families share no kernel body; a 64-row tile means different things).
    fn family_weight(&self) -> u32 {
        1 + Param::ALL
            .iter()
            .filter(|&&p| p != Param::Family)
            .map(|&p| self.values[p as usize].len().saturating_sub(1) as u32)
            .sum::<u32>()
    }

    /// The distance used to snap a spec to a compiled variant: the family weight (above) if the
    /// families differ, plus, for every other parameter, how many distinct compiled values of that
    /// parameter lie between the two (rank difference among the space's sorted values). Ranks
    /// rather than raw values, so that stages 2 -> 3 and block 64 -> 128 both count as one step.
    pub fn distance(&self, a: &Spec, b: &Spec) -> u32 {
        Param::ALL
            .iter()
            .map(|&p| {
                if p == Param::Family {
                    if a.family == b.family {
                        0
                    } else {
                        self.family_weight()
                    }
                } else {
                    self.rank(p, a.key(p)).abs_diff(self.rank(p, b.key(p)))
                }
            })
            .sum()
    }

    /// The compiled variant nearest to `target` by [`Space::distance`], skipping those `skip`
    /// rejects; ties go to the earlier variant in table order.
    pub fn nearest(&self, target: &Spec, skip: impl Fn(usize) -> bool) -> Option<usize> {
        (0..self.len())
            .filter(|&i| !skip(i))
            .min_by_key(|&i| (self.distance(target, &self.specs[i]), i))
    }

    /// A mutation of the variant at `parent`: parameters are tried in random order, and the first
    /// one with compiled variants differing from the parent in that parameter alone moves to the
    /// neighbouring value among them (the next compiled value above or below, at random when both
    /// exist). If no parameter has such a neighbour, one parameter with more than one compiled
    /// value is moved to an adjacent compiled value and the result snapped to the nearest other
    /// variant ([`Space::nearest`]). `None` only when the space has a single variant.
    pub fn mutate(&self, parent: usize, rng: &mut SearchRng) -> Option<usize> {
        if self.len() <= 1 {
            return None;
        }
        let pg = self.specs[parent];
        let mut params = Param::ALL;
        params.shuffle(rng);
        for &p in &params {
            let key = pg.key(p);
            let mut below: Option<(u32, usize)> = None;
            let mut above: Option<(u32, usize)> = None;
            for (i, g) in self.specs.iter().enumerate() {
                if i == parent || g.differences(&pg) != [p] {
                    continue;
                }
                let k = g.key(p);
                if k < key && below.is_none_or(|(b, _)| k > b) {
                    below = Some((k, i));
                }
                if k > key && above.is_none_or(|(a, _)| k < a) {
                    above = Some((k, i));
                }
            }
            match (below, above) {
                (Some((_, b)), Some((_, a))) => return Some(if rng.random_bool(0.5) { b } else { a }),
                (Some((_, i)), None) | (None, Some((_, i))) => return Some(i),
                (None, None) => {}
            }
        }
        // No one-parameter neighbour: move one parameter within its compiled values, then snap.
        let movable: Vec<Param> = params
            .into_iter()
            .filter(|&p| self.values[p as usize].len() > 1)
            .collect();
        let target = if movable.is_empty() {
            pg
        } else {
            let p = movable[rng.random_range(0..movable.len())];
            let keys = &self.values[p as usize];
            let at = keys.binary_search(&pg.key(p)).unwrap_or(0);
            let to = if at == 0 {
                1
            } else if at + 1 == keys.len() || rng.random_bool(0.5) {
                at - 1
            } else {
                at + 1
            };
            let donor = self
                .specs
                .iter()
                .find(|g| g.key(p) == keys[to])
                .expect("every key comes from a spec");
            pg.with(p, donor)
        };
        self.nearest(&target, |i| i == parent)
    }

    /// A recombination: every parameter from one of the two parents (each with probability 1/2),
    /// then snapped to the nearest compiled variant, which may be a parent.
    pub fn recombine(&self, a: usize, b: usize, rng: &mut SearchRng) -> usize {
        let (ga, gb) = (self.specs[a], self.specs[b]);
        let mut child = ga;
        for p in Param::ALL {
            if rng.random_bool(0.5) {
                child = child.with(p, &gb);
            }
        }
        self.nearest(&child, |_| false)
            .expect("a space with parents is not empty")
    }
}

/// What the evaluator found for one variant, in gate order: the first gate it fails, or its time.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Gate 1: no PTX for this variant on this device (architecture, symbol, shared memory).
    NotCompiled,
    /// Gate 2: the output disagreed with the reference on fresh random inputs.
    Incorrect {
        /// The largest absolute error against the float64 reference.
        max_err: f64,
    },
    /// The launch or the measurement failed (driver error, timeout, ...).
    Failed {
        /// The error, as text.
        message: String,
    },
    /// Passed both gates; the median time per call in microseconds.
    Timed {
        /// Median time per call, in microseconds.
        p50_us: f64,
    },
}

/// The outcome's kind without its data, as the log writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// Gate 1 failed: no PTX for the variant on this device.
    NotCompiled,
    /// Gate 2 failed: the output disagreed with the reference.
    Incorrect,
    /// The launch or the measurement failed.
    Failed,
    /// Passed both gates and was timed.
    Timed,
}

impl OutcomeKind {
    /// The name the log writes (`not_compiled`, `incorrect`, `failed`, `timed`).
    pub fn name(self) -> &'static str {
        match self {
            OutcomeKind::NotCompiled => "not_compiled",
            OutcomeKind::Incorrect => "incorrect",
            OutcomeKind::Failed => "failed",
            OutcomeKind::Timed => "timed",
        }
    }
}

impl Outcome {
    /// The outcome's kind, without its data.
    pub fn kind(&self) -> OutcomeKind {
        match self {
            Outcome::NotCompiled => OutcomeKind::NotCompiled,
            Outcome::Incorrect { .. } => OutcomeKind::Incorrect,
            Outcome::Failed { .. } => OutcomeKind::Failed,
            Outcome::Timed { .. } => OutcomeKind::Timed,
        }
    }

    /// The time a candidate is ranked by: only a timed outcome with a finite, non-negative time.
    /// Everything else (incorrect, failed, uncompiled, a NaN time) is logged and never ranked.
    pub fn rank_time(&self) -> Option<f64> {
        match *self {
            Outcome::Timed { p50_us } if p50_us.is_finite() && p50_us >= 0.0 => Some(p50_us),
            _ => None,
        }
    }
}

/// Runs the gates on one variant (on a GPU, or a fake in tests).
pub trait Evaluator {
    /// Runs the gates on `v` and says how far it got.
    fn evaluate(&mut self, v: &'static VariantSpec) -> Outcome;
}

impl<F: FnMut(&'static VariantSpec) -> Outcome> Evaluator for F {
    fn evaluate(&mut self, v: &'static VariantSpec) -> Outcome {
        self(v)
    }
}

/// How a candidate came to be evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// From the seed list (micro's Top-K).
    Seed,
    /// Random top-up of the first population.
    Random,
    /// A mutation of one parent: one parameter moved to a neighbouring compiled value.
    Mutation,
    /// A recombination of two parents, snapped to the nearest compiled variant.
    Crossover,
    /// A random unevaluated variant, when the operators kept proposing evaluated ones.
    Immigrant,
}

impl Origin {
    /// The name the log writes (`seed`, `random`, `mutation`, `crossover`, `immigrant`).
    pub fn name(self) -> &'static str {
        match self {
            Origin::Seed => "seed",
            Origin::Random => "random",
            Origin::Mutation => "mutation",
            Origin::Crossover => "crossover",
            Origin::Immigrant => "immigrant",
        }
    }
}

/// One evaluation: a row of `evidence/search/evo_log.csv`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EvalRecord {
    /// The generation it was made in (0: the seeded first population).
    pub generation: usize,
    /// The variant's name.
    pub variant: &'static str,
    /// The variant's parameters (one log column each).
    #[serde(flatten)]
    pub spec: Spec,
    /// How the candidate came to be evaluated.
    pub origin: Origin,
    /// The first gate it failed, or `timed`.
    pub outcome: OutcomeKind,
    /// For an incorrect outcome: the largest absolute error against the reference.
    pub max_err: Option<f64>,
    /// For a timed outcome: the median time per call, in microseconds.
    pub p50_us: Option<f64>,
    /// For a failed outcome: the error message.
    pub message: Option<String>,
}

/// CSV text of `records` (each a list of fields), one line each ending in `\n`, fields quoted by
/// the `csv` crate where they need it (a comma, quote or line break in them).
fn csv_text<I, R>(records: I) -> String
where
    I: IntoIterator<Item = R>,
    R: IntoIterator,
    R::Item: AsRef<[u8]>,
{
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    for record in records {
        // Writing into a Vec cannot fail, and every record here has the header's column count
        // (tested below), which is the csv writer's only other error.
        writer.write_record(record).expect("CSV into memory");
    }
    let bytes = writer.into_inner().expect("CSV into memory");
    String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
}

impl EvalRecord {
    fn new(generation: usize, v: &'static VariantSpec, origin: Origin, outcome: &Outcome) -> Self {
        let (max_err, p50_us, message) = match outcome {
            Outcome::NotCompiled => (None, None, None),
            Outcome::Incorrect { max_err } => (Some(*max_err), None, None),
            Outcome::Failed { message } => (None, None, Some(message.clone())),
            Outcome::Timed { p50_us } => (None, Some(*p50_us), None),
        };
        EvalRecord {
            generation,
            variant: v.name,
            spec: v.spec,
            origin,
            outcome: outcome.kind(),
            max_err,
            p50_us,
            message,
        }
    }

    /// The column names, in the order of [`EvalRecord::csv_fields`].
    pub fn csv_columns() -> Vec<&'static str> {
        let mut cols = vec!["generation", "variant"];
        cols.extend(Param::ALL.iter().map(|p| p.name()));
        cols.extend(["origin", "outcome", "max_err", "p50_us", "message"]);
        cols
    }

    /// The header line (no line break).
    pub fn csv_header() -> String {
        csv_text([Self::csv_columns()]).trim_end_matches('\n').to_string()
    }

    /// One row's fields, unquoted; empty where a value does not apply.
    pub fn csv_fields(&self) -> Vec<String> {
        let mut cols = vec![self.generation.to_string(), self.variant.to_string()];
        cols.extend(Param::ALL.iter().map(|&p| self.spec.value_string(p)));
        cols.push(self.origin.name().to_string());
        cols.push(self.outcome.name().to_string());
        cols.push(self.max_err.map(|e| e.to_string()).unwrap_or_default());
        cols.push(self.p50_us.map(|t| t.to_string()).unwrap_or_default());
        cols.push(self.message.clone().unwrap_or_default());
        cols
    }

    /// One CSV line (no line break), quoted where needed.
    pub fn to_csv_row(&self) -> String {
        csv_text([self.csv_fields()]).trim_end_matches('\n').to_string()
    }
}

/// The search's knobs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchConfig {
    /// Distinct evaluations at most (every call of the evaluator counts, whatever its outcome).
    pub budget: usize,
    /// Members kept per generation, and children made per generation.
    pub population: usize,
    /// The best this many correct candidates always survive into the next generation.
    pub elite: usize,
    /// Probability that a child is a recombination of two parents (else a mutation of one).
    pub crossover: f64,
    /// Seed of the search's random generator ([`search_rng`]): one seed, one search.
    pub seed: u64,
}

impl Default for SearchConfig {
    /// Budget 32, population 8, elite 3, crossover 0.5, seed 0. Today's space is about a dozen
    /// variants per head dim, which 32 evaluations exhaust; the search starts to save time once
    /// `kernels.toml` grows past the budget (a population of 8 then gives about four generations).
    fn default() -> Self {
        SearchConfig {
            budget: 32,
            population: 8,
            elite: 3,
            crossover: 0.5,
            seed: 0,
        }
    }
}

/// A correct, timed candidate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Ranked {
    /// The variant's name.
    pub variant: &'static str,
    /// Its median time per call, in microseconds.
    pub p50_us: f64,
    /// The variant itself.
    #[serde(skip)]
    pub spec: &'static VariantSpec,
    #[serde(skip)]
    index: usize,
}

/// What a search found: `evidence/search/evo_best.json`.
#[derive(Clone, Debug, Serialize)]
pub struct SearchResult {
    /// The head dim the search ran at.
    pub head_dim: usize,
    /// The knobs it ran with.
    pub config: SearchConfig,
    /// The fastest correct candidate, or `None` when nothing passed the gates.
    pub best: Option<Ranked>,
    /// The last population, fastest first (it holds `best`: elitism).
    pub population: Vec<Ranked>,
    /// Distinct variants evaluated (at most the budget).
    pub evaluations: usize,
    /// Generations run after the first (generation 0 is the seeded population).
    pub generations: usize,
    /// Every variant of the space was evaluated before the budget ran out.
    pub exhausted: bool,
    /// Seed names that are not in the space (unknown, `naive`, or not compiled for this head dim).
    pub ignored_seeds: Vec<String>,
    /// Every evaluation in order: the rows of `evo_log.csv`.
    pub history: Vec<EvalRecord>,
}

impl SearchResult {
    /// The whole log as CSV, header first, one line per evaluation.
    pub fn to_csv(&self) -> String {
        let header = EvalRecord::csv_columns()
            .into_iter()
            .map(str::to_string)
            .collect();
        csv_text(std::iter::once(header).chain(self.history.iter().map(EvalRecord::csv_fields)))
    }
}

/// The memo and the log: the only way the search reaches the evaluator.
struct Ledger<'a, E: ?Sized, P> {
    space: &'a Space,
    evaluator: &'a mut E,
    progress: P,
    budget: usize,
    outcomes: Vec<Option<Outcome>>,
    history: Vec<EvalRecord>,
}

impl<E: Evaluator + ?Sized, P: FnMut(usize, usize)> Ledger<'_, E, P> {
    fn spent(&self) -> bool {
        self.history.len() >= self.budget
    }

    fn is_evaluated(&self, i: usize) -> bool {
        self.outcomes[i].is_some()
    }

    fn unevaluated(&self) -> Vec<usize> {
        (0..self.space.len()).filter(|&i| !self.is_evaluated(i)).collect()
    }

    /// Evaluates `i` once (the caller checks the budget) and returns it ranked if it passed.
    fn evaluate(&mut self, i: usize, generation: usize, origin: Origin) -> Option<Ranked> {
        debug_assert!(!self.is_evaluated(i) && !self.spent());
        let spec = self.space.variant(i);
        let outcome = self.evaluator.evaluate(spec);
        self.history
            .push(EvalRecord::new(generation, spec, origin, &outcome));
        let ranked = outcome.rank_time().map(|p50_us| Ranked {
            variant: spec.name,
            p50_us,
            spec,
            index: i,
        });
        self.outcomes[i] = Some(outcome);
        (self.progress)(self.history.len(), self.budget);
        ranked
    }
}

fn sort_ranked(items: &mut [Ranked]) {
    items.sort_by(|a, b| a.p50_us.total_cmp(&b.p50_us).then(a.index.cmp(&b.index)));
}

/// The next population: the `elite` best of parents and children, then the other children
/// fastest first, then the other parents fastest first, up to `size`; sorted fastest first.
fn next_population(parents: &[Ranked], children: &[Ranked], elite: usize, size: usize) -> Vec<Ranked> {
    let mut all: Vec<Ranked> = parents.iter().chain(children).copied().collect();
    sort_ranked(&mut all);
    let mut next: Vec<Ranked> = all.iter().take(elite.min(size)).copied().collect();
    let mut children = children.to_vec();
    let mut parents = parents.to_vec();
    sort_ranked(&mut children);
    sort_ranked(&mut parents);
    for r in children.into_iter().chain(parents) {
        if next.len() >= size {
            break;
        }
        if !next.iter().any(|n| n.index == r.index) {
            next.push(r);
        }
    }
    sort_ranked(&mut next);
    next
}

/// Binary tournament: the faster of two random members (the population is sorted, so the
/// smaller index).
fn tournament(population: &[Ranked], rng: &mut SearchRng) -> usize {
    let a = rng.random_range(0..population.len());
    let b = rng.random_range(0..population.len());
    population[a.min(b)].index
}

/// Tries per child before an immigrant replaces it.
const PROPOSAL_TRIES: usize = 16;

/// A new candidate for the next child: an unevaluated variant made by the operators, or an
/// immigrant when they keep proposing evaluated ones. `None` when the space is exhausted.
fn propose<E: Evaluator + ?Sized, P: FnMut(usize, usize)>(
    ledger: &Ledger<'_, E, P>,
    population: &[Ranked],
    config: &SearchConfig,
    rng: &mut SearchRng,
) -> Option<(usize, Origin)> {
    let space = ledger.space;
    if !population.is_empty() {
        for _ in 0..PROPOSAL_TRIES {
            let candidate = if population.len() >= 2 && chance(rng, config.crossover) {
                let a = tournament(population, rng);
                let b = tournament(population, rng);
                (space.recombine(a, b, rng), Origin::Crossover)
            } else {
                let parent = tournament(population, rng);
                match space.mutate(parent, rng) {
                    Some(child) => (child, Origin::Mutation),
                    None => continue,
                }
            };
            if !ledger.is_evaluated(candidate.0) {
                return Some(candidate);
            }
        }
    }
    let left = ledger.unevaluated();
    (!left.is_empty()).then(|| (left[rng.random_range(0..left.len())], Origin::Immigrant))
}

/// Runs the evolutionary search (see the module documentation) over `space`.
///
/// `seeds` are variant names, best first (micro's Top-K); those not in the space are skipped and
/// listed in [`SearchResult::ignored_seeds`]. `progress(done, total)` is called after every
/// evaluation, with `total` the number of evaluations the search can make at most
/// (`min(budget, space.len())`). The same space, seeds, config and outcomes give the same search.
pub fn search<E: Evaluator + ?Sized>(
    space: &Space,
    seeds: &[&str],
    config: &SearchConfig,
    evaluator: &mut E,
    progress: impl FnMut(usize, usize),
) -> SearchResult {
    let mut rng = search_rng(config.seed);
    let size = config.population.max(1);
    let mut ledger = Ledger {
        space,
        evaluator,
        progress,
        budget: config.budget.min(space.len()),
        outcomes: vec![None; space.len()],
        history: Vec::new(),
    };

    // Generation 0: the seeds in order, then random variants up to the population size.
    let mut ignored_seeds = Vec::new();
    let mut first: Vec<(usize, Origin)> = Vec::new();
    for &name in seeds {
        match space.index_of(name) {
            Some(i) if !first.iter().any(|&(j, _)| j == i) => first.push((i, Origin::Seed)),
            Some(_) => {}
            None => ignored_seeds.push(name.to_string()),
        }
    }
    first.truncate(size);
    let mut rest: Vec<usize> = (0..space.len())
        .filter(|i| !first.iter().any(|(j, _)| j == i))
        .collect();
    while first.len() < size && !rest.is_empty() {
        first.push((rest.swap_remove(rng.random_range(0..rest.len())), Origin::Random));
    }
    let mut population = Vec::new();
    for (i, origin) in first {
        if ledger.spent() {
            break;
        }
        population.extend(ledger.evaluate(i, 0, origin));
    }
    population = next_population(&[], &population, config.elite, size);

    let mut generation = 0;
    while !ledger.spent() && !ledger.unevaluated().is_empty() {
        generation += 1;
        let mut children = Vec::new();
        for _ in 0..size {
            if ledger.spent() {
                break;
            }
            let Some((i, origin)) = propose(&ledger, &population, config, &mut rng) else {
                break;
            };
            children.extend(ledger.evaluate(i, generation, origin));
        }
        population = next_population(&population, &children, config.elite, size);
    }

    let exhausted = ledger.unevaluated().is_empty();
    SearchResult {
        head_dim: space.head_dim(),
        config: config.clone(),
        best: population.first().copied(),
        population,
        evaluations: ledger.history.len(),
        generations: generation,
        exhausted,
        ignored_seeds,
        history: ledger.history,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrs::variants::VARIANTS;

    fn leak_str(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }

    /// A table entry for `spec`, named as `build.rs` names it.
    fn compiled(spec: Spec, head_dims: &'static [usize]) -> VariantSpec {
        VariantSpec {
            name: leak_str(spec.name()),
            spec,
            head_dims,
            min_arch: spec.min_arch(),
            shipped: false,
            built: true,
            counted_built: false,
        }
    }

    /// A synthetic flash_mma grid; parameters not listed are copied from a real flash_mma
    /// variant, so the test keeps compiling when `Spec` grows fields.
    fn grid(block_ms: &[u32], block_ns: &[u32], stages: &[u32]) -> &'static [VariantSpec] {
        let base = *VARIANTS
            .iter()
            .find(|v| v.family == Family::FlashMma)
            .expect("a flash_mma variant");
        let mut out = Vec::new();
        for &m in block_ms {
            for &n in block_ns {
                for &s in stages {
                    for policy in [Policy::Legacy, Policy::Light] {
                        let spec = Spec {
                            block_m: m,
                            block_n: n,
                            stages: s,
                            policy: Some(policy),
                            ..base.spec
                        };
                        out.push(compiled(spec, &[64, 128]));
                    }
                }
            }
        }
        Box::leak(out.into_boxed_slice())
    }

    fn big_grid() -> &'static [VariantSpec] {
        grid(&[64, 128, 192], &[32, 64, 128], &[2, 3, 4])
    }

    /// A smooth synthetic cost with its minimum at m128 n64 s3 light.
    fn cost(v: &VariantSpec) -> f64 {
        let d = |x: u32, best: u32| (f64::from(x).log2() - f64::from(best).log2()).abs();
        let light = if v.policy == Some(Policy::Light) { 0.0 } else { 3.0 };
        100.0 + 10.0 * d(v.block_m, 128) + 7.0 * d(v.block_n, 64) + 5.0 * d(v.stages, 3) + light
    }

    fn timed(v: &'static VariantSpec) -> Outcome {
        Outcome::Timed { p50_us: cost(v) }
    }

    fn run(space: &Space, seeds: &[&str], config: &SearchConfig) -> SearchResult {
        search(space, seeds, config, &mut timed, |_, _| {})
    }

    #[test]
    fn space_excludes_naive_and_other_head_dims() {
        let s64 = Space::from_variants(VARIANTS, 64);
        let s128 = Space::from_variants(VARIANTS, 128);
        assert!(!s64.is_empty() && !s128.is_empty());
        for (space, d) in [(&s64, 64), (&s128, 128)] {
            assert_eq!(space.head_dim(), d);
            for v in space.variants() {
                assert_ne!(v.family, Family::Naive);
                assert!(v.head_dims.contains(&d), "{} at {d}", v.name);
            }
            let expected = VARIANTS
                .iter()
                .filter(|v| v.family != Family::Naive && v.head_dims.contains(&d))
                .count();
            assert_eq!(space.len(), expected);
        }
        let sm80 = Space::from_variants(VARIANTS, 128).retain_arch(80);
        assert!(sm80.variants().iter().all(|v| v.min_arch <= 80));
    }

    /// At head dim 64 the number of consumer warpgroups is a dimension of the space: the
    /// two-consumer pick and its three-consumer twin differ in `block_m` and the warps it implies
    /// (one warpgroup per 64 rows, and the producer's), nothing else.
    #[test]
    fn consumer_warpgroups_are_a_dimension_of_the_head_dim_64_space() {
        let space = Space::from_variants(VARIANTS, 64);
        let at = |name: &str| {
            (0..space.len())
                .find(|&i| space.variant(i).name == name)
                .unwrap_or_else(|| panic!("{name} in the head-dim-64 space"))
        };
        let two = at("flash_ws_m128_n128_s2_pp_ov_mbarrier");
        let three = at("flash_ws_m192_n128_s2_pp_ov_mbarrier");
        assert_eq!(
            space.spec(two).differences(space.spec(three)),
            [Param::BlockM, Param::Warps]
        );
    }

    /// Every field of `Spec` is a `Param`: else two variants differing only in that field would
    /// look identical to the search, which could then never move between them.
    #[test]
    fn every_compiled_variant_differs_in_some_parameter() {
        for d in [64, 128] {
            let space = Space::from_variants(VARIANTS, d);
            for i in 0..space.len() {
                for j in 0..i {
                    assert_ne!(
                        space.spec(i).differences(space.spec(j)),
                        [],
                        "{} and {}",
                        space.variant(i).name,
                        space.variant(j).name
                    );
                }
            }
        }
    }

    #[test]
    fn mutation_moves_one_parameter_when_a_neighbour_exists() {
        let mut rng = search_rng(7);
        for space in [
            Space::from_variants(VARIANTS, 64),
            Space::from_variants(VARIANTS, 128),
            Space::from_variants(big_grid(), 64),
        ] {
            for parent in 0..space.len() {
                let pg = *space.spec(parent);
                let has_neighbour =
                    (0..space.len()).any(|i| i != parent && space.spec(i).differences(&pg).len() == 1);
                for _ in 0..20 {
                    let child = space.mutate(parent, &mut rng).expect("space > 1");
                    assert_ne!(child, parent);
                    if has_neighbour {
                        assert_eq!(space.spec(child).differences(&pg).len(), 1);
                    }
                }
            }
        }
    }

    #[test]
    fn mutation_goes_to_the_adjacent_compiled_value() {
        // Only stages differ: 2, 3, 5.
        let base = VARIANTS[4];
        let table: &'static [VariantSpec] = Box::leak(
            [2u32, 3, 5]
                .iter()
                .map(|&s| {
                    compiled(
                        Spec {
                            stages: s,
                            ..base.spec
                        },
                        &[64],
                    )
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let space = Space::from_variants(table, 64);
        let mut rng = search_rng(1);
        let mut from_middle = [false; 3];
        for _ in 0..64 {
            assert_eq!(space.mutate(0, &mut rng), Some(1));
            assert_eq!(space.mutate(2, &mut rng), Some(1));
            from_middle[space.mutate(1, &mut rng).unwrap()] = true;
        }
        assert_eq!(from_middle, [true, false, true]);
    }

    #[test]
    fn mutation_without_one_parameter_neighbours_snaps_to_the_nearest() {
        // m64_n32_s2 and m128_n64_s3 differ in three parameters; m192_n128_s4 in three more.
        let base = VARIANTS[4];
        let table: &'static [VariantSpec] = Box::leak(
            [(64u32, 32u32, 2u32), (128, 64, 3), (192, 128, 4)]
                .iter()
                .map(|&(m, n, s)| {
                    let spec = Spec {
                        block_m: m,
                        block_n: n,
                        stages: s,
                        ..base.spec
                    };
                    compiled(spec, &[64])
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let space = Space::from_variants(table, 64);
        assert_eq!(space.distance(space.spec(0), space.spec(1)), 3);
        assert_eq!(space.distance(space.spec(0), space.spec(2)), 6);
        let mut rng = search_rng(3);
        for _ in 0..32 {
            assert_eq!(space.mutate(0, &mut rng), Some(1));
        }
    }

    #[test]
    fn distance_prefers_the_same_family() {
        let space = Space::from_variants(VARIANTS, 128);
        let w = space.family_weight();
        for i in 0..space.len() {
            for j in 0..space.len() {
                let d = space.distance(space.spec(i), space.spec(j));
                assert_eq!(d, space.distance(space.spec(j), space.spec(i)));
                assert_eq!(d == 0, i == j);
                let same = space.variant(i).family == space.variant(j).family;
                assert_eq!(d >= w, !same);
            }
        }
    }

    #[test]
    fn recombination_lands_on_a_compiled_variant_and_keeps_shared_values() {
        let space = Space::from_variants(big_grid(), 64);
        let mut rng = search_rng(11);
        for _ in 0..200 {
            let a = rng.random_range(0..space.len());
            let b = rng.random_range(0..space.len());
            let c = space.recombine(a, b, &mut rng);
            assert!(c < space.len());
            // The grid is a full product, so the mixed spec is compiled and taken exactly.
            let (ga, gb, gc) = (space.spec(a), space.spec(b), space.spec(c));
            for p in Param::ALL {
                assert!(gc.key(p) == ga.key(p) || gc.key(p) == gb.key(p), "{p:?}");
            }
            assert_eq!(space.recombine(a, a, &mut rng), a);
        }
    }

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let mut a = search_rng(42);
        let mut b = search_rng(42);
        for n in 1..500usize {
            let x = a.random_range(0..n);
            assert_eq!(x, b.random_range(0..n));
            assert!(x < n);
        }
        // ChaCha8's stream is fixed by its specification: if a `rand_chacha` release changed it,
        // every recorded seed would name another search, so these values are pinned.
        let mut r = search_rng(0);
        let first: [u64; 2] = [r.random(), r.random()];
        assert_eq!(first, [0xB585_F767_A79A_3B6C, 0x7746_A55F_BAD8_C037]);
        // Probabilities outside [0, 1] and NaN are clamped, not a panic.
        assert!(!chance(&mut r, f64::NAN) && !chance(&mut r, -1.0) && chance(&mut r, 2.0));
    }

    #[test]
    fn budget_is_respected_and_nothing_is_evaluated_twice() {
        let space = Space::from_variants(big_grid(), 64);
        for budget in [0, 1, 5, 17, 30] {
            let mut calls = Vec::new();
            let mut eval = |v: &'static VariantSpec| {
                calls.push(v.name);
                timed(v)
            };
            let mut ticks = Vec::new();
            let config = SearchConfig {
                budget,
                ..SearchConfig::default()
            };
            let result = search(&space, &[], &config, &mut eval, |d, t| ticks.push((d, t)));
            assert_eq!(calls.len(), budget);
            assert_eq!(result.evaluations, budget);
            assert_eq!(result.history.len(), budget);
            let mut names = calls.clone();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), calls.len(), "a variant evaluated twice");
            assert_eq!(ticks, (1..=budget).map(|d| (d, budget)).collect::<Vec<_>>());
            assert!(!result.exhausted);
            assert_eq!(result.best.is_none(), budget == 0);
        }
    }

    #[test]
    fn a_budget_larger_than_the_space_evaluates_it_all_once() {
        let space = Space::from_variants(VARIANTS, 128);
        let config = SearchConfig {
            budget: 1000,
            ..SearchConfig::default()
        };
        let mut ticks = Vec::new();
        let result = search(&space, &[], &config, &mut timed, |d, t| ticks.push((d, t)));
        assert!(result.exhausted);
        assert_eq!(result.evaluations, space.len());
        assert_eq!(ticks.last(), Some(&(space.len(), space.len())));
        let best = space
            .variants()
            .iter()
            .min_by(|a, b| cost(a).total_cmp(&cost(b)))
            .unwrap();
        assert_eq!(result.best.unwrap().variant, best.name);
    }

    #[test]
    fn the_same_seed_gives_the_same_search() {
        let space = Space::from_variants(big_grid(), 64);
        for seed in [0, 1, 99] {
            let config = SearchConfig {
                budget: 25,
                seed,
                ..SearchConfig::default()
            };
            let a = run(&space, &["flash_mma_m64_n32_w4_s2_legacy"], &config);
            let b = run(&space, &["flash_mma_m64_n32_w4_s2_legacy"], &config);
            assert_eq!(a.to_csv(), b.to_csv());
            assert_eq!(a.population, b.population);
        }
        let a = run(&space, &[], &SearchConfig::default());
        let b = run(
            &space,
            &[],
            &SearchConfig {
                seed: 12345,
                ..SearchConfig::default()
            },
        );
        assert_ne!(a.to_csv(), b.to_csv(), "different seeds, same search");
    }

    #[test]
    fn elitism_keeps_the_best_ever_correct_candidate() {
        let space = Space::from_variants(big_grid(), 64);
        for seed in 0..40 {
            let config = SearchConfig {
                budget: 5 + (seed as usize % 30),
                seed,
                ..SearchConfig::default()
            };
            let result = run(&space, &[], &config);
            // The fastest time ever measured; ties go to the earlier variant in the space.
            let best_ever = result
                .history
                .iter()
                .filter_map(|r| r.p50_us.map(|t| (t, space.index_of(r.variant).unwrap())))
                .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
                .unwrap();
            let best = result.best.unwrap();
            assert_eq!(
                (best.p50_us, best.variant),
                (best_ever.0, space.variant(best_ever.1).name)
            );
            assert_eq!(result.population[0], best);
            assert!(result.population.len() <= config.population);
            // The population is sorted and every member was evaluated as timed.
            for w in result.population.windows(2) {
                assert!(w[0].p50_us <= w[1].p50_us);
            }
        }
    }

    #[test]
    fn elite_survive_a_generation_of_better_children() {
        let ranked = |index: usize, p50_us: f64| Ranked {
            variant: "x",
            p50_us,
            spec: &VARIANTS[0],
            index,
        };
        let parents: Vec<Ranked> = (0..8).map(|i| ranked(i, i as f64)).collect();
        let children: Vec<Ranked> = (8..16).map(|i| ranked(i, 10.0 + i as f64)).collect();
        let next = next_population(&parents, &children, 3, 8);
        let indices: Vec<usize> = next.iter().map(|r| r.index).collect();
        // The 3 elite parents, then the 5 best children (generational replacement).
        assert_eq!(indices, vec![0, 1, 2, 8, 9, 10, 11, 12]);
    }

    #[test]
    fn incorrect_and_failed_candidates_never_win() {
        let space = Space::from_variants(big_grid(), 64);
        let fastest = "flash_mma_m128_n64_w4_s3_light";
        let second = "flash_mma_m128_n64_w4_s3_legacy";
        let mut eval = |v: &'static VariantSpec| match v.name {
            // The two "fastest" by the cost model fail the correctness or launch gates.
            n if n == fastest => Outcome::Incorrect { max_err: 0.5 },
            n if n == second => Outcome::Failed {
                message: "launch failed, \"illegal address\"".into(),
            },
            n if n.contains("m192_n128") => Outcome::NotCompiled,
            n if n.contains("m64_n32") => Outcome::Timed { p50_us: f64::NAN },
            _ => timed(v),
        };
        for seed in 0..10 {
            let config = SearchConfig {
                budget: 1000,
                seed,
                ..SearchConfig::default()
            };
            let result = search(&space, &[fastest, second], &config, &mut eval, |_, _| {});
            assert!(result.exhausted);
            let best = result.best.unwrap();
            // The fastest left by the cost model: 4 stages instead of the failed 3.
            assert_eq!(best.variant, "flash_mma_m128_n64_w4_s4_light");
            for r in &result.population {
                assert!(r.variant != fastest && r.variant != second);
                assert!(!r.variant.contains("m192_n128") && !r.variant.contains("m64_n32"));
            }
            let bad = result.history.iter().find(|r| r.variant == fastest).unwrap();
            assert_eq!(bad.outcome, OutcomeKind::Incorrect);
            assert_eq!(bad.max_err, Some(0.5));
            assert_eq!(bad.p50_us, None);
        }
    }

    #[test]
    fn all_incorrect_gives_no_best() {
        let space = Space::from_variants(VARIANTS, 64);
        let mut eval = |_: &'static VariantSpec| Outcome::Incorrect { max_err: 1.0 };
        let result = search(
            &space,
            &[],
            &SearchConfig {
                budget: 100,
                ..SearchConfig::default()
            },
            &mut eval,
            |_, _| {},
        );
        assert!(result.best.is_none() && result.population.is_empty());
        assert_eq!(result.evaluations, space.len());
    }

    #[test]
    fn seeds_come_first_in_order_and_unknown_seeds_are_reported() {
        let space = Space::from_variants(VARIANTS, 128);
        let seeds = [
            "flash_mma_m128_n32_w4_s3_qsmem_light",
            "naive",
            "flash_mma_m128_n64_w4_s2_light", // head dim 64 only
            "flash_mma_m64_n64_w4_s2_light",
            "flash_mma_m128_n32_w4_s3_qsmem_light",
            "no_such_kernel",
        ];
        let result = run(&space, &seeds, &SearchConfig::default());
        let first: Vec<(&str, Origin)> = result
            .history
            .iter()
            .take(3)
            .map(|r| (r.variant, r.origin))
            .collect();
        assert_eq!(
            first,
            vec![
                ("flash_mma_m128_n32_w4_s3_qsmem_light", Origin::Seed),
                ("flash_mma_m64_n64_w4_s2_light", Origin::Seed),
                (result.history[2].variant, Origin::Random),
            ]
        );
        assert_eq!(
            result.ignored_seeds,
            vec!["naive", "flash_mma_m128_n64_w4_s2_light", "no_such_kernel"]
        );
        assert!(result
            .history
            .iter()
            .all(|r| r.generation > 0 || matches!(r.origin, Origin::Seed | Origin::Random)));
    }

    #[test]
    fn a_space_of_one_variant() {
        let table: &'static [VariantSpec] = Box::leak(Box::new([VARIANTS[4]]));
        let space = Space::from_variants(table, 64);
        assert_eq!(space.len(), 1);
        assert_eq!(space.mutate(0, &mut search_rng(0)), None);
        assert_eq!(space.recombine(0, 0, &mut search_rng(0)), 0);
        let result = run(&space, &[], &SearchConfig::default());
        assert_eq!(result.evaluations, 1);
        assert!(result.exhausted);
        assert_eq!(result.best.unwrap().variant, VARIANTS[4].name);
        assert_eq!(result.generations, 0);
    }

    #[test]
    fn an_empty_space() {
        let space = Space::from_variants(VARIANTS, 96);
        assert!(space.is_empty());
        let result = run(
            &space,
            &["flash_mma_m64_n64_w4_s2_light"],
            &SearchConfig::default(),
        );
        assert_eq!(result.evaluations, 0);
        assert!(result.best.is_none() && result.exhausted);
    }

    #[test]
    fn the_search_finds_the_optimum_of_a_smooth_cost() {
        // 54 variants, budget 30: the elitist search should reach the minimum from a poor seed.
        let space = Space::from_variants(big_grid(), 64);
        let mut hits = 0;
        for seed in 0..20 {
            let config = SearchConfig {
                budget: 30,
                seed,
                ..SearchConfig::default()
            };
            let result = run(&space, &["flash_mma_m192_n128_w4_s4_legacy"], &config);
            hits += usize::from(result.best.unwrap().variant == "flash_mma_m128_n64_w4_s3_light");
        }
        assert!(hits >= 15, "optimum found in {hits}/20 runs");
    }

    #[test]
    fn csv_rows_match_the_header_and_escape_messages() {
        let header = EvalRecord::csv_header();
        assert!(header.starts_with("generation,variant,family,block_m,block_n,sub_n,"));
        let columns = header.split(',').count();
        let v = VariantSpec::by_name("flash_mma_m64_n64_w4_s2_b3_light").unwrap();
        let rows = [
            EvalRecord::new(2, v, Origin::Mutation, &Outcome::Timed { p50_us: 8.5 }),
            EvalRecord::new(0, v, Origin::Seed, &Outcome::Incorrect { max_err: 0.25 }),
            EvalRecord::new(1, v, Origin::Crossover, &Outcome::NotCompiled),
        ];
        for r in &rows {
            assert_eq!(r.to_csv_row().split(',').count(), columns);
        }
        assert_eq!(
            rows[0].to_csv_row(),
            "2,flash_mma_m64_n64_w4_s2_b3_light,flash_mma,64,64,,4,8,2,light,true,false,3,false,false,\
             mutation,timed,,8.5,"
        );
        assert!(rows[1].to_csv_row().contains(",seed,incorrect,0.25,,"));
        let failed = EvalRecord::new(
            1,
            v,
            Origin::Immigrant,
            &Outcome::Failed {
                message: "bad, \"worse\"".into(),
            },
        );
        assert!(failed
            .to_csv_row()
            .ends_with(",immigrant,failed,,,\"bad, \"\"worse\"\"\""));
    }

    #[test]
    fn csv_reads_back_to_the_same_fields_whatever_the_message_holds() {
        let v = VariantSpec::by_name("flash_mma_m64_n64_w4_s2_b3_light").unwrap();
        let message = "line one, \"quoted\"\r\nline two";
        let records = [
            EvalRecord::new(
                0,
                v,
                Origin::Seed,
                &Outcome::Failed {
                    message: message.into(),
                },
            ),
            EvalRecord::new(1, v, Origin::Random, &Outcome::Timed { p50_us: 3.25 }),
        ];
        let text = csv_text(
            std::iter::once(
                EvalRecord::csv_columns()
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
            )
            .chain(records.iter().map(EvalRecord::csv_fields)),
        );
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_string).collect();
        assert_eq!(header, EvalRecord::csv_columns());
        let rows: Vec<Vec<String>> = reader
            .records()
            .map(|r| r.unwrap().iter().map(str::to_string).collect())
            .collect();
        assert_eq!(
            rows,
            records.iter().map(EvalRecord::csv_fields).collect::<Vec<_>>()
        );
        assert_eq!(rows[0].last().map(String::as_str), Some(message));
    }

    #[test]
    fn result_serializes_to_json() {
        let space = Space::from_variants(VARIANTS, 64);
        let result = run(
            &space,
            &[],
            &SearchConfig {
                budget: 4,
                ..SearchConfig::default()
            },
        );
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(json["evaluations"], 4);
        assert_eq!(json["config"]["elite"], 3);
        assert!(json["best"]["variant"].is_string());
        assert!(json["best"]["p50_us"].is_number());
        let record = &json["history"][0];
        assert!(record["block_m"].is_number(), "spec flattened: {record}");
        assert_eq!(record["outcome"], "timed");
        let outcome = serde_json::to_value(Outcome::Incorrect { max_err: 0.5 }).unwrap();
        assert_eq!(outcome["kind"], "incorrect");
    }
}
