"""The softmax too wide for ATen's persistent kernel (issue 31): physics energy and time per GPU with the CTA-a-row
kernel's issue cost (`joulecast.features.kinds.softmax.ROW_BLOCK_INSTRUCTIONS`) at multiples of the persistent
kernel's, the multiple chosen leave-one-GPU-out on the GPUs with kernel-level rows.

    python experiments/softmax_rows.py [--json]

For each GPU with kernel-level rows, the multiple on the grid that minimises the other two GPUs' mean physics energy
MAPE (each GPU weighted alike) is scored on the held-out one. Beside it, on each of the A10 and A100-PCIe (EnergAIzer's
eager-attention rows, GPU-bound, bf16): measured over physics time by sequence length, whose softmax rows are wider than
1,024 columns above 1,024 tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
from gpu_transfer import KERNEL_LEVEL_GPUS
from shared_data import training_measurements

from joulecast.features import kinds
from joulecast.features.kinds import softmax
from joulecast.training.dataset import training_table

MULTIPLES = (1.0, 1.5, 2.0, 2.5, 3.0)


def row_block_cost(multiple: float) -> Any:
    """The softmax kind's CTA-a-row issue cost set to `multiple` x the persistent kernel's, for a `with` block (the
    registry replaced, so that every cached per-kind table is rebuilt)."""
    kind = kinds.REGISTRY["softmax"]
    params = dataclasses.replace(kind.streaming,
                                 row_block_instructions_per_element=multiple * softmax.PERSISTENT_INSTRUCTIONS)
    replaced = {**kinds.REGISTRY, "softmax": dataclasses.replace(kind, streaming=params)}
    return mock.patch.object(kinds, "REGISTRY", replaced)


def physics_rows(measurements: pd.DataFrame, multiple: float) -> pd.DataFrame:
    with row_block_cost(multiple):
        table = training_table(measurements)
    rows = table.rows
    return pd.DataFrame({"gpu": rows["gpu"].astype(str), "seq": rows["seq"], "dtype": rows["dtype"].astype(str),
                         "busy": table.X["busy_fraction"].to_numpy(),
                         "energy": 100 * (rows["physics_energy_j"] / rows["energy_j"] - 1),
                         "time": 100 * (rows["physics_time_s"] / rows["time_s"] - 1)})


def _mape(errors: pd.DataFrame, gpu: str) -> float:
    return float(errors.loc[errors["gpu"] == gpu, "energy"].abs().mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    measurements = training_measurements()
    by_multiple = {m: physics_rows(measurements, m) for m in MULTIPLES}
    grid = [{"multiple": m, **{g: _mape(e, g) for g in KERNEL_LEVEL_GPUS}} for m, e in by_multiple.items()]
    held = []
    for gpu in KERNEL_LEVEL_GPUS:
        others = [g for g in KERNEL_LEVEL_GPUS if g != gpu]
        best = min(MULTIPLES, key=lambda m: np.mean([_mape(by_multiple[m], g) for g in others]))
        held.append({"gpu": gpu, "chosen": best, "energy_mape": _mape(by_multiple[best], gpu),
                     "energy_mape_at_1": _mape(by_multiple[1.0], gpu)})
    wide = []
    for m in (1.0, softmax.ROW_BLOCK_INSTRUCTIONS / softmax.PERSISTENT_INSTRUCTIONS):
        e = by_multiple[m]
        ampere = e[e["gpu"].isin(["a10", "a100-pcie-40gb"]) & (e["dtype"] == "bf16") & (e["busy"] > 0.8)]
        for (gpu, seq), v in ampere.groupby(["gpu", "seq"])["time"]:
            wide.append({"multiple": m, "gpu": gpu, "seq": int(seq), "rows": len(v), "time_bias": float(v.mean())})
    out = {"shipped_multiple": softmax.ROW_BLOCK_INSTRUCTIONS / softmax.PERSISTENT_INSTRUCTIONS,
           "energy_mape_by_multiple": grid, "left_out": held, "time_bias_by_seq": wide}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print("physics energy MAPE (%) per GPU, by the CTA-a-row softmax's cost (x the persistent kernel's):")
    print(pd.DataFrame(grid).round(1).to_string(index=False))
    print("\nchosen on the other two GPUs, scored on the held-out one:")
    for r in held:
        print(f"  {r['gpu']:<16} x{r['chosen']:<4g} energy {r['energy_mape_at_1']:5.1f} -> {r['energy_mape']:5.1f} %")
    print("\nGPU-bound bf16 EnergAIzer rows: physics time over measured, mean signed error (%) by sequence length:")
    print(pd.DataFrame(wide).pivot_table(index=["gpu", "seq"], columns="multiple", values="time_bias").round(1)
          .to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
