//! `cublas`: attention composed of library calls, the A/B candidate every fused kernel must beat.
//! `S = Q K^T` by a cuBLAS strided-batched GEMM (16-bit in, fp32 scores), the row softmax by our
//! own kernel (`softmax_rows_<dtype>`: scaled, causal-aware, 16-bit probabilities), `O = P V` by a
//! second GEMM (16-bit in, fp32 accumulation, 16-bit out). It materialises `B*H*S_q*S_k` scores: 6 bytes
//! each, which is what the fused kernels avoid.

use std::ffi::c_void;

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::{result as blas, CudaBlas};
use cudarc::driver::{DevicePtr, DevicePtrMut};

use crate::composed::{self, RowSoftmax, Supports};
use crate::error::{LabError, Result};
use flashrs::{DType, Error, Gpu, Params, Shape, Tensors};

/// The kernel name `verify`, `bench` and `attend` use for this path.
pub const NAME: &str = "cublas";

/// Neither grouped heads nor `[B,S,H,D]`: the strided-batched GEMMs take one batch stride per
/// operand.
pub const SUPPORTS: Supports = Supports {
    grouped_heads: false,
    bshd: false,
};

/// A cuBLAS handle on the GPU's stream plus scratch buffers sized for one shape.
pub struct CublasAttention {
    blas: CudaBlas,
    rows: RowSoftmax,
    shape: Shape,
    dtype: DType,
}

impl CublasAttention {
    /// Loads cuBLAS (`LabError::NoCublas` when the library is missing) and allocates the score and
    /// probability buffers for `shape`.
    pub fn new(gpu: &Gpu, shape: Shape, dtype: DType) -> Result<CublasAttention> {
        composed::check(NAME, SUPPORTS, shape, flashrs::Layout::Bhsd, false)?;
        if !flashrs::gpu::library_present(&[
            "libcublas.so.13",
            "libcublas.so.12",
            "libcublas.so",
            "cublas64_13.dll",
        ]) {
            return Err(LabError::NoCublas);
        }
        let stream = gpu.stream().clone();
        Ok(CublasAttention {
            blas: CudaBlas::new(stream.clone()).map_err(|e| LabError::Cublas(e.to_string()))?,
            rows: RowSoftmax::new(gpu, NAME, shape, dtype, 0)?,
            shape,
            dtype,
        })
    }

    /// Runs the three steps on the GPU's stream (asynchronously).
    pub fn launch(&mut self, gpu: &Gpu, tensors: &mut Tensors, params: Params) -> Result<()> {
        let shape = tensors.shape();
        if shape != self.shape || tensors.dtype() != self.dtype {
            return Err(Error::InvalidProblem(format!(
                "cublas buffers are for {} {}, not {shape} {}",
                self.shape,
                self.dtype,
                tensors.dtype()
            ))
            .into());
        }
        composed::check(NAME, SUPPORTS, shape, tensors.layout(), tensors.lse().is_some())?;
        let element = match self.dtype {
            DType::F16 => cudaDataType::CUDA_R_16F,
            DType::Bf16 => cudaDataType::CUDA_R_16BF,
        };
        params.validate()?;
        // The handle runs on the GPU's stream; the tensors' buffers are checked like a launch's.
        gpu.check_tensors_on_own_stream(tensors)?;
        if **self.rows.scores.stream() != **tensors.stream() {
            return Err(Error::ForeignStream.into());
        }
        let stream = gpu.stream().clone();
        let (b, h, sq, sk, d) = (shape.batch, shape.heads, shape.seq_q, shape.seq_k, shape.head_dim);
        let batch = b * h;
        {
            // Row-major S[Sq][Sk] = Q K^T is column-major S^T = K^T' Q: A = K read transposed.
            let (k, _k) = tensors.k().device_ptr(&stream);
            let (q, _q) = tensors.q().device_ptr(&stream);
            let (s, _s) = self.rows.scores.device_ptr_mut(&stream);
            let gemm = Gemm {
                transpose_a: true,
                m: sk,
                n: sq,
                k: d,
                a: (k, element, d, sk * d),
                b: (q, element, d, sq * d),
                c: (s, cudaDataType::CUDA_R_32F, sk, sq * sk),
                batch,
            };
            // Safety: every pointer holds the elements the strides and counts address (buffers
            // checked against the shape just above; scratch sized for it in `new`), on the
            // handle's own stream.
            unsafe { gemm.run(&self.blas) }?;
        }
        self.rows.launch(&stream, shape, params)?;
        {
            // Row-major O[Sq][D] = P V is column-major O^T = V^T P^T: both operands as stored.
            let (v, _v) = tensors.v().device_ptr(&stream);
            let (p, _p) = self.rows.probs.device_ptr(&stream);
            // `Tensors` lends its output only shared (a `&mut` would let a caller swap in a
            // shorter buffer); cuBLAS writes through the address, which `&mut tensors` keeps
            // from any other use until the stream has run.
            let (o, _o) = tensors.out().device_ptr(&stream);
            let gemm = Gemm {
                transpose_a: false,
                m: d,
                n: sq,
                k: sk,
                a: (v, element, d, sk * d),
                b: (p, element, sk, sq * sk),
                c: (o, element, d, sq * d),
                batch,
            };
            // Safety: as above.
            unsafe { gemm.run(&self.blas) }?;
        }
        Ok(())
    }
}

/// One column-major strided-batched GEMM, `C = op(A) B` (fp32 compute), as cuBLAS sees it.
/// Operands are `(device pointer, element type, leading dimension, batch stride)`.
struct Gemm {
    transpose_a: bool,
    m: usize,
    n: usize,
    k: usize,
    a: (u64, cudaDataType, usize, usize),
    b: (u64, cudaDataType, usize, usize),
    c: (u64, cudaDataType, usize, usize),
    batch: usize,
}

impl Gemm {
    /// # Safety
    /// The pointers must address `batch` matrices of the given shapes and strides.
    unsafe fn run(&self, blas: &CudaBlas) -> Result<()> {
        let (one, zero) = (1.0f32, 0.0f32);
        let op_a = if self.transpose_a {
            cublasOperation_t::CUBLAS_OP_T
        } else {
            cublasOperation_t::CUBLAS_OP_N
        };
        let (a, b, c) = (self.a, self.b, self.c);
        blas::gemm_strided_batched_ex(
            *blas.handle(),
            op_a,
            cublasOperation_t::CUBLAS_OP_N,
            self.m as i32,
            self.n as i32,
            self.k as i32,
            &one as *const f32 as *const c_void,
            a.0 as *const c_void,
            a.1,
            a.2 as i32,
            a.3 as i64,
            b.0 as *const c_void,
            b.1,
            b.2 as i32,
            b.3 as i64,
            &zero as *const f32 as *const c_void,
            c.0 as *mut c_void,
            c.1,
            c.2 as i32,
            c.3 as i64,
            self.batch as i32,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
        .map_err(|e| LabError::Cublas(e.to_string()))
    }
}
