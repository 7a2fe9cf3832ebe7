"""The kernel table: one row per distinct kernel of a workload, with its repeat count.

Every later stage is column arithmetic over this table, so it has one declared column list (`KERNEL_COLUMNS`);
its builder and validator (`joulecast.features.kernel_table`) check each kind against the kinds registry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.files import check_count
from joulecast.data.labels import Labels

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
# A training step's backward kernels are named by their forward op and one of these (`features.lowering.training_step`,
# `features.train_step`): the input and weight gradients, a streaming op's and attention's backward, a recomputed op.
BACKWARD_SUFFIXES = ("_dgrad", "_wgrad", "_bwd", "_recompute")
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
# The dtypes as the projects people copy them from write them: PyTorch's names (`torch.bfloat16`, a Hugging Face
# config's `torch_dtype`), vLLM's `--dtype` (half, float) and its FP8 formats, each at its catalog name's rate (both
# FP8 formats run on the same tensor-core path, data/gpus/*.yaml's fp8 peak).
_DTYPE_SPELLINGS = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
                    "float64": "fp64", "double": "fp64", "tfloat32": "tf32", "float8": "fp8", "float8_e4m3fn": "fp8",
                    "float8_e4m3": "fp8", "float8_e5m2": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "e4m3": "fp8",
                    "e5m2": "fp8"}


def dtype_name(value: object) -> object:
    """A dtype by its catalog name (`DTYPES`) as people write it: any case, PyTorch's and vLLM's names ("bfloat16",
    "torch.float16", "half", "float8_e4m3fn"); anything else as given, for the caller's check to name."""
    if not isinstance(value, str):
        return value
    key = value.strip().lower().removeprefix("torch.")
    return key if key in DTYPE_BYTES else _DTYPE_SPELLINGS.get(key, value)


# A kernel's largest size (a GEMM's M, N or K, a tensor's elements): 2^40 (1.1e12), six times the largest catalog
# GPU's memory in bytes (the B200's 180 GB, data/gpus/b200.yaml, its datasheet), so that the kernel table's 64-bit
# integers hold it (10^30 raised numpy's OverflowError).
MAX_KERNEL_SIZE = 2**40

# name -> (numpy dtype, default). Unused fields of a kind keep the default, so rows dedupe cleanly.
KERNEL_COLUMNS: Mapping[str, tuple[str, Any]] = {
    "kind": ("object", ""),          # one of joulecast.features.kinds.KINDS
    "op": ("object", ""),            # linear, bmm, flash, layernorm, rmsnorm, gelu, pointwise_add, ...
    "dtype": ("object", "bf16"),     # input (storage) dtype
    "acc_dtype": ("object", "bf16"),  # accumulate / output dtype (a typecast's target)
    "tensor_core": ("bool", False),
    "batch": ("int64", 1),           # GEMM batch count; attention batch size
    "m": ("int64", 0),               # GEMM / implicit-GEMM conv dimensions
    "n": ("int64", 0),
    "k": ("int64", 0),
    "rows": ("int64", 0),            # softmax / norm / embedding rows (tokens)
    "cols": ("int64", 0),            # softmax / norm row length; elementwise element count (rows = 1)
    "heads": ("int64", 0),           # fused attention
    "kv_heads": ("int64", 0),
    "seq_q": ("int64", 0),
    "seq_kv": ("int64", 0),
    "head_dim": ("int64", 0),
    "causal": ("bool", False),
    "conv_in_elements": ("int64", 0),  # conv2d input activations N*C*H*W (im2col is not materialised)
    "count": ("int64", 1),
}
KEY_COLUMNS = [c for c in KERNEL_COLUMNS if c != "count"]
STRING_COLUMNS = tuple(c for c, (dtype, _) in KERNEL_COLUMNS.items() if dtype == "object")  # kind, op, dtypes
DEFAULTS = {name: default for name, (_, default) in KERNEL_COLUMNS.items()}

def kernel_table_hash(table: pd.DataFrame) -> str:
    """Content hash of a kernel table (order-independent), for caching and dataset identity."""
    canonical = table[list(KERNEL_COLUMNS)].sort_values(KEY_COLUMNS, kind="stable").to_csv(index=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def stack(tables: Mapping[int, pd.DataFrame | Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack several workloads' kernel tables (DataFrames or columns) into one set of columns, with a `workload_id`
    column."""
    parts = [as_columns(t) for t in tables.values()]
    out = {name: np.concatenate([p[name] for p in parts]) for name in KERNEL_COLUMNS}
    out["workload_id"] = np.repeat(np.fromiter(tables.keys(), np.int64, len(tables)),
                                   [len(p["count"]) for p in parts])
    return out


def as_columns(table: pd.DataFrame | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A kernel table's columns as numpy arrays or `Labels` (a DataFrame's read once; a mapping's as they are)."""
    if isinstance(table, pd.DataFrame):
        return {name: column.to_numpy() for name, column in table.items()}
    return {name: column if isinstance(column, Labels) else np.asarray(column) for name, column in table.items()}


def check_kernel_size(value: Any, field: str) -> int:
    """A kernel's size as given (JSON's 128.0 or 1.28e2 is the count 128): a whole number from 1 to MAX_KERNEL_SIZE,
    else one error naming `field`."""
    return check_count(value, field, MAX_KERNEL_SIZE, high_text="2^40", whole=True)
