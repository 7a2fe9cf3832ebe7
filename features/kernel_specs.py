"""Single-kernel workloads (a GEMM shape, an attention call, a norm, a softmax, an elementwise op), as the
collector's plans name them: `kernel_workload("gemm", dtype="bf16", m=4096, n=4096, k=4096)`.

The same spec drives the physics estimate (here) and the PyTorch runner (`joulecast.data.collect.torch_runner`), so a
measured kernel and its estimate describe one thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulecast.data.kernels import DTYPES, kernel_table
from joulecast.data.workload import Workload
from joulecast.data.errors import InputError, require
from joulecast.features.builder import KernelBuilder

# op -> the size fields it takes (all positive integers, except `causal`).
KERNEL_OPS: Mapping[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attention": ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"),
    "layernorm": ("rows", "cols"),
    "rmsnorm": ("rows", "cols"),
    "softmax": ("rows", "cols"),
    "add": ("elements",),
    "mul": ("elements",),
    "gelu": ("elements",),
    "silu": ("elements",),
}
_EW_OPS = {"add": "pointwise_add", "mul": "pointwise_mul", "gelu": "gelu", "silu": "silu"}


def check_kernel_spec(op: str, sizes: Mapping[str, Any], field: str = "kernel") -> dict[str, int]:
    """The validated integer sizes of a kernel spec (extra keys are an error, naming the field)."""
    require(op in KERNEL_OPS, f"{field}.op", f"unknown {op!r}; allowed: {', '.join(KERNEL_OPS)}")
    allowed = set(KERNEL_OPS[op]) | ({"causal"} if op == "attention" else set())
    extra = sorted(set(sizes) - allowed)
    require(not extra, f"{field}.{extra[0] if extra else ''}", f"not a size of {op}; allowed: {', '.join(sorted(allowed))}")
    out: dict[str, int] = {}
    for name in KERNEL_OPS[op]:
        value = sizes.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InputError(f"{field}.{name}", f"must be a positive integer, got {value!r}")
        out[name] = value
    if op == "attention":
        require(out["heads"] % out["kv_heads"] == 0, f"{field}.kv_heads", "must divide heads")
        out["causal"] = bool(sizes.get("causal", out["seq_q"] > 1))
    return out


def kernel_workload(op: str, dtype: str = "bf16", **sizes: Any) -> Workload:
    """One kernel launch as a workload (physics-ready); fp8 applies to GEMMs only."""
    require(dtype in DTYPES, "dtype", f"unknown {dtype!r}; allowed: {', '.join(DTYPES)}")
    s = check_kernel_spec(op, sizes)
    require(op == "gemm" or dtype not in ("fp8", "int8"), "dtype", f"{dtype} applies to gemm only, not {op}")
    b = KernelBuilder(dtype=dtype)
    if op == "gemm":
        b._add(kind="gemm", op="matmul", batch=1, m=s["m"], n=s["n"], k=s["k"], **b._gemm_dtypes())
    elif op == "attention":
        b.attention(s["batch"], s["heads"], s["kv_heads"], s["seq_q"], s["seq_kv"], s["head_dim"], bool(s["causal"]))
    elif op in ("layernorm", "rmsnorm"):
        b.norm(op, s["rows"], s["cols"])
    elif op == "softmax":
        b.softmax(s["rows"], s["cols"])
    else:
        b.ew(_EW_OPS[op], s["elements"])
    name = f"{op}/" + "/".join(f"{k}{int(v)}" for k, v in s.items()) + f"/{dtype}"
    return Workload(name=name, kernels=kernel_table(b.records), model=None, phase="kernel", batch=s.get("batch", 1),
                    dtype=dtype, source="kernel")
