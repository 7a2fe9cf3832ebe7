"""Trained XGBoost boosters flattened into the estimator's tree arrays (`joulecast.estimator.tree_arrays`).

The arrays come from the boosters' own JSON models, so each booster's sum is XGBoost's float32 value, bit for bit
(checked in the tests).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import xgboost as xgb

from joulecast.estimator.tree_arrays import MAX_DEPTH, TreeArrays


def from_booster(booster: xgb.Booster) -> TreeArrays:
    return from_models([[booster]])


def from_models(models: Sequence[Sequence[xgb.Booster]]) -> TreeArrays:
    """Models, each a bag of boosters with as many trees per target (the same n_estimators)."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("left", "right", "default_left", "feature",
                                                          "threshold", "value")}
    roots: list[int] = []
    groups, bases, depth = [], [], 1
    for bag in models:
        group, base = [], []
        for booster in bag:
            learner = json.loads(booster.save_raw(raw_format="json"))["learner"]
            if learner["gradient_booster"].get("name") != "gbtree":
                raise ValueError("only gbtree boosters flatten to tree arrays")
            model = learner["gradient_booster"]["model"]
            scores = json.loads(learner["learner_model_param"]["base_score"])
            base.append(np.atleast_1d(np.asarray(scores, dtype=np.float32)))
            tree_info = np.asarray(model["tree_info"], dtype=np.int64)
            own = len(roots) + np.arange(len(tree_info))
            group.append([own[tree_info == t] for t in range(len(base[-1]))])
            depth = max(depth, _flatten(model["trees"], parts, roots))
        if len({len(trees) for member in group for trees in member}) != 1 or len({len(b) for b in base}) != 1:
            raise ValueError("the boosters of a bag must have the same targets and trees per target")
        groups.append(np.asarray(group, dtype=np.int64))
        bases.append(np.stack(base))
    if depth > MAX_DEPTH:
        raise ValueError(f"trees of depth {depth}: tree arrays hold trees up to depth {MAX_DEPTH}")
    flat = {k: np.concatenate(v) for k, v in parts.items()}
    return TreeArrays(groups=tuple(groups), base_scores=tuple(bases), depth=depth,
                      **_complete(np.asarray(roots, dtype=np.int64), depth, **flat))


def _complete(roots: np.ndarray, depth: int, left: np.ndarray, right: np.ndarray, default_left: np.ndarray,
              feature: np.ndarray, threshold: np.ndarray, value: np.ndarray) -> dict[str, np.ndarray]:
    """The complete-tree layout (`TreeArrays`) of trees given node by node, numbered globally, whose leaves are their
    own children: level by level, the nodes each heap position holds."""
    splits = 2 ** depth - 1
    node = roots[:, None]  # (trees, positions on this level)
    out = {"feature": np.empty((len(roots), splits), np.int32),
           "threshold": np.empty((len(roots), splits), np.float32),
           "default_left": np.empty((len(roots), splits), bool)}
    for level in range(depth):
        first = 2 ** level - 1
        for name, source in (("feature", feature), ("threshold", threshold), ("default_left", default_left)):
            out[name][:, first:first + 2 ** level] = source[node]
        node = np.stack([left[node], right[node]], axis=2).reshape(len(roots), -1)
    return {name: a.ravel() for name, a in out.items()} | {"value": value[node].ravel()}


def _flatten(trees: list[dict], parts: dict[str, list[np.ndarray]], roots: list[int]) -> int:
    """Append the trees' nodes to `parts` (numbered after those already there) and their roots; their depth."""
    offset, depth = sum(len(p) for p in parts["left"]), 1
    for tree in trees:
        if any(tree.get("split_type", [])) or tree.get("categories"):
            raise ValueError("categorical splits are not supported")
        left = np.asarray(tree["left_children"], dtype=np.int64)
        right = np.asarray(tree["right_children"], dtype=np.int64)
        leaf = left < 0
        own = np.arange(len(left))
        parts["left"].append(np.where(leaf, own, left) + offset)
        parts["right"].append(np.where(leaf, own, right) + offset)
        parts["default_left"].append(np.asarray(tree["default_left"], dtype=bool))
        parts["feature"].append(np.where(leaf, 0, np.asarray(tree["split_indices"], dtype=np.int64)))
        conditions = np.asarray(tree["split_conditions"], dtype=np.float32)
        parts["threshold"].append(np.where(leaf, np.float32(0), conditions))
        parts["value"].append(np.where(leaf, conditions, np.float32(0)))  # leaves keep their value there
        depth = max(depth, _depth(left, right))
        roots.append(offset)
        offset += len(left)
    return depth


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    """Levels of splits from the root (node 0) to the deepest leaf."""
    level, frontier = 0, np.array([0])
    while True:
        inner = frontier[left[frontier] >= 0]
        if not len(inner):
            return max(level, 1)
        frontier = np.concatenate([left[inner], right[inner]])
        level += 1
