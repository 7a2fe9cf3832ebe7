"""Many configurations of one model lowered at once: a model's kernel rows are closed-form functions of batch and
sequence length, so each structure (model, phase, dtype, attention, engine) is lowered a few times and every
integer column of its rows fitted as a polynomial in batch B and sequence S; thousands of configurations then take
one vectorised evaluation instead of one lowering each.

The polynomial is quadratic in S and linear in B, in Newton form on the probe points B in {2, 3}, S in {2, 3, 4}
(GEMM and norm sizes are linear in B*S, eager attention's scores B*S^2). It is checked, exactly and column by
column, at two more points; a structure whose rows it does not reproduce there (none of the catalog's) falls back to
lowering each configuration (`lowering.workload`). The rows are fitted unmerged (different kernels may coincide at
a probe size); once the polynomial is checked, rows equal as polynomials, so at every size, are merged into `count`
(`_merged`), as `lowering.workload` merges identical kernels.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from joulecast.data.kernels import KERNEL_COLUMNS, STRING_COLUMNS
from joulecast.data.labels import Labels, plain
from joulecast.features.builder import expert_split
from joulecast.features.kernel_table import kernel_columns
from joulecast.features.lower_transformers import active_experts, expert_counts, expert_shards
from joulecast.features.lowering import engine_records, is_vision, lower, normal_phase, resolve_model
from joulecast.features.train_step import shard_config

_B, _S = (2, 3), (2, 3, 4)          # probe points: Newton nodes
# A mixture of experts' GEMM rows by op, and the column holding their routed slots: the forward's tokens (n), its
# input gradient's reduction (k) and its weight gradient's output rows (m), as `lowering.training_step` turns them.
EXPERT_FIELDS = {"experts": "n", "experts_dgrad": "k", "experts_wgrad": "m"}
_CHECKS = ((5, 7), (9, 130))       # where the polynomial must reproduce the lowering exactly
_INTS = tuple(c for c, (dtype, _) in KERNEL_COLUMNS.items() if dtype == "int64")
_FIXED = tuple(c for c in KERNEL_COLUMNS if c not in _INTS)


@dataclass(frozen=True)
class Template:
    """One structure's kernel rows as functions of (B, S): fixed columns per row, and per integer column the Newton
    coefficients (at B = 2 and the change to B = 3) of a quadratic in S."""

    fixed: dict[str, np.ndarray]              # per row: kind, op, dtypes, tensor_core, causal
    coefficients: dict[str, np.ndarray]       # integer column -> (2, 3, rows) int64
    phase: str
    vision: bool
    params: int                               # the model's weight elements, whatever the size
    # a mixture of experts' (held, routed a token, GPUs they are split over): rows fitted unsplit
    experts: tuple[int, int, int] | None = None

    @property
    def rows(self) -> int:
        return len(self.fixed["kind"])

    def columns(self, batch: np.ndarray, seq: np.ndarray) -> dict[str, np.ndarray]:
        """The kernel rows of every configuration (batch[i], seq[i]), configuration by configuration, with a
        `workload_id` column 0..n-1."""
        b = np.asarray(batch, np.int64)[:, None] - _B[0]   # (configurations, 1)
        s = np.asarray(seq, np.int64)[:, None] - _S[0]
        step1, step2 = s, s * (s - 1) // 2                  # Newton basis at the nodes 2, 3, 4
        n = len(b)
        varying, names, constant, same = self._blocks
        c = varying[:, :, :, None, :]  # (columns, B node, S term, configurations, rows): all columns in one pass
        at_b = c[:, 0, 0] + step1 * c[:, 0, 1] + step2 * c[:, 0, 2]
        at_b += b * (c[:, 1, 0] + step1 * c[:, 1, 1] + step2 * c[:, 1, 2])
        out = dict(zip(names, at_b.reshape(len(names), -1)))
        out.update(zip(same, np.tile(constant, n)))  # the same at every size (layer counts, widths)
        out.update({name: Labels(np.tile(v.codes, n), v.names) if isinstance(v, Labels) else np.tile(v, n)
                    for name, v in self.fixed.items()})
        out["workload_id"] = np.repeat(np.arange(n, dtype=np.int64), self.rows)
        if self.experts is not None:
            rows, fields = self._expert_rows
            at = (np.arange(n)[:, None] * self.rows + rows).ravel()
            self._split_experts(out, at, np.repeat(self._tokens(batch, seq), len(rows)), np.tile(fields, n))
        return out

    def _tokens(self, batch: Any, seq: Any) -> np.ndarray:
        """The tokens a pass runs through its layers: a decode step's one a sequence, else every one."""
        batch = np.asarray(batch, np.int64)
        return batch if self.phase == "decode" else batch * np.asarray(seq, np.int64)

    def _split_experts(self, out: dict[str, np.ndarray], at: np.ndarray, tokens: np.ndarray,
                       fields: np.ndarray) -> None:
        """The experts' GEMM rows `at` (fitted over every routed slot, batch 1) split over the experts their
        `tokens` run (`expert_split`), each row's slots held in its column of `fields` (EXPERT_FIELDS)."""
        held, routed, shards = self.experts
        for name in set(fields.tolist()):
            mine = at[fields == name]
            out["batch"][mine], out[name][mine] = expert_split(
                out[name][mine], active_experts(tokens[fields == name], held, routed, shards), shards)

    @functools.cached_property
    def _expert_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(the template's expert GEMM rows, the column holding each one's routed slots)."""
        ops = plain({"op": self.fixed["op"]})["op"]
        rows = np.array([i for i, op in enumerate(ops) if op in EXPERT_FIELDS], np.intp)
        return rows, np.array([EXPERT_FIELDS[ops[i]] for i in rows], dtype=object)

    def one(self, batch: int, seq: int) -> tuple[dict[str, np.ndarray], dict[str, Labels]] | None:
        """One configuration's kernel columns as the lowering builds them (`KERNEL_COLUMNS`' order, strings as
        object arrays; each array its own copy) and the string columns' `Labels`; None where two of the rows meet at
        this size: rows that differ as polynomials can (GPT-2's eager attention at 64 tokens, its head width), and
        the lowering merges them. The same integers as `columns([batch], [seq])`, in a third of its calls."""
        varying, names, constant, same = self._blocks
        b, s = batch - _B[0], seq - _S[0]
        step1, step2 = s, s * (s - 1) // 2
        at_b = varying[:, 0, 0] + step1 * varying[:, 0, 1] + step2 * varying[:, 0, 2]
        at_b += b * (varying[:, 1, 0] + step1 * varying[:, 1, 1] + step2 * varying[:, 1, 2])
        first, second, meeting = self._may_meet
        if len(first) and (at_b[meeting][:, first] == at_b[meeting][:, second]).all(axis=0).any():
            return None
        strings, labels = self._fixed_forms
        out = {**dict(zip(names, at_b)), **dict(zip(same, constant.copy())),
               **{name: v.copy() for name, v in strings.items()}}
        if self.experts is not None:
            rows, fields = self._expert_rows
            self._split_experts(out, rows, np.repeat(self._tokens(batch, seq), len(rows)), fields)
        return ({name: out[name] for name in KERNEL_COLUMNS},
                {name: Labels(v.codes.copy(), v.names) for name, v in labels.items()})

    @functools.cached_property
    def _fixed_forms(self) -> tuple[dict[str, np.ndarray], dict[str, Labels]]:
        """(the fixed columns as the lowering gives them: strings as object arrays; the string columns' Labels)."""
        return plain(self.fixed), {name: v for name, v in self.fixed.items() if isinstance(v, Labels)}

    @functools.cached_property
    def _may_meet(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """(rows i, rows j > i, the varying key columns' places in `_blocks`' varying block) of the pairs of rows
        alike in every fixed and constant column: the only ones a size can make the same kernel."""
        varying, names, constant, same = self._blocks
        keys = [v.codes if isinstance(v, Labels) else v for v in self.fixed.values()]
        keys += [row for n, row in zip(same, constant) if n != "count"]
        block = np.vstack([np.asarray(k, np.int64) for k in keys]).T if keys else np.zeros((self.rows, 0), np.int64)
        first, second = np.triu_indices(self.rows, 1)
        alike = (block[first] == block[second]).all(axis=1)
        return first[alike], second[alike], np.array([i for i, n in enumerate(names) if n != "count"], np.intp)

    @functools.cached_property
    def _blocks(self) -> tuple[np.ndarray, list[str], np.ndarray, list[str]]:
        """(the coefficients of the columns that vary with size, stacked, and their names; the values of those that
        do not, stacked, and their names)."""
        same = [n for n, c in self.coefficients.items() if not c[:, 1:].any() and not c[1, 0].any()]
        names = [n for n in self.coefficients if n not in same]
        varying = np.stack([self.coefficients[n] for n in names]) if names else np.zeros((0, 2, 3, self.rows), np.int64)
        constant = np.stack([self.coefficients[n][0, 0] for n in same]) if same else np.zeros((0, self.rows), np.int64)
        return varying, names, constant, same


def _records(config: Mapping[str, Any], phase: str, batch: int, seq: int, dtype: str, attention: str,
             engine: str | None, fusions: tuple[str, ...], flat_experts: bool = False) -> dict[str, np.ndarray]:
    """The lowering's kernel rows at (batch, seq), unmerged (each record its own row); `flat_experts`: a mixture of
    experts' GEMMs unsplit (`KernelBuilder.flat_experts`), as its template fits them."""
    records = engine_records(lower(config, phase=phase, batch=batch, seq=seq, dtype=dtype, attention=attention,
                                   fusions=fusions, flat_experts=flat_experts)[0], engine)
    return kernel_columns(records, merge=False)


@functools.cache
def template(model: str, phase: str, dtype: str, attention: str, engine: str | None,
             fusions: tuple[str, ...] = (), tp: int = 1, expert_parallel: bool = False) -> Template | None:
    """The template of a catalog model's structure (one GPU's shard under tensor parallelism `tp`, a mixture's
    experts split whole over its GPUs with `expert_parallel`), or None where the polynomial does not reproduce its
    rows."""
    config, _, _ = resolve_model(model)
    if tp > 1:
        config = shard_config(config, tp=tp, expert_parallel=expert_parallel)
    phase = normal_phase(config, phase)
    experts = None if is_vision(config) else expert_counts(config)
    flat = experts is not None
    probes = {(b, s): _records(config, phase, b, s, dtype, attention, engine, fusions, flat) for b in _B for s in _S}
    first = probes[_B[0], _S[0]]
    if any(len(p["count"]) != len(first["count"]) or any((p[c] != first[c]).any() for c in _FIXED)
           for p in probes.values()):
        return None
    coefficients = {}
    for name in _INTS:
        per_b = []
        for b in _B:
            v = [probes[b, s][name] for s in _S]
            per_b.append(np.stack([v[0], v[1] - v[0], v[2] - 2 * v[1] + v[0]]))
        coefficients[name] = np.stack([per_b[0], per_b[1] - per_b[0]])
    fixed = {c: Labels.of(first[c]) if c in STRING_COLUMNS else first[c] for c in _FIXED}
    out = Template(fixed=fixed, coefficients=coefficients, phase=phase, vision=is_vision(config),
                   params=lower(config, phase=phase, batch=_B[0], seq=_S[0], dtype=dtype, attention=attention,
                                fusions=fusions)[1], experts=(*experts[:2], expert_shards(config)) if flat else None)
    if flat and len(out._expert_rows[0]) != sum(str(op).startswith("experts") for op in plain(fixed)["op"]):
        return None  # an expert row whose slots' column is not known (EXPERT_FIELDS): lowered each time
    for b, s in _CHECKS:
        expected, got = _records(config, phase, b, s, dtype, attention, engine, fusions), out.columns([b], [s])
        got = plain(got)
        if len(expected["count"]) != out.rows or any((expected[c] != got[c]).any() for c in KERNEL_COLUMNS):
            return None
    return dataclasses.replace(out, **dict(zip(("fixed", "coefficients"), _merged(fixed, coefficients))))


def catalog_columns(model: str, phase: str, batch: int, seq: int | None, dtype: str, attention: str,
                    engine: str | None, fusions: tuple[str, ...]
                    ) -> tuple[dict[str, np.ndarray], dict[str, Labels], int] | None:
    """One configuration of a catalog model, already checked (`lowering.check_lowering`): its kernel columns as
    `lowering.workload` builds them (strings as object arrays, rows in the same order) from its structure's
    template, the string columns' `Labels` (the template's codes: physics need not encode them again), and its
    weight elements; None where only the lowering can give them: a structure the polynomial
    misses, a prefill of one token meeting the engine's decode-attention swap, or rows that meet at this size
    (a lowering merges them). One llama-3-8b prefill: about 20 against 100 us lowered."""
    if engine and seq == 1 and phase != "decode":
        return None
    t = template(model, phase, dtype, attention, engine, fusions)
    built = None if t is None else t.one(batch, 1 if seq is None else seq)
    return None if built is None else (*built, t.params)


def _merged(fixed: dict[str, Any], coefficients: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Rows equal at every size (the same fixed columns and polynomials: a model's layers repeat their kernels, in
    the catalog's models about two rows in five) as one row, their counts' polynomials summed, rows in order of first
    appearance. Physics works row by row: fewer rows, less work, the same totals."""
    keys = [v.codes if isinstance(v, Labels) else v for v in fixed.values()]
    keys += [c.reshape(-1, c.shape[-1]) for name, c in coefficients.items() if name != "count"]
    block = np.vstack([np.atleast_2d(np.asarray(k, np.int64)) for k in keys]).T  # a row per kernel row
    _, first, inverse = np.unique(block, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)                     # distinct rows in order of first appearance
    group = np.argsort(order)[inverse.ravel()]    # each row's merged row
    fixed = {n: Labels(v.codes[first[order]], v.names) if isinstance(v, Labels) else v[first[order]]
             for n, v in fixed.items()}
    count = coefficients["count"]
    summed = np.zeros((*count.shape[:2], len(first)), np.int64)
    np.add.at(summed, (slice(None), slice(None), group), count)
    coefficients = {n: summed if n == "count" else c[..., first[order]] for n, c in coefficients.items()}
    return fixed, coefficients
