//! Timing in rounds: each round times our side and the peers' in an order that alternates from
//! round to round, and the rounds' rows are merged into one row per thing measured (the median
//! round's); the timed calls themselves ([`time_calls`]) and the clocks sampled beside them.

use flashrs_lab::clocks::{ClockSampler, DEFAULT_PERIOD};
use flashrs_lab::stats::Summary;
use flashrs_lab::timing::warmup_replays;
use flashrs_lab::Timing;

use flashrs::{DType, Shape};

use crate::report::{row_from, Row};
use crate::Failure;

/// The names of a round's two sides: the one timed first on odd rounds, and the other.
pub type Sides = [&'static str; 2];

/// The header line's end: how many rounds and how they are told apart; nothing for one.
pub fn rounds_text(rounds: u32, [odd, even]: Sides) -> String {
    if rounds > 1 {
        format!(
            ", in {rounds} rounds (odd rounds {odd} first, even rounds {even} first; each row from \
             its median round)"
        )
    } else {
        String::new()
    }
}

/// Which side a round times first: ours (for `--dtype e4m3`, the e4m3 rows) or the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    OursFirst,
    PeersFirst,
}

impl Order {
    pub(crate) fn describe(self, [ours, other]: Sides) -> String {
        match self {
            Order::OursFirst => format!("{ours} first"),
            Order::PeersFirst => format!("{other} first"),
        }
    }
}

/// The order of round `round` (counted from 1): ours first on odd rounds, the peers first on
/// even ones. Whichever side runs first starts on a card that has idled (the peer helper's
/// start-up, the gap between rounds) and so at a higher clock; alternating keeps that from
/// favouring one side in every round.
pub fn round_order(round: u32) -> Order {
    if round % 2 == 1 {
        Order::OursFirst
    } else {
        Order::PeersFirst
    }
}

/// `rounds` rounds of `time_round` (given each round's [`round_order`] and the round's notes),
/// each row with the clocks of its own timed window, merged into one row per thing measured
/// ([`merge_rounds`]); the rounds' notes join `notes` ([`merge_notes`]). `sides` name the
/// orders in each round's line.
pub fn measure_rounds<R: AsRef<Row> + AsMut<Row>>(
    gpu: &flashrs::Gpu,
    rounds: u32,
    sides: Sides,
    notes: &mut Vec<String>,
    mut time_round: impl FnMut(Order, &mut Vec<String>) -> Result<Vec<R>, Failure>,
) -> Result<Vec<R>, Failure> {
    let clocks = start_clocks(gpu, notes);
    let mut timed = Vec::new();
    let mut round_notes = Vec::new();
    for round in 1..=rounds {
        let order = round_order(round);
        if rounds > 1 {
            println!("round {round}/{rounds}: {}", order.describe(sides));
        }
        let mut these_notes = Vec::new();
        let mut rows = time_round(order, &mut these_notes)?;
        // Per round, while the sampler still runs: each row's window is its own round's.
        record_clocks(clocks.as_ref(), rows.iter_mut().map(AsMut::as_mut));
        timed.push(rows);
        round_notes.push(these_notes);
    }
    notes.extend(merge_notes(round_notes));
    Ok(merge_rounds(timed))
}

/// What a row measured, apart from how long it took: rows of different rounds with the same
/// key are one measurement repeated. Every field that tells the rows of one pass apart: those
/// [`summarise`] and [`gate_failures`] match cases on, and the kernel, side, element type,
/// layout, page size and varlen lengths that tell rows of one case apart.
#[derive(Clone, Copy, PartialEq)]
struct RowKey<'a> {
    kernel: &'a str,
    backend: Option<&'a str>,
    peer: bool,
    shape: [usize; 4],
    seq_k: usize,
    heads_kv: usize,
    causal: bool,
    dtype: &'a str,
    layout: Option<flashrs::Layout>,
    block_size: Option<usize>,
    varlen_lens: Option<&'a [usize]>,
}

impl<'a> RowKey<'a> {
    fn of(row: &'a Row) -> RowKey<'a> {
        RowKey {
            kernel: &row.kernel,
            backend: row.backend.as_deref(),
            peer: row.peer,
            shape: row.shape,
            seq_k: row.seq_k,
            heads_kv: row.heads_kv,
            causal: row.causal,
            dtype: &row.dtype,
            layout: row.layout,
            block_size: row.block_size,
            varlen_lens: row.varlen_lens.as_deref(),
        }
    }
}

/// The position, among one row's rounds' p50s, of the round it is merged from: the median, or
/// for an even count the lower of the middle two, so that the merged row is always one real
/// measurement and never an average of two. Equal p50s keep round order.
pub(crate) fn median_round(p50s: &[f64]) -> usize {
    let mut by_time: Vec<usize> = (0..p50s.len()).collect();
    by_time.sort_by(|&a, &b| p50s[a].total_cmp(&p50s[b]));
    by_time
        .get(p50s.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0)
}

/// The rows of several rounds, one per thing measured ([`RowKey`]): the row of its median
/// round ([`median_round`]), so that every field (p90, clocks, samples..) stays that of one
/// measurement, with every round's p50 in `rounds_p50_us`. A row missing from some rounds (a
/// peer that failed once) is merged from those it has. Rows keep the order they were first
/// timed in. A single round is returned as it is. `R` is a [`Row`] or a row with more beside
/// it (the FP8 bench's), merged by its `Row` and kept whole.
pub fn merge_rounds<R: AsRef<Row> + AsMut<Row>>(rounds: Vec<Vec<R>>) -> Vec<R> {
    if rounds.len() <= 1 {
        return rounds.into_iter().flatten().collect();
    }
    // A key's n-th row in one round goes with its n-th in the others: a case listed twice is
    // timed twice in every round.
    let mut groups: Vec<((RowKey, usize), Timings)> = Vec::new();
    for (round, rows) in rounds.iter().enumerate() {
        let mut seen: Vec<RowKey> = Vec::new();
        for (index, row) in rows.iter().enumerate() {
            let row = row.as_ref();
            let key = RowKey::of(row);
            let id = (key, seen.iter().filter(|&&k| k == key).count());
            seen.push(key);
            let at = match groups.iter().position(|(other, _)| *other == id) {
                Some(at) => at,
                None => {
                    groups.push((id, Timings::default()));
                    groups.len() - 1
                }
            };
            groups[at].1.at.push((round, index));
            groups[at].1.p50s.push(row.p50_us);
        }
    }
    let groups: Vec<Timings> = groups.into_iter().map(|(_, timings)| timings).collect();
    let mut slots: Vec<Vec<Option<R>>> = rounds
        .into_iter()
        .map(|rows| rows.into_iter().map(Some).collect())
        .collect();
    let mut merged = Vec::with_capacity(groups.len());
    for timings in groups {
        let (round, index) = timings.at[median_round(&timings.p50s)];
        // Every (round, index) is in exactly one group, so its row is still in its slot.
        if let Some(mut row) = slots[round][index].take() {
            row.as_mut().rounds_p50_us = Some(timings.p50s);
            merged.push(row);
        }
    }
    merged
}

/// The notes of every round, each once, in the order first raised; one raised in only some
/// rounds (a peer that failed once) names them, so that a row's missing rounds can be traced.
/// A single round's notes are kept as they are.
pub(crate) fn merge_notes(rounds: Vec<Vec<String>>) -> Vec<String> {
    if rounds.len() <= 1 {
        return rounds.into_iter().flatten().collect();
    }
    let mut raised: Vec<(String, Vec<usize>)> = Vec::new();
    for (round, notes) in rounds.iter().enumerate() {
        for note in notes {
            match raised.iter_mut().find(|(n, _)| n == note) {
                Some((_, in_rounds)) => {
                    if !in_rounds.contains(&(round + 1)) {
                        in_rounds.push(round + 1);
                    }
                }
                None => raised.push((note.clone(), vec![round + 1])),
            }
        }
    }
    raised
        .into_iter()
        .map(|(note, in_rounds)| {
            if in_rounds.len() == rounds.len() {
                return note;
            }
            let list: Vec<String> = in_rounds.iter().map(|r| r.to_string()).collect();
            let plural = if in_rounds.len() > 1 { "s" } else { "" };
            format!("{note} (round{plural} {} of {})", list.join(", "), rounds.len())
        })
        .collect()
}

/// How many times, and after how much warm-up, `bench` times a call (ours and, through the
/// helper, the peers'): `--iters`, `--warmup`, `--warmup-ms`, `--calls-per-graph`.
#[derive(Clone, Copy, Debug)]
pub struct Repetitions {
    pub iters: u32,
    pub warmup: u32,
    pub warmup_ms: f64,
    pub calls_per_graph: u32,
}

/// A call timed the way every row of ours is: single launches (their p50 sizes the graph and is
/// the row's launch p50), then replays of a graph of about a millisecond of calls, after
/// `--warmup` replays and `--warmup-ms` of them.
pub struct Timed {
    single_p50: f64,
    calls: u32,
    replays: flashrs_lab::Replays,
}

impl Timed {
    /// The row of these timings (its window kept for the clock lookup).
    pub fn row(
        self,
        kernel: String,
        shape: Shape,
        dtype: DType,
        causal: bool,
        backend: Option<String>,
    ) -> Result<Row, Failure> {
        let mut row = row_from(
            kernel,
            shape,
            dtype,
            causal,
            self.calls,
            self.replays.samples_us,
            backend,
        )?;
        row.event_p50_us = Some(self.single_p50);
        row.window = Some(self.replays.window);
        Ok(row)
    }
}

/// Times `launch` as [`Timed`] says, with `reps`' counts and warm-up.
pub fn time_calls<E>(
    gpu: &flashrs::Gpu,
    reps: Repetitions,
    mut launch: impl FnMut() -> Result<(), E>,
) -> Result<Timed, Failure>
where
    E: From<flashrs::Error>,
    Failure: From<E>,
{
    let (warmup, iters) = (reps.warmup as usize, reps.iters as usize);
    let singles = gpu.time_each(warmup, iters, &mut launch)?;
    let single_p50 = Summary::from_samples(&singles)
        .ok_or_else(|| Failure::Usage("no valid timings".into()))?
        .p50;
    // About a millisecond of work per replay: launch gaps amortised, long kernels not repeated needlessly.
    let calls = ((1000.0 / single_p50) as u32).clamp(1, reps.calls_per_graph);
    let warmup = warmup_replays(warmup, reps.warmup_ms, calls as usize, single_p50);
    let replays = gpu.time_graph_of(calls as usize, warmup, iters, &mut launch)?;
    Ok(Timed {
        single_p50,
        calls,
        replays,
    })
}

/// The device's clock sampler, or `None` with a note saying why rows carry no clocks.
pub fn start_clocks(gpu: &flashrs::Gpu, notes: &mut Vec<String>) -> Option<ClockSampler> {
    let uuid = match gpu.context().uuid() {
        Ok(uuid) => uuid.bytes.map(|b| b as u8),
        Err(e) => {
            notes.push(format!(
                "clocks not recorded: the driver gave no device UUID ({e})"
            ));
            return None;
        }
    };
    ClockSampler::start(uuid, DEFAULT_PERIOD)
        .map_err(|reason| notes.push(format!("clocks not recorded: {reason}")))
        .ok()
}

/// One thing's rows in the rounds that timed it, in round order: where each is (round, index
/// in that round's rows) and its p50.
#[derive(Default)]
struct Timings {
    at: Vec<(usize, usize)>,
    p50s: Vec<f64>,
}

/// Each row's clocks over its timed window, from `clocks` (none without a sampler).
pub fn record_clocks<'a>(clocks: Option<&ClockSampler>, rows: impl IntoIterator<Item = &'a mut Row>) {
    if let Some(clocks) = clocks {
        for row in rows {
            row.clocks = row.window.and_then(|window| clocks.during(window));
        }
    }
}
