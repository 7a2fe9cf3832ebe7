import contextlib
import json
import re

import pytest

from joulecast.cli import main


def test_estimate_table(capsys):
    assert main(["estimate", "--model", "gpt2", "--gpu", "a100-pcie-40gb", "--batch", "8", "--seq", "512"]) == 0
    out = capsys.readouterr().out
    assert "energy" in out and " J" in out and " ms" in out and " W (average)" in out and "gemm" in out


def test_figures_keep_four_significant_digits():
    from joulecast.render import _g4

    assert [_g4(x) for x in (3.0, 12.034, 249.44, 1234.4)] == ["3.000", "12.03", "249.4", "1,234"]


def test_large_figures_read_without_exponents():
    """Whole jobs run to 1e4-1e9 J and tokens: a table shows them as people write them, never 7.821e+04."""
    from joulecast.render import figure

    assert [figure(x) for x in (78_213.4, 999.96, 2_264_391.0, 1e6, 0.019214, 300.0)] == [
        "78,210", "1,000", "2,264,000", "1,000,000", "0.01921", "300"]
    assert figure(float("nan")) == "nan" and figure(-12_345.0) == "-12,340"
    # a serving step's grams of CO2e: as written, not 8.946e-05, down to a millionth
    assert [figure(x) for x in (8.946e-05, 5e-05, 9.99999e-05, 1.2e-06, 1.2e-07)] == [
        "0.00008946", "0.00005", "0.0001", "0.0000012", "1.2e-07"]


def test_job_tables_show_no_exponents(capsys):
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
                 "--output-len", "256", "--concurrency", "64", "--output-tokens", "1e6"]) == 0
    out = capsys.readouterr().out
    assert "1,000,000 output tokens" in out and "e+0" not in out
    # a steady load's day at its average power
    watts, day = re.search(r"power +([\d,.]+) W \(average, .*; ([\d,.]+) kWh a day at this load\)", out).groups()
    assert float(day.replace(",", "")) == pytest.approx(float(watts.replace(",", "")) * 24 / 1e3, rel=2e-3)


def test_estimate_json(capsys):
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "h200", "--phase", "decode", "--batch", "4",
                 "--seq", "2048", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["gpu"] == "h200" and payload["energy_j"] > 0 and payload["by_kernel_class"]


def test_estimate_from_kernel_list(capsys, energaizer):
    path = energaizer / "workloads" / "all" / "gpt2model_gpt2_pbf16_b8_s512_modeprefill.json"
    assert main(["estimate", "--kernels", str(path), "--gpu", "a100", "--sm-clock", "900", "--json"]) == 0
    # recorded kernels + layout copies + the causal where after each division of the scores, unrecorded
    assert json.loads(capsys.readouterr().out)["launches"] == 242 + 12 * 4 + 12


def test_estimate_takes_the_hosts_dispatch_for_every_phase(capsys, energaizer):
    """--host-dispatch-us: a host-bound decode step on a faster host takes less time, for a catalog model, a kernel
    list, a generation, a serving load and a training run alike; outside 0-1000 us, one line naming the flag, exit
    2."""
    base = ["estimate", "--model", "llama-3-8b", "--gpu", "h200", "--phase", "decode", "--seq", "2048",
            "--estimator", "physics", "--json"]
    times = []
    for extra in ([], ["--host-dispatch-us", "18"]):
        assert main([*base, *extra]) == 0
        times.append(json.loads(capsys.readouterr().out)["time_s"])
    assert times[1] < 0.8 * times[0]
    path = energaizer / "workloads" / "all" / "gpt2model_gpt2_pbf16_b8_s512_modeprefill.json"
    kernels = ["estimate", "--kernels", str(path), "--gpu", "a100", "--estimator", "physics", "--json"]
    for extra in ([], ["--host-dispatch-us", "5"]):
        assert main([*kernels, *extra]) == 0
        times.append(json.loads(capsys.readouterr().out)["time_s"])
    assert times[3] < times[2]
    generation = ["estimate", "--model", "llama-3-8b", "--gpu", "h200", "--phase", "generate", "--input-len", "64",
                  "--output-len", "4", "--estimator", "physics", "--json"]
    for extra in ([], ["--host-dispatch-us", "18"]):
        assert main([*generation, *extra]) == 0
        times.append(json.loads(capsys.readouterr().out)["tpot_s"])
    assert times[5] < 0.8 * times[4]
    jobs = ((["--phase", "serve", "--input-len", "64", "--output-len", "32", "--concurrency", "4", "--launch-mode",
              "eager"], "step_time_s"), (["--phase", "train-run", "--seq", "256", "--global-batch", "2", "--steps",
                                         "10"], "time_s"))
    for job, figure in jobs:  # a serving step launched eagerly, a training run: each faster on a faster host
        per_job = []
        for extra in ([], ["--host-dispatch-us", "5"]):
            assert main(["estimate", "--model", "gpt2", "--gpu", "h200", "--estimator", "physics", "--json", *job,
                         *extra]) == 0
            per_job.append(json.loads(capsys.readouterr().out)[figure])
        assert per_job[1] < per_job[0]
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--host-dispatch-us", "-1"]) == 2
    assert "--host-dispatch-us: must be from 0 to 1000 us" in capsys.readouterr().err


def test_a_kernel_mix_the_default_model_never_saw_is_flagged(tmp_path, capsys):
    """Embedding lookups alone: the shipped model was trained on workloads where they take under 1 % of the time."""
    path = tmp_path / "lookups.json"
    path.write_text(json.dumps([[{"tokens": 8192, "dim": 4096, "prec": "bf16"}, ["embedding", "bf16"]]] * 8))
    assert main(["estimate", "--kernels", str(path), "--gpu", "a100"]) == 0
    out = capsys.readouterr().out
    assert "flag       out-of-domain: outside the training data: wider interval" in out and "  share_embedding = 1 (" in out
    assert "; a kernel list names no weights: add its model's; the GPU has 40 GiB" in out  # its memory is not all
    assert main(["estimate", "--kernels", str(path), "--gpu", "a100", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["flags"] == ["out-of-domain"] and payload["in_domain"] is False
    assert any(reason.startswith("share_embedding = 1 (trained 0 to ") for reason in payload["outside_domain"])


@pytest.mark.parametrize("argv, message", [
    (["--model", "gpt2", "--gpu", "a100", "--batch", "-3"], "--batch: must be an integer from 1 to 16,777,216, got -3"),
    (["--model", "gpt2", "--gpu", "a100", "--batch", "10000000000000000000"], "--batch: must be an integer from 1 to"),
    (["--model", "gpt2", "--gpu", "a100-pcie-40gb", "--dtype", "fp8"], "--dtype: fp8 needs fp8 tensor cores, which "
     "NVIDIA A100-PCIe-40GB lacks; it runs fp64, fp32, tf32, bf16, fp16, int8"),
    (["--model", "gpt2", "--config", "c.json", "--gpu", "a100"], "--config: give one of --model NAME, --config PATH"),
    (["--kernels", "k.json", "--batch", "4", "--gpu", "a100"], "--batch: has no effect with --kernels"),
    (["--kernels", "/", "--gpu", "a100"], "--kernels: '/' is a folder; give a file"),
    (["--kernels", "/proc/self/mem", "--gpu", "a100"], "--kernels: cannot read '/proc/self/mem'"),
    (["--config", "/etc/hostname/x.json", "--gpu", "a100"], "--config: '/etc/hostname/x.json' does not exist"),
    (["--model", "gpt2", "--gpu", "a100", "--dtype", "fp4"], "--dtype: unknown 'fp4'"),
    (["--model", "gpt2", "--gpu", "a100", "--attention", "flsh"], "--attention: unknown 'flsh'; did you mean 'flash'? "
     "allowed: flash, eager, masked"),
    (["--model", "gpt2", "--gpu", "a1000"], "--gpu: unknown 'a1000'; did you mean"),
    (["--model", "bart", "--gpu", "a100"], "--model: unknown 'bart'"),
    (["--gpu", "a100"], "--model: give one of --model NAME, --config PATH or --kernels FILE.json"),
    (["--kernels", "/nonexistent.json", "--gpu", "a100"], "--kernels: '/nonexistent.json' does not exist; give a file"),
    (["--model", "gpt2", "--gpu", "a100", "--sm-clock", "9000"], "--sm-clock: must be between"),
    (["--model", "resnet-101", "--gpu", "l4", "--phase", "generate", "--input-len", "8", "--output-len", "2"],
     "--phase: generate needs a decoder (tokens generated one at a time); a resnet model runs inference, one training "
     "step and a training run (--phase inference, training, train-run)"),
    (["--model", "bert-large", "--gpu", "l4", "--phase", "serve", "--concurrency", "4", "--input-len", "8",
      "--output-len", "2"], "--phase: serve needs a decoder (tokens generated one at a time); a bert model runs "
     "prefill"),
    # a vision model's training run is over images: a sequence length or a text model's option is refused as such
    (["--model", "vit-large", "--gpu", "l4", "--phase", "train-run", "--steps", "3", "--global-batch", "8", "--seq",
      "197"], "--seq: a vit-large run is over images (vit-large takes no sequence length); give none"),
    (["--model", "resnet-101", "--gpu", "l4", "--phase", "train-run", "--steps", "3", "--global-batch", "8",
      "--lora-rank", "8"], "--lora-rank: LoRA's adapters on a transformer's linear layers: has no effect on "
     "resnet-101, a vision model; leave it out"),
    (["--model", "vit-large", "--gpu", "l4", "--phase", "generate"], "--phase: generate needs a decoder"),
    (["--model", "resnet-101", "--gpu", "l4", "--seq", "512"], "--seq: has no effect with resnet (a pass is --batch "
     "images of the size its config sets); leave it out"),
    (["--model", "mobilevit-small", "--gpu", "l4", "--attention", "flash"], "--attention: has no effect with "
     "mobilevit (transformers' MobileViT runs its attention unfused whatever the backend); leave it out"),
    (["--model", "llama-3-8b", "--gpu", "l4", "--phase", "train-run", "--seq", "64", "--global-batch", "8",
      "--steps", "2", "--lora-rank", "0", "--lora-targets", "attention"], "--lora-targets: has no effect without "
     "--lora-rank (the layers LoRA adapters train; full fine-tuning trains every weight); leave it out or give both"),
    (["--model", "llama-3-8b", "--gpu", "l4", "--phase", "generate", "--input-len", "8", "--output-len", "2",
      "--h2d-gbps", "5"], "--h2d-gbps: has no effect without --offload-gb"),
    # fusions none of which changes the model's kernels: GPT-2 has no rotary embedding, Llama's residual_norm fuses
    # into the norm fusion only
    (["--model", "gpt2", "--gpu", "l4", "--fusions", "rope"], "--fusions: 'rope' changes none of gpt2's kernels in "
     "prefill; leave it out"),
    (["--model", "llama-3-8b", "--gpu", "l4", "--fusions", "residual_norm"], "--fusions: 'residual_norm' changes none "
     "of llama-3-8b's kernels in prefill (residual_norm applies only with norm); leave it out"),
    # ... and one of a list that changes nothing beside the others, named: not the whole list on the estimate's label
    (["--model", "gpt2", "--gpu", "l4", "--fusions", "rope,activation"], "--fusions: rope changes none of gpt2's "
     "kernels in prefill beside activation; leave it out"),
    (["--model", "gpt2", "--gpu", "l4", "--fusions", "gemm_activation,activation,rope"], "--fusions: activation, rope "
     "change none of gpt2's kernels in prefill beside gemm_activation; leave them out"),
    (["--model", "llama-3-8b", "--gpu", "l4", "--fusions", "rope,residual_norm"], "--fusions: residual_norm changes "
     "none of llama-3-8b's kernels in prefill beside rope (residual_norm applies only with norm); leave it out"),
    (["--model", "gpt2", "--gpu", "l4", "--phase", "train-run", "--seq", "64", "--global-batch", "8", "--steps", "2",
      "--fusions", "rope"], "--fusions: 'rope' changes none of gpt2's kernels in training; leave it out"),
    (["--model", "resnet-101", "--gpu", "l4", "--fusions", "norm"], "--fusions: 'norm' changes none of resnet-101's "
     "kernels in inference; leave it out"),
    # --phase names the whole jobs the model runs too (the API's phases are a pass's); the flags, not the API's fields
    (["--model", "llama-3-8b", "--gpu", "l4", "--phase", "serving"], "--phase: 'serving' is not available for a llama "
     "model; allowed: prefill, decode, training; or a whole job: generate, serve, train-run"),
    (["--model", "bert-large", "--gpu", "l4", "--phase", "decode"], "--phase: 'decode' is not available for a bert "
     "model; allowed: prefill, training; or a whole job: train-run"),
    (["--model", "vit-large", "--gpu", "l4", "--phase", "decode"], "--phase: 'decode' is not available for a vit "
     "model; allowed: inference, training; or a whole job: train-run\n"),
    (["--model", "gpt2", "--gpu", "l4", "--phase", "serve", "--input-len", "8", "--output-len", "2"],
     "--concurrency: --phase serve needs --concurrency or --request-rate, one of them; got neither"),
    (["--model", "gpt2", "--gpu", "l4", "--phase", "serve", "--input-len", "8", "--output-len", "2", "--concurrency",
      "2", "--request-rate", "1"], "--concurrency: --phase serve needs --concurrency or --request-rate, one of them; "
     "got both"),
    (["--model", "gpt2", "--gpu", "l4", "--phase", "train-run", "--seq", "8", "--global-batch", "2"],
     "--steps: --phase train-run needs --steps or --tokens, one of them; got neither"),
    (["--model", "gpt2", "--gpu", "rtx4090"], "--gpu: unknown 'rtx4090'; known: a10, a100-pcie-40gb, "),  # no aliases
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("joulecast: error: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["--model", "gpt2", "--gpu", "a10", "--batch", "2.5"], "argument --batch: '2.5' is not a whole number"),
    (["--model", "gpt2", "--gpu", "a10", "--seq", "inf"], "argument --seq: 'inf' is not a whole number"),
    (["--model", "gpt2", "--gpu", "a10", "--seq"], "argument --seq: expected one argument"),
    (["--model", "gpt2", "--gpu", "a10", "--sm-clock", "fast"], "argument --sm-clock: 'fast' is not a number"),
    (["--model", "gpt2"], "the following arguments are required: --gpu"),
])
def test_a_bad_command_line_is_one_line_too(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main(["estimate", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert err.startswith("joulecast estimate: error: ") and message in err and "--help" in err


def test_a_flag_the_command_does_not_take_is_named_by_that_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["import", "--source", "zeus", "x"])
    err = capsys.readouterr().err
    # an argument given as a flag, as audit takes it: where it goes, not only that it was not taken
    assert exc.value.code == 2 and err == ("joulecast import: error: unrecognized arguments: --source (source is given "
                                           "without a flag: usage: joulecast import [-h] [--out OUT] [--json] source "
                                           "path) (see 'joulecast import --help')\n")


def test_retrain_names_an_unknown_gpu_before_reading_any_measurement(tmp_path, capsys):
    pytest.importorskip("xgboost", reason="needs the [train] extra")
    assert main(["retrain", "--gpu", "h900", "--store", str(tmp_path)]) == 2  # an empty store: not reached
    err = capsys.readouterr().err
    assert err.startswith("joulecast: error: --gpu: unknown 'h900'; did you mean 'h200'") and err.count("\n") == 1


def test_retrain_checks_its_tolerance_and_champion_before_training(tmp_path, capsys):
    pytest.importorskip("xgboost", reason="needs the [train] extra")
    base = ["retrain", "--gpu", "h200", "--store", "data/measurements", "--report", str(tmp_path / "report")]
    for extra, line in ((["--tolerance", "nan"], "--tolerance: MAPE points a partition may lose (below 0: the "
                                                 "points each must gain), a finite number; got nan"),
                        (["--tolerance=-inf"], "--tolerance: MAPE points a partition may lose (below 0: the "
                                               "points each must gain), a finite number; got -inf"),
                        (["--champion", str(tmp_path)], f"--champion: '{tmp_path}' is not an estimator folder")):
        # before: nan and -inf trained and compared; the champion failed after the training
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"joulecast: error: {line}") and err.count("\n") == 1
    assert not (tmp_path / "report").exists()


def test_train_prints_what_it_trained_on_its_cross_validation_and_what_it_held_out(energaizer, tmp_path, capsys):
    """`joulecast train` without --json: the rows and what was dropped, the grouped cross-validation per estimator,
    the rows held out (a GPU and a model family excluded) scored by the model trained without them, and where the
    model went; that folder then estimates as the hybrid."""
    pytest.importorskip("xgboost", reason="needs the [train] extra")
    out = tmp_path / "model"
    assert main(["train", "--import", f"energaizer={energaizer}", "--exclude-gpu", "a100-pcie-40gb",
                 "--exclude-model", "gpt2", "--quick", "--no-mlflow", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "trained on 434 rows (dropped: failed run: 13)"
    assert lines[1].startswith("grouped cross-validation by model family (MAPE %; coverage:")
    cv = {line.split()[0]: line.split() for line in lines[3:6]}
    assert set(cv) == {"physics", "plain_xgboost", "hybrid"} and cv["hybrid"][1:3] == ["a10", "80"]
    held = lines.index("held out (excluded from training):")
    rows = {tuple(line.split()[:2]): int(line.split()[2]) for line in lines[held + 2:-1]}
    assert rows[("gpu", "a100-pcie-40gb")] == 339 and rows[("model_family", "gpt2")] == 115
    assert rows[("gpu", "a10")] == 15 and rows[("all", "all")] == 354
    assert lines[-1] == f"saved to {out} (use --estimator {out})"
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--estimator", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "hybrid"


def test_train_names_the_import_flag_of_a_bad_source_or_folder(capsys):
    for spec, line in (("zeuss=x", "unknown 'zeuss'; did you mean 'zeus'?"),
                       ("zeus=nowhere", "nowhere holds none of summary_power_*.csv")):
        assert main(["train", "--import", spec, "--no-mlflow"]) == 2
        assert capsys.readouterr().err.startswith(f"joulecast: error: --import: {line}")  # before: SOURCE:, PATH:


def test_a_config_is_read_whatever_its_file_is_named_and_from_its_model_folder(tmp_path, capsys):
    """--config reads a config file whatever its name, or a Hugging Face snapshot's folder by its config.json, for a
    pass and for a job (before: a name not ending .json was taken for a catalog name, 'model: unknown', and a job
    refused --config as 'needs --model NAME (a catalog model)', which a config path given as --model passed)."""
    from joulecast.data.models import model_entry

    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(model_entry("gpt2")["config"]))
    (tmp_path / "gpt2.cfg").write_text((folder / "config.json").read_text())
    pass_argv = ["--gpu", "a10", "--batch", "2", "--seq", "64", "--json"]
    outs = []
    for source in (["--model", "gpt2"], ["--config", str(folder)], ["--config", str(tmp_path / "gpt2.cfg")]):
        assert main(["estimate", *source, *pass_argv]) == 0
        outs.append(json.loads(capsys.readouterr().out)["energy_j"])
    assert outs[0] == outs[1] == outs[2]
    job_argv = ["--gpu", "a10", "--phase", "generate", "--batch", "2", "--input-len", "8", "--output-len", "4",
                "--json"]
    jobs = []
    for source in (["--model", "gpt2"], ["--config", str(folder)]):
        assert main(["estimate", *source, *job_argv]) == 0
        jobs.append(json.loads(capsys.readouterr().out))
    assert jobs[0]["energy_j"] == jobs[1]["energy_j"] > 0
    assert main(["estimate", "--kernels", str(tmp_path / "k.json"), *job_argv]) == 2
    assert capsys.readouterr().err == ("joulecast: error: --kernels: --phase generate needs --model NAME or --config "
                                       "PATH (a kernel list is one pass's work)\n")
    assert main(["estimate", "--config", str(tmp_path), "--gpu", "a10"]) == 2  # a folder with no config.json
    assert capsys.readouterr().err == f"joulecast: error: --config: '{tmp_path}' is a folder; give a file\n"
    # the API: a model argument that is no catalog name reads a config file or a folder holding one, else is unknown
    import joulecast

    assert joulecast.workload(str(folder), seq=64).kernels.equals(joulecast.workload("gpt2", seq=64).kernels)
    with pytest.raises(joulecast.InputError, match=r"^model: unknown '.*'; known: bert-base"):
        joulecast.workload(str(tmp_path))


def test_a_phase_is_read_in_any_case(capsys):
    """--phase Serve is serve, as --gpu H100 is h100 (before: 'Serve' is not available, allowed: prefill, ...)."""
    argv = ["--model", "gpt2", "--gpu", "l4", "--input-len", "8", "--output-len", "2", "--concurrency", "2", "--json"]
    outs = []
    for phase in ("serve", "Serve"):
        assert main(["estimate", *argv, "--phase", phase]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1] and outs[0]["tokens_per_s"] > 0
    swept = []
    for phase in ("decode", "DECODE"):
        assert main(["sweep", "--model", "gpt2", "--gpu", "l4", "--phase", phase, "--batch", "1", "--seq", "64",
                     "--json"]) == 0
        swept.append(json.loads(capsys.readouterr().out)["points"])
    assert swept[0] == swept[1] and swept[0][0]["phase"] == "decode"


def test_counts_take_exponent_form(capsys):
    runs = []
    for tokens in ("1e9", "1000000000"):
        assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "train-run", "--tokens", tokens,
                     "--global-batch", "16", "--seq", "5.12e2", "--estimator", "physics", "--json"]) == 0
        runs.append(json.loads(capsys.readouterr().out))
    assert runs[0] == runs[1] and runs[0]["steps"] == -(-10**9 // (16 * 512))


def test_malformed_kernel_json(tmp_path, capsys):
    path = tmp_path / "k.json"
    path.write_text('[[{"dimM": 4}, ["gemm"]]]')
    assert main(["estimate", "--kernels", str(path), "--gpu", "a100"]) == 2
    assert "k.json[0].precM: unknown dtype None" in capsys.readouterr().err


def test_a_kernel_list_that_is_no_text_or_too_large_is_one_line(tmp_path, capsys):
    """A binary file (here a gzip header) and one over MAX_INPUT_BYTES (sparse: nothing written) are refused by
    name before any parsing, the large one before it is read."""
    from joulecast.data.files import MAX_INPUT_BYTES

    binary, large = tmp_path / "k.json", tmp_path / "big.json"
    binary.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe\xfd")
    with open(large, "wb") as f:
        f.truncate(MAX_INPUT_BYTES + 1)
    for path, said in ((binary, "is not a text file"), (large, f"is over {MAX_INPUT_BYTES // 2**20} MB")):
        assert main(["estimate", "--kernels", str(path), "--gpu", "a10"]) == 2
        assert capsys.readouterr().err == f"joulecast: error: --kernels: '{path}' {said}\n"


def test_a_kernel_lists_whole_floats_are_its_counts(tmp_path, capsys):
    """JSON's 128.0 or 1.28e2 is the count 128 (as the service's bodies and --requests read them); a fraction is
    still refused by name."""
    gemm = '[[{{"batch": 1, "dimM": {m}, "dimN": 2304, "dimK": 768, "precM": "bf16"}}, ["gemm", "tc", "bf16_bf16"]]]'
    energies = []
    for m in ("128", "128.0", "1.28e2"):
        (tmp_path / "k.json").write_text(gemm.format(m=m))
        assert main(["estimate", "--kernels", str(tmp_path / "k.json"), "--gpu", "a10", "--estimator", "physics",
                     "--json"]) == 0
        energies.append(json.loads(capsys.readouterr().out)["energy_j"])
    assert energies[0] == energies[1] == energies[2]
    (tmp_path / "k.json").write_text(gemm.format(m="128.5"))
    assert main(["estimate", "--kernels", str(tmp_path / "k.json"), "--gpu", "a10"]) == 2
    assert "k.json[0].dimM: must be a whole number from 1 to 2^40, got a number (128.5)" in capsys.readouterr().err


def test_a_list_given_to_a_single_estimate_points_to_sweep(capsys):
    """A comma-separated --gpu, --dtype, --batch or --power-limit is one line naming the flag and the command that
    takes lists, before any work; a value that is simply bad keeps its plain line."""
    base = ["estimate", "--model", "gpt2", "--gpu", "a10"]
    for argv, flag in ((["estimate", "--model", "gpt2", "--gpu", "h100-sxm,a100"], "--gpu: one GPU an estimate"),
                       ([*base, "--dtype", "bf16,fp16"], "--dtype: one dtype an estimate"),
                       ([*base, "--batch", "1,8"], "argument --batch: '1,8' is not a whole number"),
                       ([*base, "--power-limit", "100,150"], "argument --power-limit: '100,150' is not a number")):
        with pytest.raises(SystemExit) if flag.startswith("argument") else contextlib.nullcontext():
            assert main(argv) == 2
        err = capsys.readouterr().err
        assert flag in err and "for a list, each a point, use joulecast sweep with the same flags" in err
    with pytest.raises(SystemExit):
        main([*base, "--power-limit", "abc"])
    assert "'abc' is not a number (see" in capsys.readouterr().err


def test_a_list_given_to_a_fixed_flag_of_sweep_says_it_takes_one_value(capsys):
    """Inside sweep, a list for a flag it holds fixed (a train-run's --global-batch) is one line saying so, not a
    pointer back to sweep itself."""
    with pytest.raises(SystemExit):
        main(["sweep", "--model", "resnet-50", "--phase", "train-run", "--gpu", "a100", "--global-batch", "64,256",
              "--steps", "10"])
    err = capsys.readouterr().err
    assert "argument --global-batch: '64,256' is not a whole number" in err
    assert "a sweep takes one value of this flag" in err and "use joulecast sweep" not in err


def test_listings(capsys):
    assert main(["gpus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    h100 = next(line for line in lines if line.lstrip().startswith("h100-sxm "))
    assert " 200-700 " in h100  # the power limits it takes
    v100 = next(line for line in lines if line.lstrip().startswith("v100-sxm2 "))
    assert " none " in v100 and "NaN" not in v100  # no bf16 hardware, said so
    assert "the name nvidia-smi gives the board ('NVIDIA H100 80GB HBM3')" in lines[-1]  # the footer says so
    assert main(["models", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert set(listed) >= {"gpt2", "llama-3-70b", "resnet-101"}
    # each model's weights, within 0.2 % of its config's count with biases and norms (GPT-2's tied head counted once)
    for name, hf in (("gpt2", 124_439_808), ("llama-3-8b", 8_030_261_248), ("bert-base", 109_482_240)):
        assert listed[name]["params"] == pytest.approx(hf, rel=2e-3)
    # a script can pass hf_id to Hugging Face as it is: an owner/name id, nothing after it; aliases a list
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+", m["hf_id"]) and isinstance(m["aliases"], list) for m in listed.values())
    assert main(["models"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert " 124.3 M " in rows["gpt2"] and " 70.6 B " in rows["llama-3-70b"]
    # a mixture of experts holds every expert and runs two of eight a token (Mixtral's 46.7 B and 12.9 B); a dense
    # model runs all it holds
    assert " 46.7 B " in rows["mixtral-8x7b"] and " 12.9 B " in rows["mixtral-8x7b"]
    assert listed["llama-3-8b"]["active_params"] == listed["llama-3-8b"]["params"]
    # the context each text model's positions reach (Llama 3's 8,192, 3.1's 131,072); none for a vision model
    assert (listed["llama-3-8b"]["context"], listed["llama-3.1-8b"]["context"], listed["resnet-101"]["context"]) == (
        8192, 131072, None)
    assert " 131,072 " in rows["llama-3.1-8b"] and " 1,024 " in rows["gpt2"]


def test_gpu_add_prints_spec_only_examples_and_remove(user_home, capsys):
    from joulecast.data.gpus import GPU_DIR

    assert main(["gpu", "add", str(GPU_DIR.parent / "examples" / "a100-sxm4-80gb-500w.yaml"), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["added"] == "a100-sxm4-80gb-500w" and len(payload["examples"]) == 3
    assert all(e["flags"] == "spec-only" and e["energy_lo_j"] < e["energy_j"] < e["energy_hi_j"] for e in payload["examples"])
    assert main(["gpu", "remove", "a100-sxm4-80gb-500w"]) == 0
    assert main(["gpu", "remove", "a100-sxm4-80gb-500w"]) == 2
    assert "not a GPU you added" in capsys.readouterr().err
    # its table: every figure to four significant digits (a 9.7 ms pass is not rounded to 0.0097 s)
    assert main(["gpu", "add", str(GPU_DIR.parent / "examples" / "a100-sxm4-80gb-500w.yaml")]) == 0
    gpt2 = next(line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("gpt2 "))
    time_s = float(gpt2.split()[7])
    assert time_s == pytest.approx(payload["examples"][0]["time_s"], rel=5e-4) and len(gpt2.split()[7]) >= 6


def test_collect_measures_a_plan_as_another_gpu_under_that_gpu_and_a_collection_of_its_own(tmp_path, capsys):
    """`collect PLAN --gpu NAME`: the plan's items sized, and later stored, as that GPU (an alias names it too), the
    collection PLAN-on-GPU unless named; a hypothetical GPU or an unknown one is one line, exit 2."""
    assert main(["collect", "h200-prefill", "--gpu", "h100", "--dry-run", "--json", "--out", str(tmp_path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["gpu"], shown["collection"]) == ("h100-sxm", "h200-prefill-on-h100-sxm")
    assert main(["collect", "h200-prefill", "--gpu", "h200", "--dry-run", "--json", "--out", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["collection"] == "h200-prefill"  # its own GPU: the plan's name
    for gpu, says in (("h100:sm_count*2", "a hypothetical GPU is not hardware"), ("h1000", "unknown 'h1000'")):
        assert main(["collect", "h200-prefill", "--gpu", gpu, "--dry-run", "--out", str(tmp_path)]) == 2
        assert capsys.readouterr().err.strip().startswith(f"joulecast: error: --gpu: {says}")


def test_a_command_whose_extra_is_missing_says_which_to_install(tmp_path, capsys, monkeypatch):
    """`joulecast collect` without torch (the core install) is one line naming the extra, exit 2, no traceback."""
    from joulecast import cli

    monkeypatch.setitem(cli.EXTRAS, "collect", ("joulecast_no_such_module",))
    assert main(["collect", "h200-first", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["joulecast: error: collect needs joulecast_no_such_module: pip install 'joulecast[collect]'"]
    monkeypatch.setitem(cli.EXTRAS, "train", ("joulecast_no_such_module",))
    assert main(["train", "--out", str(tmp_path / "m")]) == 2
    assert "pip install 'joulecast[train]'" in capsys.readouterr().err


def test_output_paths_are_checked_before_any_work(tmp_path, capsys):
    """An audit report at an existing file, or a train --out under a file, fails at once, one line, exit 2."""
    taken = tmp_path / "taken"
    taken.write_text("")
    assert main(["audit", "--store", "data/measurements", "--report", str(taken)]) == 2
    assert f"--report: '{taken}' exists and is not a folder" in capsys.readouterr().err
    assert main(["train", "--out", str(taken / "model")]) == 2
    assert "--out: " in capsys.readouterr().err


def test_files_are_written_atomically_with_ordinary_modes(tmp_path):
    import os
    import stat

    from joulecast.data.files import write_atomic, write_folder_atomic

    path = tmp_path / "f.txt"
    write_atomic(path, lambda tmp: tmp.write_text("x"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()
    folder = write_folder_atomic(tmp_path / "model", lambda tmp: (tmp / "a").write_text("old"), "a")

    def broken(tmp):
        (tmp / "a").write_text("new")
        raise KeyboardInterrupt  # a SIGTERM or Ctrl-C mid-save

    with pytest.raises(KeyboardInterrupt):
        write_folder_atomic(folder, broken, "a")
    assert (folder / "a").read_text() == "old" and sorted(os.listdir(tmp_path)) == ["f.txt", "model"]


def test_a_points_file_is_written_through_a_link_and_never_over_a_device_or_pipe(tmp_path, capsys):
    """Before, `sweep --out /dev/full` put its Parquet file where the device was (the atomic write's rename replaced
    the node), and an --out that is a link replaced the link with a file."""
    import os

    real, link, pipe = tmp_path / "real.csv", tmp_path / "link.csv", tmp_path / "pipe.csv"
    real.write_text("old")
    link.symlink_to(real)
    os.mkfifo(pipe)
    argv = ["sweep", "--model", "gpt2", "--gpu", "a10", "--batch", "1,2", "--seq", "64", "--json", "--out"]
    assert main([*argv, str(link)]) == 0 and len(json.loads(capsys.readouterr().out)["points"]) == 2
    written = real.read_text().splitlines()
    assert link.is_symlink() and written[0].startswith("model,phase,gpu") and len(written) == 3
    assert main([*argv, str(pipe)]) == 2
    assert capsys.readouterr().err == (f"joulecast: error: --out: '{pipe}' is not a regular file; give a file name (a "
                                       "file there is replaced whole)\n")
    assert not os.path.isfile(pipe) and sorted(os.listdir(tmp_path)) == ["link.csv", "pipe.csv", "real.csv"]


def test_a_saved_model_replaces_only_a_model_folder(tmp_path, capsys):
    """train --out at a file or at a folder of the user's is refused at once, one line, exit 2, the file and the folder
    as they were (before, the path was renamed aside and replaced: `--out /etc/passwd` left a model folder there); a
    new folder, an empty one or a saved model's is written."""
    from joulecast.data.errors import InputError
    from joulecast.data.files import write_folder_atomic
    from joulecast.estimator.residual import ESTIMATOR_FILE

    taken, mine = tmp_path / "notes.txt", tmp_path / "mine"
    taken.write_text("keep")
    mine.mkdir()
    (mine / "thesis.tex").write_text("keep too")
    for path, what in ((taken, "is a file"), (mine, "is a folder without estimator.json")):
        assert main(["train", "--out", str(path), "--no-mlflow"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"joulecast: error: --out: '{path}' {what}")
        with pytest.raises(InputError, match=f"out: '{path}' {what}"):  # the API guards it too
            write_folder_atomic(path, lambda tmp: (tmp / ESTIMATOR_FILE).write_text("{}"), ESTIMATOR_FILE)
    assert taken.read_text() == "keep" and (mine / "thesis.tex").read_text() == "keep too"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "notes.txt"]  # nothing left beside them
    saved = write_folder_atomic(tmp_path / "empty", lambda tmp: (tmp / ESTIMATOR_FILE).write_text("1"),
                                ESTIMATOR_FILE)
    write_folder_atomic(saved, lambda tmp: (tmp / ESTIMATOR_FILE).write_text("2"), ESTIMATOR_FILE)
    assert (saved / ESTIMATOR_FILE).read_text() == "2"
    link = tmp_path / "link"
    link.symlink_to(saved)  # a link to a saved model: the folder it leads to is replaced, the link kept
    write_folder_atomic(link, lambda tmp: (tmp / ESTIMATOR_FILE).write_text("3"), ESTIMATOR_FILE)
    assert link.is_symlink() and (saved / ESTIMATOR_FILE).read_text() == "3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "link", "mine", "notes.txt"]


def test_a_refused_command_leaves_no_empty_report_folder(tmp_path, monkeypatch, capsys):
    """The report folder is checked, not made, before the work: a command refused later (here an unknown GPU) leaves
    nothing behind (before, an empty retrain-report/ in the working folder)."""
    monkeypatch.chdir(tmp_path)
    assert main(["retrain", "--gpu", "h900"]) == 2
    assert "gpu: unknown 'h900'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_parquet_out_at_a_folder_is_one_line_before_the_sweep(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    assert main(["sweep", "--model", "gpt2", "--gpu", "a10", "--batch", "1", "--seq", "128", "--out",
                 str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"joulecast: error: --out: '{tmp_path}' is a folder; give a file name"


def test_a_sweep_writes_its_points_as_csv_or_parquet_by_the_files_name(tmp_path, capsys):
    """--out points.csv is CSV a spreadsheet opens (no pyarrow needed), .parquet (or no suffix) Parquet, the same
    points either way; another suffix is one line before the sweep (before, points.csv held Parquet)."""
    import pandas as pd

    argv = ["sweep", "--model", "gpt2", "--gpu", "a10", "--batch", "1,8", "--seq", "128", "--estimator", "physics",
            "--out"]
    assert main([*argv, str(tmp_path / "points.csv")]) == 0
    assert capsys.readouterr().out.strip().endswith(f"wrote {tmp_path / 'points.csv'}")
    csv = pd.read_csv(tmp_path / "points.csv")
    assert len(csv) == 2 and list(csv["batch"]) == [1, 8] and csv["energy_j"].gt(0).all()
    assert main([*argv, str(tmp_path / "points.xlsx")]) == 2
    assert capsys.readouterr().err.strip() == (f"joulecast: error: --out: '{tmp_path / 'points.xlsx'}': name a .csv "
                                               "or .parquet file (the suffix sets the format), got .xlsx")
    assert not (tmp_path / "points.xlsx").exists()
    pytest.importorskip("pyarrow")
    assert main([*argv, str(tmp_path / "points.PARQUET")]) == 0
    parquet = pd.read_parquet(tmp_path / "points.PARQUET")
    assert list(parquet.columns) == list(csv.columns)
    assert parquet["energy_j"].to_numpy() == pytest.approx(csv["energy_j"].to_numpy(), rel=1e-12)


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_source_tree_imports_as_it_stands():
    """From the checkout's root, `import joulecast` finds the facade folder first; the rooms resolve beside it."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = "import joulecast, joulecast.data.gpus as g; print(g.__file__); print(joulecast.estimate.__module__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [str(root / "data" / "gpus.py"), "joulecast.estimator.api"]


@pytest.mark.parametrize("seconds, text", [(3.01e-11, "0.03010 ns"), (4.5e-7, "450.0 ns"), (2.5e-6, "2.500 µs"),
                                           (0.0104, "10.40 ms"), (59.0, "59.00 s"),
                                           (3000.0, "50.00 min"), (11400.0, "3.167 h"), (1.14e7, "131.9 days")])
def test_times_read_in_the_unit_of_their_size(seconds, text):
    from joulecast.render import duration

    assert duration(seconds) == text


@pytest.mark.parametrize("grams, text", [(1.2e-5, "0.01200 mg"), (0.5, "500.0 mg"), (999.9, "999.9 g"),
                                         (1234.0, "1.234 kg"), (2.5e6, "2.500 t")])
def test_a_mass_of_carbon_reads_in_the_unit_of_its_size(grams, text):
    from joulecast.render import mass, mass_range

    assert mass(grams) == text
    assert mass_range(500.0, 1500.0) == "0.5000 - 1.500 kg"  # both ends in the higher one's unit


@pytest.mark.parametrize("argv, head", [
    (["--phase", "train-run", "--seq", "1", "--global-batch", "1", "--steps", "1"],
     "training run gpt2: 1 step x 1 x 1 token (1 token), full fine-tuning"),
    (["--phase", "train-run", "--seq", "1024", "--global-batch", "8", "--steps", "1000"],
     "training run gpt2: 1,000 steps x 8 x 1,024 tokens (8,192,000 tokens), full fine-tuning"),
    (["--phase", "serve", "--concurrency", "1", "--input-len", "1", "--output-len", "1"],
     "serving gpt2: 1 token in, 1 out a request, 1 in flight"),
    (["--phase", "serve", "--concurrency", "1", "--input-len", "2", "--output-len", "1"],
     "serving gpt2: 2 tokens in, 1 out a request, 1 in flight")])
def test_a_job_s_first_line_counts_its_tokens_as_people_write_them(argv, head, capsys):
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--estimator", "physics", *argv]) == 0
    assert capsys.readouterr().out.startswith(head)


@pytest.mark.parametrize("low, high, text", [(7150.0, 10458.0, "1.986 - 2.905 h"), (1.85e-5, 3e-5, "18.50 - 30.00 µs"),
                                             (0.5, 1.5, "0.5000 - 1.500 s")])
def test_a_range_of_times_reads_in_one_unit(low, high, text):
    """Both ends in the unit the higher reads best in (before, '119.2 min - 2.905 h' in plan's table)."""
    from joulecast.render import duration_range

    assert duration_range(low, high) == text


@pytest.mark.parametrize("chunk_rows", [1, 2, 4, 10_000])
def test_a_frame_s_json_written_a_chunk_at_a_time_is_the_whole_s(chunk_rows):
    """`write_json` (a sweep's --json: its points a chunk of records at a time, not a million dicts at once) writes the
    text `to_json` gives for the frames as lists of records: strict (NaN and infinity null), empty frames and all."""
    import io

    import numpy as np
    import pandas as pd

    from joulecast.render import to_json, write_json

    frame = pd.DataFrame({"n": [1, 2, 3, 4, 5], "x": [0.1, np.nan, np.inf, 1e-300, 2.5],
                          "s": ["a", "b\n", "", "é", "c"], "ok": [True, False, True, True, False]})
    texts = []
    for payload in ({"points": frame, "pareto": frame.iloc[:0], "best": {"x": float("nan")}, "files": [], "n": 3},
                    {"points": frame.iloc[:3]}, {}):
        out = io.StringIO()
        write_json(payload, out, chunk_rows)
        whole = {k: v.to_dict(orient="records") if isinstance(v, pd.DataFrame) else v for k, v in payload.items()}
        assert out.getvalue() == to_json(whole) + "\n"
        texts.append(out.getvalue())
    first = json.loads(texts[0])
    assert first["points"][1] == {"n": 2, "x": None, "s": "b\n", "ok": False} and first["pareto"] == []
    assert len(first["points"]) == 5 and json.loads(texts[2]) == {}


def test_a_requests_file_a_spreadsheet_saved_reads_as_any_other(capsys, tmp_path):
    """A byte-order mark and CRLF line ends, as Excel and Windows editors write them (before: 'a CSV needs input_len
    and output_len columns', the header's first name being '\ufeffinput_len'; and JSON's 'Unexpected UTF-8 BOM')."""
    base = ["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "generate", "--estimator", "physics", "--json"]
    (tmp_path / "plain.csv").write_bytes(b"input_len,output_len\n16,4\n32,8\n")
    (tmp_path / "excel.csv").write_bytes(b"\xef\xbb\xbfinput_len,output_len\r\n16,4\r\n32,8\r\n")
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf[[16, 4], [32, 8]]")
    figures = []
    for name in ("plain.csv", "excel.csv", "bom.json"):
        assert main([*base, "--requests", str(tmp_path / name)]) == 0
        figures.append(json.loads(capsys.readouterr().out)["energy_j"])
    assert figures[0] == figures[1] == figures[2]
    (tmp_path / "header.csv").write_text("input_len,output_len\n")  # before: 'needs input_len and output_len columns'
    assert main([*base, "--requests", str(tmp_path / "header.csv")]) == 2
    assert "header.csv: holds no requests, only its header" in capsys.readouterr().err


def test_a_generation_of_batch_zero_is_refused_not_read_as_one(capsys, tmp_path):
    """--batch 0 names the field and exits 2, with --requests too, as every other phase does; left out, one."""
    base = ["estimate", "--model", "gpt2", "--gpu", "h100-sxm", "--phase", "generate"]
    requests = tmp_path / "requests.csv"
    requests.write_text("input_len,output_len\n16,4\n")
    for job in (["--input-len", "16", "--output-len", "4"], ["--requests", str(requests)]):
        assert main([*base, *job, "--batch", "0"]) == 2
        assert "batch" in capsys.readouterr().err
    assert main([*base, "--input-len", "16", "--output-len", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"] == 1


@pytest.mark.parametrize("file, text, kind", [
    ("estimator.json", "{bad", "JSONDecodeError"), ("estimator.json", '{"level": 0.9}', "KeyError: 'features'"),
    ("estimator.json", "[1, 2]", "AttributeError"), ("trees.npz", None, "BadZipFile")])
def test_a_damaged_model_folder_is_one_line(tmp_path, capsys, file, text, kind):
    """A truncated copy or a hand edit of a saved model: one line naming the folder and what its files would not
    read as, exit 2 (before, the decoder's traceback)."""
    import shutil

    from joulecast.estimator.loading import DEFAULT_DIR

    folder = tmp_path / "model"
    shutil.copytree(DEFAULT_DIR, folder)
    if text is None:  # a copy cut short
        (folder / file).write_bytes((DEFAULT_DIR / file).read_bytes()[:3000])
    else:
        (folder / file).write_text(text)
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--estimator", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"joulecast: error: --estimator: {folder} is not a readable saved "
                                               f"model ({kind}")


def test_a_job_that_exceeds_its_gpu_says_so_before_its_figures(capsys):
    """A memory check before a number: Llama-3-70B's bf16 weights alone (131 GiB) pass an H100's 80 GiB, so the
    table's first figure line says it would not run and what would; split over two GPUs it fits and says nothing."""
    args = ["estimate", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
            "--output-len", "256", "--concurrency", "8", "--estimator", "physics"]
    assert main(args) == 0
    lines = capsys.readouterr().out.split("\n")
    first = lines[lines.index("") + 1]
    assert first.startswith("fits       no: needs 13") and "h100-sxm has 80 GiB" in first
    assert "Instead: --tp 2, the fewest GPUs" in first
    memory = next(line for line in lines if line.startswith("memory "))
    assert memory.endswith("at a step of 8; the GPU has 80 GiB")
    assert main([*args, "--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "fits " not in out and "GiB a GPU at a step of 8" in out


def test_memory_reads_without_exponents(capsys):
    assert main(["estimate", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--phase", "train-run", "--seq", "2048",
                 "--global-batch", "32", "--micro-batch", "4", "--steps", "1", "--estimator", "physics"]) == 0
    out = capsys.readouterr().out
    assert "e+0" not in out and "(weights 131, gradients 131, optimizer 788" in out


def test_an_error_names_the_flag_that_gave_the_value():
    """The API's fields as the user typed them: --sm-clock for sm_clock_mhz (both MHz); a field no flag gave (a
    default, a job file's) and one whose flag takes another unit (--host-dispatch-us: µs, the field seconds) keep
    their own names."""
    from joulecast.cli import _flag_of, build_parser

    parser = build_parser()
    args = parser.parse_args(["estimate", "--model", "gpt2", "--gpu", "a100", "--sm-clock", "900",
                              "--host-dispatch-us", "5"])
    named = [_flag_of(parser, args, f) for f in ("gpu", "sm_clock_mhz", "batch", "host_dispatch_s", "sites[0].gpu")]
    assert named == ["--gpu", "--sm-clock", "batch", "host_dispatch_s", "sites[0].gpu"]
    args = parser.parse_args(["gpu", "remove", "x"])
    assert _flag_of(parser, args, "name") == "name"


def test_a_misspelt_flag_names_the_one_meant(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "--model", "gpt2", "--gpu", "a10", "--power-limt", "range"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --power-limt range (did you mean --power-limit?)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["estimate", "--model", "gpt2", "--gpu", "a10", "stray"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: stray" in err and "did you mean" not in err


@pytest.mark.parametrize("typed, line", [
    ("--rate", "(did you mean --request-rate or --loader-rate?)"),  # a word of the flags meant, not a misspelling
    ("--clock", "(did you mean --sm-clock?)"),
    ("--len", "unrecognized arguments: --len 5 (see"),  # a word too many flags hold: none named
])
def test_a_flag_named_by_a_word_of_its_name_is_suggested(capsys, typed, line):
    with pytest.raises(SystemExit) as exit_:
        main(["estimate", "--model", "gpt2", "--gpu", "a10", typed, "5"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and line in err and err.count("\n") == 1


def test_a_pass_past_memory_suggests_the_largest_batch(capsys):
    assert main(["estimate", "--model", "llama-3-8b", "--gpu", "a10", "--phase", "decode", "--batch", "256", "--seq",
                 "4096", "--estimator", "physics"]) == 0
    assert "Instead: --batch 18 at most at this length" in capsys.readouterr().out
    assert main(["estimate", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--phase", "decode", "--estimator",
                 "physics"]) == 0
    assert "Instead: a GPU with more memory (the weights alone take 131 GiB)" in capsys.readouterr().out


def test_the_gpu_flags_name_the_what_if_fields_a_hypothetical_gpu_takes(capsys):
    from joulecast.cli import WHAT_IF_FIELDS
    from joulecast.data.gpus import SCALABLE

    assert WHAT_IF_FIELDS == tuple(SCALABLE)
    for command in ("estimate", "sweep"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "h100-sxm:memory_bandwidth_gbs*2" in " ".join(capsys.readouterr().out.split())
