//! The GPU's SM clock, power draw and temperature while kernels are timed, sampled through NVML
//! on a thread of its own. An H100 under sustained tensor-core load runs against its power limit
//! and lowers its clock within about a tenth of a second; a kernel timed in the first tens of
//! milliseconds after an idle spell runs at a higher clock than the same kernel after seconds of
//! load. Each timed row therefore records the clock it actually ran at, so that two rows are
//! only compared when they were timed in the same state.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

/// Wall-clock bounds of a timed section, as the host saw them (the GPU was busy with the timed
/// work from about `start` to about `end`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Just before the first timed call was enqueued (the GPU idle or finishing the warm-up).
    pub start: SystemTime,
    /// Just after the GPU finished the last timed call.
    pub end: SystemTime,
}

impl Window {
    /// A window from seconds since the Unix epoch (as Python's `time.time()` gives them).
    pub fn from_unix_seconds(start: f64, end: f64) -> Option<Window> {
        let at =
            |s: f64| (s.is_finite() && s >= 0.0).then(|| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(s));
        Some(Window {
            start: at(start)?,
            end: at(end)?,
        })
    }
}

/// One reading of the device.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: SystemTime,
    sm_mhz: u32,
    power_w: f64,
    temp_c: u32,
    power_capped: bool,
}

/// What the device ran at during one window.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockStats {
    /// Median SM clock over the window's samples, MHz.
    pub sm_mhz: f64,
    /// Median board power, watts.
    pub power_w: f64,
    /// Highest GPU temperature seen, degrees Celsius.
    pub temp_c: u32,
    /// Share of samples in which the driver reported the software power cap as holding the clock.
    pub power_capped: f64,
    /// Samples the statistics are made of.
    pub samples: usize,
}

/// Reads the SM clock, power, temperature and throttle reasons of one device every `period`
/// until dropped.
pub struct ClockSampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Reads of the device's state every this often: about 50 samples in a half-second window.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(10);

impl ClockSampler {
    /// Starts sampling the device with CUDA UUID `uuid` (16 bytes, as the driver API gives it).
    /// `Err` says in one line why it cannot (no NVML library, no such device, no permission);
    /// callers record that as a note and time without clocks.
    pub fn start(uuid: [u8; 16], period: Duration) -> Result<ClockSampler, String> {
        let uuid = nvml_uuid(uuid);
        // Checked here, so that a failure is the caller's to report; the library instance then
        // moves to the thread, which opens its own handle (a handle borrows the instance).
        let nvml = Nvml::init().map_err(|e| format!("NVML not available: {e}"))?;
        let device = nvml
            .device_by_uuid(uuid.as_str())
            .map_err(|e| format!("NVML has no device {uuid}: {e}"))?;
        read(&device).map_err(|e| format!("NVML cannot read {uuid}: {e}"))?;

        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, stop) = (samples.clone(), stop.clone());
            std::thread::spawn(move || {
                let Ok(device) = nvml.device_by_uuid(uuid.as_str()) else {
                    return;
                };
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(sample) = read(&device) {
                        samples.lock().unwrap_or_else(|p| p.into_inner()).push(sample);
                    }
                    std::thread::sleep(period);
                }
            })
        };
        Ok(ClockSampler {
            samples,
            stop,
            thread: Some(thread),
        })
    }

    /// The device's clock, power and temperature over `window`; `None` when no sample fell in it
    /// (a window shorter than the sampling period).
    pub fn during(&self, window: Window) -> Option<ClockStats> {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        stats(
            samples
                .iter()
                .filter(|s| s.at >= window.start && s.at <= window.end),
        )
    }
}

impl Drop for ClockSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn read(device: &nvml_wrapper::Device<'_>) -> Result<Sample, nvml_wrapper::error::NvmlError> {
    Ok(Sample {
        at: SystemTime::now(),
        sm_mhz: device.clock_info(Clock::SM)?,
        power_w: device.power_usage()? as f64 / 1000.0,
        temp_c: device.temperature(TemperatureSensor::Gpu)?,
        // Not every board reports reasons; a missing answer counts as not capped.
        power_capped: device
            .current_throttle_reasons()
            .is_ok_and(|r| r.contains(ThrottleReasons::SW_POWER_CAP)),
    })
}

fn stats<'a>(samples: impl Iterator<Item = &'a Sample>) -> Option<ClockStats> {
    let samples: Vec<&Sample> = samples.collect();
    if samples.is_empty() {
        return None;
    }
    let median = |value: fn(&Sample) -> f64| {
        let values: Vec<f64> = samples.iter().map(|s| value(s)).collect();
        crate::stats::median(&values)
    };
    Some(ClockStats {
        sm_mhz: median(|s| s.sm_mhz as f64)?,
        power_w: median(|s| s.power_w)?,
        temp_c: samples.iter().map(|s| s.temp_c).max().unwrap_or(0),
        power_capped: samples.iter().filter(|s| s.power_capped).count() as f64 / samples.len() as f64,
        samples: samples.len(),
    })
}

/// NVML's spelling of a device UUID: `GPU-` and the 16 bytes as 8-4-4-4-12 hex digits.
fn nvml_uuid(bytes: [u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: u64, sm_mhz: u32, power_w: f64, capped: bool) -> Sample {
        Sample {
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(ms),
            sm_mhz,
            power_w,
            temp_c: 40 + (ms / 100) as u32,
            power_capped: capped,
        }
    }

    #[test]
    fn uuid_is_spelled_as_nvml_spells_it() {
        let bytes = [
            0x5c, 0x2b, 0x1a, 0x09, 0x8f, 0x7e, 0x6d, 0x5c, 0x4b, 0x3a, 0x29, 0x18, 0x07, 0xf6, 0xe5, 0xd4,
        ];
        assert_eq!(nvml_uuid(bytes), "GPU-5c2b1a09-8f7e-6d5c-4b3a-291807f6e5d4");
    }

    #[test]
    fn statistics_cover_only_the_window() {
        let samples = [
            sample(0, 1980, 300.0, false),
            sample(100, 1755, 690.0, true),
            sample(200, 1740, 700.0, true),
            sample(300, 1725, 699.0, false),
            sample(400, 1980, 120.0, false),
        ];
        let window = Window {
            start: SystemTime::UNIX_EPOCH + Duration::from_millis(50),
            end: SystemTime::UNIX_EPOCH + Duration::from_millis(350),
        };
        let sampler = ClockSampler {
            samples: Arc::new(Mutex::new(samples.to_vec())),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        let s = sampler.during(window).unwrap();
        assert_eq!((s.sm_mhz, s.power_w, s.temp_c, s.samples), (1740.0, 699.0, 43, 3));
        assert!((s.power_capped - 2.0 / 3.0).abs() < 1e-12);
        let first = Window {
            start: SystemTime::UNIX_EPOCH,
            end: SystemTime::UNIX_EPOCH,
        };
        assert_eq!(sampler.during(first).map(|s| s.samples), Some(1));
        let gap = Window {
            start: SystemTime::UNIX_EPOCH + Duration::from_millis(10),
            end: SystemTime::UNIX_EPOCH + Duration::from_millis(90),
        };
        assert!(sampler.during(gap).is_none());
    }

    #[test]
    fn python_time_converts_and_nonsense_is_refused() {
        let w = Window::from_unix_seconds(1.5, 2.25).unwrap();
        assert_eq!(w.start, SystemTime::UNIX_EPOCH + Duration::from_millis(1500));
        assert_eq!(w.end, SystemTime::UNIX_EPOCH + Duration::from_millis(2250));
        assert!(Window::from_unix_seconds(f64::NAN, 1.0).is_none());
        assert!(Window::from_unix_seconds(-1.0, 1.0).is_none());
    }
}
