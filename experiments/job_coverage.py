"""Interval coverage of whole jobs (issue 27), per kind of job and GPU: how often the 90 % energy interval of a
`generate`, `serve` or `train-run` estimate holds the measured energy, on every measured job set scored elsewhere here.

    python experiments/job_coverage.py [--kinds generate,serve,train-run] [--input-len 192] [--json]

Rows and assumptions are each set's script's own: Wilkins' generations (`generation_jobs.py`, at the default host
dispatch), ML.ENERGY v2 and v3 serving runs (`serving_jobs.py`, every configuration at the assumed mean prompt
`--input-len`: 192 tokens by default, the longest that v2's batches leave room for; the quantity is J an output
token), and Zeus' power-limit sweeps of both its networks (`zeus_power_limits.py`: BERT-base on SQuAD and ResNet-50
on ImageNet, energy an epoch). Per kind and GPU (then per kind, set and GPU; `--json`: `by_gpu` and `by_set`): the
rows, the share inside the interval and the shares measured below and above it (which side the misses fall: a point
that leans), the mean width (% of the estimate), and p_in_target (`training.evaluate.coverage_p_value`): how likely a
count as far from the 86-94 % target band would be, were the true coverage in it, the rows taken as independent
(they are not: a configuration's rows share its model's and workload's offset, so a small p overstates the evidence
against the band).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd
import generation_jobs
import serving_jobs
import zeus_power_limits
from joulecast.estimator.loading import load_estimator
from joulecast.training.evaluate import COVERAGE_TARGET, coverage_p_value

KINDS = ("generate", "serve", "train-run")


def generate_rows(residual) -> pd.DataFrame:
    f = generation_jobs.score(generation_jobs.rows(), residual, {})
    return pd.DataFrame(dict(kind="generate", gpu=f["gpu"], set="wilkins", measured=f["measured_energy_j"],
                             point=f["predicted_energy_j"], lo=f["energy_lo_j"], hi=f["energy_hi_j"]))


def serve_rows(residual, input_len: int) -> pd.DataFrame:
    f = serving_jobs.score(serving_jobs.rows(), input_len, residual)
    return pd.DataFrame(dict(kind="serve", gpu=f["gpu"], set=f["release"], measured=f["measured_j_per_token"],
                             point=f["predicted_j_per_token"], lo=f["j_per_token_lo"], hi=f["j_per_token_hi"]))


def train_rows(residual) -> pd.DataFrame:
    """Zeus' epochs of both its networks (BERT on SQuAD, ResNet-50 on ImageNet), each its own set."""
    parts = []
    for network in zeus_power_limits.NETWORKS:
        for token, (gpu, _, dtype) in zeus_power_limits.GPUS.items():
            f = zeus_power_limits.predict(zeus_power_limits.rows(token, network), gpu, dtype, residual, network)
            parts.append(pd.DataFrame(dict(kind="train-run", gpu=gpu, set=f"zeus-{network}", measured=f["energy_j"],
                                           point=f["pred_energy_j"], lo=f["energy_lo_j"], hi=f["energy_hi_j"])))
    return pd.concat(parts, ignore_index=True)


def coverage(frame: pd.DataFrame, by_set: bool = False) -> pd.DataFrame:
    """Per kind of job and GPU, then per kind over every GPU (`by_set`: per kind, set and GPU instead): rows,
    coverage, the shares below and above, mean width, and p_in_target."""
    frame = frame.assign(inside=(frame["lo"] <= frame["measured"]) & (frame["measured"] <= frame["hi"]),
                         below=frame["measured"] < frame["lo"], above=frame["measured"] > frame["hi"],
                         width_pct=100 * (frame["hi"] - frame["lo"]) / frame["point"])
    out = []
    if by_set:
        groups = [((kind, gpu), part) for (kind, _, gpu), part in frame.groupby(["kind", "set", "gpu"])]
    else:
        groups = [*frame.groupby(["kind", "gpu"]), *(((k, "all"), p) for k, p in frame.groupby("kind"))]
    for keys, part in groups:
        kind, gpu = keys
        covered = int(part["inside"].sum())
        out.append(dict(kind=kind, gpu=gpu, sets=",".join(sorted(set(part["set"]))), rows=len(part),
                        coverage_pct=100 * covered / len(part),
                        measured_below_pct=100 * float(part["below"].mean()),
                        measured_above_pct=100 * float(part["above"].mean()),
                        mean_width_pct=float(part["width_pct"].mean()),
                        p_in_target=coverage_p_value(covered, len(part))))
    return pd.DataFrame(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="kinds of job, comma-separated")
    parser.add_argument("--input-len", type=int, default=192, help="serving's assumed mean prompt (tokens)")
    parser.add_argument("--estimator", default=None, help="as for estimate (default: the shipped model)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        print(f"--kinds: unknown {unknown[0] if unknown else '(none)'!r}; allowed: {', '.join(KINDS)}",
              file=sys.stderr)
        return 2
    residual = load_estimator(args.estimator)
    if residual is None:
        print("--estimator: physics alone has no interval; give a trained model", file=sys.stderr)
        return 2
    makers = {"generate": lambda: generate_rows(residual), "serve": lambda: serve_rows(residual, args.input_len),
              "train-run": lambda: train_rows(residual)}
    frame = pd.concat([makers[k]() for k in kinds], ignore_index=True)
    table, by_set = coverage(frame), coverage(frame, by_set=True)
    if args.json:
        print(json.dumps({"by_gpu": table.replace({np.nan: None}).to_dict(orient="records"),
                          "by_set": by_set.replace({np.nan: None}).to_dict(orient="records")}, indent=1))
        return 0
    shown = lambda t: t.to_string(index=False, float_format=lambda v: f"{v:.3g}" if v < 0.01 else f"{v:.1f}")  # noqa
    print(f"90 % energy interval of whole jobs, per kind and GPU (serving at {args.input_len}-token prompts); "
          f"target {COVERAGE_TARGET[0]:.0f}-{COVERAGE_TARGET[1]:.0f} %:")
    print(shown(table))
    print("\nper kind, set and GPU:")
    print(shown(by_set))
    return 0


if __name__ == "__main__":
    sys.exit(main())
