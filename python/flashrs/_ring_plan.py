"""The bookkeeping of ring attention on plain integers: where each rank's chunks of the sequence lie
in the zigzag order, which rank's keys and values a rank holds at each step of the ring, and
which kernel calls a step makes. No torch and nothing of the native module is imported here, so
the CPU tests check it against brute force over positions (python/tests/test_ring_checks.py);
``flashrs.distributed`` runs its schedules from these functions.

The zigzag order: a sequence of ``S`` positions is cut into ``2R`` chunks of ``S / (2R)``, and
rank ``r`` of ``R`` holds chunks ``r`` and ``2R - 1 - r``, one after the other: its local sequence
has two halves. Under a causal mask every rank then owns as many visible (query, key) pairs as
every other (one chunk near the start of the sequence, one near its end).

The ring: keys and values move one rank forward per step (rank ``r`` sends to ``r + 1`` and
receives from ``r - 1``), so at step ``s`` rank ``r`` holds those of rank ``(r - s) mod R``.
"""

from collections import namedtuple

FULL = "full"  # every key of the block is visible to every query of the block
DIAGONAL = "diagonal"  # the same chunk on both sides: causal within it
NONE = "none"  # no key of the block is visible to any query of the block

Call = namedtuple("Call", "q_lo q_hi k_lo k_hi causal")
Call.__doc__ = """One kernel call of a ring step: the local queries of halves ``q_lo`` to ``q_hi``
(end excluded; 0 is the first half, 2 the end of the local sequence) against the held keys of
halves ``k_lo`` to ``k_hi``, with the causal mask (aligned bottom-right, as ``flashrs.attention``
aligns it) when ``causal``. ``Call(0, 2, 0, 2, ...)`` is the whole local sequence, whatever its
length."""


def zigzag_chunks(rank, world):
    """The two chunks (of ``2 * world``) that ``rank`` holds, in the order it holds them."""
    _check_rank(rank, world)
    return rank, 2 * world - 1 - rank


def zigzag_order(world):
    """The chunks in the order of the ranks' local sequences put one after the other: rank 0's
    two, then rank 1's, and so on (``[0, 2R - 1, 1, 2R - 2, ...]``)."""
    return [chunk for rank in range(world) for chunk in zigzag_chunks(rank, world)]


def zigzag_owner(chunk, world):
    """``(rank, half)``: who holds ``chunk`` and in which half of its local sequence."""
    if not 0 <= chunk < 2 * world:
        raise ValueError(f"chunk {chunk} is not one of the 2 * {world} chunks")
    return (chunk, 0) if chunk < world else (2 * world - 1 - chunk, 1)


def chunk_len(seq_len, world):
    """The length of one chunk: ``seq_len / (2 * world)``, which must be whole."""
    if world < 1 or seq_len % (2 * world):
        raise ValueError(
            f"a sequence of {seq_len} does not cut into 2 * {world} equal chunks: the zigzag order needs "
            f"the length a multiple of {2 * max(world, 1)}"
        )
    return seq_len // (2 * world)


def zigzag_positions(rank, world, seq_len):
    """The global positions of ``rank``'s local sequence, in local order."""
    size = chunk_len(seq_len, world)
    return [chunk * size + i for chunk in zigzag_chunks(rank, world) for i in range(size)]


def kv_source(rank, step, world):
    """The rank whose keys and values ``rank`` holds at ``step`` of the ring."""
    _check_rank(rank, world)
    if not 0 <= step < world:
        raise ValueError(f"step {step} is not one of the {world} steps of the ring")
    return (rank - step) % world


def chunk_visibility(q_chunk, k_chunk):
    """How the causal mask treats queries of chunk ``q_chunk`` against keys of chunk ``k_chunk``
    (chunks of one length in the sequence's order): FULL before the diagonal, DIAGONAL on it,
    NONE after it."""
    if k_chunk < q_chunk:
        return FULL
    return DIAGONAL if k_chunk == q_chunk else NONE


def step_blocks(rank, step, world, causal):
    """``{(query half, key half): FULL | DIAGONAL | NONE}`` for ``rank`` at ``step``: its two
    query chunks against the two key chunks it holds then. Without ``causal`` all are FULL."""
    source = kv_source(rank, step, world)
    q_chunks, k_chunks = zigzag_chunks(rank, world), zigzag_chunks(source, world)
    return {
        (qh, kh): chunk_visibility(q_chunks[qh], k_chunks[kh]) if causal else FULL
        for qh in (0, 1)
        for kh in (0, 1)
    }


# Under the causal mask on the whole local sequence (two halves of one length against two, so
# bottom-right and top-left agree) the four blocks are these: the diagonal halves masked within,
# the later queries seeing all the earlier keys, the earlier queries none of the later keys (the
# kernel's key bound stops each row block at its last visible key, so it never loads them).
_CAUSAL_WHOLE = {(0, 0): DIAGONAL, (0, 1): NONE, (1, 0): FULL, (1, 1): DIAGONAL}


def step_calls(rank, step, world, causal):
    """The kernel calls of ``rank`` at ``step`` (a list of ``Call``), from ``step_blocks``: no call
    for a step that sees nothing, one causal call of the whole local sequence when the blocks are
    the causal mask's own pattern (step 0, a rank's own keys), one plain call of the whole when
    all are FULL (no mask), else one plain call per run of query halves that see the same
    contiguous key halves all FULL, and a call per block for anything else. In the zigzag order
    every step is one call: step 0 the causal whole; a source rank before ``rank`` gives both
    query halves against the first key half, one after it the second query half against both key
    halves, each half the pairs of the whole, so each step costs every rank the same."""
    blocks = step_blocks(rank, step, world, causal)
    if all(vis == NONE for vis in blocks.values()):
        return []
    if blocks == _CAUSAL_WHOLE:
        return [Call(0, 2, 0, 2, True)]
    if all(vis == FULL for vis in blocks.values()):
        return [Call(0, 2, 0, 2, False)]
    rows = []  # per query half: the key halves it sees, when they are one run all FULL
    for qh in (0, 1):
        seen = [kh for kh in (0, 1) if blocks[(qh, kh)] != NONE]
        if seen and not all(blocks[(qh, kh)] == FULL for kh in seen):
            rows = None
            break
        rows.append((seen[0], seen[-1] + 1) if seen else None)
    if rows is None:
        return [
            Call(qh, qh + 1, kh, kh + 1, vis == DIAGONAL)
            for (qh, kh), vis in sorted(blocks.items())
            if vis != NONE
        ]
    if rows[0] is not None and rows[0] == rows[1]:
        return [Call(0, 2, rows[0][0], rows[0][1], False)]
    return [Call(qh, qh + 1, *keys, False) for qh, keys in enumerate(rows) if keys is not None]


def call_pairs(call, half):
    """The (query, key) pairs, as local indices of the query side and of the held key side, that
    ``call`` computes for local sequences of two halves of ``half`` positions: its query range
    against its key range under its mask (bottom-right aligned)."""
    q0, q1 = call.q_lo * half, call.q_hi * half
    k0, k1 = call.k_lo * half, call.k_hi * half
    shift = (k1 - k0) - (q1 - q0)  # bottom-right: key j visible to query i when j <= i + shift
    return {
        (q0 + i, k0 + j)
        for i in range(q1 - q0)
        for j in range(k1 - k0)
        if not call.causal or j <= i + shift
    }


def step_pairs(rank, step, world, causal, seq_len):
    """Every (query position, key position), global, that ``rank`` computes at ``step`` (each
    call's pairs mapped through the zigzag order); a pair computed twice raises ``ValueError``
    (the merge would count it twice)."""
    half = chunk_len(seq_len, world)
    queries = zigzag_positions(rank, world, seq_len)
    keys = zigzag_positions(kv_source(rank, step, world), world, seq_len)
    pairs = set()
    for call in step_calls(rank, step, world, causal):
        for i, j in call_pairs(call, half):
            pair = (queries[i], keys[j])
            if pair in pairs:
                raise ValueError(f"rank {rank} step {step} computes {pair} twice")
            pairs.add(pair)
    return pairs


def _check_rank(rank, world):
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not a rank of a group of {world}")
