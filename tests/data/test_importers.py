"""The mlenergy, zeus and nvdvfs importers on the real shared files: row counts and values checked by hand."""

import json

import pytest

from joulecast.cli import main
from joulecast.data.errors import InputError
from joulecast.data.importers import import_source
from joulecast.data.schema import validate_measurements
from joulecast.data.store import load_store
from joulecast.features.refs import resolve


def test_mlenergy_llm_rows(external):
    t = validate_measurements(import_source("mlenergy", external))  # the parent folder: v2 and v3 together
    # v2: 314 llm_text_generation of 356 rows; v3: 565 family 'llm' of 838 rows (PROVENANCE splits).
    assert t["measurement_id"].str.startswith("mlenergy-v2").sum() == 314
    assert t["measurement_id"].str.startswith("mlenergy-v3").sum() == 565
    v3 = t[t["provenance"].str.startswith("mlenergy-v3/llm_mllm_runs.csv row 2;")].iloc[0]
    # Qwen3-14B gpqa on one B200: 7.9973 running requests at 234.060505 tok/s, 1.366263 J per output token.
    assert v3.time_s == pytest.approx(7.9973 / 234.060505)
    assert v3.energy_j == pytest.approx(1.366263 * 7.9973)
    assert v3.power_w == pytest.approx(319.78831, rel=1e-5)  # equals the source's avg_power_watts
    # the catalog holds Qwen3-14B: a decode step of it, partial (the prompts of v3's steps are not recorded)
    assert (v3.gpu, v3.num_gpus, v3["dtype"], v3.kernel_list, v3.model) == ("b200", 1, "bf16", "partial", "qwen3-14b")
    v2 = t.set_index("provenance").loc["mlenergy-v2/llm_mllm_runs.csv row 2"]
    # gemma-2-27b on 4 A100s: 230.644433524673 J per request of 392.47133 tokens at 1051.33545 tok/s.
    assert v2.power_w == pytest.approx(230.644433524673 / 392.47133333333335 * 1051.3354539260472)
    assert (v2.gpu, v2.num_gpus) == ("a100-sxm4-40gb", 4)


def test_mlenergy_catalog_models_rebuild_as_serving_steps(external):
    from joulecast.data.importers.mlenergy import V2_PROMPT_TOKENS

    t = import_source("mlenergy", external / "mlenergy-v2")
    lowered = t[t["kernel_list"] == "lowered"]
    # Llama-3.1's Instruct models, each its own catalog entry (Llama 3's shapes, a longer context)
    assert set(lowered["model"]) == {"llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "mixtral-8x7b"}
    # Mixtral-8x7B's 18 rows all ran on 4 GPUs: scored (experiments/serving_jobs.py), never trained on
    assert lowered.loc[lowered["model"] == "mixtral-8x7b", "num_gpus"].tolist() == [4] * 18
    # v2's rows are serving steps: the decodes and the arriving prompts, of an assumed mean length the provenance says
    row = lowered.set_index("provenance").loc[f"mlenergy-v2/llm_mllm_runs.csv row 25; mean prompt assumed = "
                                              f"{V2_PROMPT_TOKENS} tokens (prompts not recorded)"]
    assert row.workload_ref == (f"serve:llama-3.1-70b?batch=128&input_len={V2_PROMPT_TOKENS}&output_len=455.8"
                                "&dtype=bf16&engine=vllm-0.5.4&tp=8")
    assert row.seq == round(V2_PROMPT_TOKENS + 455.8 / 2)  # the running requests' mean context
    w = resolve(row.workload_ref)
    assert w.phase == "decode" and w.kernel_count > 0 and w.seq == row.seq
    assert w.launch_mode == "graph"  # vLLM replays decode steps as CUDA graphs
    assert w.engine == "vllm-0.5.4"  # v2's engine, whose host work per step the physics adds
    v3 = import_source("mlenergy", external / "mlenergy-v3")
    # v3's steps also ran prompts that are not recorded: its references are partial, and no engine stands for them
    assert set(v3["kernel_list"]) == {"partial", "none"}
    partial = v3[v3["kernel_list"] == "partial"]
    assert set(partial["model"]) == {"llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b", "llama-3.1-405b", "qwen3-8b",
                                     "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b"}
    # Llama-3.1-405B: bf16 on 8 B200s, Meta's FP8 checkpoint on 4 B200s and 8 H100s, its weights fp8
    big = partial[partial["model"] == "llama-3.1-405b"].groupby(["gpu", "num_gpus", "dtype"]).size()
    assert big.to_dict() == {("b200", 4, "fp8"): 7, ("b200", 8, "bf16"): 12, ("h100-sxm", 8, "fp8"): 8}
    assert resolve(partial["workload_ref"].iloc[0]).engine is None


def test_zeus_epochs(external):
    t = validate_measurements(import_source("zeus", external / "zeus-nsdi23-powerlimit"))
    assert len(t) == 453 + 270 + 410 + 476
    assert t["gpu"].value_counts().to_dict() == {"v100": 476, "a40": 453, "rtx6000": 410, "p100": 270}
    row = t.set_index("measurement_id").loc["zeus:a40:cifar100:shufflenetv2:bs1024:adadelta:pl100"]
    assert row.time_s == pytest.approx(27.13) and row.power_w == pytest.approx(106.88881213499654)
    assert row.energy_j == pytest.approx(2899.8934732224566)  # the shared file's derived column
    assert row.phase == "training" and row.power_limit_w == 100


def test_nvdvfs_kernels(external):
    t = validate_measurements(import_source("nvdvfs", external / "nv-dvfs-benchmark-v100-rtx8000"))
    assert t["gpu"].value_counts().to_dict() == {"quadro-rtx-8000": 1580, "v100-pcie": 1580}
    row = t.set_index("measurement_id").loc["nvdvfs:v100-pcie:real:BlackScholes:BlackScholesGPU:input000:1087MHz"]
    assert row.time_s == pytest.approx(0.91044e-3) and row.power_w == pytest.approx(157.9836)
    assert row.energy_j == pytest.approx(157.9836 * 0.91044e-3)
    assert (row.sm_clock_mhz, row.memory_clock_mhz, row.power_limit_w) == (1087, 877, 250)


def test_unknown_source_and_wrong_folder(external):
    with pytest.raises(InputError, match="SOURCE: unknown 'mlperf'; allowed: energaizer, mlenergy, zeus, nvdvfs"):
        import_source("mlperf", external)
    with pytest.raises(InputError, match="PATH: .* holds none of summary_power"):
        import_source("zeus", external / "mlenergy-v2")


def test_import_twice_adds_nothing(external, tmp_path, capsys):
    path = str(external / "zeus-nsdi23-powerlimit")
    for new in (1609, 0):
        assert main(["import", "zeus", path, "--out", str(tmp_path), "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["rows"] == 1609 and summary["new_rows"] == new
    assert len(load_store(tmp_path)) == 1609
    assert main(["import", "zeus", path, "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.endswith(f"written to {tmp_path}: 0 new rows (1609 already stored)\n")


def test_an_import_of_no_rows_says_so(tmp_path, capsys):
    """Before: '0 rows from zeus', then 'written to OUT' with nothing written."""
    (tmp_path / "summary_power_v100.csv").write_text(ZEUS_HEADER)
    assert main(["import", "zeus", str(tmp_path), "--out", str(tmp_path / "store")]) == 2
    assert capsys.readouterr().err == (f"joulecast: error: PATH: {tmp_path} holds no measurement rows that the zeus "
                                       "importer reads\n")
    assert not (tmp_path / "store").exists()


ZEUS_HEADER = "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"


def test_an_energaizer_row_of_no_time_is_named(external, tmp_path, capsys):
    """Before, a ZeroDivisionError computing its power."""
    import shutil

    root = tmp_path / "energaizer-artifact"
    shutil.copytree(external / "energaizer-artifact" / "measurements", root / "measurements",
                    ignore=shutil.ignore_patterns("a100.csv", "dvfs.csv"))
    table = (root / "measurements" / "a10.csv").read_text().splitlines()
    header = table[0].split(",")
    row = table[1].split(",")
    row[header.index("time")] = "0"
    (root / "measurements" / "a10.csv").write_text("\n".join([table[0], ",".join(row)]) + "\n")
    assert main(["import", "energaizer", str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "column 'time_s' must be positive and finite (energaizer-artifact/measurements/a10.csv " \
        "row 2: 0)" in err[0]


@pytest.mark.parametrize("row, line", [
    ("squad,bert,12,adamw,125,abc,122.2", "summary_power_v100.csv row 3, column 'time_per_epoch': must be a finite "
                                          "number, got 'abc'"),
    ("squad,bert,12,adamw,125,,122.2", "row 3, column 'time_per_epoch': must be a finite number, got a blank cell"),
    ("squad,bert,12,adamw,125,inf,122.2", "row 3, column 'time_per_epoch': must be a finite number, got inf"),
    ("squad,bert,12,adamw,125,-5,122.2", "column 'time_s' must be positive and finite "
                                         "(zeus-nsdi23-powerlimit/summary_power_v100.csv row 3: -5)"),
    ('squad,"bert', "summary_power_v100.csv: not a CSV that can be read"),
    ("squad,bert,1e30,adamw,125,3007.6,122.2", "column 'batch' must hold whole numbers within 64 bits"),  # a TypeError
])
def test_a_bad_cell_of_a_published_set_is_named_by_file_line_and_column(tmp_path, capsys, row, line):
    """An edited or truncated source file: one line naming where, exit 2 (before, a pandas TypeError for text in a
    number's column, and a negative time imported silently)."""
    (tmp_path / "summary_power_v100.csv").write_text(f"{ZEUS_HEADER}squad,bert,12,adamw,100,3007.6,99.9\n{row}\n")
    assert main(["import", "zeus", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0]
