"""`estimate`: a workload on a GPU -> energy (J), time (s), average power (W), with a per-class breakdown.

This issue's estimate is the physics half of the hybrid; the learned residual (joulecast.training) multiplies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.gpus import GpuSpec, gpu as lookup_gpu
from joulecast.data.workload import Workload
from joulecast.features import arch, physics

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
    method: str = "physics"
    by_kernel_class: pd.DataFrame = field(default=None, compare=False, repr=False)
    features: pd.DataFrame = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the feature table is left out; the breakdown is kept)."""
        out = {name: getattr(self, name) for name in ("workload", "gpu", "sm_clock_mhz", "power_limit_w", "energy_j",
                                                       "time_s", "power_w", "gpu_busy_s", "launches", "method")}
        out["by_kernel_class"] = self.by_kernel_class.to_dict(orient="records")
        return out


def _breakdown(features: pd.DataFrame, totals: physics.PhysicsTotals) -> pd.DataFrame:
    launches = features["launches"].to_numpy()
    classes, index = np.unique(features["kind"].to_numpy().astype(str), return_inverse=True)
    launches_by = np.bincount(index, launches, minlength=len(classes)).astype(np.int64)
    time_by = np.bincount(index, launches * features["time_s"].to_numpy(), minlength=len(classes))
    energy_by = np.bincount(index, launches * features["energy_j"].to_numpy(), minlength=len(classes))
    gap_s = float(totals.time_s[0] - totals.gpu_busy_s[0])
    if gap_s > 0:  # host-bound: the GPU waits for the next launch at idle power
        classes = np.append(classes, "idle (host-bound)")
        launches_by, time_by = np.append(launches_by, 0), np.append(time_by, gap_s)
        energy_by = np.append(energy_by, float(totals.idle_gap_energy_j[0]))
    order = np.argsort(-energy_by, kind="stable")
    return pd.DataFrame({"kernel_class": classes[order], "launches": launches_by[order], "time_s": time_by[order],
                         "energy_j": energy_by[order], "energy_share": energy_by[order] / float(totals.energy_j[0])})


def estimate(workload: Workload, gpu: str | GpuSpec, sm_clock_mhz: float | None = None,
             power_limit_w: float | None = None) -> Estimate:
    """Estimate a workload's energy, time and average power on a GPU.

    Args:
        workload: from `joulecast.workload(...)` or `joulecast.workload_from_kernels(path)`.
        gpu: a catalog name or a `GpuSpec`.
        sm_clock_mhz: a locked SM clock (default: the GPU's maximum clock, lowered where the power cap binds).
        power_limit_w: a power cap (default: the GPU's default limit).

    Raises:
        InputError: unknown GPU, or a clock or power limit outside what the GPU allows.
    """
    spec = lookup_gpu(gpu)
    host = arch.HOST_DISPATCH_S[workload.launch_mode]
    features, totals = physics.analyze(workload.kernels, spec, sm_clock_mhz=sm_clock_mhz,
                                       power_limit_w=power_limit_w, host_dispatch_s=host)
    return Estimate(
        workload=workload.name, gpu=spec.name,
        sm_clock_mhz=float(spec.boost_clock_mhz if sm_clock_mhz is None else sm_clock_mhz),
        power_limit_w=float(spec.power_limit_w if power_limit_w is None else power_limit_w),
        energy_j=float(totals.energy_j[0]), time_s=float(totals.time_s[0]), power_w=float(totals.power_w[0]),
        gpu_busy_s=float(totals.gpu_busy_s[0]), launches=int(np.sum(features["launches"])),
        by_kernel_class=_breakdown(features, totals), features=features,
    )
