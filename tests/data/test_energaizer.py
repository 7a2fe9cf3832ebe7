import json

import pytest

from joulecast.cli import main
from joulecast.data.errors import DataError
from joulecast.data.importers.energaizer import import_energaizer, parse_name
from joulecast.data.schema import validate_measurements
from joulecast.features.refs import resolve


def test_parse_row_names():
    p = parse_name("optmodel_opt-1p3b_pbf16_b8_s2048_modeprefill_attneager_freq900_iter12.csv")
    assert (p["model"], p["dtype"], p["batch"], p["seq"], p["attention"], p["freq"]) == ("opt-1.3b", "bf16", 8, 2048, "eager", 900)
    p = parse_name("resnet101__pfp32_b64_freq900_iter693.csv")
    assert (p["model"], p["seq"], p["phase"]) == ("resnet-101", None, "inference")
    with pytest.raises(DataError, match="cannot parse"):
        parse_name("llama_pbf16_b1_freq900_iter1.csv")


# The artifact's own files (a later release's file for another GPU may sit beside them: it adds its rows, not these)
PUBLISHED = ("a10", "a100", "dvfs")


def _published(t):
    return t[t["measurement_id"].str.split(":").str[0].isin(PUBLISHED)]


def test_import_counts_and_values(energaizer):
    t = _published(validate_measurements(import_energaizer(energaizer)))
    assert len(t) == 97 + 133 + 217  # rows of a10.csv, a100.csv, dvfs.csv
    assert t["gpu"].value_counts().to_dict() == {"a100-pcie-40gb": 350, "a10": 97}
    assert t["kernel_list"].value_counts().to_dict() == {"traced": 246, "lowered": 201}
    # incomplete traces (no batch norms, residual adds or pooling; no causal-mask where): these rows take the lowering
    incomplete = t["model"].isin(["resnet-101", "mobilevit-small", "gpt2"])
    assert (t.loc[incomplete, "kernel_list"] == "lowered").all() and incomplete.sum() == 32 + 115
    assert set(t.loc[t.kernel_list == "lowered", "workload_ref"].str.extract(r"attention=(\w+)")[0]) == {"eager"}
    assert int(t["flag_failed_run"].sum()) == 13  # the 13 failed runs PROVENANCE lists
    # First row of a10.csv, by hand: 0.8594588968521826 J in 12.803888648732638 ms.
    row = t.set_index("measurement_id").loc["a10:bertmodel_large_pbf16_b1_s128_modeprefill_attneager_freq900_iter1891"]
    assert row.energy_j == pytest.approx(0.8594588968521826)
    assert row.time_s == pytest.approx(0.012803888648732638)
    assert row.power_w == pytest.approx(0.8594588968521826 / 0.012803888648732638)
    assert row.kernel_list == "traced" and row.sm_clock_mhz == pytest.approx(900.0)


def test_every_row_rebuilds_its_workload(energaizer):
    t = import_energaizer(energaizer)
    for ref in t["workload_ref"].unique():
        assert resolve(ref).kernel_count > 0


def test_import_cli_writes_a_store(energaizer, tmp_path, capsys):
    assert main(["import", "energaizer", str(energaizer), "--out", str(tmp_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == len(import_energaizer(energaizer)) >= 447
    assert (tmp_path / "a10" / "import-energaizer" / "CARD.yaml").exists()
    assert main(["import", "zeus", str(energaizer)]) == 2


def test_a_file_named_for_a_catalog_gpu_imports_as_that_gpu(energaizer, tmp_path):
    """A later release's file for another card (the H100's) names it by a catalog name or alias; anything else
    stops the import in one error naming the stem."""
    (tmp_path / "measurements").mkdir()
    (tmp_path / "workloads").symlink_to(energaizer / "workloads")
    lines = (energaizer / "measurements" / "a10.csv").read_text().splitlines()[:6]
    (tmp_path / "measurements" / "h100_sxm5.csv").write_text("\n".join(lines) + "\n")
    t = validate_measurements(import_energaizer(tmp_path))
    assert len(t) == 5 and set(t["gpu"]) == {"h100-sxm"} and set(t["power_limit_w"]) == {700.0}
    assert t["measurement_id"].str.startswith("h100_sxm5:").all() and (t["kernel_list"] == "traced").any()
    (tmp_path / "measurements" / "tpu-v5.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="unknown GPU file stem 'tpu-v5'"):
        import_energaizer(tmp_path)
