"""Single-kernel workloads (a GEMM shape, an attention call, a norm, a softmax, an elementwise op), as the
collector's plans name them: `kernel_workload("gemm", dtype="bf16", m=4096, n=4096, k=4096)`.

The same spec drives the physics estimate (here) and the PyTorch runner (`joulecast.data.collect.torch_runner`), so a
measured kernel and its estimate describe one thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulecast.data.errors import require, require_choice
from joulecast.data.kernels import DTYPES, check_kernel_size
from joulecast.data.workload import Workload
from joulecast.features.builder import KernelBuilder
from joulecast.features.kernel_table import kernel_columns
from joulecast.features.kinds import PLAN_OPS

# op -> the size fields it takes (all positive integers; attention also takes `causal`), from the kinds registry.
KERNEL_OPS: Mapping[str, tuple[str, ...]] = {name: op.sizes for name, op in PLAN_OPS.items()}


def check_kernel_spec(op: str, sizes: Mapping[str, Any], field: str = "kernel") -> dict[str, int]:
    """The validated integer sizes of a kernel spec (extra keys are an error, naming the field)."""
    require_choice(op, PLAN_OPS, f"{field}.op")
    spec = PLAN_OPS[op]
    allowed = set(spec.sizes) | set(spec.options)
    extra = sorted(set(sizes) - allowed)
    require(not extra, f"{field}.{extra[0] if extra else ''}", f"not a size of {op}; allowed: {', '.join(sorted(allowed))}")
    out: dict[str, int] = {}
    for name in spec.sizes:
        out[name] = check_kernel_size(sizes.get(name), f"{field}.{name}")  # 1e9 or 8.0 read as the count
    if spec.check:
        spec.check(out, sizes, field)
    return out


def kernel_workload(op: str, dtype: str = "bf16", **sizes: Any) -> Workload:
    """One kernel launch as a workload (physics-ready); fp8 and int8 apply to GEMMs only."""
    require_choice(dtype, DTYPES, "dtype")
    s = check_kernel_spec(op, sizes)
    require(op == "gemm" or dtype not in ("fp8", "int8"), "dtype", f"{dtype} applies to gemm only, not {op}")
    b = KernelBuilder(dtype=dtype)
    PLAN_OPS[op].add(b, s)
    name = f"{op}/" + "/".join(f"{k}{int(v)}" for k, v in s.items()) + f"/{dtype}"
    return Workload(name=name, columns=kernel_columns(b.records), model=None, phase="kernel", batch=s.get("batch", 1),
                    dtype=dtype, source="kernel", params=0)
