"""`Labels`: a string column of a kernel table as small integer codes into its distinct values.

A kernel table's kind, op and dtypes repeat a handful of values over many rows; compared as Python strings, each
row costs tens of nanoseconds and each lookup a sort. As codes, a comparison or a per-value lookup is one pass over
integers, and many configurations of one model share their codes (`joulecast.features.lower_many`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

# Up to this many rows, a column is encoded through a dict (a few microseconds for a workload's kernels); beyond, by
# pandas' hash table (a column of strings: 1.1 ms for 40,000 rows) or np.unique's sort.
_SMALL = 256


class Labels:
    """Codes (int32, one per row) into `names` (the distinct strings)."""

    __slots__ = ("codes", "names", "_index")

    def __init__(self, codes: np.ndarray, names: Sequence[str]):
        self.codes = np.asarray(codes, dtype=np.int32)
        self.names = np.asarray(names, dtype=object)
        self._index: dict[str, int] | None = None

    @classmethod
    def of(cls, values: Any) -> "Labels":
        """Labels as they are, or any sequence of strings encoded (one sort of the rows)."""
        if isinstance(values, Labels):
            return values
        values = np.asarray(values)
        if len(values) == 1:  # one workload's setting: nothing to sort
            return cls(np.zeros(1, np.int32), [str(values[0])])
        if len(values) > _SMALL:
            if values.dtype == object and pd.api.types.infer_dtype(values, skipna=False) == "string":
                # hashed, not sorted (a quarter of the time on 40,000 rows); the names sorted all the same
                codes, names = pd.factorize(values, sort=True)
                return cls(codes, np.asarray(names, dtype=object))
            names, codes = np.unique(values.astype(str), return_inverse=True)
            return cls(codes.ravel(), names.astype(object))
        listed = [str(v) for v in values.tolist()]
        names = sorted(set(listed))  # sorted, as np.unique sorts: the same codes either way
        index = {name: i for i, name in enumerate(names)}
        return cls(np.array([index[v] for v in listed], np.int32), names)

    @classmethod
    def concatenate(cls, parts: Iterable["Labels"]) -> "Labels":
        """Several columns' labels end to end, over the union of their names."""
        parts = list(parts)
        names = sorted(set().union(*(p.names.tolist() for p in parts)))
        at = {name: i for i, name in enumerate(names)}
        return cls(np.concatenate([np.array([at[n] for n in p.names], np.int32)[p.codes] if len(p.names) else
                                   p.codes for p in parts]), names)

    def _code(self, name: str) -> int:
        if self._index is None:
            self._index = {str(n): i for i, n in enumerate(self.names)}
        return self._index.get(name, -1)

    def __eq__(self, other: object) -> np.ndarray:  # type: ignore[override]
        return self.codes == self._code(str(other))

    def __ne__(self, other: object) -> np.ndarray:  # type: ignore[override]
        return self.codes != self._code(str(other))

    __hash__ = None  # type: ignore[assignment]

    def isin(self, values: Iterable[str]) -> np.ndarray:
        """Per row, whether its name is one of `values`: decided once per distinct name (np.isin's sort costs 25 us
        even on a handful of rows)."""
        wanted = set(map(str, values))
        return np.array([str(n) in wanted for n in self.names] or [False])[self.codes]

    def lookup(self, table: Mapping[str, float], default: float, key: Callable[[str], str] = str) -> np.ndarray:
        """Per row, `table[key(name)]` (`default` for a name not in it), looked up once per distinct name."""
        names = self.names.tolist()  # a list iterates faster than an object array
        if not names:
            return np.zeros(len(self.codes))
        values = [table.get(n, default) for n in names] if key is str else [table.get(key(n), default) for n in names]
        return np.array(values, dtype=float)[self.codes]

    def __getitem__(self, rows: Any) -> "Labels":
        return Labels(self.codes[rows], self.names)

    def __len__(self) -> int:
        return len(self.codes)

    def strings(self) -> np.ndarray:
        """The column as an object array of strings."""
        return self.names[self.codes] if len(self.codes) else np.array([], dtype=object)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.strings()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"Labels({len(self.codes)} rows of {self.names.tolist()})"


def plain(columns: Mapping[str, Any]) -> dict[str, Any]:
    """Columns with any `Labels` as strings (for a DataFrame)."""
    return {name: values.strings() if isinstance(values, Labels) else values for name, values in columns.items()}
