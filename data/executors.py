"""Where partitions of work run: in this process (the default), or on Dask (`dask.distributed`, the `[dask]` extra):
a `LocalCluster` on 127.0.0.1 started and stopped for the command (`"local"`), or an existing cluster
(`"tcp://HOST:PORT"`). Results come back in the partitions' order whatever order they finish in."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from joulecast.data.errors import InputError, JoulecastError

# A LocalCluster's workers: one per core this machine has, one thread each (the work is numpy, which holds the GIL
# between its calls).
LOCAL_THREADS_PER_WORKER = 1
# How long a command waits to reach a running cluster (`--scheduler tcp://...`) before it says it cannot: Dask's
# client retries a refused connection until then, and a scheduler on a busy machine may take seconds to answer.
CONNECT_TIMEOUT_S = 30
# The most local worker processes a core (`check_executor`): past one a core they queue for it, which a test of a
# cluster's behaviour on a small machine may want; thousands of processes are a typo, not a plan.
OVERSUBSCRIBE = 4


class InProcess:
    """Runs each partition here, one after another."""

    name = "in-process"
    workers = 1

    def map(self, fn: Callable[..., Any], parts: Sequence[Any], *args: Any,
            progress: Callable[[int], None] | None = None) -> list[Any]:
        out = []
        for part in parts:
            out.append(fn(part, *args))
            if progress:
                progress(1)
        return out


class DaskExecutor:
    """Runs each partition as one task on a Dask cluster."""

    def __init__(self, client: Any, name: str):
        self.client, self.name = client, name

    @property
    def workers(self) -> int:
        return max(1, len(self.client.scheduler_info()["workers"]))

    def map(self, fn: Callable[..., Any], parts: Sequence[Any], *args: Any,
            progress: Callable[[int], None] | None = None) -> list[Any]:
        from dask.distributed import as_completed

        futures = [self.client.submit(fn, part, *args, pure=False) for part in parts]
        index = {future.key: i for i, future in enumerate(futures)}
        out: list[Any] = [None] * len(futures)
        for future in as_completed(futures):
            out[index[future.key]] = future.result()  # a task's error is raised here, as it would be in-process
            if progress:
                progress(1)
        return out


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_executor(scheduler: str | None, workers: int | None = None) -> None:
    """`executor`'s arguments, checked before any work starts (one-line InputError naming the option)."""
    if scheduler is not None and scheduler != "local" and not scheduler.startswith("tcp://"):
        raise InputError("--scheduler", f"unknown {scheduler!r}; give local or tcp://HOST:PORT")
    if workers is None:
        return
    if scheduler != "local":
        raise InputError("--workers", "applies to --scheduler local (in-process work is one process; a running "
                                      "cluster has its own workers)")
    most = OVERSUBSCRIBE * usable_cores()
    if not 1 <= workers <= most:
        raise InputError("--workers", f"must be between 1 and {most} ({OVERSUBSCRIBE} a core of this machine's "
                                      f"{usable_cores()}), got {workers}")


@contextmanager
def executor(scheduler: str | None, workers: int | None = None) -> Iterator[InProcess | DaskExecutor]:
    """The executor `scheduler` names: None for in-process, "local" for a LocalCluster on 127.0.0.1 (`workers`
    processes, default one per core), or a tcp:// address of a running scheduler."""
    check_executor(scheduler, workers)
    if scheduler is None:
        yield InProcess()
        return
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise JoulecastError("--scheduler needs dask.distributed: pip install 'joulecast[dask]'") from None
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:  # Dask's own INFO lines only with --verbose
        logging.getLogger("distributed").setLevel(logging.ERROR)
    if scheduler == "local":
        count = workers or usable_cores()
        # the scheduler's web server on a free loopback port (not 8787, which another cluster may hold), and Dask's
        # own logs only where something goes wrong
        cluster = LocalCluster(n_workers=count, threads_per_worker=LOCAL_THREADS_PER_WORKER, host="127.0.0.1",
                               dashboard_address="127.0.0.1:0", processes=True, silence_logs=logging.ERROR)
        client = Client(cluster)
        try:
            yield DaskExecutor(client, f"LocalCluster of {count} workers")
        finally:
            client.close()
            cluster.close()
        return
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise InputError("--scheduler", f"cannot reach {scheduler} ({exc})") from None
    try:
        yield DaskExecutor(client, scheduler)
    finally:
        client.close()
