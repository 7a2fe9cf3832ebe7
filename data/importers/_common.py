"""What every importer shares: checking that a CSV has the columns it reads."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from joulecast.data.errors import DataError, InputError


def read_csv(path: Path, columns: Iterable[str]) -> pd.DataFrame:
    """Read a source CSV, naming the file and the first missing column on error."""
    if not path.exists():
        raise InputError("PATH", f"{path} is missing")
    table = pd.read_csv(path)
    for column in columns:
        if column not in table:
            raise DataError(f"{path}: missing column '{column}'")
    return table


def find_files(root: Path, patterns: Iterable[str], layout: str) -> list[Path]:
    """The files under `root` matching any of `patterns`; an error naming the expected layout when none does."""
    files = sorted({p for pattern in patterns for p in root.glob(pattern)})
    if not files:
        raise InputError("PATH", f"{root} holds none of {', '.join(patterns)} (expected {layout})")
    return files
