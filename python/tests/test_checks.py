"""Bad input to flashrs.attention, without torch or a GPU: small stand-ins carry the attributes the
wrapper reads of a torch tensor, and every check before the launch must answer with a one-line
ValueError. Runs in CI (python -m unittest discover python/tests)."""

import ctypes
import unittest

import flashrs

BASE = 0x7F00_0000_0000


def _contiguous(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class Dtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name


class Device:
    def __init__(self, kind="cuda", index=0):
        self.type, self.index = kind, index


class FakeTensor:
    """What flashrs reads of a torch tensor: data_ptr(), shape, stride(), dtype, device."""

    def __init__(self, shape, ptr, dtype="float16", device=None, strides=None):
        self.shape = tuple(shape)
        self._ptr = ptr
        self._strides = tuple(strides) if strides is not None else _contiguous(shape)
        self.dtype = Dtype(dtype)
        self.device = device or Device()

    def data_ptr(self):
        return self._ptr

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def get_device(self):
        return self.device.index if self.is_cuda else -1

    def stride(self):
        return self._strides


def tensors(q=(2, 8, 128, 64), kv=(2, 2, 256, 64), **kw):
    """q, k, v 16 MiB apart (far more than any of them spans)."""
    return (
        FakeTensor(q, BASE, **kw),
        FakeTensor(kv, BASE + (16 << 20), **kw),
        FakeTensor(kv, BASE + (32 << 20), **kw),
    )


def _has_cuda_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


class Allocations:
    """Stands in for torch's allocation and stream in the wrapper while a test runs."""

    def __init__(self, out=None, lse=None):
        self.out, self.lse = out, lse
        self.saved = {}
        self.op_calls = []

    def __enter__(self):
        for name in (
            "_empty_like", "_empty_out", "_empty_lse", "_current_stream", "_is_tensor", "_grad_enabled", "_op", "_contiguous"
        ):
            self.saved[name] = getattr(flashrs, name)
        # The stand-ins count as tensors, grad mode is on, and the op's real implementation runs
        # directly (torch.ops.flashrs.attention needs torch).
        flashrs._is_tensor = lambda t: isinstance(t, (FakeTensor, FakeTable))
        flashrs._grad_enabled = lambda: True
        flashrs._op = lambda *args: self.op_calls.append(args) or flashrs._attention(
            *args[:7], tuple(args[8:10]), args[10], args[11]
        )[:2]
        flashrs._empty_like = lambda q: self.out(q) if self.out else FakeTensor(
            q.shape, BASE + (48 << 20), str(q.dtype)[6:], strides=q.stride()
        )
        # q's dims with v's head dim, as the wrapper's own allocates it.
        flashrs._empty_out = lambda q, v: flashrs._empty_like(q) if v.shape[-1] == q.shape[-1] else FakeTensor(
            q.shape[:-1] + (v.shape[-1],), BASE + (48 << 20), str(q.dtype)[6:]
        )
        flashrs._empty_lse = lambda q, rows: self.lse(rows) if self.lse else FakeTensor(
            rows, BASE + (64 << 20), "float32"
        )
        flashrs._current_stream = lambda q: 0
        # A copy contiguous in the order of its dims, elsewhere in memory.
        flashrs._contiguous = lambda t: FakeTensor(t.shape, t.data_ptr() + (8 << 20), str(t.dtype)[6:])
        return self

    def __exit__(self, *exc):
        for name, value in self.saved.items():
            setattr(flashrs, name, value)


class BadInput(unittest.TestCase):
    def refused(self, *words, args=None, **kw):
        """Calls attention, expecting a one-line ValueError containing every word."""
        with Allocations():
            with self.assertRaises(ValueError) as caught:
                flashrs.attention(*(args or tensors()), **kw)
        message = str(caught.exception)
        self.assertEqual(len(message.splitlines()), 1, message)
        for word in words:
            self.assertIn(word, message)
        return message

    def test_not_a_tensor(self):
        q, k, v = tensors()
        self.refused("k must be a torch.Tensor", "list", args=(q, [1, 2], v))
        # Outside the stand-ins, an object that only looks like a tensor is refused as well.
        with self.assertRaises(ValueError) as caught:
            flashrs.attention(*tensors())
        self.assertEqual(str(caught.exception), "q must be a torch.Tensor, got FakeTensor")

    def test_inputs_that_need_a_gradient_go_through_the_op_with_the_lse(self):
        # Autograd lives in the dispatcher: such a call takes the op, asking for the log-sum-exp
        # the backward needs even when the caller did not, and with the backward's options. Head
        # dim 36 is refused by the native checks, so nothing launches on the fake addresses.
        q, k, v = tensors(q=(2, 8, 128, 36), kv=(2, 2, 256, 36))
        v.requires_grad = True
        with Allocations() as allocations:
            with self.assertRaises(ValueError):
                flashrs.attention(q, k, v, deterministic=True)
        (call,) = allocations.op_calls
        self.assertEqual(call[5:], (True, "bhsd", True, -1, -1, 0.0, None))
        # The window and softcap reach the op (and so its backward) as its own arguments.
        with Allocations() as allocations:
            with self.assertRaises(ValueError):
                flashrs.attention(q, k, v, causal=True, window_size=[16, 0], softcap=30)
        (call,) = allocations.op_calls
        self.assertEqual(call[3:], (True, None, True, "bhsd", False, 16, 0, 30.0, None))
        self.assertIs(type(call[10]), float)
        # Without a gradient the eager call skips the op.
        v.requires_grad = False
        with Allocations() as allocations:
            with self.assertRaises(ValueError):
                flashrs.attention(q, k, v)
        self.assertEqual(allocations.op_calls, [])

    def test_backward_checks(self):
        q, k, v = tensors()
        at = lambda i: BASE + ((48 + 16 * i) << 20)
        out, lse = FakeTensor(q.shape, at(0)), FakeTensor((2, 8, 128), at(1), "float32")
        grads = [FakeTensor(q.shape, at(2)), FakeTensor(k.shape, at(3)), FakeTensor(k.shape, at(4))]

        def check(d_out, lse=lse, d_v=grads[2]):
            tensors_ = [q, k, v, out, d_out, lse, grads[0], grads[1], d_v]
            names = ["q", "k", "v", "out", "d_out", "lse", "d_q", "d_k", "d_v"]
            described = [flashrs._describe(n, t) for n, t in zip(names, tensors_)]
            return flashrs._flashrs.check_backward(*described, None, False, None, False)

        # A well-formed call needs dq's fp32 accumulator and two statistics per (padded) row.
        self.assertEqual(check(FakeTensor(q.shape, at(5))), 4 * (16 * 128 * 64 + 2 * 16 * 128 + 16 * 2))
        for words, call in [
            (["d_out is [2, 8, 127, 64]", "q's dims"], lambda: check(FakeTensor((2, 8, 127, 64), at(5)))),
            (["d_out has dtype torch.float32"], lambda: check(FakeTensor(q.shape, at(5), "float32"))),
            (["lse is torch.float32 [2, 8, 127]"], lambda: check(FakeTensor(q.shape, at(5)),
                                                                  lse=FakeTensor((2, 8, 127), at(1), "float32"))),
            (["d_k overlaps d_v"], lambda: check(FakeTensor(q.shape, at(5)), d_v=FakeTensor(k.shape, at(3)))),
        ]:
            with self.assertRaises(ValueError) as caught:
                call()
            message = str(caught.exception)
            self.assertEqual(len(message.splitlines()), 1, message)
            for word in words:
                self.assertIn(word, message)

    def test_lse_rows_follow_the_dim_order(self):
        self.assertEqual(flashrs._lse_rows((2, 128, 8, 64), "bshd"), (2, 8, 128))
        self.assertEqual(flashrs._lse_rows((2, 8, 128, 64), "bhsd"), (2, 8, 128))

    def test_not_on_cuda(self):
        q, k, v = tensors()
        v.device = Device("cpu", None)
        self.refused("v is on cpu", "CUDA tensors", args=(q, k, v))

    def test_dtype(self):
        self.refused("q has dtype torch.float32", "float16 or torch.bfloat16", args=tensors(dtype="float32"))
        q, k, v = tensors()
        k.dtype = Dtype("bfloat16")
        self.refused("q is torch.float16 and k is torch.bfloat16", args=(q, k, v))

    def test_devices_differ(self):
        q, k, v = tensors()
        k.device = Device("cuda", 1)
        self.refused("q is on cuda:0 and k on cuda:1", args=(q, k, v))

    def test_dims(self):
        self.refused("q has 3 dims", args=tensors(q=(8, 128, 64)))

    def test_strides_the_copy_engine_cannot_read_are_copied(self):
        describe = lambda ts: [flashrs._describe(n, t) for n, t in zip("qkv", ts)]
        q, k, v = tensors()
        k._strides = (2 * 256 * 64, 256 * 64, 1, 256)  # transposed S and D: D's stride is not 1
        self.assertEqual(flashrs._flashrs.check(*describe((q, k, v)), None, False, None), ((2, 8, 128), False))
        q, k, v = tensors()
        v._strides = (2 * 256 * 68, 256 * 68, 68, 1)  # rows 136 bytes apart: not a multiple of 16
        self.assertEqual(flashrs._flashrs.check(*describe((q, k, v)), None, False, None), ((2, 8, 128), False))
        # A negative stride is refused outright.
        q, k, v = tensors()
        q._strides = (8 * 128 * 64, 128 * 64, -64, 1)
        self.refused("q: strides", args=(q, k, v))

    @unittest.skipIf(_has_cuda_driver(), "asks the GPU whether it reads them in place")
    def test_strides_the_copy_engine_reads_ask_the_gpu(self):
        # A slice of a D=128 tensor, and k stored [B, S, H, D] beside [B, H, S, D] q and v: on
        # Hopper read in place, elsewhere copied; which it is, the GPU's architecture says.
        describe = lambda ts: [flashrs._describe(n, t) for n, t in zip("qkv", ts)]
        for strided in ("q", "k"):
            q, k, v = tensors()
            if strided == "q":
                q._strides = (8 * 128 * 128, 128 * 128, 128, 1)
            else:
                k._strides = (256 * 2 * 64, 64, 2 * 64, 1)
            with self.assertRaises(RuntimeError) as caught:
                flashrs._flashrs.check(*describe((q, k, v)), None, False, None)
            self.assertIn("no CUDA driver found", str(caught.exception))

    def test_shape_mismatches(self):
        self.refused("keys and values need the same dims", args=(tensors()[0], tensors()[1], FakeTensor((2, 2, 255, 64), BASE + (32 << 20))))
        self.refused("batch", args=tensors(kv=(1, 2, 256, 64)))
        self.refused("must divide q's 8", args=tensors(kv=(2, 3, 256, 64)))
        self.refused("same head dim", args=tensors(kv=(2, 2, 256, 128)))

    def test_head_dim(self):
        for d in (100, 264, 4):
            self.refused(f"unsupported head dim {d}", "multiple of 8 up to 256", args=tensors(q=(1, 2, 16, d), kv=(1, 2, 16, d)))
        # Other multiples of 8 up to 256 pass the checks (on sm_90 they run on the next compiled
        # head dim's tiles), as the compiled ones do.
        describe = lambda ts: [flashrs._describe(n, t) for n, t in zip("qkv", ts)]
        for d in (8, 96, 192, 128):
            ts = tensors(q=(1, 2, 16, d), kv=(1, 2, 16, d))
            self.assertEqual(flashrs._flashrs.check(*describe(ts), None, False, None), ((1, 2, 16), True))

    def test_v_head_dim_of_its_own(self):
        # DeepSeek's MLA prefill: q and k 192, v 128 (the output takes v's head dim).
        describe = lambda ts: [flashrs._describe(n, t) for n, t in zip("qkv", ts)]
        q, k, _ = tensors(q=(1, 2, 16, 192), kv=(1, 2, 32, 192))
        v = FakeTensor((1, 2, 32, 128), BASE + (32 << 20))
        self.assertEqual(flashrs._flashrs.check(*describe((q, k, v)), None, False, None), ((1, 2, 16), True))
        for dv, words in ((256, "v's head dim 256"), (100, "v's head dim 100")):
            v = FakeTensor((1, 2, 32, dv), BASE + (32 << 20))
            self.refused(words, args=(q, k, v))
        v = FakeTensor((1, 2, 31, 128), BASE + (32 << 20))
        self.refused("keys and values need the same dims", args=(q, k, v))

    def test_kernel_head_dim(self):
        self.assertEqual([flashrs._kernel_head_dim(d) for d in (8, 64, 72, 96, 128, 136, 192, 256)],
                         [64, 64, 128, 128, 128, 256, 256, 256])
        self.assertEqual([flashrs._kernel_head_dim(d) for d in (0, 4, 100, 264)], [None] * 4)

    def test_addresses(self):
        q, k, v = tensors()
        q._ptr += 2
        self.refused("q: device address", "not aligned to 16 bytes", args=(q, k, v))
        q, k, v = tensors()
        v._ptr = 0
        self.refused("v: the device pointer is null", args=(q, k, v))

    def test_options(self):
        self.refused("scale must be a positive finite number", scale=-1.0)
        self.refused("scale", scale=float("nan"))
        self.refused('layout must be None, "bhsd" or "bshd"', layout="bhds")

    def test_bshd_order_reads_the_shape_as_b_s_h_d(self):
        # [B, S, H, D] shapes are a mismatch in the default order (S=128 "heads" vs 256).
        q, k, v = tensors(q=(2, 128, 8, 64), kv=(2, 256, 2, 64))
        self.refused("must divide", args=(q, k, v))
        self.assertEqual(
            flashrs._flashrs.check(*(flashrs._describe("t", t) for t in (q, k, v)), "bshd", False, None),
            ((2, 8, 128), True),
        )

    def test_outputs_are_checked_too(self):
        # An output torch got wrong (as if empty_like had not kept the dims) and a bad LSE.
        q, k, v = tensors()
        wrong_out = lambda q: FakeTensor((2, 8, 127, 64), BASE + (48 << 20))
        with Allocations(out=wrong_out), self.assertRaises(ValueError) as caught:
            flashrs.attention(q, k, v)
        self.assertIn("it takes q's dims with v's head dim", str(caught.exception))
        over_q = lambda q: FakeTensor(q.shape, BASE + 4096)
        with Allocations(out=over_q), self.assertRaises(ValueError) as caught:
            flashrs.attention(q, k, v)
        self.assertIn("out overlaps q", str(caught.exception))
        half_lse = lambda rows: FakeTensor(rows, BASE + (64 << 20), "float16")
        with Allocations(lse=half_lse), self.assertRaises(ValueError) as caught:
            flashrs.attention(q, k, v, return_lse=True)
        self.assertIn("contiguous torch.float32 [B, H, S_q] = [2, 8, 128]", str(caught.exception))


class BadWindowOrSoftcap(unittest.TestCase):
    """window_size and softcap (FlashAttention's): checked in Python before anything is allocated,
    and again by the native module for calls that come through the ops."""

    refused = BadInput.refused

    def test_window_size(self):
        for window_size in [(-2, 0), (0, -5), (-1, -2)]:
            self.refused("window_size must be (left, right)", "-1 (no bound)", window_size=window_size)
        self.refused("2^31 - 2", f"got ({2**31}, 0)", window_size=(2**31, 0))
        for window_size, shown in [
            ((16,), "(16,)"), ("ab", "'ab'"), ((1.5, 0), "(1.5, 0)"), ((True, 0), "(True, 0)"), (None, "None"),
            (16, "16"), ((1, 2, 3), "(1, 2, 3)"), ([0, "0"], "[0, '0']"),
        ]:
            self.refused("window_size must be a pair of ints", f"got {shown}", window_size=window_size)

    def test_softcap(self):
        for softcap in (-1.0, -1e-9, float("nan"), float("inf"), float("-inf"), 10**400):
            self.refused("softcap must be 0.0 (none) or a positive finite number", softcap=softcap)
        for softcap, shown in [("1.0", "'1.0'"), (True, "True"), ([1.0], "[1.0]"), (object, "<class 'object'>")]:
            self.refused("softcap must be a number", f"got {shown}", softcap=softcap)

    def test_the_native_checks_refuse_them_too(self):
        # What torch.ops.flashrs.* hand over unchecked by the Python wrapper (its schema only
        # says int and float).
        describe = lambda ts: [flashrs._describe(n, t) for n, t in zip("qkv", ts)]
        check = lambda *options: flashrs._flashrs.check(*describe(tensors()), None, True, None, *options)
        for options, words in [
            (((-2, 0), 0.0), "window_size must be (left, right)"),
            (((2**31 - 1, 0), 0.0), "window size 2147483647 is too large"),
            (((-1, -1), -1.0), "softcap must be a positive finite number, got -1"),
            (((-1, -1), float("nan")), "softcap must be a positive finite number, got NaN"),
            (((-1, -1), float("inf")), "softcap must be a positive finite number, got inf"),
            (((-1, -1), 1e300), "softcap must be a positive finite number, got inf"),
        ]:
            with self.subTest(options=options), self.assertRaises(ValueError) as caught:
                check(*options)
            message = str(caught.exception)
            self.assertEqual(len(message.splitlines()), 1, message)
            self.assertIn(words, message)
        self.assertEqual(check((16, 0), 30.0), ((2, 8, 128), True))
        self.assertEqual(check((0, 0), 0.0), ((2, 8, 128), True))
        self.assertEqual(check((-1, 2**31 - 2), 1e-3), ((2, 8, 128), True))

    def test_the_backward_checks_take_them(self):
        q, k, v = tensors()
        at = lambda i: BASE + ((48 + 16 * i) << 20)
        tensors_ = [q, k, v, FakeTensor(q.shape, at(0)), FakeTensor(q.shape, at(5)), FakeTensor((2, 8, 128), at(1), "float32"),
                    FakeTensor(q.shape, at(2)), FakeTensor(k.shape, at(3)), FakeTensor(k.shape, at(4))]
        names = ["q", "k", "v", "out", "d_out", "lse", "d_q", "d_k", "d_v"]
        described = [flashrs._describe(n, t) for n, t in zip(names, tensors_)]
        plain = flashrs._flashrs.check_backward(*described, None, True, None, False)
        self.assertEqual(flashrs._flashrs.check_backward(*described, None, True, None, False, (64, 0), 30.0), plain)
        for options, words in [(((-3, 0), 0.0), "window_size"), (((-1, -1), -2.0), "softcap")]:
            with self.subTest(options=options), self.assertRaises(ValueError) as caught:
                flashrs._flashrs.check_backward(*described, None, True, None, False, *options)
            self.assertIn(words, str(caught.exception))

    def test_varlen_and_paged_take_them(self):
        with Allocations():
            for call in (
                lambda **kw: flashrs.varlen_attention(*packed(), [0, 100, 300], [0, 250, 500], **kw),
                lambda **kw: flashrs.paged_attention(
                    FakeTensor((2, 1, 8, 64), BASE), FakeTensor((10, 16, 2, 64), BASE + (16 << 20)),
                    FakeTensor((10, 16, 2, 64), BASE + (32 << 20)), FakeTable(((0, 1), (2, 3))), [20, 32], **kw,
                ),
            ):
                for kw, words in [
                    ({"window_size": (-2, -1)}, "window_size must be (left, right)"),
                    ({"window_size": "x"}, "window_size must be a pair of ints"),
                    ({"softcap": -0.5}, "softcap must be 0.0 (none) or a positive finite number"),
                    ({"softcap": "30"}, "softcap must be a number"),
                ]:
                    with self.subTest(kw=kw), self.assertRaises(ValueError) as caught:
                        call(**kw)
                    self.assertIn(words, str(caught.exception))
                    self.assertEqual(len(str(caught.exception).splitlines()), 1)

    @unittest.skipIf(_has_cuda_driver(), "launches on the fake addresses where a GPU is present")
    def test_accepted_ones_reach_the_gpu(self):
        for kw in ({"window_size": (16, 0), "softcap": 30.0}, {"window_size": (0, 0)}, {"softcap": None}):
            with self.subTest(**kw), Allocations(), self.assertRaises(RuntimeError) as caught:
                flashrs.attention(*tensors(), causal=True, return_lse=True, **kw)
            self.assertIn("no CUDA driver found", str(caught.exception))
        with Allocations(), self.assertRaises(RuntimeError) as caught:
            flashrs.varlen_attention(*packed(), [0, 100, 300], [0, 250, 500], window_size=(32, 8), softcap=5.0)
        self.assertIn("no CUDA driver found", str(caught.exception))


class SinksDescriptions(unittest.TestCase):
    """The native checks of the sinks' description, before any GPU is needed: one contiguous
    float32 per query head, on q's device, 16-byte aligned; anything else a one-line ValueError."""

    def call(self, sinks):
        q, k, v = tensors()
        out = FakeTensor(q.shape, BASE + (48 << 20))
        described = [flashrs._describe(n, t) for n, t in (("q", q), ("k", k), ("v", v), ("out", out))]
        return flashrs._flashrs.attention(*described, None, "bhsd", False, None, 0, (-1, -1), 0.0, sinks)

    def test_bad_sinks_are_refused(self):
        at = BASE + (64 << 20)
        for sinks, words in [
            ((at, (4,), (1,), "torch.float32", "cuda", 0), "[H] = [8]"),
            ((at, (8,), (2,), "torch.float32", "cuda", 0), "contiguous"),
            ((at, (8,), (1,), "torch.bfloat16", "cuda", 0), "torch.float32"),
            ((at, (8,), (1,), "torch.float32", "cpu", None), "one device"),
            ((at + 4, (8,), (1,), "torch.float32", "cuda", 0), "16-byte aligned"),
        ]:
            with self.subTest(words=words), self.assertRaises(ValueError) as caught:
                self.call(sinks)
            message = str(caught.exception)
            self.assertIn(words, message)
            self.assertEqual(len(message.splitlines()), 1, message)


class TransformersArguments(unittest.TestCase):
    """How flashrs.transformers maps what transformers hands an attention function (no torch or
    transformers needed for these)."""

    def test_sliding_window_is_flash_attentions(self):
        import flashrs.transformers as integration

        # w keys, the query's own included: (w - 1, w - 1), once the keys outnumber w.
        self.assertEqual(integration._window_size(None, 100), (-1, -1))
        self.assertEqual(integration._window_size(4096, 4096), (-1, -1))
        self.assertEqual(integration._window_size(4096, 4097), (4095, 4095))
        self.assertEqual(integration._window_size(1, 10), (0, 0))
        for bad in (0, -1, 2.5, True):
            with self.assertRaises(ValueError):
                integration._window_size(bad, 10)

    def test_window_softcap_and_sinks_reach_the_call(self):
        import flashrs.transformers as integration

        calls = []

        class Out:
            def transpose(self, *dims):
                return self

        saved = flashrs.attention
        flashrs.attention = lambda *args, **kw: calls.append(kw) or Out()
        try:
            q, k, v = tensors(q=(2, 8, 128, 64), kv=(2, 2, 256, 64))
            integration.attention_forward(None, q, k, v, None, scaling=0.125, sliding_window=64, softcap=50.0)
            integration.attention_forward(None, q, k, v, None, is_causal=False, sliding_window=None, softcap=None)
            sinks = object()
            integration.attention_forward(None, q, k, v, None, s_aux=sinks)
        finally:
            flashrs.attention = saved
        self.assertEqual(calls[0], dict(causal=True, scale=0.125, window_size=(63, 63), softcap=50.0, sinks=None))
        self.assertEqual(calls[1], dict(causal=False, scale=None, window_size=(-1, -1), softcap=None, sinks=None))
        self.assertIs(calls[2]["sinks"], sinks)


def packed(total_q=300, total_k=500, heads=8, heads_kv=2, d=64, **kw):
    """Packed q, k, v ([total, heads, D]) 16 MiB apart."""
    return (
        FakeTensor((total_q, heads, d), BASE, **kw),
        FakeTensor((total_k, heads_kv, d), BASE + (16 << 20), **kw),
        FakeTensor((total_k, heads_kv, d), BASE + (32 << 20), **kw),
    )


class BadVarlenInput(unittest.TestCase):
    def refused(self, *words, args=None, sums=([0, 100, 300], [0, 250, 500]), **kw):
        """Calls varlen_attention, expecting a one-line ValueError containing every word."""
        with Allocations():
            with self.assertRaises(ValueError) as caught:
                flashrs.varlen_attention(*(args or packed()), *sums, **kw)
        message = str(caught.exception)
        self.assertEqual(len(message.splitlines()), 1, message)
        for word in words:
            self.assertIn(word, message)

    def test_prefix_sums(self):
        self.refused("cu_seqlens_q", "list, tuple or 1-dim tensor", sums=("0,300", [0, 500]))
        self.refused("cu_seqlens_k holds 2.5", sums=([0, 300], [0, 2.5, 500]))
        self.refused("int32", sums=([0, 300], [0, 2**31, 500]))
        self.refused("cu_seqlens_q ends at 250", sums=([0, 250], [0, 500]))
        self.refused("decreas", sums=([0, 200, 100, 300], [0, 100, 200, 500]))
        self.refused("entries", sums=([0, 300], [0, 200, 500]))
        self.refused("queries but no key", args=packed(total_k=0), sums=([0, 300], [0, 0]))

    def test_tensors(self):
        q, k, v = packed()
        self.refused("k must be a torch.Tensor", args=(q, "k", v))
        self.refused("3, [total, H, D]", args=tensors())
        self.refused("torch.float32", args=packed(dtype="float32"))
        self.refused("must divide q's 8", args=packed(heads_kv=3))
        self.refused("head dim", args=packed(d=36))
        # One the kernels pad (on sm_90) passes the native checks: the call gets to the driver.
        with Allocations():
            with self.assertRaises(RuntimeError) as caught:
                flashrs.varlen_attention(*packed(d=96), [0, 100, 300], [0, 250, 500])
        self.assertIn("no CUDA driver found", str(caught.exception))
        q, k, v = packed()
        k.requires_grad = True
        self.refused("no backward pass yet", args=(q, k, v))

    def test_strided_inputs_are_copied_and_checked(self):
        # A strided q reaches the native checks as its contiguous copy (here: refused for its
        # head dim, so nothing launches on the fake addresses).
        q, k, v = packed(d=36)
        q._strides = (2 * 8 * 36, 36, 1)
        self.refused("head dim", args=(q, k, v))


class BadPagedInput(unittest.TestCase):
    """flashrs.paged_attention's checks: q [B, S_q, H, D], caches [num_blocks, block_size, H_kv, D]."""

    def refused(self, *words, q=(2, 1, 8, 64), cache=(10, 16, 2, 64), table=((0, 1), (2, 3)), lens=(20, 32), **kw):
        with Allocations():
            with self.assertRaises(ValueError) as caught:
                flashrs.paged_attention(
                    FakeTensor(q, BASE), FakeTensor(cache, BASE + (16 << 20)), FakeTensor(cache, BASE + (32 << 20)),
                    [list(row) for row in table] if kw.pop("as_list", False) else FakeTable(table), list(lens), **kw,
                )
        message = str(caught.exception)
        self.assertEqual(len(message.splitlines()), 1, message)
        for word in words:
            self.assertIn(word, message)

    def test_tables(self):
        self.refused("outside the cache's 10 pages", table=((0, 1), (2, 10)))
        self.refused("outside 0..=32", lens=(20, 33))
        self.refused("not 3 equal rows", lens=(1, 2, 3))
        self.refused("block size 12", cache=(10, 12, 2, 64))
        self.refused("block_table must be a 2-dim tensor", as_list=True)

    def test_tensors(self):
        self.refused("a paged cache is [num_blocks, block_size, H_kv, D]", cache=(10, 16, 64))
        self.refused("must divide q's 8", cache=(10, 16, 3, 64))
        # Paged caches are read by flash_decode alone, at its compiled head dims: one the dense
        # path pads is refused here.
        self.refused("unsupported head dim 96", q=(2, 1, 8, 96), cache=(10, 16, 2, 96))


class FakeTable:
    """A 2-dim int tensor as the table reader sees one."""

    def __init__(self, rows):
        self.rows = [list(r) for r in rows]

    def dim(self):
        return 2

    def reshape(self, *_):
        return [x for row in self.rows for x in row]


class NothingToCompute(unittest.TestCase):
    """Calls with an empty dim answer as SDPA does, after every other check."""

    def run_empty(self, q_dims, kv_dims, **kw):
        zeros, fulls = [], []
        saved = flashrs._zeros_like, flashrs._full_lse
        flashrs._zeros_like = lambda q: zeros.append(q.shape) or FakeTensor(q.shape, 0)
        flashrs._full_lse = lambda q, rows, value: fulls.append((rows, value)) or FakeTensor(rows, 0, "float32")
        try:
            with Allocations():
                q, k, v = tensors(q=q_dims, kv=kv_dims)
                flashrs.attention(q, k, v, return_lse=True, **kw)
        finally:
            flashrs._zeros_like, flashrs._full_lse = saved
        return zeros, fulls

    def test_empty_queries_and_no_keys(self):
        self.assertEqual(self.run_empty((2, 8, 0, 64), (2, 2, 256, 64)), ([(2, 8, 0, 64)], [((2, 8, 0), float("-inf"))]))
        zeros, fulls = self.run_empty((2, 8, 128, 64), (2, 2, 0, 64))
        self.assertEqual((zeros, fulls), ([(2, 8, 128, 64)], [((2, 8, 128), float("-inf"))]))
        zeros, _ = self.run_empty((2, 0, 8, 64), (2, 0, 2, 64), layout="bshd")
        self.assertEqual(zeros, [(2, 0, 8, 64)])

    def test_the_other_checks_still_run(self):
        with self.assertRaises(ValueError) as caught:
            self.run_empty((2, 8, 0, 64), (2, 3, 256, 64))
        self.assertIn("must divide q's 8", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            self.run_empty((2, 8, 7, 36), (2, 2, 0, 36))
        self.assertIn("head dim", str(caught.exception))


class GoodInput(unittest.TestCase):
    def test_checks_pass_for_every_accepted_form(self):
        describe = lambda ts: [flashrs._describe(n, t) for n, t in zip("qkv", ts)]
        check = flashrs._flashrs.check
        self.assertEqual(check(*describe(tensors()), None, True, 0.125), ((2, 8, 128), True))
        self.assertEqual(check(*describe(tensors(dtype="bfloat16")), "bhsd", False, None), ((2, 8, 128), True))
        # [B, S, H, D] memory seen through a transpose to [B, H, S, D] (SDPA callers' usual q).
        q, k, v = tensors()
        q._strides = (128 * 8 * 64, 64, 8 * 64, 1)
        k._strides = v._strides = (256 * 2 * 64, 64, 2 * 64, 1)
        self.assertEqual(check(*describe((q, k, v)), None, False, None), ((2, 8, 128), True))
        # Multi-query k and v (one head) are contiguous in both layouts: they must take q's
        # [B, S, H, D] memory order rather than read as [B, H, S, D] (seen on the H100).
        q, k, v = tensors(kv=(2, 1, 256, 64))
        q._strides = (128 * 8 * 64, 64, 8 * 64, 1)
        self.assertEqual(check(*describe((q, k, v)), None, False, None), ((2, 8, 128), True))

    @unittest.skipIf(_has_cuda_driver(), "launches on the fake addresses where a GPU is present")
    def test_accepted_input_reaches_the_gpu(self):
        with Allocations():
            with self.assertRaises(RuntimeError) as caught:
                flashrs.attention(*tensors(), causal=True, return_lse=True)
        self.assertIn("no CUDA driver found", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
