"""Onboarding study: how well does joulecast know a GPU it has never measured, and how fast does that improve?

For each GPU with data: train without it and audit zero-shot (spec features only); then add 10 %, 25 % and 50 % of
its rows (random, several seeds) and audit again on the rows not added. Prints the figures and draws error against
the share of rows added.

Usage: python experiments/onboarding.py [--seeds 3] [--plot onboarding.png] [--min-rows 8] [--no-own]
                                       [--fractions 0,0.1,0.25,0.5]  (--fractions 0: zero-shot alone)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from shared_data import EXTERNAL

from joulecast.data.importers import import_source
from joulecast.data.store import load_store
from joulecast.training.audit import audit, scored_rows
from joulecast.training.dataset import training_table
from joulecast.training.residual import PARAM_GRID, ResidualModel

OWN = Path(__file__).resolve().parents[1] / "data" / "measurements"  # the project's own collections (the H200)
FRACTIONS = (0.0, 0.10, 0.25, 0.50)
# One fixed setting of the grid (depth 4, the one grouped CV picks on this data) instead of the whole grid:
# 4 x seeds fits per GPU.
PARAMS = next(p for p in PARAM_GRID if p["max_depth"] == 4)


def _fit(rows: pd.DataFrame, X: pd.DataFrame, table, mask: np.ndarray) -> ResidualModel:
    y = {"time": table.y_time[mask], "energy": table.y_energy[mask]}
    return ResidualModel().fit(X[mask].reset_index(drop=True), y, rows.loc[mask, "model_family"].astype(str).to_numpy(),
                               rows.loc[mask, "gpu"], grid=[PARAMS], reach=table.host_reach(mask))


def study(seeds: int, min_rows: int, own: bool = True, fractions: tuple[float, ...] = FRACTIONS) -> pd.DataFrame:
    sets = [import_source("energaizer", EXTERNAL / "energaizer-artifact"), import_source("mlenergy", EXTERNAL)]
    measurements = pd.concat([*sets, load_store(OWN)] if own else sets, ignore_index=True)
    table = training_table(measurements)
    rows, X = table.rows, table.X
    counts = rows["gpu"].value_counts()
    results = []
    for gpu in sorted(counts[counts >= min_rows].index):
        on_gpu = (rows["gpu"] == gpu).to_numpy()
        index = np.flatnonzero(on_gpu)
        for fraction in fractions:
            for seed in range(1 if fraction == 0 else seeds):
                rng = np.random.default_rng(seed)
                added = rng.choice(index, size=max(1, round(fraction * len(index))), replace=False) if fraction else []
                fit = ~on_gpu
                fit[added] = True
                test = on_gpu & ~fit
                model = _fit(rows, X, table, fit)
                t_rows, t_X = rows[test].reset_index(drop=True), X[test].reset_index(drop=True)
                frame = scored_rows(t_rows, t_X, model.predict(t_X, t_rows["gpu"]), model)
                s = audit(frame).summary
                results.append(dict(gpu=gpu, fraction=fraction, seed=seed, added=len(added), tested=int(test.sum()),
                                    energy_mape=s["energy_mape"], time_mape=s["time_mape"], power_mape=s["power_mape"],
                                    coverage=s["coverage"], mean_width=s["mean_width"],
                                    spec_only=float((frame["flags"] == "spec-only").mean() * 100)))
                print(f"  {gpu:<16} {fraction:>4.0%} seed {seed}: energy {s['energy_mape']:6.2f} %, "
                      f"power {s['power_mape']:6.2f} %, coverage {s['coverage']:5.1f} %", flush=True)
    return pd.DataFrame(results)


def plot(summary: pd.DataFrame, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, column, label in zip(axes, ("energy_mape", "power_mape", "coverage"),
                                 ("energy MAPE (%)", "power MAPE (%)", "90 % interval coverage (%)")):
        for gpu, part in summary.groupby("gpu"):
            ax.errorbar(part["fraction"] * 100, part[(column, "mean")], yerr=part[(column, "std")].fillna(0),
                        marker="o", capsize=3, label=str(gpu))
        ax.set(xlabel="share of the GPU's rows added to training (%)", ylabel=label)
    axes[2].axhline(90, color="k", linestyle="--", linewidth=0.8)
    axes[0].legend(fontsize=8)
    fig.suptitle("onboarding a GPU: held-out error against the data added (0 % = zero-shot from spec features)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _fractions(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated numbers in [0, 1), got {text!r}") from None
    if not values or any(not 0 <= v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"each share must be in [0, 1) (0 = zero-shot), got {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="random draws per share of rows added")
    parser.add_argument("--min-rows", type=int, default=8, help="GPUs with fewer usable rows are skipped")
    parser.add_argument("--plot", default="onboarding.png", help="where to save the figure")
    parser.add_argument("--no-own", action="store_true", help="leave the project's own collections (the H200) out")
    parser.add_argument("--fractions", type=_fractions, default=FRACTIONS,
                        help="shares of a GPU's rows to add, comma-separated (default 0,0.1,0.25,0.5; 0 = zero-shot)")
    args = parser.parse_args()
    results = study(args.seeds, args.min_rows, own=not args.no_own, fractions=args.fractions)
    columns = ["energy_mape", "time_mape", "power_mape", "coverage", "mean_width", "spec_only"]
    summary = results.groupby(["gpu", "fraction"])[columns].agg(["mean", "std"]).reset_index()
    flat = results.groupby(["gpu", "fraction"]).agg(added=("added", "mean"), tested=("tested", "mean"),
                                                      **{c: (c, "mean") for c in columns}).reset_index()
    pd.set_option("display.width", 160)
    print("\nheld-out figures on each GPU (mean over seeds; % units; fraction 0 = zero-shot, every row flagged spec-only):")
    print(flat.round(2).to_string(index=False))
    plot(summary, args.plot)
    print(f"\nfigure: {args.plot}")


if __name__ == "__main__":
    main()
