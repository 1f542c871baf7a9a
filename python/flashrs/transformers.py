"""flashrs as an attention implementation of Hugging Face transformers.

    import flashrs.transformers
    name = flashrs.transformers.register()               # "rs_attention", in transformers' registries
    model = AutoModelForCausalLM.from_config(config, attn_implementation=name)
    # or, on a model already built: model.set_attn_implementation(name)

``register`` adds two functions under one name: the attention function (transformers'
``AttentionInterface``) and its mask function (``AttentionMaskInterface``), which hands the
attention function either nothing (no token is padding: a dense call, causal as the module says)
or the 2-D mask of real tokens, by which the attention function packs the batch's sequences
(FlashAttention's unpadding) and runs ``flashrs.varlen_attention``. That covers what a decoder
sends: causal prefill, decode steps against a growing KV cache (``generate()``), grouped-query
attention and padded batches, causal sliding-window layers (Mistral, Gemma 2 and 3, Qwen 2) and
Gemma 2's attention logit softcap, and GPT-OSS's attention sinks (``s_aux``). A mask it cannot
express (chunked attention, a bidirectional sliding window, packed sequences found from position
ids, a custom mask function) or dropout in training is a ``ValueError``, never a silently
different result.

The sliding window follows transformers' own FlashAttention integration
(``transformers.modeling_flash_attention_utils``): a module passes ``sliding_window=w`` to the
attention function, whose mask (``sliding_window_overlay``: key ``kv`` seen from query ``q`` when
``q - w < kv <= q``) is ``w`` keys, the query's own included; FlashAttention's ``window_size`` is
then ``(w - 1, w - 1)`` (the right side 0 under ``causal``), applied when the keys outnumber ``w``.
``softcap`` goes to ``flashrs.attention``'s ``softcap`` as it is (``None``: none), ``s_aux`` (a
module's sinks, one logit per query head) to its ``sinks``.
"""

# Not "flashrs": transformers reads an implementation whose name starts with "flash" as a
# FlashAttention build to import, and refuses it when that import fails.
NAME = "rs_attention"


def register(name=NAME):
    """Registers the attention and mask functions under ``name`` (``"rs_attention"``); returns it.
    A name containing "flash" is refused (transformers would look for a FlashAttention build)."""
    if "flash" in name.lower():
        raise ValueError(f"{name!r}: transformers reads names with 'flash' as FlashAttention builds; pick another")
    from transformers import AttentionInterface, AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, padding_mask)
    return name


def padding_mask(*args, attention_mask=None, kv_length=None, kv_offset=0, mask_function=None, **kwargs):
    """The mask function: ``None`` when every key is a real token, else the ``[B, kv_length]``
    bool mask of real tokens (the attention function unpads by it). transformers passes its
    arguments by keyword; the causal structure itself comes from the module (``is_causal``)."""
    _refuse_masks(mask_function, kwargs)
    if attention_mask is None:
        return None
    import torch

    mask = attention_mask.to(torch.bool)
    if mask.dim() != 2:
        raise ValueError(
            f"flashrs attention takes a 2-D padding mask, got {mask.dim()} dims: a custom 4-D mask "
            "cannot be expressed"
        )
    if kv_length is not None:
        mask = mask[:, kv_offset : kv_offset + kv_length]
        if mask.shape[1] < kv_length:
            # Cache slots past the mask's end (a static cache) hold no token yet.
            pad = mask.new_zeros(mask.shape[0], kv_length - mask.shape[1])
            mask = torch.cat([mask, pad], dim=1)
    return None if bool(mask.all()) else mask


def _refuse_masks(mask_function, kwargs):
    """Refuses the masks the kernels do not take, by what transformers says it wants: causal and
    full attention pass, and a causal sliding window (transformers 5 hands its width as
    ``local_size``, earlier versions as ``sliding_window``), which the attention function then
    applies from the module's own ``sliding_window`` argument."""
    if kwargs.get("chunk_size") is not None:
        raise ValueError("flashrs attention has no chunked-attention mask")
    if mask_function is None:
        return
    from transformers import masking_utils

    known = [getattr(masking_utils, n, None) for n in ("causal_mask_function", "bidirectional_mask_function")]
    if mask_function in known:
        return
    width = kwargs.get("local_size", kwargs.get("sliding_window"))
    if width is not None and _is_causal_window(mask_function, width):
        return
    raise ValueError(
        f"flashrs attention cannot express the mask function {getattr(mask_function, '__name__', mask_function)!r} "
        "(only causal and full attention and causal sliding windows, with padding)"
    )


def _is_causal_window(mask_function, width):
    """Whether ``mask_function`` (transformers' ``(batch, head, q_idx, kv_idx) -> bool``) is the
    causal sliding window of ``width`` keys, the query's own included (``q - width < kv <= q``),
    read off it at a few rows far enough from the start that the window fits whole. A chunked
    mask (which transformers also hands with ``local_size``), a bidirectional window or anything
    else that it cannot evaluate on index tensors is not."""
    import torch

    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        return False
    rows = torch.arange(2 * width + 8, 2 * width + 11).view(-1, 1)  # three consecutive queries
    offsets = torch.arange(-width - 4, 5).view(1, -1)  # keys around each one's window
    zero = torch.zeros((), dtype=torch.long)
    try:
        seen = torch.as_tensor(mask_function(zero, zero, rows, rows + offsets)).to("cpu", torch.bool)
        seen = seen.expand(rows.shape[0], offsets.shape[1])
    except Exception:  # a mask of tensors on another device, or not index-based
        return False
    want = (offsets > -width) & (offsets <= 0)
    return bool(torch.equal(seen, want.expand_as(seen)))


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The attention function: ``query`` ``[B, H, S_q, D]``, ``key`` and ``value``
    ``[B, H_kv, S_k, D]`` (transformers' order, grouped-query heads not repeated), the mask from
    ``padding_mask``. Returns ``([B, S_q, H, D], None)`` as transformers' own functions do; a
    padded query row's output is zeros."""
    import flashrs

    if dropout and getattr(module, "training", False):
        raise ValueError("flashrs attention has no dropout: set the model's attention_dropout to 0 or call eval()")
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else bool(causal)
    masking = dict(
        window_size=_window_size(kwargs.get("sliding_window"), key.shape[2]),
        softcap=kwargs.get("softcap"),
        sinks=kwargs.get("s_aux"),
    )
    if attention_mask is None:
        out = flashrs.attention(query, key, value, causal=causal, scale=scaling, **masking)
        return out.transpose(1, 2), None
    if attention_mask.dtype != _bool_dtype() or attention_mask.dim() != 2:
        raise ValueError(
            "flashrs attention got a mask its mask function did not make: register both with "
            "flashrs.transformers.register()"
        )
    return _unpadded(query, key, value, attention_mask, causal, scaling, masking), None


def _window_size(sliding_window, keys):
    """FlashAttention's ``window_size`` for transformers' ``sliding_window`` (``w`` keys, the
    query's own included), as transformers' FlashAttention integration computes it: ``(w - 1,
    w - 1)`` when the keys (``S_k`` of the call, padding included) outnumber ``w``, else no window
    (under ``causal`` it could cut nothing); ``(-1, -1)`` when the module passes none."""
    if sliding_window is None:
        return (-1, -1)
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1:
        raise ValueError(
            f"sliding_window must be a positive int (keys seen, the query's own included), got {sliding_window!r}"
        )
    if keys <= sliding_window:
        return (-1, -1)
    return (sliding_window - 1, sliding_window - 1)


def _bool_dtype():
    import torch

    return torch.bool


def _unpadded(query, key, value, mask_k, causal, scaling, masking):
    """Attention on the real tokens only: q, k and v packed by the mask (the new queries are the
    mask's last ``S_q`` positions, as left padding and decoding place them), one varlen call,
    the output scattered back with zeros at padded query rows. The prefix sums are read on the
    host (one synchronisation per call, as FlashAttention's unpadding takes). ``masking`` is the
    window and softcap, which apply per sequence as they would to the padded call: a sequence's
    keys are a suffix of the padded ones (left padding), its queries their last ``S_q``."""
    import torch

    import flashrs

    batch, heads, s_q, head_dim = query.shape
    heads_kv, s_k = key.shape[1], key.shape[2]
    if mask_k.shape != (batch, s_k):
        raise ValueError(f"the padding mask is {tuple(mask_k.shape)}, the keys need {(batch, s_k)}")
    mask_q = mask_k if s_q == s_k else mask_k[:, -s_q:] if s_q < s_k else None
    if mask_q is None:
        raise ValueError(f"more queries ({s_q}) than keys ({s_k}) with a padding mask")
    index_q = mask_q.reshape(-1).nonzero().squeeze(1)
    index_k = mask_k.reshape(-1).nonzero().squeeze(1)
    lens = torch.stack([mask_q.sum(1), mask_k.sum(1)]).to(torch.int32)
    sums = torch.nn.functional.pad(lens.cumsum(1, dtype=torch.int32), (1, 0)).tolist()
    q = query.transpose(1, 2).reshape(batch * s_q, heads, head_dim).index_select(0, index_q)
    k = key.transpose(1, 2).reshape(batch * s_k, heads_kv, head_dim).index_select(0, index_k)
    v = value.transpose(1, 2).reshape(batch * s_k, heads_kv, head_dim).index_select(0, index_k)
    packed = flashrs.varlen_attention(q, k, v, sums[0], sums[1], causal=causal, scale=scaling, **masking)
    out = packed.new_zeros(batch * s_q, heads, head_dim).index_copy_(0, index_q, packed)
    return out.view(batch, s_q, heads, head_dim)
