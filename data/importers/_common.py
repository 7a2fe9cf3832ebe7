"""What every importer shares: checking that a CSV has the columns it reads."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from joulecast.data.errors import DataError, InputError


def read_csv(path: Path, columns: Iterable[str], numbers: Iterable[str] = ()) -> pd.DataFrame:
    """Read a source CSV, naming the file and the first missing column on error; each of `numbers` (columns the
    importer computes with) must hold a finite number in every row, and a cell that does not is named by its file,
    line and column (before, an edited or truncated file's 'abc' surfaced as a pandas TypeError)."""
    if not path.exists():
        raise InputError("PATH", f"{path} is missing")
    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a CSV that can be read ({str(exc).splitlines()[0]})") from None
    for column in columns:
        if column not in table:
            raise DataError(f"{path}: missing column '{column}'")
    for column in numbers:
        values = pd.to_numeric(table[column], errors="coerce").astype(float)
        bad = ~np.isfinite(values.to_numpy())
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            cell = table[column].iloc[i]
            got = "a blank cell" if pd.isna(cell) else repr(cell if isinstance(cell, str) else float(cell))
            raise DataError(f"{path} row {i + 2}, column '{column}': must be a finite number, got {got}")
        if not pd.api.types.is_numeric_dtype(table[column]):  # numbers written as text; integers stay integers
            table[column] = values
    return table


def find_files(root: Path, patterns: Iterable[str], layout: str) -> list[Path]:
    """The files under `root` matching any of `patterns`; an error naming the expected layout when none does."""
    files = sorted({p for pattern in patterns for p in root.glob(pattern)})
    if not files:
        raise InputError("PATH", f"{root} holds none of {', '.join(patterns)} (expected {layout})")
    return files
