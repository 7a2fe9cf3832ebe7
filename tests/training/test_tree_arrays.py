"""Boosters flattened to numpy arrays predict what XGBoost predicts, missing values and several outputs included."""

import numpy as np
import pytest
import xgboost as xgb

from joulecast.training.tree_arrays import TreeArrays


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
