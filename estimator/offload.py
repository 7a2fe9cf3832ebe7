"""Weights a GPU does not hold, kept in host memory and copied in before every forward pass, as Hugging Face
Accelerate runs a model loaded with `device_map="auto"` that does not fit: its `AlignDevicesHook` moves an offloaded
module's weights to the GPU as the module's forward begins and drops them after, so every pass of a generation (each
decode step, or each step's whole pass without a KV cache) copies them again.

The copy is a `Tensor.to(device)` from ordinary (pageable) host memory, which returns only when the copy is done: the
pass waits for it, the GPU idle meanwhile at its clock (`features.power.idle_power_w`). Stated approximations: the
copy overlaps nothing (the hooks copy before the module's kernels are queued); the GPU holds the pass's memory less
the offloaded weights (a module's weights staged while it runs are not counted).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.features.memory import GIB
from joulecast.features.power import idle_power_w

# Host-to-device copy rates from pageable host memory, CUDA's bandwidthTest (`--memory=pageable`, 32 MB transfers) as
# posted in public repositories (GB/s): a GTX 1660 Ti laptop 3.2 (index id 43535836697), a Dell A100-PCIe server 3.3
# and a DGX A100 10.0 (20134979262), a GTX 1080 Ti desktop 3.9 (27759903867), an A100-SXM4 node 14.3 (12036536344),
# an RTX 3080 desktop 15.9 (42192826036). The host's CPU and memory set the rate more than the GPU does (the two A100
# servers: 3.3 and 10.0). A machine that states none takes their median, its interval spanning their range.
H2D_PAGEABLE_GBPS = (3.2, 3.3, 3.9, 10.0, 14.3, 15.9)
H2D_DEFAULT_GBPS = float(np.median(H2D_PAGEABLE_GBPS))
H2D_RANGE_GBPS = (min(H2D_PAGEABLE_GBPS), max(H2D_PAGEABLE_GBPS))
# past any host link, the fastest being GH200's CPU-to-GPU NVLink-C2C, 900 GB/s (NVIDIA's GH200 datasheet, as
# ../shared/reference/gpus.md cites it): a typo, not a machine
MAX_H2D_GBPS = 1000.0


def check_offload(offload_gb: float, h2d_gbps: float | None) -> tuple[float, float | None]:
    """(GiB offloaded, the host's copy rate or None) checked; else an InputError naming the field."""
    if isinstance(offload_gb, bool) or not isinstance(offload_gb, (int, float)) or not math.isfinite(offload_gb) \
            or offload_gb < 0:
        raise InputError("offload_gb", f"must be a number of GiB, 0 or more, got {offload_gb!r}")
    if h2d_gbps is not None and (isinstance(h2d_gbps, bool) or not isinstance(h2d_gbps, (int, float))
                                 or not 0 < h2d_gbps <= MAX_H2D_GBPS):
        raise InputError("h2d_gbps", f"must be GB/s over 0 and at most {MAX_H2D_GBPS:g}, got {h2d_gbps!r}")
    return float(offload_gb), None if h2d_gbps is None else float(h2d_gbps)


def with_copies(steps: pd.DataFrame, gpu: str, offload_gb: float, h2d_gbps: float | None,
                sm_clock_mhz: float | None) -> pd.DataFrame:
    """Each step (one forward pass, an `estimate_many` row) with the offloaded weights' copy added: its time, the
    GPU's idle energy meanwhile, its bounds over the copy rate's range where the host states none (`H2D_RANGE_GBPS`),
    its memory less the offloaded GiB and its exceeds-memory flag read again."""
    if not offload_gb:
        return steps
    need = float(steps["memory_gb"].min())
    if offload_gb >= need:
        raise InputError("offload_gb", f"must be less than the {need:.2f} GiB a pass needs on the GPU, "
                                       f"got {offload_gb:g}")
    spec = lookup_gpu(gpu)
    idle = float(idle_power_w(spec, spec.boost_clock_mhz if sm_clock_mhz is None else sm_clock_mhz))
    size = offload_gb * GIB
    fast, slow = (h2d_gbps, h2d_gbps) if h2d_gbps is not None else H2D_RANGE_GBPS[::-1]
    copy, copy_lo, copy_hi = (size / (rate * 1e9) for rate in (h2d_gbps or H2D_DEFAULT_GBPS, fast, slow))
    out = steps.copy()
    for column, seconds in (("time_s", copy), ("time_lo_s", copy_lo), ("time_hi_s", copy_hi)):
        out[column] = out[column] + seconds
    for column, seconds in (("energy_j", copy), ("energy_lo_j", copy_lo), ("energy_hi_j", copy_hi)):
        out[column] = out[column] + idle * seconds
    if "physics_time_s" in out:
        out["physics_time_s"] = out["physics_time_s"] + copy
        out["physics_energy_j"] = out["physics_energy_j"] + idle * copy
    out["power_w"] = out["energy_j"] / out["time_s"]
    out["memory_gb"] = out["memory_gb"] - offload_gb
    fits = out["memory_gb"].to_numpy(float) <= spec.memory_gb
    out["flags"] = [", ".join(f for f in str(flags).split(", ") if f and not (ok and f == "exceeds-memory"))
                    for flags, ok in zip(out["flags"], fits)]
    return out
