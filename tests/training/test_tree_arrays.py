"""Boosters flattened to numpy arrays predict what XGBoost predicts, missing values and several outputs included."""

import numpy as np
import pytest
import xgboost as xgb

from joulecast.training.tree_arrays import MAX_DEPTH, TreeArrays, bag_margin


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 6)).astype(np.float32)
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * (X[:, 2] > 0) + 0.1 * rng.normal(size=300)
    X[rng.random(X.shape) < 0.1] = np.nan  # trained with missing values: every split learns a default branch
    return X, y


@pytest.mark.parametrize("params", [
    dict(objective="reg:absoluteerror", monotone_constraints=(1, 0, 0, 0, 0, 0)),
    dict(objective="reg:quantileerror", quantile_alpha=np.array([0.05, 0.95])),
    dict(objective="reg:squarederror", max_depth=6),
])
def test_tree_arrays_predict_as_xgboost(data, params):
    X, y = data
    params = {"max_depth": 4, **params}
    booster = xgb.XGBRegressor(n_estimators=80, learning_rate=0.2, tree_method="hist", **params).fit(X, y).get_booster()
    arrays = TreeArrays.from_booster(booster)
    assert arrays.depth == params["max_depth"]
    fresh = np.random.default_rng(2).normal(size=(50, 6)).astype(np.float32)
    fresh[::4, 0] = np.nan
    for rows in (fresh, fresh[:1], X[:7]):
        expected = booster.inplace_predict(rows)
        got = arrays.predict(rows)
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)  # the same float32 sums, bit for bit


def test_bags_walk_as_one_and_average_as_the_xgboost_path(data):
    """A point bag and a two-quantile band bag, flattened together, give each booster's own float32 margins and each
    bag `bag_margin` of them, as the XGBoost path computes it; a single booster's margins come back unchanged."""
    X, y = data
    fresh = np.random.default_rng(3).normal(size=(20, 6)).astype(np.float32)
    fresh[::3, 1] = np.nan
    bags = [[xgb.XGBRegressor(n_estimators=40, max_depth=3, subsample=0.8, colsample_bytree=0.8, random_state=seed,
                              tree_method="hist", **params).fit(X, y).get_booster() for seed in range(3)]
            for params in (dict(objective="reg:absoluteerror"),
                           dict(objective="reg:quantileerror", quantile_alpha=np.array([0.05, 0.95])))]
    arrays = TreeArrays.from_models(bags)
    for bag, members, got in zip(bags, arrays.predict_members(fresh), arrays.predict_models(fresh)):
        margins = [b.inplace_predict(fresh) for b in bag]
        assert not np.array_equal(margins[0], margins[1])  # the seeds make different boosters
        for member, expected in zip(members, margins):
            np.testing.assert_array_equal(member, expected)
        np.testing.assert_array_equal(got, bag_margin(margins))
        np.testing.assert_allclose(got, np.mean(np.stack(margins), axis=0), rtol=1e-6)
        assert got.shape == margins[0].shape and bag_margin(margins[:1]) is margins[0]


def test_trees_deeper_than_the_complete_layout_holds_are_refused(data):
    """Each tree is held complete (2^(depth + 1) entries): deeper models predict through XGBoost instead."""
    X, y = data
    booster = xgb.XGBRegressor(n_estimators=3, max_depth=12, min_child_weight=0, tree_method="hist").fit(X, y)
    with pytest.raises(ValueError, match=f"up to depth {MAX_DEPTH}"):
        TreeArrays.from_booster(booster.get_booster())
