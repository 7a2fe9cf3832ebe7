"""Coverage and the spread chance allows it: rows that share an offset swing a partition's coverage far more than
independent rows do."""

import math

import numpy as np
import pandas as pd
import pytest

from joulecast.training.evaluate import (
    _random_effects,
    calibrated_in_target,
    coverage_chance,
    coverage_p_value,
    offset_spreads,
)

Z90 = 1.6449  # the two-sided 90 % normal quantile


def scored(offsets: np.ndarray, rows_per_group: int, sigma: float, seed: int = 0) -> pd.DataFrame:
    """Rows of one family per group on one GPU, log errors offset + N(0, sigma), each with the 90 % interval a
    perfect model of the rows' own spread would give."""
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(len(offsets)), rows_per_group)
    error = offsets[group] + rng.normal(0, sigma, len(group))
    pred = np.full(len(group), 10.0)
    half = Z90 * np.hypot(sigma, offsets.std())
    return pd.DataFrame({"model_family": [f"m{g}" for g in group], "gpu": "a10", "part": np.where(group % 2, "x", "y"),
                         "energy_j": pred * np.exp(error), "pred_energy_j": pred,
                         "lo_energy_j": pred * np.exp(-half), "hi_energy_j": pred * np.exp(half)})


def test_random_effects_recover_the_offset_and_row_spreads():
    rng = np.random.default_rng(1)
    group = np.repeat(np.arange(60), rng.integers(5, 40, 60))
    values = rng.normal(0, 0.03, 60)[group] + rng.normal(0, 0.05, len(group))
    tau, sigma = _random_effects(values, group)
    assert tau == pytest.approx(0.03, rel=0.25) and sigma == pytest.approx(0.05, rel=0.05)
    assert _random_effects(rng.normal(0, 0.05, 500), np.repeat(np.arange(50), 10))[0] < 0.01  # no offsets
    assert _random_effects(np.array([1.0, 2.0, 3.0]), np.zeros(3, int)) == (0.0, 1.0)  # one group: all rows


def test_independent_rows_allow_the_binomial_spread():
    frame = scored(np.zeros(200), rows_per_group=1, sigma=0.05)
    chance = coverage_chance(frame, "part").set_index("value")
    assert (chance["rows"] == 100).all() and (chance["groups"] == 100).all()
    # one row per group: its spread cannot be told from its offset's, and either draws the same independent rows
    assert np.hypot(chance["tau"].iloc[0], chance["sigma"].iloc[0]) == pytest.approx(0.05, rel=0.1)
    binomial = 196 * np.sqrt(0.9 * 0.1 / 100)  # +- points, 95 % of the time
    for part in ("x", "y"):
        low, high = chance.loc[part, ["chance_low", "chance_high"]]
        assert low < 90 < high and high - low == pytest.approx(2 * binomial, abs=3)
    # P(86 <= coverage <= 94) of 100 rows each covered with probability 0.9: 0.87 (binomial)
    assert chance["in_target"].to_numpy() == pytest.approx([87, 87], abs=5)
    # the coverage is the partition's own: its share of rows inside their interval
    inside = frame["energy_j"].between(frame["lo_energy_j"], frame["hi_energy_j"])
    assert chance["coverage"].to_dict() == pytest.approx((inside.groupby(frame["part"]).mean() * 100).to_dict())


def test_shared_offsets_widen_the_range_for_as_many_rows():
    frame = scored(np.random.default_rng(2).normal(0, 0.08, 4), rows_per_group=50, sigma=0.03)
    chance = coverage_chance(frame, "part").set_index("value")
    assert (chance["rows"] == 100).all() and (chance["groups"] == 2).all()
    assert chance["tau"].iloc[0] > chance["sigma"].iloc[0]
    independent = coverage_chance(frame.assign(model_family=[f"r{i}" for i in range(len(frame))]), "part")
    widths = (chance["chance_high"] - chance["chance_low"]).to_numpy()
    assert (widths > 2 * (independent["chance_high"] - independent["chance_low"]).to_numpy()).all()
    assert (chance["in_target"].to_numpy() < independent["in_target"].to_numpy() - 20).all()
    # the same seed draws the same range; memory is bounded by drawing in steps, which changes nothing else
    again = coverage_chance(frame, "part").set_index("value")
    assert again[["chance_low", "chance_high"]].equals(chance[["chance_low", "chance_high"]])


def test_each_gpu_draws_with_its_own_spreads():
    good = scored(np.random.default_rng(3).normal(0, 0.02, 6), rows_per_group=20, sigma=0.03)
    bad = scored(np.random.default_rng(4).normal(0, 0.5, 6), rows_per_group=20, sigma=0.4, seed=5)
    frame = pd.concat([good, bad.assign(gpu="b200", model_family="x" + bad["model_family"])], ignore_index=True)
    per_gpu = coverage_chance(frame, "gpu").set_index("value")
    pooled = coverage_chance(frame, "gpu", strata=None).set_index("value")
    assert set(per_gpu.attrs["offsets"]) == {"a10", "b200"}
    assert per_gpu.attrs["offsets"]["a10"]["sigma"] == pytest.approx(0.03, rel=0.15)
    # the well-modelled GPU's range is its own, not pulled down by the other's large errors
    assert per_gpu.loc["a10", "chance_low"] > 70 > pooled.loc["a10", "chance_low"] + 10


def test_spreads_estimated_once_serve_every_partition():
    frame = scored(np.random.default_rng(6).normal(0, 0.05, 6), rows_per_group=10, sigma=0.03)
    spreads = offset_spreads(frame)
    assert spreads.tau.shape == spreads.sigma.shape == (len(frame),)
    for by in ("part", "model_family"):  # the same draws whether the spreads are passed in or estimated anew
        given = coverage_chance(frame, by, spreads=spreads)
        assert given.equals(coverage_chance(frame, by)) and given.attrs["offsets"] == spreads.by_stratum
    with pytest.raises(ValueError, match="spreads for 60 rows given with a frame of 10"):
        coverage_chance(frame.iloc[:10], "part", spreads=spreads)


def test_calibrated_interval_lands_in_target_as_often_as_the_binomial_says():
    def enumerated(n):  # every count of rows inside, by the binomial coefficient itself
        return 100 * sum(math.comb(n, k) * 0.9 ** k * 0.1 ** (n - k) for k in range(n + 1) if 86 <= 100 * k / n <= 94)

    for n in (10, 16, 83, 115):
        assert calibrated_in_target(n) == pytest.approx(enumerated(n), rel=1e-9)
    assert calibrated_in_target(16) == pytest.approx(60.39, abs=0.01)  # only 14 or 15 of 16 inside count
    assert calibrated_in_target(1) == 0.0  # one row is 0 or 100 % covered
    # many rows: nearly sure, and no overflow where the binomial coefficient has thousands of digits
    assert 99.99 < calibrated_in_target(20_000) <= 100.0
    # a Monte Carlo of independent rows agrees
    draws = np.random.default_rng(0).random((20_000, 16)) < 0.9
    share = draws.mean(axis=1) * 100
    assert np.mean((share >= 86) & (share <= 94)) * 100 == pytest.approx(calibrated_in_target(16), abs=1.5)
    with pytest.raises(ValueError, match="rows must be at least 1"):
        calibrated_in_target(0)


def test_coverage_outside_the_target_is_tested_against_its_nearer_edge():
    def tail(n, ks, p):  # by the binomial coefficient itself
        return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in ks)

    assert coverage_p_value(110, 115) == pytest.approx(tail(115, range(110, 116), 0.94), rel=1e-9)  # 95.7 % vs 94
    assert coverage_p_value(10, 15) == pytest.approx(tail(15, range(0, 11), 0.86), rel=1e-9)        # 66.7 % vs 86
    assert coverage_p_value(10, 15) < 0.05 < coverage_p_value(110, 115)
    assert coverage_p_value(100, 115) == coverage_p_value(14, 16) == 1.0  # 87.0 and 87.5 %: inside the target
    assert coverage_p_value(16, 16, target=(86, 100)) == 1.0 and coverage_p_value(0, 4, target=(0, 50)) == 1.0
    assert coverage_p_value(5, 5, target=(0, 0)) == 0.0  # a true coverage of 0 never covers a row
    # a valid test: where the true coverage sits on the target's edge, it rejects at most 5 % of the time
    inside = (np.random.default_rng(0).random((4000, 115)) < 0.94).sum(axis=1)
    p = np.array([coverage_p_value(int(k), 115) for k in inside])
    assert 0.005 < np.mean(p < 0.05) <= 0.05
    for bad in ((-1, 10), (11, 10), (0, 0)):
        with pytest.raises(ValueError, match="inside must lie within"):
            coverage_p_value(*bad)


def test_each_partition_has_the_p_value_of_its_own_count():
    frame = scored(np.zeros(200), rows_per_group=1, sigma=0.05)
    chance = coverage_chance(frame, "part").set_index("value")
    inside = frame["energy_j"].between(frame["lo_energy_j"], frame["hi_energy_j"]).groupby(frame["part"]).sum()
    assert chance["p_in_target"].to_dict() == {part: coverage_p_value(int(k), 100) for part, k in inside.items()}
