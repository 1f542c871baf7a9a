//! Measuring kernels on a [`Gpu`]: event timing of single calls, CUDA-graph replay of
//! back-to-back calls, the driver's occupancy, and the block barriers and SM cycles per KV tile
//! that the barrier-counting twins record. An extension trait, so that `bench`, `tune`, `micro`
//! and `verify` call `gpu.time_graph(..)` while the user crate has no timing in its API.

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaSlice;
use serde::Serialize;

use flashrs::gpu::RECORD_WORDS;
use flashrs::{Error, Gpu, Kernel, Params, Result, Tensors, VariantSpec};
use flashrs::{PagedTensors, VarlenTensors};

use crate::clocks::Window;
use crate::timeline::{timelines, BlockTimeline};

/// Graph replays timed by [`Timing::time_graph_of`]: microseconds per call, one sample per replay,
/// and when the timed replays ran (to look up the clock they ran at).
#[derive(Clone, Debug)]
pub struct Replays {
    /// Per-call microseconds of each timed replay.
    pub samples_us: Vec<f64>,
    /// From the first timed replay's enqueue to the last one's end.
    pub window: Window,
}

/// Warm-up replays for a graph of `calls` calls of about `call_us` each: at least `count`, and
/// at least `min_ms` of work, so that a kernel is timed in the clock and power state its own
/// sustained load brings the GPU to, not in what the work before it (or an idle spell) left.
pub fn warmup_replays(count: usize, min_ms: f64, calls: usize, call_us: f64) -> usize {
    let replay_us = calls as f64 * call_us;
    // Also refuses NaN: only a positive replay time and minimum make a time-based warm-up.
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(replay_us) || !positive(min_ms) {
        return count;
    }
    count.max((min_ms * 1000.0 / replay_us).ceil().min(1e7) as usize)
}

/// Barriers counted at run time by a variant's `_counted` twin.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct BarrierCount {
    /// Block barriers per KV tile, identical for every block (else an error says which differ).
    pub per_tile: f64,
    /// Blocks the kernel was launched with.
    pub blocks: usize,
    /// KV tiles the blocks processed, summed over all blocks.
    pub tiles: u64,
    /// SM clock cycles per KV tile, the median over blocks of a block's cycles (from the start of
    /// its KV loop to its end) over its tiles.
    pub cycles_per_tile: f64,
    /// Distinct multiprocessors the blocks ran on.
    pub sms_used: usize,
}

/// Timing and counting on a GPU. Every method works on this GPU's own stream: the events and
/// graph captures are recorded there, so work on another stream would not be inside them.
pub trait Timing {
    /// Times `iters` calls of `launch` (work enqueued on this GPU's stream), each between its own
    /// pair of CUDA events, after `warmup` calls. Microseconds per call.
    fn time_each<E: From<Error>>(
        &self,
        warmup: usize,
        iters: usize,
        launch: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Vec<f64>, E>;

    /// Times `calls` back-to-back calls of `launch` captured in one CUDA graph, replayed
    /// `replays` times after `warmup` replays (see [`warmup_replays`]). Microseconds per call,
    /// one sample per replay, and the timed replays' wall-clock window.
    /// Launch overhead is amortised the way a framework's graph capture would, which is what
    /// makes small, launch-bound shapes comparable between kernels and peers.
    fn time_graph_of<E: From<Error>>(
        &self,
        calls: usize,
        warmup: usize,
        replays: usize,
        launch: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Replays, E>;

    /// [`time_each`](Timing::time_each) of launches of `kernel` on `tensors`.
    fn time_launches(
        &self,
        kernel: &Kernel,
        tensors: &mut Tensors,
        params: Params,
        warmup: usize,
        iters: usize,
    ) -> Result<Vec<f64>>;

    /// [`time_graph_of`](Timing::time_graph_of) launches of `kernel` on `tensors`.
    fn time_graph(
        &self,
        kernel: &Kernel,
        tensors: &mut Tensors,
        params: Params,
        calls: usize,
        warmup: usize,
        replays: usize,
    ) -> Result<Replays>;

    /// Blocks of `kernel` that fit on one multiprocessor at once (registers, shared memory,
    /// threads), as the driver's occupancy calculator says.
    fn resident_blocks(&self, kernel: &Kernel) -> Result<u32>;

    /// Runs `variant`'s counted twin once on `tensors` and returns the block barriers and SM
    /// cycles per KV tile.
    fn count_barriers(
        &self,
        variant: &'static VariantSpec,
        tensors: &mut Tensors,
        params: Params,
    ) -> Result<BarrierCount>;

    /// Runs `variant`'s counted twin once on `tensors` and returns its blocks' timelines
    /// ([`crate::timeline`]; none for a family that records none).
    fn trace_items(
        &self,
        variant: &'static VariantSpec,
        tensors: &mut Tensors,
        params: Params,
    ) -> Result<Vec<BlockTimeline>>;

    /// [`trace_items`](Timing::trace_items) for the counted twin of `variant`'s varlen entry point
    /// (a persistent `flash_ws` one walks the host's table of the batch's items).
    fn trace_varlen_items(
        &self,
        variant: &'static VariantSpec,
        tensors: &mut VarlenTensors,
        params: Params,
    ) -> Result<Vec<BlockTimeline>>;

    /// [`count_barriers`](Timing::count_barriers) for the counted twin of `variant`'s paged entry
    /// point (a `flash_decode` variant).
    fn count_paged_barriers(
        &self,
        variant: &'static VariantSpec,
        tensors: &mut PagedTensors,
        params: Params,
    ) -> Result<BarrierCount>;

    /// [`count_barriers`](Timing::count_barriers) for the counted twin of `variant`'s varlen entry
    /// point (blocks past their sequence's rows record nothing and are skipped).
    fn count_varlen_barriers(
        &self,
        variant: &'static VariantSpec,
        tensors: &mut VarlenTensors,
        params: Params,
    ) -> Result<BarrierCount>;
}

impl Timing for Gpu {
    fn time_each<E: From<Error>>(
        &self,
        warmup: usize,
        iters: usize,
        mut launch: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Vec<f64>, E> {
        for _ in 0..warmup {
            launch()?;
        }
        let stream = self.stream();
        let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let mut events = Vec::with_capacity(iters);
        for _ in 0..iters {
            let start = stream.record_event(flags).map_err(driver)?;
            launch()?;
            let end = stream.record_event(flags).map_err(driver)?;
            events.push((start, end));
        }
        stream.synchronize().map_err(driver)?;
        events
            .iter()
            .map(|(start, end)| Ok(start.elapsed_ms(end).map_err(driver)? as f64 * 1000.0))
            .collect()
    }

    fn time_graph_of<E: From<Error>>(
        &self,
        calls: usize,
        warmup: usize,
        replays: usize,
        mut launch: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Replays, E> {
        // One eager call first: argument errors surface here, not as a failed capture.
        launch()?;
        let stream = self.stream();
        stream.synchronize().map_err(driver)?;
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver)?;
        let mut captured = Ok(());
        for _ in 0..calls {
            captured = launch();
            if captured.is_err() {
                break;
            }
        }
        // End the capture whatever happened, so the stream is usable afterwards.
        let graph = stream.end_capture(CUgraphInstantiate_flags(0)).map_err(driver)?;
        captured?;
        let graph =
            graph.ok_or_else(|| E::from(Error::InvalidProblem("graph capture recorded nothing".into())))?;
        graph.upload().map_err(driver)?;
        for _ in 0..warmup {
            graph.launch().map_err(driver)?;
        }
        // Wait for the warm-up, so the window below holds the timed replays only (the GPU idles
        // for the few microseconds this takes).
        stream.synchronize().map_err(driver)?;
        let started = std::time::SystemTime::now();
        let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let mut events = Vec::with_capacity(replays);
        for _ in 0..replays {
            let start = stream.record_event(flags).map_err(driver)?;
            graph.launch().map_err(driver)?;
            let end = stream.record_event(flags).map_err(driver)?;
            events.push((start, end));
        }
        stream.synchronize().map_err(driver)?;
        let window = Window {
            start: started,
            end: std::time::SystemTime::now(),
        };
        let samples_us = events
            .iter()
            .map(|(start, end)| Ok(start.elapsed_ms(end).map_err(driver)? as f64 * 1000.0 / calls as f64))
            .collect::<std::result::Result<Vec<f64>, E>>()?;
        Ok(Replays { samples_us, window })
    }

    fn time_launches(
        &self,
        kernel: &Kernel,
        tensors: &mut Tensors,
        params: Params,
        warmup: usize,
        iters: usize,
    ) -> Result<Vec<f64>> {
        self.check_tensors_on_own_stream(tensors)?;
        self.time_each(warmup, iters, || self.launch(kernel, tensors, params, None))
    }

    fn time_graph(
        &self,
        kernel: &Kernel,
        tensors: &mut Tensors,
        params: Params,
        calls: usize,
        warmup: usize,
        replays: usize,
    ) -> Result<Replays> {
        self.check_tensors_on_own_stream(tensors)?;
        self.time_graph_of(calls, warmup, replays, || {
            self.launch(kernel, tensors, params, None)
        })
    }

    fn resident_blocks(&self, kernel: &Kernel) -> Result<u32> {
        // The module hands out one function per symbol, the one `kernel` opted into its shared
        // memory, so the calculator sees the launch's real limit.
        let function = self.function(kernel.symbol())?;
        Ok(function.occupancy_max_active_blocks_per_multiprocessor(
            kernel.variant().threads(),
            kernel.smem_bytes() as usize,
            None,
        )?)
    }

    fn count_barriers(
        &self,
        variant: &'static VariantSpec,
        tensors: &mut Tensors,
        params: Params,
    ) -> Result<BarrierCount> {
        let shape = tensors.shape();
        let kernel = self.kernel(variant, shape.head_dim, tensors.dtype(), true)?;
        let mut log = zeroed_log(self, &kernel, shape)?;
        self.launch(&kernel, tensors, params, Some(&mut log))?;
        barrier_count(&self.download(&log)?, kernel.symbol())
    }

    fn trace_items(
        &self,
        variant: &'static VariantSpec,
        tensors: &mut Tensors,
        params: Params,
    ) -> Result<Vec<BlockTimeline>> {
        let shape = tensors.shape();
        let kernel = self.kernel(variant, shape.head_dim, tensors.dtype(), true)?;
        let mut log = zeroed_log(self, &kernel, shape)?;
        self.launch(&kernel, tensors, params, Some(&mut log))?;
        timelines(&self.download(&log)?)
    }

    fn trace_varlen_items(
        &self,
        variant: &'static VariantSpec,
        tensors: &mut VarlenTensors,
        params: Params,
    ) -> Result<Vec<BlockTimeline>> {
        let (log, _) = counted_varlen_launch(self, variant, tensors, params)?;
        timelines(&log)
    }

    fn count_paged_barriers(
        &self,
        variant: &'static VariantSpec,
        tensors: &mut PagedTensors,
        params: Params,
    ) -> Result<BarrierCount> {
        let shape = tensors.shape();
        let kernel = self.paged_kernel(variant, shape.head_dim, tensors.dtype(), true)?;
        let mut log = zeroed_log(self, kernel.kernel(), shape)?;
        self.launch_paged(&kernel, tensors, params, Some(&mut log))?;
        barrier_count(&self.download(&log)?, kernel.kernel().symbol())
    }

    fn count_varlen_barriers(
        &self,
        variant: &'static VariantSpec,
        tensors: &mut VarlenTensors,
        params: Params,
    ) -> Result<BarrierCount> {
        let (log, symbol) = counted_varlen_launch(self, variant, tensors, params)?;
        barrier_count(&log, &symbol)
    }
}

/// One launch of the counted twin of `variant`'s varlen entry point on `tensors`: its barrier
/// log and the twin's symbol.
fn counted_varlen_launch(
    gpu: &Gpu,
    variant: &'static VariantSpec,
    tensors: &mut VarlenTensors,
    params: Params,
) -> Result<(Vec<u32>, String)> {
    let (_, _, head_dim) = tensors.heads();
    let kernel = gpu.varlen_kernel(variant, head_dim, tensors.dtype(), true)?;
    let words = gpu.varlen_barrier_log_len(&kernel, tensors)?;
    let mut log = gpu.stream().alloc_zeros::<u32>(words)?;
    gpu.launch_varlen(&kernel, tensors, params, Some(&mut log))?;
    Ok((gpu.download(&log)?, kernel.kernel().symbol().to_string()))
}

/// A zeroed barrier log for a counted launch of `kernel` on `shape`, on the GPU's stream.
fn zeroed_log(gpu: &Gpu, kernel: &Kernel, shape: flashrs::Shape) -> Result<CudaSlice<u32>> {
    let words = gpu.barrier_log_len(kernel, shape)?;
    Ok(gpu.stream().alloc_zeros::<u32>(words)?)
}

/// A driver error as the library's, then as the caller's error type.
fn driver<E: From<Error>>(error: cudarc::driver::DriverError) -> E {
    E::from(Error::from(error))
}

/// Reads the barrier log of a counted launch ([`RECORD_WORDS`] per block: barriers, tiles,
/// cycles, SM): the barriers per tile, which must be the same in every block that had tiles, or
/// the policy's count is not what the kernel runs.
pub fn barrier_count(log: &[u32], symbol: &str) -> Result<BarrierCount> {
    if !log.len().is_multiple_of(RECORD_WORDS) {
        return Err(Error::InvalidProblem(format!(
            "{symbol}: a barrier log of {} words is not whole records of {RECORD_WORDS}",
            log.len()
        )));
    }
    let mut per_tile: Option<f64> = None;
    let mut tiles_total = 0u64;
    let mut cycles = Vec::with_capacity(log.len() / RECORD_WORDS);
    let mut sms = std::collections::BTreeSet::new();
    for (block, record) in log.chunks_exact(RECORD_WORDS).enumerate() {
        let (barriers, tiles) = (record[0], record[1]);
        tiles_total += tiles as u64;
        sms.insert(record[3]);
        if tiles == 0 {
            continue;
        }
        cycles.push(record[2] as f64 / tiles as f64);
        let ratio = barriers as f64 / tiles as f64;
        match per_tile {
            None => per_tile = Some(ratio),
            Some(first) if first != ratio => {
                return Err(Error::InvalidProblem(format!(
                    "{symbol}: block {block} ran {barriers} barriers over {tiles} tiles ({ratio}/tile), \
                     other blocks {first}/tile"
                )))
            }
            Some(_) => {}
        }
    }
    Ok(BarrierCount {
        per_tile: per_tile.unwrap_or(0.0),
        blocks: log.len() / RECORD_WORDS,
        tiles: tiles_total,
        cycles_per_tile: crate::stats::median(&cycles).unwrap_or(0.0),
        sms_used: sms.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Barrier logs of the given headers (barriers, tiles, cycles, SM), each padded to a record.
    fn log_of(headers: &[[u32; 4]]) -> Vec<u32> {
        let mut log = vec![0; headers.len() * RECORD_WORDS];
        for (record, header) in log.chunks_exact_mut(RECORD_WORDS).zip(headers) {
            record[..4].copy_from_slice(header);
        }
        log
    }

    #[test]
    fn a_log_gives_barriers_and_cycles_per_tile_over_the_blocks_that_had_tiles() {
        // Records: barriers, tiles, cycles, SM. The third block had no tiles (past its rows).
        let log = log_of(&[[12, 6, 600, 0], [4, 2, 400, 1], [0, 0, 0, 1], [8, 4, 1200, 2]]);
        let count = barrier_count(&log, "k").unwrap();
        assert_eq!(count.per_tile, 2.0);
        assert_eq!((count.blocks, count.tiles, count.sms_used), (4, 12, 3));
        // Cycles per tile 100, 200, 300: the median.
        assert_eq!(count.cycles_per_tile, 200.0);
        // No tiles anywhere: nothing to disagree with.
        let idle = barrier_count(&log_of(&[[0, 0, 0, 5]]), "k").unwrap();
        assert_eq!((idle.per_tile, idle.cycles_per_tile, idle.blocks), (0.0, 0.0, 1));
    }

    #[test]
    fn blocks_that_disagree_or_a_torn_log_are_errors_naming_the_kernel() {
        let log = log_of(&[[12, 6, 600, 0], [6, 2, 400, 1]]);
        let message = barrier_count(&log, "flash_x_counted").unwrap_err().to_string();
        assert!(
            message.contains("flash_x_counted: block 1 ran 6 barriers over 2 tiles"),
            "{message}"
        );
        let torn = barrier_count(&log[..RECORD_WORDS + 3], "k")
            .unwrap_err()
            .to_string();
        assert!(torn.contains("not whole records"), "{torn}");
    }

    #[test]
    fn warmup_is_the_count_or_enough_replays_for_the_minimum_time() {
        // 500 ms of a 0.9 ms call, one per graph: 556 replays.
        assert_eq!(warmup_replays(10, 500.0, 1, 900.0), 556);
        // 20 calls of 10 us per replay: 2,500 replays make 500 ms.
        assert_eq!(warmup_replays(10, 500.0, 20, 10.0), 2500);
        // The count wins when it is more, and without a minimum time.
        assert_eq!(warmup_replays(1000, 500.0, 1, 900.0), 1000);
        assert_eq!(warmup_replays(10, 0.0, 1, 900.0), 10);
        // A call time that is not a time leaves the count alone.
        assert_eq!(warmup_replays(10, 500.0, 1, f64::NAN), 10);
        assert_eq!(warmup_replays(10, 500.0, 1, 0.0), 10);
    }
}
