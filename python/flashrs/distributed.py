"""Context parallelism: attention over a sequence split across the GPUs of a process group.

``ring_attention`` (ring attention): each rank holds its local part of q, k and v; the keys and
values travel once around the ring of ranks (``isend``/``irecv``), each rank running flashrs'
kernels on its queries against the chunk it holds while the next chunk is already on its way,
and merging the partial outputs by their log-sum-exps in float32. Its backward pass sends the
keys and values around again, with float32 accumulators of their gradients travelling behind
them, so that each rank ends with the gradients of its own chunks. Under a causal mask the
sequence must be split in the zigzag order (``zigzag_split``): cut into ``2R`` chunks, rank ``r``
holding chunks ``r`` and ``2R - 1 - r``, which gives every rank the same work at every step.

``ulysses_attention`` (DeepSpeed-Ulysses' scheme): an all-to-all trades the sequence split for a
split of the heads, each rank runs whole-sequence attention on its heads, and a second all-to-all
trades back. It needs the query and key/value heads to divide by the group's size.

``ring_attention_simulated`` and ``ulysses_attention_simulated`` run the same schedules for every
rank of a world in one process on one GPU, with local copies in place of NCCL: what the tests
check (python/tests/test_ring_gpu.py). docs/distributed.md describes the plan and how to run the
tests and python/bench/ring_bench.py.

The module imports without torch (the bookkeeping in ``flashrs._ring_plan`` is plain Python);
its attention functions need torch, and the distributed ones an initialised process group with
the NCCL backend.
"""

from . import _ring_plan as plan
from ._ring_plan import Call, kv_source, step_calls, zigzag_chunks, zigzag_order, zigzag_owner, zigzag_positions

try:
    import torch
    import torch.distributed as dist
except ImportError:  # the bookkeeping still imports (and is tested) without torch
    torch = None
    dist = None

__all__ = [
    "ring_attention",
    "ring_attention_simulated",
    "ulysses_attention",
    "ulysses_attention_simulated",
    "zigzag_split",
    "zigzag_gather",
    "zigzag_permute",
    "zigzag_unpermute",
    "zigzag_all_gather",
    "zigzag_chunks",
    "zigzag_order",
    "zigzag_owner",
    "zigzag_positions",
    "kv_source",
    "step_calls",
    "Call",
]

# The sequence dim of q, k and v in each layout (the log-sum-exp's is always 2: [B, H, S]).
_SEQ_DIM = {"bshd": 1, "bhsd": 2}


def ring_attention(
    q, k, v, group=None, causal=False, scale=None, layout="bshd", deterministic=False, return_lse=False
):
    """Attention over the whole sequence, split along the sequence dim across the ranks of
    ``group`` (default: the whole world), by passing the keys and values around the ring.

    Each rank passes its local q, k and v (``[B, S_local, H, D]``, or ``[B, H, S_local, D]`` with
    ``layout="bhsd"``; k and v may have fewer heads dividing q's, as ``flashrs.attention`` takes
    them) and gets its local rows of the output, in q's dtype. Every rank must call it with the
    same shapes and options (it is a collective: the ring exchanges buffers of those shapes).
    ``causal`` masks key ``j`` from query ``i`` unless ``j <= i`` in the whole sequence's
    positions, and needs each rank's local sequence to be its two zigzag chunks
    (``zigzag_split(x, rank, world, seq_dim)``; so the same local length for q and k, even);
    without it any split works, the result being each rank's rows of the output. ``scale``
    defaults to ``1/sqrt(D)``; ``deterministic`` is ``flashrs.attention``'s (the ring adds its
    parts in a fixed order). With ``return_lse`` it also returns the local rows' log-sum-exp over
    the whole sequence, ``[B, H, S_local]`` float32 (not differentiated).

    Differentiable: the backward pass runs the ring again and returns each rank the gradients of
    its local q, k and v. The exchanges go through ``torch.distributed.batch_isend_irecv`` (NCCL:
    call ``torch.cuda.set_device`` first), each posted before the kernels it overlaps.
    """
    _need_torch("ring_attention")
    layout = _check_ring_inputs(q, k, v, layout, causal)
    ring = _NcclRing(group)
    out, lse = _RingAttention.apply(q, k, v, ring, bool(causal), _scale(scale), layout, bool(deterministic))
    return (out, lse) if return_lse else out


def ring_attention_simulated(
    q, k, v, world, causal=False, scale=None, layout="bshd", deterministic=False, return_lse=False
):
    """``ring_attention`` of a world of ``world`` ranks run in this process: q, k and v are whole
    sequences (in their natural order, the sequence's length a multiple of ``2 * world``); each
    is split in the zigzag order, every rank's schedule runs (forward, and backward under
    autograd) with local copies in place of NCCL's exchanges, and the ranks' outputs (and
    gradients) are put back in the natural order. The kernels, the plan of each step and the
    merges are ``ring_attention``'s; only the exchange differs. Returns the output, with
    ``return_lse`` also the log-sum-exp ``[B, H, S]`` float32."""
    _need_torch("ring_attention_simulated")
    layout = _check_ring_inputs(q, k, v, layout, causal)
    world = int(world)
    seq = _SEQ_DIM[layout]
    for t in (q, k):
        plan.chunk_len(t.shape[seq], world)  # a ValueError unless it cuts into 2 * world chunks
    out, lse = _SimulatedRing.apply(q, k, v, world, bool(causal), _scale(scale), layout, bool(deterministic))
    return (out, lse) if return_lse else out


def ulysses_attention(q, k, v, group=None, causal=False, scale=None, layout="bshd", deterministic=False):
    """Attention over the whole sequence, split along the sequence dim across the ranks of
    ``group``, by all-to-alls over the heads (DeepSpeed-Ulysses' scheme): each rank's local q, k
    and v (``[B, S_local, H, D]``, or ``[B, H, S_local, D]`` with ``layout="bhsd"``) are traded
    for the whole sequence of ``H / R`` of the heads, attended with ``flashrs.attention``, and
    the output traded back to each rank's rows of all the heads. The split is contiguous: rank
    ``r`` holds positions ``r * S_local`` to ``(r + 1) * S_local`` (the order the all-to-all puts
    them back in; ``causal`` is aligned bottom-right on the whole sequence, as
    ``flashrs.attention`` aligns it). Needs q's and k's head counts to divide by the group's size.
    Differentiable: the backward of each all-to-all is the reverse all-to-all."""
    _need_torch("ulysses_attention")
    world = dist.get_world_size(group)
    layout = _check_ulysses_inputs(q, k, v, layout, world)
    (out,) = _ulysses([q], [k], [v], _NcclAllToAll(group, world), bool(causal), _scale(scale), layout, deterministic)
    return out


def ulysses_attention_simulated(q, k, v, world, causal=False, scale=None, layout="bshd", deterministic=False):
    """``ulysses_attention`` of a world of ``world`` ranks run in this process: q, k and v are
    whole sequences, split contiguously, traded by a local all-to-all (the same packing as
    NCCL's, the same autograd), and the ranks' outputs put back together."""
    _need_torch("ulysses_attention_simulated")
    world = int(world)
    layout = _check_ulysses_inputs(q, k, v, layout, world)
    seq = _SEQ_DIM[layout]
    for name, t in (("q", q), ("k", k)):
        if t.shape[seq] % world:
            raise ValueError(f"{name}'s sequence of {t.shape[seq]} does not split into {world} equal parts")
    parts = [list(t.chunk(world, dim=seq)) for t in (q, k, v)]
    outs = _ulysses(*parts, _LocalAllToAll(world), bool(causal), _scale(scale), layout, deterministic)
    return torch.cat(outs, dim=seq)


# The zigzag order on tensors.


def zigzag_split(x, rank, world, seq_dim=1):
    """``rank``'s local part of ``x`` (a whole sequence along ``seq_dim``, its length a multiple
    of ``2 * world``) in the zigzag order: chunks ``rank`` and ``2 * world - 1 - rank`` of the
    ``2 * world``, one after the other (a new tensor)."""
    _need_torch("zigzag_split")
    size = plan.chunk_len(x.shape[seq_dim], world)
    first, second = plan.zigzag_chunks(rank, world)
    return torch.cat((x.narrow(seq_dim, first * size, size), x.narrow(seq_dim, second * size, size)), dim=seq_dim)


def zigzag_gather(parts, seq_dim=1):
    """The whole sequence in its natural order from every rank's local part (a list in rank
    order, each two zigzag chunks): the inverse of ``zigzag_split`` over all ranks."""
    _need_torch("zigzag_gather")
    world = len(parts)
    chunks = [None] * (2 * world)
    for rank, part in enumerate(parts):
        length = part.shape[seq_dim]
        if length % 2:
            raise ValueError(f"rank {rank}'s part has {length} positions: two zigzag chunks are an even count")
        first, second = plan.zigzag_chunks(rank, world)
        chunks[first] = part.narrow(seq_dim, 0, length // 2)
        chunks[second] = part.narrow(seq_dim, length // 2, length // 2)
    return torch.cat(chunks, dim=seq_dim)


def zigzag_permute(x, world, seq_dim=1):
    """``x`` (natural order) with its sequence in the zigzag order: rank 0's part, then rank
    1's, and so on (``zigzag_order``)."""
    return torch.cat([zigzag_split(x, rank, world, seq_dim) for rank in range(world)], dim=seq_dim)


def zigzag_unpermute(x, world, seq_dim=1):
    """The inverse of ``zigzag_permute``: ``x``'s sequence, the ranks' parts one after the other,
    back in its natural order."""
    _need_torch("zigzag_unpermute")
    plan.chunk_len(x.shape[seq_dim], world)
    return zigzag_gather(list(x.chunk(world, dim=seq_dim)), seq_dim)


def zigzag_all_gather(x, group=None, seq_dim=1):
    """Every rank's local part ``x`` (two zigzag chunks, one shape on every rank) gathered and put
    back in the natural order, on every rank (``all_gather``; not differentiated)."""
    _need_torch("zigzag_all_gather")
    world = dist.get_world_size(group)
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x, group=group)
    return zigzag_gather(parts, seq_dim)


# The exchanges. A ring's ``send_recv(tensors)`` sends the tensors to the next rank and receives
# as many of the same shapes from the previous one, returning a handle at once; the schedules
# below ``yield`` the handle where they need what it received, and a driver resumes them with it.


class _ReadyHandle:
    """A handle whose tensors are already there."""

    def __init__(self, tensors):
        self.tensors = tensors

    def ready(self):
        return True

    def wait(self):
        return self.tensors


class _NcclHandle:
    """The requests of one ``batch_isend_irecv``: ``wait`` makes the current stream wait for them
    (and keeps the sent tensors alive until then)."""

    def __init__(self, requests, sent, received):
        self.requests, self.sent, self.received = requests, sent, received

    def ready(self):
        return True  # wait() queues the wait on the stream; it never blocks the host for NCCL

    def wait(self):
        for request in self.requests:
            request.wait()
        self.requests, self.sent = (), None
        return self.received


class _NcclRing:
    """The ring of ``group``'s ranks over NCCL: sends to rank ``r + 1``, receives from ``r - 1``
    (as ranks of the group), each exchange one ``batch_isend_irecv`` posted on the current
    stream's work so far."""

    def __init__(self, group):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        if self.rank < 0:
            raise ValueError("ring_attention was called on a rank outside the group")
        # P2POp takes the peers' ranks in the default group.
        after, before = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        if group is None:
            self.next, self.prev = after, before
        else:
            self.next, self.prev = dist.get_global_rank(group, after), dist.get_global_rank(group, before)

    def send_recv(self, tensors):
        tensors = tuple(t.contiguous() for t in tensors)
        if self.world == 1:
            return _ReadyHandle(tensors)
        received = tuple(torch.empty_like(t) for t in tensors)
        ops = [dist.P2POp(dist.isend, t, self.next, self.group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group) for t in received]
        return _NcclHandle(dist.batch_isend_irecv(ops), tensors, received)


class _LocalWorld:
    """The messages of a world of ranks run in one process: ``inboxes[r]`` lists what rank
    ``r - 1`` sent rank ``r``, in the order it was sent (NCCL's order between two ranks)."""

    def __init__(self, world):
        self.world = world
        self.inboxes = [[] for _ in range(world)]


class _LocalRing:
    """Rank ``rank``'s ring in a ``_LocalWorld``: a send copies the tensors into the next rank's
    inbox; the handle of a rank's n-th exchange is the n-th message from the previous rank (which
    ran the same schedule, so it is the matching one)."""

    def __init__(self, shared, rank):
        self.shared, self.rank, self.world = shared, rank, shared.world
        self.posted = 0

    def send_recv(self, tensors):
        sent = tuple(t.clone() for t in tensors)
        self.shared.inboxes[(self.rank + 1) % self.world].append(sent)
        handle = _LocalHandle(self.shared.inboxes[self.rank], self.posted, sent, self.rank)
        self.posted += 1
        return handle


class _LocalHandle:
    def __init__(self, inbox, index, sent, rank):
        self.inbox, self.index, self.rank = inbox, index, rank
        self.expected = [(tuple(t.shape), t.dtype) for t in sent]

    def ready(self):
        return len(self.inbox) > self.index

    def wait(self):
        if not self.ready():
            raise RuntimeError(f"rank {self.rank} waits for message {self.index}, which the previous rank never sent")
        received = self.inbox[self.index]
        self.inbox[self.index] = None  # each message is received once; let it go
        got = [(tuple(t.shape), t.dtype) for t in received]
        if got != self.expected:
            # NCCL would not say: the schedules went out of step.
            raise RuntimeError(f"rank {self.rank} received {got} where it sent {self.expected}")
        return received


class _LoopbackRing:
    """A ring whose exchanges hand back what they were given, at no cost: the ring's kernels and
    merges for ``rank`` of ``world`` without any communication (a bench's compute-only time; the
    results are not attention's)."""

    def __init__(self, rank, world):
        self.rank, self.world = rank, world

    def send_recv(self, tensors):
        return _ReadyHandle(tuple(tensors))


def _drive(schedule):
    """Runs one rank's schedule (a generator yielding handles) to its end, resuming it with what
    each handle received; returns what it returns."""
    value = None
    while True:
        try:
            handle = schedule.send(value)
        except StopIteration as stop:
            return stop.value
        value = handle.wait()


def _drive_together(schedules):
    """Runs every rank's schedule of a local world in one process: each runs until it waits for a
    message not sent yet, then the next rank runs; returns their results in rank order. A round in
    which no rank moves is a deadlock (the schedules disagree), raised as ``RuntimeError``."""
    count = len(schedules)
    results, done = [None] * count, [False] * count
    waiting = [None] * count
    while not all(done):
        moved = False
        for rank, schedule in enumerate(schedules):
            if done[rank] or (waiting[rank] is not None and not waiting[rank].ready()):
                continue
            moved = True
            value = None if waiting[rank] is None else waiting[rank].wait()
            waiting[rank] = None
            while True:
                try:
                    handle = schedule.send(value)
                except StopIteration as stop:
                    results[rank], done[rank] = stop.value, True
                    break
                if not handle.ready():
                    waiting[rank] = handle
                    break
                value = handle.wait()
        if not moved:
            stuck = [rank for rank in range(count) if not done[rank]]
            raise RuntimeError(f"the simulated ranks {stuck} all wait for messages never sent")
    return results


# The schedules of one rank (generators: see _drive).


def _ring_forward(q, k, v, ring, causal, scale, layout):
    """One rank's forward pass: ``(out, lse)``, the output in q's dtype and the float32
    log-sum-exp of its local rows over the whole sequence. At each step the keys and values held
    go on to the next rank (posted before this step's kernels, so the copy overlaps them), the
    step's calls (``plan.step_calls``) run on what is held, and each partial output is merged
    into float32 accumulators."""
    from . import attention

    seq = _SEQ_DIM[layout]
    half = q.shape[seq] // 2
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full(_lse_shape(q, layout), float("-inf"), dtype=torch.float32, device=q.device)
    kv = (k, v)
    for step in range(ring.world):
        incoming = ring.send_recv(kv) if step + 1 < ring.world else None
        for call in plan.step_calls(ring.rank, step, ring.world, causal):
            rows, keys = _span(call.q_lo, call.q_hi, half), _span(call.k_lo, call.k_hi, half)
            part, part_lse = attention(
                _narrow(q, seq, rows), _narrow(kv[0], seq, keys), _narrow(kv[1], seq, keys),
                causal=call.causal, scale=scale, return_lse=True, layout=layout,
            )
            _merge_into(_narrow(out, seq, rows), _narrow(lse, 2, rows), part, part_lse, layout)
        if incoming is not None:
            kv = yield incoming
    return out.to(q.dtype), lse


def _ring_backward(d_out, q, k, v, out, lse, ring, causal, scale, layout, deterministic):
    """One rank's backward pass: ``(dq, dk, dv)`` of its local q, k and v, in their dtypes.

    The keys and values go around the ring again as in the forward. Each step's calls run the
    backward kernel on the held chunk with the whole sequence's output and log-sum-exp (the
    forward's, so the softmax of each chunk is the global one): dq's part is added into a float32
    dq here; dk's and dv's parts into float32 accumulators of the held chunk that travel one rank
    behind its keys and values. A rank sends the accumulators on after adding its parts, and
    receives the next chunk's only once its own step's kernels are queued, so that exchange
    overlaps them too. After the last step the accumulators go one rank further, which is the
    chunk's owner: each rank receives the gradients of its own keys and values, summed over every
    rank in ring order."""
    seq = _SEQ_DIM[layout]
    half = q.shape[seq] // 2
    d_out = d_out.contiguous()
    query_sides = {}  # (rows) -> (d_out, q, out, lse) of those rows, contiguous, made once

    def query_side(rows):
        if rows not in query_sides:
            query_sides[rows] = tuple(
                _narrow(t, dim, rows).contiguous() for t, dim in ((d_out, seq), (q, seq), (out, seq), (lse, 2))
            )
        return query_sides[rows]

    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = (k, v)
    sent = None  # the handle of the last accumulators sent on
    for step in range(ring.world):
        incoming = ring.send_recv(kv) if step + 1 < ring.world else None
        parts = []
        for call in plan.step_calls(ring.rank, step, ring.world, causal):
            rows, keys = _span(call.q_lo, call.q_hi, half), _span(call.k_lo, call.k_hi, half)
            d_o, q_rows, o_rows, lse_rows = query_side(rows)
            dq_part, dk_part, dv_part = torch.ops.flashrs.attention_backward(
                d_o, q_rows, _narrow(kv[0], seq, keys), _narrow(kv[1], seq, keys), o_rows, lse_rows,
                call.causal, scale, layout, deterministic, -1, -1, 0.0,
            )
            _narrow(dq, seq, rows).add_(dq_part)
            parts.append((keys, dk_part, dv_part))
        if sent is None:  # step 0: the rank's own chunk, which no one has seen yet
            dk = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
            dv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
        else:  # the held chunk's accumulators, from the rank that held it the step before
            dk, dv = yield sent
        for keys, dk_part, dv_part in parts:
            _narrow(dk, seq, keys).add_(dk_part)
            _narrow(dv, seq, keys).add_(dv_part)
        sent = ring.send_recv((dk, dv))
        if incoming is not None:
            kv = yield incoming
    dk, dv = yield sent  # this rank's own chunk's, complete
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _merge_into(out, lse, part, part_lse, layout):
    """Merges attention over more keys into float32 accumulators, in place: ``out`` (float32,
    the rows' dims in ``layout``) and ``lse`` (``[B, H, S]`` float32) become the attention over
    their keys and ``part``'s (any float dtype) together. ``lse = log(e^lse + e^part_lse)`` and
    ``out = e^(lse_old - lse) out + e^(part_lse - lse) part``, relative to the larger of the two
    so nothing overflows; a row that no side saw (``-inf`` twice) stays zeros and ``-inf``."""
    top = torch.maximum(lse, part_lse)
    top = top.masked_fill(torch.isinf(top), 0.0)
    old, new = torch.exp(lse - top), torch.exp(part_lse - top)
    total = old + new
    inverse = torch.where(total > 0, total.reciprocal(), torch.zeros_like(total))
    out.mul_(_per_row(old * inverse, layout)).add_(part.float() * _per_row(new * inverse, layout))
    lse.copy_(top + torch.log(total))


def _per_row(weights, layout):
    """``[B, H, S]`` weights as a view that broadcasts over rows of ``layout``'s dims."""
    return (weights.transpose(1, 2) if layout == "bshd" else weights).unsqueeze(-1)


def _span(lo, hi, half):
    """The positions of halves ``lo`` to ``hi``: ``(start, length)``, or None for the whole."""
    return None if (lo, hi) == (0, 2) else (lo * half, (hi - lo) * half)


def _narrow(t, dim, span):
    return t if span is None else t.narrow(dim, *span)


def _lse_shape(q, layout):
    b, s, h = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bshd" else (q.shape[0], q.shape[2], q.shape[1])
    return (b, h, s)


if torch is not None:

    class _RingAttention(torch.autograd.Function):
        """``ring_attention`` of one rank over a ring (``_NcclRing``, or ``_LoopbackRing`` for a
        bench's compute-only time)."""

        @staticmethod
        def forward(ctx, q, k, v, ring, causal, scale, layout, deterministic):
            out, lse = _drive(_ring_forward(q, k, v, ring, causal, scale, layout))
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.ring, ctx.options = ring, (causal, scale, layout, deterministic)
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, d_out, _d_lse):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = _drive(_ring_backward(d_out, q, k, v, out, lse, ctx.ring, *ctx.options))
            return dq, dk, dv, None, None, None, None, None

    class _SimulatedRing(torch.autograd.Function):
        """``ring_attention_simulated``: every rank's schedule of a local world, forward and
        backward, on whole-sequence tensors split and gathered in the zigzag order."""

        @staticmethod
        def forward(ctx, q, k, v, world, causal, scale, layout, deterministic):
            seq = _SEQ_DIM[layout]
            shared = _LocalWorld(world)
            schedules = [
                _ring_forward(*(zigzag_split(t, rank, world, seq) for t in (q, k, v)), _LocalRing(shared, rank),
                              causal, scale, layout)
                for rank in range(world)
            ]
            results = _drive_together(schedules)
            out = zigzag_gather([o for o, _ in results], seq)
            lse = zigzag_gather([l for _, l in results], 2)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.options = (world, causal, scale, layout, deterministic)
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, d_out, _d_lse):
            q, k, v, out, lse = ctx.saved_tensors
            world, causal, scale, layout, deterministic = ctx.options
            seq = _SEQ_DIM[layout]
            shared = _LocalWorld(world)
            schedules = []
            for rank in range(world):
                local = [zigzag_split(t, rank, world, seq) for t in (d_out, q, k, v, out)]
                local.append(zigzag_split(lse, rank, world, 2))
                schedules.append(
                    _ring_backward(*local, _LocalRing(shared, rank), causal, scale, layout, deterministic)
                )
            grads = _drive_together(schedules)
            return (*(zigzag_gather([g[i] for g in grads], seq) for i in range(3)), None, None, None, None, None)

    class _AllToAll(torch.autograd.Function):
        """Ulysses' all-to-all of every local rank's tensor (one for NCCL, all of a world when
        simulated): ``to_heads`` trades a sequence split ``[B, S/R, H, D]`` for a head split
        ``[B, S, H/R, D]``, else the reverse. Each is the other's inverse, and (a permutation of
        the values across ranks) its adjoint: the backward runs the other direction."""

        @staticmethod
        def forward(ctx, exchange, to_heads, *xs):
            ctx.exchange, ctx.to_heads = exchange, to_heads
            return tuple(_all_to_all(exchange, to_heads, xs))

        @staticmethod
        def backward(ctx, *grads):
            return (None, None, *_all_to_all(ctx.exchange, not ctx.to_heads, grads))


class _NcclAllToAll:
    """Ulysses' exchange over NCCL: this rank's packed tensor, ``[R, ...]``, part ``j`` to rank
    ``j``; what rank ``j`` sent lands in part ``j``."""

    def __init__(self, group, world):
        self.group, self.world = group, world

    def __call__(self, packed):
        (x,) = packed
        y = torch.empty_like(x)
        dist.all_to_all_single(y, x, group=self.group)
        return [y]


class _LocalAllToAll:
    """The same exchange for every rank of a world in one process."""

    def __init__(self, world):
        self.world = world

    def __call__(self, packed):
        if len(packed) != self.world:
            raise RuntimeError(f"a local all-to-all of {self.world} ranks got {len(packed)} tensors")
        return [torch.stack([packed[j][rank] for j in range(self.world)]) for rank in range(self.world)]


def _all_to_all(exchange, to_heads, xs):
    """Each of ``xs`` (bshd) packed with its parts for each rank along a new first dim, exchanged,
    and unpacked: the sequence parts of each rank one after the other (``to_heads``), or the
    head groups of each rank one after the other."""
    world = exchange.world
    if to_heads:
        # [B, s, H, D] -> [R (head group: the rank it goes to), B, s, H/R, D]
        packed = [_split_dim(x, 2, world).permute(2, 0, 1, 3, 4).contiguous() for x in xs]
        # [R (the rank it came from: its sequence part), B, s, h, D] -> [B, R * s, h, D]
        return [_merge_dims(y.permute(1, 0, 2, 3, 4), 1) for y in exchange(packed)]
    # [B, S, h, D] -> [R (sequence part: the rank it goes to), B, S/R, h, D]
    packed = [_split_dim(x, 1, world).permute(1, 0, 2, 3, 4).contiguous() for x in xs]
    # [R (the rank it came from: its head group), B, s, h, D] -> [B, s, R * h, D]
    return [_merge_dims(y.permute(1, 2, 0, 3, 4), 2) for y in exchange(packed)]


def _split_dim(x, dim, parts):
    """``x`` with dim ``dim`` cut into ``(parts, size / parts)``."""
    shape = list(x.shape)
    shape[dim:dim + 1] = [parts, shape[dim] // parts]
    return x.reshape(shape)


def _merge_dims(x, dim):
    """``x`` with dims ``dim`` and ``dim + 1`` made one (a copy when they are not adjacent in
    memory)."""
    shape = list(x.shape)
    shape[dim:dim + 2] = [shape[dim] * shape[dim + 1]]
    return x.reshape(shape)


def _ulysses(qs, ks, vs, exchange, causal, scale, layout, deterministic):
    """Ulysses' attention of every local rank's q, k and v (lists, one per rank here): the
    outputs, a list, in the callers' layout."""
    from . import attention

    if layout == "bhsd":
        qs, ks, vs = ([t.transpose(1, 2) for t in ts] for ts in (qs, ks, vs))
    qs, ks, vs = (_AllToAll.apply(exchange, True, *ts) for ts in (qs, ks, vs))
    outs = [
        attention(q, k, v, causal=causal, scale=scale, layout="bshd", deterministic=deterministic)
        for q, k, v in zip(qs, ks, vs)
    ]
    outs = _AllToAll.apply(exchange, False, *outs)
    return [o.transpose(1, 2) for o in outs] if layout == "bhsd" else list(outs)


# Checks.


def _need_torch(name):
    if torch is None:
        raise RuntimeError(f"flashrs.distributed.{name} needs torch")


def _scale(scale):
    return None if scale is None else float(scale)


def _check_layout_and_dims(q, k, v, layout):
    layout = str(layout)
    if layout not in _SEQ_DIM:
        raise ValueError(f"layout must be 'bshd' or 'bhsd', got {layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-dim torch.Tensor ({layout}), got {type(t).__name__}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    return layout


def _check_ring_inputs(q, k, v, layout, causal):
    layout = _check_layout_and_dims(q, k, v, layout)
    seq = _SEQ_DIM[layout]
    if causal:
        if q.shape[seq] != k.shape[seq]:
            raise ValueError(
                f"causal ring attention needs q and k of one local length (two zigzag chunks each), got "
                f"{q.shape[seq]} and {k.shape[seq]}"
            )
        if q.shape[seq] % 2:
            raise ValueError(
                f"causal ring attention needs an even local length (two zigzag chunks), got {q.shape[seq]}"
            )
    return layout


def _check_ulysses_inputs(q, k, v, layout, world):
    layout = _check_layout_and_dims(q, k, v, layout)
    head = 2 if layout == "bshd" else 1
    for name, t in (("q", q), ("k", k)):
        if t.shape[head] % world:
            raise ValueError(
                f"ulysses attention splits the heads across the {world} ranks: {name} has {t.shape[head]} heads"
            )
    return layout
