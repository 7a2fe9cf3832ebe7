"""Score the `serve` job against ML.ENERGY's steady-state vLLM serving runs (v2: A100-SXM4-40GB and H100, vLLM
0.5.4; v3: H100 and B200, vLLM 0.11.1): energy per output token and output tokens a second, per release and GPU.

    python experiments/serving_jobs.py [--input-len 256,512,1024] [--json]

Rows: every text-LLM row whose model the catalog holds (`data/importers/mlenergy.py`'s CATALOG: Llama-3.1-8B and
70B, Llama-3.3-70B, Mistral-7B v0.3), served at the row's measured mean batch as the concurrency, its max batch,
its mean output length and its GPU count as tensor parallelism. Stated assumptions: the prompts' mean length is not
recorded (the sources say so), so each figure is given at several assumed means (`--input-len`); each release
runs its engine's entry of `data/serving_engines.yaml`: v2 vLLM 0.5.4 with its measured host work per step, v3
vLLM 0.11.1 with none; bf16 where a row does not name its precision; the default power limit. The shipped estimator was
trained on v2's decode steps (as decode steps without prompts), so v2's figures are in-sample for its residual;
v3's rows are not trained on (`kernel_list = partial`).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd
from shared_data import EXTERNAL

from joulecast.data.importers.mlenergy import import_mlenergy
from joulecast.estimator.loading import load_estimator
from joulecast.estimator.serving import serve

ENGINES = {"mlenergy-v2": "vllm-0.5.4", "mlenergy-v3": "vllm-0.11.1"}  # each release's engine (PROVENANCE.md)


def rows() -> pd.DataFrame:
    table = import_mlenergy(EXTERNAL)
    table = table[table["workload_ref"].notna()].copy()
    table["release"] = table["provenance"].str.split("/").str[0]
    table["measured_j_per_token"] = table["energy_j"] / table["batch"]
    table["measured_tokens_per_s"] = table["batch"] / table["time_s"]
    return table.reset_index(drop=True)


def score(table: pd.DataFrame, input_len: int, residual) -> pd.DataFrame:
    out = []
    for r in table.itertuples():
        max_batch = int(r.measurement_id.split(":bs")[1].split(":")[0])
        est = serve(r.model, r.gpu, input_len=input_len, output_len=float(r.output_len), concurrency=int(r.batch),
                    max_batch=max(max_batch, int(r.batch)), tp=int(r.num_gpus),
                    engine=ENGINES[r.release],
                    dtype=r.dtype if isinstance(r.dtype, str) and r.dtype in ("bf16", "fp8") else "bf16",
                    estimator=residual if residual is not None else "physics")
        lo, hi = est.energy_per_output_token_interval_j or (np.nan, np.nan)
        out.append(dict(release=r.release, gpu=r.gpu, model=r.model, tp=int(r.num_gpus), batch=int(r.batch),
                        measured_j_per_token=r.measured_j_per_token,
                        predicted_j_per_token=est.energy_per_output_token_j,
                        measured_tokens_per_s=r.measured_tokens_per_s, predicted_tokens_per_s=est.tokens_per_s,
                        inside=bool(lo <= r.measured_j_per_token <= hi) if residual is not None else None))
    frame = pd.DataFrame(out)
    frame["energy_ape"] = 100 * (frame["predicted_j_per_token"] / frame["measured_j_per_token"] - 1).abs()
    frame["throughput_ape"] = 100 * (frame["predicted_tokens_per_s"] / frame["measured_tokens_per_s"] - 1).abs()
    return frame


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-len", default="256,512,1024", help="assumed mean prompt lengths, comma-separated")
    parser.add_argument("--estimator", default=None, help="as for estimate (default: the shipped model)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    table = rows()
    residual = load_estimator(args.estimator)
    summary = []
    for length in (int(x) for x in args.input_len.split(",")):
        frame = score(table, length, residual)
        for (release, gpu), part in frame.groupby(["release", "gpu"]):
            summary.append(dict(input_len=length, release=release, gpu=gpu, rows=len(part),
                                j_per_token_mape=float(part["energy_ape"].mean()),
                                tokens_per_s_mape=float(part["throughput_ape"].mean()),
                                bias_pct=float(100 * (part["predicted_j_per_token"] / part["measured_j_per_token"]
                                                      - 1).mean()),
                                # physics alone has no interval: no coverage
                                coverage_pct=float(100 * part["inside"].mean()) if residual is not None else None))
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(pd.DataFrame(summary).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
