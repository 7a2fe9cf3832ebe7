"""The kernel table: one row per distinct kernel of a workload, with its repeat count.

Every later stage is column arithmetic over this table, so it has one declared column list
(`KERNEL_COLUMNS`), one builder (`kernel_table`) and one validator (`validate_kernel_table`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError

KINDS = ("gemm", "attention", "softmax", "norm", "elementwise", "embedding", "conv2d")
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}

# name -> (numpy dtype, default). Unused fields of a kind keep the default, so rows dedupe cleanly.
KERNEL_COLUMNS: Mapping[str, tuple[str, Any]] = {
    "kind": ("object", ""),          # one of KINDS
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
_KEY_COLUMNS = [c for c in KERNEL_COLUMNS if c != "count"]
_DEFAULTS = {name: default for name, (_, default) in KERNEL_COLUMNS.items()}

# The size columns each kind must have positive.
_REQUIRED_SIZES = {
    "gemm": ("m", "n", "k", "batch"),
    "conv2d": ("m", "n", "k", "conv_in_elements"),
    "attention": ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"),
    "softmax": ("rows", "cols"),
    "norm": ("rows", "cols"),
    "elementwise": ("cols",),
    "embedding": ("rows", "cols"),
}


def kernel_table(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Build a validated kernel table from kernel records, merging identical kernels into `count`.

    Args:
        records: mappings with any of `KERNEL_COLUMNS` (missing fields take their defaults).

    Returns:
        The kernel table, in order of first appearance.

    Raises:
        InputError: a record has an unknown field, kind or dtype, or a non-positive size.
    """
    merged: dict[tuple, int] = {}  # identical kernels -> summed count, in order of first appearance
    for i, record in enumerate(records):
        unknown = record.keys() - KERNEL_COLUMNS.keys()
        if unknown:
            raise InputError(f"kernels[{i}]", f"unknown field(s) {sorted(unknown)}; allowed: {', '.join(KERNEL_COLUMNS)}")
        key = tuple(record.get(name, _DEFAULTS[name]) for name in _KEY_COLUMNS)
        merged[key] = merged.get(key, 0) + record.get("count", 1)
    keys = list(zip(*merged)) if merged else [()] * len(_KEY_COLUMNS)
    columns = {name: np.asarray(values, dtype=KERNEL_COLUMNS[name][0]) for name, values in zip(_KEY_COLUMNS, keys)}
    columns["count"] = np.fromiter(merged.values(), dtype=np.int64, count=len(merged))
    if not merged:
        raise InputError("kernels", "the workload has no kernels")
    _check_columns(columns)  # on the arrays in hand: reading them back from the table costs more
    return pd.DataFrame(columns)


def validate_kernel_table(table: pd.DataFrame) -> pd.DataFrame:
    """Check a kernel table's columns and values; return it unchanged.

    Raises:
        InputError: naming the row and the field that is wrong, and what is allowed.
    """
    missing = [c for c in KERNEL_COLUMNS if c not in table.columns]
    if missing:
        raise InputError("kernels", f"missing column(s) {missing}")
    if table.empty:
        raise InputError("kernels", "the workload has no kernels")
    _check_columns({name: table[name].to_numpy() for name in KERNEL_COLUMNS})
    return table


def _check_columns(col: Mapping[str, np.ndarray]) -> None:
    bad = ~np.isin(col["kind"], KINDS)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"kernels[{i}].kind", f"unknown {col['kind'][i]!r}; allowed: {', '.join(KINDS)}")
    for name in ("dtype", "acc_dtype"):
        bad = ~np.isin(col[name], DTYPES)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"kernels[{i}].{name}", f"unknown dtype {col[name][i]!r}; allowed: {', '.join(DTYPES)}")
    for kind, sizes in _REQUIRED_SIZES.items():
        rows = col["kind"] == kind
        for name in sizes:
            bad = rows & (col[name] <= 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InputError(f"kernels[{i}].{name}", f"a {kind} kernel needs {name} > 0, got {col[name][i]}")
    if (col["count"] < 1).any():
        i = int(np.flatnonzero(col["count"] < 1)[0])
        raise InputError(f"kernels[{i}].count", f"must be at least 1, got {col['count'][i]}")


def kernel_table_hash(table: pd.DataFrame) -> str:
    """Content hash of a kernel table (order-independent), for caching and dataset identity."""
    canonical = table[list(KERNEL_COLUMNS)].sort_values(_KEY_COLUMNS, kind="stable").to_csv(index=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def stack(tables: Mapping[int, pd.DataFrame]) -> pd.DataFrame:
    """Stack several workloads' kernel tables into one, with a `workload_id` column."""
    frames = list(tables.values())
    out = pd.concat(frames, ignore_index=True)  # one id column at the end: an assign per table costs more than this
    out["workload_id"] = np.repeat(np.fromiter(tables.keys(), np.int64, len(tables)), [len(t) for t in frames])
    return out
