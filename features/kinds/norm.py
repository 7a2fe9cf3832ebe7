"""Normalisations over rows (layer norm, RMS norm, batch norm): one CTA a row, several passes over it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulecast.features.kinds import KernelKind, PlanOp, Streaming


def _run(op: str):
    def run(torch: Any, rand: Any, s: Mapping[str, Any], dtype: str, device: Any) -> tuple[Any, tuple]:
        x = rand(s["rows"], s["cols"], dtype=dtype)
        w = torch.ones(s["cols"], device=device, dtype=x.dtype)
        F = torch.nn.functional
        norm = F.layer_norm if op == "layernorm" else F.rms_norm
        return (lambda: norm(x, (s["cols"],), w)), (x, w)
    return run


def _add(op: str):
    return lambda builder, s: builder.norm(op, s["rows"], s["cols"])


KIND = KernelKind(name="norm", order=3, sizes=("rows", "cols"), rule="streaming",
                  streaming=Streaming(elements="rows x cols", ctas="rows", reduction=True,
                                      instructions_per_element=40),
                  plan_ops=tuple(PlanOp(op, ("rows", "cols"), _add(op), _run(op)) for op in ("layernorm", "rmsnorm")))
