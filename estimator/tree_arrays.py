"""Trained XGBoost boosters as flat numpy arrays: the estimator's tree walk, with no XGBoost needed to predict.

`Booster.inplace_predict` costs about 0.3 ms per call whatever the row count (argument checks, a JSON config, the
thread pool), and an estimate needs four models (point and band, time and energy), each a bag of boosters
(`joulecast.training.residual`): twenty calls, more than the 5 ms budget. Walking the trees here, every tree of
every model for all rows at once, one tree level per step, costs well under a millisecond for one row. The arrays
come from the boosters' own JSON models, so each booster's sum is XGBoost's float32 value, bit for bit (checked in
the tests), and a bag's mean is `bag_margin` of those sums, as on the XGBoost path.

The arrays hold each tree as a complete binary tree of the deepest tree's depth (a leaf above the last level
stands for the whole subtree below it, every branch reaching its value), so that a tree's nodes lie side by side
and a node's children are found by arithmetic, not looked up. Trees of depth 4 or less (the shipped model's are 3)
are read by their decisions, not walked (`_coded_leaves`): each distinct (feature, threshold) pair is compared once
for a chunk of rows (XGBoost's histogram cuts leave 5,798 pairs for the shipped model's 31,500 splits), each tree's
decisions are OR-ed into a code of a bit a split, eight rows to a 64-bit word, and the code's leaf value is read
from a table per tree (where it is small, MAX_LEAF_BY_CODE) or through one code -> leaf table shared by every tree.
On 4,096 distinct configurations' design rows (the shipped model of 4,500 trees, same process) that takes 15
instead of 90-94 us a row; deeper trees are walked a level at a time. Every path writes into its thread's work
arrays, kept from one chunk and one call to the next (fresh arrays each chunk cost more in page faults than the
arithmetic), each booster's base goes into its first leaf so that a model's leaves are summed as a slice, and a
bag's mean comes from the sums as stacked.

A few rows (one estimate's) take their own path: every tree's decisions gathered as the bytes of one word and
packed by one multiplication (`_few_coded_leaves`), the leaves read through the shared code -> leaf table, and one
row's models of a number of rounds summed at once, rounds first (`_one_row_margins`): one row of the shipped model
124 -> 53 us. Two
sets of trees that one row needs together (a GPU's level's bags and the pooled ones) are read as one (`joined`).
"""

from __future__ import annotations

import functools
import math
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
# Trees up to this depth are read by their split decisions all at once (`_coded_leaves`): a code of 2^depth - 1 bits
# a tree, looked up as its leaf in a table of 2^(2^depth - 1) entries (32,768 at depth 4). Deeper trees are walked
# level by level.
MAX_CODED_DEPTH = 4
# (Distinct (feature, threshold) pairs x rows) compared at once on the coded path: the float and bool blocks, 2 and
# 0.5 MB at this size (88 rows of the shipped model), stay in cache from the comparison to the codes (in estimate_many
# 18.2-18.7 us a walked row against 19.0-19.7 at twice the size).
CHUNK_PAIR_ENTRIES = 1 << 19
# Each tree's leaf value by code, one table of trees x 2^(2^depth - 1) entries where it holds at most this many (the
# shipped model's 4,500 trees of depth 3: 576,000 float32, 2.3 MB), saves a lookup a tree and row (shared table of
# leaves by code, then the leaf's value): 17.3 -> 15 us a row on 4,096 design rows.
MAX_LEAF_BY_CODE = 1 << 21
# Rows below which the coded path packs every decision at once (`TreeArrays._few_coded_leaves`): one estimate's
# rows. Beyond, the byte loop packs eight rows to a word and keeps its blocks in cache.
FEW_ROWS = 8
_ARRAYS = ("feature", "threshold", "default_left", "value")
# Where an int64's lower 32 bits lie in memory, as two float32s: first on a little-endian machine.
_LOW_HALF = 0 if sys.byteorder == "little" else 1
# Eight 0/1 bytes of a little-endian word times this put byte k's bit at bit 56 + k (their other products fall
# below bit 56 without carrying into it, or past bit 63): the eight decisions packed as the product's top byte.
_PACK_BYTES = 0x0102040810204080
_LITTLE_U64 = np.dtype("<u8")


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
        if len(values) == 1 and self._one_row is not None:
            return self._one_row_margins(values)
        margins = (bag_margin(sums) for sums in self._stacked(values))  # each (targets, rows)
        return [m[0] if len(m) == 1 else m.T for m in margins]

    @functools.cached_property
    def _one_row(self) -> list[tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]]]] | None:
        """For one row, the models' leaves in a block per number of rounds (the point bags' 300, the band bags' 75
        as shipped: no padding to sum): each block (rounds, boosters, the block's targets) tree indices, rounds
        first, its boosters' base scores (boosters, targets) and its models' (model, first column, targets). None
        where the models differ in boosters."""
        boosters = {group.shape[0] for group in self.groups}
        if len(boosters) != 1:
            return None
        by_rounds: dict[int, list[int]] = {}
        for m, group in enumerate(self.groups):  # (boosters, targets, rounds)
            by_rounds.setdefault(group.shape[2], []).append(m)
        blocks = []
        for models in by_rounds.values():
            columns, bases, spans = [], [], []
            for m in models:
                spans.append((m, len(columns), self.groups[m].shape[1]))
                columns += list(self.groups[m].transpose(1, 0, 2))   # each target's (boosters, rounds)
                bases += list(self.base_scores[m].T)
            # rounds first: summed over the outer axis, numpy adds each round's row to the last, in order
            blocks.append((np.ascontiguousarray(np.stack(columns, axis=-1).transpose(1, 0, 2)),
                           np.stack(bases, axis=-1).astype(np.float32), spans))
        return blocks

    def _one_row_margins(self, values: np.ndarray) -> list[np.ndarray]:
        """`predict_models` of one row, every model of a number of rounds summed at once: each booster's base into
        its first round's leaf, the rounds added one after another in float32 (a running sum), and a bag's mean of
        its boosters in float64, as `bag_margin` takes it; a handful of calls instead of five a model."""
        leaves_of = self._coded_leaves if self.depth <= MAX_CODED_DEPTH else self._walked_leaves
        leaves = leaves_of(np.ascontiguousarray(values, dtype=np.float32), self._work())[:, 0]
        out: list[np.ndarray] = [None] * len(self.groups)  # type: ignore[list-item]
        for index, base, spans in self._one_row:
            terms = leaves[index]  # (rounds, boosters, targets)
            terms[0] += base
            # a round's row of boosters x targets added to the running sums in turn (a reduction over a contiguous
            # axis would add pairwise: a single booster of a single target takes cumsum's running sum)
            sums = (np.add.reduce(terms, axis=0) if terms[0].size > 1
                    else np.cumsum(terms, axis=0, dtype=np.float32)[-1])
            mean = sums[0] if len(sums) == 1 else sums.astype(np.float64).mean(axis=0)
            for m, first, k in spans:
                out[m] = mean[first:first + 1] if k == 1 else mean[None, first:first + k]
        return out

    def joined(self, other: "TreeArrays") -> "TreeArrays | None":
        """These models then `other`'s as one set of arrays, so that one read walks both (`predict_models` gives
        this one's margins, then the other's); None where their trees are held at different depths."""
        if other.depth != self.depth:
            return None
        trees = len(self.value) >> self.depth
        return TreeArrays(groups=self.groups + tuple(g + trees for g in other.groups),
                          base_scores=self.base_scores + other.base_scores, depth=self.depth,
                          **{n: np.concatenate([getattr(self, n), getattr(other, n)]) for n in _ARRAYS})

    def predict_members(self, values: np.ndarray) -> list[list[np.ndarray]]:
        """Per model, each booster's raw margins, float32: (rows,) for one target or (rows, targets)."""
        return [[s[i, 0] if s.shape[1] == 1 else s[i].T for i in range(len(s))] for s in self._stacked(values)]

    def _stacked(self, values: np.ndarray) -> list[np.ndarray]:
        """Per model, its boosters' float32 sums, (boosters, targets, rows): the rows walked a chunk at a time
        (bounded memory, and cache), every chunk in the same work arrays."""
        values = np.ascontiguousarray(values, dtype=np.float32)
        n = len(values)
        chunk = max(1, min(n, self.chunk_rows))
        work = self._work()
        out = [np.empty((*base.shape, n), np.float32) for base in self.base_scores]
        leaves_of = self._coded_leaves if self.depth <= MAX_CODED_DEPTH else self._walked_leaves
        for i in range(0, n, chunk):
            leaves = leaves_of(values[i:i + chunk], work)
            for o, s in zip(out, self._sums(leaves, work)):
                o[..., i:i + chunk] = s
        return out

    @property
    def chunk_rows(self) -> int:
        """Rows walked at once: on the coded path CHUNK_PAIR_ENTRIES over the distinct (feature, threshold) pairs,
        a multiple of 8 (the codes are packed eight rows a word), else CHUNK_ENTRIES over the trees; at least one."""
        if self.depth <= MAX_CODED_DEPTH:
            return max(8, CHUNK_PAIR_ENTRIES // max(1, len(self._codes.feature)) // 8 * 8)
        return max(1, CHUNK_ENTRIES // max(1, len(self.value) >> self.depth))

    def _work(self) -> "_Work":
        """The calling thread's work arrays, kept from its last walk (a batch's first chunk sizes them; later
        batches and a single row's walk reuse them)."""
        local = self._local
        work = getattr(local, "work", None)
        if work is None:
            work = local.work = _Work()
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

    def _sums(self, leaves: np.ndarray, work: "_Work") -> list[np.ndarray]:
        """Per model, its boosters' float32 sums (boosters, targets, rows) of a chunk's leaves (trees, rows).

        XGBoost adds each tree's leaf to the base score in float32, tree by tree: the base goes into each booster's
        first leaf (a + b is b + a, bit for bit), then the rounds are added in order, which gives the same bits. A
        reduction over the rounds adds them one after another while the rows are the innermost axis; over one row
        it would sum pairwise, so one row takes a running sum."""
        n, out = leaves.shape[1], []
        for m, (group, base, view) in enumerate(zip(self.groups, self.base_scores, self._group_views)):
            b, k, t = group.shape
            if view is None:
                terms = leaves[group.transpose(0, 2, 1)]  # boosters, rounds, targets, rows
            else:
                terms = leaves[view[0]:view[0] + b * t * k].reshape(b, t, k, n)
            terms[:, 0] += base[:, :, None]
            if n > 1:  # the rows innermost: numpy adds the rounds one after another
                out.append(np.add.reduce(terms, axis=1, out=work.get(f"sums_{m}", np.float32, (b, k, n))))
            else:
                out.append(np.cumsum(terms, axis=1, dtype=np.float32)[:, -1])
        return out

    @functools.cached_property
    def _codes(self) -> "_Codes":
        """The coded path's tables, set once."""
        splits = 2 ** self.depth - 1
        trees = len(self.value) >> self.depth
        # the distinct (feature, threshold) pairs: XGBoost's histogram cuts make far fewer than splits (the model
        # shipped on 2026-12-02: 5,798 of 31,500)
        pairs, pair_of_split = np.unique(self._packed, return_inverse=True)  # feature and threshold in one int64
        codes = np.arange(2 ** splits)
        node = np.zeros_like(codes)
        for _ in range(self.depth):
            node = 2 * node + 2 - ((codes >> node) & 1)
        leaf_of_code = (node - splits).astype(np.intp)
        threshold = (pairs & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
        # the few-row path's tables: the pairs and a pad that never goes left (below -inf), each tree's splits
        # padded with it to whole bytes of eight
        width = -(-splits // 8) * 8
        few_pair_of_split = np.full((trees, width), len(pairs), np.intp)
        few_pair_of_split[:, :splits] = pair_of_split.reshape(trees, splits)
        few_default_left = np.zeros((trees, width), bool)
        few_default_left[:, :splits] = np.asarray(self.default_left, bool).reshape(trees, splits)
        return _Codes(feature=(pairs >> 32).astype(np.intp), threshold=threshold[:, None],
                      few_feature=np.append(pairs >> 32, 0).astype(np.intp),
                      few_threshold=np.append(threshold, np.float32(-np.inf))[:, None],
                      few_pair_of_split=few_pair_of_split, few_default_left=few_default_left,
                      pair_of_split=pair_of_split.reshape(trees, splits).T.astype(np.intp),
                      default_left=np.asarray(self.default_left, bool).reshape(trees, splits).T,
                      leaf_of_code=leaf_of_code, first_leaf=(np.arange(trees, dtype=np.intp) << self.depth)[:, None],
                      first_code=(np.arange(trees, dtype=np.intp) << splits)[:, None])

    @functools.cached_property
    def _leaf_by_code(self) -> np.ndarray | None:
        """(trees * 2^splits,) float32: tree t's leaf value for code c at t 2^splits + c, where it holds at most
        MAX_LEAF_BY_CODE entries (else None); made when a batch first reads it."""
        splits, trees = 2 ** self.depth - 1, len(self.value) >> self.depth
        if trees << splits > MAX_LEAF_BY_CODE:
            return None
        return self.value.reshape(trees, -1)[:, self._codes.leaf_of_code].ravel()

    def _coded_leaves(self, x: np.ndarray, work: "_Work") -> np.ndarray:
        """Each tree's leaf value for each row, (trees, rows), from all its split decisions at once: each distinct
        (feature, threshold) pair compared once for all rows (a feature's values are a row of the chunk's
        transpose: copied, not gathered value by value), then each tree's decisions OR-ed into a code of one bit a
        split, eight rows to a 64-bit word where the row count allows (a decision is 0 or 1, so a shift of at most
        7 stays in its row's byte), and the code's leaf value read from the tree's table of leaf values by code, or
        through the code -> leaf table every tree shares."""
        c = self._codes
        n, (splits, trees) = len(x), c.pair_of_split.shape
        if n < FEW_ROWS:
            return self._few_coded_leaves(x, work)
        values = work.get("values", np.float32, (len(c.feature), n))
        np.take(np.ascontiguousarray(x.T), c.feature, axis=0, out=values, mode="clip")  # features are in range
        left = work.get("left", bool, (len(c.feature), n))
        np.less(values, c.threshold, out=left)
        word = np.uint64 if n % 8 == 0 else np.uint8
        lanes = left.view(np.uint8).view(word)  # (pairs, words)
        missing = np.isnan(values).view(np.uint8).view(word) if np.isnan(x).any() else None
        every_lane = word(0x0101010101010101 if word is np.uint64 else 1)
        decision, part = (work.get(name, word, (trees, lanes.shape[1])) for name in ("decision", "part"))
        code = work.get("code", np.intp, (trees, n))
        for byte in range(0, splits, 8):  # a byte of the code holds eight splits' decisions
            for k in range(byte, min(byte + 8, splits)):
                np.take(lanes, c.pair_of_split[k], axis=0, out=decision, mode="clip")
                if missing is not None:  # a missing value takes the branch its split learned
                    decision |= np.take(missing, c.pair_of_split[k], axis=0) & (c.default_left[k] * every_lane)[:, None]
                if k == byte:
                    part[...] = decision
                else:
                    np.left_shift(decision, k - byte, out=decision)
                    part |= decision
            if byte:
                code |= part.view(np.uint8).reshape(trees, n).astype(np.intp) << byte
            else:
                code[...] = part.view(np.uint8).reshape(trees, n)
        return self._leaves_of_codes(code, work.get("leaves", np.float32, (trees, n)))

    def _few_coded_leaves(self, x: np.ndarray, work: "_Work") -> np.ndarray:
        """`_coded_leaves` for a few rows (one estimate's): each tree's decisions gathered as eight bytes a word
        (its splits in heap order, padded with a pair that never goes left), and each word's eight 0/1 bytes packed
        into a byte by one multiplication (the byte k's bit lands at bit 56 + k of the product): a handful of calls
        instead of the byte loop's five a split (one row of the shipped model's 4,500 trees: 40 against 79 us)."""
        c = self._codes
        values = np.ascontiguousarray(x.T)[c.few_feature]  # (pairs and the pad, rows)
        # np.take, not fancy indexing: half the time for these 36,000 bytes a row
        decisions = np.take(np.ascontiguousarray((values < c.few_threshold).T), c.few_pair_of_split, axis=1)
        if np.isnan(x).any():  # a missing value takes the branch its split learned
            decisions |= np.take(np.ascontiguousarray(np.isnan(values).T), c.few_pair_of_split,
                                 axis=1) & c.few_default_left
        words = decisions.view(_LITTLE_U64) * _LITTLE_U64.type(_PACK_BYTES)  # (rows, trees, bytes of the code)
        words >>= np.uint64(56)
        code = work.get("code", np.intp, (len(c.first_leaf), len(x)))
        code[...] = words[..., 0].T
        for byte in range(1, words.shape[-1]):
            code |= words[..., byte].T.astype(np.intp) << (8 * byte)
        # through the shared code -> leaf table and the trees' leaves (32 bytes a tree), not the table of leaf
        # values by code, whose one value a tree each costs a line of memory: in a process doing other work
        # between estimates, 1.077 against 1.103 ms a warm estimate (medians of six alternations)
        return self._leaves_of_codes(code, work.get("leaves", np.float32, code.shape), by_code=False)

    def _leaves_of_codes(self, code: np.ndarray, leaves: np.ndarray, by_code: bool = True) -> np.ndarray:
        """Each tree's leaf value for each row's code, (trees, rows), into `leaves`, from the table of leaf values
        by code where `by_code` and it is kept, else through the shared code -> leaf table; `code` is written
        over."""
        c = self._codes
        if by_code and self._leaf_by_code is not None:
            code += c.first_code
            return np.take(self._leaf_by_code, code, out=leaves, mode="clip")
        np.take(c.leaf_of_code, code, out=code, mode="clip")  # element by element: in place is safe
        code += c.first_leaf
        return np.take(self.value, code, out=leaves, mode="clip")

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

    def _walked_leaves(self, x: np.ndarray, work: "_Work") -> np.ndarray:
        """Each tree's leaf value for each row, (trees, rows), walked level by level (trees deeper than
        MAX_CODED_DEPTH, whose codes would not fit a table)."""
        first, first_less_2, to_leaf = self._layout
        n, trees = len(x), len(first)
        cells, missing = x.ravel(), bool(np.isnan(x).any())
        # into x, flattened: each row's first cell (none to add for a single row)
        row_start = (np.arange(n, dtype=np.intp) * x.shape[1])[:, None] if n > 1 else 0
        # per row and tree, the split reached, numbered globally (tree t's split i at first[t] + i, heap order): its
        # children at 2 (first + i) + 1 - first and one more, so the walk needs no per-tree index of its own
        node, at = work.get("node", np.intp, (n, trees)), work.get("at", np.intp, (n, trees))
        v, packed = work.get("v", np.float32, (n, trees)), work.get("packed", np.int64, (n, trees))
        go_left = work.get("go_left", bool, (n, trees))
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
        return np.ascontiguousarray(np.take(self.value, node).T)

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


@dataclass(frozen=True)
class _Codes:
    """The coded path's tables (`TreeArrays._coded_leaves`)."""

    feature: np.ndarray        # (pairs,) each distinct (feature, threshold) pair's feature
    threshold: np.ndarray      # (pairs, 1) float32: its threshold
    pair_of_split: np.ndarray  # (splits a tree, trees): the pair of each tree's split i (heap order)
    default_left: np.ndarray   # (splits a tree, trees): the branch of each split for a missing value
    leaf_of_code: np.ndarray   # (2^splits,) a code's leaf in its tree; bit i of a code: split i goes left
    first_leaf: np.ndarray     # (trees, 1): each tree's first leaf in `TreeArrays.value`
    first_code: np.ndarray     # (trees, 1): each tree's first entry in `TreeArrays._leaf_by_code`
    few_feature: np.ndarray    # (pairs + 1,) `feature` and a pad's (0)
    few_threshold: np.ndarray  # (pairs + 1, 1) float32: `threshold` and the pad's, -inf (never left)
    few_pair_of_split: np.ndarray  # (trees, splits rounded up to 8): each tree's pairs, heap order, then the pad
    few_default_left: np.ndarray   # (trees, the same): each split's branch for a missing value, the pad's False


class _Work:
    """A thread's walk arrays, flat buffers by name viewed in the shape asked for, written over from one chunk of
    rows to the next: a fresh set each chunk costs more in page faults than the walk's arithmetic (measured on
    estimate_many's walks)."""

    def __init__(self):
        self._flat: dict[str, np.ndarray] = {}

    def get(self, name: str, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
        size = math.prod(shape)
        flat = self._flat.get(name)
        if flat is None or flat.size < size or flat.dtype != dtype:
            flat = self._flat[name] = np.empty(size, dtype)
        return flat[:size].reshape(shape)
