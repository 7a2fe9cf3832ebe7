"""Sweeps: the grid, its Pareto front against a brute-force check, constraints, and the report in a real browser."""

import json
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from joulecast.cli import main
from joulecast.estimator.sweep import grid, pareto_mask, sweep


def test_the_front_is_what_no_point_beats():
    rng = np.random.default_rng(0)
    e, t = rng.uniform(1, 10, 300), rng.uniform(1, 10, 300)
    ok = rng.random(300) < 0.8
    front = pareto_mask(e, t, ok)
    for i in range(300):  # brute force: a candidate is on the front unless another candidate dominates it
        beaten = ok & (e <= e[i]) & (t <= t[i]) & ((e < e[i]) | (t < t[i]))
        assert front[i] == (ok[i] and not beaten.any())


def test_a_sweep_leaves_out_what_a_gpu_cannot_be_set_to_and_meets_its_constraints():
    configs, skipped = grid("llama-3-8b", "prefill", gpus=["h100-sxm", "a100-sxm4-80gb"], batches=[1, 8, 64],
                            seqs=[1024], power_limits=[300.0, 500.0, 700.0])
    assert len(configs) == 15 and skipped == {"power limit outside the GPU's range": 3}  # 700 W > 1.5 x 400 W
    result = sweep(configs, max_time_s=1.0, estimator="physics")
    assert result.front == "token" and (result.points["time_s"] <= 1.0).eq(result.points["feasible"]).all()
    best = result.best
    assert best["feasible"] and best["energy_per_token_j"] == result.points.loc[
        result.points["feasible"], "energy_per_token_j"].min()
    assert result.pareto["feasible"].all() and len(result.pareto) >= 1
    one = sweep(configs[configs["batch"] == 8], objective="time", estimator="physics")
    assert one.front == "pass" and one.best["time_s"] == one.points["time_s"].min()
    # an architect's what-if beside its base: twice the bandwidth never slows a decode step
    what_if, _ = grid("llama-3-8b", "decode", gpus=["h100-sxm", "h100-sxm:memory_bandwidth_gbs*2"], batches=[16],
                      seqs=[4096])
    times = sweep(what_if, estimator="physics").points.set_index("gpu")["time_s"]
    assert times["h100-sxm:memory_bandwidth_gbs*2"] < times["h100-sxm"]


def test_cli_sweep_json_parquet_and_report_in_a_browser(tmp_path, capsys):
    out, report = tmp_path / "points.parquet", tmp_path / "report"
    argv = ["sweep", "--model", "llama-3-8b", "--phase", "prefill", "--gpu", "h100-sxm,a100-sxm4-80gb", "--batch",
            "1,8,64", "--seq", "1024", "--power-limit", "300,500,700", "--report", str(report), "--out", str(out),
            "--json"]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert len(payload["points"]) == 15 and 1 <= len(payload["pareto"]) <= 15 and payload["best"]["feasible"]
    assert len(pd.read_parquet(out)) == 15
    page = (report / "report.html").read_text()
    assert page.count("class='pareto'") == len(payload["pareto"]) and "<script" not in page
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed: the report was checked as text only")
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'chromium'}", "--dump-dom", (report / "report.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert "<svg" in dom and dom.count('class="pareto"') == len(payload["pareto"]) and "polyline" in dom


@pytest.mark.parametrize("argv, message", [
    (["--batch", "1,x"], "--batch: 'x' is not an integer"),
    (["--objective", "cost"], "--objective: unknown 'cost'"),
    (["--power-limit", "5000"], "sweep: no configuration left (1 power limit outside the GPU's range)"),
    (["--max-time", "-1"], "--max-time: must be a positive number"),
])
def test_cli_sweep_bad_input(capsys, argv, message):
    assert main(["sweep", "--model", "gpt2", "--gpu", "a10", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_sweep_on_a_local_dask_cluster_equals_the_in_process_one(monkeypatch):
    """The grid partitioned (here into 12 parts), each part estimated on a worker of a LocalCluster on 127.0.0.1,
    gathered in order: the same points, bit for bit, as in this process."""
    pytest.importorskip("dask.distributed", reason="needs the [dask] extra")
    from joulecast.data.executors import executor
    from joulecast.estimator import sweep as sweeping

    monkeypatch.setattr(sweeping, "PART_ROWS", 2)
    configs, _ = grid("gpt2", "prefill", gpus=["a10", "h100-sxm"], batches=[1, 2, 4], seqs=[128, 256, 512, 1024])
    here = sweep(configs)
    finished = []
    with executor("local", workers=2) as run:
        assert run.workers == 2
        there = sweep(configs, run=run, progress=finished.append)
    assert len(finished) == 12
    pd.testing.assert_frame_equal(here.points, there.points)
    assert here.pareto.index.tolist() == there.pareto.index.tolist()


def test_an_unknown_scheduler_is_one_line():
    from joulecast.data.errors import InputError
    from joulecast.data.executors import executor

    with pytest.raises(InputError, match="--scheduler: unknown 'udp://x'; give local or tcp://HOST:PORT"):
        with executor("udp://x"):
            pass
