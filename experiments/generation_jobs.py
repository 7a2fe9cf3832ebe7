"""Score the `generate` job against Wilkins et al.'s single-prompt generations (Hugging Face transformers, bf16,
`use_cache=False`: every step recomputes the whole sequence; V100 16 GB and A100 40 GB): GPU energy and time per
request, per GPU and sweep.

    python experiments/generation_jobs.py [--json]

Rows: `../shared/data/external/wilkins-llm-inference-energy/` (input- and output-length sweeps), Mistral-7B (the
catalog's mistral-7b; the model Wilkins' repository names "Mistral (7B)"), inference rows only, each prompt's
iteration 0 left out (it includes the pipeline's warm-up: 2.2 s against 0.23 s for the same request), averaged per
system, input length and output limit. The GPU: its SKU by `GPU Total Memory (MB)`, as PROVENANCE.md says, and
between cards of that memory by the system's power ceiling (`identify`): the card with the lowest power limit that
the system's rows stay under. Palmetto's A100 rows never average more than 258 W (75 % at or below 248 W) against up
to 413 W on Swing's: the A100-PCIe-40GB's 250 W limit there, the SXM4's 400 W here. Generated tokens = total tokens
- input tokens, clipped to 0.9-1 times the limit (the run's `min_new_tokens` and `max_new_tokens`; prompt and answer
tokenised together can count otherwise). Stated assumptions: batch 1 (one prompt a call; the logged batch size is a
CLI default, as PROVENANCE.md says), eager PyTorch launches, SDPA attention as fused ("flash"), no KV cache.
"""

from __future__ import annotations

import argparse
import json
import sys

import pandas as pd
from shared_data import EXTERNAL

import joulecast
from joulecast.estimator.jobs import generate
from joulecast.estimator.loading import load_estimator

DATA = EXTERNAL / "wilkins-llm-inference-energy"
# by GPU Total Memory (MB), as PROVENANCE.md says: the catalog's cards of that memory (the V100 16 GB: the one V100)
GPUS = {16384.0: ("v100-sxm2",), 40960.0: ("a100-pcie-40gb", "a100-sxm4-40gb")}
MODELS = {"Mistral (7B)": "mistral-7b"}
METER_MARGIN = 1.05  # a run's mean NVML power may pass its limit a little (boost transients, the meter's averaging)


def identify(frame: pd.DataFrame) -> dict[tuple[str, float], str]:
    """(system, GPU memory) -> catalog GPU: of the cards of that memory, the lowest power limit that every one of
    the system's inference rows (every model and sweep) stays under, with METER_MARGIN."""
    frame = frame.assign(power_w=frame["GPU Energy (J)"] / frame["Runtime (s)"])
    out = {}
    for (system, memory), g in frame.groupby(["System", "GPU Total Memory (MB)"]):
        cards = sorted(GPUS[memory], key=lambda name: joulecast.gpu(name).power_limit_w)
        ceiling = float(g["power_w"].max())
        out[system, memory] = next((c for c in cards if ceiling <= METER_MARGIN * joulecast.gpu(c).power_limit_w),
                                   cards[-1])
    return out


def rows() -> pd.DataFrame:
    sweeps = {name: pd.read_csv(DATA / name) for name in ("input_token_sweep.csv", "output_token_sweep.csv")}
    inference = pd.concat([d[d["Phase"].str.startswith("start-inference") & d["Number of GPUs"].eq(1)
                             & d["GPU Total Memory (MB)"].isin(GPUS)] for d in sweeps.values()])
    cards = identify(inference)
    frames = []
    for name, limit in (("input_token_sweep.csv", "Output Token Limit"), ("output_token_sweep.csv",
                                                                          "Number of Output Tokens")):
        d = sweeps[name]
        d = d[d["Phase"].str.startswith("start-inference") & d["Model"].isin(MODELS) & (d["Iteration"] > 0)
              & d["GPU Total Memory (MB)"].isin(GPUS) & d["Number of GPUs"].eq(1)]
        gpu = [cards[s, m] for s, m in zip(d["System"], d["GPU Total Memory (MB)"])]
        d = d.assign(sweep=name.split("_")[0], gpu=gpu, model=d["Model"].map(MODELS),
                     limit=d[limit], output_len=(d["Total Number of Tokens"] - d["Number of Input Tokens"]).clip(
                         lower=0.9 * d[limit], upper=d[limit]))
        frames.append(d)
    d = pd.concat(frames, ignore_index=True)
    d = d[d["output_len"] >= 1]
    return d.groupby(["sweep", "System", "gpu", "model", "Number of Input Tokens", "limit"], as_index=False).agg(
        measured_energy_j=("GPU Energy (J)", "mean"), measured_time_s=("Runtime (s)", "mean"),
        output_len=("output_len", "mean"), runs=("GPU Energy (J)", "size"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimator", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    residual = load_estimator(args.estimator)
    table = rows()
    out = []
    for r in table.itertuples():
        job = generate(r.model, r.gpu, batch=1, input_len=int(getattr(r, "_5")), output_len=max(1, round(r.output_len)),
                       kv_cache=False, estimator=residual if residual is not None else "physics")
        lo, hi = job.energy_interval_j or (float("nan"), float("nan"))
        out.append(dict(sweep=r.sweep, system=r.System, gpu=r.gpu, input_len=int(getattr(r, "_5")),
                        output_len=float(r.output_len), measured_energy_j=r.measured_energy_j,
                        predicted_energy_j=job.energy_j, measured_time_s=r.measured_time_s,
                        predicted_time_s=job.time_s, inside=bool(lo <= r.measured_energy_j <= hi)))
    frame = pd.DataFrame(out)
    frame["energy_ape"] = 100 * (frame.predicted_energy_j / frame.measured_energy_j - 1).abs()
    frame["time_ape"] = 100 * (frame.predicted_time_s / frame.measured_time_s - 1).abs()
    summary = frame.groupby(["gpu", "sweep"]).agg(rows=("energy_ape", "size"), energy_mape=("energy_ape", "mean"),
                                                  time_mape=("time_ape", "mean"),
                                                  coverage_pct=("inside", lambda v: 100 * v.mean())).reset_index()
    if args.json:
        print(json.dumps({"summary": summary.to_dict(orient="records"), "rows": out}, indent=1))
        return 0
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
