"""`joulecast train`: physics only, a plain XGBoost on raw parameters, and the hybrid, side by side; logged to MLflow.

The hybrid (physics x exp(learned residual)) is saved with `out=` and logged as an MLflow pyfunc model registered as
`joulecast` with the alias `champion`. Rows excluded by GPU, model family or source form the held-out set: that is
how zero-shot accuracy on an unseen GPU is measured.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.data.files import check_replaceable_folder, write_folder_atomic
from joulecast.estimator.api import scored_frame
from joulecast.estimator.loading import default_tracking_uri, sqlite_path
from joulecast.estimator.residual import ESTIMATOR_FILE
from joulecast.training.dataset import TrainingTable, dropped_text, training_table
from joulecast.training.evaluate import add_coverage_chance, error_table, offset_spreads
from joulecast.training.residual import PARAM_GRID, QUICK, ResidualModel, _regressor, gpu_weights, group_folds

log = logging.getLogger(__name__)
SCORES = ("energy_mape", "time_mape", "power_mape", "coverage")
PARTITIONS = ("gpu", "model_family")
MODEL_NAME = "joulecast"
EXPERIMENT = "joulecast"  # the MLflow experiment training logs to
CHAMPION = "champion"
# The plain baseline sees the workload's size and setting and the GPU's specs, but no physics estimate.
RAW_FEATURES = ("log_flops", "log_dram_bytes", "log_launches", "log_batch", "log_seq", "dtype_bytes", "clock_ratio",
                "power_limit_ratio", "phase_prefill", "phase_decode", "phase_training", "phase_inference",
                "phase_kernel", "gpu_arch", "gpu_sms", "gpu_boost_mhz", "gpu_bandwidth_gbs", "gpu_l2_mb",
                "gpu_bf16_tflops", "gpu_fp32_tflops", "gpu_tdp_w", "gpu_idle_w", "gpu_hbm")


def use_experiment(tracking_uri: str, name: str) -> None:
    """Point MLflow at `tracking_uri` and the experiment `name`, creating it where missing; on a local SQLite store
    its artifacts go beside the database (`<db folder>/mlruns`), not into ./mlruns wherever the command runs."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    database = sqlite_path(tracking_uri)
    try:
        if mlflow.get_experiment_by_name(name) is None and database is not None:
            folder = database.resolve().parent / "mlruns"
            mlflow.create_experiment(name, artifact_location=folder.as_uri())
        mlflow.set_experiment(name)
    except Exception as exc:  # MLflow's own types: an unknown scheme, a server not answering, a retired backend
        raise InputError("--tracking-uri", f"cannot log to {tracking_uri!r} ({type(exc).__name__}: "
                                           f"{str(exc).strip().splitlines()[0][:300]})") from None


def headline(metrics: dict[str, float]) -> dict[str, float]:
    """The overall figures, without the per-partition ones (whose names carry `_gpu_...` or `_model_family_...`)."""
    return {k: round(v, 3) for k, v in metrics.items() if not any(f"_{by}_" in k for by in PARTITIONS)}


def cv_record(partitions: pd.DataFrame) -> list[dict[str, Any]]:
    """The hybrid's cross-validated figures per partition, kept with the saved model: `retrain` compares a
    candidate's against them (same protocol: model families out of fold)."""
    cv = partitions[(partitions["estimator"] == "hybrid") & (partitions["split"] == "cv")]
    keep = ["by", "value", "rows", *[q for q in SCORES if q in cv]]
    return [{k: (v if isinstance(v, str) else float(v)) for k, v in r.items()}
            for r in cv[keep].astype({"value": str}).to_dict(orient="records")]


def dataset_digest(rows: pd.DataFrame) -> str:
    ids = "\n".join(sorted(rows["measurement_id"].astype(str)))
    return hashlib.sha256(ids.encode()).hexdigest()[:16]


@dataclass
class TrainResult:
    model: ResidualModel
    table: TrainingTable
    metrics: dict[str, float] = field(default_factory=dict)
    partitions: pd.DataFrame = field(default_factory=pd.DataFrame)
    fit_mask: np.ndarray | None = None   # the table's rows the model was fitted on (the rest were held out)
    run_id: str | None = None
    model_version: str | None = None
    out: str | None = None


def _split(table: TrainingTable, exclude_gpu: Sequence[str], exclude_model: Sequence[str],
           exclude_source: Sequence[str]) -> np.ndarray:
    r = table.rows
    held = r["gpu"].isin(exclude_gpu) | r["model_family"].isin(exclude_model) | r["source"].isin(exclude_source)
    for name, values, column in (("--exclude-gpu", exclude_gpu, "gpu"), ("--exclude-model", exclude_model, "model_family"),
                                 ("--exclude-source", exclude_source, "source")):
        unknown = sorted(set(values) - set(r[column]))
        if unknown:
            raise InputError(name, f"{unknown[0]!r} is not in the training data; present: {', '.join(sorted(set(r[column])))}")
    return held.to_numpy()


def train(measurements: pd.DataFrame, *, exclude_gpu: Sequence[str] = (), exclude_model: Sequence[str] = (),
          exclude_source: Sequence[str] = (), out: str | Path | None = None, tracking_uri: str | None = None,
          experiment: str = EXPERIMENT, register: bool = True, level: float = 0.9,
          grid: Sequence[dict[str, Any]] | None = None, log_mlflow: bool = True, promote: bool = True,
          progress: bool = False, fold_of: dict[str, int] | None = None, quick: bool = False,
          client: Any = None) -> TrainResult:
    """Fit the residual on the measurements not excluded; score physics, plain XGBoost and the hybrid by grouped CV.

    `register` logs a model version under MODEL_NAME; `promote` also points the `champion` alias at it; `progress`
    draws a bar of the boosters fitted; `fold_of` pins each model family's fold (another training's
    `model.fold_of`), so that two trainings on different rows are cross-validated alike; `grid`: the hyper-parameter
    sets to choose from (default PARAM_GRID); `quick` fits the quick profile (`residual.QUICK`: bags of two, five
    folds, and one hyper-parameter set unless `grid` names others) on the same code path; `client`
    (a dask.distributed Client) fits every booster of the residual with xgboost.dask across its workers.
    """
    if out:  # before the fit: a file or another folder there is the user's, not to be replaced
        check_replaceable_folder(out, ESTIMATOR_FILE, "out")
    uri = tracking_uri or default_tracking_uri()
    if log_mlflow:  # and a tracking store that cannot be logged to, not once the fit is done (`_log_mlflow` logs there)
        use_experiment(uri, experiment)
    table = training_table(measurements)
    if len(table.rows) < 20:
        raise InputError("measurements", f"only {len(table.rows)} usable rows (dropped: "
                                         f"{dropped_text(table.dropped)}); need 20")
    held = _split(table, exclude_gpu, exclude_model, exclude_source)
    fit_rows, X = table.rows[~held].reset_index(drop=True), table.X[~held].reset_index(drop=True)
    y = {"time": table.y_time[~held], "energy": table.y_energy[~held]}
    groups = fit_rows["model_family"].astype(str).to_numpy()
    profile = {"bag": QUICK["bag"], "folds": QUICK["folds"]} if quick else {}
    model = ResidualModel(level=level, client=client, **profile).fit(
        X, y, groups, fit_rows["gpu"], grid=grid or (QUICK["grid"] if quick else PARAM_GRID), progress=progress,
        fold_of=fold_of, reach=table.host_reach(~held))

    # Side by side on the same grouped folds: physics only, plain XGBoost (log measured on raw features), hybrid.
    plain_t, plain_e = np.empty(len(fit_rows)), np.empty(len(fit_rows))
    raw, weight = X[list(RAW_FEATURES)], gpu_weights(fit_rows["gpu"])  # weighted as the hybrid is
    for train_idx, test_idx in group_folds(groups, fold_of=model.fold_of):
        for target, dest in (("time_s", plain_t), ("energy_j", plain_e)):
            target_log = np.log(fit_rows[target].to_numpy())
            plain = _regressor(model.params).fit(raw.iloc[train_idx], target_log[train_idx],
                                                 sample_weight=weight[train_idx])
            dest[test_idx] = plain.predict(raw.iloc[test_idx])
    compared = {
        "physics": scored_frame(fit_rows, None),
        "plain_xgboost": fit_rows.assign(pred_time_s=np.exp(plain_t), pred_energy_j=np.exp(plain_e),
                                         pred_power_w=np.exp(plain_e - plain_t)),
        "hybrid": scored_frame(fit_rows, model.oof),
    }
    metrics: dict[str, float] = {}
    parts = []
    for name, frame in compared.items():
        overall = error_table(frame, None).iloc[0]
        metrics.update({f"cv_{name}_{q}": float(overall[q]) for q in SCORES if q in overall})
        spreads = offset_spreads(frame) if "lo_energy_j" in frame else None  # physics and plain: no interval
        for by in PARTITIONS:
            # beside the coverage, the range chance allows it, a family's rows on one GPU sharing an offset
            t = add_coverage_chance(error_table(frame, by), frame, by, spreads=spreads)
            t = t.assign(estimator=name, by=by, split="cv")
            parts.append(t)
            for _, p in t.iterrows():
                metrics.update({f"cv_{name}_{q}_{by}_{p['value']}": float(p[q]) for q in SCORES if q in p})
    if held.any():
        held_rows = table.rows[held].reset_index(drop=True)
        frame = scored_frame(held_rows, model.predict(table.X[held].reset_index(drop=True), held_rows["gpu"]))
        spreads = offset_spreads(frame)
        for by in (None, *PARTITIONS):
            t = add_coverage_chance(error_table(frame, by), frame, by, spreads=spreads)
            parts.append(t.assign(estimator="hybrid", by=by or "all", split="held_out"))
        overall = error_table(frame, None).iloc[0]
        metrics.update({f"held_out_{q}": float(overall[q]) for q in SCORES})
        physics_only = error_table(scored_frame(held_rows, None), None).iloc[0]
        metrics.update({f"held_out_physics_{q}": float(physics_only[q]) for q in SCORES[:3]})
    result = TrainResult(model=model, table=table, metrics=metrics, partitions=pd.concat(parts, ignore_index=True),
                         fit_mask=~held)
    meta = dict(trained_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), rows=int(len(fit_rows)),
                data_digest=dataset_digest(fit_rows), sources=sorted(set(fit_rows["source"])),
                excluded=dict(gpu=list(exclude_gpu), model=list(exclude_model), source=list(exclude_source)),
                metrics=headline(metrics), cv_partitions=cv_record(result.partitions))
    if out:  # the folder appears whole or not at all (a SIGTERM or full disk mid-save leaves any old one)
        result.out = str(write_folder_atomic(out, lambda tmp: model.save(tmp, meta), ESTIMATOR_FILE))
    if log_mlflow:
        _log_mlflow(result, meta, register, promote, compared["hybrid"])
    return result


def _log_mlflow(result: TrainResult, meta: dict[str, Any], register: bool, promote: bool, hybrid: pd.DataFrame
                ) -> None:
    """The run, its figures and the model, on the tracking store and experiment `train` checked and set before the
    fit (`use_experiment`)."""
    import mlflow
    from mlflow.models import ModelSignature, infer_signature

    from joulecast.training.plots import parity_figure
    from joulecast.training.pyfunc import HybridPyfunc, example_input, input_schema

    rows = result.table.rows
    with mlflow.start_run() as run:
        mlflow.log_params({"level": result.model.level, **{f"xgb_{k}": v for k, v in result.model.params.items()},
                           "rows": meta["rows"], "excluded": str(meta["excluded"]), "sources": ",".join(meta["sources"])})
        dataset = mlflow.data.from_pandas(rows.drop(columns=["kernel_hash"], errors="ignore"), name="measurements",
                                          source=",".join(meta["sources"]), digest=meta["data_digest"])
        mlflow.log_input(dataset, context="training")
        mlflow.log_metrics({k.replace("/", "_"): v for k, v in result.metrics.items()})
        mlflow.log_figure(parity_figure(hybrid), "parity.png")
        mlflow.log_table(result.partitions.astype({"value": str}), "partitions.json")
        with tempfile.TemporaryDirectory() as tmp:
            folder = result.model.save(Path(tmp) / "estimator", meta)
            example = example_input()
            model = HybridPyfunc()
            model.load_context_from(folder)
            outputs = infer_signature(example, model.predict(None, example)).outputs
            signature = ModelSignature(inputs=input_schema(), outputs=outputs)
            info = mlflow.pyfunc.log_model(name="model", python_model=HybridPyfunc(), artifacts={"estimator": str(folder)},
                                           signature=signature, input_example=example,
                                           registered_model_name=MODEL_NAME if register else None)
        result.run_id = run.info.run_id
        if register and info.registered_model_version is not None:
            result.model_version = str(info.registered_model_version)
            if promote:
                mlflow.MlflowClient().set_registered_model_alias(MODEL_NAME, CHAMPION, result.model_version)
