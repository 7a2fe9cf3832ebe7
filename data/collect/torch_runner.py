"""The PyTorch side of the collector: builds a plan item's work on a device and times it.

Only this module and `joulecast.data.collect.torch_models` import torch (the `[collect]` extra). Time per window comes from
CUDA events on a GPU, from the host clock on the CPU (where the runners are tested).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from joulecast.data.collect.plan import PlanItem
from joulecast.data.errors import InputError, JoulecastError

TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_EW = {"add": lambda x, y: x + y, "mul": lambda x, y: x * y,
       "gelu": lambda x, y: F.gelu(x, approximate="tanh"), "silu": lambda x, y: F.silu(x)}


class RunnerUnavailable(JoulecastError):
    """The requested device is not there."""


class Step:
    """A prepared unit of work: `run(n)` executes it n times and returns the device-timed seconds."""

    def __init__(self, fn: Callable[[], Any], device: torch.device, keep: Any = None):
        self._fn, self._device, self._keep = fn, device, keep

    def run(self, iterations: int) -> float:
        if self._device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iterations):
                self._fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        for _ in range(iterations):
            self._fn()
        return time.perf_counter() - t0

    def close(self) -> None:
        self._fn = self._keep = None  # type: ignore[assignment]
        gc.collect()
        if self._device.type == "cuda":
            torch.cuda.empty_cache()


class TorchRunner:
    """Turns plan items into `Step`s on one device (`cuda`, `cuda:1`, or `cpu` for tests)."""

    def __init__(self, device: str = "cuda"):
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RunnerUnavailable("no CUDA device visible to PyTorch; collecting needs an NVIDIA GPU")
        self.device = torch.device(device)
        torch.manual_seed(0)

    def describe(self) -> dict[str, str]:
        info = {"torch": str(torch.__version__), "device": str(self.device)}
        if self.device.type == "cuda":
            info.update(cuda=str(torch.version.cuda), device_name=torch.cuda.get_device_name(self.device))
        return info

    def prepare(self, item: PlanItem) -> Step:
        if item.kind == "kernel":
            return self._kernel(item)
        return self._model(item)

    def _rand(self, *shape: int, dtype: str = "bf16") -> torch.Tensor:
        return torch.randn(*shape, device=self.device, dtype=TORCH_DTYPES[dtype])

    def _kernel(self, item: PlanItem) -> Step:
        s, op, dt = item.sizes, item.op, item.dtype
        if op == "gemm" and dt == "fp8":
            return self._fp8_gemm(s["m"], s["n"], s["k"])
        if dt not in TORCH_DTYPES:
            raise InputError("dtype", f"the PyTorch runner has no {dt} {op}; allowed: {', '.join(TORCH_DTYPES)}")
        if op == "gemm":
            a, b = self._rand(s["m"], s["k"], dtype=dt), self._rand(s["k"], s["n"], dtype=dt)
            return Step(lambda: torch.matmul(a, b), self.device, (a, b))
        if op == "attention":
            q = self._rand(s["batch"], s["heads"], s["seq_q"], s["head_dim"], dtype=dt)
            k, v = (self._rand(s["batch"], s["kv_heads"], s["seq_kv"], s["head_dim"], dtype=dt) for _ in range(2))
            gqa, causal = s["heads"] != s["kv_heads"], bool(s["causal"])
            return Step(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa),
                        self.device, (q, k, v))
        if op in ("layernorm", "rmsnorm", "softmax"):
            x, w = self._rand(s["rows"], s["cols"], dtype=dt), torch.ones(s["cols"], device=self.device,
                                                                         dtype=TORCH_DTYPES[dt])
            fn = {"layernorm": lambda: F.layer_norm(x, (s["cols"],), w),
                  "rmsnorm": lambda: F.rms_norm(x, (s["cols"],), w),
                  "softmax": lambda: torch.softmax(x, dim=-1)}[op]
            return Step(fn, self.device, (x, w))
        x, y = self._rand(s["elements"], dtype=dt), self._rand(s["elements"], dtype=dt)
        ew = _EW[op]
        return Step(lambda: ew(x, y), self.device, (x, y))

    def _fp8_gemm(self, m: int, n: int, k: int) -> Step:
        """e4m3 inputs, bf16 output, unit scales, through torch._scaled_mm (needs fp8 tensor cores: sm_89 or newer)."""
        if self.device.type != "cuda" or torch.cuda.get_device_capability(self.device) < (8, 9):
            raise InputError("dtype", "fp8 GEMMs need a GPU with fp8 tensor cores (compute capability 8.9 or newer)")
        a = self._rand(m, k).to(torch.float8_e4m3fn)
        b = self._rand(n, k).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt's fp8 path requires
        one = torch.ones((), device=self.device, dtype=torch.float32)
        return Step(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                    self.device, (a, b, one))

    def _model(self, item: PlanItem) -> Step:
        from joulecast.data.models import model_entry
        from joulecast.data.collect.torch_models import Transformer

        if item.dtype not in TORCH_DTYPES:
            raise InputError("dtype", f"the PyTorch runner builds models in {', '.join(TORCH_DTYPES)}, not {item.dtype}")
        dtype = TORCH_DTYPES[item.dtype]
        config = {**model_entry(item.model or "")["config"], **item.overrides}
        with torch.device(self.device):
            model = Transformer(config).to(dtype)
        batch, seq = item.batch or 1, item.seq or 1
        vocab = model.embed.num_embeddings
        if item.phase == "training":
            model.train()
            tokens = torch.randint(0, vocab, (batch, seq), device=self.device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=self.device.type != "cuda",
                                    fused=self.device.type == "cuda")

            def train() -> None:
                opt.zero_grad(set_to_none=True)
                model(tokens).float().pow(2).mean().backward()
                opt.step()
            return Step(train, self.device, (model, opt, tokens))
        model.eval()
        if item.phase == "decode":
            tokens = torch.randint(0, vocab, (batch, 1), device=self.device)
            caches = [tuple(torch.randn(batch, model.kv_heads, seq, model.head_dim, device=self.device, dtype=dtype)
                            for _ in range(2)) for _ in model.blocks]

            @torch.inference_mode()
            def decode() -> None:
                model(tokens, caches, start=seq - 1)
            return Step(decode, self.device, (model, caches, tokens))
        tokens = torch.randint(0, vocab, (batch, seq), device=self.device)

        @torch.inference_mode()
        def prefill() -> None:
            model(tokens)
        return Step(prefill, self.device, (model, tokens))
