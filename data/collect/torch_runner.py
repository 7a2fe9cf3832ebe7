"""The PyTorch side of the collector: builds a plan item's work on a device and times it.

Only this module and `joulecast.data.collect.torch_models` import torch (the `[collect]` extra). Time per window comes from
CUDA events on a GPU, from the host clock on the CPU (where the runners are tested).
"""

from __future__ import annotations

import gc
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from joulecast.data.collect.plan import PlanItem
from joulecast.data.errors import InputError, JoulecastError
from joulecast.features.kinds import PLAN_OPS

TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def host_cpu() -> str:
    """The host's CPU model and logical core count, for the dataset card (Linux's /proc/cpuinfo, else `platform`)."""
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
    except OSError:
        names = []
    return f"{names[0] if names else platform.processor() or 'unknown'}, {os.cpu_count()} logical cores"


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

    def peak_memory_gb(self) -> float | None:
        """GiB the work has held on the device at its peak since it was built (`TorchRunner.prepare` resets the
        count); None off a GPU, whose allocator keeps no such count."""
        if self._device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self._device) / 2**30

    def close(self) -> None:
        self._fn = self._keep = None  # type: ignore[assignment]
        gc.collect()
        if self._device.type == "cuda":
            torch.cuda.empty_cache()


class _HostTimed(Step):
    """A step timed by the host clock wherever it runs (an idle wait launches nothing to time with events)."""

    def __init__(self, fn: Callable[[], Any], keep: Any = None):
        super().__init__(fn, torch.device("cpu"), keep)


def _clock_hz(device: torch.device) -> float:
    """The SM clock as torch.cuda._sleep counts it: cycles over the events' time of a 10^7-cycle spin."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.device(device):
        torch.cuda._sleep(1000)  # the first launch loads the kernel
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        end.synchronize()
    return 10_000_000 / (start.elapsed_time(end) / 1e3)


class TorchRunner:
    """Turns plan items into `Step`s on one device (`cuda`, `cuda:1`, or `cpu` for tests)."""

    def __init__(self, device: str = "cuda"):
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RunnerUnavailable("no CUDA device visible to PyTorch; collecting needs an NVIDIA GPU")
        self.device = torch.device(device)
        torch.manual_seed(0)

    def describe(self) -> dict[str, str]:
        # the host sets a host-bound pass's time (data/repeats: two H200 machines' 18.5 and 24.3 us a launch)
        info = {"torch": str(torch.__version__), "device": str(self.device), "host_cpu": host_cpu(),
                "python": platform.python_version()}
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)  # what tells the card (`device_check`)
            info.update(cuda=str(torch.version.cuda), device_name=torch.cuda.get_device_name(self.device),
                        sm_count=str(props.multi_processor_count), compute_capability=f"{props.major}.{props.minor}",
                        memory_gib=f"{props.total_memory / 2**30:.1f}")
        return info

    def prepare(self, item: PlanItem) -> Step:
        if self.device.type == "cuda":  # the item's peak memory counts from here, its weights and inputs with it
            torch.cuda.reset_peak_memory_stats(self.device)
        if item.kind == "kernel":
            return self._kernel(item)
        if item.kind == "wait":
            return self._wait(item)
        return self._model(item)

    def _wait(self, item: PlanItem) -> Step:
        """`spin`: one kernel a launch that polls the SM clock for `us` microseconds (torch.cuda._sleep), as NCCL's
        kernels poll a flag while their peers are late (one thread block here against NCCL's several channels: a
        floor of its power); `idle-context`: the context held and a host sleep, no kernel. On the CPU (tests) a
        spin is a host busy loop."""
        seconds = item.sizes["us"] * 1e-6
        if item.op == "idle-context":
            keep = torch.zeros(1, device=self.device)  # the context, created and held

            def idle() -> None:
                time.sleep(seconds)
            return _HostTimed(idle, keep)
        if self.device.type != "cuda":
            def busy() -> None:
                end = time.perf_counter() + seconds
                while time.perf_counter() < end:
                    pass
            return Step(busy, self.device)
        cycles = max(1, int(seconds * _clock_hz(self.device)))
        return Step(lambda: torch.cuda._sleep(cycles), self.device)

    def _rand(self, *shape: int, dtype: str = "bf16") -> torch.Tensor:
        return torch.randn(*shape, device=self.device, dtype=TORCH_DTYPES[dtype])

    def _kernel(self, item: PlanItem) -> Step:
        """A single kernel, run as its kind's module says (`joulecast.features.kinds`)."""
        op = PLAN_OPS[item.op]
        if item.dtype not in op.dtypes or (item.dtype not in TORCH_DTYPES and item.dtype != "fp8"):
            allowed = [d for d in op.dtypes if d in TORCH_DTYPES or d == "fp8"]
            raise InputError("dtype", f"the PyTorch runner has no {item.dtype} {item.op}; allowed: {', '.join(allowed)}")
        call, keep = op.run(torch, self._rand, item.sizes, item.dtype, self.device)
        return Step(call, self.device, keep)

    def _model(self, item: PlanItem) -> Step:
        from joulecast.data.collect.torch_models import Transformer
        from joulecast.data.models import model_entry

        if item.dtype not in TORCH_DTYPES:
            raise InputError("dtype", f"the PyTorch runner builds models in {', '.join(TORCH_DTYPES)}, not {item.dtype}")
        dtype = TORCH_DTYPES[item.dtype]
        config = {**model_entry(item.model or "")["config"], **item.overrides}
        with torch.device(self.device):
            model = Transformer(config, item.attention).to(dtype)
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
