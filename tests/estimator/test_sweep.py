"""Sweeps: the grid, its Pareto front against a brute-force check, constraints, and the report in a real browser."""

import json
import math
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from conftest import require_module

import joulecast
from joulecast.cli import main
from joulecast.data.fusions import FUSIONS
from joulecast.estimator.sweep import grid, pareto_mask, sweep
from joulecast import sweep_report
from joulecast.sweep_report import constraints_text


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
    # 500 and 700 W over the A100-SXM4-80GB's 400 W (its datasheet max), at each batch
    assert len(configs) == 12 and skipped == {"power limit outside the GPU's range": 6}
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
    assert len(payload["points"]) == 12 and 1 <= len(payload["pareto"]) <= 12 and payload["best"]["feasible"]
    assert len(pd.read_parquet(out)) == 12
    page = (report / "report.html").read_text()
    assert page.count("class='pareto'") == len(payload["pareto"]) and "<script" not in page
    assert "meet the constraints (none)" in page and constraints_text({"max_time_s": 2.0, "max_power_w": 300.0}) == \
        "time at most 2 s, power at most 300 W"  # as a reader writes them, not a dict's repr
    # every point inside the frame, clear of its lines (the extremes too); an unset clock reads 'default' in the tables
    from joulecast import sweep_report as sr
    drawn = re.findall(r"<circle class='(?:point|pareto)' cx='([\d.]+)' cy='([\d.]+)'", page)
    places = [(float(x), float(y)) for x, y in drawn]
    assert len(places) == 12 and all(sr._PAD + 5 <= x <= sr._W - sr._PAD - 5 and sr._PAD + 5 <= y <= sr._H - sr._PAD - 5
                                      for x, y in places)
    assert page.count("<td>default</td>") == 1 + len(payload["pareto"])
    # two GPUs: their points coloured apart, named in a legend beside the front's
    legend = page.split("<g class='legend'>", 1)[1].split("</g>", 1)[0]
    assert [t.split("<", 1)[0] for t in legend.split(">")[1:] if t and not t.startswith("<")] == \
        ["h100-sxm", "a100-sxm4-80gb", "Pareto front (90 % interval)"]
    # each front point's 90 % energy interval, a bar through it from its upper bound (above) to its lower
    bars = re.findall(r"<path class='interval' d='M([\d.]+),([\d.]+)V([\d.]+)", page)
    front = {(float(x), float(y)) for x, y in re.findall(r"<circle class='pareto' cx='([\d.]+)' cy='([\d.]+)'", page)}
    assert len(bars) == len(front) == len(payload["pareto"])
    for x, low, high in ((float(x), float(lo), float(hi)) for x, lo, hi in bars):
        (y,) = [y for fx, y in front if fx == x]
        assert high < y < low and sr._PAD <= high and low <= sr._H - sr._PAD  # (pixels grow downwards)
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed: the report was checked as text only")
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'chromium'}", "--dump-dom", (report / "report.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert "<svg" in dom and dom.count('class="pareto"') == len(payload["pareto"]) and "polyline" in dom
    assert 'class="legend"' in dom


def test_a_sweep_on_several_grids_is_each_configuration_on_each_and_its_front_weighs_carbon(capsys):
    """Each point's carbon is its energy's on its grid (joulecast.data.carbon); on several grids a configuration is a
    point on each, the front is carbon against time, and the least carbon is on the cleanest grid."""
    from joulecast.data.carbon import Grid, grid_at

    configs, _ = grid("llama-3-8b", "prefill", gpus=["h100-sxm", "a100-sxm4-80gb"], batches=[1, 8], seqs=[512])
    one = sweep(configs, estimator="physics")
    assert one.cost == "energy" and (one.points["grid"] == "WORLD").all()
    world = grid_at()
    assert one.points["carbon_g"].to_numpy() == pytest.approx(one.points["energy_j"].to_numpy() * world.grams(1.0))
    grids = [grid_at("IN", pue=1.2), grid_at("FR", pue=1.2)]
    two = sweep(configs, estimator="physics", objective="carbon", grids=grids)
    assert len(two.points) == 2 * len(configs) and two.cost == "carbon" and two.axes == ("s_per_token",
                                                                                         "carbon_per_token_g")
    on_in, on_fr = (two.points[two.points["grid"] == g]["energy_j"].to_numpy() for g in ("IN", "FR"))
    assert (on_in == on_fr).all()  # the same energies on each grid
    assert two.best["grid"] == "FR" and two.pareto["grid"].eq("FR").all()  # France's 56 g/kWh against India's 713
    by_energy = sweep(configs, estimator="physics", grids=grids)  # several grids: the front weighs carbon anyway
    assert by_energy.cost == "carbon" and by_energy.best["energy_per_token_j"] == one.best["energy_per_token_j"]
    argv = ["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--batch", "1,8", "--seq", "512", "--estimator",
            "physics", "--grid", "fr,in", "--objective", "carbon"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("2 configurations on 2 grids (4 points)") and "CO2e on FR's grid" in text
    assert main([*argv[:-4], "--carbon-intensity", "100"]) == 0  # a given intensity is no country's grid
    assert capsys.readouterr().out.rstrip().endswith("CO2e at the given intensity")
    assert main([*argv, "--carbon-intensity", "100"]) == 2
    assert "--carbon-intensity: give one of grid, carbon_intensity and carbon_series, not grid and carbon_intensity" \
        in capsys.readouterr().err
    assert len(sweep(configs, estimator="physics", grids=[world, world]).points) == len(configs)  # named twice: one
    hourly = sweep(configs, estimator="physics", grids=[grid_at(carbon_series=[100, 300])]).points
    assert hourly["g_per_kwh"].to_numpy() == pytest.approx(100.0)  # passes of milliseconds: the first hour
    many = [Grid("given", float(i), 1.0) for i in range(300_000)]
    with pytest.raises(joulecast.InputError, match="^grid: 4 configurations on 300,000 grids; at most 1,000,000"):
        sweep(configs, estimator="physics", grids=many)


def test_tensor_parallelism_is_an_axis_of_a_serving_or_generation_sweep(capsys):
    """--tp 2,4,8: each instance size a point, each the serve estimate at that TP; a TP the model's heads do not
    divide, or a phase without it, is one line before any estimate."""
    kw = dict(gpus=["h100-sxm"], batches=[16], seqs=[512])
    configs, _ = grid("llama-3-70b", "serve", tps=[2, 4, 8, 4], **kw)  # a TP given twice is one
    assert list(configs["tp"]) == [2, 4, 8]
    points = sweep(configs, estimator="physics", job={"output_len": 256}).points.set_index("tp")
    for tp in (2, 4, 8):
        one = joulecast.serve("llama-3-70b", "h100-sxm", concurrency=16, input_len=512, output_len=256, tp=tp,
                              estimator="physics")
        assert points.loc[tp, "energy_per_token_j"] == pytest.approx(one.energy_per_output_token_j)
    assert points.loc[8, "tokens_per_s"] > points.loc[2, "tokens_per_s"]
    with pytest.raises(joulecast.InputError, match="tp: 3 does not divide the model's 64 attention heads"):
        grid("llama-3-70b", "serve", tps=[2, 3], **kw)
    with pytest.raises(joulecast.InputError, match="^tp: applies to --phase generate or serve only"):
        grid("llama-3-70b", "prefill", tps=[2], **kw)
    with pytest.raises(joulecast.InputError, match="^tp: an axis of the grid or a fixed option, not both"):
        sweep(configs, estimator="physics", job={"output_len": 256, "tp": 2})
    argv = ["sweep", "--model", "llama-3-70b", "--phase", "generate", "--gpu", "h100-sxm", "--input-len", "256",
            "--output-len", "8", "--tp", "2,4", "--estimator", "physics"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 configurations") and " tp " in out.splitlines()[1] and ", TP " in out


def test_models_are_an_axis_each_point_its_models_estimate_and_the_report_colours_them(capsys, tmp_path):
    """--model a,b: each model a point at each configuration, each the estimate of that model (a dense model beside
    a mixture of experts); the table and the best line name the model where several are swept, the report colours
    them (one GPU) and labels each point with it; a model that cannot run the phase, or an unknown one, is one line
    before any estimate; the service takes a list."""
    sw = joulecast.sweep(["qwen3-8b", "qwen3-30b-a3b"], "h100-sxm", phase="serve", concurrency=[8, 64],
                         input_len=512, output_len=256, estimator="physics")
    assert sw.points[["model", "concurrency"]].values.tolist() == [["qwen3-8b", 8], ["qwen3-8b", 64],
                                                                   ["qwen3-30b-a3b", 8], ["qwen3-30b-a3b", 64]]
    for r in sw.points.itertuples():
        one = joulecast.serve(r.model, "h100-sxm", concurrency=r.concurrency, input_len=512, output_len=256,
                              estimator="physics")
        assert r.energy_per_token_j == pytest.approx(one.energy_per_output_token_j)
    argv = ["sweep", "--model", "qwen3-8b,mixtral-8x7b", "--phase", "generate", "--gpu", "h200", "--input-len",
            "256", "--output-len", "8", "--estimator", "physics", "--report", str(tmp_path / "r")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 configurations") and out.splitlines()[1].split()[0] == "model"
    assert re.search(r"best by energy: (qwen3-8b|mixtral-8x7b) on h200 ", out)
    page = (tmp_path / "r" / "report.html").read_text()
    assert "joulecast sweep: qwen3-8b, mixtral-8x7b generate" in page
    assert "mixtral-8x7b on h200 batch 1 input-len 256" in page  # a point's label
    assert page.count("class='legend'") == 1 and ">qwen3-8b</text>" in page  # coloured by model: one GPU
    # experts split over the GPUs where the model has them, serving or generating; the sweep's dense model runs as
    # without
    kw = dict(input_len=64, output_len=4, tp=2, estimator="physics")
    for phase, run, size, (point, job) in (("serve", joulecast.serve, "concurrency",
                                            ("energy_per_token_j", "energy_per_output_token_j")),
                                           ("generate", joulecast.generate, "batch", ("energy_j", "energy_j"))):
        split = joulecast.sweep(["qwen3-8b", "qwen3-30b-a3b"], "h100-sxm", phase=phase, expert_parallel=True,
                                **{size: [1, 8]}, **kw)
        for r in split.points.itertuples():
            one = run(r.model, "h100-sxm", expert_parallel=r.model == "qwen3-30b-a3b", **{size: getattr(r, size)},
                      **kw)
            assert getattr(r, point) == pytest.approx(getattr(one, job))
    one = joulecast.sweep("qwen3-8b", "h200", phase="generate", input_len=256, output_len=8, estimator="physics")
    assert "model" in one.points and one.points["model"].tolist() == ["qwen3-8b"]
    for fields, message in ((dict(model=["qwen3-8b", "bert-large"], phase="serve"),
                             "^phase: serve needs a decoder"),
                            (dict(model=["qwen3-8b", "qwen9"]), "^model: unknown 'qwen9'"),
                            (dict(model=[]), "^model: an empty list")):
        with pytest.raises(joulecast.InputError, match=message):
            joulecast.sweep(**{"gpu": "h200", "phase": "serve", "input_len": 256, "output_len": 8, "concurrency": 8,
                               **fields})


def test_output_length_is_an_axis_of_a_generation_or_serving_sweep(capsys):
    """--output-len 64,256: each length a point, each its job's estimate at that length (a length given twice is
    one); one length stays the jobs' fixed option; a phase without it, or an axis that is also fixed, is one line."""
    kw = dict(gpus=["h100-sxm"], batches=[1, 16], seqs=[512])
    configs, _ = grid("llama-3-8b", "generate", output_lens=[64, 256, 64], **kw)
    assert list(configs["output_len"]) == [64, 256, 64, 256] and list(configs["batch"]) == [1, 1, 16, 16]
    points = sweep(configs, estimator="physics", job={"kv_cache": True}).points
    for r in points.itertuples():
        one = joulecast.generate("llama-3-8b", "h100-sxm", batch=r.batch, input_len=512, output_len=r.output_len,
                                 estimator="physics")
        assert r.energy_j == pytest.approx(one.energy_j) and r.tokens_per_s == pytest.approx(
            r.batch * r.output_len / one.time_s)
    configs, _ = grid("llama-3-8b", "serve", output_lens=[64, 1024], **kw)
    served = sweep(configs, estimator="physics").points.set_index(["concurrency", "output_len"])
    one = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=16, input_len=512, output_len=1024,
                          estimator="physics")
    assert served.loc[(16, 1024), "energy_per_token_j"] == pytest.approx(one.energy_per_output_token_j)
    assert served.loc[(16, 1024), "energy_per_token_j"] < served.loc[(16, 64), "energy_per_token_j"]  # less prefill
    with pytest.raises(joulecast.InputError, match="^output_len: applies to --phase generate or serve only"):
        grid("llama-3-8b", "train-run", output_lens=[64], **kw)
    with pytest.raises(joulecast.InputError, match="^output_len: an axis of the grid or a fixed option, not both"):
        sweep(configs, estimator="physics", job={"output_len": 256})
    argv = ["sweep", "--model", "llama-3-8b", "--phase", "generate", "--gpu", "h100-sxm", "--batch", "1,16",
            "--input-len", "512", "--estimator", "physics", "--output-len"]
    assert main([*argv, "64,256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted({p["output_len"] for p in out["points"]}) == [64, 256] and "output_len" not in out["job"]
    assert main([*argv, "64,256"]) == 0
    text = capsys.readouterr().out
    assert " output_len " in text.splitlines()[1] and "input-len 512 output-len " in text
    assert main([*argv, "64,64", "--json"]) == 0  # one length: the jobs' option, as before, and no column
    out = json.loads(capsys.readouterr().out)
    assert out["job"]["output_len"] == 64 and "output_len" not in out["points"][0]
    assert main([*argv, "64,x"]) == 2
    assert "--output-len: 'x' is not an integer; give a comma-separated list" in capsys.readouterr().err


def test_joulecast_sweep_takes_the_fields_the_cli_and_the_service_take(capsys):
    """joulecast.sweep(model, gpus, phase=..., **fields): the same points as `joulecast sweep`'s flags (a value alone
    a list of one); a misspelt field, a bad value or an empty GPU list is one line before any estimate."""
    sw = joulecast.sweep("llama-3-8b", ["h100-sxm", "a100-sxm4-80gb"], phase="Generate", batch=[1, 16],
                         input_len=512, output_len=[64, 256], power_limit_w="range:2", estimator="physics")
    assert isinstance(sw, joulecast.SweepResult) and len(sw.points) == 2 * 2 * 2 * 2
    assert main(["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm,a100-sxm4-80gb", "--phase", "generate",
                 "--batch", "1,16", "--input-len", "512", "--output-len", "64,256", "--power-limit", "range:2",
                 "--estimator", "physics", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert [p["energy_j"] for p in cli["points"]] == pytest.approx(sw.points["energy_j"].tolist())
    assert cli["best"]["energy_j"] == pytest.approx(sw.best["energy_j"]) and cli["job"] == {**sw.job, "kv_cache": True}
    one = joulecast.sweep("gpt2", "a10", batch=8, estimator="physics")  # the defaults: seq 512, bf16
    assert one.points[["batch", "seq", "dtype"]].values.tolist() == [[8, 512, "bf16"]]
    for fields, message in ((dict(bacth=[1]), "^bacth: not a field of a prefill sweep; did you mean 'batch'\\?"),
                            # a bad phase named first: it once came inside another field's line, breaking it in two
                            (dict(phase="\n", input_len=None), "^phase: unknown '\\\\n'; allowed: prefill, "),
                            (dict(batch=[1, 0]), "^batch: 0 is not a whole number from 1 to 2\\^24"),
                            (dict(batch=[]), "^batch: an empty list"),
                            (dict(phase="serve", input_len=64), "^output_len: required with phase serve"),
                            (dict(gpu=[]), "^gpu: an empty list"),
                            (dict(sm_clock_mhz=99_999), "^sweep: no configuration left \\(1 left out: clock outside")):
        with pytest.raises(joulecast.InputError, match=message):
            joulecast.sweep("gpt2", **{"gpu": "a10", **fields})
    with pytest.raises(joulecast.InputError, match="^sweep: 4 points; at most 3 here"):
        joulecast.sweep("gpt2", "a10", batch=[1, 2, 4, 8], max_points=3)
    for bound in ("3", 0, 2.5, True, [3]):  # a caller's bound that is no positive integer: named, not compared
        with pytest.raises(joulecast.InputError, match="^max_points: a positive integer"):
            joulecast.sweep("gpt2", "a10", batch=[1, 2], max_points=bound)



def test_a_sweep_names_models_and_gpus_as_the_catalog_does_and_two_spellings_of_one_are_one():
    """A model by its Hugging Face id and a GPU by nvidia-smi's name are their catalog entries in the points (as an
    estimate names them); given beside their catalog names, they are not swept twice. A what-if keeps its changes,
    on its base's catalog name."""
    sw = joulecast.sweep(["meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", "gpt2"],
                         ["NVIDIA H100 80GB HBM3", "h100-sxm", "A100:clock*0.9"], batch=[1, 8], seq=128,
                         estimator="physics")
    keys = sw.points[["model", "gpu", "batch"]].apply(tuple, axis=1).tolist()
    assert sorted(keys) == sorted((m, g, b) for m in ("llama-3.1-8b", "gpt2")
                                  for g in ("h100-sxm", "a100-pcie-40gb:clock*0.9") for b in (1, 8))
    alone = joulecast.sweep("llama-3.1-8b", "h100-sxm", batch=8, seq=128, estimator="physics").points
    mine = sw.points[(sw.points["model"] == "llama-3.1-8b") & (sw.points["gpu"] == "h100-sxm")
                     & (sw.points["batch"] == 8)]
    assert mine["energy_j"].tolist() == pytest.approx(alone["energy_j"].tolist())

def test_a_serving_sweep_by_request_rate_prices_each_gpu_at_the_load_and_flags_a_rate_past_capacity(tmp_path,
                                                                                                     capsys):
    """--request-rate 1,4 in place of --concurrency: each point serve's estimate at that rate (its idle time in its
    energy a token), the front energy a token against the time between a request's tokens; a rate past a GPU's
    capacity is a point without figures, flagged exceeds-capacity and infeasible, said so where nothing is left."""
    sw = joulecast.sweep("llama-3-8b", ["h100-sxm", "l4"], phase="serve", request_rate=[4, 20], input_len=512,
                         output_len=256, estimator="physics")
    assert sw.sizes == ("request_rate", "input_len") and sw.front == "latency" and "concurrency" not in sw.points
    points = sw.points.set_index(["gpu", "request_rate"])
    one = joulecast.serve("llama-3-8b", "h100-sxm", request_rate=20, input_len=512, output_len=256,
                          estimator="physics")
    assert points.loc[("h100-sxm", 20.0), "energy_per_token_j"] == pytest.approx(one.energy_per_output_token_j)
    assert points.loc[("h100-sxm", 20.0), "time_s"] == pytest.approx(one.step_time_s)
    assert points.loc[("h100-sxm", 4.0), "energy_per_token_j"] > points.loc[("h100-sxm", 20.0), "energy_per_token_j"]
    past = points.loc[("l4", 20.0)]  # 20 requests a second of 256 tokens: beyond 256 in flight on an L4
    with pytest.raises(joulecast.InputError, match="^request_rate: 20 requests/s is beyond what 256 in flight serve"):
        joulecast.serve("llama-3-8b", "l4", request_rate=20, input_len=512, output_len=256, estimator="physics")
    assert past["flags"] == "exceeds-capacity" and not past["feasible"] and math.isnan(past["energy_j"])
    assert "beyond what 256 in flight serve" in past["outside_domain"]
    for fields, message in ((dict(concurrency=8), "^request_rate: give concurrency or request_rate, not both"),
                            (dict(request_rate=[0]), "^request_rate: 0 is not a number of requests a second")):
        with pytest.raises(joulecast.InputError, match=message):
            joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", input_len=512, output_len=256,
                            **{"request_rate": 4, **fields})
    argv = ["sweep", "--model", "llama-3-8b", "--phase", "serve", "--gpu", "h100-sxm,l4", "--input-len", "512",
            "--output-len", "256", "--estimator", "physics", "--request-rate"]
    assert main([*argv, "4,20", "--report", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("4 configurations, ") and " fitting in memory, serving their rate and meeting " in text
    assert " request_rate " in text.splitlines()[2] and "best by energy: h100-sxm request-rate 20 input-len 512" in text
    day = re.search(r"a token, ([\d.,]+) kWh a day at ([\d.,]+) W;", text)  # the load runs around the clock
    assert float(day.group(1).replace(",", "")) == pytest.approx(float(day.group(2).replace(",", "")) * 24 / 1e3,
                                                                 rel=2e-3)
    page = (tmp_path / "r" / "report.html").read_text()
    assert "nan" not in page.lower() and "(1 past capacity, not drawn)" in page
    assert "time between a request&#x27;s tokens (s)" in page or "time between a request's tokens (s)" in page
    assert main([*argv, "40", "--gpu", "l4"]) == 0
    assert "no configuration meets the constraints: 1 of 1 configurations cannot serve their request rate" in \
        capsys.readouterr().out
    assert main([*argv, "4", "--concurrency", "8"]) == 2
    assert "--request-rate: give --concurrency or --request-rate, not both" in capsys.readouterr().err
    assert main(["sweep", "--model", "gpt2", "--gpu", "a10", "--request-rate", "4"]) == 2
    assert "--request-rate: applies to --phase serve only" in capsys.readouterr().err


def test_a_report_of_more_points_than_it_labels_draws_each_pixel_and_colour_once():
    """Past the points it labels, the plot draws one circle a pixel and colour (176,128 points: 19 MB of HTML -> 0.9);
    the front's points each, and every point where it labels them."""
    from collections import Counter

    from joulecast import sweep_report

    rng = np.random.default_rng(1)
    n = sweep_report._LABELLED + 5_000
    t, e = np.round(rng.uniform(1, 3, n), 1), np.round(rng.uniform(1, 3, n), 1)  # 441 distinct places
    points = pd.DataFrame({"time_s": t, "energy_j": e, "gpu": rng.choice(["a10", "h200"], n),
                           "feasible": rng.random(n) < 0.9})
    points["pareto"] = pareto_mask(e, t, points["feasible"].to_numpy())
    for frame in (points, points.iloc[:1_000]):
        page = sweep_report.svg(frame, names=None if len(frame) > sweep_report._LABELLED else [""] * len(frame))
        drawn = re.findall(r"<circle class='point' cx='([\d.]+)' cy='([\d.]+)' r='3' fill='(#\w+)'", page)
        x, _, _ = sweep_report._scale(frame["time_s"].to_numpy(float), sweep_report._W, False)
        y, _, _ = sweep_report._scale(frame["energy_j"].to_numpy(float), sweep_report._H, True)
        first = dict(zip(dict.fromkeys(frame["gpu"]), ("#1f77b4", "#ff7f0e")))  # GPUs coloured in order of showing
        colour = np.where(frame["feasible"], frame["gpu"].map(first), "#bbb")
        rest = ~frame["pareto"].to_numpy()
        cells = set(zip(np.round(x[rest]), np.round(y[rest]), colour[rest]))
        assert page.count("class='pareto'") == frame["pareto"].sum()
        if len(frame) > sweep_report._LABELLED:
            assert Counter(c for _, _, c in drawn) == Counter(c for _, _, c in cells)  # each colour its pixels once
            assert len(drawn) < rest.sum() / 2
        else:
            assert len(drawn) == rest.sum()


@pytest.mark.parametrize("argv, message", [
    (["--batch", "1,x"], "--batch: 'x' is not an integer"),
    (["--objective", "cost"], "--objective: unknown 'cost'"),
    (["--power-limit", "5000"], "sweep: no configuration left (1 left out: power limit outside the GPU's range)"),
    (["--max-time", "-1"], "--max-time: must be a positive number"),
    (["--host-dispatch-us", "-3"], "--host-dispatch-us: must be from 0 to 1000 us a launch, got -3.0"),
])
def test_cli_sweep_bad_input(capsys, argv, message):
    assert main(["sweep", "--model", "gpt2", "--gpu", "a10", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1



def test_an_image_model_is_swept_without_a_sequence_its_images_its_tokens(capsys):
    """An image model's pass has no sequence length: beside a text model, one point a batch (seq 1), not one for
    each --seq it ignores (before: duplicate points, each labelled with a length, and its tokens a second that
    length times its images a second); its tokens are its images. --seq for image models alone is refused by name, as
    --attention for models with no attention of their choosing."""
    sw = joulecast.sweep(["resnet-101", "gpt2"], "a100", batch=[1, 8], seq=[128, 256], estimator="physics")
    pts = sw.points
    assert pts[["model", "batch", "seq"]].values.tolist() == [
        ["resnet-101", 1, 1], ["resnet-101", 8, 1], ["gpt2", 1, 128], ["gpt2", 1, 256], ["gpt2", 8, 128],
        ["gpt2", 8, 256]]
    for r in pts[pts["model"] == "resnet-101"].itertuples():
        one = joulecast.estimate(joulecast.workload("resnet-101", phase="inference", batch=r.batch), "a100",
                                 estimator="physics")
        assert r.energy_j == pytest.approx(one.energy_j) and r.tokens_per_s == pytest.approx(r.batch / one.time_s)
    assert main(["sweep", "--model", "resnet-101,vit-large", "--gpu", "a100", "--seq", "128"]) == 2
    assert capsys.readouterr().err == ("joulecast: error: --seq: has no effect with resnet or vit (a pass is --batch "
                                       "images of the size its config sets); leave it out\n")
    assert main(["sweep", "--model", "resnet-101,mobilevit-small", "--gpu", "a100", "--attention", "eager"]) == 2
    assert capsys.readouterr().err == ("joulecast: error: --attention: has no effect with mobilevit or resnet "
                                       "(mobilevit: transformers' MobileViT runs its attention unfused whatever the "
                                       "backend; resnet: no attention); leave it out\n")
    assert main(["sweep", "--model", "resnet-101,vit-large", "--gpu", "a100", "--attention", "eager", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["points"]) == 2  # ViT's attention takes it


def test_a_sweep_over_images_counts_images_where_it_shows_its_figures(capsys, tmp_path):
    """Where every model is a vision model's, a sweep's throughput and energy a token are an image's: its table, best
    line, constraints and report say images and show no seq (1 on every point); its JSON and points keep their
    columns' names and say what they count (`unit`). Beside a text model they stay tokens."""
    args = ["sweep", "--model", "resnet-50,vit-large", "--gpu", "a100-sxm4-80gb", "--batch", "8,64",
            "--phase", "inference", "--min-throughput", "100", "--estimator", "physics"]
    assert main([*args, "--report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    head, table = out.splitlines()[:2]
    assert "(at least 100 images/s)" in head and "(energy_per_image_j against s_per_image)" in head
    assert table.split()[:4] == ["model", "gpu", "batch", "dtype"]
    assert "images_per_s" in table and "energy_per_image_j" in table and "token" not in out and " seq " not in out
    assert re.search(r"^best by energy: \S+ on a100-sxm4-80gb batch 64 bf16, .* J and .* an image ", out, re.M)
    report = (tmp_path / "report.html").read_text()
    assert "energy an image (J)" in report and "<th>images_per_s</th>" in report and "token" not in report
    assert " seq " not in report
    assert main([*args, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["unit"] == "image" and {p["seq"] for p in payload["points"]} == {1}
    assert all(p["tokens_per_s"] == pytest.approx(p["batch"] / p["time_s"]) for p in payload["points"])
    run = joulecast.sweep("resnet-50", "a100-sxm4-80gb", phase="train-run", global_batch=256, tokens=2560,
                          estimator="physics")
    assert run.unit == "image" and sweep_report.columns(run)[:3] == ["gpu", "micro_batch", "dtype"]
    mixed = joulecast.sweep(["resnet-50", "gpt2"], "a100-sxm4-80gb", batch=[8], seq=[128], estimator="physics")
    assert mixed.unit == "token" and "seq" in sweep_report.columns(mixed) and not sweep_report.headings(mixed)


@pytest.mark.parametrize("models, fields, refused", [
    # every model ignores the field: refused by the API as by the CLI (before, the points took seq 1, or a label)
    ("resnet-101", {"seq": [128, 512]}, ("seq", "has no effect with resnet (a pass is batch images of the size its "
                                                "config sets); leave it out")),
    (["resnet-101"], {"attention": "flash"}, ("attention", "has no effect with resnet (no attention); leave it out")),
    ("gpt2", {"fusions": ["rope"]}, ("fusions", "['rope'] changes none of gpt2's kernels in prefill; leave it out")),
    (["gpt2", "bert-base"], {"fusions": "rope,activation"}, ("fusions", "rope changes none of gpt2's or bert-base's "
                                                                        "kernels in prefill beside activation; leave "
                                                                        "it out")),
    (["resnet-101", "vit-large"], {"fusions": "rope"}, ("fusions", "'rope' changes none of resnet-101's or "
                                                                   "vit-large's kernels in prefill; leave it out")),
    # a layout that only a convolutional model takes
    (["gpt2", "bert-base"], {"fusions": "channels_last"}, ("fusions", "'channels_last' changes none of gpt2's or "
                                                                      "bert-base's kernels in prefill; leave it out")),
    (["resnet-101", "gpt2"], {"fusions": "channels_last"}, None),
    ("llama-3-8b", {"phase": "train-run", "global_batch": 8, "fusions": "residual_norm"},
     ("fusions", "'residual_norm' changes none of llama-3-8b's kernels in training (residual_norm applies only with "
                 "norm); leave it out")),
    # a model among them takes it: swept, every model
    (["gpt2", "llama-3-8b"], {"fusions": ["rope"]}, None),
    (["resnet-101", "vit-large"], {"fusions": "gemm_activation"}, None),
    (["resnet-101", "gpt2"], {"seq": 128}, None),
    # a text model's training options: refused where every model is a vision model, else the text models' alone
    (["resnet-50", "resnet-101"], {"phase": "train-run", "global_batch": 8, "steps": 2, "recompute": "full"},
     ("recompute", "the layers' activation recomputation: has no effect on resnet-50 or resnet-101, vision models; "
                   "leave it out")),
    (["resnet-50", "gpt2"], {"phase": "train-run", "global_batch": 8, "steps": 2, "lora_rank": 4}, None),
])
def test_a_sweep_refuses_what_none_of_its_models_takes(models, fields, refused):
    """`joulecast.sweep` (and so POST /v1/sweep) refuses a field every model ignores, and fusions that change no
    model's kernels, by name; one a model takes is swept."""
    fields = {"phase": "prefill", **fields}
    if refused:
        with pytest.raises(joulecast.InputError) as err:
            joulecast.sweep(models, "a10", estimator="physics", **fields)
        assert (err.value.field, err.value.message) == refused
    else:
        points = joulecast.sweep(models, "a10", estimator="physics", **fields).points
        assert sorted(set(points["model"])) == sorted(models)


@pytest.mark.parametrize("phase, sizes", [("prefill", ["--batch", "1", "--seq", "32"]),
                                          ("generate", ["--batch", "1", "--input-len", "32", "--output-len", "4"])])
def test_a_sweep_takes_the_host_stated_and_spans_the_measured_hosts_without_one(capsys, phase, sizes):
    """A host-bound Llama-2 pass on the A100 (GPU busy half the time): the points the same either way, the interval
    narrower where the machine states its host."""
    def point(*host):
        assert main(["sweep", "--model", "llama-2-7b", "--gpu", "a100-pcie-40gb", "--phase", phase, *sizes, *host,
                     "--json"]) == 0
        return json.loads(capsys.readouterr().out)["points"][0]
    unstated, stated = point(), point("--host-dispatch-us", "25")
    assert unstated["energy_j"] == pytest.approx(stated["energy_j"], rel=1e-12)
    assert unstated["energy_lo_j"] < stated["energy_lo_j"] and unstated["energy_hi_j"] > stated["energy_hi_j"]


def test_a_training_sweep_of_text_and_vision_models_gives_the_text_models_alone_their_options():
    """LoRA, recomputation and the head's options beside a vision model: each text point the run with them, each
    vision point the run without them, exactly as `train_run` gives each (before, the vision model's first point
    refused the sweep)."""
    from joulecast.estimator.train_run import train_run

    common = dict(global_batch=8, steps=3, estimator="physics")
    text = dict(lora_rank=16, recompute="full", head_outputs=2)
    points = joulecast.sweep(["qwen2-1.5b", "resnet-50"], "l40s", phase="train-run", micro_batch=[2, 8], seq=512,
                             **text, **common).points
    for p in points.itertuples():
        run = (train_run(p.model, "l40s", micro_batch=p.micro_batch, **common) if p.model == "resnet-50"
               else train_run(p.model, "l40s", micro_batch=p.micro_batch, seq=512, **text, **common))
        assert (p.energy_j, p.time_s, p.memory_gb) == (run.energy_j, run.time_s, run.memory_gb)
    assert sorted(set(points["model"])) == ["qwen2-1.5b", "resnet-50"]


def test_a_sweep_s_tp_auto_is_each_point_s_fewest_gpus_whose_shards_fit(capsys):
    """tp auto beside numbers: each auto point is `serve(tp="auto")` on its GPU, showing the GPUs chosen (Llama-3-70B:
    2 H100s, 1 H200), `tp_auto` True; a rate no tp serves, infeasible, its tp not known; the word in the CLI's list."""
    from joulecast.estimator.serving import serve

    load = dict(concurrency=[16], input_len=512, output_len=128, estimator="physics")
    points = joulecast.sweep("llama-3-70b", ["h100-sxm", "h200"], phase="serve", tp=["auto", 8], **load).points
    auto = points[points["tp_auto"]]
    assert sorted(zip(auto["gpu"], auto["tp"])) == [("h100-sxm", 2), ("h200", 1)]
    assert (points.loc[~points["tp_auto"], "tp"] == 8).all() and points["feasible"].all()
    for p in auto.itertuples():
        direct = serve("llama-3-70b", p.gpu, concurrency=16, input_len=512, output_len=128, tp=int(p.tp),
                       estimator="physics")
        assert p.energy_per_token_j == pytest.approx(direct.energy_per_output_token_j, rel=1e-12)
    past = joulecast.sweep("llama-3-70b", "h100-sxm", phase="serve", request_rate=[20.0], input_len=512,
                           output_len=512, tp=["auto"], estimator="physics").points
    assert past["tp"].isna().all() and not past["feasible"].any() and (past["flags"] == "exceeds-capacity").all()
    with pytest.raises(joulecast.InputError, match="^tp: 'most' is not a whole number from 1 to 2\\^24, or auto"):
        joulecast.sweep("llama-3-70b", "h100-sxm", phase="serve", tp=["most"], **load)
    assert main(["sweep", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--phase", "serve", "--concurrency", "16",
                 "--input-len", "512", "--output-len", "128", "--tp", "1,auto", "--estimator", "physics"]) == 0
    assert "TP 2 (auto)" in capsys.readouterr().out


def test_a_training_sweep_takes_lora_rank_and_recomputation_as_axes(capsys, tmp_path):
    """Several LoRA ranks (0: full fine-tuning) or recomputations: axes, each point the run with them, exactly as
    `train_run` gives it; a vision model's one point takes neither; one value is every run's option."""
    from joulecast.estimator.train_run import train_run

    common = dict(global_batch=16, micro_batch=4, steps=5, estimator="physics")
    points = joulecast.sweep(["gpt2", "resnet-50"], "a10", phase="train-run", seq=512, lora_rank=[0, 16],
                             recompute=["none", "full"], **common).points
    text, image = points[points["model"] == "gpt2"], points[points["model"] == "resnet-50"]
    assert sorted(zip(text["lora_rank"], text["recompute"])) == [(0, "full"), (0, "none"), (16, "full"),
                                                                 (16, "none")]
    for p in text.itertuples():
        run = train_run("gpt2", "a10", seq=512, lora_rank=int(p.lora_rank), recompute=p.recompute, **common)
        assert (p.energy_j, p.time_s, p.memory_gb) == (run.energy_j, run.time_s, run.memory_gb)
    assert len(image) == 1 and image["energy_j"].iloc[0] == train_run("resnet-50", "a10", **common).energy_j
    by = {(p.lora_rank, p.recompute): p for p in text.itertuples()}
    assert by[16, "none"].memory_gb < by[0, "none"].memory_gb and by[0, "full"].time_s > by[0, "none"].time_s
    one = joulecast.sweep("gpt2", "a10", phase="train-run", seq=512, lora_rank=[8], **common)
    assert one.job["lora_rank"] == 8 and "lora_rank" not in one.points
    adapters = "LoRA's adapters on a transformer's linear layers: has no effect"
    for fields, refused in (({"lora_rank": [0, -1]}, ("lora_rank", "-1 is not a whole number from 0")),
                            ({"recompute": ["none", "most"]}, ("recompute", "'most' is not none, selective or full")),
                            ({"model": "resnet-50", "lora_rank": [0, 4]}, ("lora_rank", adapters))):
        with pytest.raises(joulecast.InputError) as err:
            joulecast.sweep(fields.pop("model", "gpt2"), "a10", phase="train-run", **fields, **common)
        assert err.value.field == refused[0] and err.value.message.startswith(refused[1])
    argv = ["sweep", "--model", "gpt2", "--gpu", "a10", "--phase", "train-run", "--global-batch", "16", "--steps", "5",
            "--seq", "512", "--estimator", "physics", "--lora-rank", "0,16", "--recompute", "none,full"]
    assert main([*argv, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["points"]) == 4
    assert main([*argv, "--report", str(tmp_path)]) == 0
    assert re.search(r"best by energy: a10 micro-batch 16 seq 512 bf16, LoRA rank \d+, recompute (none|full), ",
                     capsys.readouterr().out)
    page = (tmp_path / "report.html").read_text()  # each point's label names its rank and recomputation
    assert all(f"LoRA rank {r}, recompute {c}, clock" in page for r in (0, 16) for c in ("none", "full"))
    assert main([*argv[:-4], "--lora-rank", "0,x"]) == 2
    assert "--lora-rank: 'x' is not an integer" in capsys.readouterr().err


def test_a_training_sweep_s_micro_batch_auto_is_the_largest_that_fits_each_point_s_gpu(capsys):
    """micro_batch "auto" beside numbers: each auto point is `train_run(micro_batch="auto")` on its GPU, showing the
    micro-batch chosen (`micro_batch_auto` True); where not one sequence fits (Llama-3-8B's LoRA state on a 24 GB
    A10), a point at one sequence flagged exceeds-memory and infeasible, not the sweep refused."""
    from joulecast.estimator.train_run import train_run

    options = dict(phase="train-run", global_batch=64, seq=2048, lora_rank=16, steps=2, estimator="physics")
    points = joulecast.sweep(["gpt2", "llama-3-8b"], ["a10", "h100-sxm"], micro_batch=[4, "auto"], **options).points
    assert len(points) == 8 and points["micro_batch_auto"].sum() == 4
    assert (points.loc[~points["micro_batch_auto"], "micro_batch"] == 4).all()
    sizes = {k: v for k, v in options.items() if k not in ("phase", "estimator")}
    for p in points[points["micro_batch_auto"]].itertuples():
        capacity = joulecast.gpu(p.gpu).memory_gb
        if (p.model, p.gpu) == ("llama-3-8b", "a10"):
            assert p.micro_batch == 1 and "exceeds-memory" in p.flags and not p.feasible and p.memory_gb > capacity
            with pytest.raises(joulecast.InputError, match="micro_batch: auto: not one sequence"):
                train_run(p.model, p.gpu, micro_batch="auto", estimator="physics", **sizes)
            continue
        run = train_run(p.model, p.gpu, micro_batch="auto", estimator="physics", **sizes)
        assert (p.micro_batch, p.energy_j, p.memory_gb) == (run.micro_batch, run.energy_j, run.memory_gb)
        assert p.feasible and p.memory_gb <= capacity
        if p.micro_batch < 64:  # the next larger divisor of the global batch does not fit
            larger = train_run(p.model, p.gpu, micro_batch=2 * p.micro_batch, estimator="physics", **sizes)
            assert "exceeds-memory" in larger.flags
    assert sorted(points.loc[points["micro_batch_auto"], "micro_batch"]) == [1, 4, 16, 64]
    for bad in (0, "most", "Auto", [2, "largest"]):
        with pytest.raises(joulecast.InputError) as err:
            joulecast.sweep("gpt2", "a10", micro_batch=bad, **options)
        assert err.value.field == "micro_batch" and "or auto (the largest that fits the GPU)" in err.value.message
    argv = ["sweep", "--model", "gpt2", "--gpu", "a10", "--phase", "train-run", "--global-batch", "64", "--steps", "2",
            "--seq", "2048", "--estimator", "physics"]
    assert main([*argv, "--micro-batch", "4,auto", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["points"]
    assert [(p["micro_batch"], p["micro_batch_auto"]) for p in shown] == [(4, False), (16, True)]
    assert main([*argv, "--micro-batch", "4,most"]) == 2
    err = capsys.readouterr().err
    assert "--micro-batch: 'most' is not an integer or auto" in err and err.count("\n") == 1


def test_a_training_run_sweep_finds_the_least_energy_power_cap_by_a_deadline():
    """Each point the whole fine-tuning run at its GPU, micro-batch and power cap, exactly as `train_run` gives it;
    the best under --max-time is the least energy of the runs that finish by then."""
    from joulecast.estimator.train_run import train_run

    job = dict(global_batch=32, steps=200, lora_rank=16)
    configs, skipped = grid("llama-3-8b", "train-run", gpus=["h100-sxm"], batches=[2, 4], seqs=[1024],
                            power_limits=[300.0, 450.0, 700.0])
    result = sweep(configs, job=job, max_time_s=700.0, estimator="physics")
    points = result.points
    assert result.sizes == ("micro_batch", "seq") and result.job == job and result.front == "pass"
    assert len(points) == 6 and "batch" not in points and not skipped
    for p in points.itertuples():
        run = train_run("llama-3-8b", "h100-sxm", seq=1024, micro_batch=p.micro_batch, power_limit_w=p.power_limit_w,
                        estimator="physics", **job)
        assert (p.energy_j, p.time_s) == (run.energy_j, run.time_s)
        assert p.tokens_per_s == pytest.approx(run.tokens / run.time_s)
    assert (points["time_s"] <= 700.0).eq(points["feasible"]).all() and points["feasible"].any()
    best = result.best
    assert best["energy_j"] == points.loc[points["feasible"], "energy_j"].min()
    # the deadline binds: the cheapest run of all (the lowest cap) finishes too late, so a higher cap is best
    lowest = points.loc[points["energy_j"].idxmin()]
    assert not lowest["feasible"] and best["power_limit_w"] > lowest["power_limit_w"] and best["time_s"] <= 700.0


def test_a_training_sweep_with_fusions_is_the_fused_runs():
    from joulecast.estimator.train_run import train_run

    job = dict(global_batch=8, steps=3, fusions="norm,activation")
    configs, _ = grid("llama-3-8b", "train-run", gpus=["h100-sxm"], batches=[2], seqs=[512])
    result = sweep(configs, job=job, estimator="physics")
    assert result.job["fusions"] == ["activation", "norm"]
    run = train_run("llama-3-8b", "h100-sxm", seq=512, micro_batch=2, estimator="physics", **job)
    eager = train_run("llama-3-8b", "h100-sxm", seq=512, micro_batch=2, estimator="physics", global_batch=8, steps=3)
    assert result.points["time_s"].item() == run.time_s < eager.time_s


def test_a_generation_sweep_is_per_output_token_over_batch_and_prompt_length():
    from joulecast.estimator.jobs import generate

    configs, _ = grid("gpt2", "generate", gpus=["a10"], batches=[1, 8], seqs=[128, 512])
    result = sweep(configs, job=dict(output_len=32), estimator="physics")
    points = result.points
    assert result.sizes == ("batch", "input_len") and result.front == "token"  # the points do different work
    for p in points.itertuples():
        g = generate("gpt2", "a10", batch=p.batch, input_len=p.input_len, output_len=32, estimator="physics")
        assert p.energy_j == g.energy_j and p.energy_per_token_j == pytest.approx(g.energy_j / (p.batch * 32))
    # weights offloaded to host memory, a fixed option: every point pays their copies as its generation does
    offloaded = sweep(configs, job=dict(output_len=32, offload_gb=0.1, h2d_gbps=10.0), estimator="physics").points
    for p, o in zip(points.itertuples(), offloaded.itertuples()):
        g = generate("gpt2", "a10", batch=p.batch, input_len=p.input_len, output_len=32, offload_gb=0.1,
                     h2d_gbps=10.0, estimator="physics")
        assert o.energy_j == g.energy_j and o.time_s > p.time_s


def test_a_serving_sweep_is_one_engine_step_a_point_at_the_serve_estimate():
    """Each point the steady state `serve` gives at that load and setting: a step's output tokens and energy, so
    that tokens a second and energy a token are serve's own; --max-time bounds the time an output token."""
    from joulecast.estimator.serving import serve

    configs, _ = grid("llama-3-8b", "serve", gpus=["h100-sxm"], batches=[8, 64], seqs=[512], power_limits=[300.0, None])
    result = sweep(configs, job=dict(output_len=256), max_time_s=0.025, estimator="physics")
    assert result.sizes == ("concurrency", "input_len") and result.front == "token"
    for p in result.points.itertuples():
        s = serve("llama-3-8b", "h100-sxm", concurrency=p.concurrency, input_len=512, output_len=256,
                  power_limit_w=None if p.power_limit_w != p.power_limit_w else p.power_limit_w, estimator="physics")
        assert p.tokens_per_s == pytest.approx(s.tokens_per_s) and p.time_s == s.step_time_s
        assert p.energy_per_token_j == pytest.approx(s.energy_per_output_token_j) and p.power_w == s.power_w
        assert p.feasible == (s.step_time_s <= 0.025)
    sampled = sweep(configs, job=dict(output_len=256, engine="vllm-0.11.1", sampling="top-p"), estimator="physics")
    for p in sampled.points.itertuples():  # the job's sampling reaches each point's serve, its busy share too
        s = serve("llama-3-8b", "h100-sxm", concurrency=p.concurrency, input_len=512, output_len=256,
                  engine="vllm-0.11.1", sampling="top-p",
                  power_limit_w=None if p.power_limit_w != p.power_limit_w else p.power_limit_w, estimator="physics")
        assert (p.time_s, p.gpu_busy_share) == (s.step_time_s, s.gpu_busy_share) and 0 < p.gpu_busy_share <= 1


def test_a_serving_sweep_says_its_points_are_steps_and_its_best_carbon_a_million_tokens(capsys, tmp_path):
    """A serving point's energy_j, time_s and carbon_g are an engine step's: the table and the report say so, and the
    best point's carbon is a million output tokens', as `estimate --phase serve` gives it."""
    args = ["--model", "llama-3-8b", "--gpu", "h100-sxm", "--input-len", "512", "--output-len", "256",
            "--estimator", "physics"]
    assert main(["sweep", "--phase", "serve", *args, "--concurrency", "8,64", "--report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "are one engine step's (time_s: each request's time between output tokens):" in out
    best = re.search(r"; (\S+ \S+) CO2e a million output tokens on WORLD's grid", out).group(1)
    assert "one engine step&#x27;s" in (tmp_path / "report.html").read_text()
    assert main(["estimate", "--phase", "serve", *args, "--concurrency", "64"]) == 0
    assert f"carbon     {best} CO2e a million output tokens" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--phase", "prefill", "--micro-batch", "2"], "--micro-batch: applies to --phase train-run only"),
    (["--phase", "serve", "--input-len", "64", "--output-len", "8"], "--concurrency: --phase serve needs it"),
    (["--phase", "serve", "--concurrency", "4", "--input-len", "64", "--output-len", "8", "--batch", "2"],
     "--batch: has no effect with --phase serve (give --concurrency)"),
    (["--phase", "train-run", "--steps", "10"], "--global-batch: --phase train-run needs it"),
    (["--phase", "train-run", "--global-batch", "8"], "--steps: --phase train-run needs --steps or --tokens, one of "
                                                      "them; got neither"),
    (["--phase", "train-run", "--global-batch", "8", "--steps", "2", "--tokens", "1e6"],
     "--steps: --phase train-run needs --steps or --tokens, one of them; got both"),
    (["--phase", "train-run", "--global-batch", "8", "--steps", "10", "--batch", "2"],
     "--batch: has no effect with --phase train-run (give --micro-batch)"),
    (["--phase", "train-run", "--global-batch", "8", "--steps", "10", "--output-len", "9"],
     "--output-len: has no effect with --phase train-run"),
    (["--phase", "generate", "--input-len", "64"], "--output-len: --phase generate needs it"),
    (["--phase", "generate", "--input-len", "64", "--output-len", "8", "--seq", "64"],
     "--seq: has no effect with --phase generate (give --input-len)"),
    (["--phase", "train-run", "--global-batch", "8", "--micro-batch", "3", "--steps", "10"],
     "--micro-batch: 3 does not divide the global batch 8"),
    (["--phase", "train-run", "--global-batch", "8", "--steps", "10", "--fusions", "rope,flash"],
     f"fusions: unknown fusion 'flash'; allowed: {', '.join(FUSIONS)}"),
    (["--phase", "prefill", "--optimizer", "sgd"], "--optimizer: applies to --phase train-run only"),
    (["--phase", "prefill", "--tp", "2"], "--tp: applies to --phase generate, serve only"),
    (["--phase", "prefill", "--attention", "sdpa"], "attention: row 0: unknown 'sdpa'; allowed: flash, eager, masked"),
    # a flag that only qualifies another, given alone, changed nothing
    (["--phase", "train-run", "--global-batch", "8", "--steps", "10", "--lora-targets", "attention"],
     "--lora-targets: has no effect without --lora-rank (the layers LoRA adapters train; full fine-tuning trains"),
    (["--phase", "generate", "--input-len", "64", "--output-len", "8", "--h2d-gbps", "5"],
     "--h2d-gbps: has no effect without --offload-gb (the rate the weights held in host memory are copied at)"),
    # a grid past what one command estimates, refused before any point is made
    (["--phase", "generate", "--batch", ",".join(map(str, range(1, 101))), "--input-len",
      ",".join(map(str, range(64, 64 * 52, 64))), "--output-len", "8"],
     "sweep: 5,100 configurations; at most 5,000 jobs (narrow the lists)"),
    (["--batch", ",".join(map(str, range(1, 1001))), "--seq", ",".join(map(str, range(1, 1002)))],
     "sweep: 1,001,000 configurations; at most 1,000,000 (narrow the lists)"),
])
def test_cli_job_sweep_bad_input(capsys, argv, message):
    assert main(["sweep", "--model", "gpt2", "--gpu", "a10", "--estimator", "physics", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_job_sweep_json_is_strict_and_its_report_says_what_a_point_is(tmp_path, capsys):
    """JSON for scripts: no NaN (a default clock is null), which strict parsers such as jq refuse."""
    report = tmp_path / "report"
    argv = ["sweep", "--model", "gpt2", "--phase", "train-run", "--gpu", "a10", "--global-batch", "8", "--steps", "50",
            "--micro-batch", "2,8", "--seq", "512", "--power-limit", "100,150", "--estimator", "physics", "--report",
            str(report), "--json"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    payload = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert payload["job"] == {"global_batch": 8, "steps": 50} and len(payload["points"]) == 4
    assert all(p["sm_clock_mhz"] is None and "micro_batch" in p for p in payload["points"])
    # a job's point says why it reads outside the domain, as a pass's does (physics here: nothing to say)
    assert all(p["outside_domain"] == "" for p in payload["points"])
    assert main([*argv[:-5], "--json"]) == 0  # the shipped model: the A10 trained on forward passes only
    assert all("training work on a10, trained on forward only" in p["outside_domain"]
               for p in json.loads(capsys.readouterr().out)["points"])
    page = (report / "report.html").read_text()
    assert "Each point a whole job: global batch 8, steps 50" in page and "energy of the job (J)" in page
    assert "<th>micro_batch</th>" in page and page.count("class='pareto'") == len(payload["pareto"])
    # one GPU, every point feasible: no legend; a deadline no point meets: the grey points' entry, alone with the front
    assert "class='legend'" not in page
    assert main([*argv[:-1], "--max-time", "1e-3"]) == 0
    said = capsys.readouterr().out
    assert "meeting the constraints (time at most 0.001 s), 0 on the Pareto front" in said
    assert "no configuration meets the constraints: 4 fit but miss the constraints" in said
    assert "Empty DataFrame" not in said
    legend = (report / "report.html").read_text().split("<g class='legend'>", 1)[1].split("</g>", 1)[0]
    assert ">Pareto front</text>" in legend and ">over the constraints or memory</text>" in legend
    # in the terminal, the front's clock not set reads 'default' (not NaN), its figures to four significant digits
    assert main(argv[:-1]) == 0
    table = capsys.readouterr().out.splitlines()
    header = table[1].split()
    first = dict(zip(header, table[2].split()))
    assert first["sm_clock_mhz"] == "default" and "NaN" not in "\n".join(table)
    assert len(first["energy_j"].replace(".", "").lstrip("0")) <= 4

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


def test_a_sweep_runs_on_a_running_cluster_named_by_its_address(monkeypatch, capsys):
    """`--scheduler tcp://HOST:PORT`: the command connects to a cluster it did not start, runs the grid's partitions
    there (here four of two points each) and leaves the cluster running; the points are those of the in-process
    sweep."""
    require_module("dask.distributed", "dask", "JOULECAST_REQUIRE_DASK")
    import logging

    from dask.distributed import Client, LocalCluster

    from joulecast.estimator import sweep as sweeping

    monkeypatch.setattr(sweeping, "PART_ROWS", 2)
    argv = ["sweep", "--model", "gpt2", "--gpu", "a10,h100-sxm", "--batch", "1,4", "--seq", "128,512",
            "--estimator", "physics", "--json"]
    assert main(argv) == 0
    here = json.loads(capsys.readouterr().out)
    with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                      silence_logs=logging.CRITICAL) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        assert main([*argv, "--scheduler", cluster.scheduler_address]) == 0
        there = json.loads(capsys.readouterr().out)
        with Client(cluster) as client:  # still up, its worker with it, the partitions run there
            assert len(client.scheduler_info()["workers"]) == 1
            ran = client.run_on_scheduler(
                lambda dask_scheduler: sum(p.state_counts["memory"] for p in dask_scheduler.task_prefixes.values()))
            assert ran == 4
    assert len(there["points"]) == 8
    assert there["points"] == here["points"] and there["pareto"] == here["pareto"]


def test_a_cluster_that_does_not_answer_is_one_line(monkeypatch, capsys):
    """A tcp:// address nothing listens on: after the connect timeout, one line naming --scheduler and the address,
    exit 2, no traceback."""
    require_module("dask.distributed", "dask", "JOULECAST_REQUIRE_DASK")
    import socket

    from joulecast.data import executors

    monkeypatch.setattr(executors, "CONNECT_TIMEOUT_S", 1)
    with socket.socket() as s:  # a port just freed: nothing listens on it
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    assert main(["sweep", "--model", "gpt2", "--gpu", "a10", "--batch", "1,2", "--estimator", "physics",
                 "--scheduler", address]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"joulecast: error: --scheduler: cannot reach {address} (")
    assert "Traceback" not in err[0]


def test_an_unknown_scheduler_is_one_line():
    from joulecast.data.errors import InputError
    from joulecast.data.executors import executor

    with pytest.raises(InputError, match="--scheduler: unknown 'udp://x'; give local or tcp://HOST:PORT"):
        with executor("udp://x"):
            pass


@pytest.mark.parametrize("scheduler, workers, message", [
    ("local", 0, "--workers: must be between 1 and"), ("local", 10**6, "--workers: must be between 1 and"),
    (None, 2, "--workers: applies to --scheduler local"), ("tcp://127.0.0.1:1", 2, "--workers: applies to")])
def test_a_worker_count_is_checked_before_a_cluster_starts(scheduler, workers, message):
    """Before, --workers 0 meant one a core, without --scheduler local it was dropped unsaid, and a million started
    a million processes."""
    from joulecast.data.errors import InputError
    from joulecast.data.executors import executor

    with pytest.raises(InputError, match=message):
        with executor(scheduler, workers):
            pass


def test_a_single_pass_sweep_takes_the_settings_estimate_takes_for_one_pass(capsys, tmp_path):
    """--attention, --launch-mode, --fusions and --engine fix every point of a prefill or decode sweep as they fix one
    estimate (EnergAIzer's rows ran eager attention); "none" is no engine; a generation sweep takes --engine too."""
    settings = ["--attention", "eager", "--launch-mode", "graph", "--fusions", "rope,norm", "--engine", "vllm-0.5.4"]
    assert main(["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "decode", "--batch", "1,8",
                 "--seq", "1024", *settings, "--estimator", "physics", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["job"] == {"attention": "eager", "launch_mode": "graph", "fusions": ["norm", "rope"],
                              "engine": "vllm-0.5.4"}
    for point in payload["points"]:
        w = joulecast.workload("llama-3-8b", phase="decode", batch=point["batch"], seq=1024, attention="eager",
                               launch_mode="graph", fusions="rope,norm", engine="vllm-0.5.4")
        assert point["energy_j"] == pytest.approx(joulecast.estimate(w, "h100-sxm", estimator="physics").energy_j,
                                                  rel=1e-9)
    assert main(["sweep", "--model", "gpt2", "--gpu", "a10", "--batch", "1,8", "--attention", "eager", "--estimator",
                 "physics", "--report", str(tmp_path)]) == 0  # its report calls a point a pass, not a job
    page = (tmp_path / "report.html").read_text()
    assert "Each point one pass: attention eager." in page and "of the job" not in page
    capsys.readouterr()
    assert main(["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--batch", "1", "--engine", "None",
                 "--estimator", "physics", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["job"] == {}
    argv = ["sweep", "--model", "gpt2", "--gpu", "h100-sxm", "--phase", "generate", "--batch", "1",
            "--input-len", "64", "--output-len", "8", "--estimator", "physics", "--json"]
    assert main([*argv, "--engine", "vllm-0.5.4"]) == 0
    point = json.loads(capsys.readouterr().out)["points"][0]
    engine = joulecast.generate("gpt2", "h100-sxm", batch=1, input_len=64, output_len=8, engine="vllm-0.5.4",
                                estimator="physics")
    assert point["energy_j"] == pytest.approx(engine.energy_j, rel=1e-9)


def test_a_sweep_no_point_of_which_fits_says_what_it_needs(tmp_path, capsys):
    """No configuration in memory: how many, and the least need against its GPU's memory, on each grid counted once
    (before: 'no configuration meets the constraints', nothing more)."""
    argv = ["sweep", "--model", "llama-3-70b", "--phase", "decode", "--gpu", "h100-sxm,a100-sxm4-80gb", "--batch",
            "1,32", "--seq", "4096", "--grid", "FR,DE", "--estimator", "physics", "--report", str(tmp_path)]
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    points = pd.DataFrame(payload["points"])
    least = points["memory_gb"].min()
    assert payload["best"] is None and payload["unmet"] in said.splitlines()  # for scripts, the same line
    assert least > 80 and f"the least needs {least:.1f} GiB, on " in said
    assert "no configuration meets the constraints: 4 of 4 configurations exceed their GPU's memory" in said
    assert "exceed their GPU&#x27;s memory" in (tmp_path / "report.html").read_text()
    assert "80 GB; a GPU with more memory, or a smaller --batch or --seq)" in said  # what to try, by phase
    generations = ["sweep", "--model", "llama-3-70b", "--phase", "generate", "--gpu", "h100-sxm", "--batch", "1",
                   "--input-len", "1024", "--output-len", "4", "--estimator", "physics"]
    assert main(generations) == 0
    assert "80 GB; --tp 2,4,8 splits each over GPUs)" in capsys.readouterr().out



def test_a_setting_given_as_range_spans_each_gpus_own():
    """'range' asks 8 whole values over each GPU's own span, 'range:N' N: the H100's limits 200-700 W, the A10's
    100-150 W, clocks from 15 % of each boost clock up to it; numbers beside it stay as given, a value once."""
    configs, skipped = grid("gpt2", "prefill", gpus=["h100-sxm", "a10"], batches=[1], seqs=[128],
                            power_limits=["range", 700.0])
    limits = {g: sorted(configs.loc[configs["gpu"] == g, "power_limit_w"]) for g in ("h100-sxm", "a10")}
    assert len(limits["h100-sxm"]) == 8 and (limits["h100-sxm"][0], limits["h100-sxm"][-1]) == (200.0, 700.0)
    assert len(limits["a10"]) == 8 and (limits["a10"][0], limits["a10"][-1]) == (100.0, 150.0)
    assert skipped == {"power limit outside the GPU's range": 1}  # 700 W on the A10, counted as before
    configs, _ = grid("gpt2", "prefill", gpus=["a10"], batches=[1], seqs=[128], sm_clocks=["RANGE:3"])
    assert sorted(configs["sm_clock_mhz"]) == [255.0, 975.0, 1695.0]  # ceil(0.15 x 1695), the middle, the boost
    for bad in ("range:1", "range:65", "rangex", "range:a"):
        with pytest.raises(joulecast.InputError, match=r"^sm_clock_mhz: .* nor range or range:N"):
            grid("gpt2", "prefill", gpus=["a10"], batches=[1], seqs=[128], sm_clocks=[bad])


def test_the_cli_and_the_service_take_range(capsys):
    from joulecast.service import sweep_points

    args = ["sweep", "--model", "gpt2", "--gpu", "a10", "--batch", "8", "--seq", "512", "--estimator", "physics",
            "--json"]
    assert main([*args, "--power-limit", "range:4"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert sorted(p["power_limit_w"] for p in cli["points"]) == [100.0, 117.0, 133.0, 150.0]
    body = {"model": "gpt2", "gpu": "a10", "batch": 8, "seq": 512, "power_limit_w": "range:4"}
    served = sweep_points(body, "physics")
    assert [p["energy_j"] for p in served["points"]] == [p["energy_j"] for p in cli["points"]]
    assert main([*args, "--sm-clock", "range:x"]) == 2
    assert "--sm-clock: 'range:x' is not a number, nor range" in capsys.readouterr().err


def test_large_ticks_read_with_an_si_prefix():
    """A training run's joules (2.25e6) label its axis as 2.25 M, 500 k, not 2.25e+06; below 100,000 as written."""
    from joulecast.sweep_report import _tick

    assert [_tick(v) for v in (2.25e6, 5e5, 3e9, 20_000.0, 0.0002)] == ["2.25 M", "500 k", "3 G", "20,000", "0.0002"]


def test_an_axis_within_a_decade_ticks_each_digit():
    from joulecast.sweep_report import _ticks

    assert _ticks(math.log10(2.25e6), math.log10(6.14e6)) == pytest.approx([3e6, 4e6, 5e6, 6e6])
    assert _ticks(0.0, 2.0) == pytest.approx([1, 2, 5, 10, 20, 50, 100])  # over decades: 1, 2 and 5 each
    assert _ticks(math.log10(1.1), math.log10(1.9)) == pytest.approx([1.1, 1.9])  # no digit inside: the ends


def test_a_gpu_with_no_feasible_point_says_so_in_the_legend(tmp_path):
    """Its points are all grey, so its colour is nowhere on the plot: the legend names it '(none feasible)'."""
    assert main(["sweep", "--model", "gpt2", "--gpu", "h200,a10", "--batch", "64", "--seq", "1024", "--max-time",
                 "0.05", "--estimator", "physics", "--report", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert ">a10 (none feasible)</text>" in page and ">h200</text>" in page


def test_a_job_sweep_asks_no_point_for_the_fewest_gpus_that_would_hold_it():
    """A point past its GPU's memory is infeasible; searching its tensor-parallel split would only slow the sweep
    (about threefold on Llama-3-70B generations that fit no card): none is asked, and the figures are the same."""
    configs, _ = grid("llama-3-70b", "generate", gpus=["a10"], batches=[4], seqs=[512])
    point = sweep(configs, job=dict(output_len=8), estimator="physics").points.iloc[0]
    alone = joulecast.generate("llama-3-70b", "a10", batch=4, input_len=512, output_len=8, estimator="physics")
    assert not point["feasible"] and alone.fits_tp == 8 and point["energy_j"] == alone.energy_j
    assert joulecast.generate("llama-3-70b", "a10", batch=4, input_len=512, output_len=8, estimator="physics",
                              suggest_tp=False).fits_tp is None


def test_a_reports_job_options_read_as_words_with_their_units():
    """The report's line of fixed options: counts whole with their thousands, lists as names, switches on or off,
    rates and sizes with their units; over images, the tokens named images."""
    from joulecast.sweep_report import job_text

    job = {"global_batch": 256, "tokens": 1281167, "fusions": ["channels_last"], "loader_rate": 1500.0,
           "eval_tokens": 50000, "forward_overhead_s": 0.003, "kv_cache": False, "offload_gb": 1.5}
    assert job_text(job, "image") == ("global batch 256, images 1,281,167, fusions channels_last, loader rate 1,500 "
                                      "images a second, eval images 50,000, forward overhead 0.003 s a layer and "
                                      "forward pass, kv cache off, offload 1.5 GiB")
    assert job_text({"tokens": 10**9, "loader_rate": 12.5}, "token") == ("tokens 1,000,000,000, loader rate 12.5 "
                                                                         "sequences a second")


def test_the_best_line_gives_its_energy_interval_where_the_estimate_has_one(capsys):
    """The best point's 90 % interval beside its energy (a token's for serving), as its JSON has it; physics alone
    has none."""
    args = ["sweep", "--model", "gpt2", "--gpu", "a100", "--batch", "8,32", "--seq", "512"]
    assert main(args) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert main([*args, "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    shown = re.search(r"bf16, ([\d.,]+) \(([\d.,]+) - ([\d.,]+)\) J in ", line)
    assert shown, line
    for text, value in zip(shown.groups(), (best["energy_j"], best["energy_lo_j"], best["energy_hi_j"])):
        assert float(text.replace(",", "")) == pytest.approx(value, rel=1e-3)
    assert main([*args, "--estimator", "physics"]) == 0
    assert re.search(r"bf16, [\d.,]+ J in ", capsys.readouterr().out.splitlines()[-1])


def test_a_serving_sweep_takes_instances_as_an_axis(capsys):
    """`instances` as an axis of a serving sweep: each point the load spread over that many instances, as `serve`
    gives it; too few for the rate past capacity (infeasible), the best by energy the fewest that serve it; a
    concurrency that is no multiple of a count left out, named; the CLI's --instances a list."""
    kw = dict(input_len=512, output_len=128, engine="vllm-0.5.4", estimator="physics")
    reach = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=256, **kw).requests_per_s
    result = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", request_rate=1.5 * reach, instances=[1, 2, 4],
                             **kw)
    points = result.points.set_index("instances")
    assert points.loc[1, "flags"] == "exceeds-capacity" and not points.loc[1, "feasible"]
    for n in (2, 4):
        one = joulecast.serve("llama-3-8b", "h100-sxm", request_rate=1.5 * reach, instances=n, **kw)
        assert points.loc[n, "energy_per_token_j"] == pytest.approx(one.energy_per_output_token_j)
        assert points.loc[n, "power_w"] == pytest.approx(one.power_w)
    assert result.best["instances"] == 2 and "instances" not in result.job
    by_count = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", concurrency=[6, 8], instances=[1, 4], **kw)
    assert by_count.skipped == {"concurrency not a multiple of instances": 1} and len(by_count.points) == 3
    with pytest.raises(joulecast.InputError, match="^instances: not a field of a generate sweep"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="generate", batch=1, input_len=64, output_len=8,
                        instances=[1, 2])
    assert main(["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
                 "--output-len", "128", "--request-rate", str(1.5 * reach), "--instances", "1,2,4", "--engine",
                 "vllm-0.5.4", "--estimator", "physics"]) == 0
    said = capsys.readouterr().out
    assert re.search(r"^best by energy: h100-sxm .*, 2 instances, ", said, re.M), said


def test_an_autoscaled_serving_sweep_prices_its_spares_starts_and_headroom(capsys, tmp_path):
    """An autoscaled serving sweep's points take its spares, cold starts and headroom as `serve` does (`spare`,
    `cold_start_s`, `headroom`; the CLI's --spare, --cold-start and --headroom), and without autoscale refuse them
    by name."""
    kw = dict(input_len=512, output_len=128, engine="vllm-0.5.4", estimator="physics")
    reach = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=256, **kw).requests_per_s
    load = dict(window_rates=[0.2 * reach, 2.5 * reach, 0.2 * reach], window_s=600, autoscale=True)
    for extra in (dict(cold_start_s=120, headroom=0.25), dict(spare="idle")):
        swept = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", instances=[3, 4], **load, **kw, **extra)
        per_token = swept.points.set_index("instances")["energy_per_token_j"]
        for n in (3, 4):
            alone = joulecast.serve("llama-3-8b", "h100-sxm", instances=n, **load, **kw, **extra)
            assert per_token[n] == pytest.approx(alone.energy_per_output_token_j, rel=1e-9)
        assert per_token[3] != pytest.approx(per_token[4], rel=1e-3)  # idle spares, or a start more
    arrivals = np.concatenate([np.linspace(0, 3599, 100), np.linspace(3600, 7199, 4000)])
    pd.DataFrame({"input_len": 512, "output_len": 128, "arrival_s": arrivals}).to_csv(tmp_path / "t.csv", index=False)
    argv = ["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--requests",
            str(tmp_path / "t.csv"), "--window", "1h", "--instances", "2,4", "--max-batch", "2", "--engine",
            "vllm-0.5.4", "--estimator", "physics", "--json"]
    assert main([*argv, "--autoscale", "--cold-start", "5min", "--headroom", "50%"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    trace = joulecast.read_requests(tmp_path / "t.csv")
    alone = joulecast.serve("llama-3-8b", "h100-sxm", instances=4, autoscale=True, cold_start_s=300, headroom=0.5,
                            max_batch=2, engine="vllm-0.5.4", estimator="physics", **trace.serving(window_s=3600))
    assert points[1]["energy_per_token_j"] == pytest.approx(alone.energy_per_output_token_j, rel=1e-9)
    assert main([*argv, "--spare", "idle"]) == 2
    assert "--spare: applies to --autoscale" in capsys.readouterr().err


def test_a_reactive_autoscaler_s_headroom_swept_finds_what_serves_every_window(capsys, tmp_path):
    """`headroom` as an axis (a list; the CLI's --headroom 0,50%,...): each point `serve` at its headroom; sized by
    the window before (`reactive`), the points whose headroom leaves a window past what its instances serve are
    marked past capacity, as `serve` refuses them, the others feasible at the headroom's cost; a bad share is one
    line naming headroom."""
    kw = dict(input_len=512, output_len=128, engine="vllm-0.5.4", estimator="physics", max_batch=16)
    reach = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=16, **kw).requests_per_s
    load = dict(window_rates=[0.8 * reach, 1.6 * reach, 3.2 * reach, 1.0 * reach], window_s=600, autoscale=True,
                reactive=True, instances=8)
    swept = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", headroom=[0.0, 0.5, 1.0, 2.0], **load, **kw)
    points = swept.points.set_index("headroom")
    for h in (0.0, 0.5, 1.0, 2.0):
        try:
            alone = joulecast.serve("llama-3-8b", "h100-sxm", headroom=h, **load, **kw)
        except joulecast.InputError:
            assert "exceeds-capacity" in points.loc[h, "flags"]
        else:
            assert points.loc[h, "energy_per_token_j"] == pytest.approx(alone.energy_per_output_token_j, rel=1e-9)
    feasible = points["flags"].str.contains("exceeds-capacity") == False  # noqa: E712 (a Series, elementwise)
    assert not feasible[0.0] and feasible[2.0]
    assert (points.loc[feasible, "energy_per_token_j"].diff().dropna() >= 0).all()  # more headroom, more energy
    with pytest.raises(joulecast.InputError, match="^headroom: 11 is not a share of each window's rate from 0 to 10"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", headroom=[0.5, 11], **load, **kw)
    # the CLI's list, each a share as --headroom takes one
    arrivals = np.concatenate([np.linspace(0, 3599, 2000), np.linspace(3600, 7199, 40_000)])
    pd.DataFrame({"input_len": 512, "output_len": 128, "arrival_s": arrivals}).to_csv(tmp_path / "t.csv", index=False)
    argv = ["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--requests",
            str(tmp_path / "t.csv"), "--window", "1h", "--instances", "8", "--max-batch", "16", "--engine",
            "vllm-0.5.4", "--estimator", "physics", "--autoscale", "--reactive"]
    assert main([*argv, "--headroom", "0,50%,1000%", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["points"]
    assert [p["headroom"] for p in out] == [0.0, 0.5, 10.0] and "exceeds-capacity" in out[0]["flags"]
    assert main([*argv, "--headroom", "0,x"]) == 2
    assert "--headroom: 'x' is not a share (0.25, or 25%)" in capsys.readouterr().err


def test_a_reactive_autoscaler_s_cold_start_and_reaction_swept_against_its_first_tokens(capsys, tmp_path):
    """`cold_start_s` and `reaction_s` as axes (lists; the CLI's --cold-start 30s,5min and --reaction 0,1min,10min):
    each point `serve` at its own, a faster start or reaction a sooner first token for a few more instance-seconds,
    --max-ttft-p99 keeping those fast enough; one value a fixed option, a bad time one line naming the field."""
    kw = dict(input_len=512, output_len=128, engine="vllm-0.5.4", estimator="physics", max_batch=16)
    reach = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=16, **kw).requests_per_s
    load = dict(window_rates=[0.5 * reach, 3.5 * reach, 3.5 * reach, 0.5 * reach], window_s=1800, autoscale=True,
                reactive=True, queue=True, instances=6)
    swept = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", cold_start_s=[30.0, 300.0],
                            reaction_s=[0.0, 600.0], **load, **kw)
    points = swept.points.set_index(["cold_start_s", "reaction_s"])
    for start, reaction in points.index:
        alone = joulecast.serve("llama-3-8b", "h100-sxm", cold_start_s=start, reaction_s=reaction, **load, **kw)
        assert points.loc[(start, reaction), "energy_per_token_j"] == pytest.approx(
            alone.energy_per_output_token_j, rel=1e-9)
        assert points.loc[(start, reaction), "ttft_p99_s"] == pytest.approx(alone.ttft_p99_s, rel=1e-9)
    assert points.loc[(30.0, 0.0), "ttft_p99_s"] < points.loc[(300.0, 0.0), "ttft_p99_s"] < points.loc[
        (300.0, 600.0), "ttft_p99_s"]
    one = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", cold_start_s=[30.0], reaction_s=[0.0, 600.0],
                          **load, **kw)
    assert "cold_start_s" not in one.points and len(one.points) == 2  # one value: every point's option
    with pytest.raises(joulecast.InputError, match="^reaction_s: -1 is not a time from 0 to 86,400 s"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", reaction_s=[0.0, -1], **load, **kw)
    # the CLI's lists, each a time as --cold-start and --reaction take one
    arrivals = np.concatenate([np.linspace(0, 3599, 2000), np.linspace(3600, 7199, 40_000)])
    pd.DataFrame({"input_len": 512, "output_len": 128, "arrival_s": arrivals}).to_csv(tmp_path / "t.csv", index=False)
    argv = ["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--requests",
            str(tmp_path / "t.csv"), "--window", "1h", "--instances", "8", "--max-batch", "16", "--engine",
            "vllm-0.5.4", "--estimator", "physics", "--autoscale", "--reactive", "--queue"]
    assert main([*argv, "--cold-start", "30s,5min", "--reaction", "0,1min,10min", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["points"]
    assert sorted({(p["cold_start_s"], p["reaction_s"]) for p in out}) == [
        (30.0, 0.0), (30.0, 60.0), (30.0, 600.0), (300.0, 0.0), (300.0, 60.0), (300.0, 600.0)]
    assert main([*argv, "--reaction", "0,soon"]) == 2
    assert "--reaction: 'soon' is not a time (90, 90s, 2min)" in capsys.readouterr().err


def test_a_serving_sweep_gives_each_points_first_token_and_bounds_it(capsys):
    """A serving sweep's points carry `ttft_s` (serve's: the waits for a slot and a backlog, and the step), which
    `max_ttft_s` (--max-ttft) bounds: the rates whose requests wait too long for a slot are not feasible; another
    phase refuses it by name."""
    kw = dict(input_len=512, output_len=128, engine="vllm-0.5.4", estimator="physics", max_batch=32)
    most = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=32, **kw).requests_per_s
    rates = [0.3 * most, 0.9 * most, 0.98 * most]
    free = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", request_rate=rates, **kw)
    ttft = free.points.set_index("request_rate")["ttft_s"]
    assert (free.points["ttft_p99_s"] > free.points["ttft_s"]).all()  # 99 % within: past the mean
    for rate in rates:
        assert ttft[rate] == pytest.approx(joulecast.serve("llama-3-8b", "h100-sxm", request_rate=rate,
                                                           **kw).ttft_s, rel=1e-12)
    bound = float(ttft.iloc[1]) * 1.01
    bounded = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", request_rate=rates, max_ttft_s=bound, **kw)
    assert bounded.points["feasible"].tolist() == [True, True, False]
    assert bounded.constraints == {"max_ttft_s": bound}
    assert "time to first token at most" in sweep_report.constraints_text(bounded.constraints)
    # its front against the first token: no point both dearer a token and slower to it than another
    fronted = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", request_rate=rates, front="ttft", **kw)
    assert fronted.axes == ("ttft_s", "energy_per_token_j")
    front = fronted.pareto
    assert (np.diff(front["ttft_s"]) > 0).all() and (np.diff(front["energy_per_token_j"]) < 0).all()
    assert fronted.best is not None and joulecast.sweep(
        "llama-3-8b", "h100-sxm", phase="serve", request_rate=rates, front="ttft", objective="time",
        **kw).best["ttft_s"] == ttft.min()
    assert "time to first token, mean (s)" in sweep_report.render(fronted, "a serving sweep")
    with pytest.raises(joulecast.InputError, match="^front: ttft applies to --phase serve only"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="prefill", batch=[1], seq=128, front="ttft",
                        estimator="physics")
    # 99 % of first tokens bounded: the same rates' 99th percentiles
    tail = float(free.points["ttft_p99_s"].iloc[1]) * 1.01
    bounded = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", request_rate=rates, max_ttft_p99_s=tail,
                              **kw)
    assert bounded.points["feasible"].tolist() == [True, True, False]
    assert "99 % of first tokens within" in sweep_report.constraints_text(bounded.constraints)
    with pytest.raises(joulecast.InputError, match="^max_ttft_s: applies to --phase serve only"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="prefill", batch=[1], seq=128, max_ttft_s=1.0,
                        estimator="physics")
    assert main(["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
                 "--output-len", "128", "--request-rate", ",".join(f"{r:.6g}" for r in rates), "--max-batch", "32",
                 "--engine", "vllm-0.5.4", "--estimator", "physics", "--max-ttft", f"{bound:.6g}", "--json"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    assert [p["feasible"] for p in points] == [True, True, False] and points[2]["ttft_s"] > bound


def test_a_serving_sweep_bounds_the_gaps_between_tokens(capsys):
    """A serving sweep's points carry `itl_p99_s` (serve's), which `max_itl_p99_s` (--max-itl-p99) bounds: the
    concurrencies whose steps admit too many prompts are not feasible; another phase refuses it by name."""
    kw = dict(input_len=512, output_len=128, engine="vllm-0.11.1", estimator="physics")
    free = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", concurrency=[4, 64, 256], **kw)
    tail = free.points.set_index("concurrency")["itl_p99_s"]
    for c in (4, 64, 256):
        assert tail[c] == joulecast.serve("llama-3-8b", "h100-sxm", concurrency=c, **kw).itl_p99_s
    assert tail.is_monotonic_increasing
    bound = float(tail[64]) * 1.01
    bounded = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", concurrency=[4, 64, 256],
                              max_itl_p99_s=bound, **kw)
    assert bounded.points["feasible"].tolist() == [True, True, False]
    assert "99 % of tokens within" in sweep_report.constraints_text(bounded.constraints)
    # the bounded percentile a column of the table, where it is bounded alone
    assert "itl_p99_s" in sweep_report.columns(bounded) and "itl_p99_s" not in sweep_report.columns(free)
    assert "ttft_p99_s" not in sweep_report.columns(bounded)
    with pytest.raises(joulecast.InputError, match="^max_itl_p99_s: applies to --phase serve only"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="decode", batch=[1], seq=128, max_itl_p99_s=1.0,
                        estimator="physics")
    with pytest.raises(joulecast.InputError, match="^max_itl_p99_s: must be a positive number"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", concurrency=[4], max_itl_p99_s=0, **kw)
    assert main(["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
                 "--output-len", "128", "--concurrency", "4,64,256", "--engine", "vllm-0.11.1", "--estimator",
                 "physics", "--max-itl-p99", f"{bound:.6g}", "--json"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    assert [p["feasible"] for p in points] == [True, True, False] and points[2]["itl_p99_s"] > bound


def test_a_queued_serving_sweep_bounds_the_wait(capsys, tmp_path):
    """`max_wait_s` (--max-wait): over a queued load's instances, a point whose requests wait longer on average is
    not feasible, so the best by energy is the fewest instances within the wait; without `queue`, one line naming
    it."""
    kw = dict(input_len=512, output_len=128, engine="vllm-0.5.4", estimator="physics")
    reach = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=256, **kw).requests_per_s
    load = dict(window_rates=[0.5 * reach, 2.5 * reach, 0.5 * reach, 0.2 * reach], window_s=600, queue=True)
    free = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", instances=[1, 2, 3], **load, **kw)
    waits = free.points.set_index("instances")["wait_s"]
    assert waits[1] > waits[2] > 0 and waits[3] == 0 and free.points["feasible"].all()
    bounded = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", instances=[1, 2, 3], **load, **kw,
                              max_wait_s=float(waits[2]) * 1.01)
    assert bounded.points.set_index("instances")["feasible"].tolist() == [False, True, True]
    assert bounded.best["instances"] == 2 and bounded.constraints == {"max_wait_s": float(waits[2]) * 1.01}
    assert "a request's mean wait at most" in sweep_report.constraints_text(bounded.constraints)
    with pytest.raises(joulecast.InputError, match="^max_wait_s: applies to a queued serving load"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", request_rate=1.0, max_wait_s=1.0, **kw)
    with pytest.raises(joulecast.InputError, match="^max_wait_s: must be a positive number"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", instances=[1], **load, **kw, max_wait_s=-1)
    # the CLI: a trace's burst over a quiet stretch, hour by hour, queued over 1 or 2 instances, the wait bounded
    two = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=2, max_batch=2, **kw).requests_per_s  # 2 in flight
    quiet, busy = int(0.5 * two * 3600), int(1.5 * two * 3600)  # an hour under what one instance serves, one over
    arrivals = np.concatenate([np.linspace(0, 3599, quiet), np.linspace(3600, 7199, busy)])
    pd.DataFrame({"input_len": 512, "output_len": 128, "arrival_s": arrivals}).to_csv(tmp_path / "t.csv", index=False)
    argv = ["sweep", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--requests",
            str(tmp_path / "t.csv"), "--window", "1h", "--queue", "--instances", "1,2", "--max-batch", "2",
            "--engine", "vllm-0.5.4", "--estimator", "physics", "--json"]
    assert main(argv) == 0
    waits = [p["wait_s"] for p in json.loads(capsys.readouterr().out)["points"]]
    assert waits[0] > waits[1]
    assert main([*argv, "--max-wait", str(waits[1] + 0.5 * (waits[0] - waits[1]))]) == 0
    assert json.loads(capsys.readouterr().out)["best"]["instances"] == 2
    assert main([a for a in argv if a not in ("--window", "1h")]) == 2  # a queue is a window's excess
    assert "--queue: applies to --window" in capsys.readouterr().err
