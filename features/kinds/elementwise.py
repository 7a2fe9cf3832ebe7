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


KIND = KernelKind(name="elementwise", order=4, sizes=("cols",), rule="streaming",
                  streaming=Streaming(elements="cols", ctas="elements", reduction=False, instructions_per_element=16,
                                      transcendental=True),
                  plan_ops=tuple(PlanOp(op, ("elements",), _add(op), _run(op)) for op in _OPS))
