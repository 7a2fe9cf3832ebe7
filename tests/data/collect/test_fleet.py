"""Collecting on Dask workers that declare a GPU: replayed meters on real time, a worker killed mid-plan, and no
row lost or written twice."""

import os
import threading
import time
from dataclasses import dataclass

import pytest
from conftest import require_module
from test_collector import trace

from joulecast.data.collect.meters import ReplayMeter
from joulecast.data.collect.plan import parse_plan
from joulecast.data.store import existing_ids, load_store, read_card

FAST = {"min_window_s": 0.05, "min_iterations": 5, "repeats": 3, "warmup_s": 0.01, "idle_s": 0.2}


class _Step:
    def __init__(self, seconds):
        self.seconds = seconds

    def run(self, n):
        time.sleep(n * self.seconds)
        return n * self.seconds

    def close(self):
        pass


class _Runner:
    def __init__(self, seconds):
        self.seconds = seconds

    def describe(self):
        return {"torch": "replay", "pid": str(os.getpid())}

    def prepare(self, item):
        return _Step(self.seconds)


@dataclass(frozen=True)
class ReplayStation:
    """A recorded 300 W trace played back on the worker's real clock, and steps of `step_s` real seconds."""

    power_w: float = 300.0
    step_s: float = 0.002

    def open(self):
        start = time.monotonic()
        meter = ReplayMeter(trace(self.power_w, seconds=900.0, step=0.01), lambda: time.monotonic() - start)
        return meter, _Runner(self.step_s), time.sleep


def _plan(n):
    return parse_plan({"name": "fleet", "gpu": "h200", "settings": FAST,
                       "kernels": [{"op": "add", "grid": {"elements": [1024 * (i + 1) for i in range(n)]}}]})


@pytest.fixture
def gpu_cluster():
    require_module("dask.distributed", "dask", "JOULECAST_REQUIRE_DASK")
    import logging

    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=2, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                           resources={"GPU": 1}, silence_logs=logging.CRITICAL)
    client = Client(cluster)
    yield client, cluster
    client.close()
    cluster.close()


def test_items_go_one_per_gpu_and_land_once_though_a_worker_dies(gpu_cluster, tmp_path):
    import signal

    from joulecast.data.collect.fleet import collect_on

    client, cluster = gpu_cluster
    plan = _plan(16)
    nanny = next(iter(cluster.workers.values()))
    victim = nanny.worker_address

    def kill_one():
        time.sleep(1.5)  # a few items in: each takes about 0.35 s, after 0.2 s of idle reading
        os.kill(nanny.process.process.pid, signal.SIGKILL)  # as a machine that goes away: no goodbye

    killer = threading.Thread(target=kill_one)
    killer.start()
    result = collect_on(client, plan, tmp_path, ReplayStation(), progress=False)
    killer.join()
    assert victim not in client.scheduler_info()["workers"]  # it died (its nanny started a new one)
    rows = load_store(tmp_path)
    assert result.failed == {} and result.written == 16
    assert len(rows) == 16 and rows["measurement_id"].is_unique
    assert set(rows["measurement_id"]) == {item.id for item in plan.items}
    assert rows["energy_j"].gt(0).all() and rows["power_w"].between(250, 400).all()  # 300 W over nominal sleeps
    card = read_card(tmp_path / "h200" / "fleet" / "CARD.yaml")
    assert card["sessions"][-1]["status"] == "complete" and "GPU worker" in card["device"]["fleet"]
    # a rerun finds every item stored and measures nothing
    again = collect_on(client, plan, tmp_path, ReplayStation(), progress=False)
    assert (again.written, again.skipped) == (0, 16) and len(existing_ids(tmp_path, "h200", "fleet")) == 16


def test_a_cluster_without_gpu_workers_is_refused(tmp_path):
    require_module("dask.distributed", "dask", "JOULECAST_REQUIRE_DASK")
    import logging

    from dask.distributed import Client, LocalCluster

    import joulecast
    from joulecast.data.collect.fleet import collect_on

    with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                      silence_logs=logging.CRITICAL) as cluster, Client(cluster) as client:
        with pytest.raises(joulecast.InputError, match="GPU resource"):
            collect_on(client, _plan(2), tmp_path, ReplayStation(), progress=False)


class _CardRunner(_Runner):
    def describe(self):  # an H100 80GB, as PyTorch reports it
        return {**super().describe(), "sm_count": "132", "compute_capability": "9.0", "memory_gib": "79.2"}


@dataclass(frozen=True)
class H100Station(ReplayStation):
    def open(self):
        meter, _, sleep = super().open()
        return meter, _CardRunner(self.step_s), sleep


def test_a_worker_on_another_card_measures_nothing_and_says_which_card_it_has():
    from joulecast.data.collect.fleet import measure_on_worker

    plan = _plan(1)
    out = measure_on_worker(plan.items[0], plan, "fleet", H100Station())
    assert set(out) == {"failed"} and out["failed"].startswith("gpu: the plan is for h200")
    assert "--gpu h100-sxm" in out["failed"]
    assert "row" in measure_on_worker(plan.items[0], plan, "fleet", ReplayStation())  # a card not reported: measured
