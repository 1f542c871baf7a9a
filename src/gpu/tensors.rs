//! The device buffers of a dense call (`Tensors`), owned or lent, and how they are made and checked.

use crate::gpu::launch::{
    check_alignment, check_buffer, check_buffers, check_bytes, too_large, BufferLens, TENSOR_ALIGN,
};
use crate::gpu::Gpu;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use crate::error::{Error, Result};
use crate::layout::{Layout, Strides};
use crate::problem::{DType, Shape};
use crate::staging::Staged;

/// One device buffer of a [`Tensors`]: either allocated by the library (freed when dropped) or
/// borrowed from the caller through [`Gpu::tensors_from_raw`] (never freed here). Both are held
/// as a `CudaSlice` so that every launch, copy and length check treats them alike.
pub(crate) struct DeviceBuffer<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    owned: bool,
}

impl<T> DeviceBuffer<T> {
    pub(crate) fn owned(slice: CudaSlice<T>) -> DeviceBuffer<T> {
        DeviceBuffer {
            slice: ManuallyDrop::new(slice),
            owned: true,
        }
    }

    /// # Safety
    /// `raw.ptr` addresses `raw.len` elements of `T` in `stream`'s context that stay allocated
    /// while the buffer (and work enqueued with it) lives; see [`Gpu::tensors_from_raw`].
    pub(crate) unsafe fn borrowed(stream: &Arc<CudaStream>, raw: RawBuffer<T>) -> DeviceBuffer<T> {
        DeviceBuffer {
            // Safety: the caller's contract above; `Drop` leaks rather than frees it.
            slice: ManuallyDrop::new(unsafe { stream.upgrade_device_ptr(raw.ptr, raw.len) }),
            owned: false,
        }
    }
}

impl<T> std::ops::Deref for DeviceBuffer<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> std::ops::DerefMut for DeviceBuffer<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // Safety: `slice` is taken exactly once, here, and never used after.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        if self.owned {
            drop(slice);
        } else {
            // The caller owns the memory: forget the pointer instead of freeing it.
            let _ = slice.leak();
        }
    }
}

/// A caller-owned device allocation handed to [`Gpu::tensors_from_raw`]: its address and its
/// length in elements of `T`.
#[derive(Debug)]
pub struct RawBuffer<T> {
    /// The buffer's device address.
    pub ptr: cudarc::driver::sys::CUdeviceptr,
    /// Its length in elements of `T`.
    pub len: usize,
    _element: PhantomData<T>,
}

impl<T> RawBuffer<T> {
    /// Names `len` elements of `T` at device address `ptr`; [`Gpu::tensors_from_raw`] checks them.
    pub fn new(ptr: cudarc::driver::sys::CUdeviceptr, len: usize) -> RawBuffer<T> {
        RawBuffer {
            ptr,
            len,
            _element: PhantomData,
        }
    }
}

impl<T> Clone for RawBuffer<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for RawBuffer<T> {}

/// The caller-owned buffers of one attention call, for [`Gpu::tensors_from_raw`]. Q, K, V and
/// the output hold the bits of the dtype (f16 or bf16); the log-sum-exp is fp32.
#[derive(Clone, Copy, Debug)]
pub struct RawTensors {
    /// Q, `[B, H, S_q, D]` (or `[B, S_q, H, D]`).
    pub q: RawBuffer<u16>,
    /// K, `[B, H_kv, S_k, D]` (or `[B, S_k, H_kv, D]`).
    pub k: RawBuffer<u16>,
    /// V, laid out as K.
    pub v: RawBuffer<u16>,
    /// The output, laid out as Q.
    pub out: RawBuffer<u16>,
    /// Each query row's log-sum-exp (`[B, H, S_q]` fp32), when the caller wants it.
    pub lse: Option<RawBuffer<f32>>,
    /// Each query head's attention sink (`[H]` fp32, in the units of the scaled scores), when
    /// the call has them: a logit that joins each row's softmax denominator and adds no value.
    pub sinks: Option<RawBuffer<f32>>,
}

/// The device buffers of one attention call: Q, K, V, the output and optionally the log-sum-exp,
/// with the shape, layout and dtype they were made for. The buffers are private and checked
/// against that shape when made and again before every launch, so no safe call can hand a kernel
/// a buffer shorter than what it reads or writes. Read them with [`Tensors::out`] and friends.
/// Elements of Q, K, V and the output are the bits of `dtype` (f16 or bf16).
///
/// Replacing a buffer does not compile (the fields are private):
///
/// ```compile_fail,E0616
/// # fn misuse(gpu: &flashrs::Gpu, t: &mut flashrs::Tensors) -> flashrs::Result<()> {
/// t.out = gpu.upload(&[0u16; 1])?;
/// # Ok(())
/// # }
/// ```
///
/// while reading one does:
///
/// ```
/// # fn read(gpu: &flashrs::Gpu, t: &flashrs::Tensors) -> flashrs::Result<Vec<u16>> {
/// gpu.download(t.out())
/// # }
/// ```
pub struct Tensors {
    pub(crate) q: DeviceBuffer<u16>,
    pub(crate) k: DeviceBuffer<u16>,
    pub(crate) v: DeviceBuffer<u16>,
    pub(crate) out: DeviceBuffer<u16>,
    /// Each query row's log-sum-exp (`[B, H, S_q]`, natural log), written when present; see
    /// `Gpu::request_lse`.
    pub(crate) lse: Option<DeviceBuffer<f32>>,
    /// Each query head's attention sink (`[H]` fp32), read when present.
    pub(crate) sinks: Option<DeviceBuffer<f32>>,
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
    /// The output's layout (and the inputs', unless `strides` says otherwise).
    pub(crate) layout: Layout,
    /// The element strides of Q, K and V over `[B, H, S, D]`: their layout's unless they were
    /// lent as strided views ([`Gpu::tensors_from_strided`]).
    pub(crate) strides: [Strides; 3],
    /// Where launches on these buffers are enqueued: the GPU's own stream, or the caller's for
    /// borrowed buffers.
    pub(crate) stream: Arc<CudaStream>,
    /// The tensor maps of the last `flash_ws` launch (host bytes and their device copy), reused
    /// while the buffers and tile sizes stay the same.
    pub(crate) maps: Option<Staged>,
    /// The item table of the last causal persistent `flash_ws` launch (`causal_item_table`),
    /// dealt again only for another variant, shape or grid.
    pub(crate) walk_table: TableCache,
}

impl Tensors {
    /// The shape the buffers were made for.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// How the output is laid out (the LSE is always `[B, H, S_q]`), and Q, K and V unless
    /// [`Tensors::strides`] says otherwise.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The element strides of Q, K and V over `[B, H, S, D]`.
    pub fn strides(&self) -> [Strides; 3] {
        self.strides
    }

    /// The strides Q, K and V have when contiguous in the output's layout.
    pub(crate) fn contiguous_strides(layout: Layout, shape: Shape) -> [Strides; 3] {
        [
            Strides::contiguous(layout, shape.q_dims()),
            Strides::contiguous(layout, shape.kv_dims()),
            Strides::contiguous(layout, shape.v_dims()),
        ]
    }

    /// The element type of Q, K, V and the output.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    lab_pub! {
        /// The query buffer (the dtype's bits).
        fn q(&self) -> &CudaSlice<u16> {
            &self.q
        }
    }

    lab_pub! {
        /// The key buffer (the dtype's bits).
        fn k(&self) -> &CudaSlice<u16> {
            &self.k
        }
    }

    lab_pub! {
        /// The value buffer (the dtype's bits).
        fn v(&self) -> &CudaSlice<u16> {
            &self.v
        }
    }

    lab_pub! {
        /// The output, laid out as Q (download it with [`Gpu::download`]).
        fn out(&self) -> &CudaSlice<u16> {
            &self.out
        }
    }

    lab_pub! {
        /// The log-sum-exp buffer, once [`Gpu::request_lse`] made one (or the caller lent one).
        fn lse(&self) -> Option<&CudaSlice<f32>> {
            self.lse.as_deref()
        }
    }

    lab_pub! {
        /// The stream launches on these tensors run on.
        fn stream(&self) -> &Arc<CudaStream> {
            &self.stream
        }
    }
}

/// A causal persistent launch's item table (`causal_item_table`): the variant, shape, grid and
/// sliding window's left size it was dealt for, and its device copy.
pub(crate) type TableCache = Option<((&'static str, Shape, u32, Option<u32>), Staged)>;

impl Gpu {
    lab_pub! {
        /// Uploads Q, K and V (the bits of `dtype`) for `shape`, lengths checked, and allocates an
        /// output poisoned with NaN, so that any element a kernel fails to write stays visibly wrong.
        fn tensors(&self, shape: Shape, dtype: DType, q: &[u16], k: &[u16], v: &[u16]) -> Result<Tensors> {
            self.tensors_in(Layout::Bhsd, shape, dtype, q, k, v)
        }
    }

    lab_pub! {
        /// As `tensors`, for inputs laid out as `layout` (the output will be too).
        fn tensors_in(
            &self,
            layout: Layout,
            shape: Shape,
            dtype: DType,
            q: &[u16],
            k: &[u16],
            v: &[u16],
        ) -> Result<Tensors> {
            shape.validate()?;
            let bytes = dtype.bytes();
            check_bytes("q", std::mem::size_of_val(q), shape.q_len(), bytes, shape)?;
            check_bytes("k", std::mem::size_of_val(k), shape.kv_len(), bytes, shape)?;
            check_bytes("v", std::mem::size_of_val(v), shape.v_len(), bytes, shape)?;
            Ok(Tensors {
                q: DeviceBuffer::owned(self.upload(q)?),
                k: DeviceBuffer::owned(self.upload(k)?),
                v: DeviceBuffer::owned(self.upload(v)?),
                out: DeviceBuffer::owned(self.upload(&vec![nan(dtype); shape.out_len()])?),
                lse: None,
                sinks: None,
                shape,
                dtype,
                layout,
                strides: Tensors::contiguous_strides(layout, shape),
                stream: self.stream.clone(),
                maps: None,
                walk_table: None,
            })
        }
    }

    lab_pub! {
        /// Wraps buffers the caller allocated (with another library, or PyTorch through its data
        /// pointers) as [`Tensors`] for `shape`, laid out as `layout`, holding `dtype`. Launches on
        /// them run on `stream`, which must belong to this GPU's context (the caller's own stream, so
        /// that its work and ours stay ordered without a synchronisation). Lengths, alignment, the
        /// shape and the stream's context are checked here and again at every launch; a mismatch is
        /// a typed error. The buffers are never freed by the library.
        ///
        /// # Safety
        /// For as long as the returned `Tensors` lives and until the work it enqueued on `stream` has
        /// completed:
        /// - each `ptr` is a device allocation (or part of one) of this GPU's context that holds at
        ///   least `len` elements of its type from `ptr` on, and stays allocated;
        /// - no other work writes Q, K, V, or reads or writes the output and log-sum-exp, unless it
        ///   is ordered with `stream` (same stream, or events);
        /// - the output and log-sum-exp do not overlap each other or Q, K, V.
        ///
        /// Alignment (16 bytes for Q, K, V and the output, 4 for the log-sum-exp) is checked, not
        /// assumed.
        unsafe fn tensors_from_raw(
            &self,
            stream: &Arc<CudaStream>,
            layout: Layout,
            shape: Shape,
            dtype: DType,
            raw: RawTensors,
        ) -> Result<Tensors> {
            let strides = Tensors::contiguous_strides(layout, shape);
            // Safety: this function's contract, for the contiguous strides.
            unsafe { self.tensors_from_strided(stream, layout, shape, dtype, raw, strides) }
        }
    }

    lab_pub! {
        /// [`Gpu::tensors_from_raw`] for Q, K and V whose elements are `strides` apart (each
        /// [`Strides`] over `[B, H, S, D]`, D's 1; each buffer's `len` the [`Strides::extent`] its
        /// strides reach), the output contiguous in `layout`. The kernels that read through the copy
        /// engine take any such strides; a launch of another kernel refuses inputs that are not
        /// contiguous in `layout`.
        ///
        /// # Safety
        /// As [`Gpu::tensors_from_raw`].
        unsafe fn tensors_from_strided(
            &self,
            stream: &Arc<CudaStream>,
            layout: Layout,
            shape: Shape,
            dtype: DType,
            raw: RawTensors,
            strides: [Strides; 3],
        ) -> Result<Tensors> {
            shape.validate()?;
            self.check_stream(stream)?;
            let bytes = dtype.bytes();
            let lse_rows = shape.lse_len().ok_or_else(|| too_large(shape))?;
            let extent = |strides: Strides, dims| strides.extent(dims).ok_or_else(|| too_large(shape));
            let tensor_buffers = [
                ("q", raw.q, extent(strides[0], shape.q_dims())?),
                ("k", raw.k, extent(strides[1], shape.kv_dims())?),
                ("v", raw.v, extent(strides[2], shape.v_dims())?),
                ("out", raw.out, shape.out_len()),
            ];
            for (what, buffer, elements) in tensor_buffers {
                check_buffer(what, buffer.len, 2, Some(elements), bytes, shape)?;
                check_alignment(what, buffer.ptr, TENSOR_ALIGN)?;
            }
            if let Some(lse) = raw.lse {
                check_buffer("lse", lse.len, 4, Some(lse_rows), 4, shape)?;
                check_alignment("lse", lse.ptr, 4)?;
            }
            if let Some(sinks) = raw.sinks {
                check_buffer("sinks", sinks.len, 4, Some(shape.heads), 4, shape)?;
                check_alignment("sinks", sinks.ptr, TENSOR_ALIGN)?;
            }
            // Safety: the caller's contract above (allocation, lengths, lifetime, ordering); the
            // lengths were also just checked against the shape.
            let borrow = |raw| unsafe { DeviceBuffer::borrowed(stream, raw) };
            Ok(Tensors {
                q: borrow(raw.q),
                k: borrow(raw.k),
                v: borrow(raw.v),
                out: borrow(raw.out),
                // Safety: as above.
                lse: raw.lse.map(|lse| unsafe { DeviceBuffer::borrowed(stream, lse) }),
                // Safety: as above.
                sinks: raw.sinks.map(|sinks| unsafe { DeviceBuffer::borrowed(stream, sinks) }),
                shape,
                dtype,
                layout,
                strides,
                stream: stream.clone(),
                maps: None,
                walk_table: None,
            })
        }
    }

    lab_pub! {
        /// For work outside `launch` that reads Q, K, V and writes the output on this GPU's own
        /// stream (the lab's cuBLAS and cuTENSOR candidates, its timing): the tensors are on that
        /// stream and their buffers hold what the shape and dtype imply.
        fn check_tensors_on_own_stream(&self, tensors: &Tensors) -> Result<()> {
            // Such work is ordered on this GPU's stream only: on tensors of a caller's stream it
            // could run before the caller's writes to them, or race its reads.
            if *tensors.stream != *self.stream {
                return Err(Error::InvalidProblem(
                    "these tensors are on a caller's stream: work outside `launch` runs on the GPU's own \
                     stream and needs tensors made there"
                        .into(),
                ));
            }
            let lens = BufferLens {
                q: tensors.q.len(),
                k: tensors.k.len(),
                v: tensors.v.len(),
                out: tensors.out.len(),
                lse: tensors.lse.as_ref().map(|lse| lse.len()),
                barrier_log: None,
                tensor_maps: None,
            };
            check_buffers(tensors.shape, tensors.dtype, lens, 0, false)
        }
    }

    /// Refuses a stream of another context: pointers of one context mean nothing in another.
    pub(crate) fn check_stream(&self, stream: &CudaStream) -> Result<()> {
        if **stream.context() == *self.ctx {
            Ok(())
        } else {
            Err(Error::ForeignStream)
        }
    }

    lab_pub! {
        /// Makes the next launches also write each row's log-sum-exp into the tensors' `lse`
        /// (allocated here, NaN-poisoned).
        fn request_lse(&self, tensors: &mut Tensors) -> Result<()> {
            tensors.lse = Some(nan_lse(&tensors.stream, tensors.shape)?);
            Ok(())
        }
    }

    lab_pub! {
        /// Gives the next launches on `tensors` these attention sinks (one per query head,
        /// uploaded here), or none.
        fn set_sinks(&self, tensors: &mut Tensors, sinks: Option<&[f32]>) -> Result<()> {
            tensors.sinks = match sinks {
                Some(sinks) => {
                    check_buffer("sinks", sinks.len(), 4, Some(tensors.shape.heads), 4, tensors.shape)?;
                    Some(DeviceBuffer::owned(tensors.stream.clone_htod(sinks)?))
                }
                None => None,
            };
            Ok(())
        }
    }

    lab_pub! {
        /// Refills the output with NaN before a launch whose every write must be checked.
        fn poison(&self, tensors: &mut Tensors) -> Result<()> {
            fill_nan(&tensors.stream, &mut tensors.out, tensors.dtype)
        }
    }
}

/// The NaN bit pattern of `dtype`, for poisoning outputs.
pub fn nan(dtype: DType) -> u16 {
    match dtype {
        DType::F16 => 0x7e00,
        DType::Bf16 => 0x7fc0,
    }
}

/// A log-sum-exp buffer for `shape` on `stream`, NaN until a launch writes it.
pub(crate) fn nan_lse(stream: &Arc<CudaStream>, shape: Shape) -> Result<DeviceBuffer<f32>> {
    let rows = shape.lse_len().ok_or_else(|| too_large(shape))?;
    Ok(DeviceBuffer::owned(stream.clone_htod(&vec![f32::NAN; rows])?))
}

/// Refills `out` with `dtype`'s NaN, in `stream`'s order.
pub(crate) fn fill_nan(stream: &Arc<CudaStream>, out: &mut CudaSlice<u16>, dtype: DType) -> Result<()> {
    stream.memcpy_htod(&vec![nan(dtype); out.len()], out)?;
    Ok(())
}

/// Downloads an output (or any tensor) as f32.
pub fn decode(dtype: DType, bits: &[u16]) -> Vec<f32> {
    bits.iter().map(|&b| dtype.decode(b)).collect()
}
