"""Power against the number of busy SMs at almost no switching work (issue 31: the H200 "at several loads").

A kernel whose blocks each spin on the SM clock (`clock64`) keeps `blocks` SMs active, one or more warps each, while
issuing nothing but its polling loop (a clock read, a compare, a branch); the GPU holds its maximum clock
(h200-thermal: 1,980 MHz). Power against the active share of SMs, at one clock and a cool die, is what physics' hot-
static term idle(f) * (1 + ratio * u_sm) models (features/arch.py); its slope over u_sm says whether the term is SM
activity (a slope near ratio * idle(f)) or not.

    python -m joulecast.data.collect.sm_spin --out DIR [--window-s 4] [--gpu-index 0]

Writes DIR/sm_spin_samples.csv (every meter reading, 100 Hz asked) and DIR/sm_spin_summary.json (a line a
configuration, the first `SETTLE_S` of each left out; the card's machine fields). Reads the GPU through NVML and
changes none of its settings. Needs CuPy (the lent machines have it) for the kernel, which NVRTC compiles there.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from joulecast.data.collect.meters import POWER_SETTLE_S as SETTLE_S
from joulecast.data.collect.meters import Meter, counter_fit_power_w

SPIN_S = 0.05  # one launch's spin; launches follow back to back
SAMPLE_S = 0.01
# (blocks, threads a block): a context with no kernel, then one warp a block on 1 to 132 SMs (the H200's 132,
# data/gpus/h200.yaml), then more warps a block on all of them
CONFIGS = ((0, 0), (1, 32), (16, 32), (33, 32), (66, 32), (99, 32), (132, 32), (132, 256), (132, 1024), (264, 1024))

KERNEL = r"""
extern "C" __global__ void spin(long long cycles, int* smids) {
    long long start = clock64();
    if (threadIdx.x == 0) { unsigned int id; asm volatile("mov.u32 %0, %%smid;" : "=r"(id)); smids[blockIdx.x] = id; }
    while (clock64() - start < cycles) { }
}
"""

# launch(blocks, threads, seconds) starts one spin and returns (done, sm_ids): done() says whether it finished
Launcher = Callable[[int, int, float], tuple[Callable[[], bool], Callable[[], set[int]]]]


def cupy_launcher(sm_clock_mhz: float) -> Launcher:
    """The spin kernel through CuPy, its cycles set from the SM clock read before it."""
    import cupy
    import numpy as np

    kernel = cupy.RawKernel(KERNEL, "spin")

    def launch(blocks: int, threads: int, seconds: float):
        smids = cupy.full(blocks, -1, dtype=cupy.int32)
        kernel((blocks,), (threads,), (np.int64(seconds * sm_clock_mhz * 1e6), smids))
        stream = cupy.cuda.get_current_stream()
        return (lambda: stream.done), (lambda: set(int(i) for i in smids.get()))
    return launch


def measure(meter: Meter, launch: Launcher, configs: Sequence[tuple[int, int]] = CONFIGS, window_s: float = 4.0,
            sleep: Callable[[float], None] = time.sleep) -> tuple[list[dict], list[dict]]:
    """Each configuration for `window_s`, launches back to back, the meter read every `SAMPLE_S`; returns the
    samples and a summary a configuration."""
    samples, summary = [], []
    for blocks, threads in configs:
        label, start, sms = f"b{blocks}/t{threads}", meter.time_s(), set()
        while meter.time_s() - start < window_s:
            done, sm_ids = launch(blocks, threads, SPIN_S) if blocks else ((lambda: True), set)
            while True:
                sm, mem = meter.clocks_mhz()
                samples.append({"config": label, "blocks": blocks, "threads": threads, "time_s": meter.time_s(),
                                "energy_j": meter.energy_j(), "power_w": meter.power_w(), "sm_clock_mhz": sm,
                                "memory_clock_mhz": mem, "temperature_c": meter.temperature_c()})
                if done() and (blocks or meter.time_s() - start >= window_s):
                    break
                sleep(SAMPLE_S)
            sms |= sm_ids()
        summary.append(summarise(samples, label, start + SETTLE_S, blocks, threads, len(sms)))
    return samples, summary


def summarise(samples: Sequence[dict], label: str, settled_from_s: float, blocks: int, threads: int,
              sms: int) -> dict:
    """One configuration's settled readings: mean power, the energy counter's slope, clocks and temperature."""
    part = [s for s in samples if s["config"] == label and s["time_s"] >= settled_from_s]
    if not part:
        return {"config": label, "blocks": blocks, "threads": threads, "sms": sms, "readings": 0}
    times, energy = [s["time_s"] for s in part], [s["energy_j"] for s in part]
    return {"config": label, "blocks": blocks, "threads": threads, "sms": sms, "readings": len(part),
            "power_w": statistics.fmean(s["power_w"] for s in part),
            "counter_power_w": counter_fit_power_w(times, energy),
            "sm_clock_mhz": statistics.median(s["sm_clock_mhz"] for s in part),
            "temperature_c": statistics.fmean(s["temperature_c"] for s in part)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--window-s", type=float, default=4.0)
    parser.add_argument("--gpu-index", type=int, default=0)
    args = parser.parse_args()
    from joulecast.data.collect.nvml_meter import open_meter

    meter = open_meter(args.gpu_index)
    # the spin's cycles at the H200's maximum SM clock (1,980 MHz, data/gpus/h200.yaml) or the clock read, the higher:
    # a longer spin, never a shorter, where the clock is lower
    launch = cupy_launcher(max(meter.clocks_mhz()[0], 1980.0))
    samples, summary = measure(meter, launch, window_s=args.window_s)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sm_spin_samples.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(samples[0]))
        writer.writeheader()
        writer.writerows(samples)
    card = {"device": meter.describe(), "power_limit_w": meter.power_limit_w(), "window_s": args.window_s,
            "settle_s": SETTLE_S, "spin_s": SPIN_S, "configs": summary}
    (out / "sm_spin_summary.json").write_text(json.dumps(card, indent=1))
    for row in summary:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
