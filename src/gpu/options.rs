//! What an opened [`Gpu`](crate::Gpu) does that its caller may choose: settings a Rust caller
//! sets in code ([`Gpu::open_with`](crate::Gpu::open_with)), and which the command line and the
//! Python package read from the environment ([`GpuOptions::from_env`]). [`Gpu::open`] takes the
//! defaults and reads no environment variable.

use std::path::PathBuf;

use cudarc::driver::sys::CUtensorMapL2promotion;

/// How the tensor maps of the copy engine's loads promote an L2 miss: a box row is 128 bytes;
/// promoting each miss to 256 made every row's other half an L2 hit but cost the streaming decode
/// kernels 5% of DRAM's rate on an H200 (docs/kernels/flash_decode.md, design: copies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum L2Promotion {
    /// No promotion.
    None,
    /// 64 bytes.
    Bytes64,
    /// 128 bytes, the default.
    #[default]
    Bytes128,
    /// 256 bytes.
    Bytes256,
}

impl L2Promotion {
    pub(crate) fn encoded(self) -> CUtensorMapL2promotion {
        use CUtensorMapL2promotion as P;
        match self {
            L2Promotion::None => P::CU_TENSOR_MAP_L2_PROMOTION_NONE,
            L2Promotion::Bytes64 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
            L2Promotion::Bytes128 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            L2Promotion::Bytes256 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        }
    }
}

/// The choices an opened `Gpu` keeps. The defaults are what every measurement of the README was
/// made with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuOptions {
    /// On Hopper, launch each kernel as dependent on the one before it (programmatic dependent
    /// launch: its blocks are scheduled while that one finishes). Default on.
    pub dependent_launches: bool,
    /// Split the persistent kernels' last, partial round of work items over the idle SMs.
    /// Default on.
    pub tail_split: bool,
    /// The tensor maps' L2 promotion.
    pub l2_promotion: L2Promotion,
    /// Load the kernels from the cubins `host cubin` wrote into this folder instead of letting
    /// the driver compile each kernel's PTX on its first launch; a cubin built from another PTX
    /// than this build's is refused.
    pub cubin_dir: Option<PathBuf>,
    /// A tuned table (`tune --save`'s JSON) to consult instead of the embedded one.
    pub tuned_table: Option<PathBuf>,
}

impl Default for GpuOptions {
    fn default() -> GpuOptions {
        GpuOptions {
            dependent_launches: true,
            tail_split: true,
            l2_promotion: L2Promotion::default(),
            cubin_dir: None,
            tuned_table: None,
        }
    }
}

impl GpuOptions {
    /// The defaults, changed by the environment variables the command line documents
    /// (docs/cli.md): `FLASHRS_PDL=0`, `FLASHRS_TAIL_SPLIT=0`, `FLASHRS_L2_PROMOTION=none|64|128|256`,
    /// `FLASHRS_CUBIN_DIR`, `FLASHRS_TUNED`.
    pub fn from_env() -> GpuOptions {
        GpuOptions::from_vars(|name| std::env::var(name).ok())
    }

    /// [`GpuOptions::from_env`] with the variables read through `var`.
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> GpuOptions {
        let path = |name| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        GpuOptions {
            dependent_launches: var("FLASHRS_PDL").is_none_or(|v| v != "0"),
            tail_split: var("FLASHRS_TAIL_SPLIT").is_none_or(|v| v != "0"),
            l2_promotion: match var("FLASHRS_L2_PROMOTION").as_deref() {
                Some("none") => L2Promotion::None,
                Some("64") => L2Promotion::Bytes64,
                Some("256") => L2Promotion::Bytes256,
                _ => L2Promotion::Bytes128,
            },
            cubin_dir: path("FLASHRS_CUBIN_DIR"),
            tuned_table: path("FLASHRS_TUNED"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_changes_only_what_it_names() {
        assert_eq!(GpuOptions::from_vars(|_| None), GpuOptions::default());
        let vars = |name: &str| match name {
            "FLASHRS_PDL" | "FLASHRS_TAIL_SPLIT" => Some("0".to_string()),
            "FLASHRS_L2_PROMOTION" => Some("256".to_string()),
            "FLASHRS_CUBIN_DIR" => Some("/tmp/cubins".to_string()),
            "FLASHRS_TUNED" => Some(String::new()),
            _ => None,
        };
        let options = GpuOptions::from_vars(vars);
        assert!(!options.dependent_launches && !options.tail_split);
        assert_eq!(options.l2_promotion, L2Promotion::Bytes256);
        assert_eq!(options.cubin_dir, Some(PathBuf::from("/tmp/cubins")));
        assert_eq!(options.tuned_table, None, "an empty value is no table");
    }
}
