"""`estimate_many`: estimates for a DataFrame of configurations, one row each, vectorised: each catalog model's
configurations lowered together (`joulecast.features.lower_many`), each GPU setting's through physics and the
residual in chunks, every column checked at the door."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.engines import check_engine, normal_engine
from joulecast.data.errors import InputError, JoulecastError
from joulecast.data.files import kind_of
from joulecast.data.fusions import check_fusions
from joulecast.data.gpus import GpuSpec
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.kernels import STRING_COLUMNS, dtype_name, stack
from joulecast.data.labels import Labels
from joulecast.data.workload import (
    LAUNCH_MODES,
    MAX_HOST_DISPATCH_S,
    MAX_SIZE,
    Workload,
    check_size_columns,
    host_dispatch_outside,
)
from joulecast.estimator.api import WHAT_IF_FLAG, corrected, memory_flags, what_if_reason
from joulecast.estimator.loading import load_estimator
from joulecast.estimator.tensor_parallel import check_expert_parallel, check_tp
from joulecast.features import lower_many, memory
from joulecast.features.design import Design, design_from_physics, physics_columns, setting_groups
from joulecast.features.lowering import ATTENTION_BACKENDS, is_vision, resolve_model, warn_positions, workload
from joulecast.features.physics import PhysicsTotals, check_setting, what_if_base
from joulecast.features.train_step import shard_config

CONFIG_COLUMNS = ("model", "gpu", "phase", "batch", "seq", "dtype", "attention", "launch_mode", "engine",
                  "sm_clock_mhz", "power_limit_w", "fusions", "host_dispatch_s", "tp", "expert_parallel")
_DEFAULTS: Mapping[str, Any] = {"phase": "prefill", "batch": 1, "seq": 512, "dtype": "bf16", "attention": "flash",
                                "launch_mode": "eager", "fusions": "", "tp": 1, "expert_parallel": False}
# `expert_parallel` as a CSV or a JSON body may give it: a bool, or its name (case aside) or 1 / 0
_TRUTHS = {"true": True, "false": False, "1": True, "0": False, "": False}


def estimate_many(configs: pd.DataFrame | Any, estimator: Any = None) -> pd.DataFrame:
    """Estimates for a DataFrame of configurations, one row each (vectorised); a list of rows (dicts) or a dict of
    columns is read as pandas reads it.

    Columns: `model` and `gpu` (required), `phase`, `batch`, `seq`, `dtype`, `attention`, `launch_mode` (empty:
    `graph` where the row names an engine, else `eager`), `engine` (a serving engine, empty or "none" for none),
    `sm_clock_mhz`, `power_limit_w`, `fusions` (comma-separated `joulecast.data.fusions`, empty for none),
    `host_dispatch_s` (the host's time an eager launch, s; empty for the default, `Workload.host_dispatch_s`),
    `tp` (tensor parallelism: the row is one GPU's shard of the pass, `features.train_step.shard_config`; its
    all-reduces are the job's to add, `estimator.tensor_parallel`; default 1), `expert_parallel` (true: a mixture
    of experts' experts split whole over the `tp` GPUs, a share each, as vLLM's --enable-expert-parallel, not each
    expert's width; default false) (optional). Returns energy_j,
    time_s, power_w, physics_*, the interval bounds, in_domain, flags (as `Estimate.flags`, joined by ", ":
    spec-only or out-of-domain, what-if, exceeds-memory, or empty), outside_domain (`Estimate.outside_domain` joined by
    "; ") and memory_gb (GiB the workload needs on the GPU).
    `estimator`: None (shipped default), "physics", a folder, an MLflow URI, or a loaded `Residual`.

    A catalog model's configurations are lowered together (`joulecast.features.lower_many`), each GPU setting's
    configurations go through physics in chunks of CHUNK_CONFIGS, and their residual corrections are taken about
    CORRECT_CONFIGS at a time across settings, so memory stays bounded.
    """
    if not isinstance(configs, pd.DataFrame):  # a list of rows (dicts) or a dict of columns, as pandas reads them
        try:
            configs = pd.DataFrame(configs)
        except (ValueError, TypeError):
            raise InputError("configs", f"expected a DataFrame, a list of rows (dicts) or a dict of columns, got "
                                        f"{kind_of(configs)}") from None
    for column in ("model", "gpu"):
        if column not in configs:
            has = ", ".join(map(str, configs.columns)) or "none"
            raise InputError(column, f"estimate_many needs a '{column}' column; it has {has} (allowed: "
                                     f"{', '.join(CONFIG_COLUMNS)})")
    extra = sorted(set(configs.columns) - set(CONFIG_COLUMNS))
    if extra:
        raise InputError(extra[0], f"unknown column; allowed: {', '.join(CONFIG_COLUMNS)}")
    frame, engines, clocks, limits = _normalised(configs)
    specs = {name: lookup_gpu(name) for name in frame["gpu"].unique()}
    model = estimator if hasattr(estimator, "predict") else load_estimator(estimator)
    lowered = Lowered(frame, engines)
    n = len(frame)
    out = {c: np.full(n, np.nan) for c in ("physics_time_s", "physics_energy_j", "time_s", "energy_j", "energy_lo_j",
                                            "energy_hi_j", "time_lo_s", "time_hi_s")}
    out["memory_gb"], memory_flag = np.full(n, np.nan), np.full(n, "", dtype=object)
    in_domain, outside = np.ones(n, bool), np.full(n, "", dtype=object)
    gpu_names = frame["gpu"].map(lambda g: specs[g].name)  # aliases resolved
    specs_of = {spec.name: spec for spec in specs.values()}
    pending: list[tuple[Design, np.ndarray, str, PhysicsTotals, float, np.ndarray | None]] = []

    def correct() -> None:
        """The residual over the pending chunks at once: its trees walked in one long pass, not one per GPU setting
        between physics passes that push them out of cache."""
        X = Design(np.concatenate([p[0].values for p in pending]), pending[0][0].columns)
        idx = np.concatenate([p[1] for p in pending])
        gpus = np.concatenate([np.full(len(p[1]), p[2], dtype=object) for p in pending]).tolist()

        def totals(name: str) -> np.ndarray:
            return np.concatenate([getattr(p[3], name) for p in pending])

        # a configuration that states no host dispatch of its own spans the measured hosts' range
        stated = np.zeros(len(idx), bool) if lowered.dispatch is None else ~np.isnan(lowered.dispatch[idx])
        base = None
        if any(p[5] is not None for p in pending):  # the what-ifs' change, NaN (none) on real GPUs' rows
            base = np.concatenate([np.full((2, len(p[1])), np.nan) if p[5] is None else p[5] for p in pending], axis=1)
        hybrid, corr, away, said = corrected(model, X, gpus, totals, stated,
                                             np.concatenate([np.full(len(p[1]), p[4]) for p in pending]), base)
        for name, values in hybrid.items():
            out[name][idx] = values
        in_domain[idx] = corr["in_domain"]
        outside[idx[away]] = ["; ".join(r) for r in said]
        pending.clear()

    learned = gpu_names.copy()   # the GPU whose learned correction each row takes: a what-if's base (`what_if_base`)
    for gpu_name, clock, limit, rows in setting_groups(gpu_names, clocks, limits):
        spec = lookup_gpu(gpu_name)
        try:  # the group's clock and limit, refused as its first row's (as the other columns' checks say)
            check_setting(spec, clock, limit)
        except InputError as exc:
            raise _at_row(exc.field, int(rows[0]), exc) from None
        what_if = what_if_base(spec, clock, limit) if model is not None else None
        for start in range(0, len(rows), CHUNK_CONFIGS):
            idx = rows[start:start + CHUNK_CONFIGS]
            X, totals, idx, need = lowered.design(idx, spec, clock, limit)
            out["physics_time_s"][idx], out["physics_energy_j"][idx] = totals.time_s, totals.energy_j
            out["memory_gb"][idx], memory_flag[idx] = need / memory.GIB, memory_flags(need, spec)
            if model is None:
                out["time_s"][idx], out["energy_j"][idx] = totals.time_s, totals.energy_j
                continue
            name, base = spec.name, None
            if what_if is not None:  # the same configurations on the base, whose correction they take
                X, base_totals, same, _ = lowered.design(idx, *what_if)
                assert np.array_equal(same, idx)  # the rows' order is their structures', whatever the GPU
                name = learned[idx] = what_if[0].name
                base = np.array([base_totals.time_s, base_totals.energy_j])
            pending.append((X, idx, name, totals, spec.power_limit_w if limit is None else limit, base))
            if sum(len(p[1]) for p in pending) >= CORRECT_CONFIGS:
                correct()
    if pending:
        correct()
    flags = np.full(n, "", dtype=object) if model is None else model.flags(in_domain, learned).astype(object)
    hypothetical = {name for name, spec in specs_of.items() if spec.what_if_of is not None}  # a name, not a row, each
    what_ifs = np.flatnonzero(gpu_names.isin(hypothetical).to_numpy()) if model is not None and hypothetical else []
    if len(what_ifs):  # hardware no one measured: outside the domain, whatever its base's correction says
        why = [what_if_reason(specs_of[g].what_if_of, g != b)
               for g, b in zip(gpu_names.to_numpy()[what_ifs], learned.to_numpy()[what_ifs])]
        flags[what_ifs] = [f"{f}, {WHAT_IF_FLAG}" if f else WHAT_IF_FLAG for f in flags[what_ifs]]
        outside[what_ifs] = [f"{o}; {w}" if o else w for o, w in zip(outside[what_ifs], why)]
        in_domain[what_ifs] = False
    short = np.flatnonzero(memory_flag != "")  # only these rows' flags gain one: not a string sum a row
    flags[short] = [f"{f}, {m}" if f else m for f, m in zip(flags[short], memory_flag[short])]
    # one frame of the new columns joined once: `assign` inserted them one by one, a few ms a call for a job's steps
    return pd.concat([frame, pd.DataFrame(
        {**out, "power_w": out["energy_j"] / out["time_s"], "in_domain": in_domain, "flags": flags,
         "outside_domain": outside, "method": "physics" if model is None else "hybrid"}, index=frame.index)], axis=1)


def _normalised(configs: pd.DataFrame) -> tuple[pd.DataFrame, list[str | None], pd.Series, pd.Series]:
    """(configurations with defaults filled in, engine per row, clock and power limit per row, NaN for the GPU's
    default), every column checked: one InputError naming the column, the row and what is allowed."""
    frame = configs.reset_index(drop=True).copy()
    _check_names(frame)
    stated_launch = frame["launch_mode"].notna().to_numpy() if "launch_mode" in frame else np.zeros(len(frame), bool)
    for column, default in _DEFAULTS.items():
        if column not in frame:
            frame[column] = default
        elif column not in ("batch", "seq", "expert_parallel") and frame[column].isna().any():
            # a missing size is an error, not a default (`_integers`); an empty truth is false (`_truths`); the
            # default filled in as an object, whatever the column's dtype (a column of text takes no 1)
            frame[column] = frame[column].astype(object).where(frame[column].notna(), default)
    frame["dtype"] = _each_distinct(frame["dtype"], dtype_name)  # "bfloat16" is bf16 (`data.kernels.dtype_name`)
    # a vision model has no sequence length: its seq may be empty (it is ignored)
    vision = _each_distinct(frame["model"], _is_vision).astype(bool)
    unsized = vision & frame["seq"].isna().to_numpy()
    if unsized.any():
        frame["seq"] = frame["seq"].where(~unsized, 1)
    frame["batch"], frame["seq"], frame["tp"] = (_integers(frame, c) for c in ("batch", "seq", "tp"))
    frame["expert_parallel"] = _truths(frame, "expert_parallel")
    _check_layouts(frame)
    check_size_columns(frame["batch"].to_numpy(), frame["seq"].to_numpy())
    for column, allowed in (("launch_mode", LAUNCH_MODES), ("attention", ATTENTION_BACKENDS)):
        _allowed(frame[column], column, allowed)
    frame["fusions"] = _fusions(frame["fusions"])
    # a list, not a column: pandas would store "no engine" as NaN
    engines = _each_distinct(frame["engine"], _engine_name).tolist() if "engine" in frame else [None] * len(frame)
    if _NO_NAME in engines:  # a list, a number: not a name, nor empty (which is none)
        i = engines.index(_NO_NAME)
        raise InputError("engine", f"row {i}: a serving engine's name, or empty for none, got "
                                   f"{kind_of(_shown(frame['engine'].iloc[i]))}")
    for name in dict.fromkeys(e for e in engines if e is not None):  # each distinct name checked once
        try:
            check_engine(name)
        except InputError as exc:
            raise _at_row("engine", engines.index(name), exc) from None
    # an engine's pass runs as CUDA graphs where no launch mode was stated (`data.engines.launch_mode_for`)
    engined = np.array([e is not None for e in engines], dtype=bool)
    if (engined & ~stated_launch).any():
        frame.loc[engined & ~stated_launch, "launch_mode"] = "graph"
    settings = [_numbers(frame, c) if c in frame else pd.Series(np.nan, index=frame.index)
                for c in ("sm_clock_mhz", "power_limit_w")]
    if "host_dispatch_s" in frame:
        dispatch = _numbers(frame, "host_dispatch_s")
        bad = host_dispatch_outside(dispatch.to_numpy())
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError("host_dispatch_s", f"row {i}: must be from 0 to {MAX_HOST_DISPATCH_S:g} s a launch "
                                                f"(empty for the default), got {frame['host_dispatch_s'].iloc[i]!r}")
        frame["host_dispatch_s"] = dispatch
    return frame, engines, settings[0], settings[1]


def _fusions(values: pd.Series) -> pd.Series:
    """Each row's fusions as one canonical string ("norm,rope"; "" for none), each distinct value checked once; an
    InputError names the first bad row."""
    if pd.api.types.infer_dtype(values, skipna=False) != "string":  # lists and such: comma-separated strings
        values = values.map(lambda v: v if isinstance(v, str) else ",".join(map(str, v)) if isinstance(
            v, (list, tuple, set, frozenset)) else repr(v))
    def canonical(value: str) -> str:
        try:
            return ",".join(check_fusions(value))
        except InputError as exc:
            raise _at_row("fusions", int(np.flatnonzero((values == value).to_numpy())[0]), exc) from None
    return pd.Series(_each_distinct(values, canonical), index=values.index, dtype=values.dtype)


def _each_distinct(values: pd.Series, fn: Any) -> np.ndarray:
    """`fn` of each row's value, called once a distinct value (in the order they first appear), as an object array:
    a column's few names looked up once, not once a row."""
    try:
        codes, uniques = pd.factorize(values, use_na_sentinel=False)
    except TypeError:  # unhashable cells (lists): each row on its own, for its check to refuse
        codes, uniques = np.arange(len(values)), values.tolist()
    results = np.empty(len(uniques), dtype=object)
    results[:] = [fn(u) for u in uniques]
    return results[codes]


_NO_NAME = object()  # `_engine_name` of a cell that is neither a name nor empty


def _engine_name(cell: object) -> object:
    """A cell of the engine column as the engine's normal name, None where empty, `_NO_NAME` where it is no name."""
    if isinstance(cell, str):
        return normal_engine(cell)
    return None if cell is None or (pd.api.types.is_scalar(cell) and pd.isna(cell)) else _NO_NAME


def _is_vision(model: object) -> bool:
    try:
        return is_vision(resolve_model(str(model))[0])
    except JoulecastError:  # an unknown model: lowering names it, with the names it knows
        return False


def _allowed(values: pd.Series, column: str, allowed: tuple[str, ...]) -> None:
    bad = ~_each_distinct(values, lambda v: str(v) in allowed).astype(bool)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(column, f"row {i}: unknown {values.iloc[i]!r}; allowed: "
                                 f"{', '.join(a or '(empty or none)' for a in allowed)}")


def _numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column of numbers, NaN where the GPU's default applies; text that is no number is an InputError."""
    if frame[column].isna().all():  # every row the default (a job's steps name none): nothing to read
        return pd.Series(np.nan, index=frame.index)
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = (values.isna() & frame[column].notna()).to_numpy() | np.isinf(values.to_numpy(dtype=float))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(column, f"row {i}: must be a number (empty for the GPU's default), "
                                 f"got {_shown(frame[column].iloc[i])!r}")
    return values.astype(float)


def _truths(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column of true or false (bools, 1 or 0, `_TRUTHS`' names as a CSV holds them; empty: false), else one
    InputError naming the column and the first bad row."""
    def truth(v: object) -> bool | None:
        if isinstance(v, str):
            return _TRUTHS.get(v.strip().lower())
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if pd.api.types.is_scalar(v) and pd.isna(v):
            return False
        return bool(v) if isinstance(v, (int, float, np.number)) and v in (0, 1) else None

    if pd.api.types.is_bool_dtype(frame[column]):  # the default's column, or bools given: nothing to read
        return frame[column].astype(bool)
    values = frame[column].map(truth)  # text, numbers or both, as a CSV or a JSON body gives them
    bad = values.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(column, f"row {i}: must be true or false, got {_shown(frame[column].iloc[i])!r}")
    return values.astype(bool)


def _integers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column of whole numbers (numbers or numeric strings; no NaN, fraction or infinity), else one InputError
    naming the column and the first bad row."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < 1) | (values > MAX_SIZE)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(column, f"row {i}: must be a whole number from 1 to {MAX_SIZE:,}, "
                                 f"got {_shown(frame[column].iloc[i])!r}")
    return pd.Series(values.astype(np.int64), index=frame.index)


def _check_layouts(frame: pd.DataFrame) -> None:
    """Every (model, tp) of more than one GPU one its heads divide into and its family has a rule for, and every
    model whose experts are split a mixture of experts, else one InputError naming the column and the first row."""
    split = (frame["tp"].to_numpy() > 1) | frame["expert_parallel"].to_numpy(bool)
    if not split.any():  # one GPU a row: nothing to check (most configurations)
        return
    split = frame.loc[split, ["model", "tp", "expert_parallel"]]
    for i, model, tp, experts in split.drop_duplicates().itertuples():
        try:
            config = resolve_model(model)[0]
            check_tp(config, int(tp))
            check_expert_parallel(bool(experts), config)
        except InputError as exc:
            raise _at_row(exc.field, i, exc) from None


def _check_names(frame: pd.DataFrame) -> None:
    """Each row's model and GPU a name (a model's config.json path too, as text): anything else (a config mapping, a
    list, an empty cell) one error naming the column and its first such row, before any lookup hashes it."""
    for column, what, kinds in (("model", "a catalog model name or a config.json path", (str, os.PathLike)),
                                ("gpu", "a catalog GPU name", str)):
        values = frame[column]
        if pd.api.types.infer_dtype(values, skipna=False) == "string":  # all text: one pass in C, no row loop
            continue
        bad = [i for i, v in enumerate(values) if not isinstance(v, kinds)]
        if not bad:
            continue
        i = bad[0]
        raise InputError(column, f"row {i}: {what}, got {kind_of(_shown(values.iloc[i]))}")


def _at_row(column: str, row: int, exc: InputError) -> InputError:
    """A check's error on one value as the configurations' column and first row that hold it."""
    return InputError(column, f"row {row}: {str(exc).split(': ', 1)[-1]}")


def _shown(value: object) -> object:
    """A cell as its message shows it: a numpy scalar as the Python number it holds (-8, not np.int64(-8))."""
    return value.item() if isinstance(value, np.generic) else value


# Configurations of one GPU setting estimated at once: about 40 kernel rows each, and the physics pass holds some
# eighty float columns per row, so a chunk of 4,096 stays near 100 MB.
CHUNK_CONFIGS = 4096
# Configurations whose residual corrections are taken at once, across GPU settings (their design rows, some sixty
# floats each, and the walk's work arrays: a few tens of MB): one long walk of the trees keeps them in cache.
CORRECT_CONFIGS = 16384
_STRUCTURE = ("model", "phase", "dtype", "attention", "launch_mode", "fusions", "tp", "expert_parallel")


class Lowered:
    """The configurations of `estimate_many` lowered by structure: a catalog model's through its template
    (`lower_many.template`), any other (a config path, a structure the template does not reproduce) one by one."""

    def __init__(self, frame: pd.DataFrame, engines: list[str | None]):
        self.batch, self.seq = frame["batch"].to_numpy(np.int64), frame["seq"].to_numpy(np.int64)
        self.engines = np.array([e or "" for e in engines], dtype=object)
        self.structure, self.keys = _structures([frame[c].to_numpy(dtype=object) for c in _STRUCTURE] + [self.engines])
        self.templates = [self._template(k) for k in self.keys]
        self.frame = frame
        # read once, not once a GPU setting (a pandas string column converts on every read)
        self.launch_modes, self.dtypes = (frame[c].to_numpy(dtype=object) for c in ("launch_mode", "dtype"))
        self.dispatch = frame["host_dispatch_s"].to_numpy(float) if "host_dispatch_s" in frame else None
        self._workloads: dict[int, Workload] = {}

    @staticmethod
    def _template(key: tuple) -> "lower_many.Template | None":
        model, phase, dtype, attention, launch_mode, fusions, tp, experts, engine = key
        if model.endswith(".json"):
            return None  # a config file: lowered one by one
        return lower_many.template(model, phase, dtype, attention, engine or None, _names(fusions), int(tp),
                                   experts == "True")

    def design(self, idx: np.ndarray, spec: GpuSpec, clock: float | None, limit: float | None
               ) -> tuple[Design, PhysicsTotals, np.ndarray, np.ndarray]:
        """Physics and residual features of configurations `idx` on one GPU setting, and the memory each needs
        (bytes), in the order of the returned indices (grouped by structure)."""
        parts, order, phases, seqs, params, offset = [], [], [], [], [], 0
        for s in np.unique(self.structure[idx]):
            rows = idx[self.structure[idx] == s]
            model, phase, dtype, attention, launch_mode, _, _, _, engine = self.keys[int(s)]
            t = self.templates[int(s)]
            # a prefill of one token would meet the engine's decode-attention swap (seq_q == 1): lowered alone
            single = (self.seq[rows] == 1) & (phase != "decode") & bool(engine) if t is not None else None
            if t is not None and not single.any():
                if not t.vision:
                    warn_positions(model, int(self.seq[rows].max()))
                part = t.columns(self.batch[rows], self.seq[rows])
                phases.append(np.full(len(rows), t.phase))
                seqs.append(np.ones(len(rows)) if t.vision else self.seq[rows].astype(float))
                params.append(np.full(len(rows), t.params, dtype=float))
            else:
                ws = [self._workload(int(i)) for i in rows]
                part = stack({j: w.columns for j, w in enumerate(ws)})
                phases.append(np.array([w.phase or "kernel" for w in ws]))
                seqs.append(np.array([w.seq or 1 for w in ws], float))
                params.append(np.array([w.params or 0 for w in ws], float))
            part["workload_id"] = part["workload_id"] + offset
            parts.append(part)
            order.append(rows)
            offset += len(rows)
        kernels = {name: Labels.concatenate([Labels.of(p[name]) for p in parts]) if name in STRING_COLUMNS
                   else np.concatenate([p[name] for p in parts]) for name in parts[0]}
        idx = np.concatenate(order)
        batch = self.batch[idx].astype(float)
        dispatch = None if self.dispatch is None else self.dispatch[idx]
        features, totals = physics_columns(kernels, spec, clock, limit, self.launch_modes[idx], self.engines[idx],
                                           batch, dispatch)
        phase, dtype = np.concatenate(phases), self.dtypes[idx]
        X = design_from_physics(features, totals, spec, clock, limit, dtype, phase, batch, np.concatenate(seqs))
        need = memory.need_bytes(features, len(idx), np.concatenate(params), phase, dtype)
        return X, totals, idx, need["total_bytes"]

    def _workload(self, i: int) -> Workload:
        if i not in self._workloads:
            r = self.frame.iloc[i]
            model = r["model"] if int(r["tp"]) == 1 else shard_config(resolve_model(r["model"])[0], tp=int(r["tp"]),
                                                                      expert_parallel=bool(r["expert_parallel"]))
            self._workloads[i] = workload(model, phase=r["phase"], batch=int(self.batch[i]),
                                          seq=int(self.seq[i]), dtype=r["dtype"], attention=r["attention"],
                                          launch_mode=r["launch_mode"], engine=self.engines[i] or None,
                                          fusions=_names(r["fusions"]))
        return self._workloads[i]


def _structures(columns: list[np.ndarray]) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """(each row's structure code, each structure's values as text), codes in the order structures first appear:
    the columns' codes combined one column at a time and renumbered, so they stay below the rows' count (a pandas
    MultiIndex of the text columns did the same at a dozen times the cost, which a job of a few steps paid)."""
    codes = np.zeros(len(columns[0]), np.int64)
    for values in columns:
        column_codes, uniques = pd.factorize(values)
        codes = pd.factorize(codes * len(uniques) + column_codes)[0]
    first = np.unique(codes, return_index=True)[1]  # a code's first row; codes count up as structures appear
    return codes, [tuple(str(column[i]) for column in columns) for i in first.tolist()]


def _names(fusions: str) -> tuple[str, ...]:
    """A canonical fusions string ("norm,rope") as the lowering's tuple."""
    return tuple(fusions.split(",")) if fusions else ()
