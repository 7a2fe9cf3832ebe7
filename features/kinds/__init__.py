"""Kernel kinds as a registry: each module of this package defines one kind of kernel (the sizes it needs, which
vectorised rule gives its tiles and traffic, its instruction counts, and the single-kernel ops a collection plan can
name with their PyTorch runners) as a module-level `KIND`, and registers itself by being here.

The list of kinds (`KINDS`), the residual's per-kind time shares (`joulecast.features.design`), kernel-table
validation (`joulecast.features.kernel_table`), the plans' kernel ops (`PLAN_OPS`) and the collector's runners all
come from this registry, so a new kind is one module (and its tests). Its rule is one of `RULES`, each a module here
whose functions compute every row at once: a new kind of an existing rule gives parameters, one of a new shape
brings its rule too.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

RULES = ("gemm", "attention", "streaming")


@dataclass(frozen=True)
class PlanOp:
    """A single-kernel op a collection plan can name (`joulecast.features.kernel_specs`): its size fields, how it
    adds its kernel record, and how the collector runs it with PyTorch."""

    name: str
    sizes: tuple[str, ...]
    add: Callable[[Any, Mapping[str, Any]], None]   # (KernelBuilder, validated sizes) -> adds one record
    run: Callable[..., tuple[Callable[[], Any], tuple]]  # (torch, rand, sizes, dtype, device) -> (call, keep-alive)
    dtypes: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16")  # dtypes its workload may have
    check: Callable[[dict, Mapping[str, Any], str], None] | None = None  # more checks (field prefix), derived sizes
    options: tuple[str, ...] = ()                   # fields it takes beside its sizes


@dataclass(frozen=True)
class Streaming:
    """Parameters of the streaming rule (`kinds.streaming`) for one kind (assumptions where not sourced there)."""

    elements: str                      # "cols" (a flat elementwise kernel) or "rows x cols"
    ctas: str                          # "elements" (512 per CTA), "rows" (one per row) or "softmax" (ATen's)
    reduction: bool                    # reads its row in several passes through shared memory
    instructions_per_element: float    # FP32-lane instructions issued per element (streaming.py says why)
    # ... where the kernel runs a CTA a row ("softmax" CTAs above `arch.SOFTMAX_PERSISTENT_MAX_COLS`); None: the same
    row_block_instructions_per_element: float | None = None
    transcendental: bool = False       # its ops add their transcendental arithmetic
    flops_per_element: float | None = None  # fixed; None: by op (`streaming.FLOPS_PER_ELEMENT`)


@dataclass(frozen=True)
class KernelKind:
    name: str
    order: int                          # its place in KINDS (and in the residual's share features)
    sizes: tuple[str, ...]              # size columns it needs positive
    rule: str                           # one of RULES
    streaming: Streaming | None = None  # the streaming rule's parameters
    implicit_input: bool = False        # gemm rule: the A operand is an activation read in place (convolutions)
    plan_ops: tuple[PlanOp, ...] = field(default=())


def per_kind(kind: Any, value: Callable[[KernelKind], float], default: float = 0.0, key: str | None = None
             ) -> np.ndarray:
    """Per row of a `Labels` kind column, a number of its kind (looked up once per distinct kind). A `key` names the
    number: its table of kinds is then built once for the registry, not on every call (an estimate asks eight)."""
    table = _PER_KIND.get(key) if key is not None else None
    if table is None or table[0] is not REGISTRY:  # a kind added since (the registry replaced) builds it again
        table = (REGISTRY, {name: float(value(k)) for name, k in REGISTRY.items()})
        if key is not None:
            _PER_KIND[key] = table
    return kind.lookup(table[1], default)


_PER_KIND: dict[str, tuple[Mapping[str, Any], dict[str, float]]] = {}  # key -> (the registry, kind -> number)


def _discover() -> dict[str, KernelKind]:
    kinds = []
    for module in pkgutil.iter_modules(__path__):
        kind = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if isinstance(kind, KernelKind):
            kinds.append(kind)
    return {k.name: k for k in sorted(kinds, key=lambda k: k.order)}


REGISTRY: Mapping[str, KernelKind] = _discover()
KINDS: tuple[str, ...] = tuple(REGISTRY)
REQUIRED_SIZES: Mapping[str, tuple[str, ...]] = {name: kind.sizes for name, kind in REGISTRY.items()}
PLAN_OPS: Mapping[str, PlanOp] = {op.name: op for kind in REGISTRY.values() for op in kind.plan_ops}
