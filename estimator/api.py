"""`estimate`: a workload on a GPU -> energy (J), time (s), average power (W), with an interval and a per-class
breakdown; `estimate_many`: the same for a DataFrame of configurations, vectorised.

The estimate is physics x exp(learned residual) (the hybrid); `estimator="physics"` gives the physics alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.data.gpus import GpuSpec
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.labels import Labels, plain
from joulecast.data.workload import Workload
from joulecast.estimator.loading import load_estimator
from joulecast.features import memory
from joulecast.features.design import design_block, host_stated
from joulecast.features.physics import check_setting, what_if_base


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
    host_dispatch_s: float = 0.0                 # the host's time a launch taken (0: CUDA graphs)
    host_dispatch_stated: bool = True            # False: the default taken, the interval spanning the measured hosts
    method: str = "physics"                      # physics, or hybrid (physics x learned residual)
    physics_energy_j: float | None = None
    physics_time_s: float | None = None
    energy_interval_j: tuple[float, float] | None = None
    time_interval_s: tuple[float, float] | None = None
    power_interval_w: tuple[float, float] | None = None   # the energy interval at the estimated time, under the limit
    interval_level: float | None = None
    in_domain: bool | None = None                # False: outside the training data (wider interval)
    flags: tuple[str, ...] = ()
    outside_domain: tuple[str, ...] = ()         # out-of-domain: which features lie outside the training range
    memory_gb: float | None = None               # GPU memory the workload needs (GiB; `joulecast.features.memory`)
    memory_parts_gb: Mapping[str, float] = field(default_factory=dict)  # weights, optimizer, activations, KV cache
    fits_batch: int | None = None                # exceeds-memory: the largest batch that fits at this length
    # by_kernel_class's columns, built on request (most callers never look: 24 us of a warm estimate)
    breakdown_of: Callable[[], Mapping[str, np.ndarray]] = field(default=None, compare=False, repr=False)
    kernel_columns: Mapping[str, np.ndarray] = field(default=None, compare=False, repr=False)

    @property
    def breakdown(self) -> Mapping[str, np.ndarray]:
        """Per kernel class (and the host-bound idle time): kernel_class, launches, time_s, energy_j, energy_share."""
        return self.breakdown_of()

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

    @property
    def power_limited(self) -> dict[str, float]:
        """Where the power limit binds (physics' kernel timeline): the share of GPU busy time spent in kernels the
        limit throttled, `throttled_busy_share`, and the SM clock weighted by busy time, `busy_clock_mhz` (the set
        clock where nothing was throttled). Built on request; empty where the estimate keeps no kernel table."""
        c = self.kernel_columns
        if c is None:
            return {}
        busy = np.asarray(c["time_s"], float) * np.asarray(c["launches"], float)
        clock = np.asarray(c["sm_clock_mhz"], float)
        total = busy.sum()
        if total <= 0:
            return {"throttled_busy_share": 0.0, "busy_clock_mhz": float(self.sm_clock_mhz)}
        throttled = clock < self.sm_clock_mhz * (1 - 1e-9)
        return {"throttled_busy_share": float(busy[throttled].sum() / total),
                "busy_clock_mhz": float((busy * clock).sum() / total)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the feature table is left out; the breakdown and the power limit's bite are kept)."""
        names = ("workload", "gpu", "sm_clock_mhz", "power_limit_w", "energy_j", "time_s", "power_w", "gpu_busy_s",
                 "launches", "host_dispatch_s", "host_dispatch_stated", "method", "physics_energy_j", "physics_time_s",
                 "energy_interval_j", "time_interval_s", "power_interval_w", "interval_level", "in_domain", "flags",
                 "outside_domain", "memory_gb", "memory_parts_gb", "fits_batch")
        out = {name: getattr(self, name) for name in names}
        out.update(self.power_limited)
        out["by_kernel_class"] = self.by_kernel_class.to_dict(orient="records")
        return out


# How `combine` adds a range the estimate does not know (an unstated host's dispatch, an engine's measured host work)
# to the interval's own reach: in quadrature (True), as independent errors add, or each range's ends added to the
# bounds' (False, a study's setting: the rule until 2026-12-06's seventh session, which counts the host twice where a
# margin was measured on rows of unstated hosts, as EnergAIzer's are). Whole jobs' 90 % energy intervals
# (experiments/job_coverage.py), added -> in quadrature: generations 97.3 -> 93.8 % (A100-PCIe 94.7 -> 92.1,
# A100-SXM4 97.4 -> 89.5, V100 100 % the same), serving 89.1 -> 87.5 % (H100 93.4 -> 91.8, B200 85.5 -> 84.8,
# A100-SXM4 82.8 -> 75.9 %: v2's Llama-3-70B on 8 A100s, read 32 % high, 37.5 -> 12.5 %), training runs 96.7 % the
# same: 3 of its 8 GPU cells within 86-94 %, not 1. Each GPU held out as an estimate gives it (experiments/
# gpu_transfer.py --margins, `as estimated`): A10 96.8 -> 88.4 %, A100-PCIe 98.5 -> 97.3 %, H200 92.9 % the same.
# ML.ENERGY v1's one-request chat (experiments/chat_generations.py, read 12-28 % high on the A100-SXM4 and V100):
# A100-SXM4 13B / 7B 100 / 100 -> 75.0 / 95.0 %, V100 100 / 95.0 -> 83.3 / 80.0 %, A40 the same. The conformal margins
# are since calibrated on the interval so joined (`training.residual.CONFORMAL_ON_JOINED`), by the same rule
# (`past_spread`).
SPREADS_IN_QUADRATURE = True


def join_spreads(reach: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A bound's whole reach from the point (log): its own `reach` joined with each range's end on its side (`ends`,
    one per range along axis 0), in quadrature, or added under the study setting (`SPREADS_IN_QUADRATURE`)."""
    return (np.sqrt(reach * reach + (ends * ends).sum(axis=0)) if SPREADS_IN_QUADRATURE
            else reach + np.abs(ends).sum(axis=0))


def range_reach(ends: np.ndarray, point: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How far a measured range moves a figure from its point, in log: (below, at most 0; above, at least 0) from its
    ends (`ends`: (..., n, 2), over `point`: (..., n)); 0 and 0 where the ends are NaN (a row whose machine stated
    what the range is of). `combine` joins it to an interval, `training.dataset.TrainingTable.host_reach` reads it."""
    ratio = ends / point[..., None]
    return np.log(np.fmin(ratio.min(axis=-1), 1.0)), np.log(np.fmax(ratio.max(axis=-1), 1.0))


def past_spread(miss: np.ndarray, spread: np.ndarray | float) -> np.ndarray:
    """`join_spreads` undone for one range: how far a miss of the point (log, positive beyond it on the bound's side)
    lies past `spread`, the bound's own reach that, so joined with it, reaches the miss (0 within the spread); a miss
    on the other side as it was. The conformal margins are scored by it (`training.residual._misses`)."""
    beyond = (np.sqrt(np.maximum(miss * miss - np.square(spread), 0.0)) if SPREADS_IN_QUADRATURE
              else np.maximum(miss - np.abs(spread), 0.0))
    return np.where(miss > 0, beyond, miss)


IDLE_ROW_SHARE = 1e-6  # the share of a pass its host-bound wait must pass to make a row of the breakdown


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
    # host-bound: the GPU waits for the next launch, or for a serving engine's host work; not where the host's and
    # the GPU's overlap (`arch.OVERLAP_NORM`) leaves the pass a part in a million longer than its kernels (a
    # GPU-bound training step: 3e-11 s of 0.12 s once made an idle row)
    if time_s - busy_s > IDLE_ROW_SHARE * time_s:
        classes = np.append(classes, "idle (host-bound)")
        launches_by, time_by = np.append(launches_by, 0), np.append(time_by, time_s - busy_s)
        energy_by = np.append(energy_by, idle_gap_j)
    time_by, energy_by = time_by * time_scale, energy_by * energy_scale
    order = np.argsort(-energy_by, kind="stable")
    return {"kernel_class": classes[order], "launches": launches_by[order], "time_s": time_by[order],
            "energy_j": energy_by[order], "energy_share": energy_by[order] / energy_j}


def _corrections(estimator: Any, X: pd.DataFrame, gpus: list[str]) -> dict[str, np.ndarray] | None:
    return None if estimator is None else estimator.predict(X, gpus)


def _explained(estimator: Any, X: pd.DataFrame, gpus: list[str]
               ) -> tuple[dict[str, np.ndarray] | None, list[tuple[str, ...]] | None]:
    """(the corrections, each row's reasons out of domain or None): the reasons read from the checks the prediction
    made where the estimator gives them (`Residual.predict_explained`), else left for `outside_domain`."""
    explain = getattr(estimator, "predict_explained", None)
    return explain(X, gpus) if explain is not None else (_corrections(estimator, X, gpus), None)


# A hypothetical GPU's estimate (`joulecast.data.gpus.hypothetical`): physics on its specs, corrected as its base
# catalog GPU's same configuration is where the base runs that setting (`features.physics.what_if_base`), so that a
# what-if changed by nothing reads as its base does, its interval the base's widened for its change
# (`what_if_spread`); else physics' point, as a GPU never trained on reads.
WHAT_IF_FLAG = "what-if"
# How far physics' own change may be off, per unit of it (log): a what-if that physics moves by d from its base
# reaches WHAT_IF_REACH x |d| each way, joined in quadrature with the base's interval. The 90 % quantile of
# |error| / |change| over the workloads two real GPUs ran alike (EnergAIzer's A10 and A100-PCIe, 82 workloads at 900
# MHz: energy 0.50, time 0.73; `experiments/what_if_reach.py`)
WHAT_IF_REACH = {"energy": 0.50, "time": 0.73}


def what_if_spread(physics: np.ndarray, base: np.ndarray, quantity: str) -> np.ndarray:
    """A what-if's reach for its change as a range's ends (n x 2, `combine`'s spreads): physics' point moved
    WHAT_IF_REACH x |log(physics / its base's physics)| each way; NaN where `base` is (no what-if)."""
    reach = WHAT_IF_REACH[quantity] * np.abs(np.log(physics / base))
    return physics[:, None] * np.exp(np.stack([-reach, reach], axis=1))


def what_if_reason(base: str, corrected: bool) -> str:
    """Why a hypothetical GPU's estimate is outside the domain: no such hardware was measured."""
    if corrected:
        return (f"a hypothetical GPU: physics on its specs, corrected as {base} is at the same setting; the interval "
                f"{base}'s, widened by {WHAT_IF_REACH['energy']:g}x physics' change in energy")
    return f"a hypothetical GPU at a setting {base} cannot run: physics' point, as a GPU never trained on reads"


def _cap(energy: np.ndarray, time_s: np.ndarray, limit_w: np.ndarray | float) -> np.ndarray:
    """Average board power never exceeds the power limit: a learned correction may not claim otherwise."""
    return np.minimum(energy, np.asarray(limit_w, dtype=float) * time_s)


def combine(phys_t: np.ndarray, phys_e: np.ndarray, corr: Mapping[str, np.ndarray],
            limit_w: np.ndarray | float, spreads: Sequence[tuple[np.ndarray, np.ndarray]] = ()
            ) -> dict[str, np.ndarray]:
    """Physics x exp(correction) with its interval; energy capped at the power limit, the interval kept around it.
    `spreads`: physics' (time, energy) at the ends of a measured range of what the estimate does not know (n x 2
    each): the hosts' dispatch range, NaN for a row whose machine stated its own (`PhysicsTotals.host_range_time_s`
    and `_energy_j`), and a serving engine's host work over the rows it was measured from (`engine_range_*`). Such a
    range is a spread, not a bias: the point stays where it was. Each is an unknown apart from the model's own error,
    so each bound lies as far from the point as the bound's own reach and each range's, in log, add in quadrature
    (sqrt(reach^2 + spread^2 + ...), the rule for independent errors; `SPREADS_IN_QUADRATURE`)."""
    out = {name: base * np.exp(corr[key]) for name, base, key in (
        ("time_s", phys_t, "time"), ("time_lo_s", phys_t, "time_lo"), ("time_hi_s", phys_t, "time_hi"),
        ("energy_j", phys_e, "energy"), ("energy_lo_j", phys_e, "energy_lo"), ("energy_hi_j", phys_e, "energy_hi"))}
    if spreads:
        point = np.array([out["time_s"], out["energy_j"]])
        # every range's (time, energy) reach below and above physics' own at once: (ranges, 2, n); a NaN row (its host
        # stated) reaches nothing
        below, above = range_reach(np.array(spreads), np.array([phys_t, phys_e]))
        for side, sign, ends in (("lo", -1.0, below), ("hi", 1.0, above)):
            bound = np.array([out[f"time_{side}_s"], out[f"energy_{side}_j"]])
            reach = np.maximum(sign * np.log(bound / point), 0.0)   # the interval's own; each range's: |ends|
            # a row no range reaches keeps its bound
            moved = np.where(ends.any(axis=0), point * np.exp(sign * join_spreads(reach, ends)), bound)
            out[f"time_{side}_s"], out[f"energy_{side}_j"] = moved[0], moved[1]
    out["energy_j"] = _cap(out["energy_j"], out["time_s"], limit_w)
    out["energy_hi_j"] = np.maximum(_cap(out["energy_hi_j"], out["time_hi_s"], limit_w), out["energy_j"])
    out["energy_lo_j"] = np.minimum(out["energy_lo_j"], out["energy_j"])
    return out


def corrected(model: Any, X: pd.DataFrame, gpus: list[str], totals: Callable[[str], np.ndarray], stated: np.ndarray,
              limit_w: np.ndarray | float, base: np.ndarray | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray, list[tuple[str, ...]]]:
    """The hybrid estimate of rows with physics' `totals` (a PhysicsTotals field by name, every row's) and design `X`,
    each corrected as its GPU of `gpus` learned it: `combine`'s figures, its spreads an engine's host work over the
    rows it was measured from, the measured hosts' range where a row's host dispatch is not `stated`, and where
    `base` gives a what-if's base physics (2 x n, time then energy; NaN on a real GPU's row) its change's reach.
    Returns (the figures, the corrections, the rows out of domain, each one's reasons)."""
    time_s, energy_j = totals("time_s"), totals("energy_j")
    spreads = [(totals("engine_range_time_s"), totals("engine_range_energy_j")),
               tuple(np.where(stated[:, None], np.nan, totals(name)) for name in ("host_range_time_s",
                                                                               "host_range_energy_j"))]
    if base is not None:  # how far physics' own change may be off
        spreads.append((what_if_spread(time_s, base[0], "time"), what_if_spread(energy_j, base[1], "energy")))
    corr, reasons = _explained(model, X, gpus)
    away = np.flatnonzero(~corr["in_domain"])
    said = ([reasons[i] for i in away.tolist()] if reasons is not None
            else model.outside_domain(X.take(away), [gpus[i] for i in away]) if len(away) else [])
    return combine(time_s, energy_j, corr, limit_w, spreads), corr, away, [tuple(why) for why in said]


# A training table's physics at the ends of the measured hosts' range (`training.dataset.training_table`), time then
# energy, each fast end first
HOST_RANGE_COLUMNS = ("physics_host_fast_time_s", "physics_host_slow_time_s", "physics_host_fast_energy_j",
                      "physics_host_slow_energy_j")


def host_range_of(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """Measured rows' physics (time, energy) at the ends of the measured hosts' range (n x 2 each), NaN for a row
    whose collection stated its host (`host_dispatch_s`): the spread `combine` joins to an estimate whose machine
    states none. None for rows without HOST_RANGE_COLUMNS."""
    if not set(HOST_RANGE_COLUMNS) <= set(rows.columns):
        return None
    stated = rows["host_dispatch_s"].notna().to_numpy() if "host_dispatch_s" in rows else np.zeros(len(rows), bool)
    ends = np.where(stated[:, None], np.nan, rows[list(HOST_RANGE_COLUMNS)].to_numpy(float))
    return ends[:, :2], ends[:, 2:]


def scored_frame(rows: pd.DataFrame, corr: Mapping[str, np.ndarray] | None) -> pd.DataFrame:
    """Measured rows (with physics_time_s, physics_energy_j, power_limit_w) plus the estimate's pred_* columns and
    interval (lo_/hi_energy_j, lo_/hi_time_s) for scoring; `corr=None` scores physics alone (no interval). Rows of a
    training table carry physics at the measured hosts' range ends (`host_range_of`): those whose host is not stated
    are scored with the interval an estimate gives them, the hosts' spread joined (`combine`)."""
    t, e = rows["physics_time_s"].to_numpy(float), rows["physics_energy_j"].to_numpy(float)
    if corr is None:
        return rows.assign(pred_time_s=t, pred_energy_j=e, pred_power_w=e / t)
    limits = rows["power_limit_w"].astype(float).fillna(rows["gpu"].map(lambda g: lookup_gpu(g).power_limit_w))
    host = host_range_of(rows)
    h = combine(t, e, corr, limits.to_numpy(float), () if host is None else (host,))
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
        estimator: None for the shipped default model, "physics" for physics alone, a folder, an MLflow URI, or a
            loaded `Residual`.
        tracking_uri: the MLflow tracking server of a models:/ or runs:/ estimator.

    Raises:
        InputError: unknown GPU, or a clock or power limit outside what the GPU allows.
    """
    return estimate_batch([workload], gpu, sm_clock_mhz, power_limit_w, estimator, tracking_uri)[0]


def estimate_batch(workloads: Sequence[Workload], gpu: str | GpuSpec, sm_clock_mhz: float | None = None,
                   power_limit_w: float | None = None, estimator: str | None = None,
                   tracking_uri: str | None = None) -> list[Estimate]:
    """`estimate` of several workloads on one GPU setting in one pass: one physics pass over their stacked kernel
    tables, one residual prediction over their rows (a job's steps: `joulecast.serve`'s grid of batch sizes, a
    training run's step and optimizer). Each estimate is the one `estimate` gives its workload alone; none for none.

    Raises:
        InputError: `workloads` not a list or tuple of Workloads, and as `estimate`.
    """
    if not isinstance(workloads, (list, tuple)):
        raise InputError("workloads", f"expected a list of Workloads, got {type(workloads).__name__}")
    for w in workloads:
        if not isinstance(w, Workload):
            hint = f" (build one first: joulecast.workload({w!r}))" if isinstance(w, str) else ""
            raise InputError("workload", f"expected a Workload from joulecast.workload(...) or "
                                         f"workload_from_kernels(...), got {type(w).__name__}{hint}")
    spec = lookup_gpu(gpu)
    clock, limit = check_setting(spec, sm_clock_mhz, power_limit_w)  # before the model loads: a bad one costs no wait
    model = estimator if hasattr(estimator, "predict") else load_estimator(estimator, tracking_uri)
    n = len(workloads)
    if not n:
        return []
    X, totals, features = design_block(workloads, spec, sm_clock_mhz, power_limit_w)
    stated = np.array([host_stated(w.host_dispatch_s, float(d)) for w, d in zip(workloads, totals.host_dispatch_s)])
    what_if = what_if_base(spec, sm_clock_mhz, power_limit_w) if model is not None else None
    learned, base_totals = spec.name, None
    if what_if is not None:  # the correction its base's same configuration takes
        base, base_clock, base_limit = what_if
        (X, base_totals, _), learned = design_block(workloads, base, base_clock, base_limit), base.name
    need = memory.need_bytes(features, n, np.array([w.params or 0 for w in workloads]),
                             np.array([w.phase or "" for w in workloads]),
                             np.array([w.dtype or "bf16" for w in workloads]))
    memory_flag = memory_flags(need["total_bytes"], spec)
    phys_t, phys_e = totals.time_s, totals.energy_j
    t, e, h, corr, flags, outside = phys_t, phys_e, None, None, [()] * n, [()] * n
    if model is not None:  # the default host taken: the interval spans the measured ones (a host stated: no spread)
        base = None if base_totals is None else np.array([base_totals.time_s, base_totals.energy_j])
        h, corr, away, said = corrected(model, X, [learned] * n, lambda name: getattr(totals, name), stated, limit,
                                        base)
        t, e = h["time_s"], h["energy_j"]
        flags = [(str(f),) if f else () for f in model.flags(corr["in_domain"], [learned] * n)]
        for i, why in zip(away.tolist(), said):  # each row's reasons out of domain
            outside[i] = why
    bounds = np.searchsorted(np.asarray(features["workload_id"], np.int64), np.arange(n + 1))
    out = []
    for i, w in enumerate(workloads):  # a record each: the arrays' i-th figures and its own kernel rows
        mine = _rows(features, bounds[i], bounds[i + 1])
        ti, ei, pt = float(t[i]), float(e[i]), float(phys_t[i])
        kw: dict[str, Any] = {"flags": (str(memory_flag[i]),) if memory_flag[i] else ()}
        if h is not None:
            e_band = (float(h["energy_lo_j"][i]), float(h["energy_hi_j"][i]))
            inside, why = bool(corr["in_domain"][i]), outside[i]
            mark = flags[i]
            if spec.what_if_of is not None:
                inside, mark, why = False, (*mark, WHAT_IF_FLAG), (*why, what_if_reason(spec.what_if_of,
                                                                                        what_if is not None))
            kw = dict(method="hybrid", physics_energy_j=float(phys_e[i]), physics_time_s=pt,
                      energy_interval_j=e_band, time_interval_s=(float(h["time_lo_s"][i]), float(h["time_hi_s"][i])),
                      # the average board power never passes the limit, however long the pass
                      power_interval_w=(e_band[0] / ti, min(e_band[1] / ti, limit)), interval_level=model.level,
                      in_domain=inside, flags=mark + kw["flags"], outside_domain=why)
        out.append(Estimate(
            workload=w.name, gpu=spec.name, sm_clock_mhz=clock, power_limit_w=limit,
            energy_j=ei, time_s=ti, power_w=ei / ti, gpu_busy_s=float(totals.gpu_busy_s[i]) * ti / pt,
            launches=int(mine["launches"].sum()), host_dispatch_s=float(totals.host_dispatch_s[i]),
            host_dispatch_stated=bool(stated[i]),
            breakdown_of=functools.partial(_breakdown, mine, pt, float(totals.gpu_busy_s[i]),
                                           float(totals.idle_gap_energy_j[i]), ei, ti / pt, ei / float(phys_e[i])),
            kernel_columns=mine, memory_gb=float(need["total_bytes"][i] / memory.GIB),
            memory_parts_gb={k.removesuffix("_bytes"): float(v[i] / memory.GIB) for k, v in need.items()
                             if k != "total_bytes"},
            fits_batch=_largest_batch({k: v[i:i + 1] for k, v in need.items()}, spec, w.batch) if memory_flag[i]
            else None, **kw))
    return out


def _rows(features: Mapping[str, Any], start: int, stop: int) -> Mapping[str, Any]:
    """One workload's rows of a stacked kernel table (`Labels` kept as labels, its `workload_id` 0 as alone): all of
    them where it is the table."""
    if start == 0 and stop == len(features["workload_id"]):
        return dict(features)
    return _Rows(features, start, stop)


class _Rows(Mapping[str, Any]):
    """`_rows` of a table of several workloads, each column cut when first read: a job's dozens of steps each
    keep a table most callers never look at (its launches aside)."""

    def __init__(self, features: Mapping[str, Any], start: int, stop: int):
        self._features, self._start, self._stop, self._cut = features, start, stop, {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._cut:
            if name == "workload_id":
                self._features[name]  # a KeyError where the table has none
                self._cut[name] = np.zeros(self._stop - self._start, np.int64)
            else:  # an array's rows, or a `Labels` column's (its codes sliced, its names kept)
                self._cut[name] = self._features[name][self._start:self._stop]
        return self._cut[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._features)

    def __len__(self) -> int:
        return len(self._features)


def _largest_batch(need: Mapping[str, np.ndarray], spec: GpuSpec, batch: int | None) -> int | None:
    """The largest batch whose memory fits the GPU at the same sequence length: the weights and optimizer state
    held, the activations and KV cache scaled with the batch (`features.memory` counts both in proportion to it);
    None where even one sequence does not fit, or the batch is unknown (a kernel list)."""
    per_sequence = (need["activation_bytes"][0] + need["kv_cache_bytes"][0]) / batch if batch else 0.0
    room = spec.memory_gb * memory.GIB - need["weights_bytes"][0] - need["optimizer_bytes"][0]
    return int(room // per_sequence) if per_sequence > 0 and room >= per_sequence else None


def memory_flags(total_bytes: np.ndarray, spec: GpuSpec) -> np.ndarray:
    """Per workload, "exceeds-memory" where it needs more than the GPU holds, else ""."""
    return np.where(np.asarray(total_bytes) > spec.memory_gb * memory.GIB, "exceeds-memory", "")
