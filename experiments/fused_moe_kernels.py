"""A mixture-of-experts layer's kernels against published times: physics' time of one MoE block (the tokens' top-k,
the slots sorted by expert, the two grouped GEMMs over the active experts, SiLU-and-mul, the outputs summed:
`features.lower_transformers.expert_block`, the router's GEMM left out as the benchmarks give its logits) beside
the times vLLM's and SGLang's fused_moe benchmarks printed in their pull requests (`data/published/
fused_moe_kernels.yaml`, each set's source there), per set and number of tokens, and the ratio measured over
physics by band of tokens: few (1-4, where a step of one request lands), mid (8-256, a decode step's batch) and many
(512 and up, a prefill's chunk).

    python experiments/fused_moe_kernels.py [--json]

No serving or training row isolates these kernels, so this is the MoE physics' only check at kernel level. Stated
approximations: each benchmark's kernel configuration (tile sizes, tuned or default) is not modelled, physics
prices every GEMM by the same tiles; the experts a token count runs are drawn alike and apart
(`active_experts`), as the benchmarks' random router logits draw them; the default clock and power limit.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd
import yaml
from shared_data import PUBLISHED

from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.kernels import stack
from joulecast.features.kernel_table import kernel_columns
from joulecast.features.lower_transformers import expert_block
from joulecast.features.lowering import resolve_model
from joulecast.features.physics import analyze_arrays
from joulecast.features.train_step import shard_config

SETS = PUBLISHED / "fused_moe_kernels.yaml"
BANDS = ((1, 4, "few (1-4)"), (8, 256, "mid (8-256)"), (512, 1 << 30, "many (512+)"))


def rows() -> pd.DataFrame:
    """Every published (set, tokens, microseconds) with its set's fields."""
    sets = yaml.safe_load(SETS.read_text())["sets"]
    return pd.DataFrame([dict(set=s["name"], model=s["model"], tp=int(s["tp"]), gpu=s["gpu"], dtype=s["dtype"],
                              config=s["config"], tokens=int(t), measured_us=float(us))
                         for s in sets for t, us in s["us"].items()])


def physics_us(table: pd.DataFrame) -> np.ndarray:
    """Physics' time of each row's MoE block (microseconds): a set's token counts in one pass of physics."""
    out = np.empty(len(table))
    for (model, tp, gpu, dtype), part in table.groupby(["model", "tp", "gpu", "dtype"], sort=False):
        shard = shard_config(resolve_model(model)[0], tp=tp)
        block = {i: kernel_columns([r for r in expert_block(shard, t, dtype) if r["op"] != "linear"])
                 for i, t in enumerate(part["tokens"])}  # not the router's GEMM: the benchmarks give its logits
        _, totals = analyze_arrays(stack(block), lookup_gpu(gpu))
        out[table.index.get_indexer(part.index)] = 1e6 * totals.time_s
    return out


def score(table: pd.DataFrame) -> pd.DataFrame:
    scored = table.assign(physics_us=physics_us(table))
    return scored.assign(ratio=scored["measured_us"] / scored["physics_us"])


def summary(scored: pd.DataFrame) -> pd.DataFrame:
    """Per set and band of tokens: rows, the median and range of measured over physics, and the time's MAPE."""
    parts = []
    for low, high, band in BANDS:
        part = scored[(scored["tokens"] >= low) & (scored["tokens"] <= high)]
        for name, g in part.groupby("set", sort=False):
            parts.append(dict(set=name, gpu=g["gpu"].iloc[0], dtype=g["dtype"].iloc[0], band=band, rows=len(g),
                              ratio_median=float(g["ratio"].median()), ratio_min=float(g["ratio"].min()),
                              ratio_max=float(g["ratio"].max()),
                              time_mape=float(100 * (1 / g["ratio"] - 1).abs().mean())))
    return pd.DataFrame(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scored = score(rows())
    table = summary(scored)
    if args.json:
        print(json.dumps(dict(summary=table.to_dict(orient="records"), rows=scored.to_dict(orient="records"))))
        return 0
    print("fused_moe: one MoE layer's kernels, published times over physics' (ratio > 1: physics reads short):")
    print(table.round(2).to_string(index=False))
    print("\nper token count (us):")
    print(scored[["set", "tokens", "measured_us", "physics_us", "ratio"]].round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
