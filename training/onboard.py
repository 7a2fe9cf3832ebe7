"""`joulecast retrain --gpu NAME`: when a new GPU's measurements arrive, retrain with them, audit the GPU before
(the current champion, zero-shot on its spec features) and after (the candidate, out of fold), and promote the
candidate to champion only if no partition regresses beyond a tolerance.

Like is compared with like: the champion's figures on the GPUs it was trained on are its own cross-validated
record (kept with the model by `train`), the candidate's are its cross-validated figures (model families out of
fold). Comparing the champion's in-sample fit with the candidate's out-of-fold errors would never promote anything.
Where the GPU is new to the champion, the other partitions' "before" is a baseline instead: the candidate's training
without the GPU's rows, on the candidate's folds and hyper-parameters, so that only the new rows differ. (Folds
balance rows, so new rows can move whole model families between folds, and a small partition's figure moves with
its fold's company; the champion may also have been trained on other data than the candidate.)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from joulecast.data.errors import InputError, field_renamed
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.estimator.loading import load_estimator
from joulecast.training.audit import (
    GATE_ON,
    MIN_ROWS,
    TOLERANCE_PTS,
    AuditResult,
    audit,
    describe_estimator,
    log_audit,
    scored_rows,
)
from joulecast.training.dataset import usable
from joulecast.training.evaluate import error_table
from joulecast.training.train import (
    CHAMPION,
    EXPERIMENT,
    MODEL_NAME,
    TrainResult,
    cv_record,
    default_tracking_uri,
    train,
    use_experiment,
)

log = logging.getLogger(__name__)
COMPARED_BY = {"gpu": "gpu", "model_family": "model"}  # train's CV partition kinds -> audit's names


@dataclass
class RetrainResult:
    gpu: str
    champion: str                 # which model was champion, in words
    before: AuditResult           # the champion on the new GPU's rows
    after: AuditResult            # the candidate, out of fold, on the new GPU's rows
    comparison: pd.DataFrame      # by, value, quantity, before, after, change, regressed
    promoted: bool
    reasons: list[str] = field(default_factory=list)
    trained: TrainResult | None = None
    baseline: TrainResult | None = None   # the candidate's training without the GPU (where it is new), same folds
    report: str | None = None     # the decision's page (`report_dir/report.html`), once written

    def summary(self) -> dict[str, Any]:
        keys = ("rows", "energy_mape", "time_mape", "power_mape", "coverage")
        return dict(gpu=self.gpu, champion=self.champion, promoted=self.promoted, reasons=self.reasons,
                    before={k: self.before.summary[k] for k in keys}, after={k: self.after.summary[k] for k in keys},
                    candidate_run_id=self.trained.run_id if self.trained else None,
                    candidate_version=self.trained.model_version if self.trained else None,
                    candidate_params=self.trained.model.params if self.trained else None,
                    comparison=self.comparison.round(3).to_dict(orient="records"), report=self.report)


def current_champion(tracking_uri: str) -> str | None:
    """`models:/joulecast@champion` where the registry at `tracking_uri` has one, else None (the shipped default)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(tracking_uri)
    try:
        mlflow.MlflowClient().get_model_version_by_alias(MODEL_NAME, CHAMPION)
    except MlflowException:
        return None
    return f"models:/{MODEL_NAME}@{CHAMPION}"


def compare(before: pd.DataFrame, after: pd.DataFrame, tolerance: float, quantities: Sequence[str] = GATE_ON,
            min_rows: int = MIN_ROWS) -> pd.DataFrame:
    """Per partition (by, value) in both tables with at least `min_rows` rows after: MAPE before and after per
    quantity, and whether it rose by more than `tolerance` points."""
    keys = ["by", "value"]
    merged = before[keys + [f"{q}_mape" for q in quantities]].merge(
        after[keys + ["rows"] + [f"{q}_mape" for q in quantities]], on=keys, suffixes=("_before", "_after"))
    merged = merged[merged["rows"] >= min_rows]
    out = [pd.DataFrame({"by": merged["by"], "value": merged["value"], "rows": merged["rows"], "quantity": q,
                         "before": merged[f"{q}_mape_before"], "after": merged[f"{q}_mape_after"]}) for q in quantities]
    table = pd.concat(out, ignore_index=True)
    table["change"] = table["after"] - table["before"]
    table["regressed"] = table["change"] > tolerance
    return table.sort_values(["by", "value", "quantity"], ignore_index=True)


def _record(cv_partitions: list[dict[str, Any]]) -> pd.DataFrame:
    """A stored cross-validated record (`train.cv_record`) as the rows `compare` reads."""
    record = pd.DataFrame(cv_partitions, columns=["by", "value", "rows", *[f"{q}_mape" for q in GATE_ON]])
    record["by"] = record["by"].map(COMPARED_BY)
    return record


def _with_zero_shot(record: pd.DataFrame, before: AuditResult) -> pd.DataFrame:
    audited = before.partitions[before.partitions["by"] == "gpu"]
    return pd.concat([record, audited[record.columns]], ignore_index=True)


def _champion_record(model: Any, before: AuditResult, gpu: str) -> pd.DataFrame:
    """The champion's figures per partition: its stored CV record; for a GPU it never saw, its zero-shot audit."""
    record = _record((model.cv.get("meta", {}).get("cv_partitions") or []) if model is not None else [])
    if ((record["by"] == "gpu") & (record["value"] == gpu)).any():
        return record  # trained on this GPU already: its CV figure, not an in-sample audit
    return _with_zero_shot(record, before)


def _baseline_record(baseline: TrainResult, before: AuditResult) -> pd.DataFrame:
    """The baseline's cross-validated figures, with the champion's zero-shot audit of the new GPU (which the
    baseline, like the champion, never saw)."""
    return _with_zero_shot(_record(cv_record(baseline.partitions)), before)


def _candidate_record(oof: pd.DataFrame, gpu: str, seen: bool) -> pd.DataFrame:
    """The candidate's out-of-fold figures per partition. Unless the champion also saw `gpu`, a model family is
    scored on the other GPUs' rows only: the rows the champion's record covers."""
    families = oof if seen else oof[oof["gpu"] != gpu]
    return pd.concat([error_table(oof, "gpu").assign(by="gpu"), error_table(families, "model_family").assign(by="model")],
                     ignore_index=True).astype({"value": str})


def retrain(measurements: pd.DataFrame, gpu: str, *, tolerance: float = TOLERANCE_PTS, tracking_uri: str | None = None,
            champion: str | None = None, out: str | Path | None = None, report_dir: str | Path = "retrain-report",
            grid: Sequence[dict[str, Any]] | None = None, log_mlflow: bool = True, progress: bool = False,
            quick: bool = False) -> RetrainResult:
    """Retrain with `gpu`'s measurements; promote the candidate only if no partition regresses (see the module doc).

    `champion`: the model to beat (default: the registry's champion, else the shipped default); `grid` and `quick`
    as for `train` (the baseline without the GPU is fitted on the same profile, with the candidate's parameters).
    """
    spec = lookup_gpu(gpu)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not math.isfinite(tolerance):
        raise InputError("--tolerance", "MAPE points a partition may lose (below 0: the points each must gain), a "
                                        f"finite number; got {tolerance!r}")
    if champion is not None:  # the model to beat, read before the training it would be compared after
        with field_renamed({"--estimator": "--champion"}):
            load_estimator(champion)
    rows, _ = usable(measurements)  # checked before training, without the physics pass that training makes
    if not (rows["gpu"] == spec.name).any():
        raise InputError("--gpu", f"no usable measurements of {spec.name!r}; GPUs with data: "
                         f"{', '.join(sorted(set(rows['gpu']))) or 'none'} (collect or import them, e.g. --store DIR or "
                         "--import SOURCE=PATH)")
    uri = tracking_uri or default_tracking_uri()
    if log_mlflow:  # a tracking store that cannot be logged to, before the first stage
        use_experiment(uri, EXPERIMENT)
    from tqdm.auto import tqdm

    stages = tqdm(total=5, desc="retrain", unit="stage", disable=not progress, dynamic_ncols=True,
                  bar_format="{desc}: {n}/{total}{postfix}")
    stages.set_postfix_str("training the candidate (grouped cross-validation)")
    if log_mlflow and champion is None:
        champion = current_champion(uri)  # before training registers a version
    trained = train(measurements, tracking_uri=uri, register=log_mlflow, promote=False, out=out, grid=grid,
                    log_mlflow=log_mlflow, progress=progress, quick=quick)
    fit_rows, fit_X = trained.table.rows[trained.fit_mask].reset_index(drop=True), \
        trained.table.X[trained.fit_mask].reset_index(drop=True)
    new = (fit_rows["gpu"] == spec.name).to_numpy()

    stages.update()
    model = load_estimator(champion)
    described = describe_estimator(champion, model)
    seen = bool(model is not None and spec.name in model.gpus)
    baseline = None
    if not seen and (~new).any():
        stages.set_postfix_str(f"training the baseline without {spec.name} on the candidate's folds")
        baseline = train(measurements, exclude_gpu=[spec.name], log_mlflow=False, register=False,
                         grid=[trained.model.params], fold_of=trained.model.fold_of, quick=quick)
    stages.update()
    stages.set_postfix_str("auditing the champion and the candidate")
    rows, X = fit_rows[new].reset_index(drop=True), fit_X[new].reset_index(drop=True)
    corr = None if model is None else model.predict(X, rows["gpu"])
    before = audit(scored_rows(rows, X, corr, model), meta=dict(estimator=described, data=f"{spec.name} measurements"))
    oof = scored_rows(fit_rows, fit_X, trained.model.oof)
    after = audit(oof[new].reset_index(drop=True),
                  meta=dict(estimator="candidate, out of fold (grouped by model family)", data=f"{spec.name} measurements"))

    stages.update()
    stages.set_postfix_str("comparing partitions")
    record = _champion_record(model, before, spec.name) if baseline is None else _baseline_record(baseline, before)
    candidate = _candidate_record(oof, spec.name, seen=seen)
    comparison = compare(record, candidate, tolerance)
    regressed = comparison[comparison["regressed"]]
    promoted = regressed.empty
    reasons = [f"{r.by}={r.value}: {r.quantity} MAPE {r.before:.2f} % -> {r.after:.2f} % (+{r.change:.2f} points, "
               f"tolerance {tolerance:g})" for r in regressed.itertuples()]
    compared_on = sorted({f"{r.by}={r.value}" for r in comparison.itertuples()})
    if promoted:
        gain = comparison[(comparison["by"] == "gpu") & (comparison["value"] == spec.name)]
        reasons.append(f"no partition regressed by more than {tolerance:g} points on {', '.join(GATE_ON)} MAPE "
                       f"({len(compared_on)} partitions compared); on {spec.name}: " + ", ".join(
                           f"{r.quantity} {r.before:.2f} % -> {r.after:.2f} %" for r in gain.itertuples()))
    if baseline is not None:
        reasons.append(f"the other partitions were compared with a baseline trained without {spec.name} on the "
                       "candidate's folds and hyper-parameters")
    elif model is None or not model.cv.get("meta", {}).get("cv_partitions"):
        reasons.append("the champion has no cross-validated record; only the new GPU was compared")
    result = RetrainResult(gpu=spec.name, champion=described, before=before, after=after, comparison=comparison,
                           promoted=promoted, reasons=reasons, trained=trained, baseline=baseline)
    stages.update()
    if log_mlflow:
        stages.set_postfix_str("logging to MLflow")
        _log(result, uri, Path(report_dir))
    stages.update()
    stages.close()
    return result


def _log(result: RetrainResult, uri: str, report_dir: Path) -> None:
    """Both audits as MLflow runs with their reports; the decision as tags on the candidate's run; the alias."""
    import mlflow

    from joulecast.training.report import write_report, write_retrain_report

    for name, outcome in (("before", result.before), ("after", result.after)):
        files = write_report(outcome, report_dir / name)
        outcome.summary["mlflow_run_id"] = log_audit(outcome, files, uri, run_name=f"retrain {result.gpu}: {name}")
    summary = result.summary()
    result.report = str(write_retrain_report(report_dir, gpu=result.gpu, champion=result.champion,
                                             promoted=result.promoted, reasons=result.reasons,
                                             comparison=result.comparison,
                                             figures={k: summary[k] for k in ("before", "after")}))
    client = mlflow.MlflowClient()
    run_id = result.trained.run_id
    client.set_tag(run_id, "retrain_gpu", result.gpu)
    client.set_tag(run_id, "promoted", str(result.promoted))
    client.set_tag(run_id, "decision", "; ".join(result.reasons)[:5000])
    if result.promoted and result.trained.model_version:
        client.set_registered_model_alias(MODEL_NAME, CHAMPION, result.trained.model_version)
