"""Power against the share of busy SMs at almost no switching work (issue 31), from a run of the busy-SM probe
(`python -m joulecast.data.collect.sm_spin`): the one-warp configurations' power fitted on the share of SMs their
blocks ran on, set beside what physics' hot-static term adds over that share (features/arch.py: idle(f) * ratio *
u_sm at the probe's clock), and the power that more warps a SM add on all of them.

    python experiments/busy_sm_power.py [PROBE_DIR] [--gpu h200] [--json]

PROBE_DIR (default data/probes/h200/h200-sm-spin) holds the probe's sm_spin_summary.json.

Measured on 2026-12-04 (a lent H200, a third board, 700 W limit and clocks as found): one warp spinning on 1 to 132
SMs at 1,980 MHz drew 124.1 -> 135.4 W, 11.1 W over the whole share by a fit (0.084 W a busy SM, residual sd 0.2 W),
where the hot-static term adds 79 W (0.65 x 122 W); 8, 32 and 64 warps a SM on all 132 drew 195.2, 253.5 and 276.8 W.
An SM's being on costs a seventh of the term and its temperature a fifth (experiments/thermal_leakage.py): what the
term stands for in a busy kernel is power its issued work draws that the switching model does not count, not static
power.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from shared_data import PROBES

from joulecast.data.errors import InputError
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.features import arch
from joulecast.features.power import idle_power_w

SUMMARY = "sm_spin_summary.json"
WARP = 32  # threads a warp on every NVIDIA GPU (CUDA C Programming Guide, "SIMT Architecture")


def one_warp(configs: list[dict]) -> list[dict]:
    """The configurations of one warp a block that have readings."""
    return [c for c in configs if c.get("threads") == WARP and c.get("readings")]


def busy_sm_power(configs: list[dict], sm_count: int, idle_at_clock_w: float, ratio: float) -> dict:
    """The one-warp configurations' fit of power on the busy SMs' share, and the whole-GPU configurations' warps."""
    one = one_warp(configs)
    if len(one) < 3:
        raise InputError("configs", f"{len(one)} one-warp configurations with readings: at least 3 are needed")
    share = np.array([c["sms"] / sm_count for c in one])
    power = np.array([c["power_w"] for c in one])
    slope, intercept = np.polyfit(share, power, 1)
    full = sorted((c for c in configs if c.get("sms") == sm_count and c.get("readings")),
                  key=lambda c: c["blocks"] * c["threads"])
    return {"configs": len(one), "slope_w_per_share": float(slope), "intercept_w": float(intercept),
            "w_per_sm": float(slope / sm_count), "residual_std_w": float(np.std(power - (intercept + slope * share))),
            "hot_static_w": ratio * idle_at_clock_w, "idle_at_clock_w": idle_at_clock_w, "ratio": ratio,
            "warps_per_sm": [{"warps_per_sm": c["blocks"] * c["threads"] // (WARP * sm_count), "power_w": c["power_w"],
                              "temperature_c": c["temperature_c"]} for c in full]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", nargs="?", default=str(PROBES / "h200" / "h200-sm-spin"))
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    path = Path(args.probe) / SUMMARY
    try:
        if not path.exists():
            raise InputError("probe", f"{path} not found: run python -m joulecast.data.collect.sm_spin --out DIR")
        configs = json.loads(path.read_text())["configs"]
        spec = lookup_gpu(args.gpu)
        clocks = [c["sm_clock_mhz"] for c in one_warp(configs)]
        clock = float(np.median(clocks)) if clocks else float(spec.boost_clock_mhz)
        out = busy_sm_power(configs, spec.sm_count, float(idle_power_w(spec, clock)), arch.HOT_STATIC_RATIO)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"one warp a SM, {out['configs']} configurations: power = {out['intercept_w']:.1f} W + "
          f"{out['slope_w_per_share']:.1f} W x busy share ({out['w_per_sm']:.3f} W a busy SM, residual sd "
          f"{out['residual_std_w']:.1f} W)")
    print(f"the hot-static term adds {out['hot_static_w']:.0f} W over the whole share ({out['ratio']:g} x "
          f"{out['idle_at_clock_w']:.0f} W idle at {clock:g} MHz)")
    for w in out["warps_per_sm"]:
        print(f"  {w['warps_per_sm']:3d} warps a SM on every SM: {w['power_w']:6.1f} W at {w['temperature_c']:.0f} C")
    return 0


if __name__ == "__main__":
    sys.exit(main())
