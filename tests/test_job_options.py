"""Every option of a job (`generate`, `serve`, `train_run`) reaches it from each door: the CLI's `estimate` passes
it, a sweep takes it as a fixed option or an axis, the service as a field. A parameter added to a job and missed at
one door fails here, not silently (each door keeps its own list: the CLI's flags, `estimator.sweep.JOB_OPTIONS`,
the service's job fields)."""

from __future__ import annotations

import inspect

import pytest

from joulecast import cli, service
from joulecast.estimator import jobs, serving, train_run
from joulecast.estimator.many import CONFIG_COLUMNS
from joulecast.estimator.sweep import JOB_OPTIONS, SIZES

# What every door takes apart from the job: the workload, the GPU's setting and the estimator; and suggest_tp, the
# switch with which a sweep (its points past memory infeasible) skips the search for the fewest GPUs that hold one.
SHARED = {"model", "gpu", "sm_clock_mhz", "power_limit_w", "estimator", "host_dispatch_s", "suggest_tp"}
# A sweep's serving point is one engine step at a concurrency, not a timed load: a load's rate and length stay out.
NOT_SWEPT = {"serve": {"request_rate", "duration_s", "output_tokens"}}
# What the CLI reads from a requests file alone (`--requests FILE --window S`), tested with one below.
FROM_A_FILE = {"serve": {"window_rates", "window_s", "last_window_s", "window_lengths", "autoscale", "spare",
                         "cold_start_s", "headroom", "ttft_target_s", "ttft_p99_target_s", "itl_p99_target_s",
                         "reactive", "reaction_s", "scale_in_delay_s", "min_instances", "queue"}}
# A job function's module and name, and a CLI command that sets each of its options (non-default where it can).
JOBS = {
    "generate": (jobs, "generate", ["--batch", "2", "--input-len", "16", "--output-len", "4", "--dtype", "fp16",
                                    "--no-kv-cache", "--attention", "eager", "--launch-mode", "graph", "--engine",
                                    "vllm-0.5.4", "--offload-gb", "0.05", "--h2d-gbps", "8", "--tp", "2"]),
    "serve": (serving, "serve", ["--input-len", "64", "--output-len", "16", "--concurrency", "4", "--max-batch", "8",
                                 "--engine", "vllm-0.5.4", "--tp", "1", "--dtype", "fp16", "--launch-mode", "graph",
                                 "--chunk-tokens", "256", "--duration", "10", "--output-len-cv", "0.5",
                                 "--input-len-cv", "0.7", "--instances", "2",
                                 "--sampling", "greedy"]),
    "train-run": (train_run, "train_run", ["--seq", "128", "--global-batch", "8", "--micro-batch", "4", "--steps",
                                           "2", "--dtype", "fp16", "--lora-rank", "4", "--lora-targets", "attention",
                                           "--recompute", "selective", "--optimizer", "sgd", "--launch-mode", "graph",
                                           "--head-tokens", "64", "--head-outputs", "2", "--attention", "eager",
                                           "--fusions", "activation", "--forward-overhead-s", "0.001",
                                           "--loader-rate", "500", "--eval-tokens", "4096", "--evals", "2"]),
}


def _options(phase: str) -> set[str]:
    module, name, _ = JOBS[phase]
    return set(inspect.signature(getattr(module, name)).parameters) - SHARED


class _Called(Exception):
    pass


@pytest.mark.parametrize("phase", sorted(JOBS))
def test_the_cli_passes_every_option_of_the_job(phase, monkeypatch):
    module, name, flags = JOBS[phase]
    options, seen = _options(phase), {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise _Called

    monkeypatch.setattr(module, name, record)
    with pytest.raises(_Called):
        cli.main(["estimate", "--model", "gpt2", "--gpu", "a100", "--phase", phase, *flags])
    missed = options - set(seen) - FROM_A_FILE.get(phase, set())
    assert not missed, f"--phase {phase} drops {sorted(missed)}"
    # the values given reach the job as given (a few read back: lengths, dtype, launches)
    assert seen["dtype"] == "fp16" and seen["launch_mode"] == "graph"


@pytest.mark.parametrize("phase", sorted(JOBS))
def test_a_sweep_and_the_service_take_every_option_of_the_job(phase):
    options = _options(phase)
    swept = set(JOB_OPTIONS[phase]) | set(SIZES[phase]) | set(CONFIG_COLUMNS) | NOT_SWEPT.get(phase, set())
    assert options <= swept, f"a {phase} sweep misses {sorted(options - swept)}"
    fields = set(service._JOBS[phase]) | set(CONFIG_COLUMNS)
    assert options <= fields, f"the service's {phase} misses {sorted(options - fields)}"


def test_the_cli_passes_a_requests_file_s_windows(tmp_path, monkeypatch):
    """`--requests FILE --window S`: the file's arrivals a second in each window reach `serve` with the window (and
    --autoscale and its options, which only a load window by window takes)."""
    (tmp_path / "r.csv").write_text("input_len,output_len,arrival_s\n64,16,0\n64,16,100\n64,16,250\n")
    seen = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise _Called

    monkeypatch.setattr(serving, "serve", record)
    with pytest.raises(_Called):
        cli.main(["estimate", "--model", "gpt2", "--gpu", "a100", "--phase", "serve", "--requests",
                  str(tmp_path / "r.csv"), "--window", "120", "--instances", "2", "--autoscale", "--spare", "off",
                  "--cold-start", "1min", "--headroom", "10%", "--ttft-target", "2", "--ttft-p99-target", "9",
                  "--itl-p99-target", "50ms", "--reactive", "--reaction", "45s", "--scale-in-delay", "5min",
                  "--min-instances", "0"])
    # 0-120 s, then 120-250 s: the 10 s from 240 s too short a window, joined to the one before
    assert seen["window_s"] == 120 and seen["window_rates"].tolist() == [2 / 120, 1 / 130]
    assert seen["last_window_s"] == 130
    assert seen["autoscale"] is True and seen["instances"] == 2
    assert (seen["spare"], seen["cold_start_s"], seen["headroom"], seen["ttft_target_s"]) == ("off", 60, 0.1, 2)
    assert seen["ttft_p99_target_s"] == 9 and seen["itl_p99_target_s"] == 0.05 and seen["reactive"] is True
    assert (seen["reaction_s"], seen["scale_in_delay_s"], seen["min_instances"]) == (45, 300, 0)
