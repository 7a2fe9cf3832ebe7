"""Random and hostile values at every entry point: each answers with one `JoulecastError` naming a field (exit 2 at
the CLI) or with a result whose numbers are finite and positive; never a traceback."""

import contextlib
import io
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import joulecast
from joulecast.cli import main
from joulecast.data.errors import JoulecastError

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# catalog names, and names as people write them: a Hugging Face id without its organisation, nvidia-smi's board names
MODELS = ["gpt2", "bert-large", "llama-3-8b", "llama-3-70b", "vit-large", "resnet-101", "qwen2-1.5b",
          "Llama-3.1-8B-Instruct", "qwen/qwen2.5-7b"]
GPUS = ["a10", "a100-pcie-40gb", "h100-sxm", "h200", "l4", "l40s", "v100-sxm2", "b200", "NVIDIA H100 80GB HBM3",
        "Tesla V100-PCIE-16GB"]
# hypothetical GPUs, whose estimates read their base's correction where the base runs the setting, physics' elsewhere
WHAT_IFS = ["h100-sxm:memory_bandwidth_gbs*2", "a100:power_limit_w*1.6", "a10:clock*0.5:l2_mb*3", "h200:sm_count=66"]
anything = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                     st.text(max_size=12))


def mostly(valid, hostile):
    """`valid` nine draws in ten: with a dozen arguments, a third of the examples still reach an estimate."""
    return st.integers(0, 9).flatmap(lambda i: hostile if i == 0 else valid)


sizes = mostly(st.integers(1, 4096), st.one_of(st.integers(-5, 0), st.integers(2**24, 2**70), st.floats(allow_nan=True),
                                               st.sampled_from(["8", "abc", ""]), st.booleans(), st.none()))
names = lambda known: mostly(st.sampled_from(known), st.text(max_size=10))  # noqa: E731


reached: dict[str, int] = {}


def numbers_ok(*values: float) -> bool:
    return all(math.isfinite(v) and v > 0 for v in values)


def field_named(exc: JoulecastError) -> bool:
    """One line, `field: message`."""
    text = str(exc)
    return "\n" not in text and ": " in text


def outcome(call):
    """`call()`'s result, or None where it refused with one line naming the field."""
    try:
        return call()
    except JoulecastError as exc:
        assert field_named(exc), exc
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=names(MODELS), phase=names(["prefill", "decode", "training", "inference"]), batch=sizes, seq=sizes,
       dtype=names(["bf16", "fp16", "fp32", "fp8", "int8", "tf32", "bfloat16", "torch.float16"]),
       attention=names(["flash", "eager"]),
       launch_mode=names(["eager", "graph"]), engine=st.one_of(st.none(), names(["vllm-0.5.4", "TensorRT-LLM"])),
       gpu=names(GPUS + WHAT_IFS), clock=mostly(st.none(), st.one_of(st.floats(allow_nan=True),
                                                                        st.integers(-10, 10**6))),
       limit=mostly(st.none(), st.one_of(st.floats(allow_nan=True), st.integers(-10, 10**6))))
def test_workload_and_estimate(model, phase, batch, seq, dtype, attention, launch_mode, engine, gpu, clock, limit):
    reached["estimate"] = reached.get("estimate", 0)
    try:
        w = joulecast.workload(model, phase=phase, batch=batch, seq=seq, dtype=dtype, attention=attention,
                               launch_mode=launch_mode, engine=engine)
        est = joulecast.estimate(w, gpu, sm_clock_mhz=clock, power_limit_w=limit)
    except JoulecastError as exc:
        assert field_named(exc), exc
        return
    reached["estimate"] += 1
    assert numbers_ok(est.energy_j, est.time_s, est.power_w, *est.energy_interval_j)
    assert est.energy_interval_j[0] <= est.energy_j <= est.energy_interval_j[1]


def test_the_hostile_draws_reached_estimates_too():
    """Not every draw was refused: the property above was tested on results as well (runs after it)."""
    assert reached.get("estimate", 0) >= 5, reached


@SETTINGS
@given(workload=anything, gpu=anything)
def test_estimate_refuses_what_is_no_workload(workload, gpu):
    with pytest.raises(JoulecastError) as caught:
        joulecast.estimate(workload, gpu)
    assert field_named(caught.value)


@SETTINGS
@given(rows=st.lists(st.fixed_dictionaries({
    "model": names([*MODELS, "qwen3-30b-a3b"]), "gpu": names(GPUS + WHAT_IFS), "batch": sizes, "seq": sizes,
    "phase": names(["prefill", "decode"]), "dtype": names(["bf16", "fp8", "Float8_E4M3FN"]),
    "engine": st.one_of(st.none(), names(["vllm-0.5.4"])),
    "sm_clock_mhz": st.one_of(st.none(), st.floats(allow_nan=True), st.text(max_size=4)),
    "tp": st.one_of(st.none(), mostly(st.sampled_from([1, 2, 4]), anything)),
    "expert_parallel": st.one_of(st.none(), mostly(st.booleans(), anything)),
}), min_size=1, max_size=4))
def test_estimate_many(rows):
    out = outcome(lambda: joulecast.estimate_many(pd.DataFrame(rows)))
    if out is None:
        return
    assert len(out) == len(rows)
    assert np.isfinite(out[["energy_j", "time_s", "power_w", "energy_lo_j", "energy_hi_j"]].to_numpy()).all()
    assert (out[["energy_j", "time_s", "power_w"]].to_numpy() > 0).all()


@SETTINGS
@given(argv=st.lists(st.sampled_from(["--model", "gpt2", "--gpu", "a10", "--batch", "-1", "--seq", "99999999999",
                                      "--kernels", "/", "--config", "x.json", "--dtype", "fp8", "--sm-clock", "nan",
                                      "--power-limit", "-5", "--phase", "decode", "--json", "bert-large", "h200",
                                      "--engine", "vllm-0.5.4", "--launch-mode", "graph", "0", "8", "2.5", "1e3",
                                      "--grid", "FR", "--pue", "--carbon-intensity", "hyperscale"]),
                     max_size=10))
def test_cli_estimate(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["estimate", *argv])
        except SystemExit as exc:  # argparse: a flag without its value, or an unknown flag
            code = exc.code
    assert code in (0, 2)
    if code == 2:  # one line, argparse's too (`cli._Parser`)
        assert err.getvalue().count("\n") == 1 and ": error: " in err.getvalue()
    assert "Traceback" not in err.getvalue()


def _spec(**changes):
    raw = joulecast.gpu("h100-sxm").to_dict()
    raw.update({"name": "h100-test", "aliases": [], **changes})
    return raw


@SETTINGS
@given(field=st.sampled_from(["sm_count", "boost_clock_mhz", "memory_bandwidth_gbs", "memory_gb", "l2_mb",
                              "power_limit_w", "idle_power_w", "tensor_tflops", "architecture", "aliases"]),
       value=anything)
@example(field="aliases", value=5)  # once a TypeError iterating it
def test_gpu_spec(field, value):
    from joulecast.data.gpus import GpuSpec

    spec = outcome(lambda: GpuSpec.from_dict(_spec(**{field: value}), origin="hostile.yaml"))
    if spec is None:
        return
    assert numbers_ok(spec.sm_count, spec.memory_bandwidth_gbs, spec.power_limit_w)
    assert spec.memory_bandwidth_gbs <= 200_000 and spec.boost_clock_mhz <= 10_000


_CONFIG_MODELS = ["gpt2", "bert-large", "opt-1.3b", "llama-3-8b", "qwen3-30b-a3b", "vit-large", "resnet-101",
                  "mobilevit-small"]


@SETTINGS
@given(model=st.sampled_from(_CONFIG_MODELS), field=st.sampled_from([
    "model_type", "hidden_size", "n_embd", "n_head", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "n_inner", "vocab_size", "max_position_embeddings", "n_positions", "type_vocab_size",
    "num_experts", "num_experts_per_tok", "moe_intermediate_size", "embedding_size", "depths", "hidden_sizes",
    "neck_hidden_sizes", "layer_type", "mlp_ratio", "output_stride", "image_size", "patch_size"]),
    value=st.one_of(anything, st.lists(anything, max_size=8), st.dictionaries(st.text(max_size=3), anything,
                                                                               max_size=2)),
    phase=st.sampled_from(["prefill", "decode", "training", "inference"]))
@example(model="llama-3-8b", field="head_dim", value="64", phase="prefill")  # once '//' on a str: a TypeError
@example(model="qwen3-30b-a3b", field="num_experts", value=10**30, phase="prefill")  # once numpy's OverflowError
@example(model="gpt2", field="model_type", value=[], phase="prefill")  # once unhashable in the family lookup
@example(model="mobilevit-small", field="hidden_sizes", value=[1, 2], phase="inference")  # once a KeyError
@example(model="resnet-101", field="depths", value=None, phase="inference")  # once 'NoneType' is not iterable
@example(model="mobilevit-small", field="image_size", value=370729, phase="prefill")  # a kernel past 64 bits: numpy's
#                                                                                        OverflowError once
def test_a_config_mapping(model, field, value, phase):
    """A model's config as a user gives it (a config.json or a mapping), one field drawn."""
    from joulecast.data.models import model_entry

    config = {**model_entry(model)["config"], field: value}
    estimate = outcome(lambda: joulecast.estimate(joulecast.workload(config, phase=phase, batch=2, seq=64), "h100",
                                                  estimator="physics"))
    assert estimate is None or numbers_ok(estimate.energy_j, estimate.time_s, estimate.power_w)


@SETTINGS
@given(entries=st.one_of(anything, st.lists(st.lists(st.one_of(anything, st.dictionaries(
    st.sampled_from(["dimM", "dimN", "dimK", "batch", "precM", "precA", "dim", "op", "prec", "useTensorCore"]),
    st.one_of(st.integers(-3, 10**7), st.sampled_from(["bf16", "fp32", "pointwise_add"]), st.booleans()),
    max_size=8), st.lists(st.sampled_from(["gemm", "tc", "bf16_bf16", "layernorm", "elementwise", "softmax"]),
                          max_size=3)), max_size=2), max_size=5)))
@example(entries=[[{"dimM": 0, "dimN": 0, "dimK": 0, "batch": "bf16"}, ["gemm"]]])  # once '>' on a str: a TypeError
@example(entries=[[{"dimM": 10**30, "dimN": 8, "dimK": 8, "batch": 1, "precM": "bf16", "precA": "bf16"},
                   ["gemm", "tc", "bf16_bf16"]]])  # once numpy's OverflowError
def test_kernel_list(entries):
    from joulecast.features.kernel_list import parse_kernel_list

    table = outcome(lambda: parse_kernel_list(entries, origin="hostile.json"))
    assert table is None or (len(table) >= 1 and (table["count"] >= 1).all())


@SETTINGS
@given(raw=st.one_of(anything, st.fixed_dictionaries({
    "name": names(["p"]), "gpu": names(GPUS),
    "settings": st.one_of(st.none(), st.dictionaries(st.sampled_from(["min_window_s", "repeats", "idle_s"]), anything)),
    "kernels": st.one_of(anything, st.lists(st.fixed_dictionaries({
        "op": names(["gemm", "softmax", "add"]), "dtype": st.one_of(anything, st.lists(names(["bf16"]), max_size=2)),
        "shapes": st.one_of(anything, st.lists(st.dictionaries(st.sampled_from(["m", "n", "k", "rows", "cols",
                                                                                  "elements"]), anything), max_size=2))}),
        max_size=2)),
    "models": st.one_of(st.none(), anything)})))
def test_plan(raw):
    from joulecast.data.collect.plan import parse_plan

    plan = outcome(lambda: parse_plan(raw, source="hostile.yaml"))
    assert plan is None or (plan.name and plan.gpu)


@SETTINGS
@given(column=st.sampled_from(["energy_j", "time_s", "power_w", "gpu", "batch", "measurement_id"]), value=anything)
def test_measurement_store(column, value, tmp_path_factory):
    from joulecast.data import store
    from joulecast.data.schema import validate_measurements

    good = store.load_store("data/measurements").head(3).copy()
    good[column] = good[column].astype(object)
    good.loc[good.index[0], column] = value
    table = outcome(lambda: validate_measurements(good, origin="hostile part"))
    for name in ("energy_j", "time_s") if table is not None else ():
        values = table[name].to_numpy(dtype=float)
        assert (np.isnan(values) | (values > 0)).all()


_JOB = {"model": "gpt2", "seq": 256, "global_batch": 16, "micro_batch": 4, "steps": 10, "estimator": "physics",
        "sites": [{"name": "a", "gpu": "a10", "gpus": 2}, {"name": "b", "gpu": "a10", "gpus": 2}],
        "links": [{"between": ["a", "b"], "gbps": 1.0, "rtt_ms": 10.0}],
        "strategies": ["ddp", {"kind": "diloco", "H": 10}]}


@SETTINGS
@given(path=st.sampled_from([("model",), ("seq",), ("global_batch",), ("micro_batch",), ("steps",), ("layout",),
                              ("sites", 0, "gpu"), ("sites", 0, "gpus"), ("sites", 1, "pue"), ("sites", 0, "grid"),
                              ("sites", 1, "local_energy"), ("links", 0, "gbps"), ("links", 0, "rtt_ms"),
                              ("links", 0, "between"), ("strategies", 1, "H"), ("strategies", 1, "bits"),
                              ("strategies", 0), ("failures",), ("stragglers",), ("start_hour",), ("sites",),
                              ("sites", 0, "power_limit_w"), ("sites", 1, "sm_clock_mhz"), ("fusions",),
                              ("forward_overhead_s",), ("links",), ("strategies",), ("loader_rate",)]),
       value=anything)
@example(path=("steps",), value=20)  # valid replacements, whatever the draws: the plan is reached and checked
@example(path=("sites", 0, "power_limit_w"), value=100.0)
@example(path=("fusions",), value=["activation", "attention_layout"])
@example(path=("forward_overhead_s",), value=0.003)
@example(path=("loader_rate",), value=5.0)  # a pipeline far slower than the GPUs: every step waits for it
@example(path=("micro_batch",), value="auto")  # each site the largest that fits
@example(path=("layout",), value="auto")  # the least that fits every site
@example(path=("model",), value="resnet-50")  # a vision model in a text model's job: its seq named
@example(path=("links", 0, "rtt_ms"), value=1.797693134862316e+305)  # once overflowed the plan's hours of carbon
@example(path=("links", 0, "gbps"), value=2.2250738585072014e-308)  # once did too: an infinite time
@example(path=("links",), value=5)  # once a TypeError iterating it
@example(path=("loader_rate",), value=2.225073858507e-311)  # once an infinite time too, the input pipeline's
def test_job_file(path, value):
    """A job file with one field replaced by a hostile value: a plan with finite, positive figures, or one line
    naming the field (as the CLI prints it, exit 2)."""
    import copy

    from joulecast.data.job_file import parse_job
    from joulecast.estimator.plan import plan

    raw = copy.deepcopy(_JOB)
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    result = outcome(lambda: plan(parse_job(raw)))
    reached["job"] = reached.get("job", 0) + (result is not None)
    for p in result.plans if result is not None else ():
        assert numbers_ok(p.time_s, p.energy_j, p.carbon_kg + 1e-30, *p.energy_interval_j)
        assert 0 < p.compute_utilisation <= 1


def test_the_hostile_job_draws_reached_plans_too():
    assert reached.get("job", 0) > 0  # some replaced values were valid: the plan ran and was checked



@SETTINGS
@given(requests=st.one_of(anything, st.lists(st.one_of(anything, st.lists(mostly(st.integers(1, 64), anything),
                                                                           max_size=3)), max_size=4)),
       batch=mostly(st.integers(1, 4), anything))
def test_a_list_of_requests(requests, batch):
    from joulecast.estimator.jobs import generate_requests

    r = outcome(lambda: generate_requests("gpt2", "a10", requests, batch=batch, estimator="physics"))
    assert r is None or (numbers_ok(r.energy_j, r.time_s, r.power_w, r.ttft_mean_s) and 0 <= r.padding_share < 1)


@SETTINGS
@given(output_tokens=mostly(st.none(), anything), duration=mostly(st.none(), anything),
       cv=mostly(st.just(0.0), anything), limit=mostly(st.none(), anything), clock=mostly(st.none(), anything))
def test_serving_totals_and_settings(output_tokens, duration, cv, limit, clock):
    from joulecast.estimator.serving import serve

    r = outcome(lambda: serve("gpt2", "a10", input_len=128, output_len=64, concurrency=8, output_tokens=output_tokens,
                              duration_s=duration, output_len_cv=cv, power_limit_w=limit, sm_clock_mhz=clock,
                              estimator="physics"))
    assert r is None or numbers_ok(r.tokens_per_s, r.energy_per_output_token_j, r.power_w,
                                   *((r.energy_j, r.duration_s, r.output_tokens) if r.energy_j is not None else ()))


@SETTINGS
@given(argv=st.lists(st.sampled_from(["--phase", "train-run", "generate", "serve", "prefill", "--global-batch", "8",
                                      "--steps", "5", "--micro-batch", "2,4", "3", "2,auto", "--input-len", "64,x",
                                      "64",
                                      "--output-len", "8", "--concurrency", "4", "--power-limit", "100,2000",
                                      "--request-rate", "0.5,1e9", "8,16",
                                      "--no-kv-cache", "--engine", "sglang-0.4", "--tp", "0", "--json", "--grid",
                                      "FR,in", "--objective", "carbon", "--pue", "hyperscale", "--loader-rate", "0",
                                      "--fusions", "channels_last", "--lora-rank", "0,16", "--recompute",
                                      "none,full"]), max_size=12))
def test_cli_sweep_of_jobs(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["sweep", "--model", "gpt2", "--gpu", "a10", "--estimator", "physics", *argv])
        except SystemExit as exc:  # argparse: a flag without its value, or an unknown flag
            code = exc.code
    assert code in (0, 2)
    if code == 2:  # one line, argparse's too (`cli._Parser`)
        assert err.getvalue().count("\n") == 1 and ": error: " in err.getvalue()
    assert "Traceback" not in err.getvalue()


@SETTINGS
@given(argv=st.lists(st.sampled_from(["--H", "--P", "--tau", "--bits", "--gbps", "--power-limit", "--site-sets",
                                      "--front", "0", "1", "-1", "2,4", "3", "16", "1e3", "nan", "inf", "0.5", "a",
                                      "a+b", "a+c", "carbon", "--json"]), max_size=8))
def test_cli_plan_sweep(argv, tmp_path_factory):
    """A plan sweep's axes drawn from hostile values: a sweep, or one line naming the flag (exit 2); never a
    traceback (H 0, P 0 and gbps 0 once were)."""
    job = tmp_path_factory.mktemp("job") / "job.yaml"
    job.write_text(yaml.safe_dump(_JOB))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["plan", str(job), "--sweep", *argv])
        except SystemExit as exc:  # argparse: a flag without its value
            code = exc.code
    assert code in (0, 2)
    if code == 2:
        assert err.getvalue().count("\n") == 1 and ": error: " in err.getvalue()
    else:
        assert "sweep: " in out.getvalue() or '"sweep"' in out.getvalue()


_BODY_KEYS = ["phase", "batch", "seq", "dtype", "attention", "launch_mode", "engine", "sm_clock_mhz", "power_limit_w",
              "input_len", "output_len", "kv_cache", "requests", "offload_gb", "tp", "concurrency", "request_rate",
              "max_batch", "output_len_cv", "sampling", "expert_parallel", "instances", "steps", "tokens",
              "global_batch", "micro_batch", "lora_rank", "recompute", "optimizer", "head_outputs", "fusions",
              "host_dispatch_s", "grid", "carbon_intensity", "pue", "loader_rate", "eval_tokens", "evals",
              "window_rates", "window_s", "last_window_s", "window_lengths", "autoscale", "spare", "cold_start_s",
              "headroom", "ttft_target_s", "ttft_p99_target_s", "itl_p99_target_s", "reactive", "reaction_s",
              "scale_in_delay_s", "min_instances", "queue", "input_len_cv", "chunk_tokens"]
_NEEDS = {"generate": {"input_len": 16, "output_len": 4}, "serve": {"input_len": 16, "output_len": 4, "concurrency": 2},
          "train-run": {"seq": 64, "global_batch": 4, "steps": 2}}


@SETTINGS
@given(phase=st.sampled_from([None, "generate", "serve", "train-run", "decode", "training"]), needs=st.booleans(),
       extra=st.dictionaries(st.sampled_from(_BODY_KEYS),
                             st.one_of(anything, st.lists(st.integers(-1, 64), max_size=2)), max_size=3))
@example(phase="serve", needs=True, extra={"tp": "auto"})  # the fewest GPUs whose shards fit
@example(phase="train-run", needs=True, extra={"micro_batch": "auto", "tp": "auto"})  # tp: not a training field
def test_service_bodies(phase, needs, extra):
    """A service body with hostile fields (its phase's required ones or not), as an estimate and as a report: an
    answer, or one line naming a field (the service's 422); never another exception (a 500: a train-run body without
    its seq once was)."""
    from joulecast.service import estimate_one, serve_page

    body = {"model": "gpt2", "gpu": "a10", **({"phase": phase} if phase else {}),
            **(_NEEDS.get(phase, {}) if needs else {}), **extra}
    result = outcome(lambda: estimate_one(body, "physics"))
    assert result is None or isinstance(result, dict)
    page = outcome(lambda: serve_page(body, "physics"))  # the same body as a report (a load window by window)
    assert page is None or page.startswith("<!doctype html>")


_TRACE_KEYS = ["input_len", "output_len", "arrival_s", "ContextTokens", "GeneratedTokens", "TIMESTAMP",
               "prompt_tokens", "completion_tokens"]
_request = st.one_of(st.lists(st.one_of(st.integers(-2, 2**25), anything), min_size=2, max_size=3),
                     st.dictionaries(st.sampled_from(_TRACE_KEYS),
                                     st.one_of(st.integers(-2, 2**25), anything, st.sampled_from(["2024-05-10 08:00"])),
                                     max_size=4),
                     anything)


@SETTINGS
@given(rows=st.one_of(st.lists(_request, max_size=4), anything), rate=st.one_of(st.none(), anything),
       window=st.one_of(st.none(), st.floats(0, 1e6), anything))
def test_service_serving_a_list_of_requests(rows, rate, window):
    """A serving body's `requests` (pairs, a trace's objects, anything), window by window or not: its load served,
    its figures finite, or one line naming a field; never a traceback."""
    from joulecast.service import estimate_one

    body = {"model": "gpt2", "gpu": "a10", "phase": "serve", "requests": rows,
            **({"request_rate": rate} if rate is not None else {}), **({"window_s": window} if window is not None
                                                                        else {})}
    result = outcome(lambda: estimate_one(body, "physics"))
    if result is not None:
        assert numbers_ok(result["energy_j"], result["trace"]["input_len"], result["power_w"]), result


@SETTINGS
@given(admitted=st.one_of(st.floats(0, 1e7), st.just(5e-324)), input_len=st.floats(1e-9, 1e10),
       cv=st.floats(0, 10), chunk=st.integers(1, 2**20), q=st.lists(st.floats(0, 1), min_size=1, max_size=5))
@example(admitted=1e-6, input_len=1e6, cv=10.0, chunk=8192, q=[0.99])  # once 19 GB: a length grid a token apart
@example(admitted=5e-324, input_len=1.0, cv=0.0, chunk=1, q=[0.0])  # once a chunk one point past the grid
def test_token_gap_quantiles(admitted, input_len, cv, chunk, q):
    """The prompt tokens a serving step carries at any quantiles, for any rate, lengths, spread and chunk
    (`estimator.token_gaps`): finite, from none to the chunk, never fewer at a higher quantile."""
    from joulecast.estimator import token_gaps

    tokens = token_gaps.prompt_tokens_quantile(admitted, input_len, cv, chunk, np.sort(q))
    assert np.isfinite(tokens).all() and (tokens >= 0).all() and (tokens <= chunk).all(), tokens
    assert (np.diff(tokens) >= 0).all(), tokens


_length = st.one_of(st.floats(0, 3000), st.just(float("nan")), st.none(), st.integers(-1, 2**25))


@SETTINGS
@given(rates=st.lists(st.one_of(st.floats(0, 60), st.just(0.0)), min_size=1, max_size=40),
       window=st.floats(30, 1e9), instances=st.integers(1, 3), autoscale=st.booleans(), queue=st.booleans(),
       max_batch=st.sampled_from([1, 4, 256]), last=st.one_of(st.none(), st.floats(1, 2e9)),
       scaled=st.dictionaries(st.sampled_from(["spare", "cold_start_s", "headroom", "ttft_target_s",
                                               "ttft_p99_target_s", "itl_p99_target_s", "reactive", "reaction_s",
                                               "scale_in_delay_s", "min_instances"]),
                              mostly(st.one_of(st.sampled_from(["off", "idle"]), st.floats(0, 1e5), st.booleans(),
                                               st.integers(0, 3)),
                                     anything),
                              max_size=3),
       lengths=st.one_of(st.none(), st.dictionaries(
           st.sampled_from(["input_len", "output_len", "input_len_cv", "output_len_cv"]),
           st.lists(mostly(_length, anything), min_size=1, max_size=40), min_size=2, max_size=4)))
# no output token: a ZeroDivisionError
@example(rates=[5e-324], window=60.0, instances=2, autoscale=False, queue=False, max_batch=256, last=None,
         lengths=None, scaled={})
# scaled to zero before the last window, reacting a window late: its requests once served by none, at no energy
@example(rates=[0.0, 3.0], window=600.0, instances=2, autoscale=True, queue=True, max_batch=4, last=None,
         lengths=None, scaled={"reactive": True, "min_instances": 0})
@example(rates=[2.0, 0.0, 3.0], window=600.0, instances=2, autoscale=True, queue=True, max_batch=4, last=None,
         lengths=None, scaled={"spare": "idle", "min_instances": 0})  # none serving, the spares idle
def test_a_load_window_by_window(rates, window, instances, autoscale, queue, max_batch, last, lengths, scaled):
    """Any windows' rates and lengths (the last its own, each window's own lengths or the load's), autoscaled or not
    (its spares off or idle, its cold starts, its headroom, its latency targets), queued or not: the windows' energy
    summed, every figure finite and the idle ones at idle power (the spares' and starts' energy besides), each
    window's gaps in order, queued every request served and no wait negative, or one line naming a field (a window
    past capacity: window_rates)."""
    load = dict(input_len=64, output_len=32) if lengths is None else dict(window_lengths=lengths)
    job = outcome(lambda: joulecast.serve("gpt2", "a10", **load, window_rates=rates, window_s=window,
                                          last_window_s=last, instances=instances, autoscale=autoscale,
                                          queue=queue, max_batch=max_batch, estimator="physics", **scaled))
    if job is not None:
        w = job.windows
        assert numbers_ok(job.energy_j, job.power_w, job.step_time_s), job
        # a window scaled to zero (min_instances 0) draws only its idle spares' (spare "idle"), every other something
        running = (w.instances > 0) | (w.output_tokens > 0)
        assert numbers_ok(*w.energy_j[running], *w.power_w[running]), job
        assert (w.energy_j[~running] == w.standby_j[~running]).all(), job
        assert job.energy_j == pytest.approx(w.energy_j.sum()) and (w.idle_share[w.output_tokens == 0] == 1).all()
        assert ((0 <= w.instances) & (w.instances <= instances)).all() and (w.serving <= w.instances + 1e-9).all()
        # one at least wherever a window has arrivals, but where it scales to zero (min_instances 0)
        assert job.min_instances == 0 or (w.instances >= 1).all(), job
        assert (w.standby_j >= 0).all() and (w.standby_j <= w.energy_j).all()
        assert job.autoscale or not w.standby_j.any()  # every instance serving: no spare, no start
        # each window's gaps between tokens: none (no tokens served), or positive, 99 % of them past 90 %
        gaps = np.isfinite(w.itl_p99_s)
        assert (gaps == np.isfinite(w.itl_p90_s)).all() and (w.itl_p90_s[gaps] > 0).all(), job
        assert (w.itl_p99_s[gaps] >= w.itl_p90_s[gaps]).all() and not gaps[w.output_tokens == 0].any(), job
        # the first token's figures finite, none negative (its wait for a slot: none at a rate too low to queue)
        assert np.isfinite([job.ttft_s, job.slot_wait_s, *w.slot_wait_s, *w.ttft_p99_s]).all(), job
        assert (w.slot_wait_s >= 0).all() and job.ttft_s > 0, job
        if queue:
            assert np.isfinite([job.wait_s, *w.wait_s, *w.backlog]).all() and (w.wait_s >= 0).all(), job
            assert w.output_tokens.sum() == pytest.approx(np.dot(w.request_rate * w.duration_s, w.output_len))


_SWEEP_KEYS = ["model", "phase", "gpu", "batch", "seq", "dtype", "sm_clock_mhz", "power_limit_w", "tp", "objective",
               "front", "max_time_s", "min_tokens_per_s", "max_power_w", "max_wait_s", "max_ttft_s", "max_ttft_p99_s",
               "max_itl_p99_s", "grid", "pue",
               "input_len", "output_len", "concurrency", "global_batch", "micro_batch", "steps", "engine", "kv_cache",
               "attention",
               "request_rate", "expert_parallel", "loader_rate", "fusions", "requests", "instances", "window_rates",
               "window_s", "last_window_s", "window_lengths", "autoscale", "spare", "cold_start_s", "headroom",
               "ttft_target_s", "ttft_p99_target_s", "itl_p99_target_s", "reactive", "reaction_s", "scale_in_delay_s",
               "min_instances", "queue", "carbon_series"]


@SETTINGS
@given(phase=st.sampled_from([None, "generate", "serve", "train-run", "decode"]), needs=st.booleans(),
       extra=st.dictionaries(st.sampled_from(_SWEEP_KEYS),
                             st.one_of(anything, st.lists(mostly(st.integers(1, 8), anything), max_size=3)),
                             max_size=3))
@example(phase=None, needs=False, extra={"engine": []})  # a pass's fixed option, a list: once a pandas ValueError
@example(phase="train-run", needs=False, extra={"global_batch": []})  # the micro-batches' default: once a TypeError
@example(phase="generate", needs=False, extra={"input_len": 1})  # no output_len: once generate()'s TypeError
@example(phase="serve", needs=True, extra={"model": ["gpt2", "qwen3-30b-a3b"]})  # models as an axis
@example(phase=None, needs=False, extra={"model": ["gpt2", 3]})  # a list with a bad item: one line naming model
@example(phase="serve", needs=False, extra={"input_len": 16, "output_len": 4, "window_rates": [1, 0], "window_s": 60,
                                          "carbon_series": [1, 5]})  # a load window by window on a series
def test_service_sweep_bodies(phase, needs, extra):
    """A sweep body with hostile fields and lists: an answer, or one line naming a field (a 422)."""
    from joulecast.service import sweep_points

    body = {"model": "gpt2", "gpu": "a10", **({"phase": phase} if phase else {}),
            **(_NEEDS.get(phase, {}) if needs else {}), **extra}
    result = outcome(lambda: sweep_points(body, "physics"))
    assert result is None or len(result["points"]) >= 1


# The Python API's job entry points, each with a valid call and the arguments a caller may pass it: values no CLI
# flag or JSON body can carry (a mapping, a list, bytes, any object) as well as those they can.
_CALLS = {
    "estimate": (lambda **k: joulecast.estimate(**{"workload": joulecast.workload("gpt2"), "gpu": "a10",
                                                   "estimator": "physics", **k}),
                 ("gpu", "sm_clock_mhz", "power_limit_w", "estimator")),
    "estimate_batch": (lambda **k: joulecast.estimate_batch(**{"workloads": [joulecast.workload("gpt2")] * 2,
                                                               "gpu": "a10", "estimator": "physics", **k}),
                       ("workloads", "gpu", "sm_clock_mhz", "power_limit_w", "estimator")),
    "generate": (lambda **k: joulecast.generate(**{"model": "gpt2", "gpu": "a10", "input_len": 16, "output_len": 2,
                                                   "estimator": "physics", **k}),
                 ("model", "gpu", "batch", "input_len", "output_len", "dtype", "kv_cache", "attention", "engine",
                  "host_dispatch_s", "offload_gb", "tp", "expert_parallel")),
    "serve": (lambda **k: joulecast.serve(**{"model": "gpt2", "gpu": "a10", "input_len": 16, "output_len": 4,
                                             "concurrency": 2, "estimator": "physics", **k}),
              ("model", "gpu", "concurrency", "max_batch", "engine", "tp", "chunk_tokens", "duration_s",
               "output_tokens", "output_len_cv", "sampling", "launch_mode", "dtype", "instances", "window_rates",
               "window_s", "last_window_s", "window_lengths", "autoscale", "spare", "cold_start_s", "headroom",
               "ttft_target_s", "ttft_p99_target_s", "itl_p99_target_s", "reactive", "reaction_s",
               "scale_in_delay_s", "min_instances", "queue")),
    "train_run": (lambda **k: joulecast.train_run(**{"model": "gpt2", "gpu": "a10", "seq": 64, "global_batch": 4,
                                                     "steps": 2, "estimator": "physics", **k}),
                  ("model", "gpu", "seq", "global_batch", "micro_batch", "steps", "lora_rank", "optimizer",
                   "loader_rate", "eval_tokens", "evals")),
    # a vision model's run over images: its text-only options and a sequence length refused, by name
    "train_run_images": (lambda **k: joulecast.train_run(**{"model": "resnet-50", "gpu": "a10", "global_batch": 4,
                                                            "steps": 2, "estimator": "physics", **k}),
                         ("seq", "global_batch", "micro_batch", "tokens", "dtype", "optimizer", "attention",
                          "launch_mode", "lora_rank", "recompute", "head_outputs", "fusions", "forward_overhead_s",
                          "loader_rate", "eval_tokens")),
    "sweep": (lambda **k: joulecast.sweep(**{"model": "gpt2", "gpu": "a10", "batch": [1, 2], "estimator": "physics",
                                             **k}),
              ("model", "gpu", "phase", "max_points", "seq", "dtype")),
}
_CALLS["plan_sweep"] = (
    lambda **k: joulecast.plan_sweep(**{"job": _JOB, "H": [100], "P": [1], "tau": [0], "bits": [16],
                                        "estimator": "physics", **k}),
    ("job", "H", "P", "tau", "bits", "gbps", "site_sets", "kinds", "front", "power_limits"))
_ODD = [{}, {"a": 1}, ["a10"], [{}], [True], b"gpt2", object(), float("inf"), float("nan"), True, -1, "x" * 300]


@pytest.mark.parametrize("entry, field", [(e, f) for e, (_, fields) in _CALLS.items() for f in fields])
def test_the_python_apis_odd_arguments_are_one_line_each(entry, field):
    """Every job entry point, each of its arguments given a value of another kind (a mapping, a list, bytes, any
    object, infinity, NaN, a name too long for a file): an answer, or one JoulecastError naming a field; never
    Python's own TypeError, OverflowError or OSError from inside (a mapping as the estimator raised 'unhashable
    type', infinity as serve's concurrency OverflowError, a mapping as a generation's model a pandas ValueError, a
    number as a plan sweep's H or kinds 'not iterable', [{}] as its site sets an IndexError); and an answer's
    figures are numbers."""
    call = _CALLS[entry][0]
    for value in _ODD:
        result = outcome(lambda: call(**{field: value}))
        figures = result.to_dict() if hasattr(result, "to_dict") else {}
        # an answer's figures are numbers (serve's launch_mode 'x' once priced every step NaN)
        assert not [k for k, v in figures.items() if isinstance(v, float) and not math.isfinite(v)], (field, value)
