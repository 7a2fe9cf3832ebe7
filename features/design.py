"""Workload-level features for the learned residual: the physics pass aggregated per workload, the GPU's specs,
and the setting (clock, power limit, dtype, phase). Vectorised: many workloads on one GPU go through one physics pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from joulecast.data.gpus import GpuSpec
from joulecast.data.kept import kept_for
from joulecast.data.kernels import DTYPE_BYTES, stack
from joulecast.data.labels import Labels
from joulecast.data.workload import Workload
from joulecast.features import arch, kinds, physics
from joulecast.features.physics import BOUNDS

PHASES = ("prefill", "decode", "training", "inference", "kernel")


def physics_batch(workloads: Sequence[Workload], gpu: GpuSpec, sm_clock_mhz: float | None,
                  power_limit_w: float | None) -> tuple[dict[str, np.ndarray], physics.PhysicsTotals]:
    """One physics pass over several workloads on one GPU at one setting (per-kernel columns, per-workload totals)."""
    if len(workloads) == 1:  # a single estimate: no stacking (a copy of the table) needed
        w = workloads[0]
        kernels = {**w.encoded_columns(), "workload_id": np.zeros(len(w.columns["count"]), np.int64)}
    else:
        kernels = stack({i: w.columns for i, w in enumerate(workloads)})
    return physics_columns(kernels, gpu, sm_clock_mhz, power_limit_w, [w.launch_mode for w in workloads],
                           [w.engine for w in workloads], np.array([w.batch or 1 for w in workloads], float),
                           [w.host_dispatch_s for w in workloads])


def host_dispatch(launch_modes: Sequence[str], stated: Sequence[float | None] | np.ndarray | None = None
                  ) -> np.ndarray:
    """Per workload, the host's time a kernel launch: its launch mode's default (`arch.HOST_DISPATCH_S`), or the
    figure stated for its machine where there is one (`Workload.host_dispatch_s`; None or NaN for none; eager
    launches only, since CUDA graphs dispatch nothing)."""
    host = Labels.of(launch_modes).lookup(arch.HOST_DISPATCH_S, np.nan)
    if stated is None:
        return host
    own = stated.astype(float) if isinstance(stated, np.ndarray) else np.array(
        [np.nan if s is None else s for s in stated], dtype=float)
    return np.where(np.isnan(own) | (host == 0.0), host, own)


def host_stated(given: float | None, dispatch: float) -> bool:
    """Whether a workload's host is known: its machine's dispatch `given`, or none taken (`dispatch` 0: CUDA graphs
    dispatch nothing). An unknown host takes the default, its interval spanning the measured hosts'
    (`estimator.api.combine`)."""
    return given is not None or not dispatch


def physics_columns(kernels: Mapping[str, np.ndarray], gpu: GpuSpec, sm_clock_mhz: float | None,
                    power_limit_w: float | None, launch_modes: Sequence[str], engines: Sequence[str | None],
                    batch: np.ndarray, host_dispatch_s: Sequence[float | None] | np.ndarray | None = None,
                    ) -> tuple[dict[str, np.ndarray], physics.PhysicsTotals]:
    """`physics_batch` of stacked kernel columns (with `workload_id`), given each workload's launch mode, serving
    engine (or None), batch and, where its machine's is known, host dispatch a launch (`host_dispatch`)."""
    host = host_dispatch(launch_modes, host_dispatch_s)
    columns, totals = physics.analyze_arrays(kernels, gpu, sm_clock_mhz=sm_clock_mhz, power_limit_w=power_limit_w,
                                             host_dispatch_s=host, **_engine_host(engines, batch))
    if "workload_id" not in columns:
        columns["workload_id"] = kernels["workload_id"]
    return columns, totals


_NO_ENGINE = {"host_s_per_sequence": 0.0, "host_s_per_sequence_range": (0.0, 0.0), "host_overlaps": False,
              "power_over_idle": 1.0}


def _engine_host(engines: Sequence[str | None], batch: np.ndarray) -> dict[str, np.ndarray]:
    """Per workload, its serving engine's host time per step (per running sequence x batch) and at the ends of its
    measured range (n x 2), whether it runs under the GPU's step, and the GPU's power while it waits; none without an
    engine."""
    names = np.array([e or "" for e in engines], dtype=str)
    specs = {**arch.SERVING_ENGINES, "": _NO_ENGINE}
    labels = Labels.of(names)
    ends = np.stack([labels.lookup({k: e["host_s_per_sequence_range"][i] for k, e in specs.items()}, 0.0)
                     for i in (0, 1)], axis=-1)
    return {"serial_host_s": labels.lookup({k: e["host_s_per_sequence"] for k, e in specs.items()}, 0.0) * batch,
            "serial_host_range_s": ends * np.asarray(batch, dtype=float)[:, None],
            "serial_overlaps": labels.lookup({k: float(e["host_overlaps"]) for k, e in specs.items()}, 0.0),
            "serial_power_over_idle": labels.lookup({k: e["power_over_idle"] for k, e in specs.items()}, 1.0)}


def aggregate(features: Mapping[str, np.ndarray], totals: physics.PhysicsTotals) -> dict[str, np.ndarray]:
    """Per-workload features: totals, time shares by kernel class and bound, time-weighted kernel traits."""

    def column(name: str) -> np.ndarray:
        return np.asarray(features[name], dtype=float)

    wid = np.asarray(features["workload_id"], dtype=np.int64)
    n = len(totals.time_s)
    launches = column("launches")
    t = launches * column("time_s")
    traits = ("waves", "last_wave_occupancy", "u_tensor", "u_fma", "u_dram", "u_l2", "u_sm")
    # the time-weighted means: the traits, the SM clock (`busy_clock_mhz`), the log intensity, in this order
    weighted = [*(column(c) for c in traits), column("sm_clock_mhz"), np.log1p(column("intensity_flop_per_byte"))]
    if n == 1:  # one workload: its sums as two blocks, each row added to the sums in turn as bincount adds them (a
        # C-ordered (rows, columns) block reduced over its rows): busy time and the time-weighted traits, then the
        # launches and the launch-weighted totals
        by_time = np.add.reduce(t[:, None] * np.ascontiguousarray(
            np.array([np.ones_like(t), *weighted]).T), axis=0)[:, None]
        by_launch = np.add.reduce(launches[:, None] * np.ascontiguousarray(
            np.array([np.ones_like(t), column("flops"), column("dram_bytes"), column("l2_bytes")]).T), axis=0)[:, None]
        busy = np.maximum(by_time[0], 1e-12)
        means = list(by_time[1:] / busy)
        launch_count, flops, dram_bytes, l2_bytes = by_launch
    else:
        busy = np.maximum(np.bincount(wid, t, minlength=n), 1e-12)
        means = [np.bincount(wid, t * v, minlength=n) / busy for v in weighted]
        launch_count = np.bincount(wid, launches, minlength=n)
        flops, dram_bytes, l2_bytes = (np.bincount(wid, launches * column(c), minlength=n)
                                       for c in ("flops", "dram_bytes", "l2_bytes"))

    def shares(labels: Labels, names: Sequence[str]) -> list[np.ndarray]:
        """Per name, its rows' share of busy time, every label in one pass (a label's time summed in row order, as
        its rows alone would be; 0 for a name no row has)."""
        width = len(labels.names)
        sums = np.bincount(wid * width + labels.codes, t, minlength=n * width).reshape(n, width) / busy[:, None]
        at = {name: i for i, name in enumerate(labels.names)}
        return [sums[:, at[name]] if name in at else np.zeros(n) for name in names]

    kind, bound = Labels.of(features["kind"]), Labels.of(features["bound"])
    out = {
        "log_physics_time": np.log(totals.time_s), "log_physics_energy": np.log(totals.energy_j),
        "physics_power_w": totals.power_w, "busy_fraction": totals.gpu_busy_s / totals.time_s,
        "log_host_over_busy": np.log(np.maximum(totals.host_s, 1e-9) / totals.gpu_busy_s),
        # The share of the step a serving engine's host work takes (0 without one): lets trees treat served steps,
        # whose engine time physics takes from one GPU's runs, apart from kernels alone. Shipped model's grouped CV,
        # energy MAPE without -> with it: A10 4.96 -> 4.87 %, A100 4.84 -> 4.63 %; H100 zero-shot 32.4 -> 28.3 %
        # (experiments/onboarding.py, seed 0). Leave-one-model-out, where it is 0 throughout and only the trees'
        # column draws move: A10 4.79 -> 4.75 %, A100 4.71 -> 4.63 % (mean of tree seeds 0-2).
        "engine_host_fraction": totals.engine_host_s / totals.time_s,
        # The share of busy time in a mixture of experts' grouped GEMMs (`KernelBuilder.experts`, and their
        # backward): marks the work of a kind no measured row has (`estimator.residual.MOE_WORK`)
        "expert_share": np.bincount(wid, t * _expert_rows(Labels.of(features["op"])), minlength=n) / busy,
        "log_launches": np.log(launch_count),
        "log_flops": np.log1p(flops),
        "log_dram_bytes": np.log1p(dram_bytes),
        "log_l2_bytes": np.log1p(l2_bytes),
        "log_mean_kernel_s": np.log(busy / launch_count),
        **{f"share_{c}": v for c, v in zip(kinds.KINDS, shares(kind, kinds.KINDS))},
        **{f"share_{b}_bound": v for b, v in zip(BOUNDS, shares(bound, BOUNDS))},
        **{f"mean_{c}": v for c, v in zip(traits, means)},
        "mean_log_intensity": means[-1],
        # the SM clock weighted by busy time: where a power limit binds, the clock physics' cap solve settles at
        # (`design_from_physics` makes it a ratio to the boost clock, `busy_clock_ratio`)
        "busy_clock_mhz": means[-2],
    }
    return out


def _expert_rows(op: Labels) -> np.ndarray:
    """Per kernel row, whether it is a mixture of experts' grouped GEMM or its backward (op experts, experts_*)."""
    return np.array([str(name).startswith("experts") for name in op.names] or [False])[op.codes]


def gpu_features(spec: GpuSpec) -> dict[str, float]:
    """A GPU described by its specs, so that the residual can reach GPUs it was not trained on."""
    return {"gpu_arch": arch.traits(spec.architecture).code, "gpu_sms": float(spec.sm_count),
            "gpu_boost_mhz": spec.boost_clock_mhz, "gpu_bandwidth_gbs": spec.memory_bandwidth_gbs,
            "gpu_l2_mb": spec.l2_bytes / 2**20, "gpu_bf16_tflops": float(spec.tensor_tflops.get("bf16", 0.0)),
            "gpu_fp32_tflops": float(spec.cuda_tflops["fp32"]), "gpu_tdp_w": spec.power_limit_w,
            "gpu_idle_w": spec.idle_power_w, "gpu_hbm": float(spec.memory_type.lower().startswith("hbm"))}


def setting_features(spec: GpuSpec, sm_clock_mhz: np.ndarray, power_limit_w: np.ndarray, dtype: Sequence[str],
                     phase: Sequence[str], batch: np.ndarray, seq: np.ndarray) -> dict[str, np.ndarray]:
    phase = Labels.of(np.asarray(phase, dtype=object))  # compared as codes, not as strings
    out = {"clock_ratio": np.asarray(sm_clock_mhz, float) / spec.boost_clock_mhz,
           "power_limit_ratio": np.asarray(power_limit_w, float) / spec.power_limit_w,
           "dtype_bytes": Labels.of(np.asarray(dtype, dtype=object)).lookup(DTYPE_BYTES, 2.0),
           "log_batch": np.log(np.asarray(batch, float)), "log_seq": np.log(np.asarray(seq, float))}
    # one-hot phases: each row's row of an identity table (all zeros for a phase not listed), in one gather
    one_hot = _PHASE_ROWS[phase.lookup(_PHASE_INDEX, len(PHASES)).astype(np.intp)]
    out.update({f"phase_{p}": one_hot[:, i] for i, p in enumerate(PHASES)})
    return out


_PHASE_ROWS = np.vstack([np.eye(len(PHASES)), np.zeros(len(PHASES))])
_PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}


@dataclass(frozen=True, slots=True)
class Design:
    """The residual's features for workloads: one float block and its column names, which the residual reads as it
    reads a DataFrame (`columns`, `to_numpy`) without the third of a millisecond a DataFrame costs to build."""

    values: np.ndarray      # (workloads, features) float64
    columns: list[str]

    def to_numpy(self, dtype: type | None = None) -> np.ndarray:
        return self.values if dtype is None else self.values.astype(dtype)

    def __len__(self) -> int:
        return len(self.values)

    def take(self, rows: np.ndarray) -> "Design":
        return Design(self.values[rows], self.columns)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.values, columns=self.columns)


def design_matrix(workloads: Sequence[Workload], spec: GpuSpec, sm_clock_mhz: float | None,
                  power_limit_w: float | None) -> tuple[pd.DataFrame, physics.PhysicsTotals, dict[str, np.ndarray]]:
    """(features for the residual model, physics totals, per-kernel feature columns) of workloads on one GPU setting."""
    design, totals, features = design_block(workloads, spec, sm_clock_mhz, power_limit_w)
    return design.frame(), totals, features


def design_block(workloads: Sequence[Workload], spec: GpuSpec, sm_clock_mhz: float | None,
                 power_limit_w: float | None) -> tuple[Design, physics.PhysicsTotals, dict[str, np.ndarray]]:
    """`design_matrix` with the features as a `Design` block."""
    features, totals = physics_batch(workloads, spec, sm_clock_mhz, power_limit_w)
    design = design_from_physics(features, totals, spec, sm_clock_mhz, power_limit_w,
                                 [w.dtype or "bf16" for w in workloads], [w.phase or "kernel" for w in workloads],
                                 np.array([w.batch or 1 for w in workloads], float),
                                 np.array([w.seq or 1 for w in workloads], float))
    return design, totals, features


def design_from_physics(features: Mapping[str, np.ndarray], totals: physics.PhysicsTotals, spec: GpuSpec,
                        sm_clock_mhz: float | None, power_limit_w: float | None, dtype: Sequence[str],
                        phase: Sequence[str], batch: np.ndarray, seq: np.ndarray) -> Design:
    """The residual's features of workloads from their physics pass and their settings (dtype, phase, batch and
    sequence length, 1 where none applies)."""
    n = len(totals.time_s)
    clock = np.full(n, spec.boost_clock_mhz if sm_clock_mhz is None else sm_clock_mhz, float)
    limit = np.full(n, spec.power_limit_w if power_limit_w is None else power_limit_w, float)
    setting = setting_features(spec, clock, limit, dtype, phase, batch, seq)
    gpu_names, gpu_values = _gpu_row(spec)
    physics_columns = aggregate(features, totals)
    setting["busy_clock_ratio"] = physics_columns.pop("busy_clock_mhz") / spec.boost_clock_mhz
    # One float block (a frame from a 2-D array is built ten times faster than from 48 separate columns), stacked
    # as rows and transposed: a third of np.column_stack's cost on one workload, the same values
    block = np.concatenate([np.array(list(physics_columns.values()), dtype=float),
                            np.broadcast_to(gpu_values[:, None], (len(gpu_values), n)),
                            np.array(list(setting.values()), dtype=float)])
    return Design(np.ascontiguousarray(block.T), [*physics_columns, *gpu_names, *setting])


_GPU_ROWS: dict = {}  # a spec's `gpu_features` (`_gpu_row`)


def _gpu_row(spec: GpuSpec) -> tuple[list[str], np.ndarray]:
    """`gpu_features` of a spec as (names, values), taken once a spec object (a catalog's few, a sweep's
    hypothetical ones: at most 256 kept)."""
    def make() -> tuple[list[str], np.ndarray]:
        features = gpu_features(spec)
        return list(features), np.array(list(features.values()), dtype=float)
    return kept_for(_GPU_ROWS, (spec,), make, 256)


def setting_groups(gpus: Sequence[str], clocks: np.ndarray, limits: np.ndarray
                   ) -> Iterator[tuple[str, float | None, float | None, np.ndarray]]:
    """Rows grouped by GPU setting (GPU, locked clock, power limit; NaN = the default), one physics pass each:
    yields (gpu, clock or None, limit or None, row indices)."""
    gpus, clocks, limits = np.asarray(gpus, dtype=str), np.asarray(clocks, float), np.asarray(limits, float)
    if len(gpus) and (gpus == gpus[0]).all() and _one_value(clocks) and _one_value(limits):
        # one setting (a job's steps, a single estimate): its rows without grouping, a few ms less a call
        clock, limit = clocks[0], limits[0]
        yield str(gpus[0]), None if np.isnan(clock) else float(clock), None if np.isnan(limit) else float(limit), \
            np.arange(len(gpus))
        return
    # NaN kept as its own key, not coded as -1: a negative clock or limit given goes on to be refused as out of range
    key = pd.DataFrame({"gpu": gpus, "clock": clocks, "limit": limits})
    for (gpu, clock, limit), idx in key.groupby(["gpu", "clock", "limit"], dropna=False).indices.items():
        yield str(gpu), None if np.isnan(clock) else float(clock), None if np.isnan(limit) else float(limit), idx


def _one_value(values: np.ndarray) -> bool:
    """Whether every value is the first's, NaN counting as one value."""
    return bool(np.isnan(values).all() or (values == values[0]).all())
