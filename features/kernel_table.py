"""Building and validating kernel tables: records of kernels (a lowering's, a kernel list's) into the columns of
`joulecast.data.kernels.KERNEL_COLUMNS`, each kind and its sizes checked against the kinds registry
(`joulecast.features.kinds`)."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.data.kernels import DEFAULTS, DTYPES, KERNEL_COLUMNS, KEY_COLUMNS
from joulecast.features import kinds

# A record's identity, its KEY_COLUMNS in order (its fields over the defaults): one C call, not a generator a record.
_KEY_OF = operator.itemgetter(*KEY_COLUMNS)
_FIELDS = frozenset(KERNEL_COLUMNS)
_needed_by: tuple[Any, Any] = (None, None)


def _needs() -> tuple[list[str], dict[str, int], np.ndarray]:
    """(the size columns some kind needs positive, each kind's row in the table, (kinds + 1, size columns) whether
    the kind needs the column: `kinds.REQUIRED_SIZES` as a table, its last row for a kind it lacks), set again when
    the registry is (a kind added)."""
    global _needed_by
    required = kinds.REQUIRED_SIZES
    if _needed_by[0] is not required:
        columns = list(dict.fromkeys(n for sizes in required.values() for n in sizes))
        table = np.array([[n in sizes for n in columns] for sizes in required.values()] + [[False] * len(columns)])
        _needed_by = (required, (columns, {k: i for i, k in enumerate(required)}, table))
    return _needed_by[1]


def kernel_table(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """`kernel_columns` as a DataFrame."""
    return pd.DataFrame(kernel_columns(records))


def kernel_columns(records: Iterable[Mapping[str, Any]], merge: bool = True) -> dict[str, np.ndarray]:
    """Build a validated kernel table, as one numpy array per column, from kernel records, merging identical kernels
    into `count`. (A DataFrame costs a third of a millisecond to build: the estimate path keeps the arrays.)

    Args:
        records: mappings with any of `KERNEL_COLUMNS` (missing fields take their defaults).
        merge: False keeps every record its own row (`joulecast.features.lower_many` fits rows across sizes, at
            which different kernels may coincide).

    Returns:
        The kernel table's columns, rows in order of first appearance.

    Raises:
        InputError: a record has an unknown field, kind or dtype, or a non-positive size.
    """
    merged: dict[tuple, int] = {}  # identical kernels -> summed count, in order of first appearance
    for i, record in enumerate(records):
        if not record.keys() <= _FIELDS:  # a subset test builds no set of unknown fields for every record
            unknown = sorted(record.keys() - _FIELDS)
            raise InputError(f"kernels[{i}]", f"unknown field(s) {unknown}; allowed: {', '.join(KERNEL_COLUMNS)}")
        key = _KEY_OF({**DEFAULTS, **record})
        if not merge:
            key = (*key, i)  # the record's position keeps it apart
        merged[key] = merged.get(key, 0) + record.get("count", 1)
    keys = list(zip(*merged)) if merged else [()] * len(KEY_COLUMNS)
    columns = {name: _column(name, values) for name, values in zip(KEY_COLUMNS, keys)}
    columns["count"] = np.fromiter(merged.values(), dtype=np.int64, count=len(merged))
    if not merged:
        raise InputError("kernels", "the workload has no kernels")
    _check_columns(columns)
    return columns


def _column(name: str, values: tuple) -> np.ndarray:
    """One column as its dtype; a size past 64 bits (a lowering's product of sizes each in bounds: a 370,729-pixel
    image in a MobileViT config) is one line naming the column, not numpy's OverflowError."""
    try:
        return np.asarray(values, dtype=KERNEL_COLUMNS[name][0])
    except OverflowError:
        i = next(i for i, v in enumerate(values) if isinstance(v, int) and not -2**63 <= v < 2**63)
        raise InputError(f"kernels[{i}].{name}", f"{values[i]:.3g} passes 64 bits: the workload's sizes (a config's "
                                                 "fields, the batch) are too large") from None


def _check_columns(col: Mapping[str, np.ndarray]) -> None:
    checks = (("kind", kinds.KINDS, ""), ("dtype", DTYPES, "dtype "), ("acc_dtype", DTYPES, "dtype "))
    for name, allowed, what in checks:
        if set(col[name].tolist()) <= set(allowed):  # a set of the few distinct values: cheaper than np.isin
            continue
        i = int(np.flatnonzero(~np.isin(col[name], allowed))[0])
        raise InputError(f"kernels[{i}].{name}", f"unknown {what}{col[name][i]!r}; allowed: {', '.join(allowed)}")
    # every size a row's kind needs, all at once (rows of other kinds hold 0s): a non-positive one is reported below
    columns, row_of_kind, needed = _needs()
    at = np.fromiter(map(row_of_kind.get, col["kind"].tolist(), itertools.repeat(len(row_of_kind))), np.intp,
                     len(col["kind"]))
    if ((np.array([col[name] for name in columns]).T <= 0) & needed[at]).any():
        for k, sizes in kinds.REQUIRED_SIZES.items():  # the first kind's first size it lacks, as named in the registry
            rows = col["kind"] == k
            for name in sizes:
                bad = rows & (col[name] <= 0)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise InputError(f"kernels[{i}].{name}", f"a {k} kernel needs {name} > 0, got {col[name][i]}")
    if (col["count"] < 1).any():
        i = int(np.flatnonzero(col["count"] < 1)[0])
        raise InputError(f"kernels[{i}].count", f"must be at least 1, got {col['count'][i]}")


