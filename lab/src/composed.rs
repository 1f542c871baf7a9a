//! What the attention paths composed of library calls (`cublas`, `cutensor`) share: the checks of
//! what each can run, and the middle step, our row softmax over materialised fp32 scores into
//! 16-bit probabilities (`softmax_rows_<dtype>`), with the scratch buffers it reads and writes.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use flashrs::Gpu;
use flashrs::Layout;
use flashrs::{DType, Params, Shape};
use flashrs::{Error, Result};

/// The row softmax's grid has one `y` block per head (B*H), and a grid's `y` is at most 65,535.
pub const MAX_BATCH_HEADS: usize = 65_535;

/// What a composed path can run beyond the plain case (same heads for Q and K/V, `[B,H,S,D]`,
/// no log-sum-exp): none writes the log-sum-exp, since the softmax step does not keep it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Supports {
    /// Fewer key/value heads than query heads (grouped-query attention).
    pub grouped_heads: bool,
    /// Tensors laid out `[B,S,H,D]`.
    pub bshd: bool,
}

/// Refuses, with a typed error naming the path, a problem that the path `name` cannot run: what
/// it does not support, more than [`MAX_BATCH_HEADS`] heads, scratch buffers whose size
/// overflows. Needs no GPU, so a command line can check before it opens one.
pub fn check(name: &str, supports: Supports, shape: Shape, layout: Layout, lse: bool) -> Result<()> {
    shape.validate()?;
    if lse {
        return Err(Error::InvalidProblem(format!(
            "the {name} path writes no log-sum-exp: ask a fused kernel for it"
        )));
    }
    if !supports.grouped_heads && shape.heads_kv != shape.heads {
        return Err(Error::InvalidProblem(format!(
            "the {name} path has no grouped-query attention: K and V need as many heads as Q"
        )));
    }
    if !supports.bshd && layout != Layout::Bhsd {
        return Err(Error::InvalidProblem(format!(
            "the {name} path takes [B,H,S,D] tensors, not {layout}"
        )));
    }
    score_elements(name, shape).map(|_| ())
}

/// `B*H*S_q*S_k`, the scores' element count, refused past the softmax's grid or when a buffer of
/// 6 bytes per score (fp32 scores, 16-bit probabilities) would overflow `usize`.
fn score_elements(name: &str, shape: Shape) -> Result<usize> {
    let batch_heads = shape.batch.saturating_mul(shape.heads);
    if batch_heads > MAX_BATCH_HEADS {
        return Err(Error::InvalidProblem(format!(
            "the {name} path's row softmax takes at most {MAX_BATCH_HEADS} heads (B*H), not {batch_heads}"
        )));
    }
    // Checked: a product that wrapped would size the scratch buffers below what the steps write.
    [shape.batch, shape.heads, shape.seq_q, shape.seq_k]
        .iter()
        .try_fold(1usize, |n, &dim| n.checked_mul(dim))
        .filter(|n| n.checked_mul(6).is_some())
        .ok_or_else(|| Error::InvalidProblem(format!("the {name} path's scores of {shape} overflow")))
}

/// The softmax step: its kernel and the fp32 scores `[B*H, S_q, S_k]` it reads (written by the
/// path's first step) and the 16-bit probabilities it writes (read by the last).
pub(crate) struct RowSoftmax {
    function: CudaFunction,
    pub(crate) scores: CudaSlice<f32>,
    pub(crate) probs: CudaSlice<u16>,
}

impl RowSoftmax {
    /// Allocates the scores and probabilities of `shape` on the GPU's stream, after checking
    /// that they fit in free device memory (`extra` bytes more are needed by the path itself).
    pub(crate) fn new(gpu: &Gpu, name: &str, shape: Shape, dtype: DType, extra: usize) -> Result<RowSoftmax> {
        let elements = score_elements(name, shape)?;
        let needed = (elements * 6).saturating_add(extra);
        let (free, _) = gpu.context().mem_get_info()?;
        if needed > free {
            return Err(Error::InvalidProblem(format!(
                "the {name} path needs {} GiB for its scratch buffers on {shape}, {} GiB free",
                needed >> 30,
                free >> 30
            )));
        }
        let stream = gpu.stream();
        Ok(RowSoftmax {
            function: gpu.function(&format!("softmax_rows_{}", dtype.name()))?,
            scores: stream.alloc_zeros(elements)?,
            probs: stream.alloc_zeros(elements)?,
        })
    }

    /// Scores to probabilities, scaled and masked as `params` say, on `stream` (asynchronously).
    pub(crate) fn launch(&mut self, stream: &Arc<CudaStream>, shape: Shape, params: Params) -> Result<()> {
        let (seq_q, seq_k, causal) = (shape.seq_q as u32, shape.seq_k as u32, params.causal as u32);
        let scale_log2 = params.scale_for(shape.head_dim) * std::f32::consts::LOG2_E;
        let config = LaunchConfig {
            grid_dim: (seq_q.div_ceil(4), (shape.batch * shape.heads) as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = stream.launch_builder(&self.function);
        builder
            .arg(&self.scores)
            .arg(&mut self.probs)
            .arg(&seq_q)
            .arg(&seq_k)
            .arg(&scale_log2)
            .arg(&causal);
        // Safety: matches `softmax_rows_<dtype>`'s signature; both buffers hold B*H*S_q*S_k
        // elements (sized in `new` for the shape the caller checked against its tensors), which
        // the grid of (S_q/4, B*H) blocks of four rows covers exactly.
        unsafe { builder.launch(config) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Supports = Supports {
        grouped_heads: false,
        bshd: false,
    };

    #[test]
    fn refusals_name_the_path_and_the_reason() {
        let shape = Shape::new(1, 8, 128, 64);
        assert!(check("x", PLAIN, shape, Layout::Bhsd, false).is_ok());
        let refused = |supports, shape: Shape, layout, lse| {
            check("x", supports, shape, layout, lse)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let gqa = shape.with_heads_kv(2);
        assert!(refused(PLAIN, gqa, Layout::Bhsd, false).contains("the x path has no grouped-query"));
        assert!(refused(PLAIN, shape, Layout::Bshd, false).contains("[B,H,S,D] tensors, not"));
        assert!(refused(PLAIN, shape, Layout::Bhsd, true).contains("no log-sum-exp"));
        let all = Supports {
            grouped_heads: true,
            bshd: true,
        };
        assert!(check("x", all, gqa, Layout::Bshd, false).is_ok());
        assert!(refused(all, gqa, Layout::Bshd, true).contains("no log-sum-exp"));
        let wide = Shape::new(2, 40_000, 16, 64);
        assert!(refused(all, wide, Layout::Bhsd, false).contains("at most 65535 heads"));
        let huge = Shape::new(1, 1, usize::MAX / 4, 64);
        assert!(!refused(all, huge, Layout::Bhsd, false).is_empty());
    }
}
