"""flashrs: FlashAttention-style attention forward for PyTorch CUDA tensors.

The kernels are written in Rust and compiled to PTX; the native module ``flashrs._flashrs`` does
every check and the launch, and knows nothing of torch. ``attention`` is a ``torch.library``
custom op (``torch.ops.flashrs.attention``) with a fake implementation, so ``torch.compile``
(``fullgraph=True`` included) and ``torch.export`` see one opaque op; an eager call runs the op's
implementation directly, which costs less host time. The implementation reads each tensor's
address, shape, strides, dtype and device, allocates the outputs with torch (so its caching
allocator owns them, and a graph's private pool under capture) and passes torch's current stream.
"""

from typing import Optional, Tuple

from . import _flashrs

try:
    import torch
except ImportError:  # the checks still run (and are tested) without torch
    torch = None

__all__ = ["attention"]


def attention(q, k, v, causal=False, scale=None, return_lse=False, layout=None):
    """``softmax(scale * q @ k^T) @ v`` for each batch and head, on torch's current stream.

    q is ``[B, H, S_q, D]`` and k, v are ``[B, H_kv, S_k, D]``, or with ``layout="bshd"`` all
    three ``[B, S, H, D]`` (flash_attn_func's order); ``layout`` names the order of the dims, not
    of memory. In memory each tensor may be contiguous in either order, e.g. ``x.transpose(1, 2)``
    of a contiguous tensor: the strides tell, and the kernels read it in place. ``H_kv`` must
    divide ``H`` (grouped-query attention). dtype float16 or bfloat16, on one CUDA device;
    ``D`` in 64, 128 (and 256 on Hopper). ``scale`` defaults to ``1/sqrt(D)``. ``causal`` masks
    key ``j`` from query ``i`` unless ``j <= i + S_k - S_q`` (aligned bottom-right, as
    FlashAttention-2; torch's ``is_causal`` aligns top-left): a query that sees no key gets zeros.

    Returns the output, with q's dims and memory layout, and with ``return_lse`` also the
    log-sum-exp of each query row's scaled scores, ``[B, H, S_q]`` float32 (``-inf`` for a row
    that sees no key). Bad input raises ``ValueError`` with a one-line message, also inputs that
    require grad while grad mode is on (there is no backward pass yet); a machine without a CUDA
    driver, or a CUDA failure, raises ``RuntimeError``. The first call on a device loads the
    kernels (with the driver's JIT, tens of seconds, unless ``FLASHRS_CUBIN_DIR`` points at
    prebuilt ones). A call can be captured in a CUDA graph: replays read the inputs' current
    contents at the same addresses, with the shapes and options of the captured call.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not _is_tensor(t):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    _refuse_grad((q, k, v), _grad_enabled())
    scale = None if scale is None else float(scale)
    args = (q, k, v, bool(causal), scale, bool(return_lse), "bhsd" if layout is None else str(layout))
    # torch.compile and torch.export trace the op; an eager call runs its implementation directly,
    # which skips the dispatcher's Python layers (about 24 us a call on an H200 host).
    if _compiling():
        out, lse = _op(*args)
    else:
        out, lse, _ = _attention(*args)
    return (out, lse) if return_lse else out


def _refuse_grad(tensors, grad_enabled):
    """A ValueError for inputs that need a gradient while grad mode is on: there is no backward
    pass yet, and an output detached from them would drop the gradient without a word."""
    if grad_enabled:
        for name, t in zip("qkv", tensors):
            if getattr(t, "requires_grad", False):
                raise ValueError(
                    f"{name} requires grad: flashrs has no backward pass yet; call it under "
                    "torch.no_grad() or torch.inference_mode(), or detach the inputs"
                )


# What the public function asks of torch; module functions so that the CPU tests (no torch)
# can stand in for them.


def _is_tensor(t):
    return torch is not None and isinstance(t, torch.Tensor)


def _grad_enabled():
    return torch is not None and torch.is_grad_enabled()


def _compiling():
    return torch is not None and torch.compiler.is_compiling()


def _op(q, k, v, causal, scale, return_lse, layout):
    return torch.ops.flashrs.attention(q, k, v, causal, scale, return_lse, layout)


def _lse_rows(shape, layout):
    """The log-sum-exp's dims, [B, H, S_q], from q's shape in the caller's dim order."""
    return (shape[0], shape[2], shape[1]) if layout == "bshd" else (shape[0], shape[1], shape[2])


if torch is not None:

    @torch.library.custom_op("flashrs::attention", mutates_args=())
    def _attention_op(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        scale: Optional[float],
        return_lse: bool,
        layout: str,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The op's real implementation: every check, then the launch on the current stream.
        Without ``return_lse`` the second output is an empty float32 tensor."""
        out, lse, _ = _attention(q, k, v, causal, scale, return_lse, layout)
        if lse is None:
            lse = torch.empty(0, dtype=torch.float32, device=q.device)
        return out, lse

    @_attention_op.register_fake
    def _attention_fake(q, k, v, causal, scale, return_lse, layout):
        out = torch.empty_like(q, memory_format=torch.preserve_format)
        rows = _lse_rows(q.shape, layout) if return_lse else (0,)
        return out, q.new_empty(rows, dtype=torch.float32)


def _attention(q, k, v, causal, scale, return_lse, layout):
    """``attention``, also returning the name of the kernel the library picked."""
    described = [_describe(name, t) for name, t in (("q", q), ("k", k), ("v", v))]
    if scale is not None:
        scale = float(scale)
    causal = bool(causal)
    # Every check of the inputs first, so that a refused call allocates nothing.
    rows = _flashrs.check(*described, layout, causal, scale)
    out = _empty_like(q)
    lse = _empty_lse(q, rows) if return_lse else None
    kernel = _flashrs.attention(
        *described,
        _describe("out", out),
        None if lse is None else _describe("lse", lse),
        layout,
        causal,
        scale,
        _current_stream(q),
    )
    return out, lse, kernel


def _describe(name, t):
    """What the native module needs of a tensor, as plain values."""
    try:
        device = t.device
        return (
            int(t.data_ptr()),
            tuple(int(n) for n in t.shape),
            tuple(int(s) for s in t.stride()),
            str(t.dtype),
            str(device.type),
            device.index,
        )
    except AttributeError:
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}") from None


# Allocation and the stream are torch's; they are module functions so that tests without torch
# can stand in for them.


def _empty_like(q):
    """An output with q's dims and strides (``empty_like`` keeps the strides of a dense tensor),
    so it has q's memory layout."""
    import torch

    return torch.empty_like(q, memory_format=torch.preserve_format)


def _empty_lse(q, rows):
    import torch

    return torch.empty(rows, dtype=torch.float32, device=q.device)


def _current_stream(q):
    import torch

    return torch.cuda.current_stream(q.device).cuda_stream
