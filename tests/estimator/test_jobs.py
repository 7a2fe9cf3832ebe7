"""A generation is its prefill and its decode steps, estimated together, with an interval for errors shared by
its steps."""

import json

import pytest

import joulecast
from joulecast.cli import main


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
    assert job.memory_gb == pytest.approx(steps[-1].memory_gb, rel=1e-12)


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
    (["--input-len", "8"], "--input-len: applies to --phase generate only"),
    (["--phase", "generate", "--input-len", "0", "--output-len", "4"], "input_len: must be an integer from 1"),
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
