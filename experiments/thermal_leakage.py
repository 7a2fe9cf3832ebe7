"""Static power against die temperature (issue 31), from a collection of the `h200-thermal` plan: the samples of its
spinning-kernel windows, taken while the die cools from a dense GEMM at one SM clock and almost no switching power,
fitted as power = a + slope * temperature. Beside it, the slope the hot-static term would need
(`joulecast.features.arch`: a busy die's static power idle(f) * (1 + ratio * u_sm), with the ratio the leave-one-GPU-
out fit gives, 0.65): ratio * idle(f) over the GEMM's temperature rise above the idle-before window's.

    python experiments/thermal_leakage.py STORE [--gpu h200] [--collection h200-thermal] [--ratio 0.65] [--json]

STORE is a measurement store (a `joulecast collect --store` folder); nothing here is fitted to training rows. The
spin samples of the first `SETTLE_S` are left out: the meter's power lags the load (on the H200 it read 286 W over
the spin's first 0.2 s and 167 W to 0.4 s, where the GEMM before had drawn 692 W, then 124 W).

Measured on 2026-12-04 (`data/probes/h200/h200-thermal`, a lent H200, clocks and 700 W limit as found): the GEMM
held the die at 62 C (692 W, 1,440 MHz: power-capped); within 0.4 s of its end the die read 43 C, and it cooled to
38 C over the 60 s of spinning at 1,980 MHz while power fell from 124 to 120.5 W: 0.72 W/K (4,136 samples after the
first second, 38-42 C, residual sd 0.3 W). The hot-static term implies 3.37 W/K (0.65 x 122 W over 62 - 38 C):
leakage accounts for a fifth of it (17 of 79 W over the GEMM's 24 K). The die's temperature follows its power within
a second, so a row's temperature reads its power, not a thermal history, and the shortfall that tracks it is power
that scales with load, as the hot-static term models it, not leakage: a temperature-dependent static term is not
supported.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd

from joulecast.data import store
from joulecast.data.collect.meters import POWER_SETTLE_S as SETTLE_S
from joulecast.data.errors import InputError
from joulecast.data.gpus import GpuSpec
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.features import arch
from joulecast.features.power import idle_power_w

SPIN, HEAT, IDLE = "wait/spin/", "gemm/", "idle-before/"
MIN_SAMPLES = 20


def leakage(samples: pd.DataFrame, spec: GpuSpec, ratio: float) -> dict:
    """The fit of power on temperature over the spin windows' samples at their most common SM clock, and the slope
    the hot-static term implies there."""
    spin = samples[samples["measurement_id"].astype(str).str.startswith(SPIN)]
    if spin.empty:
        raise InputError("samples", f"no spinning-kernel windows ({SPIN}*): is this an h200-thermal collection?")
    settled = spin["time_s"].to_numpy(float) >= spin["time_s"].min() + SETTLE_S
    first_settled_c = float(spin.loc[settled, "temperature_c"].iloc[0]) if settled.any() else float("nan")
    clock = float(spin["sm_clock_mhz"].mode().iloc[0])
    spin = spin[settled & (spin["sm_clock_mhz"] == clock).to_numpy()]
    idle_at_clock_w = float(idle_power_w(spec, clock))
    if len(spin) < MIN_SAMPLES or spin["temperature_c"].nunique() < 3:
        raise InputError("samples", f"{len(spin)} spin samples over {spin['temperature_c'].nunique()} temperatures at "
                                    f"{clock:g} MHz: at least {MIN_SAMPLES} over 3 temperatures are needed")
    slope, intercept = np.polyfit(spin["temperature_c"].to_numpy(float), spin["power_w"].to_numpy(float), 1)
    residual = spin["power_w"].to_numpy(float) - (intercept + slope * spin["temperature_c"].to_numpy(float))

    def mean_temperature(prefix: str) -> float:
        part = samples[samples["measurement_id"].astype(str).str.startswith(prefix)]
        return float(part["temperature_c"].mean()) if len(part) else float("nan")

    heated, cool = mean_temperature(HEAT), mean_temperature(IDLE)
    return {"settle_s": SETTLE_S, "first_settled_c": first_settled_c, "hot_static_w": ratio * idle_at_clock_w,
            "leakage_over_rise_w": float(slope * (heated - cool)), "sm_clock_mhz": clock, "samples": int(len(spin)),
            "slope_w_per_k": float(slope),
            "intercept_w": float(intercept), "residual_std_w": float(residual.std()),
            "temperature_c": [float(spin["temperature_c"].min()), float(spin["temperature_c"].max())],
            "power_w": [float(spin["power_w"].min()), float(spin["power_w"].max())],
            "gemm_temperature_c": heated, "idle_temperature_c": cool, "idle_at_clock_w": idle_at_clock_w,
            "ratio": ratio, "implied_slope_w_per_k": ratio * idle_at_clock_w / (heated - cool)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--collection", default="h200-thermal")
    parser.add_argument("--ratio", type=float, default=arch.HOT_STATIC_RATIO,
                        help="the hot-static ratio to compare with (default: physics')")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        out = leakage(store.load_samples(args.store, args.gpu, args.collection), lookup_gpu(args.gpu), args.ratio)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{out['samples']} spin samples (the first {out['settle_s']:g} s left out) at {out['sm_clock_mhz']:g} MHz, "
          f"{out['temperature_c'][0]:.0f}-{out['temperature_c'][1]:.0f} C, "
          f"{out['power_w'][0]:.0f}-{out['power_w'][1]:.0f} W:")
    print(f"  power = {out['intercept_w']:.1f} W + {out['slope_w_per_k']:.2f} W/K x temperature "
          f"(residual sd {out['residual_std_w']:.1f} W)")
    print(f"  the hot-static term at ratio {out['ratio']:g} implies {out['implied_slope_w_per_k']:.2f} W/K "
          f"({out['ratio']:g} x {out['idle_at_clock_w']:.0f} W idle over the GEMM's {out['gemm_temperature_c']:.0f} C "
          f"against {out['idle_temperature_c']:.0f} C idle)")
    print(f"  leakage over the GEMM's rise: {out['leakage_over_rise_w']:.0f} W of the hot-static term's "
          f"{out['hot_static_w']:.0f} W; the die read {out['first_settled_c']:.0f} C {out['settle_s']:g} s after "
          f"the GEMM's {out['gemm_temperature_c']:.0f} C")
    return 0


if __name__ == "__main__":
    sys.exit(main())
