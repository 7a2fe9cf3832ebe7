"""`serve`'s gaps between a request's output tokens at their 90th and 99th percentiles (`itl_p90_s`, `itl_p99_s`:
the steps that admit prompts run longer, `estimator.token_gaps`) against the inter-token latencies ML.ENERGY v3
measured (vLLM 0.11.1 on H100s and B200s: each configuration's median, p90 and p99, `raw/models/*.json`).

    python experiments/token_gaps.py [--input-len-cv 0,1,3.2] [--estimator PATH] [--json]

Rows: `serving_jobs.py`'s v3 rows (catalog models, their measured mean batch as the concurrency, the row's GPUs as
tensor parallelism, its output lengths' measured spread, its requests' sampling), served at the mean prompt of 192
tokens the rows' batches leave room for (`serving_jobs.py --prompt-bounds`; v3 records no prompt). The prompts'
spread is not recorded either, so each figure is given at several (`--input-len-cv`): lognormal lengths about the
mean (`token_gaps`). 3.2 is what lm-arena-chat's first-turn prompts give as a lognormal: a mean of 54 words over a
median of 16 (`serving_jobs.py`'s docstring: the data analysis in zjunlp/PredictBeforeExecute), mean / median =
exp(sigma^2 / 2), cv = sqrt(exp(sigma^2) - 1). Beside them, the mean step (`tpot_s`) as either quantile: what
`serve` gave before. Per GPU and task, the MAPE and bias of each, and the measured p99 over the median.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pandas as pd
from serving_jobs import HOST_FLOOR_PROMPT, _serve_row, _v3_record, output_len_cv, rows

from joulecast.estimator.loading import load_estimator

MEASURED = {"itl_p90_s": "p90_itl_ms", "itl_p99_s": "p99_itl_ms"}


def gaps(table: pd.DataFrame, residual, input_len_cv: float) -> pd.DataFrame:
    """Per v3 row: the measured median, p90 and p99 inter-token latency (ms) beside `serve`'s p90 and p99 and its
    mean step, and the CPU time of its estimate."""
    out = []
    for r in table[table["release"] == "mlenergy-v3"].itertuples():
        record = _v3_record(r.measurement_id)
        start = time.process_time()
        est = _serve_row(r, HOST_FLOOR_PROMPT, residual, output_len_cv(r.measurement_id), input_len_cv)
        cpu = time.process_time() - start
        out.append(dict(id=r.measurement_id, gpu=r.gpu, task=r.measurement_id.split(":")[1], model=r.model,
                        tp=int(r.num_gpus),
                        batch=int(r.batch), median_ms=record["median_itl_ms"],
                        **{f"measured_{k}": record[v] for k, v in MEASURED.items()},
                        **{k: 1e3 * getattr(est, k) for k in MEASURED}, tpot_ms=1e3 * est.tpot_s, cpu_ms=1e3 * cpu))
    return pd.DataFrame(out)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per GPU and task: rows, the measured p99 over the median, and the MAPE and bias (%) of each quantile (p90,
    p99) and of the mean step read as it (p90_tpot, p99_tpot)."""
    def errors(part: pd.DataFrame, predicted: str, measured: str) -> np.ndarray:
        return 100 * (part[predicted] / part[measured] - 1)

    out = []
    for (gpu, task), part in [*frame.groupby(["gpu", "task"]), (("all", "all"), frame)]:
        row = dict(gpu=gpu, task=task, rows=len(part),
                   p99_over_median=float((part["measured_itl_p99_s"] / part["median_ms"]).median()))
        for k, short in zip(MEASURED, ("p90", "p99")):
            for name, column in ((short, k), (f"{short}_tpot", "tpot_ms")):
                e = errors(part, column, f"measured_{k}")
                row[f"{name}_mape"], row[f"{name}_bias"] = float(e.abs().mean()), float(e.mean())
        out.append(row)
    return pd.DataFrame(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-len-cv", default="0,1,3.2", help="assumed prompt-length spreads, comma-separated")
    parser.add_argument("--estimator", default=None, help="as for estimate (default: the shipped model)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    residual = load_estimator(args.estimator)
    table = rows()
    results = []
    for cv in (float(x) for x in args.input_len_cv.split(",")):
        frame = gaps(table, residual, cv)
        results.append((cv, frame, summary(frame)))
    if args.json:
        print(json.dumps([dict(input_len_cv=cv, summary=s.to_dict(orient="records"),
                               rows=f.to_dict(orient="records")) for cv, f, s in results], indent=1, default=float))
        return 0
    print(f"ML.ENERGY v3 (vLLM 0.11.1), {len(results[0][1])} runs, prompts of {HOST_FLOOR_PROMPT} tokens on average; "
          "the gaps between a request's tokens, serve's quantile against the measured one (MAPE and bias, %), "
          "and the mean step read as it (_tpot):")
    for cv, frame, table_ in results:
        print(f"\nprompt lengths' spread (cv) {cv:g}:")
        print(table_.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    cpu = np.concatenate([f["cpu_ms"].to_numpy() for _, f, _ in results])
    print(f"\nan estimate {np.median(cpu):.1f} CPU-ms (median over {len(cpu)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
