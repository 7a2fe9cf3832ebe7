"""Collecting on a fleet: a plan's items dispatched to Dask workers that declare a GPU resource
(`dask worker tcp://HOST:PORT --resources GPU=1`, one worker a GPU), one item per GPU at a time.

Each worker measures with its own meter and runner (a `Station`, opened once per worker process, its idle power read
once before its first item); rows come back to this process, which alone writes the store, so every row is written
once. A worker that dies mid-item loses only that item's measurement: Dask runs the item again on another worker (up
to the scheduler's allowed failures), and the first result to come back is the one stored. Rows are flushed as they
arrive (atomic part files), so a rerun resumes where an interrupted one stopped.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from joulecast.data.collect.collector import (
    FLUSH_S,
    CollectResult,
    Meter,
    Runner,
    _row,
    _write_card,
    close_session,
    failure_reason,
    flush_rows,
    measure_idle,
    measure_item,
    pending,
    samples_frame,
)
from joulecast.data.collect.device_check import check_device
from joulecast.data.collect.plan import Plan, PlanItem
from joulecast.data.errors import InputError

log = logging.getLogger(__name__)
GPU_RESOURCE = "GPU"


class Station(Protocol):
    """What a worker measures with: opened once in each worker process. A frozen dataclass, so that its repr (its
    fields) says which station a worker has opened whatever copy of it a task brings."""

    def open(self) -> tuple[Meter, Runner, Callable[[float], None]]: ...  # (meter, runner, sleep)


@dataclass(frozen=True)
class NvmlStation:
    """The worker's own GPU: the first of CUDA_VISIBLE_DEVICES (as dask-cuda and `--resources GPU=1` workers are
    started, one a GPU), NVML's index of it (NVML ignores CUDA_VISIBLE_DEVICES), and PyTorch on `cuda:0`."""

    def open(self) -> tuple[Meter, Runner, Callable[[float], None]]:
        from joulecast.data.collect.nvml_meter import open_meter
        from joulecast.data.collect.torch_runner import TorchRunner

        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        return open_meter(int(visible) if visible.isdigit() else 0), TorchRunner("cuda:0"), time.sleep


_OPENED: dict[str, tuple[Meter, Runner, Callable[[float], None], float]] = {}  # per worker process, by repr


def _station(station: Station, idle_s: float) -> tuple[Meter, Runner, float]:
    key = repr(station)
    if key not in _OPENED:
        meter, runner, sleep = station.open()
        _OPENED[key] = (meter, runner, sleep, measure_idle(meter, idle_s, sleep))
    meter, runner, _, idle_w = _OPENED[key]
    return meter, runner, idle_w


def measure_on_worker(item: PlanItem, plan: Plan, collection: str, station: Station) -> dict[str, Any]:
    """One item on this worker's GPU: {"row", "samples"} or {"failed": reason}."""
    meter, runner, idle_w = _station(station, plan.settings.idle_s)
    device = {**getattr(meter, "describe", dict)(), **runner.describe()}
    try:
        check_device(plan.gpu, device)  # a worker on another card measures nothing
    except InputError as exc:
        return {"failed": str(exc)}
    windows: list = []
    try:
        step = runner.prepare(item)
        try:
            fields = measure_item(step, meter, plan.settings, idle_w, keep=windows)
        finally:
            step.close()
    except Exception as exc:  # out of memory, an unsupported dtype: reported, the plan goes on
        return {"failed": failure_reason(exc)}
    return {"row": _row(item, plan, collection, device, idle_w, fields),
            "samples": samples_frame(item.id, windows), "device": device}


def collect_on(client: Any, plan: Plan, root: str | Path, station: Station, *, collection: str | None = None,
               progress: bool = True) -> CollectResult:
    """Measure every item of `plan` not yet stored under `root` on the client's GPU workers."""
    from dask.distributed import as_completed
    from distributed.scheduler import KilledWorker
    from tqdm.auto import tqdm

    result, todo = pending(plan, root, collection or plan.name)
    collection = result.collection
    gpus = sum(w.get("resources", {}).get(GPU_RESOURCE, 0) for w in client.scheduler_info()["workers"].values())
    if todo and not gpus:
        raise InputError("--scheduler", f"no worker declares a {GPU_RESOURCE} resource; start one per GPU with "
                         f"`dask worker SCHEDULER --resources {GPU_RESOURCE}=1`")
    started = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    device = {"fleet": f"{gpus:g} GPU worker(s) at {client.scheduler.address}"}
    _write_card(plan, root, collection, result, device, started, status="running")
    rows: list[dict[str, Any]] = []
    traces: list[pd.DataFrame] = []
    written: set[str] = set()
    last = time.monotonic()

    def flush() -> None:
        flush_rows(rows, traces, root, plan.gpu, collection, result)

    futures = {client.submit(measure_on_worker, item, plan, collection, station, resources={GPU_RESOURCE: 1},
                             pure=False, key=f"collect-{collection}-{item.id}-{started}"): item for item in todo}
    bar = tqdm(total=len(todo), unit="item", desc=f"collect on {gpus:g} GPU(s)", disable=not progress)
    try:
        for future in as_completed(futures):
            item = futures[future]
            try:
                out = future.result()
            except KilledWorker as exc:  # died on every worker it was given to
                out = {"failed": f"KilledWorker: {exc}"[:300]}
            if "failed" in out:
                result.failed[item.id] = out["failed"]
                log.warning("%s failed: %s", item.id, out["failed"])
            elif item.id not in written:
                written.add(item.id)
                rows.append(out["row"])
                traces.append(out["samples"])
                device.update(out["device"])
            bar.update(1)
            if time.monotonic() - last >= FLUSH_S:
                flush()
                last = time.monotonic()
    except KeyboardInterrupt:
        result.interrupted = True
        for future in futures:
            future.cancel()
    finally:
        close_session(bar, flush, plan, root, result, device, started)
    return result
