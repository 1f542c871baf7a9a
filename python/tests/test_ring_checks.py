"""The bookkeeping of flashrs.distributed's ring attention, without torch, a GPU or the native
module: the zigzag order, which rank's keys each rank holds at each step, and the kernel calls of
each step, against brute force over positions (every visible pair computed exactly once, no pair
the mask hides, no call of a block the kernel would have to compute fully masked, the same work
for every rank at every step); and the driver that runs every rank's schedule in one process.
The modules are loaded from python/flashrs/ under a stand-in package, so that the package's
__init__ (which needs the native module) does not run. Runs in CI (pytest python/tests) and
under unittest."""

import importlib
import itertools
import pathlib
import sys
import types
import unittest

SOURCE = pathlib.Path(__file__).resolve().parent.parent / "flashrs"
STAND_IN = "_flashrs_source_for_ring_checks"


def load(name):
    """python/flashrs/<name>.py as a module of a stand-in package over that folder."""
    if STAND_IN not in sys.modules:
        package = types.ModuleType(STAND_IN)
        package.__path__ = [str(SOURCE)]
        sys.modules[STAND_IN] = package
    return importlib.import_module(f"{STAND_IN}.{name}")


plan = load("_ring_plan")

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

WORLDS = range(1, 9)


def visible(query, key, causal):
    return key <= query if causal else True


class Zigzag(unittest.TestCase):
    def test_each_rank_holds_chunk_r_and_its_mirror(self):
        for world in WORLDS:
            held = [plan.zigzag_chunks(rank, world) for rank in range(world)]
            self.assertEqual(held[0], (0, 2 * world - 1))
            self.assertEqual(held[-1], (world - 1, world))
            self.assertEqual(sorted(itertools.chain(*held)), list(range(2 * world)))
            self.assertEqual(plan.zigzag_order(world), list(itertools.chain(*held)))
            for rank, chunks in enumerate(held):
                for half, chunk in enumerate(chunks):
                    self.assertEqual(plan.zigzag_owner(chunk, world), (rank, half))
        self.assertEqual(plan.zigzag_order(2), [0, 3, 1, 2])
        self.assertEqual(plan.zigzag_order(4), [0, 7, 1, 6, 2, 5, 3, 4])

    def test_positions_partition_the_sequence(self):
        for world in WORLDS:
            for size in (1, 2, 5):
                seq_len = 2 * world * size
                positions = [plan.zigzag_positions(rank, world, seq_len) for rank in range(world)]
                self.assertEqual(sorted(itertools.chain(*positions)), list(range(seq_len)))
                for rank, local in enumerate(positions):
                    self.assertEqual(len(local), 2 * size)
                    first, second = plan.zigzag_chunks(rank, world)
                    self.assertEqual(local[:size], list(range(first * size, (first + 1) * size)))
                    self.assertEqual(local[size:], list(range(second * size, (second + 1) * size)))
                    # Causal work per rank: the same count of visible pairs for every rank.
                    work = sum(p + 1 for p in local)
                    self.assertEqual(work, sum(p + 1 for p in positions[0]), (world, size, rank))

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "multiple of 6"):
            plan.chunk_len(100, 3)
        with self.assertRaisesRegex(ValueError, "rank 4"):
            plan.zigzag_chunks(4, 4)
        with self.assertRaisesRegex(ValueError, "step 3"):
            plan.kv_source(0, 3, 3)
        with self.assertRaisesRegex(ValueError, "chunk 8"):
            plan.zigzag_owner(8, 4)


class Steps(unittest.TestCase):
    def test_keys_and_values_move_one_rank_forward_per_step(self):
        for world in WORLDS:
            for rank in range(world):
                sources = [plan.kv_source(rank, step, world) for step in range(world)]
                self.assertEqual(sources[0], rank)
                self.assertEqual(sorted(sources), list(range(world)))
                for step in range(1, world):
                    # What rank holds at this step, the previous rank held the step before.
                    self.assertEqual(sources[step], plan.kv_source((rank - 1) % world, step - 1, world))

    def test_block_visibility_against_positions(self):
        for world in WORLDS:
            size = 3
            seq_len = 2 * world * size
            for rank, step in itertools.product(range(world), range(world)):
                source = plan.kv_source(rank, step, world)
                queries = plan.zigzag_positions(rank, world, seq_len)
                keys = plan.zigzag_positions(source, world, seq_len)
                for (qh, kh), vis in plan.step_blocks(rank, step, world, True).items():
                    rows = queries[qh * size:(qh + 1) * size]
                    cols = keys[kh * size:(kh + 1) * size]
                    seen = [[visible(i, j, True) for j in cols] for i in rows]
                    expected = {
                        plan.FULL: [[True] * size for _ in rows],
                        plan.NONE: [[False] * size for _ in rows],
                        plan.DIAGONAL: [[b <= a for b in range(size)] for a in range(size)],
                    }[vis]
                    self.assertEqual(seen, expected, (world, rank, step, qh, kh, vis))
                self.assertTrue(all(v == plan.FULL for v in plan.step_blocks(rank, step, world, False).values()))

    def test_calls_cover_every_visible_pair_once(self):
        for world, size, causal in itertools.product(WORLDS, (1, 2, 3), (True, False)):
            seq_len = 2 * world * size
            for rank in range(world):
                queries = plan.zigzag_positions(rank, world, seq_len)
                computed = set()
                for step in range(world):
                    pairs = plan.step_pairs(rank, step, world, causal, seq_len)  # raises on a pair twice
                    self.assertFalse(pairs & computed, (world, size, causal, rank, step))
                    computed |= pairs
                expected = {(i, j) for i in queries for j in range(seq_len) if visible(i, j, causal)}
                self.assertEqual(computed, expected, (world, size, causal, rank))

    def test_no_call_computes_a_masked_block(self):
        """Within every call, each (query half, key half) block is visible somewhere, or, under a
        causal call, lies past the last key of every row of its query half (the kernel's key bound
        for a row block stops there, so it never loads the block)."""
        size = 4
        for world, causal in itertools.product(WORLDS, (True, False)):
            for rank, step in itertools.product(range(world), range(world)):
                blocks = plan.step_blocks(rank, step, world, causal)
                for call in plan.step_calls(rank, step, world, causal):
                    pairs = plan.call_pairs(call, size)
                    for qh in range(call.q_lo, call.q_hi):
                        for kh in range(call.k_lo, call.k_hi):
                            block = {
                                (i, j) for i in range(qh * size, (qh + 1) * size)
                                for j in range(kh * size, (kh + 1) * size)
                            }
                            inside = pairs & block
                            vis = blocks[(qh, kh)]
                            where = (world, rank, step, call, qh, kh)
                            # What the call computes of the block is what the mask shows of it.
                            if vis == plan.FULL:
                                self.assertEqual(inside, block, where)
                            elif vis == plan.DIAGONAL:
                                self.assertEqual(len(inside), size * (size + 1) // 2, where)
                            else:
                                self.assertFalse(inside, where)
                                self.assertTrue(call.causal, where)
                                rows_last = max(j for (i, j) in pairs if qh * size <= i < (qh + 1) * size)
                                self.assertLess(rows_last, kh * size, where)

    def test_one_call_per_step_and_equal_work(self):
        for world in WORLDS:
            for size in (1, 4):
                seq_len = 2 * world * size
                for step in range(world):
                    work = []
                    for rank in range(world):
                        calls = plan.step_calls(rank, step, world, True)
                        self.assertEqual(len(calls), 1, (world, rank, step, calls))
                        work.append(len(plan.step_pairs(rank, step, world, True, seq_len)))
                    # Step 0 is the causal whole (2 s^2 + s pairs), every other step half the pairs
                    # of the whole (2 s^2): no rank waits on another.
                    expected = 2 * size * size + (size if step == 0 else 0)
                    self.assertEqual(work, [expected] * world, (world, size, step))
                for rank, step in itertools.product(range(world), range(world)):
                    self.assertEqual(plan.step_calls(rank, step, world, False), [plan.Call(0, 2, 0, 2, False)])

    def test_the_calls_of_each_kind_of_step(self):
        Call = plan.Call
        self.assertEqual(plan.step_calls(1, 0, 4, True), [Call(0, 2, 0, 2, True)])
        # Keys of an earlier rank: both query halves against its first (earlier) half.
        self.assertEqual(plan.step_calls(2, 1, 4, True), [Call(0, 2, 0, 1, False)])
        # Keys of a later rank: the second (later) query half against both its halves.
        self.assertEqual(plan.step_calls(1, 2, 4, True), [Call(1, 2, 0, 2, False)])

    def test_other_block_patterns_fall_back_to_calls_per_block(self):
        F, D, N = plan.FULL, plan.DIAGONAL, plan.NONE
        Call = plan.Call
        patterns = [
            ({(0, 0): N, (0, 1): N, (1, 0): N, (1, 1): N}, []),
            ({(0, 0): F, (0, 1): N, (1, 0): F, (1, 1): F}, [Call(0, 1, 0, 1, False), Call(1, 2, 0, 2, False)]),
            ({(0, 0): N, (0, 1): F, (1, 0): N, (1, 1): F}, [Call(0, 2, 1, 2, False)]),
            ({(0, 0): D, (0, 1): N, (1, 0): N, (1, 1): D}, [Call(0, 1, 0, 1, True), Call(1, 2, 1, 2, True)]),
            ({(0, 0): F, (0, 1): N, (1, 0): N, (1, 1): F}, [Call(0, 1, 0, 1, False), Call(1, 2, 1, 2, False)]),
        ]
        saved = plan.step_blocks
        try:
            for blocks, calls in patterns:
                plan.step_blocks = lambda *args, blocks=blocks: dict(blocks)
                self.assertEqual(plan.step_calls(0, 0, 1, True), calls, blocks)
        finally:
            plan.step_blocks = saved


class Token:
    """What the local ring reads of a tensor: clone(), shape, dtype."""

    def __init__(self, value, shape=(1,)):
        self.value, self.shape, self.dtype = list(value), shape, "token"

    def clone(self):
        return Token(self.value, self.shape)


class SimulatedWorld(unittest.TestCase):
    """The driver and the local ring of flashrs.distributed on tokens in place of tensors, with
    the exchange pattern of ring attention's backward: the keys go one rank forward per step, and
    an accumulator of each chunk follows one step behind, coming home after the last step."""

    def setUp(self):
        self.dist = load("distributed")

    def ring_backward_pattern(self, ring):
        kv, sent = Token([ring.rank]), None
        for step in range(ring.world):
            incoming = ring.send_recv((kv,)) if step + 1 < ring.world else None
            self.assertEqual(kv.value, [plan.kv_source(ring.rank, step, ring.world)])
            if sent is None:
                acc = Token([])
            else:
                (acc,) = yield sent
            acc.value.append(ring.rank)
            sent = ring.send_recv((acc,))
            if incoming is not None:
                (kv,) = yield incoming
        (acc,) = yield sent
        return acc.value

    def test_each_rank_gets_its_own_chunks_accumulator_from_every_rank(self):
        d = self.dist
        for world in WORLDS:
            shared = d._LocalWorld(world)
            results = d._drive_together([self.ring_backward_pattern(d._LocalRing(shared, r)) for r in range(world)])
            for rank, order in enumerate(results):
                self.assertEqual(order, [(rank + i) % world for i in range(world)])

    def test_out_of_step_schedules_are_errors(self):
        d = self.dist

        def waits_for_nothing(ring):
            handle = ring.send_recv((Token([0]),)) if ring.rank == 0 else None
            if handle is None:
                # This rank never sends, so rank 1 waits forever... and rank 0 waits on this one.
                yield d._LocalHandle(ring.shared.inboxes[ring.rank], 5, (Token([0]),), ring.rank)
            else:
                yield handle

        shared = d._LocalWorld(2)
        with self.assertRaisesRegex(RuntimeError, "never sent"):
            d._drive_together([waits_for_nothing(d._LocalRing(shared, r)) for r in range(2)])

        def mismatched(ring):
            yield ring.send_recv((Token([0], shape=(ring.rank + 1,)),))

        shared = d._LocalWorld(2)
        with self.assertRaisesRegex(RuntimeError, "received"):
            d._drive_together([mismatched(d._LocalRing(shared, r)) for r in range(2)])

    @unittest.skipIf(HAVE_TORCH, "torch is here")
    def test_imports_without_torch(self):
        d = self.dist
        self.assertIsNone(d.torch)
        self.assertEqual(d.zigzag_chunks(1, 4), (1, 6))
        with self.assertRaisesRegex(RuntimeError, "needs torch"):
            d.ring_attention(None, None, None)
        for name in d.__all__:
            self.assertTrue(hasattr(d, name), name)


if __name__ == "__main__":
    unittest.main()
