//! The attention paths composed of library calls (`cublas`, `cutensor`): the A/B candidates that
//! `verify`, `bench` and `attend` run beside our kernels when named (or by default).

use flashrs::{DType, Gpu, Layout, Params, Shape, Tensors};
use flashrs_lab::composed::Supports;

use crate::Failure;

/// One composed path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Cublas,
    Cutensor,
}

/// One path made for one shape and dtype, ready to launch.
pub enum Made {
    Cublas(flashrs_lab::cublas::CublasAttention),
    // Boxed: made once per shape, and much larger than the other.
    Cutensor(Box<flashrs_lab::cutensor::CutensorAttention>),
}

impl Path {
    pub const ALL: [Path; 2] = [Path::Cublas, Path::Cutensor];

    pub fn name(self) -> &'static str {
        match self {
            Path::Cublas => flashrs_lab::cublas::NAME,
            Path::Cutensor => flashrs_lab::cutensor::NAME,
        }
    }

    pub fn from_name(name: &str) -> Option<Path> {
        Path::ALL.into_iter().find(|p| p.name() == name)
    }

    pub fn supports(self) -> Supports {
        match self {
            Path::Cublas => flashrs_lab::cublas::SUPPORTS,
            Path::Cutensor => flashrs_lab::cutensor::SUPPORTS,
        }
    }

    /// Whether the path can run this problem (no GPU needed); `Err` says why not.
    pub fn check(self, shape: Shape, layout: Layout, lse: bool) -> flashrs::Result<()> {
        flashrs_lab::composed::check(self.name(), self.supports(), shape, layout, lse)
    }

    pub fn make(self, gpu: &Gpu, shape: Shape, dtype: DType) -> flashrs_lab::error::Result<Made> {
        Ok(match self {
            Path::Cublas => Made::Cublas(flashrs_lab::cublas::CublasAttention::new(gpu, shape, dtype)?),
            Path::Cutensor => Made::Cutensor(Box::new(flashrs_lab::cutensor::CutensorAttention::new(
                gpu, shape, dtype,
            )?)),
        })
    }
}

impl Made {
    pub fn launch(
        &mut self,
        gpu: &Gpu,
        tensors: &mut Tensors,
        params: Params,
    ) -> flashrs_lab::error::Result<()> {
        match self {
            Made::Cublas(path) => path.launch(gpu, tensors, params),
            Made::Cutensor(path) => path.launch(gpu, tensors, params),
        }
    }
}

/// The paths `--kernel` names: every one when no kernel is named, else those named.
pub fn wanted(names: &[String]) -> Vec<Path> {
    Path::ALL
        .into_iter()
        .filter(|p| names.is_empty() || names.iter().any(|n| n == p.name()))
        .collect()
}

/// Whether `--kernel` names only composed paths (then a problem none of them can run leaves
/// nothing to do, which is refused before the GPU is opened rather than passing empty).
pub fn only_paths(names: &[String]) -> bool {
    !names.is_empty() && names.iter().all(|n| Path::from_name(n).is_some())
}

/// Refuses, before the GPU is opened, a run whose `--kernel`s are all composed paths and that
/// would check nothing: an option none of them takes (a layout, `--lse`), or no problem that any
/// of them runs. A problem one path cannot run is otherwise skipped (`verify`) or noted (`bench`).
pub fn check_named_paths(
    names: &[String],
    mut problems: impl Iterator<Item = Shape>,
    layouts: &[Layout],
    lse: bool,
) -> Result<(), Failure> {
    if !only_paths(names) {
        return Ok(());
    }
    let paths = wanted(names);
    let plain = Shape::new(1, 1, 1, flashrs::variants::HEAD_DIMS[0]);
    // A layout (or --lse) is refused when no path named takes it; one that some take is skipped
    // by the others.
    for &layout in layouts {
        let mut refusals = paths.iter().filter_map(|p| p.check(plain, layout, lse).err());
        if let Some(first) = refusals.next() {
            if refusals.count() + 1 == paths.len() {
                return Err(first.into());
            }
        }
    }
    let mut first_refusal = None;
    let runs = |shape: Shape| {
        paths.iter().any(|p| {
            layouts.iter().any(|&layout| match p.check(shape, layout, false) {
                Ok(()) => true,
                Err(e) => {
                    first_refusal.get_or_insert(e);
                    false
                }
            })
        })
    };
    if problems.any(runs) {
        return Ok(());
    }
    Err(Failure::Usage(match first_refusal {
        Some(e) => format!("nothing to run: {e}"),
        None => "nothing to run: no problem given".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_selection_follows_kernel() {
        for path in Path::ALL {
            assert_eq!(Path::from_name(path.name()), Some(path));
        }
        assert_eq!(Path::from_name("naive"), None);
        assert_eq!(wanted(&[]), Path::ALL);
        assert_eq!(wanted(&["cutensor".into()]), [Path::Cutensor]);
        assert!(wanted(&["naive".into()]).is_empty());
        assert!(only_paths(&["cublas".into(), "cutensor".into()]));
        assert!(!only_paths(&["cublas".into(), "naive".into()]) && !only_paths(&[]));
    }

    #[test]
    fn cublas_refuses_what_cutensor_runs() {
        let gqa = Shape::new(1, 8, 64, 64).with_heads_kv(2);
        assert!(Path::Cublas.check(gqa, Layout::Bhsd, false).is_err());
        assert!(Path::Cutensor.check(gqa, Layout::Bhsd, false).is_ok());
        let plain = Shape::new(1, 8, 64, 64);
        assert!(Path::Cublas.check(plain, Layout::Bshd, false).is_err());
        assert!(Path::Cutensor.check(plain, Layout::Bshd, false).is_ok());
        for path in Path::ALL {
            assert!(path.check(plain, Layout::Bhsd, true).is_err());
        }
    }

    #[test]
    fn named_paths_that_would_run_nothing_are_refused() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let plain = Shape::new(1, 8, 64, 64);
        let gqa = plain.with_heads_kv(2);
        let message = |r: Result<(), Failure>| match r {
            Err(Failure::Usage(m)) => m,
            _ => String::new(),
        };
        let check = |n: &[&str], shapes: &[Shape], layouts: &[Layout], lse| {
            check_named_paths(&names(n), shapes.iter().copied(), layouts, lse)
        };
        // Mixed with a variant, or none named: never refused here.
        assert!(check(&["cublas", "naive"], &[gqa], &[Layout::Bshd], true).is_ok());
        assert!(check(&[], &[gqa], &[Layout::Bhsd], true).is_ok());
        assert!(message(check(&["cublas"], &[plain], &[Layout::Bshd], false)).contains("[B,H,S,D]"));
        assert!(message(check(&["cutensor"], &[plain], &[Layout::Bhsd], true)).contains("log-sum-exp"));
        assert!(message(check(&["cublas"], &[gqa], &[Layout::Bhsd], false)).contains("nothing to run"));
        // A layout one named path takes is not refused for the other.
        assert!(check(
            &["cublas", "cutensor"],
            &[plain],
            &[Layout::Bhsd, Layout::Bshd],
            false
        )
        .is_ok());
        // One runnable problem is enough; cutensor runs what cublas cannot.
        assert!(check(&["cublas"], &[gqa, plain], &[Layout::Bhsd], false).is_ok());
        assert!(check(&["cutensor"], &[gqa], &[Layout::Bshd], false).is_ok());
        assert!(check(&["cublas", "cutensor"], &[gqa], &[Layout::Bhsd], false).is_ok());
    }

    #[test]
    fn a_missing_library_is_a_note() {
        // This machine has no cuTENSOR: the error `verify` and `bench` turn into their note.
        if let Err(e) = flashrs_lab::cutensor::available() {
            assert!(e.is_missing_library(), "{e}");
            assert!(!e.is_gpu_fault(), "{e}");
        }
    }
}
