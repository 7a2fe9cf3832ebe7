"""Which catalog GPU the device is, from what it reports, so that a plan's rows are stored under the GPU they were
measured on: a plan names its GPU (`gpu: h200`) and its rows take that name, so the plan run on another card (an H100
lent where an H200 was planned) would file an H100's energy as the H200's, and every model trained after on them.

A device is told by its SM count, compute capability and memory, which PyTorch reports
(`torch.cuda.get_device_properties`), and by the board's default power limit, which NVML reports: it tells apart
catalog GPUs that share the rest (the A100-PCIe-40GB and A100-SXM4-40GB: 108 SMs, 8.0, 40 GB; 250 against 400 W)
and boards the catalog lacks from those they resemble. A device that reports none of them (a replay meter, the CPU
runner of the tests) is not checked.
"""

from __future__ import annotations

from collections.abc import Mapping

from joulecast.data.errors import InputError
from joulecast.data.gpus import catalog

# Reported memory (GiB) over the catalog's (GB, as datasheets give it): ECC and the driver's reserve take some, and
# GiB against GB leaves the rest near 1, never over. nvidia-smi's totals in public logs: the H200 143,771 MiB (140.4
# GiB of 141 GB, 0.996), the H100 80GB HBM3 81,559 MiB (79.6 of 80), the A10 23,028 MiB (22.5 of 24, 0.94); PyTorch's
# total reads a little under them. Wide enough for those; narrow enough that no two catalog GPUs of the same SMs and
# capability overlap (the nearest: the H100-SXM's 80 GB, to 80.8 GiB, and the GH200's 96, from 81.6).
MEMORY_SHARE = (0.85, 1.01)
# The default power limit NVML reports is the board's own (its VBIOS'), not one an operator set, and the catalog's
# `power_limit_w` is that default: a board of another limit is another card, a GPU to add (`joulecast gpu add`). By
# shared/reference/gpus.md: the H100 NVL (94 GB, 310-400 W) is not the GH200 its memory would pass for; an HGX
# A100-SXM4-80GB capped at 500 W (its custom-thermal SKU, M[16]) is not the catalog's 400 W card; a GH200 whose GPU cap
# nvidia-smi shows at 900 W (M[17]) is not the catalog's 700 W one.
LIMIT_SHARE = 0.1


def device_identity(device: Mapping[str, str]) -> dict[str, float | str] | None:
    """The SM count, compute capability, memory (GiB) and default power limit (W, or None) the device reported; None
    where it reported no SM count, capability or memory."""
    try:
        identity: dict[str, float | str] = dict(sm_count=float(device["sm_count"]),
                                                compute_capability=_capability(device["compute_capability"]),
                                                memory_gib=float(device["memory_gib"]))
    except (KeyError, TypeError, ValueError):
        return None
    try:
        identity["power_limit_default_w"] = float(device["power_limit_default_w"])
    except (KeyError, TypeError, ValueError):
        pass
    return identity


def matching_gpus(identity: Mapping[str, float | str]) -> list[str]:
    """Catalog GPUs of the device's SMs, capability, memory and default power limit (where it reported one: within
    LIMIT_SHARE of the catalog's), the nearest limit first and alone."""
    lo, hi = MEMORY_SHARE
    limit = identity.get("power_limit_default_w")
    found = [spec for spec in catalog().values()
             if spec.sm_count == identity["sm_count"]
             and _capability(spec.compute_capability) == identity["compute_capability"]
             and lo <= float(identity["memory_gib"]) / spec.memory_gb <= hi
             and (limit is None or abs(float(limit) / spec.power_limit_w - 1) <= LIMIT_SHARE)]
    if limit is None:
        return [spec.name for spec in found]
    gap = {spec.name: abs(spec.power_limit_w - float(limit)) for spec in found}
    nearest = min(gap.values(), default=0.0)
    return sorted((name for name, g in gap.items() if g == nearest), key=str)


def check_device(gpu: str, device: Mapping[str, str]) -> None:
    """Raise a one-line InputError (field `gpu`) where the device is not the catalog GPU `gpu`, naming the one it is
    and `collect --gpu`, which measures it as that."""
    identity = device_identity(device)
    if identity is None:
        return
    matches = matching_gpus(identity)
    if gpu in matches:
        return
    seen = (f"{device.get('device_name') or device.get('name') or 'this GPU'} ({identity['sm_count']:g} SMs, "
            f"compute {identity['compute_capability']}, {float(identity['memory_gib']):.1f} GiB"
            + (f", {float(identity['power_limit_default_w']):g} W default limit" if "power_limit_default_w" in identity
               else "") + ")")
    spec = catalog().get(gpu)
    planned = (f"{gpu} ({spec.sm_count} SMs, compute {spec.compute_capability}, {spec.memory_gb:g} GB, "
               f"{spec.power_limit_w:g} W)" if spec is not None else gpu)
    if matches:
        hint = f"it is the catalog's {matches[0]}: measure it as that with --gpu {matches[0]}"
    else:
        hint = ("no catalog GPU matches it: add its spec with 'joulecast gpu add FILE' and measure it as that with "
                "--gpu NAME")
    raise InputError("gpu", f"the plan is for {planned}, but the device is {seen}; {hint}. Nothing was measured")


def _capability(value: object) -> str:
    """'9.0', 9.0 and '9' alike."""
    major, _, minor = str(value).strip().partition(".")
    return f"{int(major)}.{int(minor or 0)}"
