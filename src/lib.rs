//! flashrs: scaled dot-product attention forward on NVIDIA GPUs, with the kernels written in
//! `no_std` Rust and compiled to PTX by rustc's NVPTX backend (see `build.rs`).
//!
//! Data flows one way: a [`Shape`] and [`Params`] are validated, a variant is chosen (or named),
//! [`Gpu::launch`] runs it. [`api`] wraps that in typed device tensors and one builder call,
//! [`attention`]. The tools that check and measure the kernels (float64 reference, statistics,
//! timing, PTX/ptxas/SASS analysis, `.npy` files, the cuBLAS and cuTENSOR candidates, the tuning
//! search) are the repository's `flashrs-lab` crate, not part of this one.

#![warn(missing_docs)]

/// Declares a method that hands out one of cudarc's handles (a stream, a context, a buffer of the
/// library's): `pub` with the `lab` feature, crate-private without it. The library's contexts run
/// with cudarc's cross-stream event tracking off (so that launches can be captured into CUDA
/// graphs), so through such a handle safe code could use a buffer on a second stream unordered,
/// or free it while a kernel still reads it. The project's own tools (`host`, `flashrs-lab`, the
/// GPU tests) enable `lab` and keep their buffers on the GPU's stream; a user of the library sees
/// the typed API and the `unsafe` raw entry points only.
macro_rules! lab_pub {
    ($(#[$attr:meta])* fn $($rest:tt)*) => {
        $(#[$attr])*
        #[cfg(feature = "lab")]
        pub fn $($rest)*

        $(#[$attr])*
        #[cfg(not(feature = "lab"))]
        #[allow(dead_code)]
        pub(crate) fn $($rest)*
    };
    ($(#[$attr:meta])* unsafe fn $($rest:tt)*) => {
        $(#[$attr])*
        #[cfg(feature = "lab")]
        pub unsafe fn $($rest)*

        $(#[$attr])*
        #[cfg(not(feature = "lab"))]
        #[allow(dead_code)]
        pub(crate) unsafe fn $($rest)*
    };
}

/// Declares a module `pub` with the `lab` feature and crate-private without it: the modules only
/// the project's tools read (the shared launch parameter lists, the variant spec, tensor maps,
/// the dispatch table, the decode plan, the tuned table), behind the same line as `lab_pub!`.
macro_rules! lab_mod {
    ($(#[$attr:meta])* mod $name:ident;) => {
        $(#[$attr])*
        #[cfg(feature = "lab")]
        pub mod $name;

        $(#[$attr])*
        #[cfg(not(feature = "lab"))]
        #[allow(dead_code, unused_macros)]
        pub(crate) mod $name;
    };
}

// First: its macros (the launch parameter list) are used by `gpu`.
lab_mod! {
    /// The kernels' launch parameters: the device crate's own list, so both sides agree.
    #[macro_use]
    #[path = "../kernels-rs/src/launch.rs"]
    mod launch;
}

lab_mod! {
    /// The backward kernels' launch parameters, workspace and shared-memory layout: the device
    /// crate's own, so both sides agree.
    #[macro_use]
    #[path = "../kernels-rs/src/backward_launch.rs"]
    mod backward_launch;
}

lab_mod! {
    /// The merge kernel's launch parameters: the device crate's own, so both sides agree.
    #[macro_use]
    #[path = "../kernels-rs/src/merge_launch.rs"]
    mod merge_launch;
}

lab_mod! {
    /// Where the overlapped `flash_ws` loop waits for its running product: the device crate's own
    /// rule, read by the check of the machine code.
    #[doc(hidden)]
    #[path = "../kernels-rs/src/schedule.rs"]
    mod schedule;
}

pub mod api;
pub mod backward;
lab_mod! { mod decode; }
lab_mod! { mod dispatch; }
pub mod error;
pub mod fp8;
pub mod gpu;
pub mod layout;
pub mod merge;
pub mod paged;
pub mod problem;
mod raw_paged;
mod raw_varlen;
lab_mod! { mod spec; }
mod staging;
lab_mod! { mod tma; }
lab_mod! { mod tuned_table; }
pub mod variants;
pub mod varlen;

pub use api::{
    attention, attention_raw, check_paged, check_varlen, check_views, fits_layout, keeping_current_context,
    layout_from_strides, paged_attention, varlen_attention, Attention, DeviceArray, DeviceTensor, Element,
    LseBuffer, PackedTensor, PagedCache, RawOptions, Sinks, TensorView,
};
pub use backward::{attention_backward, attention_backward_raw, BackwardOptions, BackwardViews};
pub use decode::{DecodeOptions, SplitSource};
pub use error::{Error, Result};
pub use fp8::Fp8Tensors;
pub use gpu::{Gpu, GpuOptions, Kernel, L2Promotion, Tensors};
pub use layout::{Layout, Strides};
pub use merge::{merge_states, merge_states_raw};
pub use paged::{PagedKernel, PagedKv, PagedTensors};
pub use problem::{DType, Params, Shape, Window};
pub use raw_paged::{check_paged_views, paged_attention_raw, CacheView};
pub use raw_varlen::{check_packed_views, varlen_attention_raw, PackedView};
pub use tuned_table::TunedTable;
pub use variants::{Family, Policy, Spec, VariantSpec, FP8_VARIANTS, VARIANTS};
pub use varlen::{VarlenBatch, VarlenKernel, VarlenTensors};

/// Declares `embedded` with the visibility given: public with the `lab` feature, for the tools
/// that analyse the PTX; crate-private without.
macro_rules! embedded_module {
    ($vis:vis) => {
        /// The PTX of every kernel, one module per architecture, embedded at build time.
        #[cfg_attr(not(feature = "lab"), allow(dead_code))]
        $vis mod embedded {
    /// The sm_80 PTX (the variants whose `min_arch` is 80), loaded on every GPU of compute
    /// capability 8.0 or newer but Hopper.
    pub static PTX_SM80: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels_sm_80.ptx"));
    /// The sm_90a PTX (every variant, wgmma and TMA ones included), loaded on Hopper (9.0) only.
    pub static PTX_SM90: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels_sm_90a.ptx"));

    /// Milliseconds `build.rs` spent building the PTX of every architecture when it last ran (a
    /// clean build when the device crate's target directory was empty).
    pub const PTX_BUILD_MS: u64 = match u64::from_str_radix(env!("FLASHRS_PTX_BUILD_MS"), 10) {
        Ok(ms) => ms,
        Err(_) => 0,
    };

    /// Every embedded module: its `.target` name (as `ptxas -arch` wants it), its number, its PTX.
    pub fn modules() -> impl Iterator<Item = (&'static str, u32, &'static str)> {
        crate::variants::ARCHES
            .iter()
            .filter_map(|&(name, number)| ptx(number).map(|text| (name, number, text)))
    }

    /// A fingerprint of a PTX text (64-bit FNV-1a), written beside a cubin assembled from it so
    /// that a cubin from another build is refused rather than launched with the wrong
    /// parameters.
    pub fn fingerprint(ptx: &str) -> u64 {
        ptx.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// The file names of a cubin assembled from the module of `target` (e.g. `sm_90a`) and of
    /// its fingerprint, inside a `FLASHRS_CUBIN_DIR`.
    pub fn cubin_files(target: &str) -> (String, String) {
        (
            format!("kernels_{target}.cubin"),
            format!("kernels_{target}.ptx-fnv64"),
        )
    }

    /// The `u32` globals of a PTX module (`.visible .global .align 4 .b8 NAME[4] = {..};`, as
    /// rustc emits a `static u32`; a global with no initialiser is 0): the launch facts each
    /// variant exports beside its kernel (shared memory, declared barriers per tile).
    pub fn u32_globals(ptx: &str) -> std::collections::BTreeMap<&str, u32> {
        let mut out = std::collections::BTreeMap::new();
        for line in ptx.lines() {
            let Some(rest) = line.trim().strip_prefix(".visible .global .align 4 .b8 ") else {
                continue;
            };
            let Some((name, tail)) = rest.split_once("[4]") else {
                continue;
            };
            let mut value = 0u32;
            if let Some(bytes) = tail
                .split_once('{')
                .and_then(|(_, b)| b.split_once('}'))
                .map(|(b, _)| b)
            {
                for (i, byte) in bytes.split(',').enumerate() {
                    let byte: u32 = byte.trim().parse().unwrap_or(0);
                    value |= byte << (8 * i);
                }
            }
            out.insert(name, value);
        }
        out
    }

    /// The PTX for architecture `arch` (80 or 90); `None` where this build has none
    /// (`FLASHRS_ARCHES` at build time left it out).
    pub fn ptx(arch: u32) -> Option<&'static str> {
        match arch {
            80 => Some(PTX_SM80),
            90 => Some(PTX_SM90),
            _ => None,
        }
        .filter(|text| !text.is_empty())
    }

    /// One architecture's PTX cut into a module per kernel: what every kernel may use (the
    /// header, the shared-memory declarations, the helper functions) and the kernel's entry. The
    /// driver compiles a module when it is loaded, so a process that loads only the kernels it
    /// runs pays a fraction of a second for each, not the whole module's JIT (about 40 s on
    /// sm_90a, every variant, head dim and dtype).
    pub struct EntryModules {
        shared: String,
        entries: std::collections::HashMap<&'static str, &'static str>,
    }

    impl EntryModules {
        /// Reads `ptx`'s statements (`None` if it is not a module rustc wrote).
        pub fn new(ptx: &'static str) -> Option<EntryModules> {
            let (header, items) = crate::ptx_items::split(ptx).ok()?;
            let mut shared = String::from(header);
            let mut entries = std::collections::HashMap::new();
            for item in items {
                let text = item.text.trim_start();
                if text.starts_with(".visible .entry") {
                    entries.insert(crate::ptx_items::defined_name(text)?, item.text);
                } else if !text.starts_with(".visible .global") {
                    // The globals are the host's launch facts (`u32_globals`), not kernel code.
                    shared.push_str(item.text);
                    shared.push('\n');
                }
            }
            Some(EntryModules { shared, entries })
        }

        /// The names of the kernels, in no particular order.
        pub fn entry_names(&self) -> impl Iterator<Item = &'static str> + '_ {
            self.entries.keys().copied()
        }

        /// One module holding the kernels `entries` (each must be one of [`entry_names`]), for
        /// assembling parts of a module apart (`None` if one is not in the PTX).
        ///
        /// [`entry_names`]: EntryModules::entry_names
        pub fn module_of(&self, entries: &[&str]) -> Option<String> {
            let mut text = self.shared.clone();
            for entry in entries {
                text.push_str(self.entries.get(entry)?);
                text.push('\n');
            }
            Some(text)
        }

        /// The module holding the kernel `entry`, or `None` if the PTX has no such kernel.
        pub fn module(&self, entry: &str) -> Option<String> {
            self.entries
                .get(entry)
                .map(|text| format!("{}{text}", self.shared))
        }

        /// The embedded PTX of architecture `arch` (80 or 90), read once per process.
        pub fn embedded(arch: u32) -> Option<&'static EntryModules> {
            static SM80: std::sync::OnceLock<Option<EntryModules>> = std::sync::OnceLock::new();
            static SM90: std::sync::OnceLock<Option<EntryModules>> = std::sync::OnceLock::new();
            let cell = match arch {
                80 => &SM80,
                90 => &SM90,
                _ => return None,
            };
            cell.get_or_init(|| EntryModules::new(ptx(arch)?)).as_ref()
        }
    }
}
    };
}
#[cfg(feature = "lab")]
embedded_module!(pub);
#[cfg(not(feature = "lab"))]
embedded_module!(pub(crate));

// build.rs reads the rest of it (the merge of the device units).
#[allow(dead_code)]
mod ptx_items;

#[cfg(test)]
mod tests {
    use super::embedded::{self, EntryModules};

    /// Every kernel of every embedded module is cut out whole: its module has the header, the
    /// shared declarations and its own entry, and no other kernel; its text is the entry's text
    /// in the whole module.
    #[test]
    fn every_kernel_has_a_module_of_its_own() {
        for (target, arch, ptx) in embedded::modules() {
            let modules = EntryModules::embedded(arch).expect("the embedded PTX reads");
            let entries: Vec<&str> = ptx
                .lines()
                .filter_map(|l| l.strip_prefix(".visible .entry "))
                .filter_map(|l| l.split('(').next())
                .collect();
            assert!(entries.len() > 10, "{target}: {} kernels", entries.len());
            for entry in &entries {
                let module = modules.module(entry).unwrap();
                assert!(
                    module.starts_with(&ptx[..ptx.find(".address_size").unwrap()]),
                    "{entry}"
                );
                assert!(
                    module.contains(".extern .shared"),
                    "{entry}: no dynamic shared memory"
                );
                assert_eq!(module.matches(".visible .entry ").count(), 1, "{entry}");
                let own = &module[module.find(".visible .entry ").unwrap()..];
                let at = ptx.find(&format!(".visible .entry {entry}(")).unwrap();
                assert_eq!(
                    ptx.get(at..at + own.len()),
                    Some(own),
                    "{entry}: not the whole module's text"
                );
                assert!(
                    !module.contains(".visible .global"),
                    "{entry}: launch facts are the host's"
                );
            }
            assert!(modules.module("no_such_kernel").is_none());
        }
    }
}
