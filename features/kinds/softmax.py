"""Softmax over rows (attention probabilities): ATen's persistent kernel, several passes over each row."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulecast.features.kinds import KernelKind, PlanOp, Streaming


def _run(torch: Any, rand: Any, s: Mapping[str, Any], dtype: str, device: Any) -> tuple[Any, tuple]:
    x = rand(s["rows"], s["cols"], dtype=dtype)
    return (lambda: torch.softmax(x, dim=-1)), (x,)


KIND = KernelKind(name="softmax", order=2, sizes=("rows", "cols"), rule="streaming",
                  streaming=Streaming(elements="rows x cols", ctas="softmax", reduction=True,
                                      instructions_per_element=40, flops_per_element=5),
                  plan_ops=(PlanOp("softmax", ("rows", "cols"), lambda b, s: b.softmax(s["rows"], s["cols"]), _run),))
