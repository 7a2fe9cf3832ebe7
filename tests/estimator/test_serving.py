"""Steady-state serving: a step of decodes and prompt chunks, a load by concurrency or by Poisson rate (Little's law,
idle time), tensor parallelism, and its errors."""

import functools
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

import joulecast
from joulecast import render
from joulecast.cli import main
from joulecast.data.gpus import gpu as lookup
from joulecast.estimator.serving import serve
from joulecast.features import arch


def test_without_prompts_a_serving_step_is_a_decode_step():
    job = serve("llama-3-8b", "h100-sxm", input_len=1, output_len=64, concurrency=8, estimator="physics")
    step = joulecast.estimate(joulecast.workload("llama-3-8b", phase="decode", batch=8, seq=33, launch_mode="graph"),
                              "h100-sxm", estimator="physics")
    assert job.step_time_s == pytest.approx(step.time_s, rel=1e-12)
    assert job.energy_per_output_token_j == pytest.approx(step.energy_j / 8, rel=1e-12)
    assert job.tokens_per_s == pytest.approx(8 / step.time_s) and job.idle_share == 0.0


def test_prompts_add_work_to_each_step_and_longer_prompts_more():
    short, long = (serve("llama-3-8b", "h100-sxm", input_len=n, output_len=256, concurrency=64, estimator="physics")
                   for n in (64, 2048))
    assert long.step_time_s > short.step_time_s and long.energy_per_output_token_j > short.energy_per_output_token_j
    assert long.energy_per_request_j == pytest.approx(long.energy_per_output_token_j * 256)


def test_a_request_rate_follows_littles_law_and_idles_at_light_load():
    busy = serve("llama-3-8b", "h100-sxm", input_len=256, output_len=200, request_rate=4.0, estimator="physics")
    assert busy.tokens_per_s == pytest.approx(4.0 * 200) and busy.requests_per_s == pytest.approx(4.0)
    assert busy.batch == pytest.approx(4.0 * 200 * busy.step_time_s, rel=0.05)  # in flight = rate x latency
    light = serve("llama-3-8b", "h100-sxm", input_len=256, output_len=200, request_rate=0.01, estimator="physics")
    assert light.idle_share == pytest.approx(math.exp(-light.batch)) and light.idle_share > 0.9
    assert light.energy_per_output_token_j > 10 * busy.energy_per_output_token_j  # idle power over few tokens
    spec = joulecast.gpu("h100-sxm")
    assert spec.idle_power_w < light.power_w < busy.power_w
    with pytest.raises(joulecast.InputError, match=r"request_rate: .* raise max_batch or add GPUs \(at least \d+ "
                                                   r"instances of this size for the rate\)$"):
        serve("llama-3-8b", "h100-sxm", input_len=256, output_len=200, request_rate=1e4, estimator="physics")


@pytest.mark.parametrize("model, gpu, tp, rate", [("llama-3-8b", "l4", 1, 20.0), ("llama-3-70b", "h100-sxm", 1, 5.0),
                                                  ("llama-3-70b", "h100-sxm", 2, 20.0)])
def test_a_rate_past_a_batch_the_gpu_cannot_hold_asks_for_gpus_not_a_larger_batch(model, gpu, tp, rate):
    """Past what max_batch in flight serve, where that batch's step already exceeds the GPU's memory a larger batch
    cannot serve the rate: the refusal says how much memory the batch needs and asks for GPUs."""
    at_max = serve(model, gpu, input_len=512, output_len=256, concurrency=256, tp=tp, estimator="physics")
    assert "exceeds-memory" in at_max.flags
    with pytest.raises(joulecast.InputError) as refused:
        serve(model, gpu, input_len=512, output_len=256, request_rate=rate, tp=tp, estimator="physics")
    spec, said = joulecast.gpu(gpu), str(refused.value)
    assert said.startswith(f"request_rate: {rate:g} requests/s is beyond what 256 in flight serve (")
    assert (f"/s); {at_max.memory_gb:.3g} GiB a GPU at that batch, more than {spec.name}'s {spec.memory_gb:g} GiB, so "
            f"add GPUs{' (tp)' if tp == 1 else ''} or instances, not max_batch (at least ") in said


def test_tensor_parallel_instances_share_a_step_and_pay_its_all_reduces():
    two, four = (serve("llama-3-70b", "h100-sxm", input_len=256, output_len=256, concurrency=64, tp=t,
                       estimator="physics") for t in (2, 4))
    assert four.tokens_per_s > two.tokens_per_s and four.tp == 4
    assert four.memory_gb < two.memory_gb  # each GPU holds its shard
    with pytest.raises(joulecast.InputError, match="tp: 3 does not divide the model.s 64 attention heads"):
        serve("llama-3-70b", "h100-sxm", input_len=256, output_len=256, concurrency=8, tp=3, estimator="physics")


def test_vllm_0_5_instances_wait_a_step_for_the_drivers_broadcast_to_each_other_worker():
    """vLLM 0.5.4's tensor-parallel step adds its host work per GPU beyond the first (the driver's broadcast of the
    step's inputs, data/serving_engines.yaml), which every GPU waits out at the engine's power over idle; one GPU
    and vLLM 0.11.1 add none; a generation's steps on that engine add it as serving's do."""
    from joulecast.data import engines
    from joulecast.estimator.tensor_parallel import worker_host
    from joulecast.features.power import waiting_power_w

    spec, vllm = joulecast.gpu("h100-sxm"), engines.engine("vllm-0.5.4")
    assert worker_host("vllm-0.5.4", 4, spec, None) == pytest.approx(
        (3 * vllm.host_s_per_tp_worker, vllm.power_over_idle * waiting_power_w(spec, None)))
    assert worker_host("vllm-0.5.4", 1, spec, None) == worker_host("vllm-0.11.1", 4, spec, None) == (0.0, 0.0)
    assert worker_host(None, 4, spec, None) == (0.0, 0.0)
    kw = dict(input_len=256, output_len=256, concurrency=64, tp=4, estimator="physics")
    old, new = (serve("llama-3-70b", "h100-sxm", engine=e, **kw) for e in ("vllm-0.5.4", "vllm-0.11.1"))
    host_s, host_w = worker_host("vllm-0.5.4", 4, spec, None)
    # the same kernels on both engines but for the host work each has: the old one's three workers' wait is on top
    assert old.step_time_s > new.step_time_s + host_s * 0.9
    assert old.gpu_busy_share < new.gpu_busy_share
    # a generation's steps: exactly that wait on top of what an engine with the same all-reduce and none adds
    from joulecast.estimator.tensor_parallel import with_all_reduces
    from joulecast.features.lowering import resolve_model

    steps = pd.DataFrame({"time_s": [0.01, 0.02], "energy_j": [3.0, 5.0]})
    tokens = np.array([8.0, 8.0])
    slow, plain = (with_all_reduces(steps, resolve_model("llama-3-70b")[0], spec, e, 4, tokens, None)
                   for e in ("vllm-0.5.4", "sglang-0.4"))
    assert np.allclose(slow["time_s"] - plain["time_s"], host_s)
    assert np.allclose(slow["energy_j"] - plain["energy_j"], 4 * host_s * host_w)


def test_an_engine_sums_a_tensor_parallel_step_by_its_own_all_reduce():
    """Every engine listed all-reduces with its own one- or two-shot kernels; the kernels alone with NCCL's ring,
    whose 2(n-1) latencies make a small step's 160 all-reduces (Llama 3 70B, 4 GPUs) cost milliseconds more."""
    from joulecast.data import engines
    from joulecast.data.models import hidden_size, layer_count
    from joulecast.features import collectives
    from joulecast.features.lowering import resolve_model

    assert all(e.all_reduce == "custom" for e in engines.catalog().values())
    kw = dict(input_len=1, output_len=256, concurrency=8, tp=4, estimator="physics")
    ring, own = serve("llama-3-70b", "h100-sxm", engine="none", **kw), serve("llama-3-70b", "h100-sxm",
                                                                                engine="sglang-0.4", **kw)
    config = resolve_model("llama-3-70b")[0]
    calls, payload = 2 * layer_count(config), 8 * hidden_size(config) * 2.0  # bf16 rows of the 8 decodes
    saved = calls * (collectives.time_s("all-reduce", 4, payload, 450, 5)
                     - collectives.custom_all_reduce_s(4, payload, 450, 5))
    assert ring.step_time_s - own.step_time_s == pytest.approx(float(saved), rel=1e-9)
    assert 3e-3 < saved < 4e-3
    one = serve("llama-3-8b", "h100-sxm", engine="none", **{**kw, "tp": 1})  # one GPU: nothing to sum
    assert one.step_time_s == serve("llama-3-8b", "h100-sxm", engine="sglang-0.4", **{**kw, "tp": 1}).step_time_s


def test_pcie_cards_sum_a_tensor_parallel_step_over_pcie_and_past_two_gpus_by_nccl():
    """A10s (no NVLink) sum their activations over PCIe 4, 32 GB/s a direction, where they were summed over NVLink 3
    (300 GB/s); past two GPUs an engine's own kernels are off there (vLLM: 'not supported on more than two PCIe-only
    GPUs') and NCCL's ring runs. SXM boards keep NVLink and the engine's kernels."""
    from joulecast.data.gpus import gpu
    from joulecast.data.models import hidden_size, layer_count
    from joulecast.estimator.tensor_parallel import all_reduce_s
    from joulecast.features import collectives
    from joulecast.features.lowering import resolve_model

    config = resolve_model("llama-3-8b")[0]
    calls, payload = 2 * layer_count(config), 8 * hidden_size(config) * 2.0
    ring = functools.partial(collectives.time_s, "all-reduce")
    for card, tp, reduce, link in (("a10", 2, collectives.custom_all_reduce_s, (32, 10)), ("a10", 4, ring, (32, 10)),
                                   ("a100-sxm4-80gb", 4, collectives.custom_all_reduce_s, (300, 5))):
        assert all_reduce_s(config, gpu(card), "vllm-0.5.4", tp, 8.0) == pytest.approx(calls * reduce(tp, payload,
                                                                                                      *link))
    assert gpu("a10:memory_bandwidth_gbs*2").peer_link == "pcie4"  # a hypothetical GPU keeps its base's link


@pytest.mark.parametrize("kw, field", [
    (dict(concurrency=8, request_rate=1.0), "concurrency"), (dict(), "concurrency"),
    (dict(concurrency=8, engine="tgi"), "engine"), (dict(concurrency=8, input_len=0), "input_len"),
    (dict(concurrency=0), "concurrency"),
    # infinity in a count is refused by its range, not by int()'s OverflowError
    (dict(concurrency=float("inf")), "concurrency"), (dict(concurrency=8, max_batch=float("inf")), "max_batch"),
    (dict(concurrency=8, chunk_tokens=float("inf")), "chunk_tokens"),
])
def test_bad_serving_settings_name_their_field(kw, field):
    args = {"input_len": 128, "output_len": 128, **kw}
    with pytest.raises(joulecast.InputError, match=f"^{field}: "):
        serve("gpt2", "a10", estimator="physics", **args)


def test_a_context_past_what_a_step_holds_names_input_len_and_the_longest_it_takes():
    """A step's tokens are each lowered over the mean context, a pass's batch x seq held to 2^31: 8 in flight with
    their 8,192-token prompt chunk take contexts up to 261,888 tokens; one longer is refused by input_len, not by an
    inner pass's 'batch', and a rate's steps are checked at max_batch."""
    kw = dict(output_len=10, estimator="physics")
    with pytest.raises(joulecast.InputError, match=r"input_len: 300,000 tokens with 8 in flight.*up to 261,888"):
        serve("llama-3-8b", "h100-sxm", input_len=300_000, concurrency=8, **kw)
    with pytest.raises(joulecast.InputError, match=r"256 in flight \(max_batch\).*up to 254,200"):
        serve("llama-3-8b", "h100-sxm", input_len=300_000, request_rate=1.0, **kw)
    assert serve("llama-3-8b", "h100-sxm", input_len=261_800, concurrency=8, **kw).energy_per_output_token_j > 0


def test_an_engine_that_overlaps_its_host_work_adds_nothing_to_the_kernels():
    """SGLang, TensorRT-LLM and vLLM 0.11.1 schedule the next step while the GPU runs this one: where the GPU's work
    outlasts their host work their steps are the kernels alone, as with no engine; vLLM 0.5.4's host work between
    steps makes every step longer."""
    kw = dict(input_len=512, output_len=256, concurrency=32, estimator="physics")
    alone = serve("llama-3-8b", "h100-sxm", engine="none", **kw)
    for name in ("vllm-0.11.1", "sglang-0.4", "trt-llm"):
        overlapped = serve("llama-3-8b", "h100-sxm", engine=name, **kw)
        assert overlapped.engine == name
        assert (overlapped.step_time_s, overlapped.energy_per_output_token_j) == (alone.step_time_s,
                                                                                alone.energy_per_output_token_j)
    v05 = serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", **kw)
    assert v05.step_time_s > alone.step_time_s + 32 * arch.SERVING_ENGINES["vllm-0.5.4"]["host_s_per_sequence"] * 0.99
    with pytest.raises(joulecast.InputError,
                       match=r"engine: unknown 'tgi'; known: sglang-0.4, trt-llm, vllm-0.11.1, vllm-0.5.4. \(or none"):
        serve("llama-3-8b", "h100-sxm", engine="tgi", **kw)


@pytest.mark.parametrize("written, name", [("vLLM 0.5.4", "vllm-0.5.4"), ("TensorRT-LLM", "trt-llm"),
                                           ("tensorrt_llm", "trt-llm"), ("SGLang-0.4", "sglang-0.4"),
                                           ("VLLM_0.11.1", "vllm-0.11.1")])
def test_an_engine_is_named_as_its_project_writes_it(written, name):
    """An engine's name in any case, with spaces or underscores, or as its project spells it: the same estimate as
    the catalog's name, which the estimate reports (without its release it names none: test_jobs)."""
    kw = dict(input_len=512, output_len=256, concurrency=8, estimator="physics")
    given, named = (serve("llama-3-8b", "h100-sxm", engine=e, **kw) for e in (written, name))
    assert given.engine == name and given.energy_per_output_token_j == named.energy_per_output_token_j
    assert joulecast.generate("llama-3-8b", "h100-sxm", batch=4, input_len=64, output_len=8, engine=written,
                              estimator="physics").energy_j == pytest.approx(
        joulecast.generate("llama-3-8b", "h100-sxm", batch=4, input_len=64, output_len=8, engine=name,
                           estimator="physics").energy_j, rel=1e-12)


@pytest.mark.parametrize("name", ["hf-transformers", "HF", "huggingface", "transformers"])
def test_hugging_face_transformers_as_an_engine_points_to_the_generate_job(name):
    """Hugging Face transformers' own generate has no continuous batching, so it is no serving engine: a user naming
    it is told where it is priced (the generate job, with --requests for a list), for serve and generate alike; an
    engine name near a real one still gets its suggestions alone."""
    kw = dict(input_len=512, output_len=256, estimator="physics")
    for job in (lambda: serve("llama-3-8b", "h100-sxm", engine=name, concurrency=8, **kw),
                lambda: joulecast.generate("llama-3-8b", "h100-sxm", engine=name, **kw)):
        with pytest.raises(joulecast.InputError, match=r"^engine: unknown .*Hugging Face transformers' generate has no "
                                                       r"continuous batching: price it as a generate job"):
            job()
    with pytest.raises(joulecast.InputError) as caught:
        serve("llama-3-8b", "h100-sxm", engine="vllm", concurrency=8, **kw)
    assert "did you mean 'vllm-0.5.4'" in str(caught.value) and "Hugging Face" not in str(caught.value)


def test_host_work_under_the_step_sets_it_where_it_outlasts_the_gpu(capsys):
    """vLLM 0.11.1 schedules a step ahead: its host work (per running request) runs under the GPU's step. A light
    model at a large batch on a fast GPU waits on it (ML.ENERGY v3's Llama-3.1-8B on a B200: 449-691 W on a 1,000 W
    card), so the step is the host's and the GPU waits the rest at the engine's power; at a small batch the GPU's
    work outlasts the host's and nothing changes."""
    engine = arch.SERVING_ENGINES["vllm-0.11.1"]
    assert engine["host_overlaps"] and engine["host_s_per_sequence"] > 0
    kw = dict(input_len=192, output_len=352, estimator="physics", max_batch=2048)
    for batch, bound in ((16, False), (1024, True)):
        alone = serve("llama-3-8b", "b200", engine="none", concurrency=batch, **kw)
        ahead = serve("llama-3-8b", "b200", engine="vllm-0.11.1", concurrency=batch, sampling="greedy", **kw)
        floor = batch * engine["host_s_per_sequence"]
        assert (floor > alone.step_time_s) == bound
        if not bound:
            assert ahead.step_time_s == alone.step_time_s and ahead.gpu_busy_share == alone.gpu_busy_share == 1.0
            continue
        # the rest waits on the host (the kernels no slower than alone: the waits leave capped ones headroom)
        assert ahead.gpu_busy_share <= alone.step_time_s / floor * (1 + 1e-9) and ahead.gpu_busy_share < 0.8
        assert ahead.step_time_s == pytest.approx(floor, rel=1e-9)
        # the wait at the engine's power; the kernels at least as before (the limiter averages over the waits too,
        # which leaves capped kernels headroom: `features.physics`)
        idle_w = joulecast.gpu("b200").idle_power_max_clock_w
        waited_j = (floor - alone.step_time_s) * engine["power_over_idle"] * idle_w
        assert ahead.step_energy_j >= (alone.step_energy_j + waited_j) * (1 - 1e-9)
        assert ahead.power_w < alone.power_w and ahead.power_w <= ahead.power_limit_w
        assert ahead.tokens_per_s == pytest.approx(batch / floor)
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "b200", "--phase", "serve", "--input-len", "192",
                 "--output-len", "352", "--concurrency", "1024", "--max-batch", "2048", "--engine", "vllm-0.11.1",
                 "--estimator", "physics"]) == 0
    assert re.search(r"gpu busy +\d+ % of a step \(host-bound", capsys.readouterr().out)
    # at a request rate: where the host work sets the step, a larger batch serves no more requests a second
    cap = 1 / (352 * engine["host_s_per_sequence"])
    near = serve("llama-3-8b", "b200", engine="vllm-0.11.1", request_rate=0.99 * cap, **kw)
    assert near.tokens_per_s == pytest.approx(0.99 * cap * 352) and near.busy_batch < 128
    with pytest.raises(joulecast.InputError, match="request_rate: .* the engine's host work sets the step at that "
                                                   "batch, so add instances"):
        serve("llama-3-8b", "b200", engine="vllm-0.11.1", request_rate=1.05 * cap, **kw)


def test_an_engines_measured_spread_of_host_work_widens_the_interval_not_the_point(monkeypatch, capsys):
    """vLLM 0.11.1's host work a running sequence was read from six rows that took 0.068-0.218 ms each
    (`data/serving_engines.yaml`): a spread, not a bias. The estimate stays at the figure; each bound moves out as
    far as its own reach and the work's at that end (how far it moves physics: a step at 256 sequences on a B200
    outlasts the GPU's work at the high end) add in quadrature, in `estimate`, `estimate_many` and `serve` alike; an
    engine without a range keeps its interval."""
    w = joulecast.workload("llama-3-8b", phase="decode", batch=256, seq=512, engine="vllm-0.11.1")
    spread = joulecast.estimate(w, "b200")
    entry = arch.SERVING_ENGINES["vllm-0.11.1"]
    low, high = entry["host_s_per_sequence_range"]
    at = {}
    for name, host in (("point", entry["host_s_per_sequence"]), ("low", low), ("high", high)):
        monkeypatch.setitem(arch.SERVING_ENGINES, "vllm-0.11.1",
                            {**entry, "host_s_per_sequence": host, "host_s_per_sequence_range": (host, host)})
        at[name] = (joulecast.estimate(w, "b200"), joulecast.estimate(w, "b200", estimator="physics"))
    monkeypatch.setitem(arch.SERVING_ENGINES, "vllm-0.11.1", entry)
    point, physics_at = at["point"][0], {k: v[1] for k, v in at.items()}
    assert (spread.energy_j, spread.time_s) == (point.energy_j, point.time_s)
    moved = {k: physics_at[k].energy_j / physics_at["point"].energy_j for k in ("low", "high")}
    assert moved["high"] > 1.2 and moved["low"] <= 1.0  # the high end's host outlasts the GPU's step
    # each side's reach (log): the estimate's own and the work's at that end, in quadrature
    e, t = point.energy_j, point.time_s
    assert np.log(spread.energy_interval_j[1] / e) == pytest.approx(
        np.hypot(np.log(point.energy_interval_j[1] / e), np.log(moved["high"])), rel=1e-9)
    assert np.log(e / spread.energy_interval_j[0]) == pytest.approx(
        np.hypot(np.log(e / point.energy_interval_j[0]), np.log(moved["low"])), rel=1e-9)
    assert np.log(spread.time_interval_s[1] / t) == pytest.approx(np.hypot(
        np.log(point.time_interval_s[1] / t), np.log(physics_at["high"].time_s / physics_at["point"].time_s)), rel=1e-9)
    many = joulecast.estimate_many(pd.DataFrame([dict(model="llama-3-8b", phase="decode", batch=256, seq=512,
                                                      engine="vllm-0.11.1", gpu="b200")]))
    assert (many["energy_lo_j"][0], many["energy_hi_j"][0]) == pytest.approx(spread.energy_interval_j, rel=1e-12)
    job = serve("llama-3-8b", "b200", input_len=192, output_len=352, concurrency=256, engine="vllm-0.11.1")
    lo, hi = job.energy_per_output_token_interval_j
    assert hi / job.energy_per_output_token_j > 1.2
    # the CLI's table says what widened it, for an engine that records a range alone
    kw = ["estimate", "--model", "llama-3-8b", "--gpu", "b200", "--phase", "serve", "--input-len", "192",
          "--output-len", "352", "--concurrency", "256", "--engine"]
    assert main(kw + ["vllm-0.11.1"]) == 0
    assert "; the interval: vllm-0.11.1's host work of 68.00 - 218.0 µs a request a step, as measured)" in (
        capsys.readouterr().out)
    assert main(kw + ["sglang-0.4"]) == 0
    assert "host work of" not in capsys.readouterr().out
    sglang = joulecast.estimate(joulecast.workload("llama-3-8b", phase="decode", batch=256, seq=512,
                                                   engine="sglang-0.4"), "b200")
    alone = joulecast.estimate(joulecast.workload("llama-3-8b", phase="decode", batch=256, seq=512,
                                                  launch_mode="graph"), "b200")
    assert sglang.energy_interval_j == alone.energy_interval_j


def test_fp8_serving_reaches_the_cost_in_bf16_and_keeps_its_point(monkeypatch, capsys):
    """An FP8 checkpoint's own serving kernels are not modelled, and measured deployments ran anywhere from fp8's
    cost to bf16's (`FP8_REACHES_BF16`): an fp8 estimate keeps its point and its low end and reaches up to the high
    end of the same load served in bf16, at a concurrency and at a request rate; the table says why."""
    from joulecast.estimator import serving

    kw = dict(input_len=192, output_len=370, tp=8, engine="vllm-0.11.1")
    fp8, bf16 = (serve("llama-3.1-405b", "h100-sxm", concurrency=128, dtype=dt, **kw) for dt in ("fp8", "bf16"))
    assert (fp8.dtype, bf16.dtype) == ("fp8", "bf16")
    assert fp8.energy_per_output_token_j < 0.7 * bf16.energy_per_output_token_j  # half the bytes, twice the rate
    assert fp8.energy_per_output_token_interval_j[1] == pytest.approx(bf16.energy_per_output_token_interval_j[1],
                                                                      rel=1e-12)
    rate = dict(request_rate=0.5, dtype="fp8", **kw)
    reached = serve("llama-3.1-405b", "h100-sxm", **rate)
    monkeypatch.setattr(serving, "FP8_REACHES_BF16", False)
    plain = serve("llama-3.1-405b", "h100-sxm", concurrency=128, dtype="fp8", **kw)
    assert plain.energy_per_output_token_j == fp8.energy_per_output_token_j
    assert plain.energy_per_output_token_interval_j[0] == fp8.energy_per_output_token_interval_j[0]
    assert plain.energy_per_output_token_interval_j[1] < 0.8 * fp8.energy_per_output_token_interval_j[1]
    alone = serve("llama-3.1-405b", "h100-sxm", **rate)
    assert alone.energy_per_output_token_j == reached.energy_per_output_token_j
    assert alone.energy_per_output_token_interval_j[1] < reached.energy_per_output_token_interval_j[1]
    monkeypatch.setattr(serving, "FP8_REACHES_BF16", True)
    args = ["estimate", "--model", "llama-3.1-405b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "192",
            "--output-len", "370", "--concurrency", "128", "--tp", "8", "--engine", "vllm-0.11.1", "--dtype"]
    assert main(args + ["fp8"]) == 0
    out = capsys.readouterr().out
    assert "; up to the cost in bf16: fp8 serving's scaled GEMMs are not modelled" in out
    assert "as dear or dearer at small batches (1.5-1.6x bf16's J a token at 8 requests)" in out  # as measured
    assert main(args + ["bf16"]) == 0
    assert "up to the cost in bf16" not in capsys.readouterr().out


def test_serving_under_a_power_cap_or_a_locked_clock(capsys):
    """Each GPU of the instance set as asked: average power within the cap, never more throughput than at the
    defaults; the CLI passes --power-limit and --sm-clock on (it once dropped them without a word)."""
    kw = dict(input_len=512, output_len=256, concurrency=64, estimator="physics")
    free = serve("llama-3-8b", "h100-sxm", **kw)
    assert (free.sm_clock_mhz, free.power_limit_w) == (1980.0, 700.0)
    capped = serve("llama-3-8b", "h100-sxm", power_limit_w=300.0, **kw)
    assert capped.power_limit_w == 300.0 and capped.power_w <= 300.0 < free.power_w
    assert capped.tokens_per_s < free.tokens_per_s
    slow = serve("llama-3-8b", "h100-sxm", sm_clock_mhz=1200.0, **kw)
    assert slow.sm_clock_mhz == 1200.0 and slow.tokens_per_s < free.tokens_per_s
    pair = serve("llama-3-70b", "h100-sxm", tp=4, power_limit_w=400.0, **kw)
    assert pair.power_w <= 4 * 400.0
    with pytest.raises(joulecast.InputError, match="power_limit_w: must be between"):
        serve("llama-3-8b", "h100-sxm", power_limit_w=3000.0, **kw)
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
            "--output-len", "256", "--concurrency", "64", "--power-limit", "300", "--estimator", "physics", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["power_limit_w"] == 300.0 and out["power_w"] == pytest.approx(capped.power_w)
    # the time between a request's tokens under generate's key too, for a script reading both jobs
    assert out["tpot_s"] == out["step_time_s"] == pytest.approx(capped.tpot_s) and capped.tpot_s > 0


def test_a_million_served_tokens_is_energy_and_time_at_that_load(capsys):
    kw = dict(input_len=512, output_len=256, concurrency=64, estimator="physics")
    million = serve("llama-3-8b", "h100-sxm", output_tokens=1e6, **kw)
    assert million.energy_j == pytest.approx(1e6 * million.energy_per_output_token_j)
    assert million.duration_s == pytest.approx(1e6 / million.tokens_per_s) and million.output_tokens == 1e6
    hour = serve("llama-3-8b", "h100-sxm", duration_s=3600.0, **kw)
    assert hour.output_tokens == pytest.approx(3600.0 * hour.tokens_per_s)
    assert million.energy_interval_j is None  # physics: no interval to total
    # the shipped model's: the total's interval is the per-token one's, over the tokens served
    hybrid = serve("llama-3-8b", "h100-sxm", output_tokens=1e6, **{**kw, "estimator": None})
    assert hybrid.energy_interval_j == pytest.approx([1e6 * e for e in hybrid.energy_per_output_token_interval_j])
    assert hybrid.energy_interval_j[0] < hybrid.energy_j < hybrid.energy_interval_j[1]
    with pytest.raises(joulecast.InputError, match="output_tokens: give duration_s or output_tokens, not both"):
        serve("llama-3-8b", "h100-sxm", duration_s=60.0, output_tokens=1e6, **kw)
    with pytest.raises(joulecast.InputError, match="output_tokens"):
        serve("llama-3-8b", "h100-sxm", output_tokens=-1.0, **kw)
    # a positive count under one token (the hostile-input test's 5e-324 gave 0 s and 0 J) is refused, one token is not
    with pytest.raises(joulecast.InputError, match="output_tokens: must be a positive number from 1 to 1e18, got 5e-324"):
        serve("llama-3-8b", "h100-sxm", output_tokens=5e-324, **kw)
    one = serve("llama-3-8b", "h100-sxm", output_tokens=1, **kw)
    assert one.energy_j > 0 and one.duration_s > 0
    # an operator's totals: a billion tokens, a year of serving
    billion = serve("llama-3-8b", "h100-sxm", output_tokens=1e9, **kw)
    assert billion.energy_j == pytest.approx(1e3 * million.energy_j)
    year = serve("llama-3-8b", "h100-sxm", duration_s=365 * 86400.0, **kw)
    assert year.energy_j == pytest.approx(365 * 86400.0 * year.power_w)
    with pytest.raises(joulecast.InputError, match="duration_s: must be a positive number up to 1e10 s"):
        serve("llama-3-8b", "h100-sxm", duration_s=1e11, **kw)
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
            "--output-len", "256", "--concurrency", "64", "--output-tokens", "1e6", "--estimator", "physics", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["energy_j"] == pytest.approx(million.energy_j) and out["output_tokens"] == 1e6
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--output-tokens", "5"]) == 2
    assert "--output-tokens: applies to --phase serve only" in capsys.readouterr().err


def test_sampling_requests_cost_a_vllm_step_its_sampler_and_greedy_ones_nothing(capsys):
    """vLLM sorts every decode's logits for top-p (and counts tokens for penalties) each step: GPU work that grows
    with the batch, priced only where the engine's sampler is the sorting one (at batches whose GPU work outlasts
    the engine's host work, which runs under it)."""
    kw = dict(input_len=192, output_len=400, estimator="physics")
    per_sequence = []
    for batch in (32, 128):
        greedy, top_p, penalties = (serve("llama-3-8b", "h100-sxm", engine="vllm-0.11.1", concurrency=batch,
                                          max_batch=batch, sampling=s, **kw)
                                    for s in ("greedy", "top-p", "top-p-penalties"))
        assert greedy.step_time_s < top_p.step_time_s < penalties.step_time_s
        assert greedy.energy_per_output_token_j < top_p.energy_per_output_token_j
        per_sequence.append((top_p.step_time_s - greedy.step_time_s) / batch)
    assert per_sequence[1] == pytest.approx(per_sequence[0], rel=0.1)  # the same passes a sequence, at any batch
    assert 5e-6 < per_sequence[1] < 50e-6  # B x 128K fp32 a pass, some 20 passes at the catalog H100's DRAM bandwidth
    assert serve("llama-3-8b", "h100-sxm", engine="vllm-0.11.1", concurrency=64, **kw).step_time_s == \
        serve("llama-3-8b", "h100-sxm", engine="vllm-0.11.1", concurrency=64, sampling="greedy", **kw).step_time_s
    fused = [serve("llama-3-8b", "h100-sxm", engine="sglang-0.4", concurrency=64, sampling=s, **kw).step_time_s
             for s in ("greedy", "top-p-penalties")]
    assert fused[0] == fused[1]
    with pytest.raises(joulecast.InputError, match="sampling: unknown 'beam'; allowed: greedy, top-p, "
                                                   "top-p-penalties"):
        serve("llama-3-8b", "h100-sxm", engine="vllm-0.11.1", concurrency=64, sampling="beam", **kw)
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "192",
            "--output-len", "400", "--concurrency", "64", "--engine", "vllm-0.11.1", "--estimator", "physics",
            "--json"]
    assert main(argv + ["--sampling", "top-p"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sampling"] == "top-p" and out["step_time_s"] == pytest.approx(
        serve("llama-3-8b", "h100-sxm", engine="vllm-0.11.1", concurrency=64, sampling="top-p", **kw).step_time_s)
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--sampling", "top-p"]) == 2
    assert "--sampling: applies to --phase serve only" in capsys.readouterr().err


def test_spread_output_lengths_lengthen_the_contexts_a_step_reads():
    """A request caught running is length-biased: with output lengths spread (cv 1, as chat sets measure) the mean
    context is input + output, not input + output / 2, so each decode step reads more of the KV cache."""
    kw = dict(input_len=512, output_len=512, concurrency=64, estimator="physics")
    even, spread = serve("llama-3-8b", "h100-sxm", **kw), serve("llama-3-8b", "h100-sxm", output_len_cv=1.0, **kw)
    assert spread.step_time_s > even.step_time_s and spread.energy_per_output_token_j > even.energy_per_output_token_j
    assert serve("llama-3-8b", "h100-sxm", output_len_cv=0.0, **kw).step_time_s == even.step_time_s
    for bad in (-0.1, float("nan"), "1"):
        with pytest.raises(joulecast.InputError, match="output_len_cv: must be a number from 0"):
            serve("llama-3-8b", "h100-sxm", output_len_cv=bad, **kw)

def test_expert_parallel_serving_splits_the_experts_and_is_slower_where_few_tokens_load_one_gpu(capsys):
    """Mixtral on 4 GPUs with its experts split whole (vLLM's --enable-expert-parallel) against each expert's width
    split: one request in flight routes each step's few tokens to experts that crowd one GPU, which the others
    wait for; at 64 in flight every GPU runs its experts either way and the steps come close."""
    kw = dict(input_len=512, output_len=256, tp=4, engine="vllm-0.11.1", estimator="physics")
    one = {ep: serve("mixtral-8x7b", "h100-sxm", concurrency=1, expert_parallel=ep, **kw) for ep in (False, True)}
    many = {ep: serve("mixtral-8x7b", "h100-sxm", concurrency=64, expert_parallel=ep, **kw) for ep in (False, True)}
    assert one[True].expert_parallel and not one[False].expert_parallel
    assert one[True].step_time_s > 1.1 * one[False].step_time_s
    assert many[True].step_time_s == pytest.approx(many[False].step_time_s, rel=0.1)
    assert one[True].memory_gb == pytest.approx(one[False].memory_gb, rel=1e-3)  # a quarter of the experts each
    with pytest.raises(joulecast.InputError, match="^expert_parallel: splits a mixture of experts' experts"):
        serve("llama-3-8b", "h100-sxm", concurrency=8, expert_parallel=True, **kw)
    with pytest.raises(joulecast.InputError, match="^expert_parallel: must be true or false, got 'yes'"):
        serve("mixtral-8x7b", "h100-sxm", concurrency=8, expert_parallel="yes", **kw)
    argv = ["estimate", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
            "--output-len", "256", "--concurrency", "1", "--tp", "4", "--engine", "vllm-0.11.1", "--expert-parallel"]
    assert main(argv) == 0
    assert "TP 4, experts split over the GPUs" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["expert_parallel"] is True


def test_cli_serve_json(capsys):
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
            "--output-len", "256", "--request-rate", "2", "--duration", "3600", "--engine", "vllm-0.5.4", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "vllm-0.5.4" and out["tokens_per_s"] == pytest.approx(512.0)
    assert out["energy_j"] == pytest.approx(out["power_w"] * 3600)
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--concurrency", "4"]) == 2
    assert "--concurrency: applies to --phase serve only" in capsys.readouterr().err


def test_prompts_spread_in_length_cost_their_attention_as_its_square():
    """`input_len_cv`: a prompt's attention over its chunk grows with its length squared, so prompts spread about
    their mean cost, token for token, as prompts of mean x (1 + cv^2): the step's prefill attention is lowered so;
    its tokens, the decodes' contexts and every other kernel are the same."""
    from joulecast.features import serve_step

    kw = dict(batch=64, input_len=512, output_len=16, engine="vllm-0.5.4")
    even, spread = (serve_step.step_workload("llama-3-8b", input_len_cv=cv, **kw) for cv in (0.0, 1.0))
    assert even[1] == spread[1]  # the same prompt tokens a step
    attn = [w.kernels[(w.kernels["kind"] == "attention")] for w, _ in (even, spread)]
    assert sorted(attn[0]["seq_q"].astype(int)) != sorted(attn[1]["seq_q"].astype(int))
    assert attn[1]["seq_q"].astype(int).max() == 2 * 512  # one chunk of mean x (1 + 1) tokens
    steps = [serve("llama-3-8b", "h100-sxm", input_len=512, output_len=16, concurrency=64, input_len_cv=cv,
                   estimator="physics").step_time_s for cv in (0.0, 1.0, 2.0)]
    assert steps[0] < steps[1] < steps[2]
    with pytest.raises(joulecast.InputError, match="input_len_cv: must be a number from 0"):
        serve("llama-3-8b", "h100-sxm", input_len=512, output_len=16, concurrency=64, input_len_cv=-1)


def test_a_serving_load_past_its_gpus_memory_names_the_fewest_gpus_whose_shards_fit():
    kw = dict(input_len=512, output_len=256, concurrency=8, estimator="physics")
    wide = serve("llama-3-70b", "h100-sxm", **kw)
    assert "exceeds-memory" in wide.flags and wide.fits_tp == 2
    assert "exceeds-memory" not in serve("llama-3-70b", "h100-sxm", tp=2, **kw).flags
    assert serve("llama-3-8b", "h100-sxm", **kw).fits_tp is None


def test_instances_spread_a_load_each_serving_its_share(capsys):
    """`instances` N behind a load balancer: a rate R is N instances at R / N each (Poisson split at random), a
    concurrency C is C / N each; per token and a step as one instance's, tokens a second, power and totals N
    times; a concurrency that N does not divide, and a rate past N instances' capacity, name their field (the
    latter with the fewest instances that could serve it, which then do)."""
    kw = dict(input_len=512, output_len=128, estimator="physics", engine="vllm-0.5.4")
    one, four = (serve("llama-3-8b", "h100-sxm", request_rate=rate, instances=n, **kw)
                 for rate, n in ((1.5, 1), (6, 4)))
    assert four.instances == 4 and four.batch == pytest.approx(one.batch) and four.step_time_s == one.step_time_s
    assert four.energy_per_output_token_j == pytest.approx(one.energy_per_output_token_j)
    assert (four.tokens_per_s, four.power_w) == pytest.approx((4 * one.tokens_per_s, 4 * one.power_w))
    by_count = serve("llama-3-8b", "h100-sxm", concurrency=64, instances=4, duration_s=60, **kw)
    each = serve("llama-3-8b", "h100-sxm", concurrency=16, duration_s=60, **kw)
    assert by_count.energy_j == pytest.approx(4 * each.energy_j) and by_count.busy_batch == 16
    with pytest.raises(joulecast.InputError, match="^concurrency: 10 in flight over 4 instances: give a multiple"):
        serve("llama-3-8b", "h100-sxm", concurrency=10, instances=4, **kw)
    with pytest.raises(joulecast.InputError, match="^instances: "):
        serve("llama-3-8b", "h100-sxm", concurrency=8, instances=0, **kw)
    with pytest.raises(joulecast.InputError) as refused:
        serve("llama-3-8b", "h100-sxm", request_rate=40, **kw)
    fewest = int(re.search(r"at least (\d+) instances", str(refused.value)).group(1))
    assert fewest > 1 and serve("llama-3-8b", "h100-sxm", request_rate=40, instances=fewest, **kw).tokens_per_s \
        == pytest.approx(40 * 128)
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
                 "--output-len", "128", "--request-rate", "6", "--instances", "4", "--engine", "vllm-0.5.4",
                 "--estimator", "physics", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["instances"] == 4 and out["tokens_per_s"] == pytest.approx(four.tokens_per_s)


def test_a_load_window_by_window_is_each_window_served_at_its_rate_and_summed():
    """`window_rates`: each window a steady state at its own rate on the same steps, its energy and tokens summed;
    windows all at one rate are that rate served over their time, to the digit; an empty window draws idle power;
    with `instances`, each window's rate is spread as a single rate is."""
    kw = dict(input_len=512, output_len=128, estimator="physics", engine="vllm-0.5.4", output_len_cv=0.6)
    steady = serve("llama-3-8b", "h100-sxm", request_rate=2.0, duration_s=3 * 600, **kw)
    flat = serve("llama-3-8b", "h100-sxm", window_rates=[2.0, 2.0, 2.0], window_s=600, **kw)
    for name in ("energy_j", "power_w", "energy_per_output_token_j", "batch", "step_time_s", "idle_share",
                 "output_tokens", "duration_s", "tokens_per_s"):
        assert getattr(flat, name) == pytest.approx(getattr(steady, name), rel=1e-12), name
    assert flat.energy_interval_j == pytest.approx(steady.energy_interval_j, rel=1e-12)

    rates = [0.5, 4.0, 0.0, 1.0]
    job = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, **kw)
    alone = [serve("llama-3-8b", "h100-sxm", request_rate=r, duration_s=600, **kw) if r else None for r in rates]
    windows = job.windows
    assert windows.start_s.tolist() == [0, 600, 1200, 1800] and windows.request_rate.tolist() == rates
    for k, one in enumerate(alone):
        if one is None:  # no arrivals: the GPU idles the whole window
            assert windows.power_w[k] == pytest.approx(lookup("h100-sxm").idle_power_w) and windows.batch[k] == 0
            continue
        assert windows.energy_j[k] == pytest.approx(one.energy_j, rel=1e-12)
        assert windows.step_time_s[k] == pytest.approx(one.step_time_s, rel=1e-12)
    assert job.energy_j == pytest.approx(windows.energy_j.sum()) and job.duration_s == 2400
    assert job.output_tokens == pytest.approx(sum(rates) * 600 * 128)
    assert job.energy_per_output_token_j == pytest.approx(job.energy_j / job.output_tokens)
    assert job.power_w == pytest.approx(job.energy_j / 2400)
    assert job.idle_share == pytest.approx(windows.idle_share.mean())
    # a token's time, over the tokens; memory and flags at the busiest window's step
    assert job.step_time_s == pytest.approx(np.dot(windows.step_time_s, windows.output_tokens) / job.output_tokens)
    assert job.busy_batch == serve("llama-3-8b", "h100-sxm", request_rate=4.0, **kw).busy_batch
    hybrid = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, **{**kw, "estimator": None})
    band = np.array(hybrid.energy_interval_j) / hybrid.energy_j  # the steps' one error, the whole's band
    assert band[0] < 1 < band[1] and band == pytest.approx(np.array(hybrid.energy_per_output_token_interval_j)
                                                           / hybrid.energy_per_output_token_j)
    # spread over instances: each window's rate as one rate is
    spread = serve("llama-3-8b", "h100-sxm", window_rates=[2 * r for r in rates], window_s=600, instances=2, **kw)
    assert spread.energy_j == pytest.approx(2 * job.energy_j) and spread.windows.request_rate.tolist() == [
        2 * r for r in rates]
    out = job.to_dict()["windows"]
    assert out["window_s"] == 600 and out["energy_j"] == pytest.approx(windows.energy_j.tolist())
    as_column = serve("llama-3-8b", "h100-sxm", window_rates=pd.Series(rates), window_s=600, **kw)  # a frame's column
    assert as_column.energy_j == job.energy_j
    # a last window of its own length (a trace's, as long as it runs into it): its rate over that time
    short = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, last_window_s=300, **kw)
    assert short.windows.duration_s.tolist() == [600, 600, 600, 300] and short.duration_s == 2100
    assert short.windows.energy_j[3] == pytest.approx(
        serve("llama-3-8b", "h100-sxm", request_rate=1.0, duration_s=300, **kw).energy_j, rel=1e-12)
    assert short.output_tokens == pytest.approx((0.5 + 4.0) * 600 * 128 + 1.0 * 300 * 128)


def test_a_window_past_capacity_is_named_with_the_fewest_instances_for_the_busiest():
    kw = dict(input_len=512, output_len=128, estimator="physics", engine="vllm-0.5.4", window_s=3600)
    with pytest.raises(joulecast.InputError) as refused:
        serve("llama-3-8b", "h100-sxm", window_rates=[1.0, 30.0, 60.0], **kw)
    said = str(refused.value)
    assert said.startswith("window_rates: 30 requests/s in window 2 of 3 (its arrivals from 3,600 s after the first) "
                           "is beyond what 256 in flight serve (")
    fewest = int(re.search(r"at least (\d+) instances", said).group(1))
    served = serve("llama-3-8b", "h100-sxm", window_rates=[1.0, 30.0, 60.0], instances=fewest, **kw)
    assert served.windows.request_rate[2] == 60.0
    with pytest.raises(joulecast.InputError):
        serve("llama-3-8b", "h100-sxm", window_rates=[1.0, 30.0, 60.0], instances=fewest - 1, **kw)


@pytest.mark.parametrize("kw, field, message", [
    (dict(window_rates=[1.0]), "window_s", "give window_rates and window_s together"),
    (dict(window_s=600), "window_rates", "give window_rates and window_s together"),
    (dict(window_rates=[1.0], window_s=600, request_rate=1.0), "window_rates", "give no concurrency, request_rate"),
    (dict(window_rates=[1.0], window_s=600, duration_s=60), "window_rates", "give no concurrency, request_rate"),
    (dict(window_rates=[1.0], window_s=30), "window_s", "must be a positive number from 60"),
    (dict(window_rates=[0.0, 0.0], window_s=600), "window_rates", "every window is empty"),
    (dict(window_rates=[1e-3, 0.0], window_s=600), "window_rates", "under one request in all"),
    (dict(window_rates=[1.0, 1.0], window_s=600, last_window_s=30), "last_window_s", "a positive number from 60"),
    (dict(window_rates=[1.0, 1.0], window_s=600, last_window_s=661), "last_window_s", "to window_s + 60 s"),
    (dict(last_window_s=300), "window_s", "give window_rates and window_s together"),
    (dict(window_rates=[1.0, -1.0], window_s=600), "window_rates", "must be 1 to 1,000,000 requests a second"),
    (dict(window_rates=[1.0, float("nan")], window_s=600), "window_rates", "must be 1 to 1,000,000 requests"),
    (dict(window_rates=[True, 1.0], window_s=600), "window_rates", "must be 1 to 1,000,000 requests"),
    (dict(window_rates="1,2", window_s=600), "window_rates", "got text"),
    (dict(window_rates=[], window_s=600), "window_rates", "must be 1 to 1,000,000 requests"),
    (dict(window_rates=np.ones((2, 2)), window_s=600), "window_rates", "must be 1 to 1,000,000 requests"),
])
def test_bad_windows_name_their_field(kw, field, message):
    with pytest.raises(joulecast.InputError) as refused:
        serve("llama-3-8b", "h100-sxm", input_len=64, output_len=16, estimator="physics", **kw)
    assert refused.value.field == field and message in refused.value.message


def test_autoscaled_windows_run_the_fewest_instances_that_serve_each_and_the_rest_draw_nothing():
    """`autoscale`: each window served by the fewest of `instances` that serve its rate within max_batch (one at
    least), each window as that many instances alone would serve it; the whole no dearer than every instance on."""
    kw = dict(input_len=1000, output_len=250, estimator="physics", engine="vllm-0.5.4", window_s=600)
    one = serve("llama-3-8b", "h100-sxm", input_len=1000, output_len=250, estimator="physics", engine="vllm-0.5.4",
                concurrency=256)  # an instance's capacity: max_batch in flight
    most = one.requests_per_s
    rates = [0.2 * most, 1.5 * most, 3.5 * most, 0.0]
    fixed = serve("llama-3-8b", "h100-sxm", window_rates=rates, instances=4, **kw)
    auto = serve("llama-3-8b", "h100-sxm", window_rates=rates, instances=4, autoscale=True, **kw)
    assert auto.autoscale and auto.windows.instances.tolist() == [1, 2, 4, 1]
    assert fixed.windows.instances.tolist() == [4, 4, 4, 4] and not fixed.autoscale
    for k, n in enumerate(auto.windows.instances[:3]):
        alone = serve("llama-3-8b", "h100-sxm", window_rates=[rates[k]], instances=int(n), **kw)
        assert auto.windows.energy_j[k] == pytest.approx(alone.energy_j, rel=1e-12)
    assert auto.output_tokens == pytest.approx(fixed.output_tokens) and auto.energy_j < fixed.energy_j
    assert auto.windows.power_w[3] == pytest.approx(lookup("h100-sxm").idle_power_w)  # one instance kept, idle
    with pytest.raises(joulecast.InputError, match=r"^window_rates: .*\(at least 4 instances"):
        serve("llama-3-8b", "h100-sxm", window_rates=rates, instances=3, autoscale=True, **kw)
    with pytest.raises(joulecast.InputError, match="^autoscale: applies to a load window by window"):
        serve("llama-3-8b", "h100-sxm", input_len=64, output_len=16, request_rate=1.0, autoscale=True)
    with pytest.raises(joulecast.InputError, match="^autoscale: must be true or false"):
        serve("llama-3-8b", "h100-sxm", window_rates=rates, instances=4, autoscale="yes", **kw)


def test_an_autoscaled_loads_spares_cold_starts_and_headroom():
    """Autoscaled, the instances a window does not need are off (each started again pays `cold_start_s` at its GPUs'
    idle power, charged to the window it serves; the first window's run already) or, `spare` "idle", kept warm at
    idle power all the window; `headroom` keeps the instances' capacity that share over each window's rate. Each
    is one line naming its field where it does not apply."""
    kw = dict(input_len=1000, output_len=250, estimator="physics", engine="vllm-0.5.4", window_s=600, tp=2)
    most = serve("llama-3-8b", "h100-sxm", input_len=1000, output_len=250, estimator="physics", engine="vllm-0.5.4",
                 concurrency=256, tp=2).requests_per_s  # an instance's capacity: max_batch in flight
    rates = [0.2 * most, 1.5 * most, 3.5 * most, 0.0, 0.9 * most]
    idle_w = 2 * lookup("h100-sxm").idle_power_w  # an instance's two GPUs
    off = serve("llama-3-8b", "h100-sxm", window_rates=rates, instances=4, autoscale=True, **kw)
    assert off.spare == "off" and off.windows.instances.tolist() == [1, 2, 4, 1, 1]
    assert off.windows.started.tolist() == [0, 1, 2, 0, 0] and not off.windows.standby_j.any()
    cold = serve("llama-3-8b", "h100-sxm", window_rates=rates, instances=4, autoscale=True, cold_start_s=90, **kw)
    assert cold.windows.standby_j == pytest.approx(np.array([0, 1, 2, 0, 0]) * idle_w * 90, rel=1e-12)
    assert cold.windows.energy_j == pytest.approx(off.windows.energy_j + cold.windows.standby_j, rel=1e-12)
    assert cold.energy_j == pytest.approx(off.energy_j + 3 * idle_w * 90, rel=1e-12)
    assert cold.output_tokens == off.output_tokens and cold.cold_start_s == 90.0
    warm = serve("llama-3-8b", "h100-sxm", window_rates=rates, instances=4, autoscale=True, spare="idle", **kw)
    assert warm.windows.standby_j == pytest.approx((4 - np.array([1, 2, 4, 1, 1])) * idle_w * 600, rel=1e-12)
    assert not warm.windows.started.any()
    assert warm.windows.power_w[3] == pytest.approx(4 * idle_w)  # no arrivals: every instance idle
    assert warm.energy_per_output_token_j > cold.energy_per_output_token_j > off.energy_per_output_token_j
    # 25 % over each rate: 0.9 of one instance's capacity needs two, 1.5 two, 3.5 all four (no more to add)
    room = serve("llama-3-8b", "h100-sxm", window_rates=rates, instances=4, autoscale=True, headroom=0.25, **kw)
    assert room.windows.instances.tolist() == [1, 2, 4, 1, 2] and room.headroom == 0.25
    alone = serve("llama-3-8b", "h100-sxm", window_rates=[rates[4]], instances=2, **kw)
    assert room.windows.energy_j[4] == pytest.approx(alone.energy_j, rel=1e-12)
    for extra, field, message in ((dict(spare="warm"), "spare", "unknown 'warm'; allowed: off, idle"),
                                  (dict(cold_start_s=-1), "cold_start_s", "from 0 to 86,400 s, got -1"),
                                  (dict(headroom=float("nan")), "headroom", "from 0 to 10"),
                                  (dict(headroom=True), "headroom", "got True"),
                                  (dict(spare="idle", cold_start_s=5), "cold_start_s",
                                   "where spare instances are off")):
        with pytest.raises(joulecast.InputError) as refused:
            serve("llama-3-8b", "h100-sxm", window_rates=rates, instances=4, autoscale=True, **kw, **extra)
        assert (refused.value.field, message in refused.value.message) == (field, True), refused.value
    for extra in (dict(spare="idle"), dict(cold_start_s=60), dict(headroom=0.1)):  # without autoscale
        with pytest.raises(joulecast.InputError, match=f"^{next(iter(extra))}: applies to autoscale"):
            serve("llama-3-8b", "h100-sxm", window_rates=rates, instances=4, **kw, **extra)


def test_an_autoscaled_load_keeps_each_windows_first_token_within_a_target():
    """`ttft_target_s`: each window on the fewest instances (from those its rate needs) whose requests' mean time to
    first token, served as one instance serves its share alone, comes within the target; a window without arrivals
    on one; a target none meets: the whole fleet, the table saying so. Without autoscale, one line naming it."""
    kw = dict(input_len=512, output_len=128, estimator="physics", engine="vllm-0.5.4", max_batch=32)
    most = serve("llama-3-8b", "h100-sxm", concurrency=32, **kw).requests_per_s
    rates = [0.2 * most, 0.7 * most, 0.95 * most, 0.0, 2.5 * most]

    def first_token(rate):  # one instance serving its share alone
        return serve("llama-3-8b", "h100-sxm", request_rate=rate, **kw).ttft_s

    target = 1.01 * first_token(0.95 * most / 2)
    auto = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, instances=6, autoscale=True,
                 ttft_target_s=target, **kw)
    needed = [1, 1, 1, 1, 3]  # the rate's own
    for k, rate in enumerate(rates):
        fewest = next(n for n in range(needed[k], 7) if rate == 0 or first_token(rate / n) <= target)
        assert auto.windows.instances[k] == fewest, (k, auto.windows.instances)
    assert auto.windows.instances[2] == 2 and auto.windows.instances[3] == 1 and auto.ttft_target_s == target
    late = auto.windows.prefill_s + auto.windows.slot_wait_s
    assert (late[np.array(rates) > 0] <= target).all()
    assert auto.windows.prefill_s[2] + auto.windows.slot_wait_s[2] == pytest.approx(first_token(0.95 * most / 2))
    # on 99 % of the first tokens: each window on the fewest whose 99th percentile comes within it
    def p99(rate):
        return serve("llama-3-8b", "h100-sxm", request_rate=rate, **kw).ttft_p99_s

    target = 1.01 * p99(0.95 * most / 2)
    tail = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, instances=6, autoscale=True,
                 ttft_p99_target_s=target, **kw)
    for k, rate in enumerate(rates):
        fewest = next(n for n in range(needed[k], 7) if rate == 0 or p99(rate / n) <= target)
        assert tail.windows.instances[k] == fewest, (k, tail.windows.instances)
    assert tail.windows.instances[2] == 2 and (tail.windows.ttft_p99_s[np.array(rates) > 0] <= target).all()
    # a target below a step: every window with arrivals on the whole fleet
    never = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, instances=6, autoscale=True,
                  ttft_target_s=1e-6, **kw)
    assert never.windows.instances.tolist() == [6, 6, 6, 1, 6]
    for bad, message in ((0, "must be a positive number"), ("1", "must be a positive number")):
        with pytest.raises(joulecast.InputError, match=f"^ttft_target_s: {message}"):
            serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, instances=6, autoscale=True,
                  ttft_target_s=bad, **kw)
    for name in ("ttft_target_s", "ttft_p99_target_s", "itl_p99_target_s"):
        with pytest.raises(joulecast.InputError, match=f"^{name}: applies to autoscale"):
            serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, instances=6, **{name: 1.0}, **kw)


def test_each_window_at_its_own_lengths_is_served_as_those_lengths_alone():
    """`window_lengths`: each window's requests at their own mean lengths and spread (16 distinct windows or fewer:
    each its own grid of steps), so a window equals `serve` at its rate and lengths alone, to the digit; a window
    without arrivals draws idle power whatever its lengths (NaN); the whole's lengths are its requests' (pooled)."""
    kw = dict(estimator="physics", engine="vllm-0.5.4")
    rates = [0.5, 2.0, 0.0, 1.0]
    lengths = pd.DataFrame({"input_len": [400, 2000, np.nan, 900], "output_len": [100, 300, np.nan, 50],
                            "output_len_cv": [0.5, 0.9, np.nan, 0.0]})
    job = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, window_lengths=lengths, **kw)
    for k, rate in enumerate(rates):
        if not rate:
            assert job.windows.power_w[k] == pytest.approx(lookup("h100-sxm").idle_power_w)
            continue
        alone = serve("llama-3-8b", "h100-sxm", request_rate=rate, duration_s=600, input_len=lengths.input_len[k],
                      output_len=lengths.output_len[k], output_len_cv=lengths.output_len_cv[k], **kw)
        for name in ("energy_j", "output_tokens", "batch", "step_time_s", "power_w"):
            assert getattr(job.windows, name)[k] == pytest.approx(getattr(alone, name), rel=1e-12), (k, name)
        assert (job.windows.input_len[k], job.windows.output_len[k]) == (lengths.input_len[k], lengths.output_len[k])
    requests = np.array(rates) * 600
    assert job.output_tokens == pytest.approx(np.nansum(requests * lengths.output_len))
    assert job.input_len == pytest.approx(np.nansum(requests * lengths.input_len) / requests.sum())
    assert job.energy_per_request_j == pytest.approx(job.energy_j / requests.sum())
    # the same lengths in every window: the load at those lengths, window by window, to the digit
    flat = pd.DataFrame({"input_len": [512.0] * 4, "output_len": [128.0] * 4, "output_len_cv": [0.6] * 4})
    same = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, window_lengths=flat, **kw)
    given = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, input_len=512, output_len=128,
                  output_len_cv=0.6, **kw)
    assert same.energy_j == pytest.approx(given.energy_j, rel=1e-12)
    # a mapping of lists, JSON's null for a window without arrivals, as the service's body sends it
    as_json = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, **kw, window_lengths={
        "input_len": [400, 2000, None, 900], "output_len": [100, 300, None, 50], "output_len_cv": [0.5, 0.9, None, 0]})
    assert as_json.energy_j == job.energy_j


def test_many_windows_share_a_few_length_classes_and_keep_each_window_s_tokens():
    """Past 16 distinct windows, the windows fall into at most 16 length classes by the requests' quantiles, a class
    priced at its windows' pooled lengths: each window's tokens are still its own, and the whole within a percent of
    every window alone where the classes' windows lie close."""
    from joulecast.estimator.serve_windows import LENGTH_BINS, length_classes

    rng = np.random.default_rng(1)
    n = 48
    short = np.arange(n) % 2 == 0  # two kinds of hour, each its lengths within 2 %
    ins = np.where(short, 500, 3000) * rng.uniform(0.99, 1.01, n)
    outs = np.where(short, 80, 400) * rng.uniform(0.99, 1.01, n)
    rates = rng.uniform(0.2, 1.5, n)
    lengths = pd.DataFrame({"input_len": ins, "output_len": outs})
    table = np.column_stack([ins, outs, np.zeros(n), np.zeros(n)])
    classes, label = length_classes(table, rates * 3600)
    assert len(classes) <= LENGTH_BINS**2 and set(label[short]).isdisjoint(label[~short])
    # a class's mean is its requests': every request's prompt counted once
    requests = rates * 3600
    assert np.dot(np.bincount(label, requests), classes[:, 0]) == pytest.approx(np.dot(requests, ins))
    kw = dict(estimator="physics", engine="vllm-0.5.4")
    job = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=3600, window_lengths=lengths, **kw)
    assert job.windows.output_tokens == pytest.approx(requests * outs, rel=1e-12)
    alone = sum(serve("llama-3-8b", "h100-sxm", request_rate=r, duration_s=3600, input_len=i, output_len=o,
                      **kw).energy_j for r, i, o in zip(rates, ins, outs))
    assert job.energy_j == pytest.approx(alone, rel=0.01)
    # and apart from the mean lengths' figure, which prices every hour at the requests' pooled lengths
    spread = {f"{name}_cv": float(np.sqrt(np.average(x * x, weights=requests) / np.average(x, weights=requests)**2 - 1))
              for name, x in (("input_len", ins), ("output_len", outs))}
    mean = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=3600, input_len=job.input_len,
                 output_len=job.output_len, **spread, **kw)
    assert abs(mean.energy_j / alone - 1) > 5 * abs(job.energy_j / alone - 1)


def test_a_window_of_long_answers_past_capacity_is_named_by_its_own_lengths():
    """A window's reach is its own lengths': long answers keep more in flight, so a rate the mean lengths serve is
    past max_batch in the window whose answers run long."""
    kw = dict(estimator="physics", engine="vllm-0.5.4", window_s=600, max_batch=32)
    lengths = {"input_len": [512, 512], "output_len": [64, 2048]}
    reach = serve("llama-3-8b", "h100-sxm", input_len=512, output_len=2048, concurrency=32, **kw.fromkeys(
        ("estimator",), "physics"), engine="vllm-0.5.4", max_batch=32).requests_per_s
    with pytest.raises(joulecast.InputError) as refused:
        serve("llama-3-8b", "h100-sxm", window_rates=[2 * reach, 2 * reach], window_lengths=lengths, **kw)
    assert refused.value.field == "window_rates" and "in window 2 of 2" in refused.value.message
    fewest = int(re.search(r"at least (\d+) instances", refused.value.message).group(1))
    assert fewest == 2
    auto = serve("llama-3-8b", "h100-sxm", window_rates=[2 * reach, 2 * reach], window_lengths=lengths, instances=2,
                 autoscale=True, **kw)
    assert auto.windows.instances.tolist() == [1, 2]


@pytest.mark.parametrize("kw, field, message", [
    (dict(input_len=64), "input_len", "not with window_lengths"),
    (dict(output_len_cv=0.5), "output_len_cv", "not with window_lengths"),
    (dict(window_lengths=[[1, 2]]), "window_lengths", "must be a table of each window's lengths"),
    (dict(window_lengths={"input_len": [64, 64]}), "window_lengths", "needs a column output_len"),
    (dict(window_lengths={"input_len": [64, 64], "output_len": [8, 8], "prompt": [1, 1]}), "window_lengths",
     "prompt is not a column"),
    (dict(window_lengths={"input_len": [64], "output_len": [8]}), "window_lengths", "for each of the 2 windows"),
    (dict(window_lengths={"input_len": [64, None], "output_len": [8, 8]}), "window_lengths",
     "input_len of window 2 (it has arrivals) must be a positive number up to 2^24, got nan"),
    (dict(window_lengths={"input_len": [64, 64], "output_len": [8, 0]}), "window_lengths", "output_len of window 2"),
    (dict(window_lengths={"input_len": [64, 64], "output_len": [8, 8], "input_len_cv": [0, 11]}), "window_lengths",
     "input_len_cv of window 2 (it has arrivals) must be a number from 0 to 10"),
    (dict(window_lengths={"input_len": [64, True], "output_len": [8, 8]}), "window_lengths", "got a list"),
])
def test_bad_window_lengths_name_their_field(kw, field, message):
    with pytest.raises(joulecast.InputError) as refused:
        serve("llama-3-8b", "h100-sxm", estimator="physics", window_rates=[1.0, 1.0], window_s=600,
              **{"window_lengths": {"input_len": [64, 64], "output_len": [8, 8]}, **kw})
    assert refused.value.field == field and message in refused.value.message


def test_window_lengths_need_the_windows_and_the_lengths_need_giving():
    with pytest.raises(joulecast.InputError, match="^window_s: give window_rates and window_s together"):
        serve("llama-3-8b", "h100-sxm", window_lengths={"input_len": [64], "output_len": [8]}, request_rate=1.0)
    with pytest.raises(joulecast.InputError, match="^input_len: must be a positive number"):
        serve("llama-3-8b", "h100-sxm", output_len=8, request_rate=1.0)


def test_a_queued_request_keeps_its_own_lengths_in_the_window_that_serves_it():
    """Windows of their own lengths, queued: what waits is work, first in, first out (each request the
    instance-seconds its own lengths take), so a backlog of long answers drains at their rate in a window of short
    ones and their tokens are theirs: every arrival's tokens counted, the backlog said in requests."""
    kw = dict(estimator="physics", engine="vllm-0.5.4", window_s=600)
    caps = []
    for out in (256, 16):  # what one instance serves a second at each window's lengths (max_batch's)
        with pytest.raises(joulecast.InputError) as refused:
            serve("llama-3-8b", "h100-sxm", window_rates=[1000.0], input_len=512, output_len=out, **kw)
        caps.append(float(re.search(r"serve \(([\d.]+)/s\)", refused.value.message).group(1)))
    rates = [1.5 * caps[0], 0.2 * caps[1]]
    lengths = {"input_len": [512.0, 512.0], "output_len": [256.0, 16.0]}
    job = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_lengths=lengths, queue=True, **kw)
    w = job.windows
    assert job.output_tokens == pytest.approx(rates[0] * 600 * 256 + rates[1] * 600 * 16, rel=1e-9)
    assert w.backlog[0] == pytest.approx(0.5 * caps[0] * 600, rel=2e-3)  # requests, of the long answers
    waiting = 0.5 * 600 + rates[1] * 600 / caps[1]  # instance-seconds: the backlog's, then the window's own
    assert w.duration_s[1] == pytest.approx(max(600.0, waiting), rel=2e-3)
    # the second window serves the backlog's long answers too: more tokens than its own arrivals ask
    assert w.output_tokens[1] == pytest.approx(0.5 * caps[0] * 600 * 256 + rates[1] * 600 * 16, rel=2e-3)
    # windows of one length each way: the same queue as the load's lengths given once
    same = serve("llama-3-8b", "h100-sxm", window_rates=rates, window_lengths={"input_len": [512.0, 512.0],
                 "output_len": [256.0, 256.0]}, queue=True, **kw)
    once = serve("llama-3-8b", "h100-sxm", window_rates=rates, input_len=512, output_len=256, queue=True, **kw)
    for name in ("backlog", "wait_s", "duration_s", "output_tokens", "energy_j"):
        assert getattr(same.windows, name) == pytest.approx(getattr(once.windows, name), rel=1e-9, abs=1e-9)


def test_a_queued_load_carries_each_window_s_excess_to_the_windows_after_it():
    """`queue`: a window's arrivals past what the instances serve wait for the windows after it (Lindley's
    recursion), each window served at what it serves; every request is served (the last window running on until
    none waits), so the tokens are the arrivals'; the waits are the fluid queue's; a load within capacity is the
    same as without `queue`, to the digit."""
    kw = dict(input_len=512, output_len=128, estimator="physics", engine="vllm-0.5.4", window_s=600)
    probe = serve("llama-3-8b", "h100-sxm", window_rates=[1.0], queue=True, **kw)
    plain = serve("llama-3-8b", "h100-sxm", window_rates=[1.0], **kw)
    assert probe.energy_j == plain.energy_j and probe.wait_s == 0 and probe.windows.backlog.tolist() == [0.0]
    with pytest.raises(joulecast.InputError) as refused:
        serve("llama-3-8b", "h100-sxm", window_rates=[1000.0], **kw)
    cap = float(re.search(r"serve \(([\d.]+)/s\)", refused.value.message).group(1))  # what max_batch serves
    assert refused.value.message.endswith("; or let its excess wait for the windows after it (queue)")
    rates = [0.5 * cap, 1.5 * cap, 0.2 * cap, 0.0, 1.2 * cap]
    job = serve("llama-3-8b", "h100-sxm", window_rates=rates, queue=True, **kw)
    w = job.windows
    capacity = w.batch.max()  # the windows at capacity run the batch that serves it
    assert w.batch[1] == w.batch[4] == capacity
    # the backlog, by Lindley's recursion one window at a time
    backlog, expected = 0.0, []
    for r in rates:
        backlog = max(0.0, backlog + (r - cap) * 600)
        expected.append(backlog)
    assert w.backlog == pytest.approx(expected, rel=2e-3, abs=1e-6)  # cap's printed digits
    assert job.output_tokens == pytest.approx(sum(rates) * 600 * 128)  # every arrival served
    assert w.duration_s[-1] == pytest.approx(600 + expected[-1] / cap, rel=2e-3)  # runs on for its backlog
    assert job.duration_s == pytest.approx(w.duration_s.sum())
    # the third window drains 0.5 x cap x 600 waiting at 0.8 x cap: half the backlog over the share it lasts
    found = expected[1] / 2 * min(1.0, expected[1] / (0.8 * cap * 600))
    assert w.wait_s[2] == pytest.approx(found / cap, rel=2e-3) and w.wait_s[1] == pytest.approx(
        expected[1] / 2 / cap, rel=2e-3)
    assert job.wait_s == pytest.approx(np.average(w.wait_s, weights=w.request_rate * w.duration_s))
    # its first token after its waits: for the backlog, and for a slot in the windows under capacity (those at it
    # have the backlog's alone)
    assert job.ttft_s == pytest.approx(job.prefill_s + job.wait_s + job.slot_wait_s)
    assert w.slot_wait_s[1] == w.slot_wait_s[4] == 0 and w.slot_wait_s[0] > 0
    # a window that drains is served as its rate alone: its arrivals and the backlog it finds over its length
    alone = serve("llama-3-8b", "h100-sxm", request_rate=(rates[2] * 600 + w.backlog[1]) / 600, duration_s=600,
                  **{k: v for k, v in kw.items() if k != "window_s"})
    assert w.energy_j[2] == pytest.approx(alone.energy_j, rel=1e-9)
    # autoscaled: a backlog keeps the fleet on until it is served
    auto = serve("llama-3-8b", "h100-sxm", window_rates=[3 * r for r in rates], instances=2, autoscale=True,
                 queue=True, **kw)
    assert auto.windows.instances[1] == 2 and auto.output_tokens == pytest.approx(3 * sum(rates) * 600 * 128)
    with pytest.raises(joulecast.InputError, match="^queue: applies to a load window by window"):
        serve("llama-3-8b", "h100-sxm", input_len=64, output_len=16, request_rate=1.0, queue=True)
    assert "queue      " in render.serve_table(job) and "the last window runs on until none waits" in (
        render.serve_table(job))


def test_a_catalog_model_s_steps_are_lowered_once_and_kept():
    """`serve`'s steps of a catalog model are lowered once and kept by their shape: another GPU (a sweep's) serves
    the kept steps, and what it gives is what steps lowered afresh give."""
    from joulecast.estimator import serving

    serving._STEPS.clear()
    kw = dict(input_len=300, output_len=77, request_rate=1.0, estimator="physics", engine="vllm-0.5.4")
    serve("llama-3-8b", "h100-sxm", **kw)
    kept = len(serving._STEPS)
    # the grid of batch sizes (the steady state's steps), the steps a request's prompt runs in at a few of them
    # (PREFILL_BATCHES; with 300 and a chunk of its tokens), and the steps the gaps between tokens are read at
    # (`token_gaps.prompt_points`), at the same few batches
    assert kept == len(np.unique(np.round(np.geomspace(1, 256, 24)))) + 2 * serving.PREFILL_BATCHES + len(
        serving.token_gaps.prompt_points(serving.serve_step.CHUNK_TOKENS)) * serving.PREFILL_BATCHES
    again = serve("llama-3-8b", "a100-sxm4-80gb", **kw)
    assert len(serving._STEPS) == kept
    serving._STEPS.clear()
    assert serve("llama-3-8b", "a100-sxm4-80gb", **kw).to_dict() == again.to_dict()


def test_the_gaps_between_tokens_are_the_steps_that_admit_prompts():
    """A request's tokens come a step apart, and a step admitting a prompt runs longer: 99 % of the gaps within a
    longer time than 90 %, both past the step without prompts and the slowest within the step at a whole chunk."""
    from joulecast.estimator import serving

    kw = dict(input_len=512, output_len=256, concurrency=64, engine="vllm-0.11.1", estimator="physics")
    job = serve("llama-3-8b", "h100-sxm", **kw)
    spec, shape = lookup("h100-sxm"), dict(dtype="bf16", engine="vllm-0.11.1", launch_mode="graph", tp=1,
                                           chunk_tokens=8192, residual=None, sampling="greedy")
    size = dict(input_len=512.0, output_len=256.0, input_len_cv=0.0, output_len_cv=0.0)
    (bare,), (whole,) = ([e.time_s + w for e, w, _, _ in steps] for steps in serving._evaluate(
        "llama-3-8b", spec, np.array([64]), [dict(size, prompt=0), dict(size, prompt=8192)], **shape))
    assert bare < job.itl_p90_s < job.itl_p99_s < whole
    # 64 running, a quarter admitted a step (64 / 256): one prompt in 22 % of the steps, two in 2.6 %, three in 0.2 %
    assert job.itl_p90_s == pytest.approx(serving._evaluate("llama-3-8b", spec, np.array([64]),
                                                            [dict(size, prompt=512)], **shape)[0][0][0].time_s,
                                          rel=0.01)
    assert job.to_dict()["itl_p99_s"] == job.itl_p99_s
    text = render.serve_table(job)
    assert re.search(r"gaps       90 % of tokens within [\d.]+ ms of the one before, 99 % within [\d.]+ ms", text)


def test_gaps_without_prompts_are_the_step_and_past_the_chunk_the_chunk_s_step():
    """Answers so long that a step almost never admits a prompt: every gap is the step (no prompt tokens a step on
    average either). Prompts arriving faster than the chunk: every step carries a whole chunk, so do the gaps.
    An answer of one token has no gap after it."""
    rare = serve("llama-3-8b", "h100-sxm", input_len=512, output_len=100_000, concurrency=8, estimator="physics")
    assert rare.itl_p90_s == pytest.approx(rare.step_time_s, rel=1e-9)
    assert rare.itl_p99_s == pytest.approx(rare.step_time_s, rel=1e-9)
    full = serve("llama-3-8b", "h100-sxm", input_len=20_000, output_len=4, concurrency=64, chunk_tokens=2048,
                 estimator="physics")
    assert full.itl_p90_s == pytest.approx(full.step_time_s, rel=1e-9)
    assert full.itl_p99_s == pytest.approx(full.step_time_s, rel=1e-9)
    one = serve("llama-3-8b", "h100-sxm", input_len=512, output_len=1, concurrency=8, estimator="physics")
    assert one.itl_p90_s is None and one.itl_p99_s is None and "gaps " not in render.serve_table(one)


def test_a_load_window_by_window_gives_each_window_s_gaps_and_all_of_them_together():
    """Each window's gaps are those of its rate alone (none without arrivals); the whole load's are the quantiles of
    all its windows' gaps together: those of one window where every window is as busy, and between the windows'
    where they differ, nearer the busiest, which makes the most tokens."""
    kw = dict(input_len=512, output_len=128, estimator="physics", engine="vllm-0.5.4")
    varied = serve("llama-3-8b", "h100-sxm", window_rates=[1.0, 6.0, 2.0, 0.0], window_s=600, **kw)
    for k, rate in enumerate((1.0, 6.0, 2.0)):
        alone = serve("llama-3-8b", "h100-sxm", request_rate=rate, **kw)
        assert varied.windows.itl_p90_s[k] == pytest.approx(alone.itl_p90_s, rel=1e-9)
        assert varied.windows.itl_p99_s[k] == pytest.approx(alone.itl_p99_s, rel=1e-9)
    assert np.isnan(varied.windows.itl_p99_s[3]) and varied.to_dict()["windows"]["itl_p99_s"][3] is None or (
        np.isnan(varied.to_dict()["windows"]["itl_p99_s"][3]))
    each = varied.windows.itl_p99_s[:3]
    # (all together to 1e-7 of it, `token_gaps.quantiles_s`)
    assert each.min() < varied.itl_p99_s <= each.max() * (1 + 1e-7) and varied.itl_p99_s > np.median(each)
    even = serve("llama-3-8b", "h100-sxm", window_rates=[6.0, 6.0], window_s=600, **kw)
    assert even.itl_p99_s == pytest.approx(even.windows.itl_p99_s[0], rel=1e-6)
    assert f"the worst's 99 % within {render.duration(each.max())}" in render.serve_table(varied)


def test_a_reactive_autoscaler_serves_each_window_on_what_the_window_before_needed():
    """`reactive`: each window on the instances the window before needed (the first on its own), so where the load
    outgrows them the window is refused, naming it and how far it grew, and with `queue` its excess waits; those it
    starts serve from `cold_start_s` into it, their start at idle power charged to it. Headroom over each window's
    rate takes a rise in its stride."""
    kw = dict(input_len=512, output_len=256, engine="vllm-0.11.1", estimator="physics", window_s=600, instances=6,
              autoscale=True, max_batch=16, window_rates=[2.0, 12.0, 12.0, 3.0, 20.0, 2.0])
    ahead = serve("llama-3-8b", "h100-sxm", **kw)
    assert ahead.windows.instances.tolist() == [1, 2, 2, 1, 3, 1] and not ahead.reactive
    with pytest.raises(joulecast.InputError, match=r"^window_rates: 12 requests/s in window 2 of 6 \(its arrivals "
                       r"from 600 s after the first, 6x the window before's\) is beyond what the 1 instance the "
                       r"window before needed serve \([\d.]+/s\).*\(queue\)$") as refused:
        serve("llama-3-8b", "h100-sxm", reactive=True, **kw)
    # the least headroom it names serves every window as it comes, and half a point less does not
    least = float(re.search(r"keep at least ([\d.]+) % headroom", str(refused.value)).group(1)) / 100
    assert serve("llama-3-8b", "h100-sxm", reactive=True, headroom=least, **kw).windows.backlog.sum() == 0
    with pytest.raises(joulecast.InputError, match="^window_rates: "):
        serve("llama-3-8b", "h100-sxm", reactive=True, headroom=least - 0.005, **kw)
    late = serve("llama-3-8b", "h100-sxm", reactive=True, queue=True, **kw)
    assert late.windows.instances.tolist() == [1, 1, 2, 2, 1, 3] and late.reactive and late.to_dict()["reactive"]
    # the windows whose load outgrew the one before's instances end with requests waiting; all are served
    assert (late.windows.backlog[[1, 4]] > 0).all() and late.windows.backlog[[0, 3, 5]].tolist() == [0, 0, 0]
    assert late.output_tokens == pytest.approx(ahead.output_tokens) and late.wait_s > 0
    # a start of 5 min: the instance started for window 3 serves its last half, at idle power meanwhile
    started = serve("llama-3-8b", "h100-sxm", reactive=True, queue=True, cold_start_s=300, **kw)
    assert started.windows.started.tolist() == [0, 0, 1, 0, 0, 2]
    assert started.windows.standby_j[2] == pytest.approx(300 * lookup("h100-sxm").idle_power_w)
    assert started.windows.backlog[2] > late.windows.backlog[2]  # its first 5 min on one instance
    assert "reactive: each window on what the window before needed" in render.serve_table(started)
    # headroom enough for the steepest rise (20 / 3, the rounding up of instances aside) serves every window as it
    # comes
    kept = serve("llama-3-8b", "h100-sxm", reactive=True, headroom=20 / 3 - 1, **kw)
    assert kept.windows.instances.tolist()[1:] == serve("llama-3-8b", "h100-sxm", headroom=20 / 3 - 1,
                                                        **kw).windows.instances.tolist()[:-1]
    with pytest.raises(joulecast.InputError, match="^reactive: applies to autoscale"):
        serve("llama-3-8b", "h100-sxm", reactive=True, **{**kw, "autoscale": False})
    with pytest.raises(joulecast.InputError, match="^reactive: must be true or false"):
        serve("llama-3-8b", "h100-sxm", reactive="yes", **kw)


def test_a_reactive_autoscaler_scales_a_reaction_after_the_load_changes():
    """`reaction_s`: scaling that long after a window's load changes instead of a window on, so acting at once on
    instances that load at once serves as sizing each window ahead does; a reaction and a cold start leave the start
    of a rising window on fewer (its excess queued), a start longer than a window serving in the windows after, and
    `scale_in_delay_s` keeps the most needed over its span, each instance-second a start loads at idle power."""
    kw = dict(input_len=512, output_len=256, engine="vllm-0.11.1", estimator="physics", window_s=600, instances=6,
              autoscale=True, max_batch=16, window_rates=[2.0, 12.0, 12.0, 3.0, 20.0, 2.0], queue=True)
    ahead = serve("llama-3-8b", "h100-sxm", **kw)
    now = serve("llama-3-8b", "h100-sxm", reactive=True, reaction_s=0, **kw)
    assert now.windows.instances.tolist() == ahead.windows.instances.tolist() and now.energy_j == pytest.approx(
        ahead.energy_j) and not now.windows.backlog.any()
    late = serve("llama-3-8b", "h100-sxm", reactive=True, reaction_s=60, cold_start_s=120, **kw)
    # window 2 on one instance for its first 3 min, then two: (180 + 2 x 420) / 600 serving, one started
    assert late.windows.instances[1] == pytest.approx((60 + 2 * 540) / 600) and late.windows.started[1] == 1
    assert late.windows.serving[1] == pytest.approx((180 + 2 * 420) / 600) and (
        late.windows.serving <= late.windows.instances).all() and ahead.windows.serving.tolist() == [1, 2, 2, 1, 3, 1]
    assert "of them serving on average, the rest starting" in render.serve_table(late)
    assert late.windows.backlog[1] > 0 and late.windows.standby_j[1] == pytest.approx(
        120 * lookup("h100-sxm").idle_power_w)
    # a window later by far (no reaction): more waits
    assert late.wait_s < serve("llama-3-8b", "h100-sxm", reactive=True, cold_start_s=120, **kw).wait_s
    # a start of 15 min: the instance started 1 min into window 2 serves from 16 min in, window 3's first 6 min
    long = serve("llama-3-8b", "h100-sxm", reactive=True, reaction_s=60, cold_start_s=900, **kw)
    assert long.windows.standby_j[1:3] == pytest.approx(np.array([540, 360]) * lookup("h100-sxm").idle_power_w)
    assert long.windows.backlog[2] > late.windows.backlog[2] and long.output_tokens == pytest.approx(late.output_tokens)
    kept = serve("llama-3-8b", "h100-sxm", reactive=True, reaction_s=60, scale_in_delay_s=300, **kw)
    assert kept.windows.instances[3] == pytest.approx((2 * 360 + 240) / 600) and kept.energy_j > serve(
        "llama-3-8b", "h100-sxm", reactive=True, reaction_s=60, **kw).energy_j
    assert "reactive: scaling 60.00 s after a window's load changes, in to the most needed over 5.000 min" in (
        render.serve_table(kept)) and kept.to_dict()["scale_in_delay_s"] == 300
    # refused where a stretch of a window is past what serves it: here window 2 all on one, its start 10 min
    with pytest.raises(joulecast.InputError, match=r"^window_rates: 12 requests/s in window 2 of 6 .* beyond what its "
                       r"instances \(1\.9 held on average, 1 of them serving for 600 s of it\) serve .*: a reactive "
                       r"autoscaler \(scaling 60 s after a window's load changes\); keep at least"):
        serve("llama-3-8b", "h100-sxm", reactive=True, reaction_s=60, cold_start_s=600, **{**kw, "queue": False})
    for name, value in (("reaction_s", 60), ("scale_in_delay_s", 300)):
        with pytest.raises(joulecast.InputError, match=f"^{name}: applies to reactive"):
            serve("llama-3-8b", "h100-sxm", **{name: value}, **kw)
    with pytest.raises(joulecast.InputError, match="^reaction_s: must be a number from 0 to 86,400 s"):
        serve("llama-3-8b", "h100-sxm", reactive=True, reaction_s=-1, **kw)


def test_an_autoscaler_scales_to_zero_where_a_window_has_no_load():
    """`min_instances=0`: a window without arrivals runs no instance and draws nothing, each window with arrivals
    after one pays a start; sized ahead its requests wait for nothing, reactive they queue until it serves (refused
    without `queue`, naming min_instances); the fewest kept is a whole number up to the fleet."""
    kw = dict(input_len=512, output_len=256, engine="vllm-0.11.1", estimator="physics", window_s=600, instances=4,
              autoscale=True, max_batch=16, window_rates=[2.0, 0.0, 0.0, 6.0, 0.0, 2.0], cold_start_s=60)
    kept = serve("llama-3-8b", "h100-sxm", **kw)
    zero = serve("llama-3-8b", "h100-sxm", min_instances=0, **kw)
    idle_w = lookup("h100-sxm").idle_power_w
    assert kept.windows.instances.tolist() == [1] * 6 and zero.windows.instances.tolist() == [1, 0, 0, 1, 0, 1]
    assert zero.windows.energy_j[[1, 2, 4]].tolist() == [0, 0, 0]
    assert zero.windows.started.tolist() == [0, 0, 0, 1, 0, 1]
    # the idle hours' energy less the two starts' (at idle power for their minute)
    assert kept.energy_j - zero.energy_j == pytest.approx(kept.windows.energy_j[[1, 2, 4]].sum() - 2 * 60 * idle_w)
    assert zero.ttft_s == pytest.approx(kept.ttft_s) and zero.min_instances == 0 and kept.min_instances == 1
    late = serve("llama-3-8b", "h100-sxm", min_instances=0, reactive=True, reaction_s=30, queue=True, **kw)
    # window 4: none serving for its first 90 s (30 s to act, 60 s to load), its arrivals queued for that
    assert late.windows.serving[3] == pytest.approx(510 / 600) and late.windows.wait_s[3] > 30
    assert late.ttft_s > zero.ttft_s and late.output_tokens == pytest.approx(zero.output_tokens)
    with pytest.raises(joulecast.InputError, match=r"^window_rates: .* 0 of them serving for 90 s of it\) serve "
                       r"\(0/s\): .*keep an instance running where a window has no load \(min_instances 1\)"):
        serve("llama-3-8b", "h100-sxm", min_instances=0, reactive=True, reaction_s=30, **kw)
    for bad in (-1, 5, 1.5, True):
        with pytest.raises(joulecast.InputError, match="^min_instances: must be a whole number from 0 to instances"):
            serve("llama-3-8b", "h100-sxm", min_instances=bad, **kw)
    with pytest.raises(joulecast.InputError, match="^min_instances: applies to autoscale"):
        serve("llama-3-8b", "h100-sxm", min_instances=0, **{**kw, "autoscale": False, "cold_start_s": 0})


def test_an_autoscaler_keeps_each_window_s_gaps_within_a_target():
    """`itl_p99_target_s`: more instances where 99 % of a window's gaps between tokens would come later than the
    target (fewer running an instance, each step shorter and admitting fewer prompts): the fewest that meet it, and
    the whole fleet where even it misses; the table says in how many windows it is met."""
    kw = dict(input_len=2048, output_len=128, estimator="physics", engine="vllm-0.11.1", window_s=600,
              window_rates=[1.0, 8.0, 3.0], instances=8, autoscale=True)
    plain = serve("llama-3-8b", "h100-sxm", **kw)
    # each window's as it reads served alone on its instances (its rate of prompts read between those computed over
    # the span the autoscaler may take: within 1.5 %, `token_gaps.ADMITTED_A_DECADE`)
    target = float(np.median(plain.windows.itl_p99_s)) * 0.999  # under the middle window's
    held = serve("llama-3-8b", "h100-sxm", itl_p99_target_s=target, **kw)
    for job in (plain, held):
        for k, rate in enumerate(kw["window_rates"]):
            alone = serve("llama-3-8b", "h100-sxm", **{**kw, "window_rates": [rate], "autoscale": False,
                                                       "instances": int(job.windows.instances[k])})
            assert job.windows.itl_p99_s[k] == pytest.approx(alone.windows.itl_p99_s[0], rel=0.015)
    more = held.windows.instances - plain.windows.instances
    assert (more >= 0).all() and more.sum() > 0
    met = held.windows.itl_p99_s <= target
    assert met.sum() >= 2 and (held.windows.instances[~met] == 8).all()
    # where it took more than its rate needs, one fewer misses it (served alone, evenly: within the 1 % its
    # windows' prompts admitted a step are read to, `token_gaps.ADMITTED_A_DECADE`)
    for k in np.flatnonzero(met & (more > 0)):
        fewer = serve("llama-3-8b", "h100-sxm", **{**kw, "window_rates": [kw["window_rates"][k]], "autoscale": False,
                                                   "instances": int(held.windows.instances[k]) - 1})
        assert fewer.windows.itl_p99_s[0] > 0.99 * target
    assert held.itl_p99_target_s == target and held.to_dict()["itl_p99_target_s"] == target
    assert re.search(r"99 % of the gaps between tokens within [\d.]+ ms in \d of 3 windows with arrivals",
                     render.serve_table(held))
    with pytest.raises(joulecast.InputError, match="itl_p99_target_s: applies to autoscale"):
        serve("llama-3-8b", "h100-sxm", **{**kw, "autoscale": False}, itl_p99_target_s=0.05)
    with pytest.raises(joulecast.InputError, match="itl_p99_target_s: must be a positive number"):
        serve("llama-3-8b", "h100-sxm", **kw, itl_p99_target_s=-1)


def test_a_request_s_first_token_comes_after_its_prompt_s_steps():
    """A request's first token comes at the end of the step that runs its prompt, beside the steady state's mean
    prompt tokens (`prefill_s`, in `ttft_s`); a prompt longer than the chunk runs a whole chunk a step first."""
    from joulecast.estimator import serving

    spec = lookup("h100-sxm")
    shape = dict(dtype="bf16", engine="vllm-0.11.1", launch_mode="graph", tp=1, chunk_tokens=2048, residual=None,
                 sampling="greedy")
    kw = dict(output_len=256, concurrency=64, engine="vllm-0.11.1", chunk_tokens=2048, estimator="physics")

    def step(input_len: float, **more) -> float:
        size = dict(input_len=float(input_len), output_len=256.0, input_len_cv=0.0, output_len_cv=0.0, **more)
        (((est, wait_s, _, _),),) = serving._evaluate("llama-3-8b", spec, np.array([64]), [size], **shape)
        return est.time_s + wait_s

    short = serve("llama-3-8b", "h100-sxm", input_len=512, **kw)
    assert short.prefill_s == pytest.approx(step(512, own_prompt=512), rel=1e-12)
    assert short.ttft_s == short.prefill_s > short.step_time_s == pytest.approx(step(512), rel=1e-12)
    long = serve("llama-3-8b", "h100-sxm", input_len=5000, **kw)  # two chunks of 2,048, then 904 beside the mean
    assert long.prefill_s == pytest.approx(2 * step(5000, prompt=2048) + step(5000, own_prompt=904), rel=1e-12)
    assert "for its prompt's prefill" in render.serve_table(long)
    # at a rate too, and each window's
    rated = serve("llama-3-8b", "h100-sxm", input_len=512, output_len=256, window_rates=[2.0, 8.0], window_s=600,
                  engine="vllm-0.11.1", estimator="physics")
    w = rated.windows
    assert (w.prefill_s > w.step_time_s).all()
    assert rated.prefill_s == pytest.approx(np.average(w.prefill_s, weights=w.request_rate))
    assert rated.ttft_s == pytest.approx(rated.prefill_s + rated.slot_wait_s)


def test_spread_prompts_lengthen_the_first_token_s_tail():
    """Prompts spread about their mean (`input_len_cv`, lognormal): a request's prefill at each bin of their lengths
    (`token_gaps.length_bins`); the mean first token over them, and its 99th percentile a long prompt's: at a
    concurrency, the prefill of the prompt 99 % are within, at a rate past every prompt as long's."""
    from joulecast.estimator import token_gaps

    kw = dict(input_len=512, output_len=256, engine="vllm-0.11.1", estimator="physics")
    for load in (dict(concurrency=64), dict(request_rate=4.0)):
        alike = serve("llama-3-8b", "h100-sxm", **load, **kw)
        spread = serve("llama-3-8b", "h100-sxm", input_len_cv=3.0, **load, **kw)
        assert spread.ttft_p99_s > 3 * alike.ttft_p99_s and spread.ttft_s < 2 * alike.ttft_s
        assert spread.ttft_s == pytest.approx(spread.prefill_s + spread.slot_wait_s, rel=1e-12)
    # at a concurrency, the 99th percentile the prefill of a prompt as long as 99 % are within, served beside the
    # same load: more than the prefill of the mean prompt, less than of a whole chunk run alone
    q99 = token_gaps.length_quantile(512, 3.0, 0.99)
    assert 2000 < q99 < 8192
    closed = serve("llama-3-8b", "h100-sxm", concurrency=64, input_len_cv=3.0, **kw)
    longest = serve("llama-3-8b", "h100-sxm", concurrency=64, input_len=q99, output_len=256, engine="vllm-0.11.1",
                    estimator="physics")
    assert closed.prefill_s < closed.ttft_p99_s < longest.prefill_s * 1.5


def test_a_context_near_what_a_pass_holds_cuts_the_chunk_its_own_steps_price():
    """A load whose mean step a pass holds, but whose step with a whole chunk beside it would not: its prompt's steps
    and the gaps between its tokens are priced with as many prompt tokens as a pass holds, never refused by a field
    the caller did not give."""
    kw = dict(input_len=300_000, output_len=1_000_000, estimator="physics")
    job = serve("llama-3.1-8b", "h100-sxm", concurrency=1, **kw)
    assert job.prefill_s > 100 * job.step_time_s and job.itl_p99_s >= job.step_time_s
    assert math.isfinite(job.ttft_p99_s) and job.ttft_p99_s >= job.prefill_s
