"""Trained XGBoost boosters as flat numpy arrays: the estimator's tree walk, with no XGBoost needed to predict.

`Booster.inplace_predict` costs about 0.3 ms per call whatever the row count (argument checks, a JSON config, the
thread pool), and an estimate needs four models (point and band, time and energy), each a bag of boosters
(`joulecast.training.residual`): twenty calls, more than the 5 ms budget. Walking the trees here, every tree of
every model for all rows at once, one tree level per step, costs well under a millisecond for one row. The arrays
come from the boosters' own JSON models, so each booster's sum is XGBoost's float32 value, bit for bit (checked in
the tests), and a bag's mean is `bag_margin` of those sums, as on the XGBoost path.

The walk reads each tree as a complete binary tree of the deepest tree's depth (a leaf above the last level
stands for the whole subtree below it, every branch reaching its value), so that a tree's nodes lie side by side
and a node's children are found by arithmetic, not looked up. The model shipped then, 12,000 trees of depth 4, took
2.4 MB instead of 6.9 MB, and one row's margins (`predict_members`) 0.37 instead of 0.53 ms with the arrays in
cache, 0.42 instead of 0.91 ms after other work has evicted them, as between estimates (medians of 1,000 calls).
A walk writes into its thread's work arrays, kept from one chunk and one call to the next: fresh arrays each chunk
cost more in page faults than the walk's arithmetic. A split's feature and threshold are one int64 (one gather a
level), each booster's base goes into its first leaf so that a model's leaves are summed as a slice (no gather, no
concatenation), and a bag's mean comes from the sums as stacked. On the walks of `estimate_many` over 10,000
distinct configurations (the shipped model, same process, alternating, three runs): 1.45-1.53 instead of
1.86-1.94 s CPU, 0-472 minor page faults instead of 160,437; one row 0.16-0.17 instead of 0.21-0.23 ms.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Deeper trees would make the complete layout large (2^(depth + 1) entries a tree): training refuses deeper models
# (`joulecast.training.tree_export`).
MAX_DEPTH = 8
# (Rows x trees) entries walked at once: the walk holds two such index arrays (8 bytes an entry) and a float and a
# bool one, 2 MB each at this size, small enough to stay in cache from one level to the next. Against chunks of 256
# rows over 12,000 trees (25 MB an array), the leaf walk took about a quarter of the CPU time a row (16 rows: 160
# against 640 us, medians on the 2-core machine, the walk done in place).
CHUNK_ENTRIES = 1 << 18
_ARRAYS = ("feature", "threshold", "default_left", "value")
# Where an int64's lower 32 bits lie in memory, as two float32s: first on a little-endian machine.
_LOW_HALF = 0 if sys.byteorder == "little" else 1


def bag_margin(margins: Sequence[np.ndarray]) -> np.ndarray:
    """A bag's prediction from its boosters' float32 margins: a single booster's as they are, else their mean
    (summed in float64, in member order)."""
    return margins[0] if len(margins) == 1 else np.asarray(margins, dtype=np.float64).mean(axis=0)


@dataclass(frozen=True)
class TreeArrays:
    """Every tree of one or more models (each a bag of boosters), numbered globally, in the complete-tree layout."""

    groups: tuple             # per model: (boosters, targets, trees per target) tree indices, in boosting order
    # Tree t's split i (heap order: the root 0, split i's children 2i + 1 if x < threshold, else 2i + 2) at
    # t * (2^depth - 1) + i; a split under a leaf sends both ways to copies of that leaf.
    feature: np.ndarray       # (trees * (2^depth - 1),) feature index
    threshold: np.ndarray     # float32, as XGBoost compares
    default_left: np.ndarray  # the branch for a missing value
    value: np.ndarray         # (trees * 2^depth,) float32: tree t's leaf j at t * 2^depth + j
    base_scores: tuple        # per model: (boosters, targets) float32
    depth: int                # the deepest tree's number of levels

    def predict(self, values: np.ndarray) -> np.ndarray:
        """The first model's raw margins (identity link), shape (rows,) for one target or (rows, targets)."""
        return self.predict_models(values)[0]

    def predict_models(self, values: np.ndarray) -> list[np.ndarray]:
        """Each model's raw margins: `bag_margin` of its boosters' float32 sums (taken from the boosters' sums as
        the walk stacks them: the same additions, in the same order)."""
        margins = (bag_margin(sums) for sums in self._stacked(values))  # each (targets, rows)
        return [m[0] if len(m) == 1 else m.T for m in margins]

    def predict_members(self, values: np.ndarray) -> list[list[np.ndarray]]:
        """Per model, each booster's raw margins, float32: (rows,) for one target or (rows, targets)."""
        return [[s[i, 0] if s.shape[1] == 1 else s[i].T for i in range(len(s))] for s in self._stacked(values)]

    def _stacked(self, values: np.ndarray) -> list[np.ndarray]:
        """Per model, its boosters' float32 sums, (boosters, targets, rows): the rows walked a chunk at a time
        (bounded memory, and cache), every chunk in the same work arrays."""
        values = np.ascontiguousarray(values, dtype=np.float32)
        n, trees = len(values), len(self.value) >> self.depth
        chunk = max(1, min(n, self.chunk_rows))
        work = self._work(chunk, trees)
        out = [np.empty((*base.shape, n), np.float32) for base in self.base_scores]
        for i in range(0, n, chunk):
            for o, s in zip(out, self._walk(values[i:i + chunk], work)):
                o[..., i:i + chunk] = s
        return out

    @property
    def chunk_rows(self) -> int:
        """Rows walked at once (CHUNK_ENTRIES over the trees, at least one)."""
        return max(1, CHUNK_ENTRIES // max(1, len(self.value) >> self.depth))

    @functools.cached_property
    def _layout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(each tree's root, each tree's root less 2, what takes a walk past the last level to its leaf: first + i
        for heap position i of a complete tree's leaves, 2^depth - 1 onwards), as intp: set once."""
        splits, trees = 2 ** self.depth - 1, len(self.value) >> self.depth
        first = np.arange(trees, dtype=np.intp) * splits
        return first, first - 2, (np.arange(trees, dtype=np.intp) << self.depth) - first - splits

    @functools.cached_property
    def _packed(self) -> np.ndarray:
        """Each split's feature (the upper 32 bits) and its threshold's float32 bits (the lower) in one int64: one
        gather a level reads both."""
        bits = np.ascontiguousarray(self.threshold, dtype=np.float32).view(np.uint32).astype(np.int64)
        return (self.feature.astype(np.int64) << 32) | bits

    def _work(self, rows: int, trees: int) -> "_Work":
        """The calling thread's work arrays, kept from its last walk where they hold enough rows (a batch's first
        chunk sets them; later batches and a single row's walk reuse them)."""
        local = self._local
        work = getattr(local, "work", None)
        if work is None or len(work.node) < rows:
            work = local.work = _Work(rows, trees, self.groups)
        return work

    @functools.cached_property
    def _local(self) -> threading.local:
        return threading.local()

    def __getstate__(self) -> dict:
        """Pickled (to Dask workers, say) without the threads' work arrays."""
        return {k: v for k, v in self.__dict__.items() if k != "_local"}

    @functools.cached_property
    def _group_views(self) -> tuple:
        """Per model, (first tree, boosters, trees, targets) where its trees lie side by side as booster-major,
        round-major, target-minor (as `joulecast.training.tree_export` writes them), else None (gathered)."""
        out = []
        for group in self.groups:
            b, k, t = group.shape
            first = int(group.flat[0])
            regular = np.arange(first, first + group.size).reshape(b, t, k).transpose(0, 2, 1)
            out.append((first, b, t, k) if np.array_equal(group, regular) else None)
        return tuple(out)

    def _walk(self, x: np.ndarray, work: "_Work") -> list[np.ndarray]:
        first, first_less_2, to_leaf = self._layout
        n = len(x)
        cells, missing = x.ravel(), bool(np.isnan(x).any())
        # into x, flattened: each row's first cell (none to add for a single row, the common case)
        row_start = (np.arange(n, dtype=np.intp) * x.shape[1])[:, None] if n > 1 else 0
        # per row and tree, the split reached, numbered globally (tree t's split i at first[t] + i, heap order): its
        # children at 2 (first + i) + 1 - first and one more, so the walk needs no per-tree index of its own
        node, at, v, packed, go_left = (a[:n] for a in (work.node, work.at, work.v, work.packed, work.go_left))
        threshold = packed.view(np.float32)[:, _LOW_HALF::2]  # the lower 32 bits: each split's threshold
        node[...] = first
        for _ in range(self.depth):  # in place: a chunk's arrays stay in cache from one level to the next
            np.take(self._packed, node, out=packed)
            np.right_shift(packed, 32, out=at)
            if n > 1:
                at += row_start
            np.take(cells, at, out=v)
            np.less(v, threshold, out=go_left)
            if missing:  # a missing value takes the branch its node learned
                go_left |= np.isnan(v) & np.take(self.default_left, node)
            node *= 2
            node -= first_less_2
            node -= go_left
        node += to_leaf
        leaves = np.take(self.value, node, out=work.leaves[:n])
        out = []
        for group, base, view, partial in zip(self.groups, self.base_scores, self._group_views, work.partial):
            # XGBoost adds each tree's leaf to the base score in float32, tree by tree: the base goes into each
            # booster's first leaf (a + b is b + a, bit for bit), then a sequential float32 sum (cumsum, not
            # numpy's pairwise sum) gives the same bits. Axes: rows, boosters, trees, targets.
            if view is None:
                terms = leaves[:, group.transpose(0, 2, 1)]
            else:
                start, b, t, k = view
                terms = leaves[:, start:start + b * t * k].reshape(n, b, t, k)
            terms[:, :, 0] += base
            sums = np.cumsum(terms, axis=2, dtype=np.float32, out=partial[:n])[:, :, -1]
            out.append(sums.transpose(1, 2, 0))  # (boosters, targets, rows)
        return out

    def save(self, path: str | Path) -> Path:
        """The arrays as one .npz file (numpy alone reads it back: `TreeArrays.load`)."""
        path = Path(path)
        groups = {f"group_{i}": g for i, g in enumerate(self.groups)}
        bases = {f"base_{i}": b for i, b in enumerate(self.base_scores)}
        with path.open("wb") as out:
            np.savez_compressed(out, depth=np.int64(self.depth), **{n: getattr(self, n) for n in _ARRAYS},
                                **groups, **bases)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "TreeArrays":
        with np.load(path) as stored:
            models = sum(1 for name in stored.files if name.startswith("group_"))
            return cls(groups=tuple(stored[f"group_{i}"] for i in range(models)),
                       base_scores=tuple(stored[f"base_{i}"] for i in range(models)), depth=int(stored["depth"]),
                       **{n: stored[n] for n in _ARRAYS})


class _Work:
    """A walk's arrays for `rows` rows of `trees` trees, written over from one chunk of rows to the next: a fresh
    set each chunk costs more in page faults than the walk's arithmetic (measured on estimate_many's walks)."""

    def __init__(self, rows: int, trees: int, groups: tuple):
        self.node, self.at = np.empty((rows, trees), np.intp), np.empty((rows, trees), np.intp)
        self.v, self.packed = np.empty((rows, trees), np.float32), np.empty((rows, trees), np.int64)
        self.go_left, self.leaves = np.empty((rows, trees), bool), np.empty((rows, trees), np.float32)
        self.partial = [np.empty((rows, g.shape[0], g.shape[2], g.shape[1]), np.float32) for g in groups]
