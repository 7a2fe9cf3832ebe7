"""How many trees the residual needs: leave-one-model-out accuracy on EnergAIzer's A10 / A100 rows against the trees
an estimate walks, for hyper-parameter sets with bags of five boosters as shipped (or --bag N). Issue 26: the trees a
row walks set the speed of `estimate_many`; the shipped model walks 6,000.

For each set (max_depth, learning_rate, n_estimators; `shipped`: the shipped grid, PARAM_GRID, with its selection):
energy and power MAPE and 90 % energy-interval coverage per GPU, each model family predicted by a residual trained
without it (`leave_one_model_out.held_out_frame`; with --seeds N, the mean over tree seeds 0 to N - 1), and the
trees of one walk (four models of a bag: time and energy points, time and energy bands of two targets each, the
bands with a quarter of the rounds, `joulecast.training.residual.band_params`) with the
CPU time the numpy walk (`joulecast.estimator.tree_arrays`) takes a row over 2,048 rows, beside a plain-numpy
reference pass timed in the same run.

Usage: python experiments/model_size.py [PATH to energaizer-artifact] [--sets shipped 4,0.3,100 ...] [--seeds N]
       [--bag N] [--folds N] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import leave_one_model_out  # a sibling script: Python puts this folder first on the path
import numpy as np
import pandas as pd
from shared_data import EXTERNAL

from joulecast.data.importers import import_source
from joulecast.training.dataset import training_table
from joulecast.training.evaluate import error_table
from joulecast.training.residual import BAG_SEEDS, PARAM_GRID

DEFAULT_SETS = ("shipped", "4,0.3,100", "4,0.3,60")


def walk_us_per_row(table, grid: list[dict], bag: int, rows: int = 2048) -> tuple[int, float]:
    """(trees a walk, CPU microseconds a row for the numpy walk of them) of a model of `bag` boosters a bag, fitted on
    all rows."""
    from joulecast.training.residual import ResidualModel

    X = table.X
    y = {"time": table.y_time, "energy": table.y_energy}
    model = ResidualModel(bag=bag, folds=2).fit(X, y, table.rows["model_family"].to_numpy(), table.rows["gpu"],
                                                grid=grid)
    arrays = model._tree_arrays(False)  # the arrays the estimator walks
    values = np.ascontiguousarray(X[model.features].to_numpy(np.float32)[np.arange(rows) % len(X)])
    values = values + np.random.default_rng(0).normal(0, 1e-3, values.shape).astype(np.float32)  # distinct rows
    start = time.process_time()
    arrays.predict_members(values)
    return len(arrays.value) >> arrays.depth, 1e6 * (time.process_time() - start) / rows


def grid_of(text: str) -> list[dict]:
    """`shipped` (PARAM_GRID) or one set, "max_depth,learning_rate,n_estimators"."""
    if text == "shipped":
        return [dict(p) for p in PARAM_GRID]
    depth, rate, n = text.split(",")
    return [{**PARAM_GRID[-1], "max_depth": int(depth), "learning_rate": float(rate), "n_estimators": int(n)}]


def main() -> None:
    default = EXTERNAL / "energaizer-artifact"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=str(default))
    parser.add_argument("--sets", nargs="+", default=list(DEFAULT_SETS), help="max_depth,learning_rate,n_estimators")
    parser.add_argument("--seeds", type=int, default=1, help="tree seeds to average over (default 1)")
    parser.add_argument("--bag", type=int, default=BAG_SEEDS, help=f"boosters a bag (default {BAG_SEEDS}, as shipped)")
    parser.add_argument("--folds", type=int, default=None, help="cross-validation folds (default as shipped)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    table = training_table(import_source("energaizer", args.path))
    ref = np.random.default_rng(0).uniform(1, 2, (2048, 12_000)).astype(np.float32)
    start = time.process_time()
    np.cumsum(ref, axis=1, dtype=np.float32)  # reference: one float32 pass over 2,048 rows x 12,000 trees
    reference_us = 1e6 * (time.process_time() - start) / 2048
    out = []
    for text in args.sets:
        grid = grid_of(text)
        tables = [error_table(leave_one_model_out.held_out_frame(table, seed=s, progress=False, grid=grid,
                                                                 bag=args.bag, folds=args.folds), "gpu")
                  .set_index("value") for s in range(args.seeds)]
        by_gpu = sum(t[["energy_mape", "power_mape", "coverage"]] for t in tables) / len(tables)
        trees, walk_us = walk_us_per_row(table, grid, args.bag)
        row = {"set": text, "trees_a_walk": trees, "walk_cpu_us_a_row": round(walk_us, 1)}
        for gpu, r in by_gpu.iterrows():
            row |= {f"{gpu}_energy_mape": r["energy_mape"], f"{gpu}_power_mape": r["power_mape"],
                    f"{gpu}_coverage": r["coverage"]}
        out.append(row)
        if not args.json:
            print(f"  {text} done", flush=True)
    if args.json:
        print(json.dumps({"sets": out, "bag": args.bag, "seeds": args.seeds,
                          "reference_cumsum_us_a_row": reference_us}, indent=1, default=float))
        return
    pd.set_option("display.width", 160)
    print(f"\nleave-one-model-out by hyper-parameter set (bags of {args.bag}, mean over tree seeds 0-{args.seeds - 1}; "
          f"MAPE and coverage in %):\n{pd.DataFrame(out).round(2).to_string(index=False)}")
    print(f"reference: a float32 running sum over 12,000 values, {reference_us:.1f} us CPU a row")


if __name__ == "__main__":
    main()
