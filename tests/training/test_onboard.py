"""New-GPU onboarding: the regression rule, and `retrain` on real EnergAIzer rows with the A10 as the new GPU."""

import json
import re

import mlflow
import pandas as pd
import pytest

from joulecast.cli import main
from joulecast.data.errors import InputError
from joulecast.data.importers import import_source
from joulecast.training.onboard import compare, retrain
from joulecast.training.residual import QUICK
from joulecast.training.train import CHAMPION, MODEL_NAME, train

SMALL_GRID = ({"max_depth": 3, "learning_rate": 0.1, "n_estimators": 60, "min_child_weight": 2.0},)


def test_compare_flags_a_partition_that_loses_more_than_the_tolerance():
    before = pd.DataFrame({"by": ["gpu", "gpu", "model"], "value": ["a", "b", "m"], "energy_mape": [10.0, 10.0, 5.0],
                           "power_mape": [6.0, 6.0, 6.0]})
    after = pd.DataFrame({"by": ["gpu", "gpu", "model", "model"], "value": ["a", "b", "m", "new"], "rows": [50, 50, 3, 9],
                          "energy_mape": [12.5, 4.0, 30.0, 1.0], "power_mape": [7.0, 6.5, 6.0, 1.0]})
    table = compare(before, after, tolerance=2.0)
    # model=m has 3 rows (< 5: not compared); model=new has no "before"; gpu=a energy rose 2.5 points.
    assert set(zip(table["by"], table["value"])) == {("gpu", "a"), ("gpu", "b")}
    regressed = table[table["regressed"]]
    assert list(zip(regressed["value"], regressed["quantity"])) == [("a", "energy")]
    assert table.loc[(table["value"] == "b") & (table["quantity"] == "energy"), "change"].item() == pytest.approx(-6.0)
    assert not compare(before, after, tolerance=3.0)["regressed"].any()


@pytest.fixture(scope="module")
def setting(energaizer, tmp_path_factory):
    """EnergAIzer rows, and a registry whose champion was trained without the A10."""
    measurements = import_source("energaizer", energaizer)
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    champion = train(measurements[measurements["gpu"] != "a10"].reset_index(drop=True), tracking_uri=uri,
                     grid=SMALL_GRID, quick=True)
    return measurements, uri, champion.model_version


def test_retrain_refuses_a_candidate_that_regresses(setting, tmp_path):
    measurements, uri, champion_version = setting
    result = retrain(measurements, "a10", tolerance=-1e6, tracking_uri=uri, grid=SMALL_GRID, report_dir=tmp_path,
                     quick=True)
    assert not result.promoted and result.comparison["regressed"].all()
    assert len(result.reasons) == len(result.comparison) + 1 and "baseline trained without a10" in result.reasons[-1]
    # The A100's "before" is the baseline's: the candidate's training without the A10, on the candidate's folds.
    candidate, baseline = result.trained.model, result.baseline.model
    assert baseline.fold_of == candidate.fold_of and baseline.params == candidate.params  # the A10 has every family
    cv = result.baseline.partitions
    a100 = cv[(cv["split"] == "cv") & (cv["estimator"] == "hybrid") & (cv["value"] == "a100-pcie-40gb")]
    compared = result.comparison[(result.comparison["value"] == "a100-pcie-40gb")
                                 & (result.comparison["quantity"] == "energy")]
    assert compared["before"].item() == pytest.approx(a100["energy_mape"].item())
    # Before: the champion never saw the A10, so every A10 row is a zero-shot, spec-only estimate.
    assert set(result.before.frame["flags"]) == {"spec-only"} and result.before.summary["rows"] == 95
    assert result.after.summary["rows"] == 95 and set(result.after.frame["gpu"]) == {"a10"}
    client = mlflow.MlflowClient()
    assert str(client.get_model_version_by_alias(MODEL_NAME, CHAMPION).version) == champion_version
    run = client.get_run(result.trained.run_id)
    assert run.data.tags["promoted"] == "False" and "regressed" not in run.data.tags["decision"]
    audits = mlflow.search_runs(experiment_names=["joulecast-audit"], filter_string="tags.mlflow.runName LIKE 'retrain a10%'")
    assert len(audits) >= 2 and (tmp_path / "before" / "report.html").exists() and (tmp_path / "after" / "audit.json").exists()
    # the decision's own page: the verdict, every regressed partition shaded, the two audits linked
    page = (tmp_path / "report.html").read_text()
    assert result.report == str(tmp_path / "report.html") and "not promoted: the champion stays" in page
    assert page.count("<tr class='fail'>") == len(result.comparison) and "href='before/report.html'" in page
    with pytest.raises(InputError, match=r"--gpu: no usable measurements of 'h200'; GPUs with data: a10, a100-pcie-40gb"):
        retrain(measurements, "h200", tracking_uri=uri)


def test_cli_retrain_promotes_when_nothing_regresses(setting, energaizer, tmp_path, capsys):
    _, uri, champion_version = setting
    argv = ["retrain", "--gpu", "a10", "--import", f"energaizer={energaizer}", "--tolerance", "1000",
            "--tracking-uri", uri, "--report", str(tmp_path), "--quick", "--json"]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["promoted"] and payload["gpu"] == "a10" and payload["candidate_version"] != champion_version
    assert payload["before"]["rows"] == payload["after"]["rows"] == 95
    assert "no partition regressed by more than 1000 points" in payload["reasons"][0]
    assert payload["report"] == str(tmp_path / "report.html")
    assert "promoted to champion" in (tmp_path / "report.html").read_text()
    # --quick: the quick profile (residual.QUICK), its one hyper-parameter set
    assert payload["candidate_params"] == QUICK["grid"][0]
    mlflow.set_tracking_uri(uri)
    alias = mlflow.MlflowClient().get_model_version_by_alias(MODEL_NAME, CHAMPION)
    assert str(alias.version) == payload["candidate_version"]


def test_a_registered_model_loads_from_the_tracking_uri_given(setting, tmp_path, monkeypatch, capsys):
    """`--tracking-uri` names the registry a models:/ or runs:/ estimator comes from, whatever store the process
    points at: MLflow 3 resolved a version's logged model on the process's own store (here another one, empty), so
    the champion was 'not found' and an empty mlflow.db was made in the working folder."""
    from joulecast.estimator.loading import load_estimator_again

    _, uri, _ = setting
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    try:
        champion = mlflow.MlflowClient(tracking_uri=uri).get_model_version_by_alias(MODEL_NAME, CHAMPION)
        for name in (f"models:/{MODEL_NAME}@{CHAMPION}", f"runs:/{champion.run_id}/model"):
            model = load_estimator_again(name, uri)
            assert model is not None and model.gpus, name
        assert mlflow.get_tracking_uri() == f"sqlite:///{tmp_path / 'elsewhere.db'}"  # the process's, as it was
        # a whole job's steps come from the store named too (before, its steps read the process's: 'no MLflow store')
        job = ["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "generate", "--batch", "2", "--input-len",
               "64", "--output-len", "4", "--estimator", f"models:/{MODEL_NAME}@{CHAMPION}", "--json"]
        assert main([*job, "--tracking-uri", uri]) == 0
        assert json.loads(capsys.readouterr().out)["energy_j"] > 0
        # and a store named for an estimator that reads none is one line, not ignored
        assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--tracking-uri", uri]) == 2
        assert "--tracking-uri: applies to a models:/ or runs:/ --estimator" in capsys.readouterr().err
        # no tracking URI given: the process's store, which has no file, is named, not made empty and searched
        with pytest.raises(InputError, match=f"--tracking-uri: no MLflow store at {tmp_path / 'elsewhere.db'}"):
            load_estimator_again(f"models:/{MODEL_NAME}@{CHAMPION}", None)
        assert not any(tmp_path.iterdir())
        # a model, alias or run the store does not hold: one line naming --estimator, and MLflow's own first line
        for name in (f"models:/{MODEL_NAME}@nosuchalias", "models:/nosuchmodel@champion",
                     "runs:/0123456789abcdef/model"):
            with pytest.raises(InputError, match=rf"^--estimator: cannot load '{re.escape(name)}' \(\w+: [^\n]+\)$"):
                load_estimator_again(name, uri)
    finally:
        mlflow.set_tracking_uri(uri)
