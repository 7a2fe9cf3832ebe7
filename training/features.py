"""Workload-level features for the learned residual: the physics pass aggregated per workload, the GPU's specs,
and the setting (clock, power limit, dtype, phase). Vectorised: many workloads on one GPU go through one physics pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from joulecast.data.gpus import GpuSpec
from joulecast.data.kernels import DTYPE_BYTES, stack
from joulecast.data.workload import Workload
from joulecast.features import arch, physics

KERNEL_CLASSES = ("gemm", "attention", "softmax", "norm", "elementwise", "embedding", "conv2d")
PHASES = ("prefill", "decode", "training", "inference", "kernel")
BOUNDS = ("compute", "dram", "l2", "latency")
ARCH_CODE = {"volta": 7.0, "turing": 7.5, "ampere": 8.0, "ada": 8.9, "hopper": 9.0, "blackwell": 10.0}


def physics_batch(workloads: Sequence[Workload], gpu: GpuSpec, sm_clock_mhz: float | None,
                  power_limit_w: float | None) -> tuple[pd.DataFrame, physics.PhysicsTotals]:
    """One physics pass over several workloads on one GPU at one setting."""
    kernels = stack({i: w.kernels for i, w in enumerate(workloads)})
    host = np.array([arch.HOST_DISPATCH_S[w.launch_mode] for w in workloads])
    features, totals = physics.analyze(kernels, gpu, sm_clock_mhz=sm_clock_mhz, power_limit_w=power_limit_w,
                                       host_dispatch_s=host)
    features["workload_id"] = kernels["workload_id"].to_numpy()
    return features, totals


def aggregate(features: pd.DataFrame, totals: physics.PhysicsTotals) -> pd.DataFrame:
    """Per-workload features: totals, time shares by kernel class and bound, time-weighted kernel traits."""
    wid = features["workload_id"].to_numpy(dtype=np.int64)
    n = len(totals.time_s)
    launches = features["launches"].to_numpy(dtype=float)
    t = launches * features["time_s"].to_numpy()
    busy = np.maximum(np.bincount(wid, t, minlength=n), 1e-12)

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(wid, launches * values, minlength=n)

    def share(mask: np.ndarray) -> np.ndarray:
        return np.bincount(wid, np.where(mask, t, 0.0), minlength=n) / busy

    def weighted(values: np.ndarray) -> np.ndarray:
        return np.bincount(wid, t * values, minlength=n) / busy

    kind, bound = features["kind"].to_numpy().astype(str), features["bound"].to_numpy().astype(str)
    out = {
        "log_physics_time": np.log(totals.time_s), "log_physics_energy": np.log(totals.energy_j),
        "physics_power_w": totals.power_w, "busy_fraction": totals.gpu_busy_s / totals.time_s,
        "log_launches": np.log(np.bincount(wid, launches, minlength=n)),
        "log_flops": np.log1p(total(features["flops"].to_numpy(dtype=float))),
        "log_dram_bytes": np.log1p(total(features["dram_bytes"].to_numpy(dtype=float))),
        "log_l2_bytes": np.log1p(total(features["l2_bytes"].to_numpy(dtype=float))),
        "log_mean_kernel_s": np.log(busy / np.bincount(wid, launches, minlength=n)),
        **{f"share_{c}": share(kind == c) for c in KERNEL_CLASSES},
        **{f"share_{b}_bound": share(bound == b) for b in BOUNDS},
        **{f"mean_{c}": weighted(features[c].to_numpy(dtype=float))
           for c in ("waves", "last_wave_occupancy", "u_tensor", "u_fma", "u_dram", "u_l2", "u_sm")},
        "mean_log_intensity": weighted(np.log1p(features["intensity_flop_per_byte"].to_numpy(dtype=float))),
    }
    return pd.DataFrame(out)


def gpu_features(spec: GpuSpec) -> dict[str, float]:
    """A GPU described by its specs, so that the residual can reach GPUs it was not trained on."""
    return {"gpu_arch": ARCH_CODE.get(spec.architecture, 0.0), "gpu_sms": float(spec.sm_count),
            "gpu_boost_mhz": spec.boost_clock_mhz, "gpu_bandwidth_gbs": spec.memory_bandwidth_gbs,
            "gpu_l2_mb": spec.l2_bytes / 2**20, "gpu_bf16_tflops": float(spec.tensor_tflops.get("bf16", 0.0)),
            "gpu_fp32_tflops": float(spec.cuda_tflops["fp32"]), "gpu_tdp_w": spec.power_limit_w,
            "gpu_idle_w": spec.idle_power_w, "gpu_hbm": float(spec.memory_type.lower().startswith("hbm"))}


def setting_features(spec: GpuSpec, sm_clock_mhz: np.ndarray, power_limit_w: np.ndarray, dtype: Sequence[str],
                     phase: Sequence[str], batch: np.ndarray, seq: np.ndarray) -> pd.DataFrame:
    out = {"clock_ratio": np.asarray(sm_clock_mhz, float) / spec.boost_clock_mhz,
           "power_limit_ratio": np.asarray(power_limit_w, float) / spec.power_limit_w,
           "dtype_bytes": np.array([DTYPE_BYTES.get(str(d), 2) for d in dtype], float),
           "log_batch": np.log(np.asarray(batch, float)), "log_seq": np.log(np.asarray(seq, float))}
    out.update({f"phase_{p}": np.array([str(x) == p for x in phase], float) for p in PHASES})
    return pd.DataFrame(out)




def design_matrix(workloads: Sequence[Workload], spec: GpuSpec, sm_clock_mhz: float | None,
                  power_limit_w: float | None) -> tuple[pd.DataFrame, physics.PhysicsTotals, pd.DataFrame]:
    """(features for the residual model, physics totals, per-kernel features) of workloads on one GPU setting."""
    features, totals = physics_batch(workloads, spec, sm_clock_mhz, power_limit_w)
    n = len(workloads)
    clock = np.full(n, spec.boost_clock_mhz if sm_clock_mhz is None else sm_clock_mhz, float)
    limit = np.full(n, spec.power_limit_w if power_limit_w is None else power_limit_w, float)
    setting = setting_features(spec, clock, limit, [w.dtype or "bf16" for w in workloads],
                               [w.phase or "kernel" for w in workloads],
                               np.array([w.batch or 1 for w in workloads], float),
                               np.array([w.seq or 1 for w in workloads], float))
    gpu = pd.DataFrame([gpu_features(spec)] * n)
    return pd.concat([aggregate(features, totals), gpu, setting], axis=1), totals, features
