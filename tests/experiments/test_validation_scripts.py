"""The multi-GPU validation scripts run on the shared data and print what they claim: MLPerf Training rows planned
from their logs (the fitted rest-of-node power reproducing its own row, the others scored), and the decentralised
runs' bytes ratio and bandwidth bands."""

import json
import subprocess
import sys

import pytest
from conftest import EXTERNAL, REPO, require_path


def _run(script: str) -> dict:
    return _run_args(script)


def test_mlperf_training_rows_are_planned_and_scored():
    require_path(EXTERNAL / "mlperf-training-power" / "runs.csv")
    result = _run("mlperf_training.py")
    rows = {(r["benchmark"], r["gpus"]): r for r in result["rows"]}
    assert {("gpt3", 512), ("llama2_70b_lora", 8), ("llama2_70b_lora", 64), ("llama2_70b_lora", 512)} <= set(rows)
    fit = rows[("llama2_70b_lora", 8)]
    assert fit["used_to_fit"] and fit["predicted_energy_j"] == pytest.approx(fit["measured_energy_j"], rel=1e-6)
    assert 500 < result["fitted"]["host_w_per_node"] < 5000   # a node's CPUs, memory, NICs and fans
    for r in result["rows"]:
        assert {"benchmark", "gpus", "measured_energy_j", "predicted_energy_j", "measured_time_s", "predicted_time_s",
                "job"} <= set(r)
        lo, hi = r["predicted_energy_interval_j"]
        assert lo < r["predicted_energy_j"] < hi and r["job"]["sites"][0]["gpus"] == r["gpus"]
    assert result["lora_energy_ratio_512_to_8"]["measured"] == pytest.approx(3.9, rel=0.05)
    # the official rule's window: where the power log spans the run alone (GPT-3) the official energy is the run's;
    # where it takes in a minute of initialisation and idle on each side (BERT), less than the run's mean power
    gpt3, bert = rows[("gpt3", 512)], rows[("bert", 8)]
    assert gpt3["predicted_energy_j"] == pytest.approx(gpt3["predicted_run_energy_j"], rel=1e-12)
    assert bert["predicted_energy_j"] < bert["predicted_run_energy_j"]
    before, after = result["fitted"]["outside_w_per_node"]
    assert 0 < after < before < result["fitted"]["host_w_per_node"] + 8 * 700  # idle below initialisation
    # the window's minute before the run at idle for BERT, which runs no warm-up steps there: at the LoRA's warm-up
    # power its official energy would be higher
    assert bert["outside_w_per_node"] == [after, after] and rows[("llama2_70b_lora", 8)]["outside_w_per_node"] == [
        before, after]
    assert bert["measured_run_energy_j"] > bert["measured_energy_j"]   # the window's idle minutes pull the mean down
    for r in result["rows"]:  # the rule-free score: the run's own energy against its in-run integral and switch
        assert r["run_energy_error_pct"] == pytest.approx(
            100 * (r["predicted_run_energy_j"] / r["measured_run_energy_j"] - 1), rel=1e-12)
    assert (bert["job"]["launch_mode"], bert["job"]["head_tokens"]) == ("graph", 76)  # --use_cuda_graph, 76 masked
    # each job's fusions from its config (--fused_gemm_gelu, --fused_bias_mha; NeMo's TE attention, fused SwiGLU,
    # rope and RMSNorm); NeMo's forward overhead (fitted on the 1-node LoRA's steady step) on its jobs alone: BERT
    # replays CUDA graphs
    assert bert["job"]["fusions"] == ["gemm_activation", "attention_layout"] and "forward_overhead_s" not in bert["job"]
    lora = {g: rows[("llama2_70b_lora", g)] for g in (8, 64, 512)}
    assert set(lora[8]["job"]["fusions"]) == {"activation", "attention_layout", "norm", "rope"}
    overhead = result["fitted"]["forward_overhead_s"]
    assert 0 < overhead < 0.01
    assert gpt3["job"]["forward_overhead_s"] == lora[512]["job"]["forward_overhead_s"] == overhead
    # the overhead fitted on the 1-node steady step, the step jitter on the 8-node one, each given the other
    assert lora[8]["predicted_step_s"] == pytest.approx(lora[8]["measured_step_s"], rel=1e-5)
    assert lora[64]["predicted_step_s"] == pytest.approx(lora[64]["measured_step_s"], rel=1e-5)
    assert lora[64]["used_to_fit"] and not lora[512]["used_to_fit"] and 0 < lora[512]["measured_step_s"]
    jitter = result["fitted"]["step_jitter"]
    assert 0 < jitter < 0.2 and lora[512]["job"]["step_jitter"] == jitter
    # GPT-3 collects garbage on every rank together (gc_interval), BERT's CUDA graphs run without the host
    assert gpt3["job"]["step_jitter"] == 0 and "step_jitter" not in bert["job"]
    # the warm-up: the 1-node run's on one node, the 8-node run's on more
    assert lora[8]["job"]["startup_s"] == bert["job"]["startup_s"] == result["fitted"]["startup_s"]
    assert gpt3["job"]["startup_s"] == lora[512]["job"]["startup_s"] == result["fitted"]["multi_node_startup_s"]
    assert result["fitted"]["multi_node_startup_s"] > result["fitted"]["startup_s"]
    assert 0 < gpt3["measured_step_s"] < gpt3["measured_eval_s"] < 60  # its 24 evaluations of three steps each
    # each evaluation whole global batches; NeMo's wait an evaluation read from GPT-3's logs, on the NeMo jobs only
    eval_overhead = result["fitted"]["nemo_eval_overhead_s"]
    assert 0 < eval_overhead < 2 and "eval_overhead_s" not in bert["job"]
    assert gpt3["job"]["eval_overhead_s"] == lora[512]["job"]["eval_overhead_s"] == eval_overhead
    assert (gpt3["job"]["evals"], lora[512]["job"]["evals"]) == (24, 8)


def test_decentralised_runs_reproduce_their_published_figures():
    result = _run("decentralised_runs.py")
    assert result["streaming_diloco_bytes_ratio"]["planned"] == pytest.approx(399.8, rel=0.05)
    for name in ("intellect_1", "opendiloco"):
        low, high = result[name]["band_gbps"]
        assert 0 < low < high


def test_job_validation_scripts_score_every_set_they_name():
    require_path(EXTERNAL / "mlenergy-v3" / "llm_mllm_runs.csv")
    require_path(EXTERNAL / "wilkins-llm-inference-energy" / "input_token_sweep.csv")
    serving = _run_args("serving_jobs.py", "--input-len", "256")
    assert {(r["release"], r["gpu"]) for r in serving} == {("mlenergy-v2", "a100-sxm4-40gb"),
                                                           ("mlenergy-v2", "h100-sxm"), ("mlenergy-v3", "h100-sxm"),
                                                           ("mlenergy-v3", "b200")}
    assert all(r["rows"] > 0 and r["j_per_token_mape"] >= 0 and 0 <= r["coverage_pct"] <= 100 for r in serving)
    # v3's output-length spread from its own histograms (chat: about 1), v2 none recorded
    assert all((0.5 < r["output_len_cv"] < 2) if r["release"] == "mlenergy-v3" else r["output_len_cv"] == 0
               for r in serving)
    # the prompt lengths each configuration's largest measured batch leaves room for in vLLM's share of memory
    bounds = _run_args("serving_jobs.py", "--prompt-bounds")
    assert {(b["release"], b["gpu"]) for b in bounds} == {(r["release"], r["gpu"]) for r in serving}
    for b in bounds:
        fits = b["longest_fitting_prompt"] is not None
        assert fits == (b["need_at_1_token_gib"] <= b["memory_cap_gib"]) and b["memory_cap_gib"] > 0
        assert not fits or b["longest_fitting_prompt"] in (1, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024)
    # v3's decode step alone beside its measured median inter-token latency, per GPU and tensor parallelism
    itl = _run_args("serving_jobs.py", "--itl")
    assert {(r["gpu"], r["tp"]) for r in itl["summary"]} == {(r["gpu"], r["tp"]) for r in serving
                                                              if r["release"] == "mlenergy-v3"}
    assert sum(r["rows"] for r in itl["summary"]) == len(itl["rows"])
    for r in itl["rows"]:
        assert r["median_itl_ms"] > 0 and r["decode_step_ms"] > 0
        assert r["decode_over_median"] == pytest.approx(r["decode_step_ms"] / r["median_itl_ms"])
    # a median step is no longer than the mean one by more than noise (the mean adds the steps with long prompts)
    assert all(0.5 < r["median_over_mean_step"] < 1.1 for r in itl["summary"])
    # vLLM 0.11.1's host work under the step, derived from the B200's host-bound rows, is the catalog's figure
    floor = _run_args("serving_jobs.py", "--host-floor")
    derived = floor["derived"]
    assert floor["derived_from"] == "b200" and [g["gpu"] for g in floor["by_gpu"]] == ["b200"]  # no H100 row bound
    assert derived["rows"] >= 3 and derived["per_row_ms_min"] <= derived["host_ms_per_sequence"] <= \
        derived["per_row_ms_max"]
    assert round(derived["host_ms_per_sequence"], 3) == pytest.approx(floor["shipped"]["host_ms_per_sequence"])
    assert round(derived["power_over_idle"], 2) == pytest.approx(floor["shipped"]["power_over_idle"])
    # and its rows' own range, the spread an estimate's interval takes
    assert [round(derived[k], 3) for k in ("per_row_ms_min", "per_row_ms_max")] == pytest.approx(
        floor["shipped"]["host_ms_per_sequence_range"])
    # vLLM 0.5.4's host work per tensor-parallel GPU beyond the first, from v2's Llama-3-70B rows, is the catalog's
    # the same rows per task: v3's reasoning (gpqa) and chat rows apart, v2's all chat
    tasks = _run_args("serving_jobs.py", "--input-len", "256", "--by-task")
    assert {(t["release"], t["task"]) for t in tasks} == {("mlenergy-v2", "chat"), ("mlenergy-v3", "gpqa"),
                                                          ("mlenergy-v3", "lm-arena-chat")}
    for gpu_of in {(r["release"], r["gpu"]) for r in serving}:
        assert (sum(t["rows"] for t in tasks if (t["release"], t["gpu"]) == gpu_of)
                == sum(r["rows"] for r in serving if (r["release"], r["gpu"]) == gpu_of))
    assert all(t["j_per_token_mape"] >= abs(t["bias_pct"]) and 0 <= t["coverage_pct"] <= 100 for t in tasks)
    tp_host = _run_args("serving_jobs.py", "--tp-host")
    assert round(tp_host["derived_ms_per_worker"], 2) == pytest.approx(tp_host["shipped_ms_per_worker"])
    assert {(r["gpu"], r["model"], r["tp"]) for r in tp_host["rows"]} == {
        ("a100-sxm4-40gb", "llama-3.1-70b", 8), ("h100-sxm", "llama-3.1-70b", 4), ("a100-sxm4-40gb", "mixtral-8x7b", 4),
        ("h100-sxm", "mixtral-8x7b", 4)}
    generation = _run_args("generation_jobs.py")
    assert {(r["model"], r["gpu"], r["sweep"]) for r in generation["summary"]} == {
        (m, g, sweep) for m in ("mistral-7b", "llama-2-7b")
        for g in ("a100-pcie-40gb", "a100-sxm4-40gb", "v100-pcie-16gb") for sweep in ("input", "output")}
    assert all(r["predicted_energy_j"] > 0 for r in generation["rows"])
    # each model's attention as the transformers of the runs' months called SDPA: Llama-2's with its mask
    assert {(r["model"], r["attention"]) for r in generation["rows"]} == {("llama-2-7b", "masked"),
                                                                        ("mistral-7b", "flash")}
    # each system's card told apart by its power ceiling: Palmetto's A100 and its 16 GB V100 stay under the PCIe
    # cards' 250 W, Swing's A100 does not
    assert {(r["system"], r["gpu"]) for r in generation["rows"]} == {
        ("Palmetto Intel+A100", "a100-pcie-40gb"), ("Swing AMD+A100", "a100-sxm4-40gb"),
        ("Palmetto Intel+V100", "v100-pcie-16gb")}
    # each A100 system's host dispatch read from its other sweep's host-bound rows, within the range a host allows;
    # the V100's rows are GPU-bound (bf16 without tensor cores), so it gets none and scores as at the default
    dispatch = generation["dispatch_us"]
    assert set(dispatch) == {f"{s} / {w}" for s in ("Palmetto Intel+A100", "Swing AMD+A100") for w in ("input", "output")}
    assert all(0 < d < 1000 for d in dispatch.values())
    crossed = {(r["model"], r["gpu"], r["sweep"]): r for r in generation["summary_cross_sweep_dispatch"]}
    default = {(r["model"], r["gpu"], r["sweep"]): r for r in generation["summary"]}
    for model in ("mistral-7b", "llama-2-7b"):
        assert crossed[(model, "v100-pcie-16gb", "input")] == default[(model, "v100-pcie-16gb", "input")]
    assert all(r["host_dispatch_us"] is not None for r in generation["rows_cross_sweep_dispatch"]
               if "A100" in r["system"])
    # Mistral's load leaves about a GiB less on the 16 GB V100 than on the A100 beyond the cards' context gap
    # (weights device_map="auto" kept in host memory); Llama-2 and Falcon, which fit, none
    off = generation["v100_weights_off_gpu_mib"]
    assert set(off) == {"Falcon (7B)", "Llama-2 (7B)", "Mistral (7B)"}
    assert 800 < off["Mistral (7B)"] < 1400 and abs(off["Llama-2 (7B)"]) < 100 and abs(off["Falcon (7B)"]) < 100
    # the A100-SXM4's rows as a what-if of the PCIe card rated at its 400 W, which no PCIe card runs: physics' point
    what_if = {(r["model"], r["sweep"]): r for r in generation["summary_what_if"]}
    assert set(what_if) == {(m, w) for m in ("mistral-7b", "llama-2-7b") for w in ("input", "output")}
    assert all(r["gpu"] == "a100-pcie-40gb:power_limit_w=400" and r["rows"] == default[(m, "a100-sxm4-40gb", w)]["rows"]
               for (m, w), r in what_if.items())


def test_what_if_reach_is_read_off_the_workloads_two_gpus_ran_and_shipped_as_read():
    """Physics' error in a change of hardware per unit of that change, over the workloads EnergAIzer's A10 and
    A100-PCIe both ran: the reach a what-if's interval takes (`estimator.api.WHAT_IF_REACH`)."""
    require_path(EXTERNAL / "energaizer-artifact")
    result = _run_args("what_if_reach.py")
    pairs = {(r["gpus"], r["quantity"]): r for r in result["pairs"]}
    assert {"a10 / a100-pcie-40gb"} <= {g for g, _ in pairs}
    for quantity, shipped in result["shipped"].items():
        row = pairs["a10 / a100-pcie-40gb", quantity]
        assert row["workloads"] >= 80 and row["error_q90"] > 0 and round(row["reach"], 2) == pytest.approx(shipped)


def test_leave_one_model_out_splits_a_gpus_mape_by_family(monkeypatch):
    """offsets_table: per GPU and held-out family, physics' and the hybrid's mean signed energy errors, and the
    points of the GPU's energy MAPE each family's rows make, which sum to that MAPE."""
    import pandas as pd

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    from leave_one_model_out import offsets_table

    frame = pd.DataFrame({"gpu": ["a", "a", "a", "b"], "model_family": ["x", "x", "y", "x"],
                          "energy_j": [10.0, 10.0, 10.0, 10.0], "physics_energy_j": [9.0, 8.0, 12.0, 10.0],
                          "pred_energy_j": [11.0, 9.0, 10.5, 10.0]})
    table = offsets_table(frame)
    assert table.loc[("a", "x"), "rows"] == 2 and table.loc[("a", "x"), "physics_bias"] == pytest.approx(-15.0)
    assert table.loc[("a", "x"), "hybrid_bias"] == pytest.approx(0.0)  # +10 % and -10 %
    assert table.loc[("a", "y"), "hybrid_bias"] == pytest.approx(5.0)
    assert table.loc[("a", "x"), "mape_points"] == pytest.approx(20 / 3)  # (10 + 10) % over the GPU's 3 rows
    assert table.xs("a").mape_points.sum() == pytest.approx((10 + 10 + 5) / 3)
    assert table.loc[("b", "x"), "mape_points"] == pytest.approx(0.0)


def test_physics_baseline_scores_each_row_in_its_setting(monkeypatch):
    """physics_baseline.evaluate reads a row as the model trains on it (`setting_of`): a collector row whose GPU
    throttled under its limit from the power-cap solve (no lock), an imported row at the clock it was locked at; not
    at the row's mean measured clock; and on its machine, with the host dispatch its set states."""
    import dataclasses

    import joulecast
    from joulecast.data.store import load_collection
    from joulecast.features.refs import resolve

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    import physics_baseline

    rows = load_collection(REPO / "data" / "probes", "h200", "h200-eager-check").head(2).reset_index(drop=True)
    assert rows["flag_throttled"].all() and (rows["sm_clock_mhz"] < 1980).all()
    locked = rows.assign(source="energaizer", flag_throttled=False, sm_clock_min_mhz=1200.0)
    for table, clock in ((rows, None), (locked, 1200.0)):
        scored = physics_baseline.evaluate(table)
        for row, energy in zip(table.itertuples(), scored["energy_pred_j"]):
            est = joulecast.estimate(resolve(row.workload_ref), "h200", sm_clock_mhz=clock, power_limit_w=700.0,
                                     estimator="physics")
            at_mean = joulecast.estimate(resolve(row.workload_ref), "h200", sm_clock_mhz=row.sm_clock_mhz,
                                         power_limit_w=700.0, estimator="physics")
            assert energy == pytest.approx(est.energy_j, rel=1e-9) and energy != pytest.approx(at_mean.energy_j)
    slow = rows.assign(host_dispatch_s=60e-6)  # a slower host: its passes take longer
    for row, time_s in zip(slow.itertuples(), physics_baseline.evaluate(slow)["time_pred_s"]):
        stated = joulecast.estimate(dataclasses.replace(resolve(row.workload_ref), host_dispatch_s=60e-6), "h200",
                                    power_limit_w=700.0, estimator="physics")
        assert time_s == pytest.approx(stated.time_s, rel=1e-9)
        assert time_s > joulecast.estimate(resolve(row.workload_ref), "h200", power_limit_w=700.0,
                                           estimator="physics").time_s


def test_physics_baseline_tells_gpu_bound_time_by_gpu_dtype_and_clock():
    """experiments/physics_baseline.py's GPU-bound table: measured over physics time per GPU, dtype and clock band,
    on every EnergAIzer set (the A100's clock sweep gives it more than one band)."""
    require_path(EXTERNAL / "energaizer-artifact" / "measurements" / "a100.csv")
    result = _run_args("physics_baseline.py")
    table = result["gpu_bound_time_ratio"]
    assert {(r["gpu"], r["dtype"]) for r in table} == {("a10", "bf16"), ("a10", "fp32"), ("a100-pcie-40gb", "bf16"),
                                                        ("a100-pcie-40gb", "fp32")}
    assert all(r["rows"] > 0 and r["time_ratio"] > 0 and r["power_w"] > 0 for r in table)
    bands = {r["clock_mhz"] for r in table if r["gpu"] == "a100-pcie-40gb"}
    assert len(bands) > 3 and all(b % 100 == 0 for b in bands)
    # the sweep's power by locked clock, under the limit: measured power rises with the clock, physics' with it
    by_clock = result["dvfs_power_by_clock"]
    assert by_clock[0]["clock_mhz"] == 510 and by_clock[-1]["clock_mhz"] == 1410
    assert all(r["power_w"] < 235 and r["physics_power_w"] > 0 for r in by_clock)
    low, mid = by_clock[0], by_clock[6]
    assert low["power_w"] < mid["power_w"] and low["physics_power_w"] < mid["physics_power_w"]


def test_model_size_scores_each_set_held_out_and_counts_the_trees_it_walks():
    require_path(EXTERNAL / "energaizer-artifact")
    result = _run_args("model_size.py", "--sets", "3,0.3,8", "--bag", "2", "--folds", "3")
    (row,) = result["sets"]
    # bags of two: the time and energy points 8 rounds each, their bands (two quantiles) a quarter of those
    assert row["trees_a_walk"] == 2 * (2 * 8 + 2 * 2 * 2)
    for gpu in ("a10", "a100-pcie-40gb"):
        assert 0 < row[f"{gpu}_energy_mape"] < 100 and 0 <= row[f"{gpu}_coverage"] <= 100
    assert row["walk_cpu_us_a_row"] >= 0


def test_zeus_sweep_scores_energy_per_epoch_and_the_best_power_limit_on_the_v100_and_the_a40():
    require_path(EXTERNAL / "zeus-nsdi23-powerlimit" / "summary_power_a40.csv")
    result = _run_args("zeus_power_limits.py")
    sweeps = {"v100": (49, [8, 12, 16, 24, 32, 48, 56], 250), "a40": (72, [8, 12, 16, 24, 32, 48, 56, 72], 300)}
    for token, (rows, batch_sizes, top) in sweeps.items():
        r = result[token]
        assert r["default_limit_w"] == top and r["dtype"] == ("tf32" if token == "a40" else "fp32")
        for name in ("hybrid", "physics"):
            s, batches = r[name]["summary"], r[name]["per_batch"]
            assert s["rows"] == rows and s["energy_mape"] > 0 and s["power_mape"] > 0
            assert [b["batch"] for b in batches] == batch_sizes
            for b in batches:  # the cap chosen is one of the sweep's; its measured energy is never below the best's
                assert b["best_limit_predicted_w"] in range(100, top + 1, 25) and b["regret_pct"] >= 0
        assert r["physics"]["summary"]["coverage_pct"] is None
        assert 0 <= r["hybrid"]["summary"]["coverage_pct"] <= 100
    assert result["assumptions"]["gpus"]["a40"]["gpu"] == "a40"
    # the V100 that took limits of 100 and 125 W is a PCIe card (an SXM2's floor is 150 W)
    assert result["assumptions"]["gpus"]["v100"]["gpu"] == "v100-pcie-16gb"
    # one GPU on request: the other is not scored
    assert set(_run_args("zeus_power_limits.py", "--gpu", "v100")) == {"v100", "assumptions"}
    # the trace's other network, ResNet-50 on ImageNet, by `train_run` over images: an epoch of ImageNet-1k
    resnet = _run_args("zeus_power_limits.py", "--network", "resnet50", "--gpu", "v100")
    assert resnet["assumptions"]["model"] == "resnet-50" and resnet["assumptions"]["epoch_images"] == 1_281_167
    s, batches = resnet["v100"]["hybrid"]["summary"], resnet["v100"]["hybrid"]["per_batch"]
    assert s["rows"] == 56 and [b["batch"] for b in batches] == [8, 16, 32, 64, 128, 192, 256, 360]
    assert s["energy_mape"] > 0 and all(b["regret_pct"] >= 0 for b in batches)


def test_hot_static_power_is_fitted_on_two_gpus_and_scored_on_the_third():
    require_path(EXTERNAL / "energaizer-artifact")
    result = _run("hot_static_power.py")
    held = {r["gpu"]: r for r in result["ratio_left_out"]}
    assert set(held) == {"a10", "a100-pcie-40gb", "h200"}
    for r in held.values():
        assert 0 < r["fitted"] < 1.3
    for gpu in ("a10", "a100-pcie-40gb"):  # physics read these GPUs' power 20-25 % low without the term
        assert held[gpu]["power_mape"] < held[gpu]["power_mape_without"] / 2
    assert {r["gpu"] for r in result["temperature_left_out"]} == set(held)
    shipped = {r["gpu"]: r for r in result["physics_by_gpu"]}
    fitted = {r["gpu"]: r for r in result["physics_by_gpu_fitted"]}
    # physics ships the ratio fitted on all three, or one step of the grid under it where the residual needs it
    # (`features.arch.HOT_STATIC_RATIO`: the fit's 0.7 takes leave-one-model-out's A100 over issue 31's 4.8 % on a
    # tree seed), at a cost to physics' power of at most half a point on any GPU; and reads the Ampere GPUs' energy
    # within 15 % with it (issue 31)
    assert 0 < result["ratio_fitted_on_all"] - 0.05 - 1e-9 <= result["shipped_ratio"] <= result["ratio_fitted_on_all"]
    assert shipped["a10"]["rows"] > 50 and set(shipped) == set(fitted)
    if result["shipped_ratio"] == result["ratio_fitted_on_all"]:
        assert fitted == shipped
    for gpu in shipped:
        assert shipped[gpu]["power_mape"] <= fitted[gpu]["power_mape"] + 0.5
    for gpu in ("a10", "a100-pcie-40gb"):
        assert shipped[gpu]["energy_mape"] <= 15 and held[gpu]["energy_mape"] <= 15


def test_softmax_rows_chooses_the_row_block_cost_on_two_gpus_and_scores_the_third():
    """experiments/softmax_rows.py: the CTA-a-row softmax's cost chosen leave-one-GPU-out on the grid, beside the
    shipped 1.5x (the residual's choice: `joulecast.features.kinds.softmax`); physics reads the A100's wide rows fast
    at the persistent kernel's cost."""
    require_path(EXTERNAL / "energaizer-artifact")
    result = _run("softmax_rows.py")
    held = {r["gpu"]: r for r in result["left_out"]}
    assert set(held) == {"a10", "a100-pcie-40gb", "h200"} and result["shipped_multiple"] == 1.5
    grid = [row["multiple"] for row in result["energy_mape_by_multiple"]]
    assert all(r["chosen"] in grid and r["chosen"] > 1 for r in held.values())
    assert held["a100-pcie-40gb"]["energy_mape"] < held["a100-pcie-40gb"]["energy_mape_at_1"] - 0.5
    wide = [r["time_bias"] for r in result["time_bias_by_seq"]
            if r["gpu"] == "a100-pcie-40gb" and r["multiple"] == 1.0 and r["seq"] >= 2048]
    assert wide and max(wide) < -10  # -12 to -21 %: the scores' broadcast ops, issued unrolled, took part of it


def test_thermal_leakage_fits_power_on_temperature_of_the_spin_windows(tmp_path):
    """On samples shaped as an h200-thermal collection records them (a GEMM heats the die, a spinning kernel at the
    maximum clock cools, the meter's power lagging over its first second): the slope the settled samples were made
    with, and the hot-static term's implied slope beside it."""
    import numpy as np
    import pandas as pd

    from joulecast.data import store

    rng = np.random.default_rng(3)
    cooling = np.linspace(62.0, 44.0, 250)
    lag = np.where(np.arange(cooling.size) < 72, 300.0, 0.0)  # 72 samples of 14 ms: the first second
    frames = [pd.DataFrame({"measurement_id": "idle-before/t0", "temperature_c": 38.0, "power_w": 77.0,
                            "sm_clock_mhz": 345.0}, index=range(50)),
              pd.DataFrame({"measurement_id": "gemm/m16384/n16384/k16384/bf16", "temperature_c": 60.0,
                            "power_w": 690.0, "sm_clock_mhz": 1455.0}, index=range(50)),
              pd.DataFrame({"measurement_id": "wait/spin/us1000", "temperature_c": cooling,
                            "power_w": 150.0 + 1.5 * (cooling - 40.0) + lag + rng.normal(0, 0.5, cooling.size),
                            "sm_clock_mhz": np.where(np.arange(cooling.size) % 60 == 0, 1965.0, 1980.0)})]
    samples = pd.concat(frames, ignore_index=True).assign(window=0, energy_j=0.0, memory_clock_mhz=3201.0,
                                                          power_limit_w=700.0, throttle="")
    samples["time_s"] = np.arange(len(samples)) * 0.014
    store.write_samples(samples, tmp_path, "h200", "h200-thermal")
    result = _run_args("thermal_leakage.py", str(tmp_path))
    # 250 spin samples less the first second's 72 and the 1,965 MHz readings after it (at 120, 180, 240)
    assert result["sm_clock_mhz"] == 1980 and result["samples"] == 175
    assert result["slope_w_per_k"] == pytest.approx(1.5, abs=0.05)
    assert result["temperature_c"] == [pytest.approx(44.0), pytest.approx(62.0 - 18.0 * 72 / 249, abs=0.01)]
    assert result["implied_slope_w_per_k"] == pytest.approx(0.65 * result["idle_at_clock_w"] / 22.0)
    assert result["leakage_over_rise_w"] == pytest.approx(1.5 * 22.0, abs=1.5)
    empty = subprocess.run([sys.executable, str(REPO / "experiments" / "thermal_leakage.py"), str(tmp_path / "none")],
                           capture_output=True, text=True)
    assert empty.returncode == 2 and "no spinning-kernel windows" in empty.stderr


def _run_args(script: str, *extra: str):
    out = subprocess.run([sys.executable, str(REPO / "experiments" / script), *extra, "--json"], capture_output=True,
                         text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_host_dispatch_reads_each_energaizer_machine_from_its_own_rows():
    """`--energaizer`: the dispatch each GPU's file of the artifact implies, the method that sets a collection's card
    (the A10's machine launches faster than the A100's; arch.HOST_DISPATCH_S's comment records what stating it did)."""
    require_path(EXTERNAL / "energaizer-artifact" / "measurements" / "a10.csv")
    by_gpu = _run_args("host_dispatch.py", "--energaizer")["by_gpu"]
    assert set(by_gpu) == {"a10", "a100-pcie-40gb"} and all(s["rows"] >= 10 for s in by_gpu.values())
    a10, a100 = (by_gpu[g]["median_dispatch_us"] for g in ("a10", "a100-pcie-40gb"))
    assert 15 < a10 < a100 < 30
    assert a10 == pytest.approx(19.8, abs=0.1) and a100 == pytest.approx(23.9, abs=0.1)  # as the comment states


def test_the_host_dispatch_a_collection_states_is_what_its_host_bound_rows_imply():
    """experiments/host_dispatch.py inverts physics' rule on h200-first's host-bound model rows: the median it
    prints is the figure the collection's card states (18.0 us a launch), each row's dispatch reproducing its measured
    time with physics' GPU busy time."""
    from joulecast.data.store import CARD_NAME, read_card
    from joulecast.features import arch

    result = _run_args("host_dispatch.py")
    card = read_card(REPO / "data" / "measurements" / "h200" / "h200-first" / CARD_NAME)
    assert result["summary"]["rows"] >= 10
    # the card states it to 0.1 us (18.0, read again when a training step's backward took autograd's kernels);
    # physics' busy time may move the median by under that
    assert result["summary"]["median_dispatch_us"] == pytest.approx(1e6 * card["host_dispatch_s"], abs=0.1)
    # its single-kernel loops (--kernels) read no lower than its passes, so the card's one figure serves both; rows
    # whose measured time physics' busy time passes imply nothing and are left out
    loops = _run_args("host_dispatch.py", "--kernels")
    assert loops["summary"]["rows"] >= 10 and loops["summary"]["rows_read"] == "single-kernel loop"
    assert loops["summary"]["median_dispatch_us"] > 0.8 * result["summary"]["median_dispatch_us"]
    for r in result["rows"]:  # a training step's launches pay autograd's host time, its sides by their own norm
        training = "/training/" in r["measurement_id"]
        p = arch.TRAINING_OVERLAP_NORM if training else arch.OVERLAP_NORM
        host = 1e-3 * r["dispatch_us"] * r["launches"] * (arch.TRAINING_DISPATCH_FACTOR if training else 1.0)
        assert r["measured_ms"] > r["gpu_busy_ms"] and r["measured_ms"] == pytest.approx(
            (r["gpu_busy_ms"] ** p + host ** p) ** (1 / p), rel=1e-9)
    for r in loops["rows"]:  # one kernel a loop: physics takes the slower side, here the host's
        assert r["measured_ms"] > r["gpu_busy_ms"] and r["measured_ms"] == pytest.approx(
            max(r["gpu_busy_ms"], 1e-3 * r["dispatch_us"] * r["launches"]), rel=1e-9)


def test_gpu_transfer_prints_each_gpus_physics_error_spread(monkeypatch):
    """gpu_transfer.py's spread: per GPU, percentiles of log(measured / physics energy) and the half-width about
    physics' point that holds 90 % of its rows, which is what a GPU left out needs of its interval."""
    import numpy as np
    import pandas as pd

    monkeypatch.syspath_prepend(str(REPO / "experiments"))  # the scripts import their neighbours by name
    from gpu_transfer import physics_spread

    errors = {"a": np.linspace(-0.1, 0.1, 21), "b": np.linspace(0.0, 0.4, 21)}  # b leans one way
    frame = pd.DataFrame([{"gpu": g, "physics_energy_j": 2.0, "energy_j": 2.0 * np.exp(e)}
                          for g, values in errors.items() for e in values])
    spread = physics_spread(frame).set_index("gpu")
    assert spread.loc["a", "rows"] == 21 and spread.loc["a", "median"] == pytest.approx(0.0, abs=1e-12)
    assert spread.loc["b", "q05"] == pytest.approx(np.quantile(errors["b"], 0.05))
    assert spread.loc["b", "q95"] == pytest.approx(np.quantile(errors["b"], 0.95))
    assert spread.loc["a", "half_width_90"] == pytest.approx(0.09)
    assert spread.loc["b", "half_width_90"] == pytest.approx(np.quantile(errors["b"], 0.9))


def test_gpu_transfer_scores_coverage_with_the_chance_its_row_count_allows(monkeypatch):
    """gpu_transfer.py's score of held-out rows: MAPE and coverage as error_table has them, with p_in_target the
    binomial p-value of its count against 86-94 % and a chance range from the rows' own spreads."""
    import numpy as np
    import pandas as pd

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    import gpu_transfer
    from joulecast.training.evaluate import coverage_p_value

    rng = np.random.default_rng(0)
    n = 60
    measured = np.exp(rng.normal(0.0, 0.1, n))
    inside = np.arange(n) < 57  # 57 of 60 inside (95 %): just above the target
    frame = pd.DataFrame({"model_family": np.repeat(["a", "b", "c"], n // 3), "gpu": "g", "energy_j": measured,
                          "pred_energy_j": 1.0, "time_s": 1.0, "pred_time_s": 1.1, "power_w": measured,
                          "pred_power_w": 1.0, "lo_energy_j": np.where(inside, 0.5, 2.0),
                          "hi_energy_j": np.where(inside, 2.0, 3.0)})

    class Table:
        rows = pd.DataFrame({"gpu": ["g"] * n})
        X = pd.DataFrame({"x": np.zeros(n)})

    class Model:
        def predict(self, X, gpus):
            return None

    monkeypatch.setattr(gpu_transfer, "scored_frame", lambda rows, predictions: frame)
    score = gpu_transfer._score(Table(), Model(), np.ones(n, dtype=bool))
    assert score["rows"] == n and score["coverage"] == pytest.approx(95.0)
    assert score["time_mape"] == pytest.approx(10.0)
    assert score["p_in_target"] == pytest.approx(coverage_p_value(57, n)) and 0 < score["p_in_target"] < 1
    # intervals of 0.5-2x about an unbiased point, errors of 0.1 in log: chance puts the 57 wide ones all inside
    assert score["chance_low"] <= score["chance_high"] and score["chance_high"] == pytest.approx(95.0)
    # with a set the model never saw (the GPU's held-out rows): scored over both sets' rows together
    both = gpu_transfer._score(Table(), Model(), np.ones(n, dtype=bool), also=Table())
    assert both["rows"] == 2 * n and both["coverage"] == pytest.approx(95.0)
    assert both["p_in_target"] == pytest.approx(coverage_p_value(114, 2 * n))
    assert both["p_in_target"] < score["p_in_target"]  # the same share of twice the rows: less likely by chance


def test_gpu_transfer_margins_cover_each_held_out_gpu_by_the_others_physics_errors(monkeypatch):
    """gpu_transfer.py --margins: a GPU held out reads at physics' point, its interval the physics margin of its
    row's kind measured on the other GPUs (each weighing alike), widened where a row lies outside their domain or
    architectures; split_kernels makes single-kernel rows a kind of their own (a kind one GPU ran: the widest)."""
    import numpy as np
    import pandas as pd

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    from gpu_transfer import WIDEN_GRID, margin_coverage
    from joulecast.training import residual as residual_training
    from joulecast.training.residual import weighted_quantile

    errors = {"a": np.linspace(-0.1, 0.1, 11), "b": np.linspace(-0.3, 0.3, 11), "c": np.linspace(-0.25, 0.25, 11)}
    gpus = np.repeat(list(errors), 11)
    error = np.concatenate(list(errors.values()))
    phase = np.where((gpus == "b") & (np.arange(33) % 11 < 4), "kernel", "prefill")

    class Table:
        rows = pd.DataFrame({"gpu": gpus, "phase": phase})
        # c alone is of another architecture; a's largest flops lie beyond b and c's range
        X = pd.DataFrame({"log_flops": np.where(gpus == "a", np.tile(np.linspace(1, 3, 11), 3), 2.0),
                          "gpu_arch": np.where(gpus == "c", 9.0, 8.0)})

    kinds = np.full(33, "forward")
    frame = margin_coverage(Table(), kinds, error).set_index(["gpu", "widen"])
    assert set(frame.index.get_level_values("widen")) == set(WIDEN_GRID)

    def alike(*names):
        rows = np.isin(gpus, names)
        return weighted_quantile(np.abs(error[rows]), np.ones(rows.sum()), 0.9)  # 11 rows each: weights alike

    # c: a new architecture, every row widened; its margin from a and b
    m = alike("a", "b")
    for widen in (1.0, 2.0):
        row = frame.loc[("c", widen)]
        assert row["outside_domain_pct"] == 100.0 and row["rows"] == 11
        assert row["coverage_pct"] == pytest.approx(100 * np.mean(np.abs(errors["c"]) <= m * widen))
        assert row["mean_width_pct"] == pytest.approx(100 * (np.exp(m * widen) - np.exp(-m * widen)))
    # a: flops beyond 2.0 +- 5 % lie outside b and c's domain, and only those are widened
    a = frame.loc["a"]
    beyond = np.abs(np.linspace(1, 3, 11) - 2.0) > 0.0
    assert a.loc[1.0, "outside_domain_pct"] == pytest.approx(100 * beyond.mean(), abs=0.05)
    assert (np.diff(a["coverage_pct"].to_numpy()) >= 0).all() and a.loc[2.0, "coverage_pct"] == 100.0
    # single-kernel rows apart: b's kernel rows are a kind no other GPU ran, so a's and c's forward margins are
    # measured on b's other rows (and the rest), and b's kernel rows take the widest margin measured
    split = margin_coverage(Table(), kinds, error, split_kernels=True).set_index(["gpu", "widen"])
    assert set(split["kinds"]) == {"kernel apart"} and len(split) == len(frame)
    forward = (gpus == "a") | ((gpus == "b") & (phase == "prefill"))
    m = weighted_quantile(np.abs(error[forward]), np.where(gpus[forward] == "a", 1 / 11, 1 / 7), 0.9)
    assert split.loc[("c", 1.0), "coverage_pct"] == pytest.approx(100 * np.mean(np.abs(errors["c"]) <= m))
    # 11 rows an architecture measure no margin of its own (MIN_ROWS_PER_ARCH_MARGIN); were one enough, b, held
    # out, would take a's margin (its one sibling), not a's and c's, and the rule without architectures would not
    monkeypatch.setattr(residual_training, "MIN_ROWS_PER_ARCH_MARGIN", 1)
    sibling = margin_coverage(Table(), kinds, error).set_index(["gpu", "widen"])
    pooled = margin_coverage(Table(), kinds, error, siblings=False).set_index(["gpu", "widen"])
    assert set(pooled["kinds"]) == {"pooled, no arch"}
    assert sibling.loc[("b", 1.0), "coverage_pct"] == pytest.approx(100 * np.mean(np.abs(errors["b"]) <= alike("a")))
    assert pooled.loc[("b", 1.0), "coverage_pct"] == pytest.approx(
        100 * np.mean(np.abs(errors["b"]) <= alike("a", "c")))
    assert sibling.loc[("b", 1.0), "coverage_pct"] < pooled.loc[("b", 1.0), "coverage_pct"]
    pd.testing.assert_series_equal(sibling.loc["c", "coverage_pct"], frame.loc["c", "coverage_pct"])  # no sibling


def test_gpu_transfer_margins_as_estimated_add_an_unstated_hosts_reach_to_each_end(monkeypatch):
    """`--margins`' `as estimated` rule: an estimate whose machine states no host dispatch reaches past its margin
    by the hosts' range, the two in quadrature (`estimator.api.combine`), so a row whose measured energy lies beyond
    the margin but within that reach is covered, each side apart, and the width counts the reach; with the ranges'
    ends added instead (`SPREADS_IN_QUADRATURE` off, the rule before), further; where the rows the margin is read
    from state no host either, the margin is measured past their reach, narrower."""
    import numpy as np
    import pandas as pd

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    from gpu_transfer import margin_coverage
    from joulecast.estimator import api
    from joulecast.training.residual import weighted_quantile

    gpus = np.repeat(["a", "b"], 11)
    error = np.concatenate([np.linspace(-0.1, 0.1, 11), np.linspace(-0.3, 0.3, 11)])

    class Table:
        rows = pd.DataFrame({"gpu": gpus, "phase": "prefill"})
        X = pd.DataFrame({"log_flops": np.full(22, 2.0), "gpu_arch": np.full(22, 8.0)})

    kinds = np.full(22, "forward")
    low, high = np.where(gpus == "b", -0.25, 0.0), np.where(gpus == "b", 0.05, 0.0)
    shipped = margin_coverage(Table(), kinds, error).set_index(["gpu", "widen"])
    estimated = margin_coverage(Table(), kinds, error, spread=(low, high)).set_index(["gpu", "widen"])
    assert set(estimated["kinds"]) == {"as estimated"}
    m = weighted_quantile(np.abs(error[:11]), np.ones(11), 0.9)   # b's margin, from a's rows alone
    b = error[11:]
    below, above = np.hypot(m, 0.25), np.hypot(m, 0.05)
    assert estimated.loc[("b", 1.0), "coverage_pct"] == pytest.approx(100 * np.mean((b >= -below) & (b <= above)))
    assert shipped.loc[("b", 1.0), "coverage_pct"] == pytest.approx(100 * np.mean(np.abs(b) <= m))
    assert estimated.loc[("b", 1.0), "coverage_pct"] > shipped.loc[("b", 1.0), "coverage_pct"]
    assert estimated.loc[("b", 1.0), "mean_width_pct"] == pytest.approx(100 * (np.exp(above) - np.exp(-below)))
    # a's rows state their host: no reach beyond the margin, the shipped rule's figures
    pd.testing.assert_series_equal(estimated.loc["a", "coverage_pct"], shipped.loc["a", "coverage_pct"])
    # the ranges' ends added to the margin's: further each way
    monkeypatch.setattr(api, "SPREADS_IN_QUADRATURE", False)
    added = margin_coverage(Table(), kinds, error, spread=(low, high)).set_index(["gpu", "widen"])
    assert added.loc[("b", 1.0), "coverage_pct"] == pytest.approx(100 * np.mean((b >= -0.25 - m) & (b <= 0.05 + m)))
    assert added.loc[("b", 1.0), "mean_width_pct"] > estimated.loc[("b", 1.0), "mean_width_pct"]
    # where the other GPU's rows state no host either, b's margin is measured past their reach, as the shipped
    # model's margins are calibrated on the joined interval (`residual.CONFORMAL_ON_JOINED`): narrower
    monkeypatch.setattr(api, "SPREADS_IN_QUADRATURE", True)
    low_a = np.where(gpus == "a", -0.06, low)
    high_a = np.where(gpus == "a", 0.06, high)
    past = margin_coverage(Table(), kinds, error, spread=(low_a, high_a)).set_index(["gpu", "widen"])
    m_past = weighted_quantile(np.sqrt(np.maximum(error[:11] ** 2 - 0.06 ** 2, 0.0)), np.ones(11), 0.9)
    assert m_past < m
    below, above = np.hypot(m_past, 0.25), np.hypot(m_past, 0.05)
    assert past.loc[("b", 1.0), "coverage_pct"] == pytest.approx(100 * np.mean((b >= -below) & (b <= above)))
    assert past.loc[("b", 1.0), "mean_width_pct"] == pytest.approx(100 * (np.exp(above) - np.exp(-below)))


def test_gpu_transfer_host_spread_reaches_an_unstated_host_s_range_and_nothing_for_a_stated_one(monkeypatch):
    """`host_spread`: physics with the hosts' range of dispatch (18-30 us a launch) over physics at the default, read
    from the training table's physics (what an estimate's interval takes), for a host-bound eager decode (llama-3-8b
    at batch 1 on the H200, h200-first's row) whose set states no host: as physics run at each end (no kernel there
    meets the power limit, so the kept clocks are the same); none for the same row stating its machine's (18.0 us)."""
    import numpy as np
    import pandas as pd

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    from gpu_transfer import host_spread
    from joulecast.data.store import load_store
    from joulecast.features import arch
    from joulecast.training.dataset import training_table

    rows = load_store(REPO / "data" / "measurements")
    decode = rows[rows["measurement_id"] == "llama-3-8b/decode/b1/s2048/bf16"].head(1)
    both = pd.concat([decode, decode.assign(host_dispatch_s=np.nan)], ignore_index=True)
    table = training_table(both)
    low, high = host_spread(table)
    assert low[0] == high[0] == 0.0   # its host stated
    ends = [training_table(both.assign(host_dispatch_s=h)).rows["physics_energy_j"][1]
            for h in arch.HOST_DISPATCH_RANGE_S]
    own = table.rows["physics_energy_j"][1]
    assert low[1] == pytest.approx(np.log(ends[0] / own)) and low[1] < 0   # a quicker host: less idle energy
    assert high[1] == pytest.approx(np.log(ends[1] / own)) and high[1] > 0


def test_job_coverage_counts_every_row_of_each_kind_once_per_gpu_and_in_all():
    """experiments/job_coverage.py: per kind of job and GPU the 90 % interval's coverage, and the shares measured
    below and above it, which with it make every row; a kind's rows over its GPUs are its `all` row's; a kind it
    does not know, or physics alone (no interval), is one line and exit 2. Per kind, set and GPU too: Zeus' two
    networks' epochs apart, their rows the GPU's."""
    require_path(EXTERNAL / "zeus-nsdi23-powerlimit" / "summary_power_a40.csv")
    require_path(EXTERNAL / "mlenergy-v3")
    require_path(EXTERNAL / "wilkins-llm-inference-energy")
    out = _run_args("job_coverage.py")
    table, by_set = out["by_gpu"], out["by_set"]
    assert {r["kind"] for r in table} == {"generate", "serve", "train-run"}
    assert {r["gpu"] for r in table if r["kind"] == "generate"} == {"a100-pcie-40gb", "a100-sxm4-40gb",
                                                                    "v100-pcie-16gb", "all"}
    assert _run_args("job_coverage.py", "--kinds", "train-run")["by_gpu"] == [r for r in table
                                                                               if r["kind"] == "train-run"]
    for r in table:
        assert r["coverage_pct"] + r["measured_below_pct"] + r["measured_above_pct"] == pytest.approx(100)
        assert r["mean_width_pct"] > 0 and 0 <= r["p_in_target"] <= 1
        # inside the 86-94 % band nothing counts against it
        assert r["p_in_target"] == 1.0 or not 86 <= r["coverage_pct"] <= 94
    for kind in ("generate", "serve", "train-run"):
        per_gpu = [r for r in table if r["kind"] == kind and r["gpu"] != "all"]
        (whole,) = [r for r in table if r["kind"] == kind and r["gpu"] == "all"]
        assert sum(r["rows"] for r in per_gpu) == whole["rows"]
        covered = sum(r["rows"] * r["coverage_pct"] for r in per_gpu) / whole["rows"]
        assert covered == pytest.approx(whole["coverage_pct"])
    assert {r["gpu"] for r in table if r["kind"] == "train-run"} == {"a40", "v100-pcie-16gb", "all"}
    # BERT's epochs (V100 49, A40 72) and ResNet-50's (56, 81)
    assert sum(r["rows"] for r in table if r["kind"] == "train-run" and r["gpu"] != "all") == 49 + 72 + 56 + 81
    assert {(r["sets"], r["gpu"], r["rows"]) for r in by_set if r["kind"] == "train-run"} == {
        ("zeus-bert", "v100-pcie-16gb", 49), ("zeus-bert", "a40", 72), ("zeus-resnet50", "v100-pcie-16gb", 56),
        ("zeus-resnet50", "a40", 81)}
    for r in table:
        if r["gpu"] != "all":
            parts = [p for p in by_set if (p["kind"], p["gpu"]) == (r["kind"], r["gpu"])]
            assert sum(p["rows"] for p in parts) == r["rows"]
            assert sum(p["rows"] * p["coverage_pct"] for p in parts) / r["rows"] == pytest.approx(r["coverage_pct"])
    for bad in (["--kinds", "pretrain"], ["--estimator", "physics"]):
        out = subprocess.run([sys.executable, str(REPO / "experiments" / "job_coverage.py"), *bad], capture_output=True,
                             text=True, timeout=600, cwd=REPO)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


def test_volta_power_reads_the_v100_pcie_rows_at_each_idle_and_clock_band():
    """experiments/volta_power.py: physics' power terms with NV-DVFS-Benchmark's measured activities, every one of
    its 200 V100 rows in one clock band, each idle's table; a higher idle reads the rows higher (the posted 24 W
    the least biased of the three: the catalog's choice)."""
    require_path(EXTERNAL / "nv-dvfs-benchmark-v100-rtx8000" / "v100-dvfs-real.csv")
    table = _run_args("volta_power.py")
    whole = {r["idle_w"]: r for r in table if r["band"] == "all"}
    assert set(whole) == {24.0, 30.0, 39.8} and all(r["rows"] == 200 for r in whole.values())
    for idle in whole:
        assert sum(r["rows"] for r in table if r["idle_w"] == idle and r["band"] != "all") == 200
    assert whole[24.0]["power_bias"] < whole[30.0]["power_bias"] < whole[39.8]["power_bias"]
    assert abs(whole[24.0]["power_bias"]) == min(abs(r["power_bias"]) for r in whole.values())


def test_training_host_scores_the_h200s_steps_at_each_factor_and_norm(monkeypatch):
    """training_host.py: the H200's three training steps at a factor and norm, the constants put back after; at the
    shipped pair the host-bound GPT-2 step reads closer to its measured time than at an inference pass's (1, 2-norm),
    and the grid's least time MAPE on the steps trained on is the shipped pair."""
    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    import training_host
    from joulecast.data.store import load_store
    from joulecast.features import arch

    rows = training_host.steps(load_store(REPO / "data" / "measurements"))
    assert len(rows) == 3
    shipped = (arch.TRAINING_DISPATCH_FACTOR, arch.TRAINING_OVERLAP_NORM)
    before, now = training_host.errors(rows, 1.0, 2.0), training_host.errors(rows, *shipped)
    assert (arch.TRAINING_DISPATCH_FACTOR, arch.TRAINING_OVERLAP_NORM) == shipped  # put back
    gpt2 = lambda e: float(e.loc[e["model"] == "gpt2", "time"].iloc[0])  # noqa: E731
    assert gpt2(before) < gpt2(now) < 0  # read short, less so
    grid = training_host.grid({"trained on": rows})
    best = grid.loc[grid["time_mape"].idxmin()]
    assert (best["factor"], best["norm"]) == shipped


def test_a_repeat_collection_is_paired_with_its_first_by_id_and_split_by_what_bounds_each_item(tmp_path):
    """experiments/h200_repeat.py on a repeat made from three h200-first rows: a GEMM 10 % slower at the same power
    (so 10 % more energy), a host-bound decode 30 % slower at the same energy, one row as it was; physics calls the
    GEMM kernel-bound and the batch-1 decode host-bound. A repeat sharing no id with the first exits 2."""
    from joulecast.data import store

    first = store.load_collection(REPO / "data" / "measurements", "h200", "h200-first")
    ids = ["gemm/m16384/n16384/k16384/bf16", "llama-3-8b/decode/b1/s2048/bf16", "bert-large/prefill/b32/s512/bf16"]
    repeat = first[first["measurement_id"].isin(ids)].copy().reset_index(drop=True)
    scale_time = repeat["measurement_id"].map({ids[0]: 1.1, ids[1]: 1.3, ids[2]: 1.0})
    scale_energy = repeat["measurement_id"].map({ids[0]: 1.1, ids[1]: 1.0, ids[2]: 1.0})
    repeat["time_s"] *= scale_time
    repeat["energy_j"] *= scale_energy
    repeat["power_w"] = repeat["energy_j"] / repeat["time_s"]
    store.write_part(repeat, tmp_path, "h200", "h200-repeat")
    result = _run_args("h200_repeat.py", "--repeat", str(tmp_path))
    by_id = {p["measurement_id"]: p for p in result["pairs"]}
    assert set(by_id) == set(ids)
    assert by_id[ids[0]]["bound"] == "kernel" and by_id[ids[1]]["bound"] == "host"
    assert by_id[ids[0]]["diff_time_s"] == pytest.approx(10.0, abs=0.01)
    assert by_id[ids[0]]["diff_energy_j"] == pytest.approx(10.0, abs=0.01)
    assert by_id[ids[1]]["diff_time_s"] == pytest.approx(30.0, abs=0.01)
    decode = first.set_index("measurement_id").loc[ids[1]]  # its stored power is the meter's, not energy / time
    power = decode["energy_j"] / (1.3 * decode["time_s"])
    assert by_id[ids[1]]["diff_power_w"] == pytest.approx(100 * (power / decode["power_w"] - 1), abs=0.006)
    assert by_id[ids[2]]["diff_energy_j"] == pytest.approx(0.0, abs=1e-9)
    for name in ("first", "repeat"):  # both machines' rows scored, every item counted once
        assert sum(g["rows"] for g in result["shipped"][name]) == 3
    strangers = repeat.assign(measurement_id=repeat["measurement_id"] + "/elsewhere")
    store.write_part(strangers, tmp_path / "other", "h200", "h200-repeat")
    out = subprocess.run([sys.executable, str(REPO / "experiments" / "h200_repeat.py"), "--repeat",
                          str(tmp_path / "other")], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2 and "--collection" in out.stderr


def test_busy_sm_power_fits_the_one_warp_configurations_on_the_busy_share(tmp_path):
    """experiments/busy_sm_power.py on a probe summary made with 120 W + 20 W x the busy share for one warp a SM
    (and the whole-GPU configurations with more warps listed by warps a SM); a folder with no summary exits 2."""
    from joulecast.data.gpus import gpu

    sms = gpu("h200").sm_count
    configs = [{"config": "b0/t0", "blocks": 0, "threads": 0, "sms": 0, "readings": 50, "power_w": 80.0,
                "sm_clock_mhz": 345.0, "temperature_c": 38.0}]
    configs += [{"config": f"b{b}/t32", "blocks": b, "threads": 32, "sms": b, "readings": 50,
                 "power_w": 120.0 + 20.0 * b / sms, "sm_clock_mhz": 1980.0, "temperature_c": 40.0}
                for b in (1, 33, 66, sms)]
    configs += [{"config": f"b{sms}/t1024", "blocks": sms, "threads": 1024, "sms": sms, "readings": 50,
                 "power_w": 250.0, "sm_clock_mhz": 1980.0, "temperature_c": 45.0}]
    (tmp_path / "sm_spin_summary.json").write_text(json.dumps({"configs": configs}))
    result = _run_args("busy_sm_power.py", str(tmp_path))
    assert result["configs"] == 4
    assert result["slope_w_per_share"] == pytest.approx(20.0) and result["intercept_w"] == pytest.approx(120.0)
    assert result["w_per_sm"] == pytest.approx(20.0 / sms)
    assert [w["warps_per_sm"] for w in result["warps_per_sm"]] == [1, 32]
    assert result["hot_static_w"] == pytest.approx(result["ratio"] * result["idle_at_clock_w"])
    missing = subprocess.run([sys.executable, str(REPO / "experiments" / "busy_sm_power.py"), str(tmp_path / "no")],
                             capture_output=True, text=True, cwd=REPO)
    assert missing.returncode == 2 and "probe" in missing.stderr


def test_unvectorised_ops_are_set_on_the_h200s_kernels_and_read_the_a100_unbiased():
    """The H200's broadcast kernels run at one rate whatever their bytes, its median the shipped SM cycles an element;
    a contiguous add runs faster. Counted, the cost moves EnergAIzer's A100 physics time, which did not set it, toward
    no bias at 900 MHz and over the DVFS sweep, and leaves the A10 (DRAM-bound at those ops) within 0.2 points; on
    the H200 it reads fp16 as it reads bf16, and fp32's where (DRAM-limited in the unrolled loop) fast."""
    require_path(EXTERNAL / "energaizer-artifact")
    result = _run("unvectorised_ops.py")
    assert result["sm_cycles_fitted"] == pytest.approx(result["sm_cycles_shipped"], abs=5e-4)
    kernels = {r["item"]: r for r in result["kernels"]}
    broadcast = [r for r in kernels.values() if r["op"] in ("where", "mask_add", "div")]
    assert len(broadcast) == 7 and all(2.3 < r["ps_an_element"] < 2.7 for r in broadcast)
    assert kernels["add/elements268435456/bf16"]["ps_an_element"] < 0.6 * min(r["ps_an_element"] for r in broadcast)
    physics = {(r["set"], r["gpu"], r["physics"]): r for r in result["physics"]}
    for where in ("900 MHz", "A100 DVFS sweep"):
        before, after = (physics[(where, "a100-pcie-40gb", p)] for p in ("vectorised", "unvectorised cost"))
        assert abs(after["time_bias"]) < abs(before["time_bias"]) and after["energy_mape"] < before["energy_mape"]
    a10 = [physics[("900 MHz", "a10", p)]["energy_mape"] for p in ("vectorised", "unvectorised cost")]
    assert abs(a10[1] - a10[0]) <= 0.2
    h200 = [physics[("H200 eager passes", "h200", p)]["energy_mape"] for p in ("vectorised", "unvectorised cost")]
    assert h200[1] < h200[0]
    # where it was not set: fp16 as bf16, in time within 5 %; fp32 where and division run slower than physics reads
    check = {r["item"]: r for r in result["dtype_check"]}
    assert len(check) == 5 and all(abs(r["time_bias"]) < 5 for item, r in check.items() if item.endswith("/fp16"))
    assert check["where/batch384/rows1024/cols1024/fp32"]["time_bias"] < -10
    passes = result["pass_check"]  # Llama-3-8B and Mistral-7B eager prefill: the cost takes part of the shortfall
    assert len(passes) == 5 and all(r["energy_bias_without"] < r["energy_bias_with"] < 0 for r in passes)


def test_the_experiments_read_the_repositorys_data_wherever_they_run(tmp_path):
    """Their default store is the repository's data/, not a path relative to the working directory: from another
    folder a script once read nothing and said its collection had no host-bound rows."""
    from_root = _run_args("host_dispatch.py")
    out = subprocess.run([sys.executable, str(REPO / "experiments" / "host_dispatch.py"), "--json"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == from_root and from_root["summary"]["rows"] > 0


def test_a_sweep_s_json_in_chunks_is_the_same_text_in_less_memory():
    result = _run_args("sweep_json_memory.py", "--configurations", "2000", "--chunk-rows", "200")
    assert result["points"] == 2000 and result["same"]
    assert result["chunked_peak_mb"] < 0.6 * result["whole_peak_mb"]


def test_the_trace_reading_script_reads_a_trace_and_serves_its_load():
    result = _run_args("trace_reading.py", "--rows", "2000")
    assert result["rows"] == 2000 and result["kept"] + result["left_out"] == 2000 and result["left_out"] > 0
    assert result["request_rate"] > 0 and result["read_requests_cpu_s"] > 0 and result["energy_kwh"] > 0
    # its week (to its last arrival) hour by hour and minute by minute, each window at its own rate
    windows = result["windows"]
    assert windows["3600"]["windows"] == 168 and 167 * 60 < windows["60"]["windows"] <= 168 * 60
    assert all(v["energy_kwh"] > 0 and v["j_per_output_token"] > 0 for v in result["windows"].values())
    # autoscaled, each hour on one instance at least and at most the fleet
    scaled = result["autoscaled"]
    assert 168 <= scaled["instance_hours"] <= 168 * scaled["fleet"]
    # its starts cost a little more, its spares idle more again; headroom keeps more instances on
    assert scaled["energy_kwh"] <= scaled["cold_start"]["energy_kwh"] < scaled["spares_idle"]["energy_kwh"]
    assert scaled["cold_start"]["standby_kwh"] == pytest.approx(
        scaled["cold_start"]["energy_kwh"] - scaled["energy_kwh"], rel=1e-6, abs=1e-9)
    assert scaled["headroom"]["instance_hours"] >= scaled["instance_hours"] == scaled["spares_idle"]["instance_hours"]
    # a latency target: as many instances or more, its requests' first token as soon or sooner
    target = scaled["ttft_target"]
    assert target["instance_hours"] >= scaled["instance_hours"] and target["ttft_s"] <= scaled["ttft_s"]
    assert scaled["worst_hour_ttft_s"] >= scaled["ttft_s"] > 0 and scaled["ttft_p99_s"] > scaled["ttft_s"]
    tail = scaled["ttft_p99_target"]
    assert tail["instance_hours"] >= scaled["instance_hours"] and tail["ttft_p99_s"] <= scaled["ttft_p99_s"]
    # and one on the gaps between tokens: as many instances or more, no hour's 99th percentile later, the worst
    # hour's past the week's all together
    gaps = scaled["itl_p99_target"]
    assert gaps["instance_hours"] >= scaled["instance_hours"] and gaps["itl_p99_s"] <= scaled["itl_p99_s"]
    assert gaps["worst_hour_itl_p99_s"] <= scaled["worst_hour_itl_p99_s"]
    assert scaled["worst_hour_itl_p99_s"] >= scaled["itl_p99_s"] * (1 - 1e-7) > 0  # (the week's to 1e-7 of it)
    # reactive, each hour on what the hour before needed: as many instance-hours but a shift, and its first tokens
    # no sooner (an hour that outgrew the one before queues); headroom leaves fewer hours with requests waiting
    late, kept = scaled["reactive"], scaled["reactive_headroom"]
    assert late["ttft_s"] >= scaled["ttft_s"] * (1 - 1e-9) and late["instance_hours"] == scaled["instance_hours"]
    assert kept["hours_ending_with_backlog"] <= late["hours_ending_with_backlog"]
    # scaling a minute after each hour's load changes: its first tokens no later than a whole hour on, no fewer
    # instance-hours than sized ahead (it scales in no sooner)
    minute = scaled["reactive_minute"]
    assert minute["ttft_s"] <= late["ttft_s"] and minute["instance_hours"] >= scaled["instance_hours"] * (1 - 1e-9)
    # on one instance, queued: every figure finite, the waits none or some
    assert result["queued_on_one"]["energy_kwh"] > 0 and result["queued_on_one"]["wait_s"] >= 0
    # the week whose lengths follow the day: its length classes nearer a grid for every hour than its mean lengths
    energy = {k: v["energy_kwh"] for k, v in result["lengths_by_hour"].items()}
    own = energy["every hour its own"]
    assert abs(energy["length classes"] - own) < abs(energy["mean lengths"] - own)


def test_the_sweep_scale_out_script_runs_both_ways_and_gets_the_same_points():
    """`sweep_scaleout.py` in-process and on a two-worker LocalCluster (it once failed before either: in-process work
    was handed a worker count, which the executor refuses)."""
    pytest.importorskip("dask.distributed", reason="needs the [dask] extra")
    out = subprocess.run([sys.executable, str(REPO / "experiments" / "sweep_scaleout.py"), "--configurations", "2000"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "the same points both ways: True"
    assert [line.split()[0] for line in lines[:2]] == ["in-process", "LocalCluster"]
    assert "2,000 configurations" in lines[0]


def test_chat_generations_score_ml_energy_v1_at_the_default_host_and_each_machines_own():
    """ML.ENERGY v1's batch-1 chat generations (7B and 13B LLaMA-architecture models on an A100, an A40 and a V100):
    every row scored at the default dispatch and at its machine's, read from the machine's other models' rows; physics
    has no interval, the hybrid one for every GPU."""
    require_path(EXTERNAL / "mlenergy-v1" / "runs.csv")
    out = _run_args("chat_generations.py", "--input-len", "256")
    rows = {(r["host"], r["estimator"], r["gpu"], r["size"]): r for r in out["summary"]}
    gpus, sizes = ("a100-sxm4-40gb", "a40", "v100-sxm2"), ("llama-2-7b", "llama-2-13b")
    assert set(rows) == {(h, e, g, m) for h in ("default", "machine's") for e in ("hybrid", "physics") for g in gpus
                         for m in sizes}
    assert {(g, m): r["rows"] for (h, e, g, m), r in rows.items() if h == "default" and e == "physics"} == {
        ("a100-sxm4-40gb", "llama-2-7b"): 20, ("a40", "llama-2-7b"): 24, ("v100-sxm2", "llama-2-7b"): 20,
        ("a100-sxm4-40gb", "llama-2-13b"): 24, ("a40", "llama-2-13b"): 28, ("v100-sxm2", "llama-2-13b"): 24}
    assert all((r["coverage_pct"] is None) == (e == "physics") for (h, e, g, m), r in rows.items())
    machines = out["machine_dispatch_us"]
    assert {m["gpu"] for m in machines} == set(gpus)
    assert all(0 < m["dispatch_us"] < 1000 for m in machines)  # within what a workload may state (1 ms)


def test_fused_moe_kernels_score_each_published_set_against_physics_of_its_moe_block():
    """Every published fused_moe time (data/published) beside physics' time of the same MoE block: each set's every
    token count once, its band's summary over them; physics of a block grows with its tokens (more experts run, each
    over more of them), as the published times do, and a bf16 decode batch's experts read their weights at physics'
    pace within a tenth (Mixtral on the H100, Qwen3-30B-A3B on the A100-PCIe, 8-256 tokens)."""
    import yaml

    out = _run_args("fused_moe_kernels.py")
    sets = yaml.safe_load((REPO / "data" / "published" / "fused_moe_kernels.yaml").read_text())["sets"]
    assert len(out["rows"]) == sum(len(s["us"]) for s in sets)
    for s in sets:
        mine = sorted((r["tokens"], r["physics_us"], r["measured_us"]) for r in out["rows"] if r["set"] == s["name"])
        assert [t for t, _, _ in mine] == sorted(s["us"]) and all(p > 0 for _, p, _ in mine)
        assert all(b[1] >= a[1] for a, b in zip(mine, mine[1:]))  # physics rises with the tokens
    bands = {(r["set"], r["band"]): r for r in out["summary"]}
    assert sum(r["rows"] for r in bands.values()) == len(out["rows"])
    for name in ("mixtral-bf16-h100-tp2", "qwen3-30b-a3b-bf16-a100-pcie"):
        assert 0.9 < bands[name, "mid (8-256)"]["ratio_median"] < 1.1


def test_matmul_ceilings_score_each_published_row_and_the_b200_reads_as_the_measured_gpus_do():
    """experiments/matmul_ceilings.py: every published Maximum Achievable Matmul FLOPS row once beside physics' rate
    for its shape at the card's limit; physics under each (a short run's best shape is an upper bound on a card
    held at its cap), and the B200, whose GEMMs physics prices with no measured row, within the range the GPUs set
    on measured rows give (its CTA pairs sharing an operand: 0.59 of the table before); the H200 collection's
    steady square GEMMs under the table's Hopper rows."""
    import yaml

    out = _run_args("matmul_ceilings.py")
    published = yaml.safe_load((REPO / "data" / "published" / "matmul_ceilings.yaml").read_text())["rows"]
    assert [(r["gpu"], r["dtype"]) for r in out["rows"]] == [(r["gpu"], r["dtype"]) for r in published]
    ratio = {(r["gpu"], r["dtype"]): r["physics_over_measured"] for r in out["rows"]}
    assert all(0.7 < v < 1.0 for v in ratio.values())
    others = [v for (gpu, _), v in ratio.items() if gpu != "b200"]
    assert all(min(others) <= ratio["b200", dtype] <= max(others) for dtype in ("bf16", "fp8"))
    steady = {r["dtype"]: r for r in out["h200_steady"]}
    table = {(r["gpu"], r["dtype"]): r["tflops"] for r in published}
    assert steady["bf16"]["rows"] == steady["fp8"]["rows"] == 3
    assert steady["bf16"]["tflops_max"] < table["h100-sxm", "bf16"]
    assert steady["fp8"]["tflops_max"] < table["h200", "fp8"]


def test_resnet_throughput_scores_each_published_row_and_only_saturated_rows_in_its_summary():
    """experiments/resnet_throughput.py: every published ResNet-50 row (NVIDIA's DeepLearningExamples) once, with
    joulecast's images a second; a training row's step is the vision `train-run`'s (within a third of the published
    time either way on both GPUs), an 8-GPU row's a data-parallel plan's; the summary scores only the rows whose
    published throughput saturates the GPU, every training row and the inference rows at large batches, whose
    small-batch rows sit on the benchmark's host floor; the layout pair is scored on NHWC's gain over NCHW."""
    import yaml

    out = _run_args("resnet_throughput.py")
    published = yaml.safe_load((REPO / "data" / "published" / "resnet50_throughput.yaml").read_text())
    for kind in ("training", "data_parallel", "inference"):
        rows = out[kind]["rows"]
        assert [(r["gpu"], r["precision"], r["batch"]) for r in rows] == [
            (r["gpu"], r["precision"], r["batch"]) for r in published[kind]]
        assert all(r["hybrid_images_per_s"] > 0 and r["physics_images_per_s"] > 0 for r in rows)
        assert all(r["time_ratio"] == pytest.approx(r["hybrid_images_per_s"] / r["images_per_s"]) for r in rows)
        scored = sum(s["rows"] for s in out[kind]["summary"])
        assert scored == sum(r["saturated"] for r in rows)
    assert all(r["saturated"] and 0.75 < r["time_ratio"] < 1.33 for r in out["training"]["rows"])
    inference = out["inference"]["rows"]
    best = {p: max(r["images_per_s"] for r in inference if r["precision"] == p) for p in ("FP32", "AMP")}
    assert [r["saturated"] for r in inference] == [r["images_per_s"] >= 0.85 * best[r["precision"]]
                                                    for r in inference]
    assert not any(r["saturated"] for r in inference if r["batch"] == 1)
    # 8 GPUs: each row's rate over eight one-GPU rates, published and planned; a plan's data-parallel step is never
    # faster than its GPUs' one-GPU step, nor here much slower (its gradients' all-reduce under the backward pass)
    single = {(r["platform"], r["precision"]): r for r in out["training"]["rows"]}
    for r, s in zip(out["data_parallel"]["rows"], out["scaling"]):
        one = single[r["platform"], r["precision"]]
        assert s["published"] == pytest.approx(r["images_per_s"] / (8 * one["images_per_s"]))
        assert s["planned"] == pytest.approx(r["hybrid_images_per_s"] / (8 * one["hybrid_images_per_s"]))
        assert 0.9 < s["planned"] <= 1 + 1e-9 and s["published"] < 1
    # the layout pair: its rows as published, and NHWC's gain over NCHW (cuDNN's transposes spared) a ratio of the
    # rows' own rates, more than 1 both published and estimated
    layout = out["layout"]
    assert [(r["layout"], r["images_per_s"]) for r in layout["rows"]] == [
        (r["layout"], r["images_per_s"]) for r in published["layout"]]
    (gain,) = layout["gain"]
    by = {r["layout"]: r for r in layout["rows"]}
    assert gain["published"] == pytest.approx(by["nhwc"]["images_per_s"] / by["nchw"]["images_per_s"])
    assert gain["estimated"] == pytest.approx(by["nhwc"]["hybrid_images_per_s"] / by["nchw"]["hybrid_images_per_s"])
    assert gain["published"] > 1 and gain["estimated"] > 1


def test_speed_reports_every_figure_beside_its_reference():
    """experiments/speed.py at small counts: the cold start beside the imports, each warm estimate and each whole job
    beside its numpy reference, estimate_many's three runs with their peak memory; figures present and positive
    (how fast is the script's to print, not a test's to judge)."""
    out = _run_args("speed.py", "--distinct", "200", "--repeats", "20")
    assert out["cold"]["cold_estimate_cpu_s"] > 0 and out["cold"]["import_numpy_pandas_cpu_s"] > 0
    assert len(out["warm"]) == 2 and all(w["median_cpu_ms"] > 0 and w["numpy_reference_ms"] > 0
                                         and w["kernel_rows"] > 0 for w in out["warm"])
    assert [j["job"] for j in out["jobs"]] == ["generate", "serve", "serve at a rate", "train_run"]
    assert out["jobs"][0]["steps"] == 256  # the README's generation: 256 passes, its prefill and 255 decode steps
    # serving: its step (at a rate, its grid of 21 batch sizes), the two its requests' 512-token prompts are priced
    # at (at a rate, at 6 of the grid's) and the six its gaps between tokens are read at
    assert [j["steps"] for j in out["jobs"][1:3]] == [1 + 2 + 6, 21 + 2 * 6 + 6]
    assert all(j["median_cpu_ms"] > 0 and j["numpy_reference_ms"] > 0 for j in out["jobs"])
    assert [(b["estimator"], b["repeated"]) for b in out["batch"]] == [("physics", False), ("hybrid", False),
                                                                      ("hybrid", True)]
    assert all(b["configurations"] == 200 and b["per_cpu_s"] > 0 and b["peak_mb"] > 0 for b in out["batch"])


def test_cold_start_reads_every_model_load_against_its_cards_idle_power():
    """experiments/cold_start.py: Wilkins' model-load rows on each NVIDIA system's card (the model-scale files' on
    Swing's), a GPU's mean power its energy over the seconds and GPUs, scored against the card's catalog idle power
    (what `serve` charges a cold start): every card's loads within 0.5-2x of it."""
    require_path(EXTERNAL / "wilkins-llm-inference-energy" / "model_scale_input_token_sweep.csv")
    result = _run_args("cold_start.py")
    rows = result["rows"]
    assert result["loads"] == len(rows) >= 30 and {r["gpu"] for r in rows} == set(result["by_gpu"]) == {
        "a100-pcie-40gb", "a100-sxm4-40gb", "v100-pcie-16gb"}
    assert {r["gpus"] for r in rows} == {1, 3, 4}  # the 40-70B models' loads on three or four GPUs
    for r in rows:
        assert r["ratio"] == pytest.approx(r["power_w"] / r["idle_w"]) and 0.5 < r["ratio"] < 2.0, r
    for gpu, card in result["by_gpu"].items():
        mine = [r for r in rows if r["gpu"] == gpu]
        assert card["loads"] == len(mine) and card["idle_w"] == mine[0]["idle_w"]
        assert card["idle_mape_pct"] == pytest.approx(
            100 * sum(abs(r["idle_w"] / r["power_w"] - 1) for r in mine) / len(mine))


def test_slot_wait_scores_the_chain_against_a_simulation_of_the_engines_steps():
    """experiments/slot_wait.py: every slot count, load and spread simulated and estimated (serve's `slot_wait_s`);
    the wait rising with the load at each; the estimate within 30 % of the simulation everywhere at 20,000
    requests a run (the shipped figures are at 100,000)."""
    rows = _run_args("slot_wait.py", "--requests", "20000")
    assert {(r["slots"], r["load"], r["cv"]) for r in rows} == {
        (s, load, cv) for s in (8, 32, 256) for load in (0.5, 0.8, 0.9, 0.95) for cv in (0.0, 1.0)}
    for slots in (8, 32, 256):
        for cv in (0.0, 1.0):
            mine = sorted((r for r in rows if r["slots"] == slots and r["cv"] == cv), key=lambda r: r["load"])
            for column in ("simulated_wait_s", "estimated_wait_s", "simulated_p99_s", "estimated_p99_s"):
                assert [r[column] for r in mine] == sorted(r[column] for r in mine), (slots, cv, column)
    for r in rows:
        assert r["estimated_wait_s"] == pytest.approx(r["simulated_wait_s"], rel=0.3), r
        assert r["estimated_p99_s"] == pytest.approx(r["simulated_p99_s"], rel=0.5), r  # at 100,000: 35 % at most


def test_token_gaps_score_serve_s_quantiles_against_ml_energy_v3_s_inter_token_latencies():
    """experiments/token_gaps.py: every v3 run at each prompt spread asked, its measured quantiles in order, its
    estimated 99th percentile past its 90th; the summary's figures its rows'. On the H100's chat runs the 99th
    percentile reads nearer than the mean step read as it."""
    require_path(EXTERNAL / "mlenergy-v3" / "raw" / "models")
    result = _run_args("token_gaps.py", "--input-len-cv", "0,3.2")
    assert [r["input_len_cv"] for r in result] == [0.0, 3.2]
    bare, spread = ({r["id"]: r for r in part["rows"]} for part in result)
    assert bare.keys() == spread.keys() and len(bare) == len(result[0]["rows"]) > 300
    for key, r in bare.items():
        assert r["median_ms"] <= r["measured_itl_p90_s"] <= r["measured_itl_p99_s"], key
        for row in (r, spread[key]):
            assert row["itl_p90_s"] <= row["itl_p99_s"] and row["tpot_ms"] > 0, key
    for part in result:
        table = {(s["gpu"], s["task"]): s for s in part["summary"]}
        rows = part["rows"]
        assert table["all", "all"]["rows"] == len(rows)
        for (gpu, task), s in table.items():
            mine = [r for r in rows if gpu == "all" or (r["gpu"], r["task"]) == (gpu, task)]
            assert s["rows"] == len(mine)
            assert s["p99_mape"] == pytest.approx(
                sum(abs(r["itl_p99_s"] / r["measured_itl_p99_s"] - 1) for r in mine) / len(mine) * 100)
    chat = {(s["gpu"], s["task"]): s for s in result[1]["summary"]}["h100-sxm", "lm-arena-chat"]
    assert chat["p99_mape"] < chat["p99_tpot_mape"]
