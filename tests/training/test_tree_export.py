"""Boosters flattened to numpy arrays predict what XGBoost predicts, missing values and several outputs included."""

import numpy as np
import pytest
import xgboost as xgb

from joulecast.estimator.tree_arrays import MAX_DEPTH, TreeArrays, bag_margin
from joulecast.training.tree_export import from_booster, from_models


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
    arrays = from_booster(booster)
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
    arrays = from_models(bags)
    for bag, members, got in zip(bags, arrays.predict_members(fresh), arrays.predict_models(fresh)):
        margins = [b.inplace_predict(fresh) for b in bag]
        assert not np.array_equal(margins[0], margins[1])  # the seeds make different boosters
        for member, expected in zip(members, margins):
            np.testing.assert_array_equal(member, expected)
        np.testing.assert_array_equal(got, bag_margin(margins))
        np.testing.assert_allclose(got, np.mean(np.stack(margins), axis=0), rtol=1e-6)
        assert got.shape == margins[0].shape and bag_margin(margins[:1]) is margins[0]
    # one row alone, every model summed in one block (the band's fewer rounds padded): each row's bits as in a batch
    assert arrays._one_row is not None
    batch = arrays.predict_models(fresh)
    for i in range(len(fresh)):
        for alone, together in zip(arrays.predict_models(fresh[i:i + 1]), batch):
            np.testing.assert_array_equal(alone, together[i:i + 1])


def test_trees_deeper_than_the_complete_layout_holds_are_refused(data):
    """Each tree is held complete (2^(depth + 1) entries): deeper models predict through XGBoost instead."""
    X, y = data
    booster = xgb.XGBRegressor(n_estimators=3, max_depth=12, min_child_weight=0, tree_method="hist").fit(X, y)
    with pytest.raises(ValueError, match=f"up to depth {MAX_DEPTH}"):
        from_booster(booster.get_booster())


def test_saved_arrays_load_with_numpy_alone_and_chunked_walks_agree(data, tmp_path):
    """The .npz the estimator ships reads back to the same arrays, and a batch walked a chunk of rows at a time
    (more rows than its chunk) gives what each row alone gives."""
    X, y = data
    bags = [[xgb.XGBRegressor(n_estimators=30, max_depth=4, random_state=seed, tree_method="hist").fit(X, y)
             .get_booster() for seed in range(2)]]
    arrays = from_models(bags)
    loaded = TreeArrays.load(arrays.save(tmp_path / "trees.npz"))
    assert loaded.depth == arrays.depth and len(loaded.groups) == len(arrays.groups)
    rows = np.random.default_rng(4).normal(size=(loaded.chunk_rows * 2 + 3, 6)).astype(np.float32)
    batch = loaded.predict_models(rows)[0]
    np.testing.assert_array_equal(batch, arrays.predict_models(rows)[0])
    np.testing.assert_array_equal(batch[-3:], np.concatenate([loaded.predict_models(rows[i:i + 1])[0]
                                                              for i in range(len(rows) - 3, len(rows))]))
    np.testing.assert_array_equal(batch, bag_margin([b.inplace_predict(rows) for b in bags[0]]))


def test_trees_in_any_order_sum_as_in_the_export_s(data):
    """A model's trees numbered in another order than the export's (its leaves then gathered, not sliced) give the
    same float32 sums, bit for bit, one row or many."""
    X, y = data
    bags = [[xgb.XGBRegressor(n_estimators=20, max_depth=3, random_state=seed, tree_method="hist", **params)
             .fit(X, y).get_booster() for seed in range(2)]
            for params in (dict(objective="reg:absoluteerror"),
                           dict(objective="reg:quantileerror", quantile_alpha=np.array([0.05, 0.95])))]
    arrays = from_models(bags)
    trees, splits, leaves = len(arrays.value) >> arrays.depth, 2 ** arrays.depth - 1, 2 ** arrays.depth
    order = np.random.default_rng(5).permutation(trees)  # new tree i is old tree order[i]
    where = np.argsort(order)                             # old tree t is new tree where[t]
    by_split = lambda a, width: a.reshape(trees, width)[order].ravel()  # noqa: E731
    shuffled = TreeArrays(groups=tuple(where[g] for g in arrays.groups), base_scores=arrays.base_scores,
                          depth=arrays.depth, feature=by_split(arrays.feature, splits),
                          threshold=by_split(arrays.threshold, splits),
                          default_left=by_split(arrays.default_left, splits), value=by_split(arrays.value, leaves))
    assert all(v is not None for v in arrays._group_views) and all(v is None for v in shuffled._group_views)
    rows = np.random.default_rng(6).normal(size=(9, 6)).astype(np.float32)
    rows[::2, 0] = np.nan
    for part in (rows, rows[:1]):
        for ours, theirs in zip(arrays.predict_members(part), shuffled.predict_members(part)):
            for a, b in zip(ours, theirs):
                np.testing.assert_array_equal(a, b)


def test_work_arrays_kept_between_walks_change_no_result_and_stay_out_of_pickles(data):
    """Each thread's walks reuse its work arrays, whatever the row counts in turn, and two threads walking at once
    get what each gets alone; pickled (as Dask ships a model), the arrays leave them behind and predict the same."""
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    X, y = data
    bags = [[xgb.XGBRegressor(n_estimators=25, max_depth=4, random_state=seed, tree_method="hist").fit(X, y)
             .get_booster() for seed in range(2)]]
    arrays, fresh = from_models(bags), lambda: from_models(bags)
    rows = np.random.default_rng(7).normal(size=(arrays.chunk_rows * 3 + 5, 6)).astype(np.float32)
    assert arrays.predict_models(rows[:0])[0].shape == (0,)
    for part in (rows, rows[:1], rows[:5], rows[2:], rows[:1]):
        np.testing.assert_array_equal(arrays.predict_models(part)[0], fresh().predict_models(part)[0])
    copy = pickle.loads(pickle.dumps(arrays))
    assert "_local" in arrays.__dict__ and "_local" not in copy.__dict__
    np.testing.assert_array_equal(copy.predict_models(rows)[0], arrays.predict_models(rows)[0])
    alone = [arrays.predict_models(rows[i::4])[0] for i in range(4)]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda i: arrays.predict_models(rows[i::4])[0], range(4)))
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_a_codes_leaf_read_from_each_trees_table_or_the_shared_one_is_the_same(data, depth, monkeypatch):
    """Trees read by their decisions find a code's leaf in a table per tree (where it is small) or in one table
    shared by every tree, then the leaf's value: the same float32 sums as XGBoost either way, rows by eights or not."""
    import joulecast.estimator.tree_arrays as tree_arrays

    X, y = data
    booster = xgb.XGBRegressor(n_estimators=30, max_depth=depth, tree_method="hist").fit(X, y).get_booster()
    rows = np.random.default_rng(8).normal(size=(21, 6)).astype(np.float32)
    rows[::5, 2] = np.nan
    expected = booster.inplace_predict(rows)
    for limit in (0, 1 << 30):
        monkeypatch.setattr(tree_arrays, "MAX_LEAF_BY_CODE", limit)
        arrays = from_booster(booster)
        assert (arrays._leaf_by_code is None) == (limit == 0)
        for part in (rows, rows[:16], rows[:1]):
            np.testing.assert_array_equal(arrays.predict(part), expected[:len(part)])


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_a_few_rows_packed_at_once_read_the_leaves_the_byte_loop_reads(data, depth):
    """Fewer rows than FEW_ROWS (one estimate's) pack every split's decision in one multiplication a word, with the
    splits padded to whole bytes (depth 4: two bytes a code); every count of rows below and at the threshold reads
    XGBoost's float32 sums, missing values taking their default branch."""
    from joulecast.estimator.tree_arrays import FEW_ROWS

    X, y = data
    booster = xgb.XGBRegressor(n_estimators=40, max_depth=depth, tree_method="hist").fit(X, y).get_booster()
    arrays = from_booster(booster)
    rows = np.random.default_rng(9).normal(size=(FEW_ROWS + 1, 6)).astype(np.float32)
    rows[1::3, 0], rows[2, :] = np.nan, np.nan
    expected = booster.inplace_predict(rows)
    for n in range(1, FEW_ROWS + 2):
        np.testing.assert_array_equal(arrays.predict(rows[:n]), expected[:n])


def test_one_row_sums_every_model_at_once_as_a_batch_sums_each(data):
    """One row's models are summed in one block, a bag of fewer rounds padded with leaves of 0: a point bag of 30
    rounds and a two-quantile band bag of 12, three boosters each, give each row alone the bits a batch gives it,
    and XGBoost's mean over the bag."""
    X, y = data
    bags = [[xgb.XGBRegressor(n_estimators=rounds, max_depth=3, random_state=seed, tree_method="hist", **params)
             .fit(X, y).get_booster() for seed in range(3)]
            for rounds, params in ((30, dict(objective="reg:absoluteerror")),
                                   (12, dict(objective="reg:quantileerror", quantile_alpha=np.array([0.05, 0.95]))))]
    arrays = from_models(bags)
    (points, _, point_spans), (bands, _, band_spans) = arrays._one_row  # a block per number of rounds
    assert points.shape == (30, 3, 1) and bands.shape == (12, 3, 2)
    assert point_spans == [(0, 0, 1)] and band_spans == [(1, 0, 2)]
    rows = np.random.default_rng(10).normal(size=(6, 6)).astype(np.float32)
    rows[::2, 3] = np.nan
    batch = arrays.predict_models(rows)
    for i in range(len(rows)):
        for alone, together, bag in zip(arrays.predict_models(rows[i:i + 1]), batch, bags):
            np.testing.assert_array_equal(alone, together[i:i + 1])
            np.testing.assert_array_equal(alone, bag_margin([b.inplace_predict(rows[i:i + 1]) for b in bag]))
