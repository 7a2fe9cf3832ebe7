"""The accuracy audit on real EnergAIzer rows: figures that agree with `estimate`, gating per partition, the
report and the CLI's JSON and exit codes."""

import json

import numpy as np
import pytest

import joulecast
from joulecast.cli import main
from joulecast.data import store
from joulecast.data.errors import InputError
from joulecast.data.importers import import_source
from joulecast.features.refs import resolve
from joulecast.training.audit import PARTITIONS, audit, score_measurements
from joulecast.training.report import write_report


@pytest.fixture(scope="module")
def a10(energaizer):
    rows = import_source("energaizer", energaizer)
    return rows[rows["gpu"] == "a10"].reset_index(drop=True)


@pytest.fixture(scope="module")
def scored(a10):
    return score_measurements(a10)


def test_scores_agree_with_estimate(a10, scored):
    frame, dropped = scored
    assert len(frame) == int((~a10["flag_failed_run"]).sum()) and dropped == {"failed run": 2}
    for row in frame.sample(3, random_state=0).itertuples():
        # EnergAIzer's rows state no host: scored with the interval an estimate of such a machine gives, the
        # measured hosts' reach joined (estimated at the default host, its point is the same)
        workload = resolve(row.workload_ref)
        assert workload.host_dispatch_s is None
        est = joulecast.estimate(workload, row.gpu, sm_clock_mhz=None if np.isnan(row.sm_clock_min_mhz)
                                 else row.sm_clock_min_mhz, power_limit_w=row.power_limit_w)
        assert row.pred_energy_j == pytest.approx(est.energy_j, rel=1e-6)
        assert row.pred_time_s == pytest.approx(est.time_s, rel=1e-6)
        assert (row.lo_energy_j, row.hi_energy_j) == pytest.approx(est.energy_interval_j, rel=1e-6)
        assert row.ape_energy == pytest.approx(abs(est.energy_j / row.energy_j - 1) * 100)


def test_partitions_cover_every_row_and_gate_on_the_target(scored):
    frame, _ = scored
    result = audit(frame, target=8.0, min_rows=20)
    s, parts = result.summary, result.partitions
    assert set(parts["by"]) == set(PARTITIONS)
    for by in PARTITIONS:
        assert parts.loc[parts["by"] == by, "rows"].sum() == len(frame)
    assert s["energy_mape"] == pytest.approx(frame["ape_energy"].mean(), abs=1e-3)
    assert s["power_p90_ape"] == pytest.approx(np.percentile(frame["ape_power"], 90), abs=1e-3)
    small = parts[parts["rows"] < 20]
    assert len(small) and not small["gated"].any() and small["pass"].isna().all()
    gated = parts[parts["gated"]]
    expected = (gated["energy_mape"] <= 8.0) & (gated["power_mape"] <= 8.0)
    assert (gated["pass"] == expected).all()
    assert s["pass"] == (bool(expected.all()) and s["energy_mape"] <= 8 and s["power_mape"] <= 8)
    assert len(s["worst"]) == 10 and s["worst"][0]["ape_energy"] == pytest.approx(frame["ape_energy"].max(), abs=1e-3)
    # beside each coverage, the range chance allows it with a family's rows sharing an offset
    assert ((parts["chance_low"] <= parts["chance_high"]) & parts["chance_low"].between(0, 100)).all()
    assert parts["p_in_target"].between(0, 1).all()
    assert (parts.loc[parts["coverage"].between(86, 94), "p_in_target"] == 1).all()  # inside the target: nothing to test
    assert s["chance_low"] <= s["chance_high"] and list(s["coverage_offsets"]) == ["a10"]
    assert all(s["coverage_offsets"]["a10"][k] >= 0 for k in ("tau", "sigma"))

    strict = audit(frame, target=0.01)
    assert not strict.passed and "overall" in strict.summary["failed"] and "gpu=a10" in strict.summary["failed"]
    assert audit(frame, target=1e4).passed
    only_gpu = audit(frame, target=0.01, gate_by=("gpu",))
    assert set(only_gpu.partitions.loc[only_gpu.partitions["gated"], "by"]) == {"gpu"}


def test_bad_audit_settings_name_the_option(scored):
    frame, _ = scored
    with pytest.raises(InputError, match=r"--gate-on: 'watts' is not allowed; choose from energy, time, power"):
        audit(frame, gate_on=("watts",))
    with pytest.raises(InputError, match="--gate-by"):
        audit(frame, gate_by=("colour",))
    with pytest.raises(InputError, match="--target: must be a positive percentage"):
        audit(frame, target=0)
    with pytest.raises(InputError, match="--min-rows: must be at least 1, got -1"):
        audit(frame, min_rows=-1)


def test_report_is_self_contained(scored, tmp_path):
    result = audit(scored[0])
    report, summary = write_report(result, tmp_path / "r")
    text = report.read_text()
    assert text.count('<img src="data:image/png;base64,') == 4 and "http" not in text.split("<body>")[1][:2000]
    assert json.loads(summary.read_text())["energy_mape"] == result.summary["energy_mape"]


def test_cli_json_exit_codes_and_mlflow(a10, tmp_path, capsys):
    store.write_part(a10, tmp_path / "store", "a10", "subset")
    base = ["audit", "--store", str(tmp_path / "store"), "--report", str(tmp_path / "report"), "--json"]
    # physics alone misses the 8 % target: overall on the A10 it reads 8.0 % energy since its static power under
    # load (24 % before), so on some of its partitions
    assert main(base + ["--estimator", "physics", "--no-mlflow"]) == 3
    payload = json.loads(capsys.readouterr().out)
    assert not payload["pass"] and payload["failed"] and payload["coverage"] is None
    worst = max(p["energy_mape"] for p in payload["partitions"] if p["pass"] is not None)
    assert payload["energy_mape"] > 5 and worst > 8
    assert payload["in_sample_sources"] == []
    part = payload["partitions"][0]
    assert {"by", "value", "rows", "energy_mape", "time_mape", "power_mape", "coverage", "pass"} <= set(part)
    assert {p["by"] for p in payload["partitions"]} == set(PARTITIONS)

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(base + ["--target", "1000", "--tracking-uri", uri]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["pass"] and 0 < payload["coverage"] <= 100
    assert payload["in_sample_sources"] == ["energaizer"]  # the shipped model was trained on these rows: a fit
    import mlflow

    mlflow.set_tracking_uri(uri)
    run = mlflow.get_run(payload["mlflow_run_id"])
    assert run.data.metrics["energy_mape"] == pytest.approx(payload["energy_mape"], abs=1e-3)
    assert "energy_mape_gpu_a10" in run.data.metrics and run.data.tags["audit_pass"] == "True"
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert artifacts == {"report.html", "audit.json"}
    # the report says what the CLI says of in-sample figures, and its wide tables scroll in their own box
    page = (tmp_path / "report" / "report.html").read_text()
    assert "class='caveat'>The estimator was trained on energaizer" in page
    assert page.count("<div class='wide'><table>") == page.count("<table>") >= 3
    experiment = mlflow.get_experiment(run.info.experiment_id)  # artifacts beside the SQLite store, not in ./mlruns
    assert experiment.artifact_location == (tmp_path / "mlruns").as_uri()


def test_cli_text_says_the_verdict_the_note_on_in_sample_data_and_where_the_report_is(a10, tmp_path, capsys):
    """Without --json: the rows scored, the overall figures, a partition table, PASS or FAIL with the partitions that
    failed, the in-sample note where the estimator was trained on the set, and the report's files."""
    store.write_part(a10, tmp_path / "store", "a10", "subset")
    report = tmp_path / "report"
    base = ["audit", "--store", str(tmp_path / "store"), "--report", str(report), "--no-mlflow"]
    assert main([*base, "--estimator", "physics"]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "audit of physics" and lines[1].endswith(": 95 rows (dropped: failed run: 2)")
    assert lines[2].startswith("overall MAPE: energy ") and not any(line.startswith("note:") for line in lines)
    assert lines[-2].startswith("FAIL (target 8 % MAPE on energy, power): ")
    assert lines[-1] == f"report: {report / 'report.html'}, {report / 'audit.json'}"
    table = [line.split() for line in lines if line.split()[:2] == ["gpu", "a10"]]
    assert len(table) == 1 and table[0][2] == "95"
    assert main([*base, "--target", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("audit of shipped default (trained ")
    assert any(line.startswith("note: the estimator was trained on energaizer: these figures measure its fit")
               for line in lines)
    assert "PASS: every gated partition within target 1000 % MAPE on energy, power" in lines


def test_cli_audit_needs_one_data_source(capsys):
    assert main(["audit", "--no-mlflow"]) == 2
    assert "--store: give either --store PATH or --source NAME --path PATH" in capsys.readouterr().err
    assert main(["audit", "--source", "energaizer", "--no-mlflow"]) == 2
    assert "--path: --source energaizer needs --path" in capsys.readouterr().err


def test_cli_audit_checks_its_tracking_store_before_scoring(capsys, tmp_path):
    assert main(["audit", "--store", "data/measurements", "--tracking-uri", "foo://bar", "--report",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("joulecast: error: --tracking-uri: cannot log to 'foo://bar' (")
    assert not any(tmp_path.iterdir())  # no report of an audit that did not run


def test_cli_audit_names_its_data_flags_and_leaves_no_tracking_store_for_data_that_is_not_there(capsys, tmp_path,
                                                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default tracking store, mlflow.db, would be made here
    for argv, line in ([["--store", "nowhere"], "--store: nowhere does not exist"],
                       [["--source", "zeuss", "--path", "x"], "--source: unknown 'zeuss'; did you mean 'zeus'?"],
                       [["--source", "zeus", "--path", "x"], "--path: x holds none of summary_power_*.csv"],
                       [["--store", "."], "--store: no measurements in .: a store holds GPU/COLLECTION/part-*.parquet "
                                          "files (one GPU's folder or collection is read too)"]):
        assert main(["audit", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"joulecast: error: {line}") and err.count("\n") == 1
    assert not any(tmp_path.iterdir())  # before, an audit of a store not there made mlflow.db


def test_an_audit_of_a_set_that_names_no_workload_says_what_scores_it(capsys, tmp_path, external):
    """Zeus' rows are whole training epochs, NV-DVFS' applications' own kernels: no row names a workload an estimate
    lowers, so the audit has nothing to score, and says which scripts do (before: the dropped count alone)."""
    for source, folder in (("zeus", "zeus-nsdi23-powerlimit"), ("nvdvfs", "nv-dvfs-benchmark-v100-rtx8000")):
        assert main(["audit", "--source", source, "--path", str(external / folder), "--no-mlflow", "--report",
                     str(tmp_path / source)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("joulecast: error: measurements: no usable rows to audit (dropped: no workload (kernel "
                              "list none): ") and err.count("\n") == 1
        assert "name no workload that an estimate can lower: the scripts in experiments/ score such sets" in err


def test_dropped_rows_read_as_words():
    from joulecast.training.dataset import dropped_text

    assert dropped_text({"failed run": 13, "several GPUs": 0, "no workload (kernel list none)": 1609}) == \
        "failed run: 13, no workload (kernel list none): 1,609"
    assert dropped_text({}) == "none"
