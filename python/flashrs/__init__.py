"""flashrs: FlashAttention-style attention for PyTorch CUDA tensors, forward and backward.

The kernels are written in Rust and compiled to PTX; the native module ``flashrs._flashrs`` does
every check and the launch, and knows nothing of torch. ``attention`` is a ``torch.library``
custom op (``torch.ops.flashrs.attention``) with a fake implementation, so ``torch.compile``
(``fullgraph=True`` included) and ``torch.export`` see one opaque op; an eager call runs the op's
implementation directly, which costs less host time. The implementation reads each tensor's
address, shape, strides, dtype and device, allocates the outputs with torch (so its caching
allocator owns them, and a graph's private pool under capture) and passes torch's current stream.

The op is differentiable: its autograd formula (``torch.library.register_autograd``) calls a
second custom op, ``torch.ops.flashrs.attention_backward``, with what the forward saved (q, k, v,
the output and the log-sum-exp), so a loss through ``attention`` trains, also under
``torch.compile``.

``varlen_attention`` (``torch.ops.flashrs.varlen_attention``) takes packed batches of sequences
of their own lengths, as ``flash_attn_varlen_func`` does; ``flashrs.transformers`` registers the
package as an attention implementation of Hugging Face transformers.

Every call takes FlashAttention's ``window_size=(left, right)`` (a sliding window, aligned
bottom-right like ``causal``) and ``softcap`` (a logit softcap, Gemma 2's), as ``flash_attn_func``
names them; the ops take them as ``window_left``, ``window_right`` and ``softcap`` (defaults -1, -1
and 0.0: none), and the backward op gets the forward's.
"""

import math
import operator
from typing import Optional, Tuple

from . import _flashrs

try:
    import torch
except ImportError:  # the checks still run (and are tested) without torch
    torch = None

__all__ = ["attention", "varlen_attention", "paged_attention", "merge_states"]


def attention(
    q, k, v, causal=False, scale=None, return_lse=False, layout=None, deterministic=False, window_size=(-1, -1),
    softcap=0.0, sinks=None,
):
    """``softmax(scale * q @ k^T) @ v`` for each batch and head, on torch's current stream.

    q is ``[B, H, S_q, D]`` and k, v are ``[B, H_kv, S_k, D]``, or with ``layout="bshd"`` all
    three ``[B, S, H, D]`` (flash_attn_func's order); ``layout`` names the order of the dims, not
    of memory. Each tensor may have its own strides (a transpose, a slice of a KV cache, one of
    q, k and v of a fused projection): on Hopper the kernels read them in place when the last
    stride is 1 and the others are multiples of 8 elements; otherwise (or on older GPUs, unless
    all three are contiguous in one order) they are copied into one order first. ``H_kv`` must
    divide ``H`` (grouped-query attention). dtype float16 or bfloat16, on one CUDA device;
    ``D`` in 64 and 128 (and on Hopper 256 and any other multiple of 8 up to 256, which runs on the
    next compiled head dim's tiles: 96 on 128's, 192 on 256's, with that head dim's work, no copy
    in the forward). On Hopper v may have a smaller head dim ``D_v`` of its own, a multiple of 8
    (DeepSeek's MLA prefill: q and k 192, v 128); the output then has ``D_v``. ``scale`` defaults
    to ``1/sqrt(D)``. ``causal`` masks
    key ``j`` from query ``i`` unless ``j <= i + S_k - S_q`` (aligned bottom-right, as
    FlashAttention-2; torch's ``is_causal`` aligns top-left): a query that sees no key gets zeros.

    ``window_size=(left, right)`` is FlashAttention's sliding window, aligned bottom-right like
    ``causal``: query ``i``, whose diagonal is key ``d = i + S_k - S_q``, sees the keys ``j`` with
    ``d - left <= j <= d + right``; -1 leaves that side unbounded (the default ``(-1, -1)`` is every
    key). With ``causal`` the right side is 0 whatever ``right`` says, so ``(w - 1, 0)`` with
    ``causal=True`` is a causal window of ``w`` keys, the query's own included (Mistral's and
    Gemma's ``sliding_window=w``). ``softcap`` (``0.0``: none) caps each scaled score ``x`` as
    ``softcap * tanh(x / softcap)`` before the softmax (Gemma 2's attention logit softcapping);
    the log-sum-exp is of the capped scores. Both apply to the backward pass too. A size below -1,
    a negative or non-finite softcap or a value of the wrong type is a ``ValueError``.

    ``sinks`` (GPT-OSS's attention sinks): a ``[H]`` tensor of one logit per query head, in the
    units of the scaled scores, that joins each of the head's rows' softmax denominators and adds
    no value: ``out_i = sum_j e^(s_ij) v_j / (e^sink + sum_j e^(s_ij))``. The log-sum-exp includes
    it. Any floating dtype (computed in float32); differentiable (its gradient is
    ``-sum_i e^(sink - lse_i) rowsum(dO_i * O_i)`` over the head's rows).

    Returns the output, with q's dims (and q's memory order when q is contiguous in either
    order; else contiguous), and with ``return_lse`` also the
    log-sum-exp of each query row's scaled scores, ``[B, H, S_q]`` float32 (``-inf`` for a row
    that sees no key). When q, k or v requires grad (and grad mode is on), the output carries
    autograd history: its backward pass computes dq, dk and dv on the GPU (at the compiled head
    dims 64, 128 and 256; at a padded one on copies with zero columns up to the next). With
    ``deterministic`` the backward adds dq's parts in a fixed order, so every run gives the same
    bits. The log-sum-exp is not differentiated (as FlashAttention's). Bad input raises
    ``ValueError`` with a one-line message; a machine without a CUDA driver, or a CUDA failure,
    raises ``RuntimeError``. The first call on a device loads the kernels (with the driver's JIT,
    tens of seconds, unless ``FLASHRS_CUBIN_DIR`` points at prebuilt ones). A call can be captured
    in a CUDA graph: replays read the inputs' current contents at the same addresses, with the
    shapes and options of the captured call.
    """
    # The checks of every call, written for the host time they take (this runs once per call).
    if not (_is_tensor(q) and _is_tensor(k) and _is_tensor(v)):
        _refuse_non_tensors(q, k, v)
    scale = None if scale is None else float(scale)
    layout = "bhsd" if layout is None else str(layout)
    left, right = _window_size(window_size)
    softcap = _softcap(softcap)
    if sinks is not None:
        sinks = _sinks(sinks)
    wants_grad = getattr(q, "requires_grad", False) or getattr(k, "requires_grad", False) or getattr(v, "requires_grad", False)
    wants_grad = wants_grad or getattr(sinks, "requires_grad", False)
    needs_grad = wants_grad and _grad_enabled()
    # The backward needs the log-sum-exp; it goes through the dispatcher, where autograd is.
    options = (bool(causal), scale, bool(return_lse) or needs_grad, layout, bool(deterministic), left, right, softcap)
    # torch.compile and torch.export trace the op; an eager call that needs no gradient runs its
    # implementation directly, which skips the dispatcher's Python layers (about 24 us a call on
    # an H200 host).
    if needs_grad or _compiling():
        out, lse = _op(q, k, v, *options, sinks)
    else:
        out, lse, _ = _attention(q, k, v, *options[:4], (left, right), softcap, sinks)
    return (out, lse) if return_lse else out


def _sinks(sinks):
    """The attention sinks as the kernels read them: float32 and contiguous (a copy when they are
    not; ``_aligned_sinks`` sees to the address where the op runs, since torch.compile cannot
    trace a data pointer); anything but a 1-dim floating tensor is a one-line ``ValueError``
    (their length, on the device, is checked with the call)."""
    if not _is_tensor(sinks):
        raise ValueError(f"sinks must be a torch.Tensor of one logit per query head, got {type(sinks).__name__}")
    if sinks.dim() != 1 or not sinks.is_floating_point():
        raise ValueError(f"sinks must be a 1-dim floating tensor [H], got {sinks.dtype} {list(sinks.shape)}")
    if sinks.dtype != torch.float32 or not sinks.is_contiguous():
        sinks = sinks.to(torch.float32).clone(memory_format=torch.contiguous_format)
    return sinks


def _aligned_sinks(sinks):
    """``_sinks``' result at a 16-byte-aligned address, as the kernels read it (a copy where a
    slice starts elsewhere); None stays None. Called where the op runs, eagerly."""
    if sinks is not None and sinks.data_ptr() % 16 != 0:
        sinks = sinks.clone()
    return sinks


def _window_size(window_size):
    """``(left, right)`` as ints from FlashAttention's ``window_size``, each -1 (no bound) or at
    least 0; anything else is a one-line ``ValueError``."""
    try:
        left, right = window_size
        if type(left) is not int or type(right) is not int:  # numpy ints, 0-dim tensors (not bools)
            if isinstance(left, bool) or isinstance(right, bool):
                raise TypeError
            left, right = operator.index(left), operator.index(right)
    except (TypeError, ValueError):
        raise ValueError(
            f"window_size must be a pair of ints (left, right), -1 for no bound on a side, got {_short(window_size)}"
        ) from None
    if not (-1 <= left <= 2**31 - 2 and -1 <= right <= 2**31 - 2):
        raise ValueError(
            f"window_size must be (left, right) with each side -1 (no bound) or a key count from 0 to 2^31 - 2, "
            f"got ({left}, {right})"
        )
    return left, right


def _softcap(softcap):
    """FlashAttention's ``softcap`` as a float: 0.0 (or None) for none, else positive and finite;
    anything else is a one-line ``ValueError``."""
    if softcap is None:
        return 0.0
    if type(softcap) is not float:
        if isinstance(softcap, (bool, str, bytes)):
            raise ValueError(f"softcap must be a number (0.0 for none), got {_short(softcap)}")
        try:
            softcap = float(softcap)
        except OverflowError:  # an int past float's range
            softcap = math.inf
        except (TypeError, ValueError):
            raise ValueError(f"softcap must be a number (0.0 for none), got {_short(softcap)}") from None
    if not (softcap >= 0.0 and math.isfinite(softcap)):
        raise ValueError(f"softcap must be 0.0 (none) or a positive finite number, got {softcap}")
    return softcap


def _short(value):
    """``repr(value)`` on one line, cut short: for the messages of refused arguments."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def varlen_attention(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, causal=False, scale=None,
    return_lse=False, window_size=(-1, -1), softcap=0.0, sinks=None,
):
    """``attention`` on a packed batch of sequences of their own lengths, as FlashAttention's
    ``flash_attn_varlen_func`` takes one: q is ``[total_q, H, D]``, k and v ``[total_k, H_kv, D]``
    (contiguous; others are copied first), and sequence ``b`` owns rows
    ``cu_seqlens[b]:cu_seqlens[b + 1]`` of each (``B + 1`` int32 prefix sums, 0 first, never
    decreasing, the last one the packed rows). Each sequence attends to its own keys; ``causal``
    and ``window_size`` are aligned bottom-right per sequence (a query that sees no key gets
    zeros); ``window_size``, ``softcap`` and ``sinks`` are ``attention``'s.

    The prefix sums are read on the host: a list, tuple or CPU tensor costs nothing, a CUDA
    tensor is copied to the host (a synchronisation, which a CUDA graph cannot capture: pass them
    on the CPU there). A captured call replays with the prefix sums and shapes it was captured
    with, on the inputs' current contents. ``max_seqlen_q`` and ``max_seqlen_k`` are taken for
    flash_attn's signature and not needed. Returns the output, ``[total_q, H, D]``, and with
    ``return_lse`` also the log-sum-exp, ``[H, total_q]`` float32. There is no backward pass for
    packed batches yet: inputs that require grad (under grad mode) are refused. A batch with no
    query returns empty outputs; one with queries but no key at all is refused. Bad input raises
    ``ValueError`` with a one-line message.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not _is_tensor(t):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    sinks = None if sinks is None else _sinks(sinks)
    if _grad_enabled() and any(getattr(t, "requires_grad", False) for t in (q, k, v, sinks)):
        raise ValueError(
            "flashrs.varlen_attention has no backward pass yet: call it under torch.no_grad() or on "
            "tensors that do not require grad (flashrs.attention has one)"
        )
    scale = None if scale is None else float(scale)
    left, right = _window_size(window_size)
    softcap = _softcap(softcap)
    if _compiling():
        sums = tuple(_prefix_sums_tensor(x) for x in (cu_seqlens_q, cu_seqlens_k))
        out, lse = torch.ops.flashrs.varlen_attention(
            q, k, v, *sums, bool(causal), scale, bool(return_lse), left, right, softcap, sinks
        )
    else:
        sums = (_prefix_sums("cu_seqlens_q", cu_seqlens_q), _prefix_sums("cu_seqlens_k", cu_seqlens_k))
        out, lse, _ = _varlen_attention(
            q, k, v, *sums, bool(causal), scale, bool(return_lse), (left, right), softcap, sinks
        )
    return (out, lse) if return_lse else out


def paged_attention(
    q, k_cache, v_cache, block_table, cache_seqlens, causal=False, scale=None, return_lse=False, layout="bshd",
    window_size=(-1, -1), softcap=0.0, sinks=None,
):
    """``attention`` of ``q`` against a paged KV cache, as FlashAttention's
    ``flash_attn_with_kvcache`` takes one: q is ``[B, S_q, H, D]`` (or ``[B, H, S_q, D]`` with
    ``layout="bhsd"``), the caches ``[num_blocks, block_size, H_kv, D]`` (contiguous; others are
    copied first), sequence ``b``'s keys the first ``cache_seqlens[b]`` slots of the pages its
    row of ``block_table`` (``[B, max_blocks]`` int32) lists. Page sizes 16 to 256, a power of
    two; ``causal`` and ``window_size`` are aligned bottom-right per sequence (the last query
    against the last cached key); ``window_size``, ``softcap`` and ``sinks`` are ``attention``'s. Runs on
    ``flash_decode``.

    The block table and lengths are read on the host, like ``varlen_attention``'s prefix sums
    (a CUDA tensor costs a synchronisation and cannot be read under capture); a captured call
    replays with the table and lengths it was captured with, on the caches' current contents.
    Returns the output (q's dims, contiguous) and with ``return_lse`` the log-sum-exp
    ``[B, H, S_q]`` float32. No backward pass: inputs that require grad are refused.
    """
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not _is_tensor(t):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    sinks = None if sinks is None else _sinks(sinks)
    if _grad_enabled() and any(getattr(t, "requires_grad", False) for t in (q, k_cache, v_cache, sinks)):
        raise ValueError("flashrs.paged_attention has no backward pass: call it under torch.no_grad()")
    scale = None if scale is None else float(scale)
    layout = str(layout)
    left, right = _window_size(window_size)
    softcap = _softcap(softcap)
    if _compiling():
        tables = tuple(_prefix_sums_tensor(x) for x in (block_table, cache_seqlens))
        out, lse = torch.ops.flashrs.paged_attention(
            q, k_cache, v_cache, *tables, bool(causal), scale, bool(return_lse), layout, left, right, softcap, sinks
        )
    else:
        tables = (_host_ints("block_table", block_table, 2), _host_ints("cache_seqlens", cache_seqlens, 1))
        out, lse, _ = _paged_attention(
            q, k_cache, v_cache, *tables, bool(causal), scale, bool(return_lse), layout, (left, right), softcap, sinks
        )
    return (out, lse) if return_lse else out


def _paged_attention(
    q, k_cache, v_cache, block_table, cache_seqlens, causal, scale, return_lse, layout, window_size=(-1, -1),
    softcap=0.0, sinks=None,
):
    """``paged_attention``'s implementation on host tables, also returning the kernel's name."""
    q, k_cache, v_cache = (_contiguous(t) for t in (q, k_cache, v_cache))
    sinks = _aligned_sinks(sinks)
    out = _empty_like(q)
    lse = _empty_lse(q, _lse_rows(q.shape, layout)) if return_lse and len(q.shape) == 4 else None
    lse_described = None if lse is None else _describe("lse", lse)
    kernel = _flashrs.paged_attention(
        _describe("q", q), _describe("k_cache", k_cache), _describe("v_cache", v_cache), _describe("out", out),
        lse_described, block_table, cache_seqlens, layout, causal, scale, _current_stream(q), window_size, softcap,
        None if sinks is None else _describe("sinks", sinks),
    )
    return out, lse, kernel


def _host_ints(name, values, dims):
    """A table of int32 read on the host, flattened row-major: a tensor of ``dims`` dims, or
    (for one dim) a list or tuple."""
    if _is_tensor(values):
        if values.dim() != dims:
            raise ValueError(f"{name} has {values.dim()} dims: it needs {dims}")
        values = values.reshape(-1)
    elif dims != 1:
        raise ValueError(f"{name} must be a {dims}-dim tensor of int32, got {type(values).__name__}")
    return _prefix_sums(name, values)


def merge_states(out_a, lse_a, out_b, lse_b, layout=None):
    """Attention over two disjoint sets of keys merged into attention over both: ``out_a`` and
    ``out_b`` are ``attention``'s outputs for the same queries (``[B, H, S, D]``, or
    ``[B, S, H, D]`` with ``layout="bshd"``, one dtype), ``lse_a`` and ``lse_b`` their
    log-sum-exps (``return_lse=True``: ``[B, H, S]`` float32, natural log). Returns ``(out,
    lse)``: ``lse = log(e^lse_a + e^lse_b)``, ``out = e^(lse_a - lse) out_a + e^(lse_b - lse)
    out_b``, computed in float32. A row that saw no key on either side (``-inf`` twice) merges to
    zeros and ``-inf``. Context parallelism and cascade attention combine chunks this way; the
    op ``torch.ops.flashrs.merge_states`` is capturable. Not differentiable.
    """
    for name, t in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b)):
        if not _is_tensor(t):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    layout = "bhsd" if layout is None else str(layout)
    if _compiling():
        return torch.ops.flashrs.merge_states(out_a, lse_a, out_b, lse_b, layout)
    return _merge_states(out_a, lse_a, out_b, lse_b, layout)


def _merge_states(out_a, lse_a, out_b, lse_b, layout):
    """``merge_states``' implementation: the outputs in one memory order (``out_a``'s), the
    results allocated by torch, one native call."""
    out_a = _contiguous(out_a) if not _dense(out_a) else out_a
    out_b = _in_order_of(out_b, out_a)
    lse_a, lse_b = (_contiguous(t) for t in (lse_a, lse_b))
    out = _empty_like(out_a)
    lse = _empty_lse(out_a, tuple(lse_a.shape))
    _flashrs.merge_states(
        _describe("out_a", out_a), _describe("lse_a", lse_a), _describe("out_b", out_b), _describe("lse_b", lse_b),
        _describe("out", out), _describe("lse", lse), layout, _current_stream(out_a),
    )
    return out, lse


def _dense(t):
    """Whether ``t`` is contiguous in its dims' order or as a transpose of S and H of one."""
    return t.dim() != 4 or t.is_contiguous() or t.transpose(1, 2).is_contiguous()


def _prefix_sums(name, sums):
    """The prefix sums as a list of Python ints, read on the host (see ``varlen_attention``)."""
    if _is_tensor(sums):
        if sums.dim() != 1 or sums.dtype.is_floating_point or sums.dtype.is_complex:
            raise ValueError(f"{name} is a {sums.dtype} tensor of {sums.dim()} dims: it needs 1 dim of integers")
        if sums.is_cuda and torch.cuda.is_current_stream_capturing():
            raise ValueError(
                f"{name} is on the GPU, which cannot be read while a CUDA graph is captured: pass the "
                "prefix sums on the CPU (a list or a CPU tensor)"
            )
        sums = sums.tolist()
    if not isinstance(sums, (list, tuple)):
        raise ValueError(f"{name} must be a list, tuple or 1-dim tensor of ints, got {type(sums).__name__}")
    values = []
    for value in sums:
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
            raise ValueError(f"{name} holds {value!r}: its entries are int32")
        values.append(value)
    return values


def _prefix_sums_tensor(sums):
    """The prefix sums as the custom op takes them: a CPU int32 tensor."""
    if _is_tensor(sums):
        return sums.to(device="cpu", dtype=torch.int32)
    return torch.tensor(list(sums), dtype=torch.int32)


def _varlen_attention(
    q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, return_lse, window_size=(-1, -1), softcap=0.0, sinks=None
):
    """``varlen_attention``'s implementation on host prefix sums, also returning the kernel's
    name (None when nothing ran): outputs allocated by torch, then one native call that checks
    everything and launches on torch's current stream."""
    q, k, v = (_contiguous(t) for t in (q, k, v))
    sinks = _aligned_sinks(sinks)
    total_q = q.shape[0] if len(q.shape) == 3 else -1
    heads = q.shape[1] if len(q.shape) == 3 else 0
    out = _empty_like(q)
    lse = _empty_lse(q, (heads, total_q)) if return_lse and total_q >= 0 else None
    lse_described = None if lse is None else _describe("lse", lse)
    kernel = _flashrs.varlen_attention(
        _describe("q", q), _describe("k", k), _describe("v", v), _describe("out", out), lse_described,
        cu_seqlens_q, cu_seqlens_k, causal, scale, _current_stream(q), window_size, softcap,
        None if sinks is None else _describe("sinks", sinks),
    )
    return out, lse, kernel


# What the public function asks of torch; module functions so that the CPU tests (no torch)
# can stand in for them.


def _refuse_non_tensors(*tensors):
    for name, t in zip(("q", "k", "v"), tensors):
        if not _is_tensor(t):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def _is_tensor(t):
    return torch is not None and isinstance(t, torch.Tensor)


def _grad_enabled():
    return torch is not None and torch.is_grad_enabled()


def _compiling():
    return torch is not None and torch.compiler.is_compiling()


def _op(q, k, v, causal, scale, return_lse, layout, deterministic, window_left, window_right, softcap, sinks=None):
    return torch.ops.flashrs.attention(
        q, k, v, causal, scale, return_lse, layout, deterministic, window_left, window_right, softcap, sinks
    )


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
        deterministic: bool,
        window_left: int = -1,
        window_right: int = -1,
        softcap: float = 0.0,
        sinks: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The op's real implementation: every check, then the launch on the current stream.
        Without ``return_lse`` the second output is an empty float32 tensor. ``deterministic``
        is the backward's; ``window_left``, ``window_right``, ``softcap`` and ``sinks`` are
        ``attention``'s ``window_size``, ``softcap`` and ``sinks`` (float32, see ``attention``)."""
        out, lse, _ = _attention(
            q, k, v, causal, scale, return_lse, layout, (window_left, window_right), softcap, sinks
        )
        if lse is None:
            lse = torch.empty(0, dtype=torch.float32, device=q.device)
        return out, lse

    @_attention_op.register_fake
    def _attention_fake(
        q, k, v, causal, scale, return_lse, layout, deterministic, window_left=-1, window_right=-1, softcap=0.0,
        sinks=None,
    ):
        out = _empty_out(q, v)
        rows = _lse_rows(q.shape, layout) if return_lse else (0,)
        return out, q.new_empty(rows, dtype=torch.float32)

    @torch.library.custom_op("flashrs::attention_backward", mutates_args=())
    def _attention_backward_op(
        d_out: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        lse: torch.Tensor,
        causal: bool,
        scale: Optional[float],
        layout: str,
        deterministic: bool,
        window_left: int = -1,
        window_right: int = -1,
        softcap: float = 0.0,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """dq, dk and dv of ``attention`` from what its forward saved and the output's gradient,
        each with its input's dims and memory layout; the mask, scale, window and softcap must
        be the forward's."""
        return _attention_backward(
            d_out, q, k, v, out, lse, causal, scale, layout, deterministic, (window_left, window_right), softcap
        )

    @_attention_backward_op.register_fake
    def _attention_backward_fake(
        d_out, q, k, v, out, lse, causal, scale, layout, deterministic, window_left=-1, window_right=-1, softcap=0.0
    ):
        return tuple(_empty_like(_in_order_of(t, out)) for t in (q, k, v))

    # The op's arguments after q, k, v: the dispatcher may leave out trailing ones equal to their
    # defaults, which these fill back in.
    _ATTENTION_DEFAULTS = (False, None, False, "bhsd", False, -1, -1, 0.0, None)

    def _setup_context(ctx, inputs, output):
        q, k, v, *options = inputs
        causal, scale, _, layout, deterministic, left, right, softcap, sinks = (
            *options, *_ATTENTION_DEFAULTS[len(options):]
        )
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.options = (causal, scale, layout, deterministic, left, right, softcap)
        ctx.mark_non_differentiable(lse)

    def _attention_grad(ctx, d_out, _d_lse):
        q, k, v, out, lse, sinks = ctx.saved_tensors
        if lse.numel() == 0:
            raise RuntimeError(
                "flashrs.attention was called without the log-sum-exp its backward needs; "
                "call flashrs.attention (not torch.ops.flashrs.attention with return_lse=False)"
            )
        # The forward's mask, scale, window and softcap, so that the gradients are of what it ran.
        # The sinks are in the log-sum-exp, which is all the kernels need of them.
        d_q = d_k = d_v = None
        if any(ctx.needs_input_grad[:3]):
            d_q, d_k, d_v = torch.ops.flashrs.attention_backward(d_out, q, k, v, out, lse, *ctx.options)
        d_sinks = None
        if sinks is not None and ctx.needs_input_grad[11]:
            d_sinks = _sink_gradient(d_out, out, lse, sinks, ctx.options[2])
        # One gradient per argument of the op's schema (the options have none).
        return d_q, d_k, d_v, None, None, None, None, None, None, None, None, d_sinks

    def _sink_gradient(d_out, out, lse, sinks, layout):
        """The sinks' gradient: a sink's probability in row ``i`` is ``p_i = e^(sink - lse_i)``
        (the log-sum-exp includes the sink) and its score's gradient ``-p_i rowsum(dO_i * O_i)``,
        summed over the head's rows of every batch entry; float32."""
        delta = (d_out.float() * out.float()).sum(dim=-1)  # [B, H, S] or [B, S, H]
        if layout == "bshd":
            delta = delta.transpose(1, 2)
        logit = sinks.view(1, -1, 1) - lse
        # A row with neither a key nor a sink (-inf - -inf) has no probability there.
        p = torch.where(torch.isnan(logit), torch.zeros_like(logit), torch.exp(logit))
        return -(p * delta).sum(dim=(0, 2))

    torch.library.register_autograd("flashrs::attention", _attention_grad, setup_context=_setup_context)

    @torch.library.custom_op("flashrs::varlen_attention", mutates_args=())
    def _varlen_attention_op(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor,
        causal: bool,
        scale: Optional[float],
        return_lse: bool,
        window_left: int = -1,
        window_right: int = -1,
        softcap: float = 0.0,
        sinks: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``varlen_attention``'s implementation as an op; the prefix sums are CPU int32
        tensors. Without ``return_lse`` the second output is an empty float32 tensor."""
        sums = (_prefix_sums("cu_seqlens_q", cu_seqlens_q), _prefix_sums("cu_seqlens_k", cu_seqlens_k))
        out, lse, _ = _varlen_attention(
            q, k, v, *sums, causal, scale, return_lse, (window_left, window_right), softcap, sinks
        )
        if lse is None:
            lse = torch.empty(0, dtype=torch.float32, device=q.device)
        return out, lse

    @torch.library.custom_op("flashrs::paged_attention", mutates_args=())
    def _paged_attention_op(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_table: torch.Tensor,
        cache_seqlens: torch.Tensor,
        causal: bool,
        scale: Optional[float],
        return_lse: bool,
        layout: str,
        window_left: int = -1,
        window_right: int = -1,
        softcap: float = 0.0,
        sinks: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``paged_attention``'s implementation as an op; the table and lengths are CPU int32
        tensors. Without ``return_lse`` the second output is an empty float32 tensor."""
        tables = (_host_ints("block_table", block_table, 2), _host_ints("cache_seqlens", cache_seqlens, 1))
        out, lse, _ = _paged_attention(
            q, k_cache, v_cache, *tables, causal, scale, return_lse, layout, (window_left, window_right), softcap,
            sinks,
        )
        if lse is None:
            lse = torch.empty(0, dtype=torch.float32, device=q.device)
        return out, lse

    @_paged_attention_op.register_fake
    def _paged_attention_fake(
        q, k_cache, v_cache, block_table, cache_seqlens, causal, scale, return_lse, layout, window_left=-1,
        window_right=-1, softcap=0.0, sinks=None,
    ):
        rows = _lse_rows(q.shape, layout) if return_lse else (0,)
        return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty(rows, dtype=torch.float32)

    @torch.library.custom_op("flashrs::merge_states", mutates_args=())
    def _merge_states_op(
        out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor, layout: str
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``merge_states``' implementation as an op."""
        return _merge_states(out_a, lse_a, out_b, lse_b, layout)

    @_merge_states_op.register_fake
    def _merge_states_fake(out_a, lse_a, out_b, lse_b, layout):
        return _empty_like(out_a), lse_a.new_empty(lse_a.shape)

    @_varlen_attention_op.register_fake
    def _varlen_attention_fake(
        q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, return_lse, window_left=-1, window_right=-1, softcap=0.0,
        sinks=None,
    ):
        rows = (q.shape[1], q.shape[0]) if return_lse else (0,)
        return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty(rows, dtype=torch.float32)


def _attention_backward(
    d_out, q, k, v, out, lse, causal, scale, layout, deterministic, window_size=(-1, -1), softcap=0.0
):
    """The backward op's implementation: q, k, v and dO in the output's memory order (the
    backward's kernels read every tensor in place, in one order; autograd may hand over any
    strides), the gradients and the workspace allocated by torch, then the launch. A head dim
    without kernels of its own (``_kernel_head_dim``), or v's below q's, goes through
    ``_padded_backward``; v's above q's goes on to the native checks, which refuse it."""
    head_dim, head_dim_v = q.shape[-1], v.shape[-1]
    tiles = _kernel_head_dim(head_dim) or head_dim  # no kernels at all: the native checks refuse it
    if head_dim_v <= head_dim and (tiles != head_dim or head_dim_v != head_dim):
        return _padded_backward(
            tiles, d_out, q, k, v, out, lse, causal, scale, layout, deterministic, window_size, softcap
        )
    q, k, v = (_in_order_of(t, out) for t in (q, k, v))
    if d_out.stride() != out.stride():
        d_out = _empty_like(out).copy_(d_out)
    d_q, d_k, d_v = _empty_like(q), _empty_like(k), _empty_like(v)
    described = [
        _describe(name, t)
        for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("d_out", d_out), ("lse", lse),
                        ("d_q", d_q), ("d_k", d_k), ("d_v", d_v))
    ]
    options = (layout, bool(causal), None if scale is None else float(scale), bool(deterministic))
    masking = (tuple(window_size), float(softcap))
    workspace_bytes = _flashrs.check_backward(*described, *options, *masking)
    workspace = _empty_workspace(q, workspace_bytes)
    _flashrs.backward(*described, (int(workspace.data_ptr()), workspace_bytes), *options, _current_stream(q), *masking)
    return d_q, d_k, d_v


# The head dims the kernels are compiled for (src/variants.rs).
_COMPILED_HEAD_DIMS = (64, 128, 256)


def _kernel_head_dim(d):
    """The compiled head dim whose kernels run head dim ``d``: ``d`` itself, or for another
    multiple of 8 up to 256 the next compiled one up (the Rust library's ``kernel_head_dim``);
    ``None`` for any other ``d``."""
    if d in _COMPILED_HEAD_DIMS:
        return d
    if d <= 0 or d % 8 or d > 256:
        return None
    return min(c for c in _COMPILED_HEAD_DIMS if c > d)


def _padded_backward(tiles, d_out, q, k, v, out, lse, causal, scale, layout, deterministic, window_size, softcap):
    """The backward on copies of q, k, v, the output and dO with zero columns up to ``tiles``, one
    pass: the backward's kernels take one compiled head dim for all of them (a padded head dim's
    forward ran on the copy engine's zeros; v's may be below q's). The zeros change no score, no
    ``rowsum(dO * O)`` and no gradient of the real columns; the scale is the real head dim's. The
    real columns (dq, dk: q's head dim; dv: v's) come back in the fake kernel's memory order."""
    import torch.nn.functional as F

    head_dim, head_dim_v = q.shape[-1], v.shape[-1]
    if scale is None and tiles != head_dim:
        scale = head_dim ** -0.5

    def pad(t, width):
        return (F.pad(t, (0, tiles - width)) if tiles != width else t).contiguous()

    grads = _attention_backward(
        pad(d_out, head_dim_v), pad(q, head_dim), pad(k, head_dim), pad(v, head_dim_v), pad(out, head_dim_v), lse,
        causal, scale, layout, deterministic, window_size, softcap,
    )
    results = []
    for grad, like, width in zip(grads, (q, k, v), (head_dim, head_dim, head_dim_v)):
        result = _empty_like(_in_order_of(like, out))
        result.copy_(grad[..., :width])
        results.append(result)
    return tuple(results)


def _attention(q, k, v, causal, scale, return_lse, layout, window_size=(-1, -1), softcap=0.0, sinks=None):
    """``attention``, also returning the name of the kernel the library picked. One native call
    checks everything and launches (the outputs are allocated first: a refused call frees them
    at once); when the GPU does not read q, k and v as they are strided, it says so and they are
    copied into one order for a second call. ``window_size`` is a pair of ints, ``softcap`` a
    float, ``sinks`` None or as ``_sinks`` returns them (``attention`` reads them)."""
    if scale is not None:
        scale = float(scale)
    causal = bool(causal)
    sinks = _aligned_sinks(sinks)
    out = _empty_out(q, v)
    lse = _empty_lse(q, _lse_rows(q.shape, layout)) if return_lse and len(q.shape) == 4 else None
    stream = _current_stream(q)
    out_described = _describe("out", out)
    lse_described = None if lse is None else _describe("lse", lse)
    sinks_described = None if sinks is None else _describe("sinks", sinks)
    try:
        kernel = _flashrs.attention(
            _describe("q", q), _describe("k", k), _describe("v", v), out_described, lse_described, layout,
            causal, scale, stream, window_size, softcap, sinks_described,
        )
    except ValueError:
        # The native checks refuse empty dims; SDPA answers them (looked at only here, so that
        # calls with work pay nothing for it).
        empty = _without_work(q, k, v, causal, scale, return_lse, layout, window_size, softcap, sinks)
        if empty is None:
            raise
        return empty
    if kernel is None:
        # Strides this GPU's kernels do not read in place: copies contiguous in the dims' order,
        # which the output (contiguous in that order unless q was contiguous) already is in.
        q, k, v = (_contiguous(t) for t in (q, k, v))
        if out.is_contiguous() != q.is_contiguous():
            out = _empty_out(q, v)
            out_described = _describe("out", out)
        kernel = _flashrs.attention(
            _describe("q", q), _describe("k", k), _describe("v", v), out_described, lse_described, layout,
            causal, scale, stream, window_size, softcap, sinks_described,
        )
    return out, lse, kernel


def _without_work(q, k, v, causal, scale, return_lse, layout, window_size=(-1, -1), softcap=0.0, sinks=None):
    """What SDPA gives for a call with nothing to compute, or None: an empty output when a dim
    of q (B, H or S_q) is 0, zeros (and a ``-inf`` log-sum-exp, or the head's sink) when there is
    no key (S_k = 0). Every other check runs first, on stand-ins of the same dims with each 0 made
    1."""
    shapes = [tuple(getattr(t, "shape", (1,))) for t in (q, k, v)]
    if all(0 not in shape for shape in shapes):
        return None
    stand_ins = (_stand_in(name, t) for name, t in (("q", q), ("k", k), ("v", v)))
    _flashrs.check(*stand_ins, layout, causal, scale, window_size, softcap)
    rows = _lse_rows(q.shape, layout)
    out = _zeros_like(q) if v.shape[-1] == q.shape[-1] else _empty_out(q, v).zero_()
    lse = _full_lse(q, rows, float("-inf")) if return_lse else None
    if lse is not None and sinks is not None and lse.numel() > 0:
        if sinks.shape[0] != rows[1]:
            raise ValueError(f"sinks has {sinks.shape[0]} logits for {rows[1]} query heads: one per query head")
        lse = sinks.view(1, -1, 1).expand(rows).contiguous()
    return out, lse, None


def _stand_in(name, t):
    """``_describe`` of a tensor like ``t`` with each dim of size 0 made 1, contiguous at a
    16-byte-aligned address: what the checks see of an empty tensor."""
    ptr, shape, _, dtype, kind, index = _describe(name, t)
    shape = [max(int(n), 1) for n in shape]
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return (256, shape, strides, dtype, kind, index)


_DTYPE_NAMES = {}


def _describe(name, t):
    """What the native module needs of a tensor, as plain values: its address, shape, strides,
    dtype's name, device type and index. (Read with the cheapest of torch's accessors: this runs
    three to five times per call.)"""
    try:
        dtype = t.dtype
        dtype_name = _DTYPE_NAMES.get(dtype)
        if dtype_name is None:
            dtype_name = _DTYPE_NAMES.setdefault(dtype, str(dtype))
        if t.is_cuda:
            return (t.data_ptr(), t.shape, t.stride(), dtype_name, "cuda", t.get_device())
        device = t.device
        return (t.data_ptr(), t.shape, t.stride(), dtype_name, str(device.type), device.index)
    except AttributeError:
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}") from None


# Allocation and the stream are torch's; they are module functions so that tests without torch
# can stand in for them.


def _empty_like(q):
    """An output with q's dims, contiguous: in q's memory order when q is contiguous in either
    order (``empty_like`` keeps a dense tensor's strides), else in the order of its dims."""
    import torch

    if q.dim() != 4 or q.is_contiguous() or q.transpose(1, 2).is_contiguous():
        return torch.empty_like(q, memory_format=torch.preserve_format)
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


def _empty_out(q, v):
    """The output of attention on q and v: q's dims with v's head dim (DeepSeek's MLA gives v a
    smaller one), contiguous, in q's memory order when q is contiguous in either order (as
    ``_empty_like``), else in the order of its dims."""
    if v.shape[-1] == q.shape[-1] or len(q.shape) != 4:
        return _empty_like(q)
    import torch

    b, x, y, _ = q.shape
    dv = v.shape[-1]
    if not q.is_contiguous() and q.transpose(1, 2).is_contiguous():
        return torch.empty((b, y, x, dv), dtype=q.dtype, device=q.device).transpose(1, 2)
    return torch.empty((b, x, y, dv), dtype=q.dtype, device=q.device)


def _contiguous(t):
    """``t`` contiguous in the order of its dims (itself when it already is)."""
    return t.contiguous()


def _in_order_of(t, like):
    """``t`` contiguous in the memory order of ``like`` (an output of ``_empty_like``: contiguous,
    or a transpose of S and H of a contiguous tensor); itself when it already is."""
    if like.is_contiguous():
        return t if t.is_contiguous() else t.contiguous()
    swapped = t.transpose(1, 2)
    return t if swapped.is_contiguous() else swapped.contiguous().transpose(1, 2)


def _zeros_like(q):
    import torch

    return torch.zeros_like(q)


def _full_lse(q, rows, value):
    import torch

    return torch.full(rows, value, dtype=torch.float32, device=q.device)


def _empty_workspace(q, nbytes):
    import torch

    return torch.empty(max(nbytes, 16), dtype=torch.uint8, device=q.device)


def _empty_lse(q, rows):
    import torch

    return torch.empty(rows, dtype=torch.float32, device=q.device)


def _current_stream(q):
    device = q.get_device()
    if device < 0:
        return 0  # not on a GPU: refused by the native checks before any launch
    if _RAW_STREAM is not None:
        return _RAW_STREAM(device)
    import torch

    return torch.cuda.current_stream(q.device).cuda_stream


# The raw handle straight from torch's C++ side (what Triton reads): a fraction of the cost of
# building a torch.cuda.Stream object per call.
_RAW_STREAM = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None) if torch is not None else None
