"""A generation is its prefill and its decode steps, estimated together, with an interval for errors shared by
its steps."""

import json
import re

import pandas as pd
import pytest

import joulecast
from joulecast.cli import main
from joulecast.data.models import model_entry


def test_a_generation_is_its_prefill_and_its_decode_steps():
    job = joulecast.generate("llama-3-8b", "h100-sxm", batch=4, input_len=512, output_len=5)
    prefill = joulecast.estimate(joulecast.workload("llama-3-8b", batch=4, seq=512), "h100-sxm")
    steps = [joulecast.estimate(joulecast.workload("llama-3-8b", phase="decode", batch=4, seq=512 + t), "h100-sxm")
             for t in range(4)]  # the prefill yields the first token; step t attends to 512 + t cached tokens
    assert job.ttft_s == pytest.approx(prefill.time_s, rel=1e-12)
    assert job.energy_j == pytest.approx(prefill.energy_j + sum(s.energy_j for s in steps), rel=1e-12)
    assert job.tpot_s == pytest.approx(sum(s.time_s for s in steps) / 4, rel=1e-12)
    lo = prefill.energy_interval_j[0] + sum(s.energy_interval_j[0] for s in steps)
    assert job.energy_interval_j[0] == pytest.approx(lo, rel=1e-12)  # errors moving together: bounds add up
    assert job.energy_interval_j[0] < job.energy_j < job.energy_interval_j[1]
    assert job.energy_per_output_token_j == pytest.approx(job.energy_j / 20)
    assert job.memory_gb == pytest.approx(max(e.memory_gb for e in (prefill, *steps)), rel=1e-12)  # the peak
    # why it reads outside the domain: its steps' reasons, each once (before, a job's flag said nothing of why)
    reasons = dict.fromkeys(r for e in (prefill, *steps) for r in e.outside_domain)
    assert "out-of-domain" in job.flags and job.outside_domain == tuple(reasons)
    assert job.to_dict()["outside_domain"] == job.outside_domain


def test_a_generation_names_its_model_and_gpu_as_the_catalog_does(tmp_path):
    """Given an alias or a config file, a generation (and a list of requests) reports the catalog's GPU name and the
    model's own, as `serve` and `train_run` do: before, the GPU read back as typed ('h100'). A config mapping, which
    a generation's steps (`estimate_many` rows, each naming its model) cannot carry, is refused in one line naming
    the model: before, pandas' 'Mixing dicts with non-Series' from inside."""
    path = tmp_path / "small.json"
    path.write_text(json.dumps(dict(model_entry("gpt2")["config"], name="gpt2-small")))
    for job, model in ((joulecast.generate("gpt2", "h100", input_len=64, output_len=2, estimator="physics"), "gpt2"),
                       (joulecast.generate_requests(str(path), "h100-sxm5", [(64, 2)], estimator="physics"),
                        "gpt2-small")):
        assert (job.model, job.gpu) == (model, "h100-sxm")
        assert (job.to_dict()["model"], job.to_dict()["gpu"]) == (model, "h100-sxm")
    config = model_entry("gpt2")["config"]
    for call in (lambda: joulecast.generate(config, "h100-sxm", input_len=64, output_len=2),
                 lambda: joulecast.generate_requests(config, "h100-sxm", [(64, 2)])):
        with pytest.raises(joulecast.InputError, match=r"^model: a catalog model name or a config.json path, got a "
                                                       r"mapping"):
            call()


def test_a_jobs_reasons_are_each_said_once_and_a_moving_value_as_its_range():
    from joulecast.estimator.jobs import job_reasons

    steps = ["seq = 4.1e+03 (trained 128 to 2.05e+03); decode work on a10, trained on forward only (physics' point)",
             "seq = 4.2e+03 (trained 128 to 2.05e+03)", "", "seq = 4.1e+03 (trained 128 to 2.05e+03)",
             "batch = 64 (trained 1 to 32)"]
    assert job_reasons(steps) == ("seq = 4.1e+03 to 4.2e+03 (trained 128 to 2.05e+03)",
                                  "decode work on a10, trained on forward only (physics' point)",
                                  "batch = 64 (trained 1 to 32)")
    assert job_reasons(["", ""]) == ()


@pytest.mark.parametrize("phase", [["--phase", "generate", "--batch", "4", "--input-len", "64", "--output-len", "4"],
                                   ["--phase", "serve", "--concurrency", "4", "--input-len", "64", "--output-len", "4"],
                                   ["--phase", "train-run", "--seq", "256", "--global-batch", "4", "--steps", "2",
                                    "--lora-rank", "8"]])
def test_a_jobs_table_says_why_it_is_out_of_domain(capsys, phase):
    """Each job's table names its reasons under its flag, as a single estimate's does (the H100 was trained on
    serving steps only: a generation's, a serving load's without an engine and a training run's steps are other
    work), and --json carries them."""
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", *phase]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    reasons = json.loads(capsys.readouterr().out)["outside_domain"]
    assert reasons and all(re.search(r"work on h100-sxm, trained on serving only", r) for r in reasons)
    flags = text[text.index("flag "):].splitlines()
    assert "out-of-domain" in flags[0] and [line.strip() for line in flags[1:]] == reasons


def test_without_a_kv_cache_every_step_recomputes_the_sequence():
    cached = joulecast.generate("gpt2", "a10", batch=2, input_len=256, output_len=64, estimator="physics")
    recomputed = joulecast.generate("gpt2", "a10", batch=2, input_len=256, output_len=64, kv_cache=False,
                                    estimator="physics")
    assert recomputed.energy_j > cached.energy_j and recomputed.ttft_s == pytest.approx(cached.ttft_s)
    # each step forwards every token so far: never cheaper than the cached step at the same position
    assert (recomputed.steps["time_s"].to_numpy()[1:] >= cached.steps["time_s"].to_numpy()[1:]).all()
    assert recomputed.steps["phase"].eq("prefill").all() and len(recomputed.steps) == 64
    assert recomputed.energy_interval_j is None and cached.method == "physics"


@pytest.mark.parametrize("argv, message", [
    (["--phase", "generate", "--input-len", "8"], "--output-len: --phase generate needs it"),
    (["--phase", "generate", "--input-len", "8", "--output-len", "4", "--seq", "9"], "--seq: has no effect with"),
    (["--input-len", "8"], "--input-len: applies to --phase generate, serve only"),
    (["--phase", "generate", "--input-len", "0", "--output-len", "4"], "--input-len: must be an integer from 1"),
    # another phase's flag, with this phase's flags of its name (a run's --tokens; serving totals --output-tokens)
    (["--phase", "serve", "--concurrency", "4", "--input-len", "8", "--output-len", "8", "--tokens", "1000"],
     "--tokens: applies to --phase train-run only; --phase serve takes --chunk-tokens or --output-tokens"),
])
def test_cli_generation_flags(capsys, argv, message):
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_generation_json(capsys):
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "generate", "--batch", "16",
                 "--input-len", "1024", "--output-len", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("energy_j", "time_s", "power_w", "energy_interval_j", "energy_per_output_token_j", "ttft_s", "tpot_s"):
        assert key in out
    assert out["energy_interval_j"][0] < out["energy_j"] < out["energy_interval_j"][1]
    assert out["time_s"] == pytest.approx(out["ttft_s"] + 15 * out["tpot_s"])


def test_a_generation_of_one_token_has_no_time_per_token(capsys):
    """One output token is the prefill's alone: no decode step to time (JSON null, where the table read 'nan days')."""
    argv = ["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "generate", "--input-len", "8",
            "--output-len", "1"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tpot_s"] is None and out["decode_energy_j"] == 0 and out["time_s"] == out["ttft_s"] > 0
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "no token after it)" in table and "nan" not in table


def test_a_generation_past_its_models_context_warns_once(monkeypatch, caplog):
    """The prefill and every longer decode context are past Llama-3's 8,192 tokens: one warning, not one each."""
    from joulecast.features import lowering
    monkeypatch.setattr(lowering, "_WARNED", set())
    with caplog.at_level("WARNING", logger=lowering.log.name):
        joulecast.generate("llama-3-8b", "h100-sxm", batch=1, input_len=9000, output_len=4, estimator="physics")
        joulecast.estimate(joulecast.workload("llama-3-8b", batch=1, seq=12000), "h100-sxm", estimator="physics")
    said = [r.getMessage() for r in caplog.records if "exceeds this model's" in r.getMessage()]
    assert said == ["seq 9000 exceeds this model's 8192 trained context; estimating as if it were extended"]
    with caplog.at_level("WARNING", logger=lowering.log.name):  # another model still says its own
        joulecast.estimate(joulecast.workload("gpt2", batch=1, seq=2048), "h100-sxm", estimator="physics")
    assert "seq 2048 exceeds this model's 1024 learned positions" in caplog.text


def test_a_list_of_requests_runs_in_padded_static_batches():
    """Requests of one length in one batch are that batch's generation exactly; mixed lengths pad each batch to its
    longest prompt and answer, so the padding costs energy and the requests' mean wait grows batch by batch."""
    from joulecast.estimator.jobs import generate_requests

    same = generate_requests("gpt2", "a10", [(128, 16)] * 4, batch=4, estimator="physics")
    one = joulecast.generate("gpt2", "a10", batch=4, input_len=128, output_len=16, estimator="physics")
    assert (same.energy_j, same.time_s, same.ttft_mean_s, same.padding_share) == (one.energy_j, one.time_s,
                                                                                   one.ttft_s, 0.0)
    mixed = [(128, 16), (32, 4), (256, 8), (64, 2)]
    paired = generate_requests("gpt2", "a10", mixed, batch=2, estimator="physics")
    batches = [joulecast.generate("gpt2", "a10", batch=2, input_len=128, output_len=16, estimator="physics"),
               joulecast.generate("gpt2", "a10", batch=2, input_len=256, output_len=8, estimator="physics")]
    assert paired.energy_j == pytest.approx(sum(b.energy_j for b in batches))
    assert paired.time_s == pytest.approx(sum(b.time_s for b in batches))
    assert paired.ttft_mean_s == pytest.approx((batches[0].ttft_s + batches[0].time_s + batches[1].ttft_s) / 2)
    assert paired.padding_share == pytest.approx(1 - 30 / (2 * 16 + 2 * 8))
    assert paired.energy_per_output_token_j == pytest.approx(paired.energy_j / 30)
    alone = generate_requests("gpt2", "a10", mixed, batch=1, estimator="physics")
    assert alone.padding_share == 0.0 and alone.requests == 4
    # a frame's two columns, as pandas reads the CLI's CSV (before: its column names taken as requests)
    frame = pd.DataFrame({"user": list("abcd"), "input_len": [m[0] for m in mixed],
                          "output_len": [float(m[1]) for m in mixed]})
    assert generate_requests("gpt2", "a10", frame, batch=2, estimator="physics") == paired
    for bad, field in (([], "requests"), ([(128,)], "requests[0]"), ([(128, 0)], "requests[0].output_len"),
                       (5, "requests"), (frame[["user", "input_len"]], "requests: a frame needs input_len and "
                                                                     "output_len columns; it has user, input_len")):
        with pytest.raises(joulecast.InputError, match=re.escape(field)):
            generate_requests("gpt2", "a10", bad, estimator="physics")


def test_a_jobs_setting_is_checked_as_one_jobs_not_a_rows():
    # a generation's steps go through `estimate_many`, whose message named the bad value's row ("row 0: ..."): one
    # job's GPU, clock, limit, attention and launch mode are checked before them, as `estimate` and `serve` check theirs
    from joulecast.estimator.jobs import generate_requests

    for call in (lambda **kw: joulecast.generate("gpt2", "a10", input_len=16, output_len=4, **kw),
                 lambda **kw: generate_requests("gpt2", "a10", [(16, 4)], **kw)):
        for setting, field in (({"power_limit_w": 10}, "power_limit_w: must be between 100 and 150 W on a10"),
                               ({"sm_clock_mhz": 5}, "sm_clock_mhz: must be between"),
                               ({"attention": "sdpa"}, "attention: unknown 'sdpa'; allowed: flash, eager, masked"),
                               ({"launch_mode": "x"}, "launch_mode: unknown 'x'; allowed: eager, graph")):
            with pytest.raises(joulecast.InputError, match="^" + re.escape(field)):
                call(estimator="physics", **setting)
    with pytest.raises(joulecast.InputError, match="^gpu: unknown 'nosuch'"):
        joulecast.generate("gpt2", "nosuch", input_len=16, output_len=4, estimator="physics")
    # a limit in the card's range still runs, and holds a prefill-heavy generation's power under it
    free, held = (joulecast.generate("gpt2", "a10", batch=16, input_len=512, output_len=4, estimator="physics", **kw)
                  for kw in ({}, {"power_limit_w": 100}))
    assert held.power_w <= 100 < free.power_w and held.time_s > free.time_s


def test_cli_requests_from_a_csv_or_json(tmp_path, capsys):
    csv = tmp_path / "requests.csv"
    csv.write_text("input_len,output_len\n128,16\n32,4\n")
    argv = ["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "generate", "--estimator", "physics", "--json"]
    assert main([*argv, "--requests", str(csv), "--batch", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 2 and out["batch"] == 2 and out["padding_share"] == pytest.approx(1 - 20 / 32)
    listed = tmp_path / "requests.json"
    listed.write_text("[[128, 16], [32, 4]]")
    assert main([*argv, "--requests", str(listed), "--batch", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["energy_j"] == pytest.approx(out["energy_j"])
    # a list of request objects as the pairs' (other keys left as they are); counts as the flags take them
    listed.write_text('[{"id": "a", "input_len": 128, "output_len": 1.6e1}, {"output_len": 4, "input_len": 32}]')
    assert main([*argv, "--requests", str(listed), "--batch", "2"]) == 0
    assert json.loads(capsys.readouterr().out) == out
    listed.write_text('[{"input_len": 128, "output_length": 16}]')
    assert main([*argv, "--requests", str(listed)]) == 2
    # one trace's key beside another's: no format's two names (before: "requests[0]: an object needs input_len and
    # output_len")
    assert ("needs a prompt and an answer length a request, as columns or keys: input_len and output_len "
            "(joulecast's columns)") in capsys.readouterr().err
    for path, text in ((csv, "input_len,output_len\n1.28e2,16\n32,4.0\n"), (listed, "[[1.28e2, 16], [32, 4.0]]")):
        path.write_text(text)  # counts as the flags take them: 1.28e2 is 128
        assert main([*argv, "--requests", str(path), "--batch", "2"]) == 0
        assert json.loads(capsys.readouterr().out) == out
    csv.write_text("input_len,output_len\n128,2.5\n")
    assert main([*argv, "--requests", str(csv)]) == 2
    assert "--requests row 1:" in capsys.readouterr().err
    csv.write_text("input_len,output_len\n128,lots\n")
    assert main([*argv, "--requests", str(csv)]) == 2
    assert "--requests row 1:" in capsys.readouterr().err
    assert main([*argv, "--requests", str(listed), "--output-len", "4"]) == 2
    assert "--output-len: has no effect with --phase generate (give --requests alone" in capsys.readouterr().err
    # the table a person reads: the requests, their mean lengths and batches, the job's figures with the interval's
    # rule, the padding, one line each, the same figures as the JSON's
    csv.write_text("input_len,output_len\n128,16\n32,4\n")
    assert main([*argv[:-1], "--requests", str(csv), "--batch", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "requests   gpt2: 2 (mean 80 in + 10 out tokens) in static batches of 2"
    assert lines[1:3] == ["gpu        a10", "method     physics"]
    from joulecast.render import figure

    def g4(value):  # four significant digits, as the table writes them (trailing zeros kept)
        return figure(value, zeros=True)

    assert f"energy     {g4(out['energy_j'])} J" in lines  # physics: no interval
    assert f"padding    {100 * out['padding_share']:.1f} % of the tokens the batches computed" in lines
    assert (f"per token  {g4(out['energy_per_output_token_j'])} J an output token asked for, "
            f"{g4(out['energy_per_request_j'])} J a request") in lines


def test_a_stated_host_dispatch_reaches_every_step_of_a_generation_as_estimate_many_takes_it():
    """`generate(host_dispatch_s=)` is `estimate_many`'s host_dispatch_s column on every step, which is the single
    estimate's `Workload.host_dispatch_s`; a bad value names the field."""
    import pandas as pd

    from joulecast.data.errors import InputError
    from joulecast.estimator.many import estimate_many

    step = dict(model="llama-3-8b", gpu="h200", phase="decode", batch=4, seq=1024)
    many = estimate_many(pd.DataFrame([{**step, "host_dispatch_s": d} for d in (None, 18e-6)]))
    one = joulecast.estimate(joulecast.workload("llama-3-8b", phase="decode", batch=4, seq=1024,
                                                host_dispatch_s=18e-6), "h200")
    assert many["energy_j"][1] == pytest.approx(one.energy_j, rel=1e-9) and many["time_s"][1] < many["time_s"][0]
    fast, slow = (joulecast.generate("llama-3-8b", "h200", batch=4, input_len=512, output_len=8, host_dispatch_s=d,
                           estimator="physics") for d in (10e-6, None))
    assert fast.time_s < slow.time_s and fast.ttft_s < slow.ttft_s
    with pytest.raises(InputError, match="host_dispatch_s: must be from 0 to 0.001 s"):
        joulecast.generate("llama-3-8b", "h200", input_len=8, output_len=2, host_dispatch_s=1.0)
    with pytest.raises(InputError, match="host_dispatch_s: row 1: must be from 0 to 0.001 s"):
        estimate_many(pd.DataFrame([{**step, "host_dispatch_s": d} for d in (None, -1e-6)]))


def test_a_generation_says_whose_host_it_took_and_its_interval_spans_the_measured_ones_without_one():
    """Unstated, the default 25 us and an interval spanning the measured hosts' 18-30 us (its table says so); stated,
    that host and a narrower interval about the same point; CUDA graphs dispatch nothing."""
    from joulecast.render import generation_table

    kw = dict(batch=1, input_len=32, output_len=4, kv_cache=False)
    unstated, stated = (joulecast.generate("llama-2-7b", "a100-pcie-40gb", host_dispatch_s=d, **kw)
                        for d in (None, 25e-6))
    assert (unstated.host_dispatch_s, unstated.host_dispatch_stated) == (25e-6, False)
    assert (stated.host_dispatch_s, stated.host_dispatch_stated) == (25e-6, True)
    assert unstated.energy_j == pytest.approx(stated.energy_j, rel=1e-12)
    (lo, hi), (s_lo, s_hi) = unstated.energy_interval_j, stated.energy_interval_j
    assert lo < s_lo and hi > s_hi
    assert "host       25.00 µs a launch by default (the interval: hosts of 18.00 - 30.00 µs)" in (
        generation_table(unstated))
    graphs = joulecast.generate("llama-2-7b", "a100-pcie-40gb", launch_mode="graph", **kw)
    assert (graphs.host_dispatch_s, graphs.host_dispatch_stated) == (0.0, True)
    assert "host " not in generation_table(graphs)


def test_weights_offloaded_to_host_memory_are_copied_in_before_every_pass_with_the_gpu_idle():
    """Accelerate's device_map="auto" keeps what the GPU cannot hold in host memory and copies it in at every
    forward: each step waits for the copy (GiB over the host's rate) at the GPU's idle power; the GPU holds that much
    less, so a model over its memory fits; a host that states no rate takes the posted rates' median, the interval
    spanning their range."""
    from joulecast.estimator import offload
    from joulecast.features.power import idle_power_w

    args = dict(batch=1, input_len=64, output_len=6, kv_cache=False, dtype="fp32", estimator="physics")
    plain = joulecast.generate("llama-3-8b", "v100-pcie-16gb", **args)
    assert "exceeds-memory" in plain.flags  # 30 GiB of fp32 weights on a 16 GB card
    stated = joulecast.generate("llama-3-8b", "v100-pcie-16gb", offload_gb=16.0, h2d_gbps=8.0, **args)
    copy = 16.0 * 2**30 / 8e9
    spec = joulecast.gpu("v100-pcie-16gb")
    idle = float(idle_power_w(spec, spec.boost_clock_mhz))
    assert stated.time_s == pytest.approx(plain.time_s + 6 * copy, rel=1e-9)  # six passes: the prefill, five steps
    assert stated.energy_j == pytest.approx(plain.energy_j + 6 * copy * idle, rel=1e-9)
    assert stated.ttft_s == pytest.approx(plain.ttft_s + copy, rel=1e-9)
    assert stated.memory_gb == pytest.approx(plain.memory_gb - 16.0) and "exceeds-memory" not in stated.flags
    assert (stated.offload_gb, stated.h2d_gbps, stated.h2d_stated) == (16.0, 8.0, True)
    hybrid = joulecast.generate("llama-3-8b", "v100-pcie-16gb", **{**args, "estimator": None})
    unstated = joulecast.generate("llama-3-8b", "v100-pcie-16gb", offload_gb=16.0, **{**args, "estimator": None})
    fast, slow = (16.0 * 2**30 / (r * 1e9) for r in offload.H2D_RANGE_GBPS[::-1])
    assert unstated.h2d_gbps == offload.H2D_DEFAULT_GBPS and not unstated.h2d_stated
    assert unstated.time_interval_s[0] == pytest.approx(hybrid.time_interval_s[0] + 6 * fast, rel=1e-9)
    assert unstated.time_interval_s[1] == pytest.approx(hybrid.time_interval_s[1] + 6 * slow, rel=1e-9)
    assert unstated.energy_interval_j[1] == pytest.approx(hybrid.energy_interval_j[1] + 6 * slow * idle, rel=1e-9)
    # a list of requests takes it as a generation does; nothing offloaded changes nothing
    requests = joulecast.generate_requests("llama-3-8b", "v100-pcie-16gb", [[64, 6]], offload_gb=16.0,
                                           h2d_gbps=8.0, **{k: v for k, v in args.items()
                                                            if k not in ("input_len", "output_len")})
    assert requests.energy_j == pytest.approx(stated.energy_j, rel=1e-9) and requests.offload_gb == 16.0
    assert joulecast.generate("llama-3-8b", "v100-pcie-16gb", offload_gb=0, **args).energy_j == plain.energy_j


@pytest.mark.parametrize("options, message", [
    ({"offload_gb": -1.0}, "offload_gb: must be a number of GiB, 0 or more"),
    ({"offload_gb": 99.0}, "offload_gb: must be less than the"),
    ({"offload_gb": float("nan")}, "offload_gb: must be a number of GiB"),
    ({"offload_gb": 1.0, "h2d_gbps": 0.0}, "h2d_gbps: must be GB/s over 0"),
])
def test_a_bad_offload_is_one_line_naming_its_field(options, message):
    with pytest.raises(joulecast.InputError) as err:
        joulecast.generate("llama-3-8b", "v100-pcie-16gb", input_len=8, output_len=2, estimator="physics", **options)
    assert message in str(err.value)


def test_cli_offload_prints_its_copy_and_refuses_other_phases(capsys):
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "v100-pcie-16gb", "--phase", "generate", "--dtype",
                 "fp16", "--input-len", "64", "--output-len", "4", "--offload-gb", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"offload +2 GiB of weights in host memory, copied in every pass at 6.95 GB/s by default", out)
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--offload-gb", "1"]) == 2
    assert "--offload-gb: applies to --phase generate only" in capsys.readouterr().err


def test_no_engine_reads_alike_however_it_is_written(capsys):
    """"none" (the help's word for the default, any case) and an empty name are no engine in every entry point: the
    same figures as leaving it out; an unknown name is still one error naming the field."""
    base = joulecast.estimate(joulecast.workload("gpt2", batch=4, seq=256), "h100-sxm", estimator="physics")
    for name in ("none", "None", ""):
        w = joulecast.workload("gpt2", batch=4, seq=256, engine=name)
        assert joulecast.estimate(w, "h100-sxm", estimator="physics").energy_j == base.energy_j
        gen = joulecast.generate("gpt2", "h100-sxm", batch=2, input_len=64, output_len=8, engine=name,
                                 estimator="physics")
        assert gen.energy_j == joulecast.generate("gpt2", "h100-sxm", batch=2, input_len=64, output_len=8,
                                                  estimator="physics").energy_j
        srv = joulecast.serve("gpt2", "h100-sxm", input_len=64, output_len=8, concurrency=4, engine=name,
                              estimator="physics")
        assert srv.engine == "none"
    assert main(["estimate", "--model", "gpt2", "--gpu", "h100-sxm", "--engine", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["energy_j"] > 0
    assert main(["estimate", "--model", "gpt2", "--gpu", "h100-sxm", "--phase", "generate", "--input-len", "64",
                 "--output-len", "8", "--engine", "bogus"]) == 2
    assert "engine" in capsys.readouterr().err
    # an engine named without its version: the close names, from every door alike (no batch's row number)
    for call in (lambda: joulecast.generate("gpt2", "h100-sxm", input_len=4, output_len=2, engine="vllm"),
                 lambda: joulecast.serve("gpt2", "h100-sxm", input_len=4, output_len=2, concurrency=2, engine="vllm"),
                 lambda: joulecast.workload("gpt2", engine="vllm")):
        with pytest.raises(joulecast.InputError, match=r"^engine: unknown 'vllm'; did you mean 'vllm-0.5.4'.*"
                                                       r"\(or none, the kernels alone\)$"):
            call()


def test_an_engines_steps_run_as_cuda_graphs_unless_a_launch_mode_is_stated():
    """Naming a serving engine without a launch mode prices its steps as the engines run them, replayed CUDA graphs
    (the help says so), in every entry point; a stated mode is kept, and HF's loop without a cache, which no engine
    runs, stays eager."""
    kw = dict(batch=1, input_len=256, output_len=16, estimator="physics")
    named = joulecast.generate("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", **kw)
    assert named.energy_j == joulecast.generate("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", launch_mode="graph",
                                                **kw).energy_j
    assert named.energy_j != joulecast.generate("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", launch_mode="eager",
                                                **kw).energy_j
    uncached = joulecast.generate("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", kv_cache=False, **kw)
    assert uncached.energy_j == joulecast.generate("llama-3-8b", "h100-sxm", kv_cache=False, **kw).energy_j
    assert joulecast.workload("llama-3-8b", phase="decode", engine="vllm-0.5.4").launch_mode == "graph"
    assert joulecast.workload("llama-3-8b", phase="decode", engine="none").launch_mode == "eager"
    rows = joulecast.estimate_many(pd.DataFrame({"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "decode",
                                                 "engine": ["vllm-0.5.4", "vllm-0.5.4", ""],
                                                 "launch_mode": [None, "eager", None]}), estimator="physics")
    assert rows["launch_mode"].tolist() == ["graph", "eager", "eager"]
    assert rows["energy_j"].iloc[0] != rows["energy_j"].iloc[1]


def test_a_generation_on_tensor_parallel_gpus_is_each_shard_and_its_all_reduces():
    """A 70B generation no one GPU holds, on four: every step is one GPU's shard (`estimate_many`'s tp column: the
    lowering of the sharded config) plus two all-reduces a layer over the step's tokens, which the GPUs wait out at
    their waiting power, and the engine's host work for its other workers (`worker_host`); energy all four GPUs',
    memory one's."""
    from joulecast.data.gpus import gpu as lookup_gpu
    from joulecast.estimator.tensor_parallel import all_reduce_s, worker_host
    from joulecast.features.lowering import resolve_model
    from joulecast.features.power import waiting_power_w
    from joulecast.features.train_step import shard_config

    kw = dict(batch=4, input_len=256, output_len=8, engine="vllm-0.5.4", estimator="physics")
    one, four = (joulecast.generate("llama-3-70b", "h100-sxm", tp=t, **kw) for t in (1, 4))
    assert "exceeds-memory" in one.flags and "exceeds-memory" not in four.flags and four.tp == 4
    assert four.memory_gb == pytest.approx(one.memory_gb / 4, rel=0.1)
    steps = four.steps
    config = resolve_model("llama-3-70b")[0]
    shard = joulecast.estimate(joulecast.workload(shard_config(config, tp=4), phase="decode", batch=4, seq=256 + 1,
                                                  engine="vllm-0.5.4"), "h100-sxm", estimator="physics")
    spec = lookup_gpu("h100-sxm")
    comm = float(all_reduce_s(config, spec, "vllm-0.5.4", 4, 4))
    host_s, host_w = worker_host("vllm-0.5.4", 4, spec, None)
    assert host_s > 0
    assert steps["time_s"].iloc[2] == pytest.approx(shard.time_s + comm + host_s, rel=1e-9)
    assert steps["energy_j"].iloc[2] == pytest.approx(
        4 * (shard.energy_j + comm * waiting_power_w(spec, None) + host_s * host_w), rel=1e-9)
    assert four.energy_j == pytest.approx(steps["energy_j"].sum()) and four.time_s < one.time_s
    assert joulecast.generate("gpt2", "h100-sxm", batch=1, input_len=16, output_len=2, tp=1,
                              estimator="physics") == joulecast.generate("gpt2", "h100-sxm", batch=1, input_len=16,
                                                                         output_len=2, estimator="physics")


def test_opt_runs_tensor_parallel_as_gpt2_and_llama_do():
    """OPT's heads, FFN and vocabulary split over the GPUs as the others' (before: 'tensor and pipeline parallelism
    are modelled for llama and gpt2'); a shard runs the whole model's kernels at its own widths."""
    from joulecast.features.lowering import lower, resolve_model
    from joulecast.features.train_step import shard_config

    config = resolve_model("opt-1.3b")[0]
    (whole, n), (half, _) = (lower(shard_config(config, tp), phase="prefill", batch=1, seq=128, dtype="bf16",
                                   attention="flash") for tp in (1, 2))
    assert len(whole) == len(half) and [r["kind"] for r in whole] == [r["kind"] for r in half]
    assert n == joulecast.workload("opt-1.3b").params and abs(n / 1.3e9 - 1) < 0.02  # the whole model: 1.3 B
    one, two = (joulecast.generate("opt-1.3b", "a100-sxm4-80gb", batch=8, input_len=256, output_len=16, tp=tp,
                                   estimator="physics") for tp in (1, 2))
    assert two.memory_gb < 0.55 * one.memory_gb and two.tp == 2


def test_a_generation_with_its_experts_split_over_the_gpus_runs_each_gpus_share_whole(capsys):
    """Mixtral on 4 GPUs with its experts split whole (vLLM's --enable-expert-parallel): each step is one GPU's shard
    of that layout, `estimate_many`'s template as the sharded config's own lowering; one sequence's decode steps
    route its token to experts that crowd one GPU, which the others wait for, so they run slower than with each
    expert's width split; memory the same (a quarter of the experts each)."""
    from joulecast.features.lowering import resolve_model
    from joulecast.features.train_step import shard_config

    kw = dict(batch=1, input_len=256, output_len=4, tp=4, engine="vllm-0.11.1", estimator="physics")
    split, width = (joulecast.generate("mixtral-8x7b", "h100-sxm", expert_parallel=ep, **kw) for ep in (True, False))
    assert split.expert_parallel and not width.expert_parallel
    assert split.tpot_s > 1.1 * width.tpot_s and split.memory_gb == pytest.approx(width.memory_gb, rel=1e-3)
    shard = shard_config(resolve_model("mixtral-8x7b")[0], tp=4, expert_parallel=True)
    step = joulecast.estimate(joulecast.workload(shard, phase="decode", batch=1, seq=257, engine="vllm-0.11.1"),
                              "h100-sxm", estimator="physics")
    row = joulecast.estimate_many(pd.DataFrame({"model": ["mixtral-8x7b"], "gpu": "h100-sxm", "phase": "decode",
                                                "batch": 1, "seq": 257, "engine": "vllm-0.11.1", "tp": 4,
                                                "expert_parallel": "true"}), estimator="physics").iloc[0]
    assert (row["time_s"], row["energy_j"]) == pytest.approx((step.time_s, step.energy_j), rel=1e-9)
    assert split.steps["physics_time_s"].iloc[2] > step.time_s  # and the step's all-reduces
    # the shard runs the busiest GPU's whole experts (1: the token's 2 of 8 over 4 GPUs), the busiest runs their
    # expectation (the most of 4 GPUs' Binomial(2, 1/4) counts, 1.13), which the step waits for, and the other three
    # half an expert on average, waiting out the rest: the step is a little longer and its energy below 4 shards'
    from joulecast.data.gpus import gpu as lookup_gpu
    from joulecast.estimator.tensor_parallel import all_reduce_s, expert_spread
    from joulecast.features.kernel_table import kernel_columns
    from joulecast.features.lower_transformers import expected_experts, expert_gemms
    from joulecast.features.physics import analyze_arrays
    from joulecast.features.power import waiting_power_w

    records, busiest, mean = expert_gemms(shard, 1, "bf16")
    assert busiest == pytest.approx(float(expected_experts(1, 8, 2, 4))) and 1.1 < busiest < 1.15
    assert mean == pytest.approx(0.5) and {r["op"] for r in records} == {"experts"}
    assert [r["count"] for r in records] == [32, 32]  # the gate-and-up and the down GEMMs of every layer
    assert expert_gemms(shard, 4096, "bf16")[1:] == (1.0, 1.0)  # a prefill runs every expert on every GPU
    config, spec = resolve_model("mixtral-8x7b")[0], lookup_gpu("h100-sxm")
    spread_s, spread_j = expert_spread(config, spec, 4, [1, 4096], "bf16", None, None)
    gemms = analyze_arrays(kernel_columns(records), spec)[1]
    assert spread_s[0] == pytest.approx(gemms.time_s[0] * (busiest - 1.0)) and spread_s[1] == spread_j[1] == 0
    assert -0.75 * 0.5 * gemms.energy_j[0] < spread_j[0] < 0
    comm = float(all_reduce_s(config, spec, "vllm-0.11.1", 4, 1))
    assert split.steps["time_s"].iloc[2] == pytest.approx(step.time_s + comm + spread_s[0], rel=1e-9)
    assert split.steps["energy_j"].iloc[2] == pytest.approx(
        4 * (step.energy_j + comm * waiting_power_w(spec, None) + spread_j[0]), rel=1e-9)
    requests = joulecast.generate_requests("mixtral-8x7b", "h100-sxm", [(256, 4)], expert_parallel=True,
                                           **{k: v for k, v in kw.items() if k not in ("batch", "input_len",
                                                                                       "output_len")})
    assert requests.expert_parallel and requests.energy_j == pytest.approx(split.energy_j, rel=1e-12)
    one = dict(kw, tp=1)
    assert joulecast.generate("mixtral-8x7b", "h100-sxm", expert_parallel=True, **one).energy_j == pytest.approx(
        joulecast.generate("mixtral-8x7b", "h100-sxm", **one).energy_j, rel=1e-12)  # one GPU holds every expert
    with pytest.raises(joulecast.InputError, match="^expert_parallel: splits a mixture of experts' experts"):
        joulecast.generate("llama-3-8b", "h100-sxm", expert_parallel=True, **kw)
    with pytest.raises(joulecast.InputError, match="^expert_parallel: must be true or false, got 'yes'"):
        joulecast.generate("mixtral-8x7b", "h100-sxm", expert_parallel="yes", **kw)
    argv = ["estimate", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--phase", "generate", "--input-len", "256",
            "--output-len", "4", "--tp", "4", "--expert-parallel", "--estimator", "physics"]
    assert main(argv) == 0
    assert "x 4, tensor parallel, experts split over the GPUs" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["expert_parallel"] is True
    assert main([*argv[:2], "llama-3-8b", *argv[3:]]) == 2
    assert "--expert-parallel: splits a mixture of experts' experts" in capsys.readouterr().err


@pytest.mark.parametrize("kw, message", [
    (dict(model="llama-3-70b", tp=3), "tp: 3 does not divide the model's 64 attention heads"),
    (dict(model="opt-1.3b", tp=3), "tp: 3 does not divide the model's 32 attention heads; these do (up to 64): "
                                   "1, 2, 4, 8, 16, 32"),
    (dict(model="bert-large", tp=2), "phase: generate needs a decoder"),  # the model before its layout
    (dict(model="llama-3-70b", tp=0), "tp: must be a whole number of GPUs from 1 to 1,024, got 0"),
    (dict(model="llama-3-70b", tp=2, offload_gb=4.0), "offload_gb: give it or tp, not both"),
])
def test_a_tensor_parallel_generation_refuses_a_layout_in_one_line(kw, message):
    with pytest.raises(joulecast.InputError, match=re.escape(message)):
        joulecast.generate(kw.pop("model"), "h100-sxm", input_len=16, output_len=2, estimator="physics", **kw)


@pytest.mark.parametrize("argv, message", [
    (["--phase", "prefill", "--tp", "2"], "--tp: applies to --phase generate, serve only"),
    (["--phase", "serve", "--concurrency", "4", "--input-len", "8", "--output-len", "8", "--offload-gb", "1"],
     "--offload-gb: applies to --phase generate only"),
    (["--phase", "generate", "--input-len", "8", "--output-len", "8", "--sampling", "top-p"],
     "--sampling: applies to --phase serve only"),
    (["--phase", "prefill", "--expert-parallel"], "--expert-parallel: applies to --phase generate, serve only"),
    (["--phase", "train-run", "--steps", "2", "--global-batch", "4", "--seq", "64", "--concurrency", "4"],
     "--concurrency: applies to --phase serve only"),
])
def test_a_flag_of_another_phase_is_refused_not_ignored(capsys, argv, message):
    assert main(["estimate", "--model", "gpt2", "--gpu", "h100-sxm", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_generation_past_its_gpus_memory_names_the_fewest_gpus_whose_shards_fit():
    """Llama-3-70B's 131 GiB of bf16 weights: two H100s (80 GiB) hold its shards, eight A10s (24 GiB) do, four do
    not; each count as `generate` at that tp finds it; a generation that fits, or one already offloading, has none."""
    kw = dict(batch=4, input_len=1024, output_len=16, estimator="physics")
    for card, fewest in (("h100-sxm", 2), ("a10", 8)):
        run = joulecast.generate("llama-3-70b", card, **kw)
        assert "exceeds-memory" in run.flags and run.fits_tp == fewest
        assert "exceeds-memory" not in joulecast.generate("llama-3-70b", card, tp=fewest, **kw).flags
        assert "exceeds-memory" in joulecast.generate("llama-3-70b", card, tp=fewest // 2, **kw).flags
    assert joulecast.generate("llama-3-8b", "h100-sxm", **kw).fits_tp is None
    assert joulecast.generate("llama-3-70b", "h100-sxm", offload_gb=10.0, **kw).fits_tp is None


def test_a_list_of_requests_past_its_gpus_memory_names_the_fewest_gpus_too():
    """Each batch's prefill and last step are read: the batch of long prompts sets the memory, as in its table."""
    pairs = [(64, 8), (64, 8), (6000, 8), (6000, 8)]
    run = joulecast.generate_requests("llama-3-70b", "h100-sxm", pairs, batch=2, estimator="physics")
    assert "exceeds-memory" in run.flags and run.fits_tp == 2
    assert "exceeds-memory" not in joulecast.generate_requests("llama-3-70b", "h100-sxm", pairs, batch=2, tp=2,
                                                               estimator="physics").flags
    assert joulecast.generate_requests("llama-3-8b", "h100-sxm", pairs, batch=2, estimator="physics").fits_tp is None


def test_tp_auto_runs_a_job_on_the_fewest_gpus_whose_shards_fit(capsys):
    """tp "auto": a generation, a list of requests or a serving load on the fewest GPUs (1, 2, 4, 8) whose shards
    fit (a load: and serve its rate), exactly the estimate at that tp, `tp_auto` set; where one GPU holds it, at one;
    where not eight do, at one, flagged; anything else named."""
    from joulecast.estimator.serving import BeyondCapacityError, serve

    kw = dict(batch=4, input_len=1024, output_len=16, estimator="physics")
    for model, card, tp in (("llama-3-70b", "h100-sxm", 2), ("llama-3-70b", "a10", 8), ("llama-3-8b", "h100-sxm", 1)):
        auto, given = (joulecast.generate(model, card, tp=t, **kw) for t in ("auto", tp))
        assert (auto.tp, auto.tp_auto, given.tp_auto) == (tp, True, False)
        assert (auto.energy_j, auto.time_s, auto.energy_interval_j) == (given.energy_j, given.time_s,
                                                                      given.energy_interval_j)
        load = dict(input_len=512, output_len=128, concurrency=16, engine="vllm-0.11.1", estimator="physics")
        auto, given = (serve(model, card, tp=t, **load) for t in ("auto", tp))
        assert (auto.tp, auto.tp_auto) == (tp, True) and auto.energy_per_output_token_j == \
            given.energy_per_output_token_j and auto.energy_per_output_token_interval_j == \
            given.energy_per_output_token_interval_j
    pairs = [(64, 8), (64, 8), (6000, 8), (6000, 8)]
    run = joulecast.generate_requests("llama-3-70b", "h100-sxm", pairs, batch=2, tp="auto", estimator="physics")
    assert (run.tp, run.tp_auto) == (2, True) and run.energy_j == joulecast.generate_requests(
        "llama-3-70b", "h100-sxm", pairs, batch=2, tp=2, estimator="physics").energy_j
    past = serve("llama-3.1-405b", "a10", input_len=512, output_len=128, concurrency=4, tp="auto", estimator="physics")
    assert (past.tp, past.tp_auto, past.fits_tp) == (1, True, None) and "exceeds-memory" in past.flags
    # a rate: the fewest whose shards fit and serve it (one H100 serves 3.3 requests a second of these, two 5.8);
    # past what eight serve, refused as at eight
    rate = dict(input_len=512, output_len=512, estimator="physics")
    with pytest.raises(BeyondCapacityError):
        serve("llama-3-70b", "h100-sxm", request_rate=4.0, tp=1, **rate)
    auto = serve("llama-3-70b", "h100-sxm", request_rate=4.0, tp="auto", **rate)
    assert (auto.tp, auto.tp_auto) == (2, True)
    assert auto.energy_per_output_token_j == serve("llama-3-70b", "h100-sxm", request_rate=4.0, tp=2,
                                                   **rate).energy_per_output_token_j
    with pytest.raises(BeyondCapacityError, match=r"beyond what 256 in flight serve \(11\.\d+/s\)"):
        serve("llama-3-70b", "h100-sxm", request_rate=20.0, tp="auto", **rate)
    for run in (lambda: joulecast.generate("gpt2", "a10", tp="most", **kw),
                lambda: serve("gpt2", "a10", input_len=8, output_len=8, concurrency=1, tp="most")):
        with pytest.raises(joulecast.InputError, match="^tp: must be a whole number of GPUs from 1 to 1,024 or 'auto'"):
            run()
    argv = ["estimate", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--input-len", "512", "--output-len", "16",
            "--tp", "auto", "--estimator", "physics"]
    assert main([*argv, "--phase", "serve", "--concurrency", "16"]) == 0
    assert "TP 2 (auto: the fewest GPUs whose shards fit)" in capsys.readouterr().out.splitlines()[0]
    assert main([*argv, "--phase", "generate", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["tp"], shown["tp_auto"]) == (2, True)
    with pytest.raises(SystemExit) as exc:
        main([*argv[:-4], "--tp", "most", "--phase", "generate"])
    assert exc.value.code == 2 and "argument --tp: 'most' is not auto nor a whole number" in capsys.readouterr().err


def test_a_list_of_requests_past_the_step_bound_is_refused_before_any_estimate():
    """Steps are each batch's longest answer, summed: 5,000 answers of 101 tokens one at a time are 505,000, over
    MAX_REQUEST_STEPS, refused at once naming the requests and the serving load instead."""
    from joulecast.estimator.jobs import MAX_REQUEST_STEPS

    over = [[16, 101]] * 5_000
    assert 5_000 * 101 > MAX_REQUEST_STEPS
    with pytest.raises(joulecast.InputError, match="^requests: 5,000 requests in batches of 1 take 505,000 steps; "
                                                   "at most 500,000 .*serve them as a load"):
        joulecast.generate_requests("gpt2", "a10", over, estimator="physics")
