"""Elementwise kernels (adds, multiplies, activations, casts, optimizer steps): one flat pass over `cols` elements."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulecast.features.kinds import KernelKind, PlanOp, Streaming

# plan op -> the kernel's op
_OPS = {"add": "pointwise_add", "mul": "pointwise_mul", "div": "scalar_div", "gelu": "gelu", "silu": "silu"}


def _run(op: str):
    def run(torch: Any, rand: Any, s: Mapping[str, Any], dtype: str, device: Any) -> tuple[Any, tuple]:
        x, y = rand(s["elements"], dtype=dtype), rand(s["elements"], dtype=dtype)
        F = torch.nn.functional
        # div: a tensor over a 0-d one, as eager attention scales its scores (torch.full([], sqrt(head_dim)))
        scale = torch.full([], 8.0, dtype=x.dtype, device=x.device)
        call = {"add": lambda: x + y, "mul": lambda: x * y, "div": lambda: x / scale,
                "gelu": lambda: F.gelu(x, approximate="tanh"), "silu": lambda: F.silu(x)}[op]
        return call, (x, y, scale)
    return run


def _add(op: str):
    return lambda builder, s: builder.ew(_OPS[op], s["elements"])


# The ops of eager attention's scores with a broadcast operand, a (rows, cols) mask over `batch` score matrices:
# torch.where(causal_mask, scores, min) with a 0-d min (GPT-2), scores + an additive mask (OPT, Llama, Qwen2); and
# the contiguous ones beside them: scores * a Python float (Llama's scaling), the fp32 upcast (OPT, Qwen2) a cast.
_MASKED = ("where", "mask_add")  # as the kernels are named


def _run_masked(op: str):
    def run(torch: Any, rand: Any, s: Mapping[str, Any], dtype: str, device: Any) -> tuple[Any, tuple]:
        x, m = rand(s["batch"], s["rows"], s["cols"], dtype=dtype), rand(s["rows"], s["cols"], dtype=dtype)
        mask, low = m > 0, torch.full([], -1e4, dtype=x.dtype, device=x.device)
        call = {"where": lambda: torch.where(mask, x, low), "mask_add": lambda: x + m}[op]
        return call, (x, m, mask, low)
    return run


def _add_masked(op: str):
    return lambda builder, s: builder.ew(op, s["batch"] * s["rows"] * s["cols"])


def _run_scale(torch: Any, rand: Any, s: Mapping[str, Any], dtype: str, device: Any) -> tuple[Any, tuple]:
    x = rand(s["elements"], dtype=dtype)
    return (lambda: x * 0.125), (x,)


def _run_cast(torch: Any, rand: Any, s: Mapping[str, Any], dtype: str, device: Any) -> tuple[Any, tuple]:
    x = rand(s["elements"], dtype=dtype)
    return (lambda: x.to(torch.float32)), (x,)


_PLAN_OPS = (*(PlanOp(op, ("elements",), _add(op), _run(op)) for op in _OPS),
             *(PlanOp(op, ("batch", "rows", "cols"), _add_masked(op), _run_masked(op)) for op in _MASKED),
             PlanOp("scale", ("elements",), lambda b, s: b.ew("scalar_mul", s["elements"]), _run_scale),
             PlanOp("cast_fp32", ("elements",), lambda b, s: b.ew("typecast_to_fp32", s["elements"], out="fp32"),
                    _run_cast, dtypes=("bf16", "fp16")))

KIND = KernelKind(name="elementwise", order=4, sizes=("cols",), rule="streaming",
                  streaming=Streaming(elements="cols", ctas="elements", reduction=False, instructions_per_element=16,
                                      transcendental=True),
                  plan_ops=_PLAN_OPS)
