"""The measurement store: `<root>/<gpu>/<collection-id>/part-*.parquet` plus a dataset card per collection, and
beside the rows the meter readings they were made from (`samples-*.parquet`, which `load_store` leaves alone).

Writes are atomic (a temporary file in the same folder, then `os.replace`), so an interrupted collection leaves only
whole part files; `existing_ids` lets a resumed collection skip what is already stored.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
import yaml

from joulecast.data.errors import DataError, InputError
from joulecast.data.files import write_atomic
from joulecast.data.schema import COLLECTOR_SOURCE, check_unique_ids, empty_measurements, validate_measurements
from joulecast.data.workload_ref import as_run

CARD_NAME = "CARD.yaml"


def _parquet_engine() -> None:
    """Parquet needs pyarrow, which the core install leaves out: one line naming the extras that bring it."""
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None:
        raise DataError("the measurement store is Parquet, which needs pyarrow: pip install 'joulecast[train]' "
                        "(or '[collect]')")


def _read_parquet(path: Path, **kwargs: object) -> pd.DataFrame:
    _parquet_engine()
    return pd.read_parquet(path, **kwargs)


# A collection id names one folder under its GPU's: a letter or digit, then letters, digits, '.', '_' or '-' (no
# separator, so no id reaches outside the store, as '../../etc' or 'a/b' would).
COLLECTION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_collection_id(collection_id: Any, field: str) -> str:
    if not isinstance(collection_id, str) or not COLLECTION_ID.fullmatch(collection_id):
        raise InputError(field, "must be a letter or digit, then letters, digits, '.', '_' or '-' (at most 128; "
                                f"one folder of the store), got {collection_id!r}")
    return collection_id


def collection_dir(root: str | Path, gpu: str, collection_id: str) -> Path:
    return Path(root) / gpu / check_collection_id(collection_id, "collection")


def write_part(table: pd.DataFrame, root: str | Path, gpu: str, collection_id: str) -> Path:
    """Validate and append one part file to a collection; returns its path."""
    table = validate_measurements(table, origin=f"part for {gpu}/{collection_id}")
    folder = collection_dir(root, gpu, collection_id)
    index = len(list(folder.glob("part-*.parquet"))) if folder.exists() else 0
    path = folder / f"part-{index:05d}.parquet"
    _parquet_engine()
    write_atomic(path, lambda tmp: table.to_parquet(tmp, index=False))
    return path


SAMPLE_COLUMNS = ("measurement_id", "window", "time_s", "energy_j", "power_w", "sm_clock_mhz", "memory_clock_mhz",
                  "temperature_c", "power_limit_w", "throttle")


def write_samples(table: pd.DataFrame, root: str | Path, gpu: str, collection_id: str) -> Path:
    """Append one file of raw meter readings to a collection; returns its path."""
    missing = [c for c in SAMPLE_COLUMNS if c not in table.columns]
    if missing:
        raise DataError(f"samples for {gpu}/{collection_id}: missing column(s) {', '.join(missing)}")
    folder = collection_dir(root, gpu, collection_id)
    index = len(list(folder.glob("samples-*.parquet"))) if folder.exists() else 0
    path = folder / f"samples-{index:05d}.parquet"
    _parquet_engine()
    write_atomic(path, lambda tmp: table[list(SAMPLE_COLUMNS)].to_parquet(tmp, index=False))
    return path


def load_samples(root: str | Path, gpu: str, collection_id: str) -> pd.DataFrame:
    """A collection's raw meter readings (empty where it has none)."""
    parts = sorted(collection_dir(root, gpu, collection_id).glob("samples-*.parquet"))
    if not parts:
        return pd.DataFrame({c: [] for c in SAMPLE_COLUMNS})
    return pd.concat([_read_parquet(p) for p in parts], ignore_index=True)


def write_card(root: str | Path, gpu: str, collection_id: str, card: Mapping[str, Any]) -> Path:
    """Write (or replace) the collection's dataset card: what, when, how."""
    path = collection_dir(root, gpu, collection_id) / CARD_NAME
    write_atomic(path, lambda tmp: tmp.write_text(yaml.safe_dump(dict(card), sort_keys=False)))
    return path


def read_card(path: str | Path) -> dict[str, Any]:
    """A dataset card's contents ({} where there is none yet)."""
    path = Path(path)
    if not path.exists():
        return {}
    loaded = yaml.safe_load(path.read_text())
    if not isinstance(loaded, dict):
        raise DataError(f"{path}: a dataset card must hold a YAML mapping")
    return loaded


# Where a folder's part files lie: a store's (GPU/COLLECTION/), one GPU's folder's (COLLECTION/), one collection's
STORE_DEPTHS = ("*/*/part-*.parquet", "*/part-*.parquet", "part-*.parquet")


def load_store(root: str | Path) -> pd.DataFrame:
    """All measurements under `root`, validated file by file: a store, or one GPU's folder of it, or one collection
    (the first of STORE_DEPTHS that holds part files).

    Raises:
        InputError: `root` does not exist.
        DataError: a part file breaks the schema (the message names the file and the column).
    """
    root = Path(root)
    if not root.exists():
        raise InputError("--store", f"{root} does not exist")
    parts = next((found for found in (sorted(root.glob(p)) for p in STORE_DEPTHS) if found), [])
    return _load_parts(parts, root)


def load_collection(root: str | Path, gpu: str, collection_id: str) -> pd.DataFrame:
    """The measurements of one collection (empty where it has none yet)."""
    folder = collection_dir(root, gpu, collection_id)
    return _load_parts(sorted(folder.glob("part-*.parquet")), folder)


def _load_parts(parts: list[Path], origin: Path) -> pd.DataFrame:
    """The parts' rows, each part validated, then each collection's parts together: a measurement id names an item
    of its collection's plan (the resume key), so two collections that measured the same item (a plan run again
    under another collection id, as a repeat is) each hold it, and only within one collection is an id unique."""
    if not parts:
        return empty_measurements()
    tables = []
    for path in parts:
        try:
            raw = _read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for a corrupt file
            raise DataError(f"{path}: not a readable Parquet file ({exc.__class__.__name__})") from None
        tables.append(validate_measurements(_as_run(_with_card_dispatch(raw, path)), origin=str(path)))
    by_collection: dict[Path, list[pd.DataFrame]] = {}
    for path, table in zip(parts, tables):
        by_collection.setdefault(path.parent, []).append(table)
    for folder, own in by_collection.items():
        if len(own) > 1:  # each part was validated whole above; across parts only the ids can clash
            check_unique_ids(pd.concat([t["measurement_id"] for t in own], ignore_index=True), str(folder))
    return validate_measurements(pd.concat(tables, ignore_index=True), origin=str(origin), unique_ids=False)


def _as_run(raw: pd.DataFrame) -> pd.DataFrame:
    """A part's rows with the collector's catalog references naming the fusions its PyTorch runner applies
    (`joulecast.data.workload_ref.as_run`): collections written before the references named them (the H200's of
    2026-11-30) ran GPT-2's activation as one kernel all the same."""
    if raw.empty or "workload_ref" not in raw or "source" not in raw:
        return raw
    ours = (raw["source"] == COLLECTOR_SOURCE).to_numpy() & raw["workload_ref"].notna().to_numpy()
    if not ours.any():
        return raw
    refs = raw["workload_ref"].to_numpy(dtype=object).copy()
    refs[ours] = [as_run(r) for r in refs[ours]]
    return raw.assign(workload_ref=refs)


def _with_card_dispatch(raw: pd.DataFrame, part: Path) -> pd.DataFrame:
    """A part's rows with their collection card's `host_dispatch_s` (the machine's, stated once for the collection)
    where the rows do not carry one themselves."""
    card = read_card(part.parent / CARD_NAME)
    if "host_dispatch_s" not in card:
        return raw
    stated = card["host_dispatch_s"]
    if isinstance(stated, bool) or not isinstance(stated, (int, float)):
        raise DataError(f"{part.parent / CARD_NAME}: host_dispatch_s must be a number of seconds, got {stated!r}")
    if "host_dispatch_s" in raw:
        return raw.assign(host_dispatch_s=raw["host_dispatch_s"].fillna(float(stated)))
    return raw.assign(host_dispatch_s=float(stated))


def existing_ids(root: str | Path, gpu: str, collection_id: str) -> set[str]:
    """Measurement ids already stored in a collection (for resuming)."""
    folder = collection_dir(root, gpu, collection_id)
    ids: set[str] = set()
    for path in sorted(folder.glob("part-*.parquet")):
        ids.update(_read_parquet(path, columns=["measurement_id"])["measurement_id"].astype(str))
    return ids
