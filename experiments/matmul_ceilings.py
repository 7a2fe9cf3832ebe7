"""The fastest matmul each GPU is measured to reach beside physics' rate for that shape: the Maximum Achievable Matmul
FLOPS table (`data/published/matmul_ceilings.yaml`, each row's source there) against physics' time of its best shape
at the card's power limit, and, for scale, the fastest square GEMMs joulecast's own H200 collection held in steady
state (`data/measurements/h200`, 4,096-16,384 a side).

    python experiments/matmul_ceilings.py [--json]

MAMF times 100 matmuls after 50 warmups a shape: a best shape runs 10-20 ms in all, short of the window a power
limit is held over, so its figure is an upper bound on what a card sustains under its cap, not that rate. The H200
collection's square GEMMs, timed over windows of a second or more, ran 663-676 TFLOP/s in bf16 and 1,127-1,238 in fp8
at 680-683 W (their clocks 1,285-1,500 MHz): 0.85 of MAMF's Hopper bf16 row and 0.85 of its H200 fp8 row; physics
reads those rows' time within 3-11 %. So physics over MAMF below 1 is expected; how far below is the check: a GPU
whose ratio stands well apart from the others' has a power model that throttles its dense GEMMs more (or less) than
the GPUs physics was fitted on. Approximations: one catalog card for each table row (the A100 rows' memory sizes are
not given; the catalog's 40 GB cards), the row's power limit where it names one (the GH200's 900 W), else the
catalog's.
"""

from __future__ import annotations

import argparse
import json
import sys

import pandas as pd
import yaml
from shared_data import MEASUREMENTS, PUBLISHED

from joulecast.data.store import load_store
from joulecast.estimator.api import estimate
from joulecast.features.refs import resolve

TABLE = PUBLISHED / "matmul_ceilings.yaml"


def rows() -> pd.DataFrame:
    return pd.DataFrame(yaml.safe_load(TABLE.read_text())["rows"])


def score(table: pd.DataFrame) -> pd.DataFrame:
    """Each row with physics' TFLOP/s for its shape at its power limit, the power physics gives it, and physics over
    measured."""
    out = []
    for r in table.itertuples():
        limit = getattr(r, "power_limit_w", None)
        est = estimate(resolve(f"kernel:gemm?m={r.m}&n={r.n}&k={r.k}&dtype={r.dtype}"), r.gpu, estimator="physics",
                       power_limit_w=None if pd.isna(limit) else float(limit))
        physics = 2.0 * r.m * r.n * r.k / est.time_s / 1e12
        out.append(dict(gpu=r.gpu, dtype=r.dtype, shape=f"{r.m}x{r.n}x{r.k}", measured_tflops=r.tflops,
                        physics_tflops=physics, physics_power_w=est.power_w, power_limit_w=est.power_limit_w,
                        physics_over_measured=physics / r.tflops))
    return pd.DataFrame(out)


def steady_h200() -> pd.DataFrame:
    """The H200 collection's square GEMMs of 4,096 or more a side: measured TFLOP/s and power, by precision."""
    store = load_store(MEASUREMENTS)
    store = store[store["gpu"].astype(str) == "h200"]
    gemms = store[store["workload_ref"].astype(str).str.match(r"kernel:gemm\?m=(\d+)&n=\1&k=\1&")]
    side = gemms["workload_ref"].astype(str).str.extract(r"m=(\d+)")[0].astype(int).to_numpy()
    gemms = gemms.assign(tflops=2.0 * side.astype(float) ** 3 / gemms["time_s"].to_numpy(float) / 1e12)[side >= 4096]
    return gemms.groupby("dtype").agg(rows=("tflops", "size"), tflops_min=("tflops", "min"),
                                      tflops_max=("tflops", "max"), power_w_max=("power_w", "max")).reset_index()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tables = {"rows": (score(rows()), "Maximum Achievable Matmul FLOPS (short runs) against physics at the card's "
                                      "power limit (TFLOP/s):"),
              "h200_steady": (steady_h200(), "joulecast's H200 collection, square GEMMs of 4,096-16,384 a side held "
                                             "in steady state (TFLOP/s, W):")}
    if args.json:
        print(json.dumps({name: frame.to_dict(orient="records") for name, (frame, _) in tables.items()}))
        return 0
    print("\n\n".join(f"{title}\n{frame.round(2).to_string(index=False)}" for frame, title in tables.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
