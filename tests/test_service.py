"""The HTTP service, started for real on 127.0.0.1 and called over HTTP."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

KEY = "test-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    yield from _serving()


@pytest.fixture(scope="module")
def physics_server():
    yield from _serving("--estimator", "physics")


def _serving(*extra: str):
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    port = _free_port()
    env = {**os.environ, "JOULECAST_API_KEY": KEY}
    process = subprocess.Popen([sys.executable, "-m", "joulecast.cli", "serve", "--port", str(port), *extra], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=2)
            break
        except OSError:
            time.sleep(0.3)
    else:
        process.kill()
        pytest.fail(f"the service did not start: {process.stderr.read().decode()[-2000:]}")
    yield base
    process.terminate()
    process.wait(timeout=30)


def call(base, path, body=None, key=KEY, raw=None):
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(base + path, data=data, method="POST" if data is not None else "GET",
                                     headers={"Content-Type": "application/json", **({"X-API-Key": key} if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode()
            return response.status, (json.loads(text) if "json" in response.headers["content-type"] else text)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read().decode())


def test_an_estimate_over_http_is_the_cli_s(server):
    import joulecast

    status, out = call(server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "batch": 8, "seq": 512})
    direct = joulecast.estimate(joulecast.workload("gpt2", batch=8, seq=512), "a10").to_dict()
    assert status == 200 and out["estimator"] == "shipped default"
    assert out["energy_j"] == pytest.approx(direct["energy_j"]) and out["energy_interval_j"] == pytest.approx(
        list(direct["energy_interval_j"]))
    status, job = call(server, "/v1/estimate", {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "generate",
                                                "batch": 4, "input_len": 256, "output_len": 8})
    assert status == 200 and job["ttft_s"] > 0 and job["energy_per_output_token_j"] > 0
    served = {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "input_len": 192, "output_len": 400,
              "concurrency": 64, "engine": "vllm-0.11.1"}
    greedy, sampled = (call(server, "/v1/estimate", {**served, **more})[1] for more in ({}, {"sampling": "top-p"}))
    assert sampled["step_time_s"] > greedy["step_time_s"]
    # the gaps between a request's tokens, as the Python API gives them
    direct = joulecast.serve("llama-3-8b", "h100-sxm", input_len=192, output_len=400, concurrency=64,
                             engine="vllm-0.11.1")
    assert greedy["itl_p99_s"] == pytest.approx(direct.itl_p99_s) and greedy["itl_p90_s"] == pytest.approx(
        direct.itl_p90_s) and greedy["itl_p90_s"] <= greedy["itl_p99_s"]
    # a generation on tensor-parallel GPUs, as the Python API gives it; a single pass has no tp
    body = {"model": "llama-3-70b", "gpu": "h100-sxm", "phase": "generate", "batch": 2, "input_len": 64,
            "output_len": 4, "tp": 4, "engine": "vllm-0.5.4"}
    status, job = call(server, "/v1/estimate", body)
    direct = joulecast.generate("llama-3-70b", "h100-sxm", batch=2, input_len=64, output_len=4, tp=4,
                                engine="vllm-0.5.4")
    assert status == 200 and job["tp"] == 4 and job["energy_j"] == pytest.approx(direct.energy_j)
    status, err = call(server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "tp": 2})
    assert status == 422 and "tp" in json.dumps(err) and "generate or serve" in json.dumps(err)
    # a field the model ignores is named, as the CLI names its flag (before, an estimate that did not read it)
    status, err = call(server, "/v1/estimate", {"model": "resnet-101", "gpu": "a10", "seq": 512})
    assert status == 422 and "seq: has no effect with resnet (a pass is batch images" in json.dumps(err)
    status, err = call(server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "fusions": ["rope"]})
    assert status == 422 and "fusions: ['rope'] changes none of gpt2's kernels in prefill" in json.dumps(err)


def test_a_batch_and_the_catalogs(server):
    rows = [{"model": "gpt2", "gpu": "a10", "batch": b, "seq": 256} for b in (1, 2, 4)]
    status, out = call(server, "/v1/estimate/batch", {"rows": rows})
    assert status == 200 and [r["batch"] for r in out["rows"]] == [1, 2, 4]
    assert out["rows"][0]["energy_j"] < out["rows"][2]["energy_j"]
    status, gpus = call(server, "/v1/gpus")
    assert status == 200 and "h200" in {g["name"] for g in gpus}
    status, models = call(server, "/v1/models")
    assert status == 200 and "llama-3-8b" in {m["name"] for m in models}
    assert {m["name"]: m["params"] for m in models}["llama-3-8b"] == pytest.approx(8.03e9, rel=1e-3)
    status, index = call(server, "/")  # the bare address maps the routes
    assert status == 200 and index["docs"] == "/docs"
    assert {"/v1/estimate", "/v1/plan", "/v1/gpus"} <= set(index["routes"])
    assert index["routes"]["/v1/gpus"] == "The GPU catalog"


def test_a_physics_service_answers_in_strict_json_and_serves_at_a_power_cap(physics_server):
    """Physics alone has no interval: null in the JSON (NaN, which Starlette refuses, once made every batch a 500).
    Serving takes the GPU's setting as the CLI does."""
    status, out = call(physics_server, "/v1/estimate/batch", {"rows": [{"model": "gpt2", "gpu": "a10", "seq": 256}]})
    assert status == 200 and out["estimator"] == "physics" and out["rows"][0]["energy_lo_j"] is None
    body = {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "input_len": 512, "output_len": 256,
            "concurrency": 64}
    status, free = call(physics_server, "/v1/estimate", body)
    status_capped, capped = call(physics_server, "/v1/estimate", {**body, "power_limit_w": 300})
    assert status == status_capped == 200 and capped["power_limit_w"] == 300
    status, split = call(physics_server, "/v1/estimate", {**body, "model": "qwen3-30b-a3b", "tp": 2,
                                                         "expert_parallel": True})
    assert status == 200 and split["expert_parallel"] is True and split["tp"] == 2
    status, generated = call(physics_server, "/v1/estimate", {"model": "qwen3-30b-a3b", "gpu": "h100-sxm",
                                                             "phase": "generate", "input_len": 64, "output_len": 4,
                                                             "tp": 2, "expert_parallel": True})
    assert status == 200 and generated["expert_parallel"] is True and generated["tp"] == 2
    assert capped["power_w"] <= 300 < free["power_w"] and capped["energy_per_output_token_interval_j"] is None
    status, listed = call(physics_server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "phase": "generate",
                                                          "batch": 2, "requests": [[128, 16], [32, 4]]})
    assert status == 200 and listed["requests"] == 2 and listed["padding_share"] == pytest.approx(1 - 20 / 32)
    status, floats = call(physics_server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "phase": "generate",
                                                          "batch": 2.0, "requests": [[1.28e2, 16.0], [32, 4]]})
    assert status == 200 and floats == listed  # JSON's whole floats are the counts they name
    objects = [{"input_len": 128, "output_len": 16}, {"input_len": 32, "output_len": 4.0}]
    status, objects = call(physics_server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "phase": "generate",
                                                           "batch": 2, "requests": objects})
    assert status == 200 and objects == listed  # request objects, as the CLI's JSON file takes them
    gen = {"model": "gpt2", "gpu": "a10", "phase": "generate", "input_len": 32, "output_len": 4}
    status, plain = call(physics_server, "/v1/estimate", gen)
    status_off, off = call(physics_server, "/v1/estimate", {**gen, "offload_gb": 0.1, "h2d_gbps": 10.0})
    assert status == status_off == 200 and (off["offload_gb"], off["h2d_gbps"]) == (0.1, 10.0)
    assert off["time_s"] == pytest.approx(plain["time_s"] + 4 * 0.1 * 2**30 / 10e9)

@pytest.mark.parametrize("body, field", [
    ({"model": "gpt2", "gpu": "a10", "batch": -1}, "batch"),
    ({"model": "gpt2", "gpu": "a1000"}, "gpu"),
    ({"model": "/etc/passwd.json", "gpu": "a10"}, "model"),
    ({"model": "gpt2", "gpu": "a10", "colour": "red"}, "colour"),
    ({"model": "gpt2", "gpu": "a100-pcie-40gb", "dtype": "fp8"}, "dtype"),
    # a string's truth would read "no" as yes
    ({"model": "gpt2", "gpu": "a10", "phase": "generate", "input_len": 8, "output_len": 2, "kv_cache": "no"},
     "kv_cache"),
    # a negative clock once shared the empty default's grouping key and was read as it
    ({"model": "gpt2", "gpu": "a10", "phase": "generate", "input_len": 8, "output_len": 2, "sm_clock_mhz": -1},
     "sm_clock_mhz"),
    ({"model": "gpt2", "gpu": "a10", "phase": "generate", "batch": 0, "input_len": 8, "output_len": 2}, "batch"),
    ({"model": "gpt2", "gpu": "a10", "phase": "prefill", "expert_parallel": True}, "expert_parallel"),  # a pass's
    ({"model": "gpt2", "gpu": "a10", "phase": "generate", "input_len": 8, "output_len": 2, "tp": 2,
      "expert_parallel": True}, "expert_parallel"),  # a dense model
    ({"model": "gpt2", "gpu": "a10", "phase": "generate", "input_len": 8, "output_len": 2, "offload_gb": "1"},
     "offload_gb"),
    # each of these was a 500 (found by drawing bodies at random)
    ({"model": "gpt2", "gpu": "a10", "phase": "train-run", "steps": 2, "global_batch": 4}, "seq"),
    ({"model": "gpt2", "gpu": "a10", "phase": "train-run", "steps": 2, "seq": 64}, "global_batch"),
    ({"model": "gpt2", "gpu": "a10", "phase": "generate", "input_len": 8, "output_len": 2, "dtype": []}, "dtype"),
    ({"model": "gpt2", "gpu": "a10", "phase": "generate", "input_len": 8, "output_len": 2, "power_limit_w": [1]},
     "power_limit_w"),
])
def test_bad_requests_get_422_naming_the_field(server, body, field):
    status, out = call(server, "/v1/estimate", body)
    assert status == 422 and out["detail"][0]["loc"] == ["body", field], out


@pytest.mark.parametrize("path, body, loc", [
    ("/v1/estimate", {"model": "gpt2", "gpu": "a10", "phase": "generate", "requests": [[8, 2]], "input_len": 8},
     ["body", "input_len"]),  # a list of requests gives each its own lengths
    ("/v1/estimate", {"model": "gpt2", "gpu": "a10", "phase": "generate", "input_len": 8}, ["body", "output_len"]),
    ("/v1/estimate", {"model": "gpt2", "gpu": "a10", "phase": "serve", "output_len": 8, "concurrency": 4},
     ["body", "input_len"]),
    ("/v1/estimate", {"model": "gpt2", "gpu": "a10", "phase": "train-run", "steps": 2, "global_batch": 4, "seq": 64,
                      "engine": "vllm-0.5.4"}, ["body", "engine"]),
    ("/v1/estimate/batch", {}, ["body", "rows"]),
    ("/v1/estimate/batch", {"rows": [5]}, ["body", "rows[0]"]),
    ("/v1/estimate/batch", {"rows": [{"model": "gpt2", "gpu": "a10", "phase": "generate", "input_len": 8,
                                      "output_len": 2}]}, ["body", "rows[0]"]),  # a batch holds single passes
    ("/v1/estimate/batch", {"rows": [{"model": "gpt2", "gpu": "a10", "colour": "red"}]}, ["body", "rows[0].colour"]),
    ("/v1/estimate", [{"model": "gpt2", "gpu": "a10"}], ["body"]),  # JSON, but no object
])
def test_bodies_the_service_refuses_before_any_estimate_name_their_field(physics_server, path, body, loc):
    status, out = call(physics_server, path, body)
    assert status == 422 and out["detail"][0]["loc"] == loc, out


def test_a_hugging_face_id_is_a_catalog_name_over_http_as_on_the_command_line(physics_server):
    # its "/" once read it as a path, refused here; a path the catalog does not know still is
    body = {"gpu": "a10", "batch": 2, "seq": 128}
    status, by_id = call(physics_server, "/v1/estimate", {**body, "model": "meta-llama/Llama-3.1-8B-Instruct"})
    _, by_name = call(physics_server, "/v1/estimate", {**body, "model": "llama-3.1-8b"})
    assert status == 200 and by_id["energy_j"] == by_name["energy_j"] > 0, by_id
    status, swept = call(physics_server, "/v1/sweep", {**body, "model": "Qwen/Qwen2.5-7B-Instruct"})
    assert status == 200 and [p["model"] for p in swept["points"]] == ["qwen2.5-7b"], swept
    status, out = call(physics_server, "/v1/estimate", {**body, "model": "meta-llama/no-such-model"})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "model"], out


def test_serving_a_list_of_requests_over_http_is_its_load(physics_server):
    """phase serve with `requests` (pairs, or objects with a trace's keys and times): the load `serve --requests`
    reads from a file, totalled over its output tokens; a length beside them is a 422 naming it."""
    rows = [{"ContextTokens": 374, "GeneratedTokens": 44, "TIMESTAMP": "2023-11-16 18:15:46.68"},
            {"ContextTokens": 396, "GeneratedTokens": 109, "TIMESTAMP": "2023-11-16 18:15:50.99"},
            {"ContextTokens": 879, "GeneratedTokens": 55, "TIMESTAMP": "2023-11-16 18:15:56.68"}]
    body = {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve"}
    status, out = call(physics_server, "/v1/estimate", {**body, "requests": rows})
    assert status == 200 and out["trace"]["format"] == "Azure LLM inference trace", out
    load = {k: out["trace"][k] for k in ("input_len", "output_len", "input_len_cv", "output_len_cv")}
    import joulecast

    expected = joulecast.serve("llama-3-8b", "h100-sxm", request_rate=out["trace"]["request_rate"],
                               output_tokens=208, estimator="physics", **load)
    assert out["energy_j"] == pytest.approx(expected.energy_j) and out["output_tokens"] == 208
    status, out = call(physics_server, "/v1/estimate", {**body, "requests": [[100, 10], [300, 30]],
                                                        "concurrency": 4})
    assert status == 200 and out["trace"]["input_len"] == 200 and out["batch"] == 4, out
    for extra, loc in (({"input_len": 512}, "input_len"), ({}, "request_rate")):  # pairs have no times
        status, out = call(physics_server, "/v1/estimate", {**body, "requests": [[100, 10]], **extra})
        assert status == 422 and out["detail"][0]["loc"] == ["body", loc], out
    # a sweep over GPUs at the requests' load: each point at their rate and whole-token mean lengths
    status, swept = call(physics_server, "/v1/sweep", {**body, "gpu": ["h100-sxm", "a100-sxm4-80gb"], "requests": rows})
    assert status == 200 and swept["trace"]["requests"] == 3, swept
    assert {(p["request_rate"], p["input_len"]) for p in swept["points"]} == {(0.2, 550)}


def test_serving_requests_window_by_window_over_http(physics_server):
    """phase serve with `requests` and `window_s`: the trace's load window by window, as the API gives it; or a
    load's `window_rates` themselves, and its `window_lengths`; rates or lengths beside requests are a 422 naming
    them."""
    import joulecast

    times = [k * 4.0 for k in range(300)] + [1200.0 + 20 * k for k in range(30)]  # 300 in 20 minutes, 30 in 580 s
    rows = [{"input_len": 600, "output_len": 100, "arrival_s": t} for t in times]
    body = {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "engine": "vllm-0.5.4"}
    status, out = call(physics_server, "/v1/estimate", {**body, "requests": rows, "window_s": 1200})
    from joulecast.data.requests import requests_from_rows

    one = joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", estimator="physics",
                          **requests_from_rows(rows).serving(window_s=1200))
    assert status == 200 and out["energy_j"] == pytest.approx(one.energy_j), out
    assert out["windows"]["request_rate"] == pytest.approx([300 / 1200, 30 / 580])
    assert out["windows"]["duration_s"] == pytest.approx([1200, 580])  # the last as long as the requests run
    status, out = call(physics_server, "/v1/estimate", {**body, "input_len": 600, "output_len": 100,
                                                        "window_rates": [0.25, 30 / 580], "window_s": 1200,
                                                        "last_window_s": 580})
    assert status == 200 and out["energy_j"] == pytest.approx(one.energy_j), out
    # each window at its own lengths: a column a length, JSON's null for a window without arrivals
    lengths = {"input_len": [600, None, 2000], "output_len": [100, None, 300]}
    status, out = call(physics_server, "/v1/estimate", {**body, "window_rates": [0.25, 0.0, 0.05], "window_s": 1200,
                                                        "window_lengths": lengths})
    own = joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", estimator="physics",
                          window_rates=[0.25, 0.0, 0.05], window_s=1200, window_lengths=lengths)
    assert status == 200 and out["energy_j"] == pytest.approx(own.energy_j), out
    assert out["windows"]["input_len"][2] == 2000 and out["input_len"] == pytest.approx((300 * 600 + 60 * 2000) / 360)
    for key, value in (("window_rates", [1.0]), ("last_window_s", 100), ("window_lengths", lengths)):  # the requests'
        status, out = call(physics_server, "/v1/estimate", {**body, "requests": rows, "window_s": 1200, key: value})
        assert status == 422 and out["detail"][0]["loc"] == ["body", key], out
    status, out = call(physics_server, "/v1/estimate", {**body, "window_rates": [0.25], "window_s": 1200,
                                                        "window_lengths": {"input_len": [600]}})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "window_lengths"], out
    # one in flight at most: the busy window past it, refused, or its excess queued for the window after it
    busy = {**body, "input_len": 600, "output_len": 100, "window_rates": [5.0, 0.0], "window_s": 600, "max_batch": 1}
    status, out = call(physics_server, "/v1/estimate", busy)
    assert status == 422 and out["detail"][0]["loc"] == ["body", "window_rates"], out
    status, out = call(physics_server, "/v1/estimate", {**busy, "queue": True})
    assert status == 200 and out["queue"] and out["windows"]["backlog"][0] > 0 and out["wait_s"] > 0, out
    # over two instances, autoscaled: the quiet window's spare idle, or off and started again for a window after
    scaled = {**busy, "window_rates": [1.5, 0.05, 1.5], "instances": 2, "autoscale": True}
    status, out = call(physics_server, "/v1/estimate", {**scaled, "spare": "idle"})
    api = joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", estimator="physics", **{
        k: v for k, v in scaled.items() if k not in ("model", "gpu", "phase", "engine")}, spare="idle")
    assert status == 200 and out["energy_j"] == pytest.approx(api.energy_j) and out["spare"] == "idle", out
    assert out["windows"]["instances"] == [2, 1, 2] and out["windows"]["standby_j"][1] > 0
    status, out = call(physics_server, "/v1/estimate", {**scaled, "cold_start_s": 60})
    assert status == 200 and out["windows"]["started"] == [0, 0, 1] and out["windows"]["standby_j"][2] > 0, out
    status, out = call(physics_server, "/v1/estimate", {**busy, "queue": True, "headroom": 0.2})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "headroom"], out
    # sized by the window before (the first its own), each window's gaps between tokens kept within a target
    status, out = call(physics_server, "/v1/estimate", {**scaled, "reactive": True, "queue": True,
                                                        "itl_p99_target_s": 1.0})
    assert status == 200 and out["reactive"] and out["itl_p99_target_s"] == 1.0, out
    # the last window on the one the window before needed, then its backlog drained on the two it needed
    assert out["windows"]["instances"][:2] == [2, 2] and 1 < out["windows"]["instances"][2] < 2, out
    assert len(out["windows"]["itl_p99_s"]) == 3, out
    status, out = call(physics_server, "/v1/estimate", {**busy, "reactive": True})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "reactive"], out
    # scaling 60 s after a window's load changes, in to the most needed over 300 s
    status, out = call(physics_server, "/v1/estimate", {**scaled, "reactive": True, "queue": True,
                                                        "reaction_s": 60, "scale_in_delay_s": 300})
    assert status == 200 and (out["reaction_s"], out["scale_in_delay_s"]) == (60, 300), out
    assert out["windows"]["instances"][1] > 1 and out["windows"]["instances"][2] < 2, out
    status, out = call(physics_server, "/v1/estimate", {**scaled, "reaction_s": 60})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "reaction_s"], out


def test_reports_over_http_are_the_cli_s_pages(physics_server):
    """POST /v1/estimate/report: a serving load window by window as estimate --report's page (a bar a window, its
    carbon on the body's series); /v1/sweep/report: a sweep's page with its Pareto front; a body that is no load
    window by window, or a bad field, is a 422 naming it."""
    body = {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "engine": "vllm-0.5.4", "input_len": 512,
            "output_len": 128, "window_rates": [0.5, 2.0, 0.0], "window_s": 600, "carbon_series": [100, 500]}
    status, page = call(physics_server, "/v1/estimate/report", body)
    assert status == 200 and page.startswith("<!doctype html>") and "<script" not in page, page[:200]
    assert page.count("<rect class='power'") == 3 and page.count("<rect class='carbon'") == 3
    assert "the body&#x27;s window_rates: 3 windows" in page
    rows = [{"input_len": 600, "output_len": 100, "arrival_s": 4.0 * k} for k in range(300)]
    status, page = call(physics_server, "/v1/estimate/report", {**{k: v for k, v in body.items() if k not in (
        "input_len", "output_len", "window_rates")}, "requests": rows, "window_s": 300})
    assert status == 200 and page.count("<rect class='power'") == 4 and "the body&#x27;s requests" in page
    for change, field in (({"phase": "generate"}, "phase"), ({"window_s": None}, "window_s"),
                          ({"window_rates": [1.0, -1.0, 0.0]}, "window_rates"), ({"batch": 4}, "batch")):
        status, out = call(physics_server, "/v1/estimate/report", {**body, **change})
        assert status == 422 and out["detail"][0]["loc"] == ["body", field], (change, out)
    swept = {"model": "llama-3-8b", "phase": "prefill", "gpu": ["h100-sxm", "a100-sxm4-80gb"], "batch": [1, 8],
             "seq": 512}
    status, page = call(physics_server, "/v1/sweep/report", swept)
    assert status == 200 and page.count("<svg") == 1 and "Pareto front" in page
    status, out = call(physics_server, "/v1/sweep/report", {**swept, "batch": [0]})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "batch"], out


def test_a_body_that_is_no_json_or_asks_for_another_estimator_is_a_422(physics_server):
    status, out = call(physics_server, "/v1/estimate", raw=b'{"model": "gpt2",')  # cut short
    assert status == 422 and out["detail"] == [{"loc": ["body"], "msg": "expected a JSON object"}], out
    status, out = call(physics_server, "/v1/plan", {"model": "gpt2", "estimator": "physics"})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "estimator"], out
    assert "the service answers with its own estimator" in out["detail"][0]["msg"]


def test_keys_sizes_and_metrics(server):
    assert call(server, "/v1/gpus", key=None)[0] == 401 and call(server, "/v1/gpus", key="wrong")[0] == 401
    assert call(server, "/healthz", key=None)[0] == 200  # liveness needs no key
    # an oversized body is refused on its declared length, before it is read
    import http.client

    host, port = server.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.putrequest("POST", "/v1/estimate")
    for name, value in (("Content-Type", "application/json"), ("Content-Length", str(3 * 2**20)), ("X-API-Key", KEY)):
        connection.putheader(name, value)
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and "body over" in response.read().decode()
    connection.close()
    # ... and one sent in chunks without a length, once it has read past the limit
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    chunks = (b'{"rows": [' + b'{"model": "gpt2", "gpu": "a10"},' * 20_000 for _ in range(8))
    connection.request("POST", "/v1/estimate/batch", body=chunks, encode_chunked=True,
                       headers={"Content-Type": "application/json", "X-API-Key": KEY})
    response = connection.getresponse()
    assert response.status == 413 and "body over" in response.read().decode()
    connection.close()
    status, out = call(server, "/v1/estimate/batch", {"rows": [{"model": "gpt2", "gpu": "a10"}] * 10_001})
    assert status in (413, 422)
    status, text = call(server, "/metrics")
    assert status == 200 and 'joulecast_requests_total{route="/v1/estimate",status="200"}' in text
    assert 'joulecast_request_seconds_count{route="/v1/estimate"}' in text


def test_the_model_is_reloaded_when_its_alias_moves(monkeypatch):
    """A models:/ name@alias estimator is checked again after RELOAD_S and reloaded when the alias points at a new
    version; responses then name that version."""
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    from joulecast import service

    versions, loads = iter(["1", "1", "2"]), []
    monkeypatch.setattr(service.ModelHolder, "_alias_version", lambda self: next(versions))
    monkeypatch.setattr(service.ModelHolder, "_load", lambda self: loads.append(self.uri) or f"model {len(loads)}")
    monkeypatch.setattr(service, "RELOAD_S", 0.0)
    holder = service.ModelHolder("models:/joulecast@champion")
    assert holder.current() == "model 1" and holder.describe() == "models:/joulecast@champion (version 1)"
    assert holder.current() == "model 2" and holder.describe().endswith("(version 2)") and len(loads) == 2


def test_a_plan_over_http_is_the_cli_s(server):
    import yaml

    import joulecast

    job = yaml.safe_load(open("data/examples/jobs/two-sites.yaml"))
    status, out = call(server, "/v1/plan", job)
    direct = joulecast.plan(joulecast.load_job("data/examples/jobs/two-sites.yaml"))
    assert status == 200 and [p["strategy"] for p in out["plans"]] == [p.strategy for p in direct.plans]
    assert out["plans"][1]["energy_j"] == pytest.approx(direct.plans[1].energy_j)
    bad = {**job, "sites": [{**job["sites"][0], "carbon_series": "/etc/passwd"}, job["sites"][1]]}
    status, out = call(server, "/v1/plan", bad)
    assert status == 422 and out["detail"][0]["loc"] == ["body", "sites[0].carbon_series"]
    status, out = call(server, "/v1/plan", {**job, "model": "/tmp/config.json"})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "model"]
    status, out = call(server, "/v1/plan", {**job, "links": [{**job["links"][0], "gbps": -5}]})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "links[0].gbps"]
    status, out = call(server, "/v1/plan", {**job, "evals": 0})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "evals"]
    status, out = call(server, "/v1/plan", {**job, "micro_batch": "auto"})  # each site the largest that fits
    assert status == 200 and all(s["micro_batch"] * s["accumulation"] == job["global_batch"] // sum(
        t["gpus"] for t in job["sites"]) for s in out["sites"]), out
    for sites, links in ((5, job["links"]), (job["sites"], 5)):  # no list: a 422 naming it (a number was a 500)
        status, out = call(server, "/v1/plan", {**job, "sites": sites, "links": links})
        assert status == 422 and out["detail"][0]["loc"] == ["body", "sites" if sites == 5 else "links"]


def test_serving_and_training_runs_over_http_are_the_cli_s(server):
    import joulecast

    body = {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "input_len": 512, "output_len": 256,
            "request_rate": 2.0}
    status, out = call(server, "/v1/estimate", body)
    direct = joulecast.serve("llama-3-8b", "h100-sxm", input_len=512, output_len=256, request_rate=2.0)
    assert status == 200 and out["energy_per_output_token_j"] == pytest.approx(direct.energy_per_output_token_j)
    body = {"model": "gpt2", "gpu": "a10", "phase": "train-run", "seq": 256, "global_batch": 8, "micro_batch": 2,
            "steps": 3, "lora_rank": 4}
    status, out = call(server, "/v1/estimate", body)
    assert status == 200 and out["accumulation"] == 4 and out["finetune"] == "lora"
    status, lean = call(server, "/v1/estimate", {**body, "launch_mode": "graph", "head_tokens": 64})
    assert status == 200 and (lean["launch_mode"], lean["head_tokens"]) == ("graph", 64)
    status, task = call(server, "/v1/estimate", {**body, "head_outputs": 2})
    assert status == 200 and task["head_outputs"] == 2 and task["energy_j"] < out["energy_j"]  # host-bound: energy
    assert lean["time_s"] < out["time_s"]
    status, fused = call(server, "/v1/estimate", {**body, "fusions": ["activation"]})
    assert status == 200 and fused["fusions"] == ["activation"] and fused["time_s"] < out["time_s"]
    status, slow = call(server, "/v1/estimate", {**body, "forward_overhead_s": 0.003})
    assert status == 200 and slow["forward_overhead_s"] == 0.003 and slow["time_s"] > out["time_s"]
    status, one = call(server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "fusions": ["activation"]})
    assert status == 200 and one["workload"].endswith("/fused-activation")
    status, gen = call(server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "phase": "generate", "input_len": 8,
                                                "output_len": 4, "fusions": ["activation"]})
    assert status == 422 and gen["detail"][0]["loc"] == ["body", "fusions"]
    status, bad = call(server, "/v1/estimate", {**body, "fusions": ["gelu"]})
    assert status == 422 and bad["detail"][0]["loc"] == ["body", "fusions"]
    status, out = call(server, "/v1/estimate", {**body, "concurrency": 4})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "concurrency"]
    status, out = call(server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "global_batch": 8})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "global_batch"]
    # a job's field outside its phase names the phase that takes it (before, 'serve or train-run' for either's)
    status, out = call(server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "concurrency": 4})
    assert status == 422 and out["detail"][0]["msg"] == "concurrency: applies to phase serve only"
    # a phase in any case, as the CLI reads --phase (before, 'Serve' fell through to a pass and refused concurrency)
    serve = {"model": "gpt2", "gpu": "a10", "input_len": 32, "output_len": 4, "concurrency": 2}
    assert call(server, "/v1/estimate", {**serve, "phase": "Serve"}) == call(server, "/v1/estimate",
                                                                              {**serve, "phase": "serve"})
    status, out = call(server, "/v1/estimate", {**serve, "phase": "serve", "request_rate": 1.0})
    assert status == 422 and out["detail"][0]["msg"] == ("concurrency: give concurrency or request_rate, one of "
                                                         "them; got both")
    # JSON has one number type: counts sent as 1e9 or 8.0 are the integers they name; a fraction is refused by name
    run = {"model": "gpt2", "gpu": "a10", "phase": "train-run", "seq": 256, "global_batch": 8}
    status, by_float = call(server, "/v1/estimate", {**run, "tokens": 1e9, "micro_batch": 2.0})
    status_int, by_int = call(server, "/v1/estimate", {**run, "tokens": 10**9, "micro_batch": 2})
    assert status == status_int == 200 and by_float == by_int and by_float["steps"] == -(-10**9 // (8 * 256))
    status, out = call(server, "/v1/estimate", {**run, "tokens": 1e9, "micro_batch": 2.5})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "micro_batch"]
    # "auto": the largest micro-batch that fits, as the CLI's --micro-batch auto
    status, out = call(server, "/v1/estimate", {**run, "model": "llama-3-8b", "gpu": "h100-sxm", "seq": 2048,
                                                "global_batch": 64, "lora_rank": 16, "steps": 2, "micro_batch": "auto"})
    assert status == 200 and out["micro_batch"] == 4 and out["micro_batch_auto"] is True, out
    status, out = call(server, "/v1/estimate", {**run, "steps": 2, "micro_batch": "most"})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "micro_batch"]
    status, out = call(server, "/v1/estimate", {"model": "llama-3-70b", "gpu": "h100-sxm", "phase": "serve",
                                                "input_len": 512, "output_len": 128, "concurrency": 16, "tp": "auto"})
    assert status == 200 and (out["tp"], out["tp_auto"]) == (2, True), out
    # and in a sweep, beside numbers: each auto point the micro-batch chosen on its GPU
    status, out = call(server, "/v1/sweep", {**run, "model": "llama-3-8b", "gpu": ["h100-sxm", "a10"], "seq": 2048,
                                             "global_batch": 64, "lora_rank": 16, "steps": 2, "micro_batch": ["auto"]})
    assert status == 200, out
    assert {(p["gpu"], p["micro_batch"], p["micro_batch_auto"], p["feasible"]) for p in out["points"]} == {
        ("h100-sxm", 4, True, True), ("a10", 1, True, False)}
    status, out = call(server, "/v1/sweep", {**run, "steps": 2, "lora_rank": [0, 16], "recompute": "full"})
    assert status == 200 and [p["lora_rank"] for p in out["points"]] == [0, 16] and out["job"]["recompute"] == "full"
    status, out = call(server, "/v1/estimate/batch", {"rows": [{"model": "gpt2", "gpu": "a10", "batch": 4.0}]})
    assert status == 200 and out["rows"][0]["batch"] == 4


def test_an_estimate_s_carbon_over_http_is_the_cli_s(server, capsys):
    """Every phase's answer carries the carbon of its energy, at the grid and PUE sent (default WORLD, average); a
    bad one is a 422 naming its field, before any estimate."""
    from joulecast.cli import main

    run = {"model": "gpt2", "gpu": "a10", "phase": "train-run", "seq": 256, "global_batch": 8, "steps": 3}
    status, out = call(server, "/v1/estimate", {**run, "grid": "FR", "pue": "hyperscale"})
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "train-run", "--seq", "256",
                 "--global-batch", "8", "--steps", "3", "--grid", "FR", "--pue", "hyperscale", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert status == 200 and out["carbon_g"] == pytest.approx(cli["carbon_g"]) and out["carbon"] == cli["carbon"]
    status, one = call(server, "/v1/estimate", {"model": "gpt2", "gpu": "a10", "carbon_intensity": 300})
    assert status == 200 and one["carbon_g"] == pytest.approx(one["energy_j"] * 300 * 1.58 / 3.6e6)
    status, hourly = call(server, "/v1/estimate", {**run, "carbon_series": [100, 300], "pue": 1.0})
    assert status == 200 and hourly["carbon"]["g_per_kwh"] == pytest.approx(100.0)  # 3 steps: the first hour
    for field, value, loc in (("grid", "mars", "grid"), ("pue", 7, "pue"), ("carbon_intensity", "lots",
                                                                         "carbon_intensity"),
                              ("carbon_series", [1, "x"], "carbon_series[1]")):  # the hour that is wrong
        status, bad = call(server, "/v1/estimate", {**run, field: value})
        assert status == 422 and bad["detail"][0]["loc"] == ["body", loc], bad
    rows = [{"model": "gpt2", "gpu": "a10", "batch": b} for b in (1, 8)]
    status, batch = call(server, "/v1/estimate/batch", {"rows": rows, "grid": "FR", "pue": 1.2})
    assert status == 200 and [r["grid"] for r in batch["rows"]] == ["FR", "FR"]
    assert [r["carbon_g"] for r in batch["rows"]] == pytest.approx([r["energy_j"] * 56 * 1.2 / 3.6e6
                                                                    for r in batch["rows"]])
    status, bad = call(server, "/v1/estimate/batch", {"rows": rows, "colour": "red"})
    assert status == 422 and bad["detail"][0]["loc"] == ["body", "colour"], bad


def test_a_sweep_over_http_is_the_cli_s(physics_server, server, capsys):
    """POST /v1/sweep: the CLI's sweep over the body's lists, its points, front and best the same; a bad field, a
    path, a TP its phase does not take or a grid too large for a request is a 422 naming it."""
    from joulecast.cli import main

    body = {"model": "llama-3-8b", "phase": "prefill", "gpu": ["h100-sxm", "a100-sxm4-80gb"], "batch": [1, 8],
            "seq": 1024, "power_limit_w": [300, 500], "max_time_s": 2, "grid": ["FR", "DE"]}
    status, out = call(physics_server, "/v1/sweep", body)
    assert main(["sweep", "--model", "llama-3-8b", "--phase", "prefill", "--gpu", "h100-sxm,a100-sxm4-80gb", "--batch",
                 "1,8", "--seq", "1024", "--power-limit", "300,500", "--max-time", "2", "--grid", "FR,DE",
                 "--estimator", "physics", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert status == 200 and len(out["points"]) == len(cli["points"]) == 12 and out["skipped"] == cli["skipped"]
    assert [p["energy_j"] for p in out["points"]] == pytest.approx([p["energy_j"] for p in cli["points"]])
    assert out["best"]["grid"] == cli["best"]["grid"] == "FR" and len(out["pareto"]) == len(cli["pareto"])
    assert call(physics_server, "/v1/sweep", {**body, "phase": "Prefill"}) == (status, out)  # any case, as the CLI
    assert out["unmet"] is None and cli["unmet"] is None  # a best point: nothing to explain
    status, none = call(physics_server, "/v1/sweep", {**body, "model": "llama-3-70b", "phase": "decode",
                                                      "seq": 4096, "max_time_s": None})
    assert status == 200 and none["best"] is None and "exceed their GPU's memory" in none["unmet"]
    status, served = call(physics_server, "/v1/sweep", {"model": "llama-3-70b", "phase": "serve", "gpu": "h100-sxm",
                                                        "concurrency": [16, 64], "input_len": 512, "output_len": 256,
                                                        "tp": [2, 4]})
    assert status == 200 and sorted({p["tp"] for p in served["points"]}) == [2, 4] and served["job"] == {
        "output_len": 256}
    status, lengths = call(physics_server, "/v1/sweep", {"model": "llama-3-8b", "phase": "generate", "gpu": "h100-sxm",
                                                         "input_len": 512, "output_len": [64, 256]})
    assert status == 200 and [p["output_len"] for p in lengths["points"]] == [64, 256]
    assert "output_len" not in lengths["job"]  # several lengths: an axis, as the CLI's --output-len 64,256
    status, rated = call(physics_server, "/v1/sweep", {"model": "llama-3-8b", "phase": "serve", "gpu": "h100-sxm",
                                                       "input_len": 512, "output_len": 256, "request_rate": [1, 4]})
    assert status == 200 and [p["request_rate"] for p in rated["points"]] == [1, 4] and rated["front"] == "latency"
    status, out = call(physics_server, "/v1/sweep", {"model": "llama-3-8b", "phase": "serve", "gpu": "h100-sxm",
                                                     "input_len": 512, "output_len": 256,
                                                     "request_rate": list(range(1, 52))})  # 51 loads, ~3 s of CPU
    assert status == 422 and out["detail"][0]["loc"] == ["body", "sweep"] and "at most 50 here" in \
        out["detail"][0]["msg"]
    status, out = call(physics_server, "/v1/sweep", {"model": "gpt2", "gpu": "a10", "fusions": ["rope"]})
    assert status == 422 and out["detail"][0]["loc"] == ["body", "fusions"]  # as a single estimate's
    status, out = call(physics_server, "/v1/sweep", {"model": "gpt2", "gpu": "a10", "bacth": [1, 8]})
    assert status == 422 and "did you mean 'batch'?" in out["detail"][0]["msg"]  # a typo named, as a job file's
    for bad, field in (({"colour": "red"}, "colour"), ({"gpu": "../gpus/a10.yaml"}, "gpu"), ({"tp": 2}, "tp"),
                       ({"objective": "cost"}, "objective"), ({"min_tokens_per_s": 0}, "min_tokens_per_s"),
                       ({"max_power_w": -1}, "max_power_w"), ({"batch": list(range(1, 101)), "seq":
                                                               list(range(1, 201))}, "sweep"),
                       # the service's own settings, not a body's (each was a 500: a keyword given twice, or a
                       # number taken for the workers)
                       ({"estimator": "physics"}, "estimator"), ({"max_points": 10**9}, "max_points"),
                       ({"run": 5}, "run"), ({"progress": 5}, "progress")):
        status, out = call(physics_server, "/v1/sweep", {"model": "gpt2", "gpu": "a10", **bad})
        assert status == 422 and out["detail"][0]["loc"] == ["body", field], out
    assert "/v1/sweep" in call(physics_server, "/")[1]["routes"]
    status, hybrid = call(server, "/v1/sweep", {"model": "gpt2", "gpu": ["a10", "h200"], "batch": [1, 8]})
    assert status == 200 and {p["method"] for p in hybrid["points"]} == {"hybrid"} and hybrid["estimator"]


def test_passes_generations_and_runs_take_the_hosts_dispatch_and_a_bad_one_names_its_field(physics_server):
    """host_dispatch_s, in seconds as the service's other fields: a faster host shortens a host-bound decode step,
    a generation's and a training run's; a value outside 0-1 ms is a 422 naming the field."""
    body = {"model": "llama-3-8b", "gpu": "h200", "phase": "decode", "seq": 2048}
    gen = {**body, "phase": "generate", "input_len": 64, "output_len": 4}
    train = {"model": "gpt2", "gpu": "h200", "phase": "train-run", "seq": 256, "global_batch": 2, "steps": 10}
    for ask, figure in ((body, "time_s"), (gen, "tpot_s"), (train, "time_s")):
        _, default = call(physics_server, "/v1/estimate", ask)
        status, fast = call(physics_server, "/v1/estimate", {**ask, "host_dispatch_s": 18e-6})
        assert status == 200 and fast[figure] < 0.8 * default[figure]
    for ask in (body, gen):
        status, out = call(physics_server, "/v1/estimate", {**ask, "host_dispatch_s": -1})
        assert status == 422 and out["detail"][0]["loc"] == ["body", "host_dispatch_s"], out
        assert "must be from 0 to 0.001 s a launch" in out["detail"][0]["msg"]


def test_a_bad_address_is_one_line_before_the_estimator_loads():
    """A port out of range, a host that cannot resolve and an address taken each name their option (before, uvicorn
    raised OverflowError past 65535, or logged an error line and exited 1 or 3)."""
    from joulecast.data.errors import InputError
    from joulecast.service import listening_socket

    with pytest.raises(InputError, match="--port: must be between 1 and 65535, got 70000"):
        listening_socket("127.0.0.1", 70000)
    with pytest.raises(InputError, match="--host: cannot resolve 'a..b'"):  # refused by the codec, no DNS asked
        listening_socket("a..b", 8000)
    taken = listening_socket("127.0.0.1", _free_port())
    try:
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InputError, match=rf"--port: cannot listen on 127.0.0.1:{port} \(Address already in use\)"):
            listening_socket("127.0.0.1", port)
    finally:
        taken.close()


def test_each_route_s_docs_show_bodies_that_answer(physics_server, tmp_path):
    """/docs shows each POST route's example bodies (service.EXAMPLES, "Try it out"), and each answers 200; the
    page and its scripts come from the service itself, not a CDN, and open without the API key (they compute
    nothing), in a real browser where one is installed."""
    from joulecast.service import EXAMPLES

    status, spec = call(physics_server, "/openapi.json", key=None)
    assert status == 200
    status, page = call(physics_server, "/docs", key=None)
    assert status == 200 and "cdn" not in page and "/static-offline-docs/swagger-ui-bundle.js" in page
    assert call(physics_server, "/static-offline-docs/swagger-ui-bundle.js", key=None)[0] == 200
    assert call(physics_server, "/v1/gpus", key=None)[0] == 401  # an estimate's route still wants the key
    for route, examples in EXAMPLES.items():
        shown = spec["paths"][route]["post"]["requestBody"]["content"]["application/json"]["examples"]
        assert {name: e["value"] for name, e in shown.items()} == examples
        for name, body in examples.items():
            status, out = call(physics_server, route, body)
            assert status == 200, (route, name, out)
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed: the docs were checked as text only")
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", f"--user-data-dir={tmp_path / 'chromium'}",
                          "--virtual-time-budget=10000", "--dump-dom", physics_server + "/docs"],
                         capture_output=True, text=True, timeout=120).stdout
    assert "/v1/sweep" in dom and "/v1/estimate/batch" in dom  # Swagger UI drew the routes from the schema


def test_a_serving_sweep_by_rate_is_bounded_tighter_than_one_by_concurrency():
    """A serving load without a concurrency (a rate, a list of requests, or window by window) finds each point's
    batch among 24 steps, so the service takes at most MAX_SWEEP_RATES of its points; by concurrency,
    MAX_SWEEP_JOBS."""
    import joulecast
    from joulecast.service import MAX_SWEEP_JOBS, MAX_SWEEP_RATES, sweep_points

    body = {"model": "gpt2", "gpu": "h100-sxm", "phase": "serve", "input_len": 64, "output_len": 16,
            "power_limit_w": f"range:{MAX_SWEEP_RATES + 1}"}
    for load in ({"request_rate": 1.0}, {"window_rates": [1.0, 0.5], "window_s": 600},
                 {"requests": [{"input_len": 64, "output_len": 16, "arrival_s": t} for t in (0, 60, 120)]}):
        given = {**body, **load}
        if "requests" in load:
            del given["input_len"], given["output_len"]
        with pytest.raises(joulecast.InputError, match=f"^sweep: {MAX_SWEEP_RATES + 1} points; at most "
                                                       f"{MAX_SWEEP_RATES} here"):
            sweep_points(given, "physics")
    assert MAX_SWEEP_RATES + 1 <= MAX_SWEEP_JOBS  # by concurrency, the same points are taken
    assert len(sweep_points({**body, "concurrency": 4}, "physics")["points"]) == MAX_SWEEP_RATES + 1
