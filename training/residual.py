"""The learned half of the hybrid: XGBoost on log(measured / physics) for time and energy, each model a bag of
boosters of different seeds, each fitted without one model family, with conformalized quantile regression (CQR)
intervals and a training-domain check.

Hyper-parameters are chosen by grouped cross-validation (a model family never in both train and test); the same
folds give out-of-fold residuals and conformity scores, so the intervals are calibrated on predictions for model
families the fold did not see.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.model_selection import GroupKFold

from joulecast.data.executors import usable_cores
from joulecast.estimator.api import past_spread
from joulecast.estimator.residual import (
    BAG_KEYS,
    DOMAIN_FEATURES,
    ESTIMATOR_FILE,
    KERNEL_MIX_FEATURES,
    PRECISION_LEVEL_MIN_ROWS,
    TARGETS,
    Residual,
    _half_widths,
    _interval,
    arch_key,
    fitted_fields,
    level_key,
    level_of,
    work_kinds,
)
from joulecast.estimator.tree_arrays import MAX_DEPTH as TREE_ARRAY_MAX_DEPTH
from joulecast.estimator.tree_arrays import TreeArrays, bag_margin
from joulecast.training.tree_export import from_models

PARAM_GRID: tuple[dict[str, Any], ...] = tuple(
    dict(max_depth=d, learning_rate=lr, n_estimators=n, min_child_weight=2.0, subsample=0.8, colsample_bytree=0.8)
    for d, lr, n in ((3, 0.1, 300), (4, 0.1, 400)))
# The trees a row walks set the speed of every estimate: each point round adds two (time and energy), each band round
# four (their two quantiles), bags of five; 400 rounds, bands of 100 (BAND_ROUND_DIVISOR): 6,000 trees (300 rounds of
# depth 3, which the grid chose once the H200's rows took their host's dispatch, and which
# `one_standard_error_choice` keeps where the dearer entry's lead is within its folds' noise: 4,500). Points of
# fewer, larger steps held out a little worse (experiments/model_size.py, measured with bands of the points' rounds,
# so 12,000 trees for this grid; leave-one-model-out energy MAPE A10 / A100, tree seeds 0-2; numpy walk CPU a row):
# this grid 4.77 / 4.66 % (225 us), 100 rounds at 0.3 4.92 / 4.70 % (3,000 trees, 59 us), 60 at 0.3 4.90 / 4.70 %
# (1,800, 48 us); seed 0 alone, 40 at 0.4 5.08 / 4.98 %, 50 at 0.5 5.43 / 4.80 %, bags of two or three 4.66-6.30 %.
# Kept: 0.15 points on the A10 would cross the 4.8 % that issue 31 holds the held-out figures to.
# Point corrections minimise the absolute log error: its minimiser, the conditional median, is what a mean absolute
# percentage error rewards, and a few rows far off (host-bound runs whose dispatch was slow) pull it less than they
# pull a mean. L1 boosting moves in smaller steps, hence the learning rate of 0.1. No deeper trees: seven model
# families do not support them, and depth-6 models (1,000 trees, as L1 at a rate of 0.03 needs) took the p50 of
# one estimate from 4.4 to 6.6 ms, over the 5 ms target.
POINT_OBJECTIVE = "reg:absoluteerror"
# Features that name a model more than they describe its work: batch and sequence length (whose meaning differs
# between a GPT-2 and a Qwen2), the launch count and the mean kernel time (near-constant within a model family).
# Trees split on them to memorise per-family offsets, which do not carry over to a model they have not seen
# (leave-one-model-out energy MAPE on the A10 / A100, 4-seed probe: 6.2 / 6.4 % with them, 5.9 / 6.3 % without;
# 12.5 / 11.0 against 10.7 / 9.1 % on the physics before the traces were completed). They still bound the domain, as
# does the busy-time clock ratio, which bounds it alone (`joulecast.estimator.residual.DOMAIN_FEATURES`); the share
# of time in a mixture of experts' GEMMs marks a kind of work (`joulecast.estimator.residual.MOE_WORK`).
NOT_MODEL_INPUTS = ("log_batch", "log_seq", "log_launches", "log_mean_kernel_s", "busy_clock_ratio", "expert_share")
# Up to this many rows, predictions walk the trees as numpy arrays (`joulecast.estimator.tree_arrays`, for trees no
# deeper than its MAX_DEPTH) rather than through `inplace_predict` (a fixed 0.3-0.4 ms a call, twenty calls for four
# bags of five); beyond it XGBoost's own predictor is faster. Measured, all four bags: 1 row 0.65 against 9.2 ms,
# 8 rows 3.2 against 9.7, 16 rows 9.9 against 9.6 (with the complete-tree walk; before it, on another machine,
# 0.7 / 7.8, 4.8 / 8.7, 11.0 / 8.9).
TREE_ARRAY_MAX_ROWS = 8
# Conformal margins are taken per GPU where a GPU has this many rows (Mondrian CQR: a GPU whose residuals are
# smaller gets a narrower band, one whose are larger a wider one). A GPU trained on with fewer rows has been seen
# little: it gets the margin measured for a GPU not trained on (`ResidualModel.conformal_new_gpu`), as a handful of
# rows leaves its errors large (experiments/onboarding.py, seed 0: with 1-14 rows of the H100, B200 or A100-SXM4
# added, their energy MAPE is 8.3-26.8 %, against 13.3-25.6 % with none).
MIN_ROWS_PER_GPU_MARGIN = 30
# ... unless its own out-of-fold rows miss by more (`ResidualModel.conformal_few_rows`: each side's conformal quantile
# of its scores, the largest where it has under 19 rows): a GPU whose physics is far off and whose few rows leave the
# trees unable to correct it misses by more than a new GPU does on average. Measured before ML.ENERGY's decode steps
# were modelled as CUDA graphs, when the B200's 9 rows were 0.42-2.25 times their physics energy: the shipped model's
# grouped CV (its own rows set the margin, so the B200's figure is in-sample), coverage B200 55.6 -> 88.9 % (the
# ninth row on the edge), H100 89.3 -> 100 %; experiments/onboarding.py (seed 0; rows added, tested on the rest), H100
# with 10 % of its rows 80 -> 100 %, B200 with 50 % 80 -> 100 %, B200 with 1 or 2 rows 62.5 / 57.1 % as before; H100
# width 117-170 -> 237-287 % of the estimate.
# GPUs weigh alike in the fits (rows weighted by 1 / their GPU's row count), so that the GPU measured most (the A100:
# 339 EnergAIzer rows against the A10's 95) does not set the corrections of the others. A GPU with fewer than
# GPU_WEIGHT_MIN_ROWS rows counts as if it had that many: a dozen ML.ENERGY rows, whose physics energy is about 50 %
# off, do not outweigh a hundred well-modelled ones. Energy MAPE on the A10 / A100, rows weighted alike -> GPUs
# weighted alike with this floor of 100 rows (with a floor of 30): leave-one-model-out (experiments/
# leave_one_model_out.py, seed 0) 5.16 / 4.75 -> 5.00 / 4.74 % (4.97 / 4.86 %); the shipped model's grouped CV
# 5.60 / 5.16 -> 5.31 / 5.03 % (5.74 / 6.37 %).
GPU_WEIGHT_MIN_ROWS = 100
# A new GPU's margin is measured per kind of work too, where this many GPUs ran it (`_new_gpu_margin`): a new GPU's
# forward passes are scored against the others' forward passes, not against serving steps whose physics errs another
# way (`joulecast.estimator.residual.Residual.conformal_new_gpu_by_kind`).
MIN_GPUS_PER_KIND_MARGIN = 2
# An architecture's own physics margin of a kind of work (`_physics_margin_by_arch`) needs this many rows of it: one
# GPU is enough (the A10 for an Ampere card's forward passes), a handful is not (the 90 % quantile of a few rows rests
# on the top one or two: the H200's 7 decode and 3 training rows, the H100's 17 serving steps).
MIN_ROWS_PER_ARCH_MARGIN = MIN_ROWS_PER_GPU_MARGIN
# Where physics demands it: a higher SM clock or power limit never makes a workload slower. Physics time already
# falls with both; a time correction that does not rise with them keeps the product monotone.
MONOTONE = {"time": {"clock_ratio": -1, "power_limit_ratio": -1}, "energy": {}}
# Every model here is a bag: the mean of BAG_SEEDS boosters that differ only in their seed (the rows and columns
# each tree samples). One booster's figures depend on its seed: leave-one-model-out energy MAPE on the A10 / A100
# (experiments/leave_one_model_out.py) ranged 4.72-5.33 / 4.62-4.99 % over five seeds. Bags of five: 4.97 / 4.82 %
# (seeds 0-4), 4.81 / 4.60 % (seeds 5-9) and 4.83 / 4.71 % (seeds 10-14). Costs: five times the training (the
# shipped model: 15 -> 59 s) and about 1 ms per estimate (the learned part of one estimate: 0.67 -> 1.5-1.7 ms,
# `experiments/speed.py`).
BAG_SEEDS = 5
# Each booster of a bag leaves one model family out (the i-th booster of seed s the (s + i)-th family, cycling; where
# at least JACKKNIFE_MIN_FAMILIES are trained on), so the bag is a jackknife over families as well as seeds: no one
# family's quirks steer every booster, and out-of-fold residuals come from boosters that knew even fewer families,
# as a family not seen does. Leave-one-model-out (experiments/leave_one_model_out.py, tree seeds 0 / 1 / 2), every
# booster on every family -> a family left out of each: energy MAPE A10 4.84 / 4.74 / 4.83 -> 5.00 / 4.56 / 4.81 %,
# A100 4.66 / 4.62 / 4.63 -> 4.62 / 4.85 / 4.65 %; coverage of the 90 % energy interval A10 85.3 / 90.5 / 90.5 ->
# 90.5 / 92.6 / 92.6 %, A100 88.2 / 88.5 / 87.3 -> 91.7 / 90.9 / 90.6 %, mean width A100 19.8-20.1 -> 20.9-21.3 %;
# held-out families within 86-94 % 3 / 2 / 3 -> 4 / 4 / 5 of 7 (GPT-2 78.3 / 78.3 / 80.9 -> 87.0 / 88.7 / 87.8 %,
# ResNet 75.0 -> 87.5 % on each seed). Leaving out the point models' families alone (bands on every family), seed 0:
# 3 of 7.
JACKKNIFE_MIN_FAMILIES = 3
# The quantile band reaches at least its median out-of-fold reach below and above the point, before the conformal
# margin is added. The band is fitted on the families trained on: it knows their spread within a family, not how far
# a new family's offset lies, so where it was narrow a held-out family was under-covered (GPT-2, the narrowest band)
# and where wide over-covered (Qwen2). Leave-one-model-out (experiments/leave_one_model_out.py, seed 0), coverage of
# the 90 % energy interval without -> with the floor: A10 88.4 -> 88.4 %, A100 91.5 -> 90.6 %, mean width 29.5 /
# 24.2 -> 23.7 / 20.6 %; GPT-2 80.9 -> 87.0 %, Qwen2 100 -> 95.9 %, ViT 75.0 -> 68.8 % (16 rows). The shipped
# model's grouped CV: A10 / A100 coverage 91.6 / 90.3 % either way, width 28.0 / 30.9 -> 29.6 / 26.5 %, GPT-2 79.1
# -> 75.7 %. Floors at the 40th, 60th or 75th percentile did no better (bag seeds 0-1: GPT-2 84.3, 84.3, 83.5 %).
BAND_FLOOR_QUANTILE = 0.5
# Each side of the interval has a conformal margin of its own, the conformal 95th percentile of how far y lies under
# the band and of how far over it (CQR's asymmetric form; Romano, Patterson and Candes, NeurIPS 2019), instead of one
# margin, the 90th percentile of the larger miss, for both. A family not seen is off as a whole, and more often
# under-estimated on its heavy rows than over, so one margin reached too little above and too far below.
# Leave-one-model-out (experiments/leave_one_model_out.py, tree seeds 0 / 1 / 2), one margin -> two: held-out
# families within 86-94 % 4 / 4 / 5 -> 5 / 4 / 5 of 7; mean of the seeds ViT 81.2 -> 89.6 %, GPT-2 87.8 -> 89.6 %,
# BERT 90.4 -> 93.2 %, ResNet (flagged out of domain) 93.8 -> 95.8 %, OPT 95.7 % both; coverage A10 90.5 / 92.6 /
# 92.6 -> 92.6 / 92.6 / 93.7 %, A100 92.0 / 91.2 / 90.9 -> 92.9 / 92.6 / 93.2 %; mean width A10 27.1-27.4 ->
# 27.9-28.9 %, A100 21.5-21.9 -> 21.9-22.6 %.

# The conformal margins are calibrated on the interval an estimate gives: where a row's machine states no host
# dispatch (EnergAIzer's), the estimate joins the measured hosts' spread to the interval's reach in quadrature
# (`estimator.api.combine`), so a row's score is how far it lies past the band so joined (`estimator.api.past_spread`),
# not past the band alone, which counted the host twice: once in the margin its host-bound misses set, once in the
# spread.
# Each GPU held out with all its rows (experiments/gpu_transfer.py), coverage as an estimate gives it, before -> now:
# A10 88.4 % the same, A100-PCIe 97.3 -> 93.2 %, H200 92.9 % the same (its collections state their hosts); whole
# jobs (experiments/job_coverage.py) generate 93.8 -> 89.3 %, serve 87.5 -> 86.7 %; leave-one-model-out (tree seed 0)
# A10 / A100 93.7 / 94.4 -> 89.5 / 92.3 %. The trees are the same. Off (False), the margins as before, for a study.
CONFORMAL_ON_JOINED = True

# Each GPU trained on has a level of its own: the median of its rows' log(measured / physics), which its trees'
# residual is fitted around. Measurements of one GPU share offsets that its specs do not explain (the A100-PCIe's
# EnergAIzer rows draw 26 % more power than physics, the A100-SXM4's ML.ENERGY rows none), and pooled trees
# explain such offsets with whatever workload feature separates the GPUs' rows: H200 kernel rows, none with a
# softmax, taught them that a workload without softmax lies low, and ResNet (none either) fell from 6.2 to 14.0 %
# energy MAPE once they were added (grouped CV, against a baseline on the same folds). A GPU not trained on has no
# level: its estimates come from a second, pooled bag fitted on the raw residuals, whose trees carry over what
# resembles it by specs (e.g. the A100's level to the A10). With levels, the same comparison: ResNet 6.03 -> 5.34 %,
# no partition worse by 2 points, and the H200 was promoted (joulecast retrain --gpu h200); the model without H200
# rows, grouped CV energy MAPE pooled -> levels: A10 5.18 -> 4.69 %, A100 4.99 -> 5.08 %, A100-SXM4 7.40 -> 4.55 %,
# H100 11.21 -> 5.05 %. Cost: two more bags per target to fit and ship (the pooled point and band).


def one_standard_error_choice(scores: Sequence[float], by_fold: Sequence[Sequence[float]]) -> tuple[int, float]:
    """The grid entry to fit, and the standard error it was chosen with: the first (the grid runs from the cheapest
    trees to the dearest) whose cross-validated score lies within one standard error of the best's, the standard
    error taken over the best's folds (Breiman et al.'s one-standard-error rule, Classification and Regression Trees,
    1984, section 3.4.3). The entries differ by less than their folds do (the shipped model's grid, energy MAPE: depth
    3 and 300 rounds 7.386 %, depth 4 and 400 rounds 7.239 %, the best's standard error over its ten folds 1.44
    points; 8.006 / 7.883 % and 1.75 when the rule was chosen), while the dearer one reads each estimate slower
    (experiments/speed.py, estimate_many hybrid 28,188 -> 19,023 configurations a CPU-second, against a target of
    20,000; a warm estimate 0.99 -> 1.04 ms, against 1 ms): a difference the folds cannot tell from chance is not
    worth it."""
    best = int(np.argmin(scores))
    folds = np.asarray(by_fold[best], dtype=float)
    se = float(folds.std(ddof=1) / np.sqrt(len(folds))) if len(folds) > 1 else 0.0
    return next(i for i, score in enumerate(scores) if score <= scores[best] + se), se


def gpu_levels(y: np.ndarray, gpus: np.ndarray, widths: np.ndarray | None = None) -> dict[str, float]:
    """Each GPU's level: the median of its rows' log residual; and, given the rows' operand widths (bytes), each
    width's of a GPU that ran more than one, where it has PRECISION_LEVEL_MIN_ROWS rows
    (`joulecast.estimator.residual.level_of` reads them)."""
    gpus = np.asarray(gpus, dtype=str)
    out = {str(g): float(np.median(y[gpus == g])) for g in np.unique(gpus)}
    if widths is None:
        return out
    widths = np.asarray(widths).astype(np.int64)
    for g in out.copy():
        mine = gpus == g
        if len(np.unique(widths[mine])) < 2:
            continue
        for w in np.unique(widths[mine]):
            rows = mine & (widths == w)
            if rows.sum() >= PRECISION_LEVEL_MIN_ROWS:
                out[level_key(g, w)] = float(np.median(y[rows]))
    return out


def _regressor(params: Mapping[str, Any], target: str | None = None, **extra: Any) -> xgb.XGBRegressor:
    extra.setdefault("objective", POINT_OBJECTIVE)
    if target and MONOTONE.get(target):
        extra["monotone_constraints"] = MONOTONE[target]
    return xgb.XGBRegressor(tree_method="hist", n_jobs=free_cores(), **{"random_state": 0, **params}, **extra)


# Bands take fewer, larger steps than the points: BAND_ROUND_DIVISOR times fewer rounds at BAND_RATE_FACTOR times the
# rate (capped at 1). A band's two quantiles are four of the six trees a boosting round adds to every walk, and a band
# only sets the interval's reach, which the conformal margins calibrate; the points, which set every estimate, keep
# their steps, so no estimate moves (the reference's 2,500 points bit for bit). Bands of the points' rounds -> a
# quarter: the shipped model's walk 12,000 -> 6,000 trees; leave-one-model-out (tree seeds 0-2) energy MAPE A10 / A100
# 4.77 / 4.66 % either way, coverage of the 90 % energy interval 93.0 / 93.6 -> 93.3 / 93.5 %, mean width (seed 0)
# 27.4 / 23.1 -> 27.7 / 23.6 %; the shipped model's grouped CV coverage the same on every GPU (A10 93.7, A100 90.6 %).
BAND_ROUND_DIVISOR, BAND_RATE_FACTOR = 4, 3.0


def band_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A band's hyper-parameters from its point's: fewer rounds, a larger rate."""
    out = dict(params)
    if "n_estimators" in out:
        out["n_estimators"] = max(1, math.ceil(out["n_estimators"] / BAND_ROUND_DIVISOR))
    if "learning_rate" in out:
        out["learning_rate"] = min(1.0, out["learning_rate"] * BAND_RATE_FACTOR)
    return out


def free_cores() -> int:
    """Threads for XGBoost: the cores this process may use, less those other work keeps busy (the 1-minute load
    average, counted when training starts): threads beyond the free cores only contend (a busy 2-core machine ran
    the suite over 45 minutes with two threads a booster)."""
    global _FREE
    if _FREE is None:
        cores = usable_cores()
        _FREE = max(1, min(cores, round(cores - os.getloadavg()[0] + 0.5)))
    return _FREE


_FREE: int | None = None
# A quick training (`joulecast train --quick`): the same code path with the first hyper-parameter set alone, bags of
# two and five folds (about a tenth of the boosters), for trying things out and for tests.
QUICK = {"grid": PARAM_GRID[:1], "bag": 2, "folds": 5}


def _fit_on_dask(client: Any, booster: xgb.XGBRegressor, X: pd.DataFrame, y: np.ndarray,
                 weight: np.ndarray) -> xgb.XGBRegressor:
    """`booster` (unfitted) fitted by xgboost.dask: the rows split into one partition a worker, each worker building
    its histograms and XGBoost's collective (Rabit) all-reducing them, so the trees are those of one process on all
    rows, up to the quantile sketch's merge. Returns an in-process regressor holding the fitted booster, so that the
    bag predicts, saves and exports as any other."""
    import dask.dataframe as dd
    from xgboost import dask as dxgb

    workers = max(1, len(client.scheduler_info()["workers"]))
    frame = X.reset_index(drop=True).assign(_y=np.asarray(y), _w=np.asarray(weight))  # named: monotone constraints
    parts = dd.from_pandas(frame, npartitions=min(workers, len(frame)))
    params = {k: v for k, v in booster.get_params().items() if k != "n_jobs"}
    model = dxgb.DaskXGBRegressor(**params, n_jobs=1)
    model.client = client
    model.fit(parts[list(X.columns)], parts["_y"], sample_weight=parts["_w"])
    local = xgb.XGBRegressor(**params)
    local.load_model(bytearray(model.get_booster().save_raw(raw_format="json")))
    return local


def _predict_bag(bag: Sequence[xgb.XGBRegressor], X: pd.DataFrame | np.ndarray) -> np.ndarray:
    # inplace_predict skips the DMatrix the sklearn wrapper builds per call: ~1 ms instead of ~10 ms per row
    return bag_margin([m.get_booster().inplace_predict(X) for m in bag])


def _save_booster(model: xgb.XGBRegressor, path: Path) -> None:
    """XGBoost's JSON model, gzipped (a quarter of the size: the shipped model's 40 boosters take 8 rather than 33 MB),
    with no timestamp in the header, so that the same model writes the same bytes."""
    path.write_bytes(gzip.compress(bytes(model.get_booster().save_raw(raw_format="json")), mtime=0))


def _load_booster(stem: Path) -> xgb.XGBRegressor:
    """The booster saved as `stem`.json.gz, or as `stem`.json (as models were saved before they were gzipped)."""
    model = xgb.XGBRegressor()
    packed = stem.with_name(stem.name + ".json.gz")
    model.load_model(bytearray(gzip.decompress(packed.read_bytes())) if packed.exists()
                     else stem.with_name(stem.name + ".json"))
    return model


def _quantiles(level: float) -> list[float]:
    return [(1 - level) / 2, 1 - (1 - level) / 2]


def _misses(point: np.ndarray, below: np.ndarray, above: np.ndarray, y: np.ndarray,
            reach: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """CQR's scores per side: how far y lies under the band reaching `below` and `above` the point, and how far over
    it (negative inside); with `reach` (n x 2: each row's log spread below and above that its estimate joins, as
    `TrainingTable.host_reach` gives), how far past the band joined with it."""
    if reach is None:
        return point - below - y, y - point - above
    return past_spread(point - y, reach[:, 0]) - below, past_spread(y - point, reach[:, 1]) - above


def _conformity(point: np.ndarray, below: np.ndarray, above: np.ndarray, y: np.ndarray,
                reach: np.ndarray | None = None) -> np.ndarray:
    """CQR's score: how far y lies outside the band (joined with `reach`, as `_misses`), on either side (negative
    inside)."""
    return np.maximum(*_misses(point, below, above, y, reach))


def _physics_misses(y: np.ndarray, reach: np.ndarray | None) -> np.ndarray:
    """|y|, how far physics' point missed (y the log of measured over physics), or past `reach` (`_misses`)."""
    return np.abs(y) if reach is None else _conformity(np.zeros(len(y)), 0.0, 0.0, y, reach)


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    return float(np.mean(np.abs(np.asarray(predicted) / np.asarray(measured) - 1)) * 100)


def weighted_quantile(values: np.ndarray, weights: np.ndarray, level: float) -> float:
    """The smallest value whose share of the total weight at or below it reaches `level`."""
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][min(np.searchsorted(cumulative, level), len(values) - 1)])


def gpu_weights(gpus: Sequence[str]) -> np.ndarray:
    """Per row: 1 / (its GPU's row count, at least GPU_WEIGHT_MIN_ROWS), scaled to a mean of 1."""
    _, inverse, counts = np.unique(np.asarray(gpus, dtype=str), return_inverse=True, return_counts=True)
    weight = 1.0 / np.maximum(counts, GPU_WEIGHT_MIN_ROWS)[inverse]
    return weight / weight.mean()


# Grouped cross-validation holds each model family out alone where there are up to FOLDS of them. With five folds,
# GroupKFold (which balances folds by rows) put both families served by an engine (llama, mistral) in one fold once
# ML.ENERGY v3's rows were left out, so no fold that tested a served step had trained on one: the shipped model's
# energy MAPE A100-SXM4 30.3 %, H100 58.4 %; each family its own fold, 7.40 / 11.21 % (A10 5.23 -> 5.18 %, A100
# 4.90 -> 4.99 %). Cost: about twice the boosters of five folds.
FOLDS = 10


def group_folds(groups: Sequence[str], n_splits: int = FOLDS,
                fold_of: Mapping[str, int] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) row indices of grouped cross-validation: each model family wholly in one fold. GroupKFold
    balances the folds by rows, so adding rows can move a family to another fold; `fold_of` (family -> fold, as
    `fold_assignment` gives) repeats a split on other rows of the same families instead."""
    groups = np.asarray(groups, dtype=str)
    if fold_of is not None:
        missing = sorted(set(groups) - set(fold_of))
        if missing:
            raise ValueError(f"no fold given for model famil{'ies' if len(missing) > 1 else 'y'} {', '.join(missing)}")
        index = np.array([fold_of[g] for g in groups])
        tests = [np.flatnonzero(index == f) for f in np.unique(index)]
        if len(tests) < 2:
            raise ValueError("grouped cross-validation needs model families in at least two folds")
        return [(np.flatnonzero(index != index[test[0]]), test) for test in tests]
    k = min(n_splits, len(np.unique(groups)))
    if k < 2:
        raise ValueError("grouped cross-validation needs at least two model families")
    return list(GroupKFold(n_splits=k).split(np.zeros(len(groups)), groups=groups))


def fold_assignment(groups: Sequence[str], folds: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[str, int]:
    """Each model family's fold in `folds` (for `group_folds(..., fold_of=)`)."""
    groups = np.asarray(groups, dtype=str)
    return {str(g): i for i, (_, test) in enumerate(folds) for g in np.unique(groups[test])}


def arch_mix_ranges(X: pd.DataFrame, kinds: np.ndarray) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Per architecture and kind of work of MIN_ROWS_PER_ARCH_MARGIN rows or more (those with a physics margin of
    their own, `ResidualModel._physics_margin_by_arch`): each kernel class's time share, [min, max] over its passes
    (rows of more than one launch, `log_launches` over 0: a kernel list without a phase is one too), where it has
    any (`Residual.physics_arch_mix`)."""
    if "gpu_arch" not in X:
        return {}
    archs = X["gpu_arch"].to_numpy(dtype=float)
    passes = X["log_launches"].to_numpy() > 0 if "log_launches" in X else np.ones(len(X), bool)
    shares = [c for c in KERNEL_MIX_FEATURES if c in X]
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for code in np.unique(archs):
        for kind in np.unique(kinds[archs == code]):
            rows = (archs == code) & (kinds == kind)
            if rows.sum() >= MIN_ROWS_PER_ARCH_MARGIN and (rows & passes).any():
                mix = X.loc[rows & passes, shares]
                out.setdefault(arch_key(code), {})[str(kind)] = {c: [float(mix[c].min()), float(mix[c].max())]
                                                                 for c in shares}
    return out


@dataclass
class ResidualModel(Residual):
    """`Residual` with its XGBoost boosters, fitted here (`fit`); it predicts as the estimator's record does, through
    tree arrays built from the boosters (or XGBoost's own predictor for many rows)."""

    bag: int = BAG_SEEDS                                            # boosters per model
    folds: int = FOLDS                                              # grouped cross-validation folds, at most
    points: dict[str, list[xgb.XGBRegressor]] = field(default_factory=dict)  # target -> the bag's boosters
    bands: dict[str, list[xgb.XGBRegressor]] = field(default_factory=dict)
    pooled: dict[str, list[xgb.XGBRegressor]] = field(default_factory=dict)  # no levels: for GPUs not trained on
    pooled_bands: dict[str, list[xgb.XGBRegressor]] = field(default_factory=dict)
    fold_of: dict[str, int] = field(default_factory=dict)           # each model family's fold in that selection
    oof: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _tick: Callable[[], Any] = field(default=lambda: None, repr=False)  # called after each booster fitted
    # a dask.distributed Client: each booster is then fitted by xgboost.dask over the rows split across its workers
    client: Any = field(default=None, repr=False, compare=False)

    def fit(self, X: pd.DataFrame, y: Mapping[str, np.ndarray], groups: Sequence[str], gpus: Sequence[str],
            grid: Sequence[Mapping[str, Any]] = PARAM_GRID, progress: bool = False,
            fold_of: Mapping[str, int] | None = None, reach: Mapping[str, np.ndarray] | None = None
            ) -> "ResidualModel":
        """Choose hyper-parameters, calibrate the intervals and fit the bags; `progress` draws a bar of the
        boosters fitted (on stderr); `fold_of` pins each model family's cross-validation fold (`group_folds`);
        `reach`: per target, each row's log spread below and above (n x 2) that an estimate of it joins to the
        interval, an unstated host's (`TrainingTable.host_reach`): the margins are calibrated on the interval so
        joined, the one an estimate gives (CONFORMAL_ON_JOINED)."""
        from tqdm.auto import tqdm

        folds = group_folds(groups, n_splits=self.folds, fold_of=fold_of)
        self.fold_of = fold_assignment(groups, folds)
        # boosters: grid selection, then per target out-of-fold points and bands, the final point and band, and the
        # pooled point and band
        per_target = 2 * len(folds) + 4
        total = self.bag * (len(grid) * len(folds) + len(TARGETS) * per_target)
        with tqdm(total=total, unit="booster", desc="training", disable=not progress, dynamic_ncols=True) as bar:
            self._tick = bar.update
            try:
                return self._fit(X, y, groups, gpus, grid, folds, reach or {})
            finally:
                self._tick = lambda: None

    def _fit(self, X: pd.DataFrame, y: Mapping[str, np.ndarray], groups: Sequence[str], gpus: Sequence[str],
             grid: Sequence[Mapping[str, Any]], folds: list[tuple[np.ndarray, np.ndarray]],
             reach: Mapping[str, np.ndarray]) -> "ResidualModel":
        self.trees = {}
        self.gpus = sorted(set(map(str, gpus)))
        self.conformal_new_gpu, self.conformal_new_gpu_by_kind, self.conformal_few_rows = {}, {}, {}
        self.physics_new_gpu, self.physics_new_gpu_by_kind, self.physics_new_gpu_by_arch = {}, {}, {}
        self.domain = {c: [float(X[c].min()), float(X[c].max())] for c in DOMAIN_FEATURES if c in X}
        kinds = np.array(work_kinds(X.to_numpy(dtype=np.float32), list(X.columns)))
        self.physics_arch_mix = arch_mix_ranges(X, kinds) if len(set(map(str, gpus))) > 1 else {}
        self.__dict__.pop("_arch_mix_keys", None)  # a model fitted again reads its new ranges
        self.gpu_work = {g: sorted(set(kinds[np.asarray(gpus, dtype=str) == g])) for g in self.gpus}
        self.arch_codes = sorted({float(c) for c in X["gpu_arch"]}) if "gpu_arch" in X else []
        arch_of_row = X["gpu_arch"].to_numpy(dtype=float) if "gpu_arch" in X else None
        self.features = [c for c in X.columns if c not in NOT_MODEL_INPUTS]
        X = X[self.features]
        weight, groups = gpu_weights(gpus), np.asarray(groups, dtype=str)
        gpu_of_row = np.asarray(gpus, dtype=str)
        widths = X["dtype_bytes"].to_numpy() if "dtype_bytes" in X else None  # levels per operand width
        scores, by_fold = [], []
        for params in grid:  # choose on energy, the quantity people ask for
            oof = self._oof(lambda p: _regressor(p, "energy"), params, X, y["energy"], folds, weight, groups,
                            gpu_of_row)
            errors = np.abs(np.exp(y["energy"] - oof) - 1)
            scores.append(float(np.average(errors, weights=weight)))
            by_fold.append([float(np.average(errors[test], weights=weight[test])) for _, test in folds])
        chosen, se = one_standard_error_choice(scores, by_fold)
        self.params = dict(grid[chosen])
        self.cv = {"grid_energy_mape": [round(s * 100, 3) for s in scores], "folds": len(folds),
                   "best_energy_mape_se": round(se * 100, 3)}
        for target in TARGETS:
            yt = np.asarray(y[target])
            spread = reach.get(target) if CONFORMAL_ON_JOINED else None
            self.levels[target] = gpu_levels(yt, gpu_of_row, widths)
            around = yt - level_of(self.levels[target], gpu_of_row, widths=widths)
            point_model = functools.partial(_regressor, target=target)  # params -> an unfitted booster
            band_model = functools.partial(self._band_model, target)
            self.oof[target] = self._oof(point_model, self.params, X, yt, folds, weight, groups, gpu_of_row)
            band = self._oof(band_model, self.params, X, yt, folds, weight, groups, gpu_of_row)
            lo, hi = band[:, 0], band[:, 1]
            below, above = _half_widths(self.oof[target], lo, hi, (0.0, 0.0))
            self.band_floor[target] = [float(np.quantile(below, BAND_FLOOR_QUANTILE)),
                                       float(np.quantile(above, BAND_FLOOR_QUANTILE))]
            below, above = _half_widths(self.oof[target], lo, hi, self.band_floor[target])
            under, over = _misses(self.oof[target], below, above, yt, spread)
            self.conformal[target] = self._side_margins(under, over)
            own = {g: self._side_margins(under[gpu_of_row == g], over[gpu_of_row == g]) for g in self.gpus}
            many = {g for g in self.gpus if (gpu_of_row == g).sum() >= MIN_ROWS_PER_GPU_MARGIN}
            self.conformal_by_gpu[target] = {g: m for g, m in own.items() if g in many}
            self.conformal_few_rows[target] = {g: m for g, m in own.items() if g not in many}
            self.points[target] = self._fit_bag(point_model, self.params, X, around, weight, groups)
            self.bands[target] = self._fit_bag(band_model, self.params, X, around, weight, groups)
            self.pooled[target] = self._fit_bag(point_model, self.params, X, yt, weight, groups)
            self.pooled_bands[target] = self._fit_bag(band_model, self.params, X, yt, weight, groups)
            if len(self.gpus) > 1:
                self.conformal_new_gpu[target], self.conformal_new_gpu_by_kind[target] = self._new_gpu_margin(
                    X, yt, gpu_of_row, kinds, target, spread)
                self.physics_new_gpu[target], self.physics_new_gpu_by_kind[target] = self._physics_margin(
                    yt, gpu_of_row, kinds, spread)
                if arch_of_row is not None:
                    self.physics_new_gpu_by_arch[target] = self._physics_margin_by_arch(
                        yt, gpu_of_row, kinds, arch_of_row, spread)
            # Out-of-fold intervals too: their coverage per partition is what the intervals are judged by.
            self.oof[f"{target}_lo"], self.oof[f"{target}_hi"] = _interval(
                self.oof[target], lo, hi, self._margins(target, gpu_of_row), 1.0, self.band_floor[target])
        return self

    def _side_margins(self, under: np.ndarray, over: np.ndarray) -> list[float]:
        """[below, above]: the conformal quantile of each side's scores (how far y lies under the band, over it), the
        (n + 1) * (1 - (1 - level) / 2)-th smallest, so that each side misses half the 1 - level allowed."""
        n, side = len(under), 1 - (1 - self.level) / 2
        rank = min(1.0, math.ceil((n + 1) * side) / n)
        return [float(np.quantile(under, rank)), float(np.quantile(over, rank))]

    def _new_gpu_margin(self, X: pd.DataFrame, y: np.ndarray, gpus: np.ndarray, kinds: np.ndarray, target: str,
                        reach: np.ndarray | None = None) -> tuple[float, dict[str, float]]:
        """The margin past the band for a GPU not trained on, where the estimate reads at physics' point (a
        correction of 0) with the pooled band's reach (floored) moved there: how far each GPU's rows lie outside that
        band; each GPU weighs alike, as a new GPU may be like any of them. Pooled over every kind of work, and per
        kind of work that at least MIN_GPUS_PER_KIND_MARGIN GPUs ran (`Residual.conformal_new_gpu_by_kind`). A GPU
        trained on with few rows takes it too (`Residual._margins`); a GPU not trained on, the physics margin
        (`_physics_margin`), where the model has one.

        Before, the interval spanned the band around the pooled bags' point too, and the margin was scored around a
        bag fitted without the GPU: each GPU with kernel-level rows held out (`experiments/gpu_transfer.py --quick`),
        energy coverage A10 96.8 -> 92.6 %, A100-PCIe 97.1 -> 85.5 %, H200 97.1 % the same (two thirds of its rows
        are single kernels outside the training ranges, widened twofold); the H200's 32 held-out rows, zero-shot
        (`experiments/h200_holdout.py`), 90.6 -> 93.8 %."""
        scores = np.empty(len(y))
        for g in np.unique(gpus):
            out = gpus == g
            band = _predict_bag(self.pooled_bands[target], X[out])
            below, above = _half_widths(_predict_bag(self.pooled[target], X[out]), band[:, 0], band[:, 1],
                                        self.band_floor[target])
            scores[out] = _conformity(np.zeros(out.sum()), below, above, y[out], None if reach is None else reach[out])
        return self._alike_quantiles(scores, gpus, kinds)

    def _physics_margin(self, y: np.ndarray, gpus: np.ndarray, kinds: np.ndarray, reach: np.ndarray | None = None
                        ) -> tuple[float, dict[str, float]]:
        """How far physics itself missed the GPUs trained on: the level quantile of |y| (y the log of measured over
        physics; past `reach` where given, as `_misses`), pooled and per kind of work as `_new_gpu_margin`. A GPU not
        trained on reads at physics' point, its interval this far each way (`Residual.physics_new_gpu`)."""
        return self._alike_quantiles(_physics_misses(y, reach), gpus, kinds)

    def _physics_margin_by_arch(self, y: np.ndarray, gpus: np.ndarray, kinds: np.ndarray, archs: np.ndarray,
                                reach: np.ndarray | None = None) -> dict[str, dict[str, float]]:
        """Per architecture code (`arch_key`) and kind of work: how far physics missed the GPUs trained on of that
        architecture at that kind (the level quantile of |y|, past `reach` where given, as `_physics_margin`; each
        GPU weighing alike; one GPU is enough, of MIN_ROWS_PER_ARCH_MARGIN rows or more in all). A GPU not trained on
        reads its architecture's where one was measured (`Residual.physics_new_gpu_by_arch`): physics' misses follow
        the tiles, tensor cores and power terms an architecture shares, not the pool of every GPU."""
        out: dict[str, dict[str, float]] = {}
        misses = _physics_misses(y, reach)
        for code in np.unique(archs):
            for kind in np.unique(kinds[archs == code]):
                rows = (archs == code) & (kinds == kind)
                if rows.sum() >= MIN_ROWS_PER_ARCH_MARGIN:
                    out.setdefault(arch_key(code), {})[str(kind)] = self._alike_quantile(misses, gpus, rows)
        return out

    def _alike_quantiles(self, scores: np.ndarray, gpus: np.ndarray, kinds: np.ndarray
                         ) -> tuple[float, dict[str, float]]:
        """The level quantile of `scores`, each GPU's rows weighing 1 in all (a new GPU may be like any of them):
        over every row, and per kind of work that at least MIN_GPUS_PER_KIND_MARGIN GPUs ran."""
        every = np.ones(len(scores), dtype=bool)
        by_kind = {str(k): self._alike_quantile(scores, gpus, kinds == k) for k in np.unique(kinds)
                   if len(np.unique(gpus[kinds == k])) >= MIN_GPUS_PER_KIND_MARGIN}
        return self._alike_quantile(scores, gpus, every), by_kind

    def _alike_quantile(self, scores: np.ndarray, gpus: np.ndarray, rows: np.ndarray) -> float:
        """The level quantile of `scores` over `rows`, each GPU's rows weighing 1 in all."""
        _, codes, counts = np.unique(gpus[rows], return_inverse=True, return_counts=True)
        return weighted_quantile(scores[rows], 1.0 / counts[codes], self.level)

    def _fit_bag(self, make: Callable[[Mapping[str, Any]], xgb.XGBRegressor], params: Mapping[str, Any],
                 X: pd.DataFrame, y: np.ndarray, weight: np.ndarray, groups: np.ndarray) -> list[xgb.XGBRegressor]:
        """`bag` boosters made by `make` from `params` with seeds seed * bag ... seed * bag + bag - 1 (seed: the
        params' random_state, default 0), so that bags of different seeds share no booster; each without the rows of
        one model family of `groups` (see JACKKNIFE_MIN_FAMILIES)."""
        seed = int(params.get("random_state", 0))
        families = np.unique(groups)
        boosters = []
        for i in range(self.bag):
            keep = (groups != families[(seed + i) % len(families)] if len(families) >= JACKKNIFE_MIN_FAMILIES
                    else np.ones(len(y), dtype=bool))
            booster = make({**params, "random_state": seed * self.bag + i})
            boosters.append(booster.fit(X[keep], y[keep], sample_weight=weight[keep]) if self.client is None
                            else _fit_on_dask(self.client, booster, X[keep], y[keep], weight[keep]))
            self._tick()
        return boosters

    def _band_model(self, target: str, params: Mapping[str, Any]) -> xgb.XGBRegressor:
        return _regressor(band_params(params), target, objective="reg:quantileerror",
                          quantile_alpha=np.array(_quantiles(self.level)))

    def _oof(self, make: Callable[[Mapping[str, Any]], xgb.XGBRegressor], params: Mapping[str, Any],
             X: pd.DataFrame, y: np.ndarray, folds: Sequence[tuple[np.ndarray, np.ndarray]], weight: np.ndarray,
             groups: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        """Out-of-fold predictions of bags made by `make` (a point: one column; a band: two), each fitted around the
        GPUs' levels as its fold's training rows set them (a GPU with none there: their levels' median)."""
        out = None
        widths = X["dtype_bytes"].to_numpy() if "dtype_bytes" in X else None
        for train, test in folds:
            level = level_of(gpu_levels(y[train], gpus[train], None if widths is None else widths[train]), gpus,
                             widths=widths)
            models = self._fit_bag(make, params, X.iloc[train], y[train] - level[train], weight[train], groups[train])
            pred = _predict_bag(models, X.iloc[test])
            if out is None:
                out = np.empty((len(y), *pred.shape[1:]))
            out[test] = pred + (level[test][:, None] if pred.ndim > 1 else level[test])
        return out

    def _raw(self, values: np.ndarray, pooled: bool) -> dict[tuple[str, bool], np.ndarray]:
        if len(values) > TREE_ARRAY_MAX_ROWS or self.params.get("max_depth", 6) > TREE_ARRAY_MAX_DEPTH:
            return {key: _predict_bag(bag, values) for key, bag in zip(BAG_KEYS, self._bags(pooled))}
        return super()._raw(values, pooled)

    def _bags(self, pooled: bool) -> list[list[xgb.XGBRegressor]]:
        points, bands = (self.pooled, self.pooled_bands) if pooled else (self.points, self.bands)
        return [(bands if band else points)[target] for target, band in BAG_KEYS]

    def _tree_arrays(self, pooled: bool) -> TreeArrays:
        if pooled not in self.trees:
            self.trees[pooled] = from_models([[m.get_booster() for m in bag] for bag in self._bags(pooled)])
        return self.trees[pooled]

    def save(self, folder: str | Path, meta: Mapping[str, Any] | None = None) -> Path:
        """The boosters (XGBoost's JSON, gzipped) beside what the estimator reads (`Residual.save_fitted`)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for target in TARGETS:
            for i, (point, band) in enumerate(zip(self.points[target], self.bands[target])):
                _save_booster(point, folder / f"{target}_{i}.json.gz")
                _save_booster(band, folder / f"{target}_band_{i}.json.gz")
            for i, (point, band) in enumerate(zip(self.pooled[target], self.pooled_bands[target])):
                _save_booster(point, folder / f"{target}_pooled_{i}.json.gz")
                _save_booster(band, folder / f"{target}_pooled_band_{i}.json.gz")
        return self.save_fitted(folder, meta)

    @classmethod
    def load(cls, folder: str | Path) -> "ResidualModel":
        """A saved model with its boosters (also one saved before tree arrays were: `convert` adds them)."""
        folder = Path(folder)
        info = json.loads((folder / ESTIMATOR_FILE).read_text())
        model = cls(**fitted_fields(info))
        # a model saved before bags (one booster, no "bag" key) names its files without a member number
        names = [f"_{i}" for i in range(model.bag)] if "bag" in info else [""]
        # a model saved before GPU levels fitted one bag for every GPU: it is its own pooled bag, levels none
        pooled = "levels" in info
        for target in TARGETS:
            model.points[target] = [_load_booster(folder / f"{target}{n}") for n in names]
            model.bands[target] = [_load_booster(folder / f"{target}_band{n}") for n in names]
            model.pooled[target] = ([_load_booster(folder / f"{target}_pooled{n}") for n in names] if pooled
                                    else model.points[target])
            model.pooled_bands[target] = ([_load_booster(folder / f"{target}_pooled_band{n}") for n in names]
                                          if pooled else model.bands[target])
        return model


def convert(folder: str | Path) -> Path:
    """Add the tree arrays the estimator reads to a model folder saved before they were (boosters unchanged)."""
    model = ResidualModel.load(folder)
    meta = model.cv.pop("meta", {})
    return model.save_fitted(folder, {k: v for k, v in meta.items() if k not in ("level", "bag", "gpus", "cv")})
