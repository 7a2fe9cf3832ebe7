"""Training on real EnergAIzer rows (small grid), the hybrid against physics, intervals, MLflow on a real server."""

import dataclasses
import gzip
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

import joulecast
from joulecast.data.importers import import_source
from joulecast.estimator.loading import load_estimator
from joulecast.estimator.residual import OUT_OF_DOMAIN_WIDEN, UNLEARNED_WIDEN, Residual, level_key, level_of
from joulecast.features import arch
from joulecast.training import residual as residual_training
from joulecast.training.dataset import training_table
from joulecast.training.evaluate import coverage_p_value
from joulecast.training.residual import (
    GPU_WEIGHT_MIN_ROWS,
    TREE_ARRAY_MAX_ROWS,
    ResidualModel,
    gpu_weights,
    weighted_quantile,
)
from joulecast.training.train import train

SMALL_GRID = ({"max_depth": 3, "learning_rate": 0.1, "n_estimators": 60, "min_child_weight": 2.0},)


def _synthetic_features(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """n rows of the features the synthetic residual tests need: FLOPs, clock and power limit (at the maximum)."""
    return pd.DataFrame({"log_flops": rng.uniform(20, 30, n), "clock_ratio": rng.uniform(0.4, 1.0, n),
                         "power_limit_ratio": np.ones(n)})


def _one_gpu_four_families(seed: int, n: int = 120) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, list[str]]:
    """n rows of one GPU in four model families, a smooth residual in FLOPs plus noise: (X, y, groups, gpus)."""
    rng = np.random.default_rng(seed)
    X = _synthetic_features(rng, n)
    y = 0.1 * np.sin(X["log_flops"].to_numpy()) + 0.02 * rng.normal(size=n)
    return X, y, np.repeat(list("abcd"), n // 4), ["a100"] * n


def _gpus_told_apart(rng: np.random.Generator, counts: dict[str, int],
                     bandwidth: dict[str, float]) -> tuple[np.ndarray, pd.DataFrame, np.ndarray]:
    """`counts` rows per GPU, told apart by a spec column (`bandwidth` per GPU, 650 GB/s for the rest), and their
    model families, five cycling: (gpus, features, groups)."""
    gpus = np.repeat(list(counts), list(counts.values()))
    X = _synthetic_features(rng, len(gpus)).assign(gpu_bandwidth_gbs=[bandwidth.get(g, 650.0) for g in gpus])
    return gpus, X, np.tile(list("abcde"), len(gpus) // 5)


@pytest.fixture(scope="module")
def measurements(energaizer):
    return import_source("energaizer", energaizer)


def test_training_table(measurements):
    published = measurements["measurement_id"].str.split(":").str[0].isin(["a10", "a100", "dvfs"])
    table = training_table(measurements[published])  # the artifact's own files (another GPU's may sit beside them)
    assert len(table.rows) == 447 - 13 and table.dropped == {"failed run": 13}
    assert np.isfinite(table.y_energy).all() and np.isfinite(table.y_time).all()
    assert len(table.X) == len(table.rows) and not table.X.isna().any().any()


def test_hybrid_beats_physics_and_holds_out_a_family(measurements, tmp_path):
    result = train(measurements, exclude_model=["gpt2"], out=tmp_path / "est", grid=SMALL_GRID, log_mlflow=False)
    m = result.metrics
    # Grouped CV (model families never in both train and test): the residual must remove much of the physics error
    # (physics 9.1 %, hybrid 4.6 % since the wide softmax's cost; 0.6, as the better physics leaves the trees less)
    assert m["cv_hybrid_energy_mape"] < 0.6 * m["cv_physics_energy_mape"]
    assert m["held_out_energy_mape"] < m["held_out_physics_energy_mape"]
    assert 0 <= m["held_out_coverage"] <= 100
    # the kinds of work each GPU was trained on travel with the model (EnergAIzer's rows: forward passes)
    assert result.model.gpu_work == {"a10": ["forward"], "a100-pcie-40gb": ["forward"]}
    assert joulecast.estimate(joulecast.workload("gpt2", phase="training", batch=2, seq=64), "a10",
                              estimator=str(tmp_path / "est")).in_domain is False
    # beside the hybrid's coverage (cross-validated and held out), the range chance allows it; physics has no interval
    parts = result.partitions
    hybrid = parts[parts["estimator"] == "hybrid"]
    assert set(hybrid["split"]) == {"cv", "held_out"} and (hybrid["chance_low"] <= hybrid["chance_high"]).all()
    assert parts.loc[parts["estimator"] == "physics", "chance_low"].isna().all()
    # and the p-value of its count were the true coverage within 86-94 %
    assert (hybrid["p_in_target"] == [coverage_p_value(round(c * n / 100), n)
                                      for c, n in zip(hybrid["coverage"], hybrid["rows"])]).all()
    assert parts.loc[parts["estimator"] == "physics", "p_in_target"].isna().all()
    model = load_estimator(str(tmp_path / "est"))
    # batch, sequence, launch count and mean kernel time name a model: not inputs of the trees, but still the domain
    assert not {"log_batch", "log_seq", "log_launches", "log_mean_kernel_s"} & set(model.features)
    assert {"log_batch", "log_seq"} <= set(model.domain)
    # a conformal margin of its own for each GPU with 30 rows or more (both here), saved and loaded with the model
    assert set(model.conformal_by_gpu["energy"]) == {"a10", "a100-pcie-40gb"} == set(model.conformal_by_gpu["time"])
    margins = model._margins("energy", ["a10", "h100-sxm"])  # a GPU with too few rows takes the pooled margin
    np.testing.assert_array_equal(margins, [model.conformal_by_gpu["energy"]["a10"], model.conformal["energy"]])
    assert set(model.conformal_new_gpu) == {"time", "energy"}  # measured by leaving the A10, then the A100, out
    # GPT-2 as EnergAIzer ran it (eager attention: the trees saw no fused attention's share of the time)
    eager = joulecast.workload("gpt2", batch=8, seq=512, attention="eager")
    est = joulecast.estimate(eager, "a100", sm_clock_mhz=900, estimator=str(tmp_path / "est"))
    assert est.method == "hybrid" and est.energy_interval_j[0] <= est.energy_j <= est.energy_interval_j[1]
    assert model.level == 0.9 and est.in_domain and est.flags == ()
    spec_only = joulecast.estimate(eager, "l4", estimator=str(tmp_path / "est"))
    assert spec_only.flags == ("spec-only",) and not spec_only.in_domain
    width = lambda e: e.energy_interval_j[1] / e.energy_interval_j[0]  # noqa: E731
    assert width(spec_only) > width(est)
    with pytest.raises(joulecast.InputError, match="--exclude-gpu: 'h200' is not in the training data"):
        train(measurements, exclude_gpu=["h200"], grid=SMALL_GRID, log_mlflow=False)


def test_point_corrections_are_medians():
    """The point models minimise the absolute log error: a fifth of the rows 2x off (say, a slow host) leave the
    correction at the median, 0, where a squared error would move it to about log(2) / 5."""
    rng = np.random.default_rng(0)
    n = 200
    X = _synthetic_features(rng, n)
    y = np.where(rng.random(n) < 0.2, np.log(2.0), 0.0)
    model = ResidualModel().fit(X, {"time": y, "energy": y}, np.repeat(list("abcd"), n // 4), ["a100"] * n,
                                grid=SMALL_GRID)
    point = model.predict(X, ["a100"] * n)["energy"]
    assert np.median(np.abs(point)) < 0.02 < np.log(2.0) / 5


def test_a_bag_of_seeds_saves_loads_and_reads_a_model_saved_before_bags(tmp_path):
    """Each model is the mean of `bag` boosters of different seeds; saved and loaded, it predicts the same, on the
    tree-array path (a few rows) and on XGBoost's (many); a folder saved before bags (one booster a model, no `bag`
    key) still loads."""
    X, y, groups, gpus = _one_gpu_four_families(seed=4)
    n = len(X)
    model = ResidualModel(bag=3).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    assert [m.get_params()["random_state"] for m in model.points["energy"]] == [0, 1, 2]
    X2 = X.assign(log_flops=X["log_flops"] + 0.01)  # not the training rows
    singles = [model.points["energy"][i].get_booster().inplace_predict(X2) for i in range(3)]
    many = model.predict(X2, gpus)  # the GPU's level plus the bag's mean
    np.testing.assert_allclose(many["energy"], model.levels["energy"]["a100"] + np.mean(singles, axis=0), rtol=1e-6)
    loaded = ResidualModel.load(model.save(tmp_path / "bag"))
    assert loaded.bag == 3 and loaded.band_floor == model.band_floor
    for rows in (slice(0, 2), slice(0, n)):
        np.testing.assert_array_equal(loaded.predict(X2[rows], gpus[rows])["energy_hi"], many["energy_hi"][rows])
        np.testing.assert_array_equal(model.predict(X2[rows], gpus[rows])["energy"], many["energy"][rows])

    single = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    old = single.save(tmp_path / "old")
    for name in ("time", "time_band", "energy", "energy_band"):  # plain JSON, no member number: as saved then
        (old / f"{name}.json").write_bytes(gzip.decompress((old / f"{name}_0.json.gz").read_bytes()))
        (old / f"{name}_0.json.gz").unlink()
    info = json.loads((old / "estimator.json").read_text())
    del info["bag"], info["band_floor"], info["conformal_new_gpu"], info["conformal_few_rows"], info["levels"]
    # one margin for both sides, as saved before each side had its own
    info["conformal"] = {t: max(m) for t, m in info["conformal"].items()}
    info["conformal_by_gpu"] = {t: {g: max(m) for g, m in by.items()} for t, by in info["conformal_by_gpu"].items()}
    (old / "estimator.json").write_text(json.dumps(info))
    legacy = ResidualModel.load(old)
    assert legacy.bag == 1 and len(legacy.points["energy"]) == 1 and legacy.band_floor == {}  # no floor: the band
    assert legacy.conformal_by_gpu["energy"]["a100"] == [max(single.conformal_by_gpu["energy"]["a100"])] * 2
    assert legacy.conformal_few_rows == {}  # saved before: a GPU of few rows takes the new-GPU margin, as it did
    # saved before GPU levels: its one bag serves every GPU, at no level
    np.testing.assert_array_equal(legacy.predict(X2, gpus)["energy"],
                                  single.points["energy"][0].get_booster().inplace_predict(X2))
    assert legacy.pooled["energy"] is legacy.points["energy"] and legacy.levels == {}


def test_bands_take_fewer_larger_steps_and_leave_the_points_as_they_were(monkeypatch):
    """A band's boosters have a quarter of the point's rounds at three times its rate; the points, and so every
    estimate, are those a model whose bands took the points' steps gives, bit for bit."""
    X, y, groups, gpus = _one_gpu_four_families(seed=5)
    model = ResidualModel(bag=2).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    band = model.bands["energy"][0].get_params()
    assert band["n_estimators"] == 15 and band["learning_rate"] == pytest.approx(0.3)
    assert model.points["energy"][0].get_params()["n_estimators"] == 60
    monkeypatch.setattr(residual_training, "BAND_ROUND_DIVISOR", 1)
    monkeypatch.setattr(residual_training, "BAND_RATE_FACTOR", 1.0)
    even = ResidualModel(bag=2).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    assert even.bands["energy"][0].get_params()["n_estimators"] == 60
    ours, theirs = model.predict(X, gpus), even.predict(X, gpus)
    np.testing.assert_array_equal(ours["energy"], theirs["energy"])
    np.testing.assert_array_equal(ours["time"], theirs["time"])
    assert not np.array_equal(ours["energy_hi"], theirs["energy_hi"])  # the bands did change


def test_each_gpu_trained_on_has_its_own_level_and_a_new_gpu_gets_the_pooled_bag():
    """GPU a's rows sit 0.3 above GPU b's, and only a's rows run softmax but for one family, z, which runs none, as
    b's rows. Fitted around each GPU's level, the trees learn nothing of that offset, so z, held out, is predicted
    at a's level, not pulled to b's by its missing softmax (as ResNet was by H200 kernel rows). A GPU not trained on
    gets the pooled bag, fitted on the raw residuals."""
    rng = np.random.default_rng(3)
    gpus = np.repeat(["a", "b"], [150, 120])
    groups = np.concatenate([np.repeat(list("pqrsz"), 30), np.repeat(list("tuvw"), 30)])
    X = _synthetic_features(rng, len(gpus)).assign(
        share_softmax=np.where((gpus == "a") & (groups != "z"), rng.uniform(0.1, 0.3, len(gpus)), 0.0))
    y = np.where(gpus == "a", 0.3, 0.0) + 0.01 * rng.normal(size=len(gpus))
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    assert model.levels["energy"]["a"] == pytest.approx(0.3, abs=0.01)
    assert model.levels["energy"]["b"] == pytest.approx(0.0, abs=0.01)
    z = groups == "z"
    assert np.abs(model.oof["energy"][z] - 0.3).max() < 0.05  # out of fold: z's family was not trained on
    rows = X.iloc[:4]
    seen, new = model.predict(rows, ["a"] * 4), model.predict(rows, ["h100"] * 4)
    np.testing.assert_allclose(seen["energy"], model.levels["energy"]["a"] +
                               model.points["energy"][0].get_booster().inplace_predict(rows), rtol=1e-6)
    np.testing.assert_allclose(new["energy"], model.pooled["energy"][0].get_booster().inplace_predict(rows), rtol=1e-6)
    mixed = model.predict(pd.concat([rows] * 3), ["a"] * 4 + ["h100"] * 4 + ["b"] * 4)  # 12 rows: XGBoost's path
    np.testing.assert_allclose(mixed["energy"][:8], np.concatenate([seen["energy"], new["energy"]]), rtol=1e-6)
    np.testing.assert_allclose(mixed["energy"][8:] - seen["energy"],
                               model.levels["energy"]["b"] - model.levels["energy"]["a"], rtol=1e-5)


def test_a_gpu_that_ran_several_operand_widths_has_a_level_for_each(tmp_path):
    """GPU a's bf16 rows (2 bytes) sit 0.3 over physics and its fp32 ones (4 bytes) at 0; b ran bf16 alone, at 0.1.
    a gets a level per width besides its own; b, of one width, none; a width of fewer than PRECISION_LEVEL_MIN_ROWS
    rows (a's five fp8 rows) none either, so an fp8 row of a reads a's own level. Saved and loaded, the shipped form
    reads the same."""
    rng = np.random.default_rng(5)
    gpus = np.repeat(["a", "a", "a", "b"], [100, 60, 5, 100])
    width = np.repeat([2, 4, 1, 2], [100, 60, 5, 100])
    groups = rng.choice(list("pqrst"), len(gpus))
    X = _synthetic_features(rng, len(gpus)).assign(dtype_bytes=width.astype(float))
    offset = np.select([(gpus == "a") & (width == 2), gpus == "b"], [0.3, 0.1], 0.0)
    y = offset + 0.01 * rng.normal(size=len(gpus))
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    levels = model.levels["energy"]
    assert set(levels) == {"a", "b", level_key("a", 2), level_key("a", 4)}
    assert levels[level_key("a", 2)] == pytest.approx(0.3, abs=0.01)
    assert levels[level_key("a", 4)] == pytest.approx(0.0, abs=0.01)
    assert levels["a"] == pytest.approx(0.3, abs=0.01)  # the median of a's rows, most of them bf16
    rows = X.iloc[[0, 100, 160]]  # a's bf16, fp32 and fp8 rows
    np.testing.assert_allclose(level_of(levels, ["a"] * 3, widths=rows["dtype_bytes"].to_numpy()),
                               [levels[level_key("a", 2)], levels[level_key("a", 4)], levels["a"]])
    np.testing.assert_allclose(level_of(levels, ["b", "h100"], missing=0.0, widths=np.array([4.0, 2.0])),
                               [levels["b"], 0.0])  # b has no width levels; a GPU not trained on, `missing`
    point = model.predict(rows, ["a"] * 3)["energy"]
    np.testing.assert_allclose(point, [0.3, 0.0, 0.0], atol=0.05)  # the fp8 rows' -0.3 about a's level: the trees'
    wide = (gpus == "a") & (width > 1)  # out of fold too, each fold's levels per width its training rows'
    np.testing.assert_allclose(model.oof["energy"][wide], offset[wide], atol=0.05)
    loaded = Residual.load(model.save_fitted(tmp_path / "widths"))
    assert loaded.levels == model.levels
    np.testing.assert_allclose(loaded.predict(rows, ["a"] * 3)["energy"], point, rtol=1e-6)


def test_a_gpu_of_few_rows_whose_own_rows_miss_further_keeps_their_margins(tmp_path):
    """Of two GPUs with 10 rows each, one ("e") has corrections that scatter (sd 0.8) where every other GPU's sit
    near 0; its few rows weigh too little for a leaf of their own, so its out-of-fold rows miss by more than a GPU
    not trained on does. Its margins are then its own rows' (the largest miss on each side: 10 rows are too few for
    the conformal rank) and its out-of-fold intervals cover every one of them; the other ("d"), whose rows miss
    less, keeps the new-GPU margin. Saved and loaded with the model."""
    rng = np.random.default_rng(11)
    gpus, X, groups = _gpus_told_apart(rng, {"a": 120, "b": 120, "d": 10, "e": 10},
                                       {"a": 600.0, "b": 900.0, "e": 3000.0})
    n = len(gpus)
    y = np.where(gpus == "e", rng.normal(0, 0.8, n), 0.0) + 0.01 * rng.normal(size=n)
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    few, new = model.conformal_few_rows["energy"], model.conformal_new_gpu["energy"]
    assert set(few) == {"d", "e"} and set(model.conformal_by_gpu["energy"]) == {"a", "b"}
    little = np.maximum(model.conformal["energy"], new)
    assert (np.asarray(few["e"]) > little).all() and (np.asarray(few["d"]) < little).all()
    np.testing.assert_array_equal(model._margins("energy", ["e", "d", "a", "h100"]),
                                  [few["e"], little, model.conformal_by_gpu["energy"]["a"], model.conformal["energy"]])
    e = gpus == "e"
    # its largest misses set the margins, so those rows lie on the edge: 1e-9 for the rounding of point + reach
    assert ((y[e] >= model.oof["energy_lo"][e] - 1e-9) & (y[e] <= model.oof["energy_hi"][e] + 1e-9)).all()
    rows = X.iloc[:3]
    own, seen_little = model.predict(rows, ["e"] * 3), model.predict(rows, ["d"] * 3)
    assert ((own["energy_hi"] - own["energy"]) > (seen_little["energy_hi"] - seen_little["energy"])).all()
    assert own["in_domain"].all()  # trained on: not flagged, its interval is only wider
    loaded = ResidualModel.load(model.save(tmp_path / "few"))
    assert loaded.conformal_few_rows == model.conformal_few_rows
    np.testing.assert_array_equal(loaded.predict(rows, ["e"] * 3)["energy_lo"], own["energy_lo"])


def test_each_booster_of_a_bag_leaves_one_family_out():
    """A jackknife over families: with four families, the i-th booster of seed 0 is fitted without the i-th family
    (the fifth without the first again), so only the booster that never saw family d's large offset predicts none
    for d's rows; with two families every booster sees both."""
    rng = np.random.default_rng(8)
    n = 160
    X = _synthetic_features(rng, n)
    groups = np.repeat(list("abcd"), n // 4)
    X.loc[groups == "d", "log_flops"] += 20  # family d's rows lie apart, and its correction is large
    y = np.where(groups == "d", 1.0, 0.0)
    model = ResidualModel(bag=5).fit(X, {"time": y, "energy": y}, groups, ["a100"] * n, grid=SMALL_GRID)
    d = X[groups == "d"][model.features]
    per_booster = np.array([np.median(b.get_booster().inplace_predict(d)) for b in model.points["energy"]])
    assert per_booster[3] == pytest.approx(0.0, abs=0.05)  # fitted without d
    assert np.delete(per_booster, 3) == pytest.approx(np.ones(4), abs=0.05)
    two = (groups == "c") | (groups == "d")
    pair = ResidualModel(bag=3).fit(X[two].reset_index(drop=True), {"time": y[two], "energy": y[two]}, groups[two],
                                    ["a100"] * int(two.sum()), grid=SMALL_GRID)
    level = pair.levels["energy"]["a100"]  # the GPU's level, 0.5, lies between the two families' corrections
    assert [level + np.median(b.get_booster().inplace_predict(d)) for b in pair.points["energy"]] == pytest.approx(
        [1.0] * 3, abs=0.05)


def test_a_narrow_band_reaches_at_least_the_median_and_the_out_of_fold_intervals_cover():
    """Noise ten times larger on half of the rows: the quantile band is narrow on the quiet half, where it is
    floored at the median out-of-fold reach in each direction; the conformal margin comes on top, and the out-of-fold
    intervals it was calibrated on cover at least the nominal 90 %."""
    rng = np.random.default_rng(6)
    n = 200
    X = _synthetic_features(rng, n)
    y = np.where(X["log_flops"] > 25, 0.1, 0.01) * rng.normal(size=n)
    gpus = ["a100"] * n
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, np.repeat(list("abcd"), n // 4), gpus,
                                     grid=SMALL_GRID)
    below_floor, above_floor = model.band_floor["energy"]
    assert 0 < below_floor < 0.1 and 0 < above_floor < 0.1
    out = model.predict(X, gpus)
    margin_below, margin_above = model.conformal_by_gpu["energy"]["a100"]
    below, above = out["energy"] - out["energy_lo"], out["energy_hi"] - out["energy"]
    assert (below >= below_floor + margin_below - 1e-6).all() and (above >= above_floor + margin_above - 1e-6).all()
    quiet = (X["log_flops"] < 25).to_numpy()
    assert np.isclose(below[quiet], below_floor + margin_below, atol=1e-6).mean() > 0.5  # the floor sets them
    assert below[~quiet].mean() > below[quiet].mean()  # the noisy half still gets the wider band
    oof_covered = (model.oof["energy_lo"] <= y) & (y <= model.oof["energy_hi"])
    assert oof_covered.mean() >= 0.9


def test_each_side_of_the_interval_gets_its_own_conformal_margin():
    """A fifth family's rows lie apart and sit 0.3 above the rest: out of fold they are predicted about 0.3 low, so
    the band misses them above, never below. Each side's margin is the conformal quantile of its own misses at 95 %,
    so the interval reaches further above than below, and the out-of-fold intervals still cover 90 %."""
    rng = np.random.default_rng(10)
    n = 200
    X = _synthetic_features(rng, n)
    groups = np.tile(list("abcde"), n // 5)
    X.loc[groups == "e", "log_flops"] += 20
    y = np.where(groups == "e", 0.3, 0.0) + 0.02 * rng.normal(size=n)
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, ["a100"] * n, grid=SMALL_GRID)
    below, above = model.conformal_by_gpu["energy"]["a100"]
    assert above > below + 0.1
    out = model.predict(X.iloc[:4], ["a100"] * 4)  # a row of each of the other families
    assert ((out["energy_hi"] - out["energy"]) > (out["energy"] - out["energy_lo"]) + 0.1).all()
    covered = (model.oof["energy_lo"] <= y) & (y <= model.oof["energy_hi"])
    assert covered.mean() >= 0.9 and covered[groups == "e"].mean() >= 0.5


def test_the_margins_are_calibrated_on_the_interval_joined_with_an_unstated_hosts_spread(monkeypatch):
    """Half the rows of two GPUs run on machines that state no host: their estimates join the hosts' spread (0.3 each
    way here) to the interval in quadrature (`estimator.api.combine`), and physics misses them by up to 0.25 as the
    host varies; the rest miss by noise alone. Calibrated on the interval so joined, the margins past the band
    (which learns the host-bound rows' spread too) are smaller by more than 0.1, the joined out-of-fold intervals still
    cover 90 % or more, and a new GPU's physics margin is about the noise's (the host-bound rows lie within their
    spread). Calibrated past the band alone (`CONFORMAL_ON_JOINED` off, the rule before), the joined intervals cover
    every row: the host counted twice."""
    rng = np.random.default_rng(12)
    gpus, X, groups = _gpus_told_apart(rng, {"a": 120, "b": 120}, {"a": 600.0, "b": 900.0})
    X = X.assign(gpu_arch=8.0)
    n = len(gpus)
    unstated = np.arange(n) % 2 == 0
    y = 0.02 * rng.normal(size=n) + np.where(unstated, rng.uniform(-0.25, 0.25, n), 0.0)
    spread = np.where(unstated[:, None], [-0.3, 0.3], 0.0)
    reach = {"time": spread, "energy": spread}

    def fitted() -> ResidualModel:
        return ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID, reach=reach)

    def joined_coverage(model: ResidualModel) -> float:
        point, lo, hi = (model.oof[k] for k in ("energy", "energy_lo", "energy_hi"))
        below, above = np.hypot(point - lo, spread[:, 0]), np.hypot(hi - point, spread[:, 1])
        return float(((y >= point - below) & (y <= point + above)).mean())

    joined = fitted()
    monkeypatch.setattr(residual_training, "CONFORMAL_ON_JOINED", False)
    alone = fitted()
    for g in ("a", "b"):  # the band learns the host-bound rows' spread too: joined, the margin takes it back
        now, before = (np.array(m.conformal_by_gpu["energy"][g]) for m in (joined, alone))
        assert (now < before - 0.1).all()
    assert joined.physics_new_gpu["energy"] < 0.06 < 0.15 < alone.physics_new_gpu["energy"]
    assert 0.9 <= joined_coverage(joined) < 0.97 and joined_coverage(alone) > 0.99
    # the host-bound rows' misses lie within the spread: the joined interval covers them whatever the margin
    assert not unstated[np.abs(y - joined.oof["energy"]) > 0.3].any()


def test_a_gpu_not_trained_on_reads_at_physics_point_with_the_pooled_spread():
    """Two GPUs of one architecture (code 8.0) run 0.3 above physics. A new GPU, of that architecture or another (7.0),
    reads at physics' point, as far each way as physics missed the GPUs trained on (UNLEARNED_WIDEN times that
    for the other architecture), and one of another architecture says why; a GPU trained on is untouched by its
    architecture code. A model saved before the physics margins moves the pooled bags' interval to physics' point
    (one saved before that, with no architectures recorded, gave the pooled point; widened, as it widened every
    row on a new GPU, for the other architecture only)."""
    rng = np.random.default_rng(5)
    gpus = np.repeat(["a", "b"], [120, 120])
    X = _synthetic_features(rng, len(gpus)).assign(gpu_arch=8.0)
    y = 0.3 + 0.01 * rng.normal(size=len(gpus))
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, np.tile(list("pqrst"), 48), gpus, grid=SMALL_GRID)
    assert model.arch_codes == [8.0]
    rows = X.iloc[:4]
    margin = model.physics_new_gpu["energy"]
    assert margin == pytest.approx(0.3, abs=0.05)
    now, other = model.predict(rows, ["c"] * 4), model.predict(rows.assign(gpu_arch=7.0), ["c"] * 4)
    for target in ("time", "energy"):
        m = model.physics_new_gpu[target]
        np.testing.assert_array_equal(now[target], 0.0)
        np.testing.assert_allclose([-now[f"{target}_lo"], now[f"{target}_hi"]], m, rtol=1e-6)
        np.testing.assert_allclose([-other[f"{target}_lo"], other[f"{target}_hi"]], m * UNLEARNED_WIDEN, rtol=1e-6)
    band = dataclasses.replace(model, physics_new_gpu={}, physics_new_gpu_by_kind={})  # saved before the margins
    kin, new = band.predict(rows, ["c"] * 4), band.predict(rows.assign(gpu_arch=7.0), ["c"] * 4)
    old_rule = dataclasses.replace(band, arch_codes=[])  # as a model saved before that: the pooled bags' point
    pooled = old_rule.predict(rows, ["c"] * 4)
    for target in ("time", "energy"):
        np.testing.assert_allclose(pooled[target], 0.3, atol=0.05)
        lo, hi = pooled[f"{target}_lo"], pooled[f"{target}_hi"]
        np.testing.assert_array_equal(new[target], 0.0)  # the pooled bags' interval, moved to physics' point
        np.testing.assert_allclose(new[f"{target}_lo"], lo - pooled[target], rtol=1e-6)
        np.testing.assert_allclose(new[f"{target}_hi"], hi - pooled[target], rtol=1e-6)
        # the old rule widened every row on a new GPU; one of an architecture trained on is no longer widened: its
        # interval reaches at least the pooled bags' unwidened reach around physics' point (further where the
        # new-GPU margin does, as here), no further than the widened one
        np.testing.assert_array_equal(kin[target], 0.0)
        half = [(pooled[target] - lo) / OUT_OF_DOMAIN_WIDEN, (hi - pooled[target]) / OUT_OF_DOMAIN_WIDEN]
        assert (kin[f"{target}_lo"] <= -half[0] + 1e-9).all() and (kin[f"{target}_hi"] >= half[1] - 1e-9).all()
        assert (kin[f"{target}_lo"] >= new[f"{target}_lo"]).all() and (kin[f"{target}_hi"] <= new[f"{target}_hi"]).all()
    # the new-GPU margin measured how far physics missed the GPUs trained on (0.3): the interval reaches that far
    assert model.conformal_new_gpu["energy"] == pytest.approx(0.3, abs=0.05)
    assert kin["energy_lo"].max() < 0 < 0.3 < kin["energy_hi"].min()
    trained = model.predict(rows.assign(gpu_arch=7.0), ["a"] * 4)
    np.testing.assert_allclose(trained["energy"], model.predict(rows, ["a"] * 4)["energy"], rtol=1e-6)
    reasons = model.outside_domain(rows.assign(gpu_arch=7.0), ["c"] * 4)
    assert all("architecture 7.0 not trained on (trained 8.0): physics' point" in " ".join(r) for r in reasons)
    assert not any("architecture" in " ".join(r) for r in model.outside_domain(rows, ["c"] * 4))


def test_a_new_gpu_gets_a_measured_margin_from_gpus_left_out_each_weighing_alike():
    """Three GPUs told apart by a spec column; the third's corrections sit 0.3 above the others'. Trained on, it is
    learnt; left out, nothing says so and it is predicted about 0.3 low. As it weighs a third of the new-GPU scores
    (its 30 rows against 120 each), the 90 % margin for a GPU never trained on is about that far, past the band and
    about physics' point alike; a GPU never trained on reads at physics' point that far each way (its features in
    range: not widened); a GPU trained on keeps its own, smaller margin, unless it has too few rows for one (the
    fourth, 10 rows like the first's): seen so little, it gets the new-GPU margin past its band."""
    rng = np.random.default_rng(7)
    gpus, X, groups = _gpus_told_apart(rng, {"a": 120, "b": 120, "c": 30, "d": 10},
                                       {"a": 600.0, "b": 900.0, "c": 1500.0})
    n = len(gpus)
    y = np.where(gpus == "c", 0.3, 0.0) + 0.01 * rng.normal(size=n)
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    new = model.conformal_new_gpu["energy"]
    assert 0.2 < new < 0.35 and new > max(model.conformal_by_gpu["energy"]["a"])
    rows = X.iloc[:3]
    seen, unseen = model.predict(rows, ["a"] * 3), model.predict(rows, ["h100"] * 3)
    physics = model.physics_new_gpu["energy"]
    assert 0.2 < physics < 0.35 and set(model.physics_new_gpu_by_kind["energy"]) == {"forward"}
    for side in (unseen["energy_hi"] - unseen["energy"], unseen["energy"] - unseen["energy_lo"]):
        np.testing.assert_allclose(side, physics, rtol=1e-6)
    assert ((unseen["energy_hi"] - unseen["energy"]) > 2 * (seen["energy_hi"] - seen["energy"])).all()
    assert not unseen["in_domain"].any()  # still flagged spec-only: the margin is what changes
    assert "d" not in model.conformal_by_gpu["energy"]
    little = model.predict(rows, ["d"] * 3)
    np.testing.assert_allclose((little["energy_hi"] - little["energy"]) - (seen["energy_hi"] - seen["energy"]),
                               new - model.conformal_by_gpu["energy"]["a"][1], atol=1e-6)
    assert little["in_domain"].all()  # trained on: not flagged, only its margin is the new-GPU one
    d = gpus == "d"  # and so do its out-of-fold intervals, which the coverage reports score
    assert (model.oof["energy_hi"][d] - model.oof["energy"][d] >= model.band_floor["energy"][1] + new - 1e-9).all()
    one_gpu = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, ["a"] * n, grid=SMALL_GRID)
    assert one_gpu.conformal_new_gpu == one_gpu.physics_new_gpu == {}  # nothing measured: a new GPU is only widened
    alone, other = one_gpu.predict(rows, ["a"] * 3), one_gpu.predict(rows, ["h100"] * 3)
    np.testing.assert_allclose(other["energy_hi"] - other["energy"],
                               (alone["energy_hi"] - alone["energy"]) * OUT_OF_DOMAIN_WIDEN, rtol=1e-6)
    assert weighted_quantile(np.array([4.0, 1.0, 3.0, 2.0]), np.ones(4), 0.5) == 2.0
    assert weighted_quantile(np.array([4.0, 1.0, 3.0, 2.0]), np.array([1.0, 0.0, 0.0, 0.0]), 0.5) == 4.0


def test_a_new_gpu_of_a_known_architecture_running_work_without_an_engine_takes_the_measured_margin_unwidened():
    """On a GPU not trained on, of an architecture trained on, a row in range without a serving engine's host work
    gets the new-GPU margin as measured; a serving step (physics far off on such rows: engine effects), or a GPU of
    an architecture not trained on, keeps the widening on top."""
    rng = np.random.default_rng(7)
    gpus, X, groups = _gpus_told_apart(rng, {"a": 120, "b": 120, "c": 30}, {"a": 600.0, "b": 900.0, "c": 1500.0})
    X = X.assign(engine_host_fraction=np.tile([0.0, 0.2], len(gpus) // 2), gpu_arch=8.0)
    y = np.where(gpus == "c", 0.15, 0.0) + 0.1 * rng.normal(size=len(gpus))  # margins of their own
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    assert model.gpu_work["a"] == ["forward", "serving"] and model.conformal_new_gpu["energy"] > 0
    rows = pd.concat([X.iloc[[0]]] * 3).assign(engine_host_fraction=[0.0, 0.2, 0.0], gpu_arch=[8.0, 8.0, 7.0])
    new = model.predict(rows, ["h100"] * 3)
    width = new["energy_hi"] - new["energy_lo"]
    assert width[1] > width[0] > 0 and width[2] == pytest.approx(UNLEARNED_WIDEN * width[0])
    assert width[0] == pytest.approx(2 * model.physics_new_gpu_by_kind["energy"]["forward"])
    assert not new["in_domain"].any()
    # (with no margin measured, every row on a new GPU is widened: the test above, its one-GPU model)


def test_a_new_gpus_margin_is_measured_on_its_own_kind_of_work(tmp_path):
    """Physics misses one GPU's forward passes by 0.3 and nobody's serving steps. Pooled over every kind, those rows
    weigh too little to set the 90 % margin for a new GPU (a twelfth of the scores: three GPUs run both kinds, three
    serve only); scored on forward passes alone, where they weigh a third, they set it. A new GPU's forward pass
    takes that margin, its serving step the serving one (widened, as serving steps are on a new GPU), a training step,
    which no two GPUs ran, the widest."""
    rng = np.random.default_rng(3)
    counts = {g: 120 for g in "abcdef"}
    gpus, X, groups = _gpus_told_apart(rng, counts, {g: 500.0 + 100 * i for i, g in enumerate("abcdef")})
    serving = np.isin(gpus, list("def")) | (np.arange(len(gpus)) % 2 == 1)
    X = X.assign(engine_host_fraction=np.where(serving, 0.2, 0.0), gpu_arch=8.0)
    y = np.where((gpus == "c") & ~serving, 0.3, 0.0) + 0.01 * rng.normal(size=len(gpus))
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    pooled, by_kind = model.physics_new_gpu["energy"], model.physics_new_gpu_by_kind["energy"]
    assert set(by_kind) == set(model.conformal_new_gpu_by_kind["energy"]) == {"forward", "serving"}
    assert by_kind["forward"] == pytest.approx(0.3, abs=0.06) and pooled < 0.1 and by_kind["serving"] < 0.1
    rows = pd.concat([X.iloc[[0]]] * 2).assign(engine_host_fraction=[0.0, 0.2])
    new, seen = model.predict(rows, ["h100"] * 2), model.predict(rows, ["a"] * 2)
    assert new["energy_hi"][0] - new["energy"][0] >= by_kind["forward"] - 1e-9
    assert new["energy_hi"][0] - new["energy"][0] > 2 * (new["energy_hi"][1] - new["energy"][1]) / OUT_OF_DOMAIN_WIDEN
    # a kind no two GPUs ran (a training step): nothing measured says it transfers better, so it takes the widest
    step = model.predict(X.iloc[[0]].assign(engine_host_fraction=0.0, phase_training=1.0), ["h100"])
    assert step["energy_hi"][0] - step["energy"][0] >= by_kind["forward"] - 1e-9 > pooled + 0.1
    # saved and loaded, the margins and intervals are the same; a model saved before them takes the pooled one
    loaded = Residual.load(model.save_fitted(tmp_path / "model"))
    assert loaded.conformal_new_gpu_by_kind == model.conformal_new_gpu_by_kind
    assert loaded.physics_new_gpu == model.physics_new_gpu
    assert loaded.physics_new_gpu_by_kind == model.physics_new_gpu_by_kind
    np.testing.assert_allclose(loaded.predict(rows, ["h100"] * 2)["energy_hi"], new["energy_hi"], rtol=1e-5)
    older = dataclasses.replace(model, physics_new_gpu_by_kind={}, physics_new_gpu_by_arch={}).predict(rows,
                                                                                                      ["h100"] * 2)
    assert older["energy_hi"][0] - older["energy"][0] < new["energy_hi"][0] - new["energy"][0]
    # about physics' point, as far each way as physics missed the trained GPUs' forward passes
    np.testing.assert_allclose([new["energy_hi"][0] - new["energy"][0], new["energy"][0] - new["energy_lo"][0]],
                               by_kind["forward"], rtol=1e-6)
    # a model saved before the physics margins: the pooled band moved to physics' point, past it by the band margin
    band_rule = dataclasses.replace(model, physics_new_gpu={}, physics_new_gpu_by_kind={}).predict(rows, ["h100"] * 2)
    assert band_rule["energy_hi"][0] - band_rule["energy"][0] >= model.conformal_new_gpu_by_kind["energy"]["forward"]
    np.testing.assert_allclose(seen["energy_hi"], model.predict(rows, ["a"] * 2)["energy_hi"])


def test_a_new_gpu_reads_the_physics_margin_of_its_own_architecture(tmp_path):
    """Physics misses the Hopper GPUs' forward passes by up to 0.3 and the one Ampere GPU's by at most 0.05. A new
    Ampere GPU's forward pass takes the Ampere margin, a new Hopper GPU's the Hopper one, a GPU of an architecture not
    trained on the margin pooled over every GPU (widened, as a new architecture is); an architecture's kind with
    fewer than MIN_ROWS_PER_ARCH_MARGIN rows measures none."""
    rng = np.random.default_rng(11)
    gpus, X, groups = _gpus_told_apart(rng, {"a": 120, "b": 120, "c": 120, "d": 10},
                                       {"a": 600.0, "b": 900.0, "c": 1500.0, "d": 2000.0})
    hopper = np.isin(gpus, ["b", "c"])
    X = X.assign(gpu_arch=np.where(hopper, 9.0, np.where(gpus == "d", 10.0, 8.0)))
    y = np.where(hopper, rng.uniform(-0.3, 0.3, len(gpus)), rng.uniform(-0.05, 0.05, len(gpus)))
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, groups, gpus, grid=SMALL_GRID)
    by_arch, pooled = model.physics_new_gpu_by_arch["energy"], model.physics_new_gpu_by_kind["energy"]["forward"]
    assert set(by_arch) == {"8.0", "9.0"}  # the 10 rows of architecture 10.0 measure none
    assert by_arch["8.0"]["forward"] < 0.05 < 0.25 < by_arch["9.0"]["forward"] < 0.3
    assert by_arch["8.0"]["forward"] < pooled < by_arch["9.0"]["forward"]
    rows = pd.concat([X.iloc[[0]]] * 4).assign(gpu_arch=[8.0, 9.0, 7.0, 9.0])
    rows.iloc[3, rows.columns.get_loc("log_flops")] = 40.0  # out of the trained range (20-30)
    new = model.predict(rows, ["new"] * 4)
    # a new architecture's row, or a known one's with a feature out of range, widened by UNLEARNED_WIDEN
    np.testing.assert_allclose(new["energy_hi"] - new["energy"],
                               [by_arch["8.0"]["forward"], by_arch["9.0"]["forward"], pooled * UNLEARNED_WIDEN,
                                by_arch["9.0"]["forward"] * UNLEARNED_WIDEN], rtol=1e-5)
    assert 1.0 < UNLEARNED_WIDEN < OUT_OF_DOMAIN_WIDEN
    np.testing.assert_allclose(new["energy"] - new["energy_lo"], new["energy_hi"] - new["energy"], rtol=1e-5)
    loaded = Residual.load(model.save_fitted(tmp_path / "model"))
    assert loaded.physics_new_gpu_by_arch == model.physics_new_gpu_by_arch
    assert loaded.physics_arch_mix == model.physics_arch_mix and set(model.physics_arch_mix) == set(by_arch)
    np.testing.assert_allclose(loaded.predict(rows, ["new"] * 4)["energy_hi"], new["energy_hi"], rtol=1e-5)
    older = dataclasses.replace(model, physics_new_gpu_by_arch={}).predict(rows, ["new"] * 4)  # saved before it
    np.testing.assert_allclose(older["energy_hi"][:2] - older["energy"][:2], pooled, rtol=1e-5)


def test_a_kernel_mix_not_trained_on_is_flagged_and_widened():
    """Convolutions take at most a fifth of the training rows' time: a workload where they take half lies outside
    the domain, is flagged, named and widened by OUT_OF_DOMAIN_WIDEN; one at 24 % is within the margin a time share
    is allowed, as is a norm share of 6 % where the training range is 0-2 %."""
    rng = np.random.default_rng(9)
    n = 120
    X = _synthetic_features(rng, n).assign(share_conv2d=rng.uniform(0, 0.2, n), share_norm=rng.uniform(0, 0.02, n))
    y = 0.05 * rng.normal(size=n)
    model = ResidualModel(bag=1).fit(X, {"time": y, "energy": y}, np.tile(list("abcd"), n // 4), ["a100"] * n,
                                     grid=SMALL_GRID)
    assert {"share_conv2d", "share_norm"} <= set(model.domain)
    rows = pd.concat([X.iloc[[0]]] * 3, ignore_index=True)
    rows.loc[1, ["share_conv2d", "share_norm"]] = [0.24, 0.06]
    rows.loc[2, "share_conv2d"] = 0.5
    out = model.predict(rows, ["a100"] * 3)
    assert list(out["in_domain"]) == [True, True, False]
    assert list(model.flags(out["in_domain"], ["a100"] * 3)) == ["", "", "out-of-domain"]
    low, high = model.domain["share_conv2d"]
    assert model.outside_domain(rows) == [(), (), (f"share_conv2d = 0.5 (trained {low:.3g} to {high:.3g})",)]
    blind = ResidualModel(**{**vars(model), "domain": {c: r for c, r in model.domain.items() if c != "share_conv2d"}})
    inside = blind.predict(rows, ["a100"] * 3)
    assert inside["in_domain"].all()
    np.testing.assert_allclose(out["energy_hi"] - out["energy"], (inside["energy_hi"] - inside["energy"]) *
                               np.array([1.0, 1.0, OUT_OF_DOMAIN_WIDEN]), rtol=1e-6)


def test_training_progress_counts_every_booster(capsys):
    """The bar's total is the number of boosters fitted: bags of 2 x (one grid setting x 4 folds, then per target 4
    out-of-fold points, 4 out-of-fold bands, the final point and band around the GPU's level, the pooled point and
    band) = 56."""
    rng = np.random.default_rng(5)
    n = 80
    X = _synthetic_features(rng, n)
    y = 0.02 * rng.normal(size=n)
    ResidualModel(bag=2).fit(X, {"time": y, "energy": y}, np.repeat(list("abcd"), n // 4), ["a100"] * n,
                             grid=SMALL_GRID, progress=True)
    assert "56/56" in capsys.readouterr().err


def test_every_gpu_weighs_the_same_and_a_few_rows_do_not_outweigh_the_rest():
    gpus = ["a100"] * 300 + ["a10"] * 120 + ["h100"] * 5
    w = gpu_weights(gpus)
    assert w.mean() == pytest.approx(1.0)
    assert w[:300].sum() == pytest.approx(w[300:420].sum())  # 300 A100 rows weigh what 120 A10 rows do
    assert w[420:].sum() == pytest.approx(w[300:420].sum() * 5 / GPU_WEIGHT_MIN_ROWS)  # 5 rows count as 5 of 100


def test_hybrid_respects_physics_limits():
    """Shipped model: a higher clock is never slower; average power never exceeds the limit."""
    w = joulecast.workload("qwen2-1.5b", batch=4, seq=512)
    times = [joulecast.estimate(w, "a100", sm_clock_mhz=c).time_s for c in (600, 900, 1200, 1410)]
    assert all(a >= b for a, b in zip(times, times[1:]))
    for gpu in ("a10", "a100", "h100-sxm"):
        est = joulecast.estimate(joulecast.workload("bert-large", batch=8, seq=384), gpu)
        assert est.power_w <= est.power_limit_w + 1e-9


def test_estimate_many_equals_one_by_one():
    """Also the two tree walkers: one row goes through numpy tree arrays, nine through XGBoost's predictor; and the
    flags, with what lies outside the domain (the last row: a decode of a 65,536-token cache, longer than any
    trained on)."""
    configs = pd.DataFrame({"model": ["gpt2", "llama-3-8b", "gpt2", "qwen2-1.5b", "resnet-101", "bert-large",
                                      "vit-large", "mistral-7b", "opt-1.3b", "llama-3-8b"],
                            "gpu": ["a100", "h100-sxm", "a10", "a100", "a10", "h200", "l4", "b200", "a100", "h100-sxm"],
                            "phase": ["prefill", "decode", "prefill", "training", "inference", "prefill", "inference",
                                      "decode", "prefill", "decode"],
                            "batch": [8, 16, 1, 2, 32, 4, 16, 1, 4, 32], "seq": [512, 2048, 128, 256, None, 384, None,
                                                                                 512, 1024, 65536],
                            "sm_clock_mhz": [900, None, None, 1200, None, None, None, None, 1000, None],
                            # one decode served as by vLLM 0.5.4: CUDA graphs and the engine's host work per step
                            "launch_mode": ["eager"] * 7 + ["graph", None, None],
                            "engine": [None] * 7 + ["vllm-0.5.4", None, None]})
    assert len(configs) > TREE_ARRAY_MAX_ROWS
    many = joulecast.estimate_many(configs)
    assert many["outside_domain"].iloc[-1].startswith("log_seq = 11.1")
    for row, out in zip(configs.itertuples(), many.itertuples()):
        clock = None if pd.isna(row.sm_clock_mhz) else row.sm_clock_mhz
        seq = None if pd.isna(row.seq) else int(row.seq)
        launch_mode, engine = (value if isinstance(value, str) else default  # pandas reads None as NaN
                               for value, default in ((row.launch_mode, "eager"), (row.engine, None)))
        w = joulecast.workload(row.model, phase=row.phase, batch=row.batch, seq=seq, launch_mode=launch_mode,
                               engine=engine)
        one = joulecast.estimate(w, row.gpu, sm_clock_mhz=clock)
        assert out.energy_j == pytest.approx(one.energy_j) and out.time_s == pytest.approx(one.time_s)
        assert out.energy_lo_j == pytest.approx(one.energy_interval_j[0])
        assert (out.in_domain, out.flags, out.outside_domain) == (one.in_domain, ", ".join(one.flags),
                                                                   "; ".join(one.outside_domain))
    served = many.iloc[7]
    assert served.physics_time_s > configs.batch[7] * arch.SERVING_ENGINES["vllm-0.5.4"]["host_s_per_sequence"]
    with pytest.raises(joulecast.InputError, match="gpu: estimate_many needs a 'gpu' column"):
        joulecast.estimate_many(pd.DataFrame({"model": ["gpt2"]}))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_train_against_a_real_mlflow_server(measurements, tmp_path, monkeypatch):
    """One real `mlflow server` on 127.0.0.1: a run with dataset, metrics and plot, a registered champion."""
    import mlflow

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination", str(tmp_path / "art")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        a10 = measurements[measurements["gpu"] == "a10"]
        result = train(a10, tracking_uri=uri, grid=SMALL_GRID, quick=True)
        assert result.run_id and result.model_version == "1"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        client = mlflow.MlflowClient(uri)
        run = client.get_run(result.run_id)
        assert run.data.metrics["cv_hybrid_energy_mape"] == pytest.approx(result.metrics["cv_hybrid_energy_mape"])
        assert "parity.png" in [a.path for a in client.list_artifacts(result.run_id)]
        assert run.inputs.dataset_inputs[0].dataset.digest
        assert client.get_model_version_by_alias("joulecast", "champion").version == "1"
        mlflow.set_tracking_uri(uri)
        loaded = mlflow.pyfunc.load_model("models:/joulecast@champion")
        from joulecast.training.pyfunc import example_input
        out = loaded.predict(example_input())
        assert (out["energy_j"] > 0).all() and list(out.columns)[:3] == ["energy_j", "time_s", "power_w"]
        # every column estimate_many reads reaches it through the signature, not only the example's
        decode = example_input().iloc[[1]].reset_index(drop=True)
        served = decode.assign(launch_mode="graph", engine="vllm-0.5.4", sm_clock_mhz=1500.0)
        direct = joulecast.estimate_many(served, estimator=load_estimator(f"runs:/{result.run_id}/model"))
        through = loaded.predict(served)
        assert through["energy_j"].iloc[0] == pytest.approx(direct["energy_j"].iloc[0])
        # the served model says what estimate_many says: its flags, what lies outside the domain, its memory
        for column in ("flags", "outside_domain", "in_domain"):
            assert through[column].iloc[0] == direct[column].iloc[0], column
        assert through["memory_gb"].iloc[0] == pytest.approx(direct["memory_gb"].iloc[0])
        assert through["physics_time_s"].iloc[0] != pytest.approx(
            loaded.predict(decode)["physics_time_s"].iloc[0], rel=0.05)
        est = joulecast.estimate(joulecast.workload("gpt2", batch=8, seq=512), "a10", sm_clock_mhz=900,
                                 estimator="models:/joulecast@champion")
        assert est.method == "hybrid"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_pinned_folds_keep_each_family_where_it_was():
    from joulecast.training.residual import fold_assignment, group_folds

    groups = np.repeat(list("abcdefg"), [40, 30, 20, 10, 10, 5, 5])
    folds = group_folds(groups)
    fold_of = fold_assignment(groups, folds)
    assert len(set(fold_of.values())) == 7 and set(fold_of) == set("abcdefg")  # each family its own fold
    # Without family a's rows and with fewer of b's, GroupKFold balances afresh; pinned, every family stays put.
    subset = groups[(groups != "a") & ~((groups == "b") & (np.arange(len(groups)) % 2 == 0))]
    pinned = group_folds(subset, fold_of=fold_of)
    assert all(fold_of[g] == fold_of[str(subset[test[0]])] for _, test in pinned for g in subset[test])
    assert sorted(np.concatenate([test for _, test in pinned])) == list(range(len(subset)))
    assert {str(g) for _, test in pinned for g in subset[test]} == set("bcdefg")
    with pytest.raises(ValueError, match="no fold given for model family z"):
        group_folds(np.array(["b", "z"]), fold_of=fold_of)


def test_the_quick_profile_fits_fewer_boosters_on_the_same_path():
    """`train --quick`: one hyper-parameter set, bags of two, at most five folds; the model predicts as any."""
    from joulecast.training.residual import QUICK, free_cores

    rng = np.random.default_rng(3)
    n = 160
    X = _synthetic_features(rng, n)
    y = 0.1 * X["log_flops"].to_numpy() / X["log_flops"].max()
    model = ResidualModel(bag=QUICK["bag"], folds=QUICK["folds"])
    model.fit(X, {"time": y, "energy": y}, np.repeat(list("abcdefgh"), n // 8), ["a100"] * n, grid=QUICK["grid"])
    assert model.cv["folds"] == 5 and len(model.points["energy"]) == 2 and len(QUICK["grid"]) == 1
    assert np.isfinite(model.predict(X.head(3), ["a100"] * 3)["energy"]).all()
    assert 1 <= free_cores() <= (os.cpu_count() or 1)


def test_xgboost_dask_training_matches_in_process_training(measurements):
    """Every booster fitted by xgboost.dask across two workers (the path `joulecast train --scheduler` takes, with
    fewer boosters here: bags of one, three folds): cross-validated energy MAPE within a tenth of in-process's.
    xgboost.dask sketches each feature's quantiles on each worker and merges them, so its split candidates are not
    one process's (on these rows the two have read up to 0.28 points apart at about 5.3 %): the check is for the
    wiring (rows, labels and weights reaching the workers), not the sketches."""
    from conftest import require_module

    require_module("dask.distributed", "dask", "JOULECAST_REQUIRE_DASK")
    from joulecast.data.executors import executor

    table = training_table(measurements)
    y = {"time": table.y_time, "energy": table.y_energy}
    groups, gpus = table.rows["model_family"].astype(str).to_numpy(), table.rows["gpu"]

    def fit(client=None):
        return ResidualModel(bag=1, folds=3, client=client).fit(table.X, y, groups, gpus, grid=SMALL_GRID)

    def cv_mape(model):
        return 100 * float(np.mean(np.abs(np.exp(table.y_energy - model.oof["energy"]) - 1)))

    here = fit()
    with executor("local", 2) as run:
        spread = fit(run.client)
    assert spread.client is not None and len(spread.points["energy"]) == len(here.points["energy"])
    assert abs(cv_mape(spread) - cv_mape(here)) <= 0.1 * cv_mape(here), (cv_mape(spread), cv_mape(here))
    est = joulecast.estimate(joulecast.workload("gpt2", batch=8, seq=512), "a10", estimator=spread)
    ref = joulecast.estimate(joulecast.workload("gpt2", batch=8, seq=512), "a10", estimator=here)
    assert est.energy_j == pytest.approx(ref.energy_j, rel=0.05)


def test_the_grid_fits_the_cheapest_entry_within_one_standard_error_of_the_best():
    """Breiman's rule: a dearer entry is fitted only where it beats the cheapest by more than the best's folds
    spread (their standard error)."""
    from joulecast.training.residual import one_standard_error_choice

    folds = [[0.07, 0.09, 0.08, 0.10], [0.06, 0.10, 0.07, 0.09]]  # means 0.085 and 0.080; the best's SE 0.0091
    chosen, se = one_standard_error_choice([0.085, 0.080], folds)
    assert chosen == 0 and se == pytest.approx(np.std(folds[1], ddof=1) / 2)
    tight = [[0.085, 0.085, 0.086, 0.084], [0.080, 0.080, 0.081, 0.079]]  # the same means, folds that agree
    assert one_standard_error_choice([0.085, 0.080], tight)[0] == 1
    assert one_standard_error_choice([0.080, 0.085], folds)[0] == 0  # the cheapest is the best


def test_an_architectures_kernel_mix_is_the_range_its_passes_ran():
    """`arch_mix_ranges`: per architecture and kind of MIN_ROWS_PER_ARCH_MARGIN rows or more, each kernel class's time
    share over its passes; single kernels (all one class) left out, smaller architectures none."""
    from joulecast.training.residual import MIN_ROWS_PER_ARCH_MARGIN, arch_mix_ranges
    n = MIN_ROWS_PER_ARCH_MARGIN
    softmax = np.r_[np.linspace(0.0, 0.2, n), 1.0, np.zeros(n - 1)]  # a single softmax kernel among Ampere's rows
    X = pd.DataFrame({"gpu_arch": [8.0] * (n + 1) + [9.0] * (n - 1),
                      "log_launches": [6.0] * n + [0.0] + [6.0] * (n - 1),
                      "phase_prefill": [1.0] * n + [0.0] + [1.0] * (n - 1), "share_softmax": softmax,
                      "share_gemm": 1.0 - softmax})
    kinds = np.array(["forward"] * len(X))
    ranges = arch_mix_ranges(X, kinds)
    assert set(ranges) == {"8.0"} and set(ranges["8.0"]) == {"forward"}
    assert ranges["8.0"]["forward"]["share_softmax"] == pytest.approx([0.0, 0.2])
    assert ranges["8.0"]["forward"]["share_gemm"] == pytest.approx([0.8, 1.0])
    assert arch_mix_ranges(X.drop(columns="gpu_arch"), kinds) == {}


@pytest.mark.parametrize("uri", ["foo://bar", "file:///nonexistent-joulecast-store"])
def test_a_tracking_store_that_cannot_be_logged_to_is_one_line_before_the_fit(measurements, monkeypatch, uri):
    """Before, an unknown scheme or MLflow's retired file store failed after the fit, the model lost unless --out
    was given; now `train` checks the store first (the fit is made to fail loudly should it be reached)."""
    from joulecast.data.errors import InputError

    def reached(*args, **kwargs):
        raise AssertionError("the fit started before the tracking store was checked")

    monkeypatch.setattr(residual_training.ResidualModel, "fit", reached)
    with pytest.raises(InputError, match=rf"--tracking-uri: cannot log to '{uri}' \("):
        train(measurements, tracking_uri=uri, quick=True)
