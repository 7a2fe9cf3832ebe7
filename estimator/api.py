"""`estimate`: a workload on a GPU -> energy (J), time (s), average power (W), with an interval and a per-class
breakdown; `estimate_many`: the same for a DataFrame of configurations, vectorised.

The estimate is physics x exp(learned residual) (the hybrid); `estimator="physics"` gives the physics alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError, JoulecastError
from joulecast.data.gpus import GpuSpec
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.kernels import STRING_COLUMNS, stack
from joulecast.data.labels import Labels, plain
from joulecast.data.workload import LAUNCH_MODES, MAX_SIZE, Workload, check_size_columns
from joulecast.estimator.loading import load_estimator
from joulecast.features import lower_many, memory
from joulecast.features.arch import SERVING_ENGINES
from joulecast.features.design import Design, design_block, design_from_physics, physics_columns, setting_groups
from joulecast.features.lowering import is_vision, resolve_model, warn_positions
from joulecast.features.physics import PhysicsTotals, check_setting


@dataclass(frozen=True, slots=True)
class Estimate:
    """One workload's estimate on one GPU (SI units in the names)."""

    workload: str
    gpu: str
    sm_clock_mhz: float
    power_limit_w: float
    energy_j: float
    time_s: float
    power_w: float
    gpu_busy_s: float
    launches: int
    method: str = "physics"                      # physics, or hybrid (physics x learned residual)
    physics_energy_j: float | None = None
    physics_time_s: float | None = None
    energy_interval_j: tuple[float, float] | None = None
    time_interval_s: tuple[float, float] | None = None
    power_interval_w: tuple[float, float] | None = None   # the energy interval at the estimated time
    interval_level: float | None = None
    in_domain: bool | None = None                # False: outside the training data (wider interval)
    flags: tuple[str, ...] = ()
    outside_domain: tuple[str, ...] = ()         # out-of-domain: which features lie outside the training range
    memory_gb: float | None = None               # GPU memory the workload needs (GiB; `joulecast.features.memory`)
    memory_parts_gb: Mapping[str, float] = field(default_factory=dict)  # weights, optimizer, activations, KV cache
    breakdown: Mapping[str, np.ndarray] = field(default=None, compare=False, repr=False)  # by_kernel_class's columns
    kernel_columns: Mapping[str, np.ndarray] = field(default=None, compare=False, repr=False)

    @property
    def by_kernel_class(self) -> pd.DataFrame:
        """Per kernel class (and the host-bound idle time, where there is some): launches, time_s, energy_j and
        energy_share, largest energy first. Built on request, as `features` is."""
        return pd.DataFrame(self.breakdown)

    @property
    def features(self) -> pd.DataFrame:
        """The per-kernel physics table (tiles, waves, bytes, utilisations, time, power, energy per launch).
        Built on request: most callers never look, and a table costs a third of a millisecond."""
        return pd.DataFrame(plain(self.kernel_columns))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the feature table is left out; the breakdown is kept)."""
        names = ("workload", "gpu", "sm_clock_mhz", "power_limit_w", "energy_j", "time_s", "power_w", "gpu_busy_s",
                 "launches", "method", "physics_energy_j", "physics_time_s", "energy_interval_j", "time_interval_s",
                 "power_interval_w", "interval_level", "in_domain", "flags", "outside_domain", "memory_gb",
                 "memory_parts_gb")
        out = {name: getattr(self, name) for name in names}
        out["by_kernel_class"] = self.by_kernel_class.to_dict(orient="records")
        return out


def _breakdown(features: Mapping[str, np.ndarray], time_s: float, busy_s: float, idle_gap_j: float, energy_j: float,
               time_scale: float, energy_scale: float) -> dict[str, np.ndarray]:
    """Per kernel class, from the physics; the hybrid's workload-level corrections scale every class alike."""
    launches = np.asarray(features["launches"])
    kinds = Labels.of(features["kind"])
    index, present = kinds.codes, np.bincount(kinds.codes, minlength=len(kinds.names)) > 0
    classes = kinds.names[present].astype(str)
    launches_by = np.bincount(index, launches, minlength=len(kinds.names))[present].astype(np.int64)
    time_by = np.bincount(index, launches * np.asarray(features["time_s"]), minlength=len(kinds.names))[present]
    energy_by = np.bincount(index, launches * np.asarray(features["energy_j"]), minlength=len(kinds.names))[present]
    if time_s - busy_s > 0:  # host-bound: the GPU waits for the next launch, or for a serving engine's host work
        classes = np.append(classes, "idle (host-bound)")
        launches_by, time_by = np.append(launches_by, 0), np.append(time_by, time_s - busy_s)
        energy_by = np.append(energy_by, idle_gap_j)
    time_by, energy_by = time_by * time_scale, energy_by * energy_scale
    order = np.argsort(-energy_by, kind="stable")
    return {"kernel_class": classes[order], "launches": launches_by[order], "time_s": time_by[order],
            "energy_j": energy_by[order], "energy_share": energy_by[order] / energy_j}


def _corrections(estimator: Any, X: pd.DataFrame, gpus: list[str]) -> dict[str, np.ndarray] | None:
    return None if estimator is None else estimator.predict(X, gpus)


def _cap(energy: np.ndarray, time_s: np.ndarray, limit_w: np.ndarray | float) -> np.ndarray:
    """Average board power never exceeds the power limit: a learned correction may not claim otherwise."""
    return np.minimum(energy, np.asarray(limit_w, dtype=float) * time_s)


def combine(phys_t: np.ndarray, phys_e: np.ndarray, corr: Mapping[str, np.ndarray],
            limit_w: np.ndarray | float) -> dict[str, np.ndarray]:
    """Physics x exp(correction) with its interval; energy capped at the power limit, the interval kept around it."""
    out = {name: base * np.exp(corr[key]) for name, base, key in (
        ("time_s", phys_t, "time"), ("time_lo_s", phys_t, "time_lo"), ("time_hi_s", phys_t, "time_hi"),
        ("energy_j", phys_e, "energy"), ("energy_lo_j", phys_e, "energy_lo"), ("energy_hi_j", phys_e, "energy_hi"))}
    out["energy_j"] = _cap(out["energy_j"], out["time_s"], limit_w)
    out["energy_hi_j"] = np.maximum(_cap(out["energy_hi_j"], out["time_hi_s"], limit_w), out["energy_j"])
    out["energy_lo_j"] = np.minimum(out["energy_lo_j"], out["energy_j"])
    return out


def scored_frame(rows: pd.DataFrame, corr: Mapping[str, np.ndarray] | None) -> pd.DataFrame:
    """Measured rows (with physics_time_s, physics_energy_j, power_limit_w) plus the estimate's pred_* columns and
    interval (lo_/hi_energy_j, lo_/hi_time_s) for scoring; `corr=None` scores physics alone (no interval)."""
    t, e = rows["physics_time_s"].to_numpy(float), rows["physics_energy_j"].to_numpy(float)
    if corr is None:
        return rows.assign(pred_time_s=t, pred_energy_j=e, pred_power_w=e / t)
    limits = rows["power_limit_w"].astype(float).fillna(rows["gpu"].map(lambda g: lookup_gpu(g).power_limit_w))
    h = combine(t, e, corr, limits.to_numpy(float))
    out = rows.assign(pred_time_s=h["time_s"], pred_energy_j=h["energy_j"], pred_power_w=h["energy_j"] / h["time_s"],
                      lo_energy_j=h["energy_lo_j"], hi_energy_j=h["energy_hi_j"], lo_time_s=h["time_lo_s"],
                      hi_time_s=h["time_hi_s"])
    if "in_domain" in corr:
        out["in_domain"] = corr["in_domain"]
    return out


def estimate(workload: Workload, gpu: str | GpuSpec, sm_clock_mhz: float | None = None,
             power_limit_w: float | None = None, estimator: str | None = None,
             tracking_uri: str | None = None) -> Estimate:
    """Estimate a workload's energy, time and average power on a GPU.

    Args:
        workload: from `joulecast.workload(...)` or `joulecast.workload_from_kernels(path)`.
        gpu: a catalog name or a `GpuSpec`.
        sm_clock_mhz: a locked SM clock (default: the GPU's maximum clock, lowered where the power cap binds).
        power_limit_w: a power cap (default: the GPU's default limit).
        estimator: None for the shipped default model, "physics" for physics alone, a folder or an MLflow URI.
        tracking_uri: the MLflow tracking server of a models:/ or runs:/ estimator.

    Raises:
        InputError: unknown GPU, or a clock or power limit outside what the GPU allows.
    """
    if not isinstance(workload, Workload):
        hint = f" (build one first: joulecast.workload({workload!r}))" if isinstance(workload, str) else ""
        raise InputError("workload", f"expected a Workload from joulecast.workload(...) or workload_from_kernels(...), "
                                     f"got {type(workload).__name__}{hint}")
    spec = lookup_gpu(gpu)
    check_setting(spec, sm_clock_mhz, power_limit_w)  # before the model loads: a bad clock costs no wait
    model = load_estimator(estimator, tracking_uri)
    X, totals, features = design_block([workload], spec, sm_clock_mhz, power_limit_w)
    phys_t, phys_e = float(totals.time_s[0]), float(totals.energy_j[0])
    corr = _corrections(model, X, [spec.name])
    # the physics pass's columns: its labels already encoded
    need = memory.need_bytes(features, 1, np.array([workload.params or 0]), np.array([workload.phase or ""]),
                             np.array([workload.dtype or "bf16"]))
    memory_flag = memory_flags(need["total_bytes"], spec)[0]
    kw: dict[str, Any] = {"flags": (memory_flag,) if memory_flag else ()}
    t, e = phys_t, phys_e
    if corr is not None:
        limit = spec.power_limit_w if power_limit_w is None else float(power_limit_w)
        h = {k: float(v[0]) for k, v in combine(totals.time_s, totals.energy_j, corr, limit).items()}
        t, e = h["time_s"], h["energy_j"]
        e_band = (h["energy_lo_j"], h["energy_hi_j"])
        inside = bool(corr["in_domain"][0])
        kw = dict(method="hybrid", physics_energy_j=phys_e, physics_time_s=phys_t, energy_interval_j=e_band,
                  time_interval_s=(h["time_lo_s"], h["time_hi_s"]),
                  power_interval_w=(e_band[0] / t, e_band[1] / t), interval_level=model.level, in_domain=inside,
                  flags=tuple(str(f) for f in model.flags(corr["in_domain"], [spec.name]) if f) + kw["flags"],
                  outside_domain=() if inside else model.outside_domain(X)[0])
    return Estimate(
        workload=workload.name, gpu=spec.name,
        sm_clock_mhz=float(spec.boost_clock_mhz if sm_clock_mhz is None else sm_clock_mhz),
        power_limit_w=float(spec.power_limit_w if power_limit_w is None else power_limit_w),
        energy_j=e, time_s=t, power_w=e / t, gpu_busy_s=float(totals.gpu_busy_s[0]) * t / phys_t,
        launches=int(np.sum(features["launches"])),
        breakdown=_breakdown(features, phys_t, float(totals.gpu_busy_s[0]), float(totals.idle_gap_energy_j[0]),
                                   e, t / phys_t, e / phys_e),
        kernel_columns=features, memory_gb=float(need["total_bytes"][0] / memory.GIB),
        memory_parts_gb={k.removesuffix("_bytes"): float(v[0] / memory.GIB) for k, v in need.items()
                         if k != "total_bytes"}, **kw)


def memory_flags(total_bytes: np.ndarray, spec: GpuSpec) -> np.ndarray:
    """Per workload, "exceeds-memory" where it needs more than the GPU holds, else ""."""
    return np.where(np.asarray(total_bytes) > spec.memory_gb * memory.GIB, "exceeds-memory", "")


CONFIG_COLUMNS = ("model", "gpu", "phase", "batch", "seq", "dtype", "attention", "launch_mode", "engine",
                  "sm_clock_mhz", "power_limit_w")
_DEFAULTS: Mapping[str, Any] = {"phase": "prefill", "batch": 1, "seq": 512, "dtype": "bf16", "attention": "flash",
                                "launch_mode": "eager"}


def estimate_many(configs: pd.DataFrame, estimator: Any = None) -> pd.DataFrame:
    """Estimates for a DataFrame of configurations, one row each (vectorised per GPU setting).

    Columns: `model` and `gpu` (required), `phase`, `batch`, `seq`, `dtype`, `attention`, `launch_mode`, `engine`
    (a serving engine, empty for none), `sm_clock_mhz`, `power_limit_w` (optional). Returns energy_j, time_s,
    power_w, physics_*, the interval bounds, in_domain, flags (as `Estimate.flags`, joined by ", ": spec-only or
    out-of-domain, exceeds-memory, or empty), outside_domain (`Estimate.outside_domain` joined by "; ") and
    memory_gb (GiB the workload needs on the GPU).
    `estimator`: None (shipped default), "physics", a folder, an MLflow URI, or a loaded `Residual`.

    A catalog model's configurations are lowered together (`joulecast.features.lower_many`), and each GPU setting's
    configurations go through physics and the residual in chunks of CHUNK_CONFIGS, so memory stays bounded.
    """
    for column in ("model", "gpu"):
        if column not in configs:
            raise InputError(column, f"estimate_many needs a '{column}' column; columns: {', '.join(CONFIG_COLUMNS)}")
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
    for gpu_name, clock, limit, rows in setting_groups(gpu_names, clocks, limits):
        spec = lookup_gpu(gpu_name)
        for start in range(0, len(rows), CHUNK_CONFIGS):
            idx = rows[start:start + CHUNK_CONFIGS]
            X, totals, idx, need = lowered.design(idx, spec, clock, limit)
            out["physics_time_s"][idx], out["physics_energy_j"][idx] = totals.time_s, totals.energy_j
            out["memory_gb"][idx], memory_flag[idx] = need / memory.GIB, memory_flags(need, spec)
            corr = _corrections(model, X, [spec.name] * len(idx))
            if corr is None:
                out["time_s"][idx], out["energy_j"][idx] = totals.time_s, totals.energy_j
                continue
            hybrid = combine(totals.time_s, totals.energy_j, corr, spec.power_limit_w if limit is None else limit)
            for name, values in hybrid.items():
                out[name][idx] = values
            in_domain[idx] = corr["in_domain"]
            away = ~corr["in_domain"]
            if away.any():
                outside[idx[away]] = ["; ".join(reasons) for reasons in model.outside_domain(X.take(np.flatnonzero(away)))]
    flags = np.full(n, "", dtype=object) if model is None else model.flags(in_domain, gpu_names).astype(object)
    flags = np.where(memory_flag == "", flags, np.where(flags == "", memory_flag, flags + ", " + memory_flag))
    return frame.assign(**out, power_w=out["energy_j"] / out["time_s"], in_domain=in_domain, flags=flags,
                        outside_domain=outside, method="physics" if model is None else "hybrid")


def _normalised(configs: pd.DataFrame) -> tuple[pd.DataFrame, list[str | None], pd.Series, pd.Series]:
    """(configurations with defaults filled in, engine per row, clock and power limit per row, NaN for the GPU's
    default), every column checked: one InputError naming the column, the row and what is allowed."""
    frame = configs.reset_index(drop=True).copy()
    for column, default in _DEFAULTS.items():
        if column not in frame:
            frame[column] = default
        elif column not in ("batch", "seq"):  # a missing size is an error, not a default (`_integers`)
            frame[column] = frame[column].fillna(default)
    # a vision model has no sequence length: its seq may be empty (it is ignored)
    vision = frame["model"].map({m: _is_vision(m) for m in frame["model"].unique()}).to_numpy(bool)
    frame["seq"] = frame["seq"].where(~(vision & frame["seq"].isna()), 1)
    frame["batch"], frame["seq"] = _integers(frame, "batch"), _integers(frame, "seq")
    check_size_columns(frame["batch"].to_numpy(), frame["seq"].to_numpy())
    for column, allowed in (("launch_mode", LAUNCH_MODES), ("attention", ("flash", "eager"))):
        _allowed(frame[column], column, allowed)
    # a list, not a column: pandas would store "no engine" as NaN
    engines = [e if isinstance(e, str) and e else None for e in frame.get("engine", [None] * len(frame))]
    _allowed(pd.Series([e or "" for e in engines]), "engine", ("", *SERVING_ENGINES))
    settings = [_numbers(frame, c) if c in frame else pd.Series(np.nan, index=frame.index)
                for c in ("sm_clock_mhz", "power_limit_w")]
    return frame, engines, settings[0], settings[1]


def _is_vision(model: object) -> bool:
    try:
        return is_vision(resolve_model(str(model))[0])
    except JoulecastError:  # an unknown model: lowering names it, with the names it knows
        return False


def _allowed(values: pd.Series, column: str, allowed: tuple[str, ...]) -> None:
    bad = ~values.astype(str).isin(allowed).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(column, f"row {i}: unknown {values.iloc[i]!r}; allowed: "
                                 f"{', '.join(a or '(empty: none)' for a in allowed)}")


def _numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column of numbers, NaN where the GPU's default applies; text that is no number is an InputError."""
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = (values.isna() & frame[column].notna()).to_numpy() | np.isinf(values.to_numpy(dtype=float))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(column, f"row {i}: must be a number (empty for the GPU's default), got {frame[column].iloc[i]!r}")
    return values.astype(float)


def _integers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column of whole numbers (numbers or numeric strings; no NaN, fraction or infinity), else one InputError
    naming the column and the first bad row."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < 1) | (values > MAX_SIZE)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(column, f"row {i}: must be a whole number from 1 to {MAX_SIZE:,}, got {frame[column].iloc[i]!r}")
    return pd.Series(values.astype(np.int64), index=frame.index)


# Configurations of one GPU setting estimated at once: about 40 kernel rows each, and the physics pass holds some
# eighty float columns per row, so a chunk of 4,096 stays near 100 MB.
CHUNK_CONFIGS = 4096
_STRUCTURE = ("model", "phase", "dtype", "attention", "launch_mode")


class Lowered:
    """The configurations of `estimate_many` lowered by structure: a catalog model's through its template
    (`lower_many.template`), any other (a config path, a structure the template does not reproduce) one by one."""

    def __init__(self, frame: pd.DataFrame, engines: list[str | None]):
        self.batch, self.seq = frame["batch"].to_numpy(np.int64), frame["seq"].to_numpy(np.int64)
        self.engines = np.array([e or "" for e in engines], dtype=object)
        keys = frame[list(_STRUCTURE)].astype(str).assign(engine=self.engines)
        self.structure, distinct = pd.MultiIndex.from_frame(keys).factorize()
        self.keys = list(distinct)
        self.templates = [self._template(k) for k in self.keys]
        self.frame = frame
        self._workloads: dict[int, Workload] = {}

    @staticmethod
    def _template(key: tuple) -> "lower_many.Template | None":
        model, phase, dtype, attention, launch_mode, engine = key
        if model.endswith(".json") or launch_mode not in LAUNCH_MODES:
            return None  # a config file, or a launch mode `workload` refuses with its message
        return lower_many.template(model, phase, dtype, attention, engine or None)

    def design(self, idx: np.ndarray, spec: GpuSpec, clock: float | None, limit: float | None
               ) -> tuple[Design, PhysicsTotals, np.ndarray, np.ndarray]:
        """Physics and residual features of configurations `idx` on one GPU setting, and the memory each needs
        (bytes), in the order of the returned indices (grouped by structure)."""
        parts, order, phases, seqs, params, offset = [], [], [], [], [], 0
        for s in np.unique(self.structure[idx]):
            rows = idx[self.structure[idx] == s]
            model, phase, dtype, attention, launch_mode, engine = self.keys[int(s)]
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
        f = self.frame
        batch = self.batch[idx].astype(float)
        features, totals = physics_columns(kernels, spec, clock, limit, f["launch_mode"].to_numpy()[idx],
                                           self.engines[idx], batch)
        phase, dtype = np.concatenate(phases), f["dtype"].to_numpy()[idx]
        X = design_from_physics(features, totals, spec, clock, limit, dtype, phase, batch, np.concatenate(seqs))
        need = memory.need_bytes(features, len(idx), np.concatenate(params), phase, dtype)
        return X, totals, idx, need["total_bytes"]

    def _workload(self, i: int) -> Workload:
        if i not in self._workloads:
            from joulecast.features.lowering import workload

            r = self.frame.iloc[i]
            self._workloads[i] = workload(r["model"], phase=r["phase"], batch=int(self.batch[i]),
                                          seq=int(self.seq[i]), dtype=r["dtype"], attention=r["attention"],
                                          launch_mode=r["launch_mode"], engine=self.engines[i] or None)
        return self._workloads[i]
