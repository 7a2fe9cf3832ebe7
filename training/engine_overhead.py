"""A serving engine's host work per decode step, measured as what the kernels' physics leaves out of a serving step.

A serving run's step (ML.ENERGY: running batch / output throughput) is the GPU's step plus whatever the engine does
between steps. Per row: the physics of its kernels alone (no engine), the extra time per running sequence and the
GPU's power during it as a multiple of its idle power. Host work takes the same time on any GPU, GPU work less on a
faster one. `data/serving_engines.yaml` holds the pooled figures of one GPU's rows
(experiments/serving_overhead.py prints them for every release and GPU).
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.features.design import physics_batch
from joulecast.features.power import idle_power_w
from joulecast.features.refs import resolve


def kernels_alone(rows: pd.DataFrame) -> pd.DataFrame:
    """Each measured row (with a `workload_ref`) plus the physics time and energy of its kernels without an engine,
    the extra time it measured (`extra_s`, and in ms per running sequence) and the power during that extra (x the
    GPU's idle power at its boost clock)."""
    out = []
    for gpu, part in rows.groupby("gpu"):
        spec = lookup_gpu(str(gpu))
        workloads = [dataclasses.replace(resolve(ref), engine=None) for ref in part["workload_ref"]]
        _, totals = physics_batch(workloads, spec, None, None)
        idle = float(idle_power_w(spec, spec.boost_clock_mhz))
        out.append(part.assign(physics_time_s=totals.time_s, physics_energy_j=totals.energy_j, idle_w=idle))
    frame = pd.concat(out)
    extra_s = frame["time_s"] - frame["physics_time_s"]
    return frame.assign(extra_s=extra_s, extra_ms_per_sequence=extra_s / frame["batch"] * 1e3,
                        power_over_idle=(frame["energy_j"] - frame["physics_energy_j"]) / (extra_s * frame["idle_w"]))


def pooled(frame: pd.DataFrame) -> dict[str, float]:
    """Rows of `kernels_alone` pooled: extra time summed over running sequences summed (s per sequence), extra energy
    summed over extra time x idle power summed (x idle power), and the range of the rows' ms per sequence."""
    return dict(rows=len(frame), batch_min=int(frame["batch"].min()), batch_max=int(frame["batch"].max()),
                host_s_per_sequence=float(frame["extra_s"].sum() / frame["batch"].sum()),
                per_row_ms_min=float(frame["extra_ms_per_sequence"].min()),
                per_row_ms_max=float(frame["extra_ms_per_sequence"].max()),
                power_over_idle=float((frame["energy_j"] - frame["physics_energy_j"]).sum()
                                      / (frame["extra_s"] * frame["idle_w"]).sum()))
