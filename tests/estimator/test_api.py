import json
import re

import pandas as pd
import pytest

import joulecast


def test_estimate_units_and_breakdown_add_up():
    est = joulecast.estimate(joulecast.workload("bert-large", batch=8, seq=384), "a10")
    assert est.energy_j > 0 and est.time_s > 0
    assert est.power_w == pytest.approx(est.energy_j / est.time_s)
    gpu = joulecast.gpu("a10")
    assert gpu.idle_power_w < est.power_w <= gpu.power_limit_w
    assert est.by_kernel_class["energy_j"].sum() == pytest.approx(est.energy_j)
    assert est.by_kernel_class["energy_share"].sum() == pytest.approx(1.0)
    assert est.launches == int(est.features["launches"].sum()) == est.by_kernel_class["launches"].sum()
    json.dumps(est.to_dict())  # JSON-ready


def test_the_power_interval_stays_under_the_limit_where_the_pass_runs_at_it():
    """A pass whose average power sits at the limit (GPT-2 prefill on the 250 W A100 PCIe card): the energy interval
    reaches past limit x the estimated time (a longer pass may take more), the power interval does not."""
    est = joulecast.estimate(joulecast.workload("gpt2", batch=8, seq=512), "a100-pcie-40gb")
    limit = joulecast.gpu("a100-pcie-40gb").power_limit_w
    assert est.power_w == pytest.approx(limit) and est.energy_interval_j[1] > limit * est.time_s
    low, high = est.power_interval_w
    assert low < est.power_w <= high * (1 + 1e-12) and high <= limit  # power_w: limit x time / time, to a rounding


def test_an_estimate_says_how_much_the_power_limit_throttles():
    """The share of GPU busy time in kernels the limit throttled and the busy-weighted SM clock, from physics'
    timeline: most of a llama-3-8b prefill at a 400 W limit on the H100, none of a host-bound GPT-2 pass; in the
    JSON summary, and a line of the CLI's table where the limit bites."""
    from joulecast import render

    capped = joulecast.estimate(joulecast.workload("llama-3-8b", batch=8, seq=1024), "h100-sxm", power_limit_w=400)
    light = joulecast.estimate(joulecast.workload("gpt2", batch=1, seq=128), "a100-pcie-40gb")
    bite, none = capped.power_limited, light.power_limited
    assert bite["throttled_busy_share"] > 0.9 and bite["busy_clock_mhz"] < 0.8 * capped.sm_clock_mhz
    assert none == {"throttled_busy_share": 0.0, "busy_clock_mhz": pytest.approx(light.sm_clock_mhz)}
    assert capped.to_dict()["throttled_busy_share"] == bite["throttled_busy_share"]
    assert "the 400 W limit throttles" in render.estimate_table(capped)
    assert "limit" not in render.estimate_table(light).split("power")[1].split("memory")[0]


def test_feature_table_has_the_analytical_columns():
    est = joulecast.estimate(joulecast.workload("gpt2", batch=1, seq=128), "h100-sxm")
    for column in ("tile_m", "tile_n", "tiles", "k_iters", "ctas_per_sm", "waves", "last_wave_occupancy", "flops",
                   "dram_bytes", "l2_bytes", "smem_bytes", "intensity_flop_per_byte", "time_s", "power_w", "u_tensor",
                   "u_dram", "energy_j"):
        assert column in est.features.columns
    assert (est.features["waves"] >= 1).all()


def test_a_newer_gpu_is_faster_on_the_same_workload():
    w = joulecast.workload("llama-3-8b", batch=8, seq=1024)
    times = {g: joulecast.estimate(w, g).time_s for g in ("a100-sxm4-80gb", "h100-sxm", "b200")}
    assert times["a100-sxm4-80gb"] > times["h100-sxm"] > times["b200"]


def test_repeated_configurations_walk_the_trees_once_and_agree_with_each_alone():
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"model": ["gpt2", "opt-1.3b", "gpt2", "gpt2", "opt-1.3b"], "gpu": "a10",
                          "batch": [4, 8, 4, 4, 8], "seq": [256, 512, 256, 256, 512]})
    many = joulecast.estimate_many(frame)
    for row in many.itertuples():
        one = joulecast.estimate(joulecast.workload(row.model, batch=row.batch, seq=row.seq), "a10")
        assert (row.energy_j, row.energy_lo_j, row.energy_hi_j) == pytest.approx(
            (one.energy_j, *one.energy_interval_j), rel=1e-12)
    assert np.array_equal(many["energy_j"].to_numpy()[[0, 2, 3]], np.full(3, many["energy_j"][0]))


def test_a_fused_forward_pass_is_its_fused_kernels_one_by_one_and_in_a_batch():
    """`fusions` on a single pass: the workload names them and lowers them (`lower`'s rules); estimate_many's
    column gives each row what its own estimate gives, its template reproducing the fused lowering."""
    import pandas as pd

    fused = joulecast.workload("llama-3-8b", batch=4, seq=512, fusions="rope,norm")
    eager = joulecast.workload("llama-3-8b", batch=4, seq=512)
    assert fused.name.endswith("/fused-norm+rope") and fused.kernels["count"].sum() < eager.kernels["count"].sum()
    one = joulecast.estimate(fused, "h100-sxm", estimator="physics")
    assert one.time_s < joulecast.estimate(eager, "h100-sxm", estimator="physics").time_s
    configs = pd.DataFrame({"model": ["llama-3-8b"] * 3, "gpu": ["h100-sxm"] * 3, "batch": [4, 4, 7],
                            "seq": [512, 512, 300], "fusions": ["norm,rope", "", ["rope", "norm"]]})
    many = joulecast.estimate_many(configs, estimator="physics")
    assert list(many["fusions"]) == ["norm,rope", "", "norm,rope"]
    assert many["energy_j"][0] == pytest.approx(one.energy_j, rel=1e-12)
    assert many["energy_j"][1] == pytest.approx(joulecast.estimate(eager, "h100-sxm", estimator="physics").energy_j,
                                                 rel=1e-12)
    odd = joulecast.estimate(joulecast.workload("llama-3-8b", batch=7, seq=300, fusions=["norm", "rope"]), "h100-sxm",
                             estimator="physics")
    assert many["energy_j"][2] == pytest.approx(odd.energy_j, rel=1e-12)
    with pytest.raises(joulecast.InputError, match=r"fusions: row 1: unknown fusion 'flash'"):
        joulecast.estimate_many(configs.assign(fusions=["", "flash", ""]))


def test_estimate_many_refuses_a_negative_clock_or_limit_rather_than_reading_it_as_the_default():
    """An empty clock or limit is the GPU's default; a negative one is out of range, named, as 0 is: it once shared
    the default's grouping key (-1) and was silently read as it."""
    import numpy as np
    import pandas as pd

    from joulecast.data.errors import InputError

    configs = pd.DataFrame({"model": "gpt2", "gpu": "h100-sxm", "phase": "prefill", "batch": 64, "seq": 512,
                            "sm_clock_mhz": [np.nan, 1200.0]})
    many = joulecast.estimate_many(configs, estimator="physics")
    assert many["time_s"].iloc[1] > many["time_s"].iloc[0]  # the lower locked clock is slower than the default
    for column, value in (("sm_clock_mhz", -1.0), ("power_limit_w", -5.0)):
        with pytest.raises(InputError, match=column):
            joulecast.estimate_many(configs.assign(**{column: [np.nan, value]}), estimator="physics")


def test_estimate_many_shows_a_bad_size_as_the_number_given():
    """The message shows the value as given (-8), not numpy's repr of it (np.int64(-8)); a row whose batch x seq
    passes the tokens a pass holds is named too."""
    import pandas as pd

    from joulecast.data.errors import InputError

    configs = pd.DataFrame({"model": "gpt2", "gpu": "a10", "phase": "prefill", "batch": [1, -8], "seq": 64})
    with pytest.raises(InputError, match=r"batch: row 1: must be a whole number .*, got -8$"):
        joulecast.estimate_many(configs, estimator="physics")
    configs["batch"] = [1, 2**20]
    configs["seq"] = [64, 2**12]
    with pytest.raises(InputError, match=r"^batch: row 1: batch x seq = 4,294,967,296 tokens; at most 2,147,483,648$"):
        joulecast.estimate_many(configs, estimator="physics")


@pytest.mark.parametrize("column, cell, said", [
    ("model", {"model_type": "gpt2"}, "a catalog model name or a config.json path, got a mapping"),
    ("model", None, "a catalog model name or a config.json path, got nothing"),
    ("gpu", ["a10"], "a catalog GPU name, got a list"),
    ("gpu", 7, "a catalog GPU name, got a number"),
])
def test_estimate_many_names_the_row_whose_model_or_gpu_is_no_name(column, cell, said):
    """A model or GPU cell that is no name (a config mapping, a list, an empty cell) is one line naming its column
    and row: before, a mapping or list raised Python's 'unhashable type' from the lookup; a path's text still reads."""
    import pandas as pd

    configs = pd.DataFrame({"model": ["gpt2", "gpt2"], "gpu": ["a10", "a10"], "batch": 1, "seq": 64})
    configs[column] = configs[column].astype(object)
    configs.at[1, column] = cell
    with pytest.raises(joulecast.InputError, match=rf"^{column}: row 1: {re.escape(said)}"):
        joulecast.estimate_many(configs, estimator="physics")


@pytest.mark.parametrize("given, said", [
    ({}, "got a mapping"), (["physics"], "got a list"), (1.5, "got a number (1.5)"), (b"physics", "got bytes"),
    ("x" * 300, "is not an estimator folder"),  # a name too long for the file system: no OSError
])
def test_an_estimator_that_is_no_name_is_one_line(given, said):
    """`estimator` anything but None, text, a path or a loaded model is refused in one line naming it, before the
    process's cache of loaded models hashes it (a mapping raised 'unhashable type', a number AttributeError, a
    300-character name OSError); a path object reads as its text."""
    work = joulecast.workload("gpt2")
    with pytest.raises(joulecast.InputError, match=rf"^--estimator: .*{re.escape(said)}"):
        joulecast.estimate(work, "a10", estimator=given)
    from pathlib import Path

    from joulecast.estimator.loading import load_estimator

    assert load_estimator(Path("physics")) is None and load_estimator("physics") is None


def test_estimate_many_refuses_an_unknown_column_and_names_the_row_of_an_unknown_engine():
    """A column estimate_many does not read is one line naming it and the columns it takes, not silently dropped
    (a misspelt `sm_clock` would leave every clock at its default); an engine name it does not know, its row."""
    import pandas as pd

    configs = pd.DataFrame({"model": "gpt2", "gpu": "a10", "batch": [1, 2], "seq": 64})
    with pytest.raises(joulecast.InputError, match=r"^sm_clock: unknown column; allowed: model, gpu, phase, "):
        joulecast.estimate_many(configs.assign(sm_clock=900), estimator="physics")
    with pytest.raises(joulecast.InputError, match=r"^engine: row 1: unknown 'vllm-9'; did you mean "):
        joulecast.estimate_many(configs.assign(engine=["vllm-0.5.4", "vllm-9"]), estimator="physics")
    # a cell that is no name is refused, not read as no engine (as a list or a number once was); empty is none
    for cell, said in ((["vllm-0.5.4"], "a list"), (3, r"a number \(3\)"), (True, "true or false")):
        with pytest.raises(joulecast.InputError, match=rf"^engine: row 1: a serving engine's name, or empty for "
                                                       rf"none, got {said}$"):
            joulecast.estimate_many(configs.assign(engine=pd.Series(["", cell], dtype=object)), estimator="physics")
    plain = joulecast.estimate_many(configs, estimator="physics")
    for empty in (None, float("nan"), "", "none"):
        same = joulecast.estimate_many(configs.assign(engine=pd.Series([empty, ""], dtype=object)), estimator="physics")
        assert same["energy_j"].tolist() == plain["energy_j"].tolist()


def test_estimate_many_reads_a_list_of_rows_or_a_dict_of_columns_as_a_frame():
    """Rows as dicts, or columns as lists, estimate as the DataFrame pandas makes of them (a list once said it
    needed a 'model' column it had); anything else is one line naming what it takes."""
    import pandas as pd

    rows = [{"model": "gpt2", "gpu": "a10", "batch": 1}, {"model": "gpt2", "gpu": "h100-sxm", "batch": 4}]
    frame = joulecast.estimate_many(pd.DataFrame(rows), estimator="physics")
    for given in (rows, {k: [r[k] for r in rows] for k in rows[0]}):
        pd.testing.assert_frame_equal(joulecast.estimate_many(given, estimator="physics"), frame)
    with pytest.raises(joulecast.InputError, match=r"^configs: expected a DataFrame, a list of rows \(dicts\) or a "
                                                   r"dict of columns, got text \('gpt2'\)$"):
        joulecast.estimate_many("gpt2")
    with pytest.raises(joulecast.InputError, match=r"^gpu: estimate_many needs a 'gpu' column; it has model \("):
        joulecast.estimate_many([{"model": "gpt2"}])


def test_estimate_many_names_the_row_of_a_setting_its_gpu_refuses():
    """A clock or power limit its GPU does not take is refused as the configurations' column and a row holding it."""
    import pandas as pd

    configs = pd.DataFrame({"model": "gpt2", "gpu": ["a10", "h100-sxm"], "batch": 1, "seq": 64,
                            "power_limit_w": [None, 900.0]})
    with pytest.raises(joulecast.InputError, match=r"^power_limit_w: row 1: must be between 200 and 700 W on h100"):
        joulecast.estimate_many(configs, estimator="physics")
    configs = pd.DataFrame({"model": "gpt2", "gpu": "a10", "batch": 1, "seq": 64, "sm_clock_mhz": [900.0, 50.0]})
    with pytest.raises(joulecast.InputError, match=r"^sm_clock_mhz: row 1: must be between 254 and 1695 MHz on a10"):
        joulecast.estimate_many(configs, estimator="physics")


def test_estimate_many_reads_expert_parallel_as_a_csv_writes_it_and_names_a_row_it_refuses():
    """`expert_parallel` as a bool or as a CSV cell holds it (true, False, 1, 0, empty for false); a row whose
    model has no experts to split, or a value that is neither, refused as its column and row."""
    import pandas as pd

    configs = pd.DataFrame({"model": "qwen3-30b-a3b", "gpu": "h100-sxm", "phase": "decode", "batch": 8,
                            "seq": 512, "tp": 2, "expert_parallel": ["true", "False", 1, 0, "", True]})
    many = joulecast.estimate_many(configs, estimator="physics")
    assert many["expert_parallel"].tolist() == [True, False, True, False, False, True]
    assert many["time_s"].nunique() == 2 and many["time_s"][0] == many["time_s"][2] != many["time_s"][1]
    with pytest.raises(joulecast.InputError, match=r"^expert_parallel: row 1: must be true or false, got 'maybe'$"):
        joulecast.estimate_many(configs.assign(expert_parallel=[True, "maybe", 0, 0, 0, 0]), estimator="physics")
    dense = configs.assign(model=["qwen3-30b-a3b"] * 5 + ["qwen3-8b"])
    with pytest.raises(joulecast.InputError, match=r"^expert_parallel: row 5: splits a mixture of experts' experts"):
        joulecast.estimate_many(dense, estimator="physics")


def test_a_pass_past_its_gpus_memory_names_the_largest_batch_that_fits():
    """Llama-3-8B decoding 4,096-token contexts on an A10 (24 GiB): its 15 GiB of weights leave room for 18
    sequences' KV caches, which `fits_batch` says and an estimate at 18 confirms (19 does not fit); where the weights
    alone pass the GPU (Llama-3-70B on an H100) no batch fits."""
    at = dict(phase="decode", seq=4096)
    wide = joulecast.estimate(joulecast.workload("llama-3-8b", batch=256, **at), "a10", estimator="physics")
    assert "exceeds-memory" in wide.flags and wide.fits_batch == 18
    for batch, fits in ((18, True), (19, False)):
        est = joulecast.estimate(joulecast.workload("llama-3-8b", batch=batch, **at), "a10", estimator="physics")
        assert ("exceeds-memory" not in est.flags) == fits
        assert est.fits_batch == (None if fits else 18)
    heavy = joulecast.estimate(joulecast.workload("llama-3-70b", batch=4, **at), "h100-sxm", estimator="physics")
    assert "exceeds-memory" in heavy.flags and heavy.fits_batch is None and heavy.to_dict()["fits_batch"] is None


def test_estimate_many_groups_rows_by_their_whole_structure():
    """Rows with the same model, phase, dtype, attention, launch mode, fusions, layout and engine share one structure
    (one template, lowered once) and rows differing in any of them do not; structures are numbered as they first
    appear, and each names its values as text."""
    import numpy as np

    from joulecast.estimator.many import _structures

    columns = [np.array(["gpt2", "gpt2", "bert-large", "gpt2", "gpt2"], dtype=object),
               np.array(["prefill", "decode", "prefill", "prefill", "prefill"], dtype=object),
               np.array([1, 1, 1, 1, 2], dtype=object),
               np.array([False, False, False, False, False], dtype=object)]
    codes, keys = _structures(columns)
    assert codes.tolist() == [0, 1, 2, 0, 3]
    assert keys == [("gpt2", "prefill", "1", "False"), ("gpt2", "decode", "1", "False"),
                    ("bert-large", "prefill", "1", "False"), ("gpt2", "prefill", "2", "False")]


@pytest.mark.parametrize("spelt, name", [("bfloat16", "bf16"), ("torch.float16", "fp16"), ("half", "fp16"),
                                         ("FP8", "fp8"), ("float8_e4m3fn", "fp8"), ("float32", "fp32")])
def test_a_dtype_as_pytorch_and_vllm_write_it_is_the_catalog_s(spelt, name):
    """Every entry point reads PyTorch's and vLLM's dtype names (a config's torch_dtype, vLLM's --dtype) as the
    catalog's: the same figures, and the catalog's name where a result names it."""
    one = dict(estimator="physics")
    spelt_pass = joulecast.estimate(joulecast.workload("gpt2", batch=2, seq=64, dtype=spelt), "h100-sxm", **one)
    named_pass = joulecast.estimate(joulecast.workload("gpt2", batch=2, seq=64, dtype=name), "h100-sxm", **one)
    assert spelt_pass.workload.endswith(f"/{name}") and spelt_pass.energy_j == named_pass.energy_j
    job = dict(batch=2, input_len=64, output_len=3, **one)
    assert (joulecast.generate("gpt2", "h100-sxm", dtype=spelt, **job).energy_j
            == joulecast.generate("gpt2", "h100-sxm", dtype=name, **job).energy_j)
    load = dict(input_len=64, output_len=16, concurrency=4, **one)
    served = joulecast.serve("gpt2", "h100-sxm", dtype=spelt, **load)
    assert served.dtype == name and served.energy_j == joulecast.serve("gpt2", "h100-sxm", dtype=name, **load).energy_j
    rows = joulecast.estimate_many(pd.DataFrame({"model": "gpt2", "gpu": "h100-sxm", "dtype": [spelt, name]}), **one)
    assert rows["dtype"].tolist() == [name, name] and rows["energy_j"].nunique() == 1
    swept = joulecast.sweep("gpt2", "h100-sxm", batch=1, seq=64, dtype=[spelt, name], **one).points
    assert swept["dtype"].tolist() == [name]  # two spellings of one dtype: one point
    run = dict(seq=64, global_batch=4, steps=2, **one)
    assert (joulecast.train_run("gpt2", "h100-sxm", dtype=spelt, **run).energy_j
            == joulecast.train_run("gpt2", "h100-sxm", dtype=name, **run).energy_j)
    with pytest.raises(joulecast.InputError, match="^dtype: unknown 'bfloat17'"):
        joulecast.workload("gpt2", dtype="bfloat17")


def test_a_batch_of_workloads_is_each_one_estimated_alone():
    """`estimate_batch`: several workloads on one GPU setting in one pass, each estimate the one `estimate` gives it
    alone (figures, interval, flags, reasons out of domain, memory, the largest batch that fits, its own kernel rows
    and breakdown), on a GPU trained on, a hypothetical one and physics alone; a list item that is no workload is
    one line naming it."""
    works = [joulecast.workload("gpt2", phase="prefill", batch=2, seq=128),
             joulecast.workload("llama-3-8b", phase="decode", batch=8, seq=1024, launch_mode="graph"),
             joulecast.workload("llama-3-8b", phase="prefill", batch=512, seq=8192),  # past the GPU's memory
             joulecast.workload("gpt2", phase="prefill", batch=4, seq=128, host_dispatch_s=8e-6)]
    for gpu, kw in (("a10", {}), ("h100-sxm", {"sm_clock_mhz": 1200}), ("a100-pcie-40gb:sm_count*0.5", {}),
                    ("h200", {"estimator": "physics"})):
        batch = joulecast.estimate_batch(works, gpu, **kw)
        for w, together in zip(works, batch):
            alone = joulecast.estimate(w, gpu, **kw)
            assert together.to_dict() == alone.to_dict(), (gpu, w.name)
            assert together.features.equals(alone.features)
    assert "exceeds-memory" in batch[2].flags and batch[2].fits_batch is not None  # the largest batch that fits
    with pytest.raises(joulecast.InputError, match="^workload: expected a Workload"):
        joulecast.estimate_batch([works[0], "gpt2"], "a10")
    with pytest.raises(joulecast.InputError, match="^workloads: expected a list of Workloads, got Workload"):
        joulecast.estimate_batch(works[0], "a10")
    assert joulecast.estimate_batch([], "a10") == []
