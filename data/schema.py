"""The measurement table: one tidy row per measured configuration, whatever its source.

One declared column list (`MEASUREMENT_COLUMNS`), one validator (`validate_measurements`).
A row's workload is reproducible from `workload_ref` (see `joulecast.data.workload_ref`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import DataError
from joulecast.data.workload import MAX_HOST_DISPATCH_S, host_dispatch_outside

# The `source` of rows the project's own collector measured (`joulecast.data.collect`).
COLLECTOR_SOURCE = "joulecast-collector"
# A clock that moves by more than one DVFS step (15 MHz, gpus.md "SM and memory clocks") during a window is flagged.
CLOCK_STEP_MHZ = 15.0

# name -> (kind, nullable). Kinds: str, int, float, bool.
MEASUREMENT_COLUMNS: Mapping[str, tuple[str, bool]] = {
    "measurement_id": ("str", False),    # unique within a collection / source
    "source": ("str", False),            # joulecast-collector, energaizer, mlenergy, zeus, nvdvfs
    "provenance": ("str", False),        # where the row came from (file and row, or collection id)
    "workload_ref": ("str", True),       # how to rebuild the kernel table (catalog:... or kernels:PATH)
    "kernel_list": ("str", False),       # traced, lowered, partial (lowered, but the run did more work), or none
    "kernel_hash": ("str", True),
    "model": ("str", True),
    "model_family": ("str", True),
    "phase": ("str", True),
    "batch": ("int", True),
    "seq": ("int", True),
    "input_len": ("int", True),
    "output_len": ("int", True),
    "dtype": ("str", True),
    "attention": ("str", True),
    "gpu": ("str", False),
    "gpu_uuid_hash": ("str", True),
    "num_gpus": ("int", True),           # GPUs the row's energy and power are summed over (missing: 1)
    "sm_clock_mhz": ("float", True),     # mean over the measured window
    "sm_clock_min_mhz": ("float", True),
    "sm_clock_max_mhz": ("float", True),
    "memory_clock_mhz": ("float", True),
    "power_limit_w": ("float", True),
    "temperature_c": ("float", True),
    "iterations": ("int", True),
    "repeats": ("int", True),
    "time_s": ("float", False),          # per iteration
    "energy_j": ("float", False),        # per iteration, all `num_gpus` GPUs
    "power_w": ("float", False),         # average over the window
    "idle_power_w": ("float", True),
    "method": ("str", False),            # energy_counter or power_samples
    "spread_rel": ("float", True),       # (max - min) / median of the repeats' energy
    # GiB the item's work held on the device at its peak, its weights, inputs and optimizer state with it (PyTorch's
    # caching allocator's `max_memory_allocated`, reset before the item was built); missing where not measured
    "peak_memory_gb": ("float", True),
    "flag_throttled": ("bool", False),
    "flag_clock_moved": ("bool", False),
    "flag_window_short": ("bool", False),
    "flag_failed_run": ("bool", False),
    # the machine's host time to dispatch one eager kernel launch (s), where its collection states it (the dataset
    # card's `host_dispatch_s`, `joulecast.data.store`); missing: the default (`joulecast.features.arch`)
    "host_dispatch_s": ("float", True),
}
METHODS = ("energy_counter", "power_samples")
_DTYPES = {"str": "string", "int": "Int64", "float": "float64", "bool": "bool"}


def empty_measurements() -> pd.DataFrame:
    return conform(pd.DataFrame({c: [] for c in MEASUREMENT_COLUMNS}))


_KIND_WORDS = {"str": "text", "int": "whole numbers within 64 bits", "float": "numbers", "bool": "true or false"}


def conform(table: pd.DataFrame, origin: str = "measurements") -> pd.DataFrame:
    """Order the columns and give each its declared dtype (missing nullable columns become NA); a column that cannot
    take it is a DataError naming `origin` and the column (an importer's batch of 1e30 raised pandas' TypeError)."""
    out = {}
    for column, (kind, _) in MEASUREMENT_COLUMNS.items():
        values = table[column] if column in table else pd.Series(pd.NA, index=table.index)
        try:
            if kind == "bool":
                values = values.fillna(False) if column in table else pd.Series(False, index=table.index)
            elif kind in ("int", "float"):
                values = pd.to_numeric(values.astype(object).where(values.notna(), np.nan))
            with np.errstate(invalid="ignore"):  # numpy's warning of a cast that fails: the error below says it
                out[column] = values.astype(_DTYPES[kind])
        except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an integer past 64 bits
            raise DataError(f"{origin}: column '{column}' must hold {_KIND_WORDS[kind]} "
                            f"({str(exc).splitlines()[0]})") from None
    return pd.DataFrame(out, index=table.index).reset_index(drop=True)


def _first(table: pd.DataFrame, bad: Any, column: str | None = None) -> str:
    """Where the first offending row came from (its provenance, else its id), and its value: a published set's one
    bad row is found by its file and line, not searched for."""
    i = int(np.flatnonzero(np.asarray(bad, dtype=bool))[0])
    where = table["provenance"].iloc[i] if "provenance" in table and pd.notna(table["provenance"].iloc[i]) else \
        table["measurement_id"].iloc[i] if "measurement_id" in table else f"row {i + 1}"
    if column is None:
        return f" ({where})"
    value = table[column].iloc[i]
    return f" ({where}: {value:g})" if isinstance(value, (int, float, np.number)) else f" ({where}: {value!r})"


def validate_measurements(table: pd.DataFrame, origin: str = "measurements", unique_ids: bool = True) -> pd.DataFrame:
    """Check columns, types and values; return the table conformed to the schema. `unique_ids`: each
    measurement_id at most once (a part, a collection, an import; not several collections together).

    Raises:
        DataError: naming `origin` (the file) and the column that is wrong.
    """
    missing = [c for c, (_, nullable) in MEASUREMENT_COLUMNS.items() if c not in table.columns and not nullable]
    if missing:
        raise DataError(f"{origin}: missing column(s) {', '.join(missing)}")
    extra = sorted(set(table.columns) - set(MEASUREMENT_COLUMNS))
    if extra:
        raise DataError(f"{origin}: unknown column(s) {', '.join(extra)}; the schema is joulecast.data.schema")
    table = conform(table, origin)
    for column, (_, nullable) in MEASUREMENT_COLUMNS.items():
        if not nullable and table[column].isna().any():
            raise DataError(f"{origin}: column '{column}' has missing values{_first(table, table[column].isna())}")
    for column in ("time_s", "energy_j", "power_w"):
        values = table[column].to_numpy(dtype=float)
        bad = ~(np.isfinite(values) & (values > 0))
        if bad.any():
            raise DataError(f"{origin}: column '{column}' must be positive and finite{_first(table, bad, column)}")
    bad = host_dispatch_outside(table["host_dispatch_s"].to_numpy(dtype=float))
    if bad.any():
        raise DataError(f"{origin}: column 'host_dispatch_s' must be from 0 to {MAX_HOST_DISPATCH_S:g} s"
                        f"{_first(table, bad, 'host_dispatch_s')}")
    bad = ~table["method"].isin(METHODS)
    if bad.any():
        raise DataError(f"{origin}: column 'method' must be one of {', '.join(METHODS)}{_first(table, bad, 'method')}")
    if unique_ids:
        check_unique_ids(table["measurement_id"], origin)
    return table


def check_unique_ids(ids: pd.Series, origin: str) -> None:
    """Each measurement id at most once in `ids` (a part, a collection, an import)."""
    duplicated = ids.duplicated()
    if duplicated.any():
        raise DataError(f"{origin}: column 'measurement_id' has duplicates (e.g. {ids[duplicated].iloc[0]!r})")
