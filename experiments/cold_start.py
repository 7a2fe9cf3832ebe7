"""An instance's cold start against the catalog's idle power: Wilkins' model loads (Hugging Face transformers, 7-70B
models on one to four A100s or a V100) as `serve`'s autoscaled starts price them.

`serve(..., autoscale=True, cold_start_s=S)` charges each instance started again S seconds at its GPUs' idle power
(`estimator.serve_windows.standby`). The Wilkins sets log each run's "model load" phase beside its requests: the
weights read from storage and copied to the GPUs, its seconds and the GPUs' NVML energy. This script reads every
NVIDIA system's load rows (each system's card as `generation_jobs.identify` names it from its inference rows; the
model-scale files, which give no memory, run on Swing's nodes), and prints a load's mean power a GPU against the
catalog idle power of its card, and the seconds each model took to load: what a start costs, and how long one is.

Run: python experiments/cold_start.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd
from generation_jobs import DATA, _inference, identify

import joulecast

FILES = ("input_token_sweep.csv", "output_token_sweep.csv", "model_scale_input_token_sweep.csv",
         "model_scale_output_token_sweep.csv")
# the model-scale files' systems (no memory column): Swing's nodes, whose A100s the inference sweeps name
SWING = ("Swing AMD+A100", "argonne-swing")


def loads() -> pd.DataFrame:
    """Every NVIDIA system's model-load rows: system, catalog GPU, model, GPUs, seconds, W a GPU and the card's
    catalog idle power."""
    cards = identify(_inference())
    swing = next(card for (system, _), card in cards.items() if system == SWING[0])
    frames = []
    for name in FILES:
        d = pd.read_csv(DATA / name)
        d = d[d["Phase"].eq("model load") & (d["System"].isin(SWING) | d["System"].str.startswith("Palmetto"))]
        memory = d["GPU Total Memory (MB)"] if "GPU Total Memory (MB)" in d else pd.Series(np.nan, d.index)
        gpu = [swing if s in SWING else cards[s, m] for s, m in zip(d["System"], memory)]
        frames.append(pd.DataFrame({"file": name, "system": d["System"].replace(SWING[1], SWING[0]), "gpu": gpu,
                                    "model": d["Model"], "gpus": d["Number of GPUs"], "seconds": d["Runtime (s)"],
                                    "power_w": d["GPU Energy (J)"] / d["Runtime (s)"] / d["Number of GPUs"]}))
    out = pd.concat(frames, ignore_index=True)
    out["idle_w"] = [joulecast.gpu(g).idle_power_w for g in out["gpu"]]
    out["ratio"] = out["power_w"] / out["idle_w"]
    return out


def summary(rows: pd.DataFrame) -> dict:
    """Per card: loads, the mean W a GPU, its catalog idle, the ratio's range and the idle power's error as a
    start's power (MAPE, bias); in all: the ratio's range and the MAPE over every load."""
    by_gpu = {}
    for gpu, g in rows.groupby("gpu"):
        error = 100 * (g["idle_w"] / g["power_w"] - 1)
        by_gpu[gpu] = {"loads": len(g), "mean_w": float(g["power_w"].mean()), "idle_w": float(g["idle_w"].iloc[0]),
                       "ratio_min": float(g["ratio"].min()), "ratio_max": float(g["ratio"].max()),
                       "idle_mape_pct": float(error.abs().mean()), "idle_bias_pct": float(error.mean()),
                       "seconds_min": float(g["seconds"].min()), "seconds_max": float(g["seconds"].max())}
    error = 100 * (rows["idle_w"] / rows["power_w"] - 1)
    return {"by_gpu": by_gpu, "loads": len(rows), "ratio_min": float(rows["ratio"].min()),
            "ratio_max": float(rows["ratio"].max()), "idle_mape_pct": float(error.abs().mean()),
            "idle_bias_pct": float(error.mean())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = loads()
    figures = summary(rows)
    if args.json:
        print(json.dumps({**figures, "rows": rows.to_dict(orient="records")}, indent=1))
        return 0
    print(f"Wilkins' model loads ({figures['loads']}), a GPU's mean power against its card's catalog idle power:")
    table = pd.DataFrame(figures["by_gpu"]).T
    print(table.round(2).to_string())
    print(f"\nall loads: {figures['ratio_min']:.2f}-{figures['ratio_max']:.2f}x the catalog idle power; the idle "
          f"power as a start's: MAPE {figures['idle_mape_pct']:.1f} %, bias {figures['idle_bias_pct']:+.1f} %")
    print("\nseconds a load took, by model and GPUs (median over the files' runs):")
    print(rows.groupby(["system", "model", "gpus"])["seconds"].median().round(1).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
