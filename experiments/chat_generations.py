"""Score the `generate` job (with a KV cache) against ML.ENERGY's first leaderboard (2023): one chat request at a time,
FastChat on Hugging Face transformers, fp16, on an A100, an A40 and a V100; GPU energy, time and power per response,
per GPU.

    python experiments/chat_generations.py [--input-len 64,256,1024] [--json]

Rows: `../shared/data/external/mlenergy-v1/runs.csv`, every row of a model of LLaMA's 7B or 13B architecture (MODELS:
LLaMA-7B and -13B, their fine-tunes Alpaca, Vicuna, Koala, Baize, CAMEL, GPT4All-Snoozy and Manticore, and
Llama-2-7B- and 13B-chat), each the mean over its task's prompts of one response: its mean response length as the
output length, its GPU energy and time (`energy`, `latency`). Each is estimated as the catalog's llama-2-7b or
llama-2-13b, whose layers are LLaMA 1's of that size (Touvron et al., "Llama 2", 2023: the 7B and 13B models keep
LLaMA 1's architecture but for its context length), batch 1, fp16, the KV cache on, eager launches, eager attention
(the transformers of mid-2023 ran Llama's attention as its matmuls and softmax; SDPA came to it in 4.36, December
2023).
Stated assumptions, as the set's PROVENANCE.md records neither:
- the cards (GPUS): the A100 an SXM4 40 GB card, its rows' mean power reaching 252 W, past the 250 W PCIe card's limit
  (the same lab's second leaderboard ran A100-SXM4-40GB); the V100 the catalog's 32 GB V100-SXM2, as the set's 13B
  models (26 GB of fp16 weights) ran on it, which no 16 GB card holds; the A40 the catalog's A40;
- the prompts' length (ShareGPT's first turns in FastChat's templates, not recorded): figures at each `--input-len`;
  the prefill is one pass against hundreds of decode steps, but every step reads and (transformers' cache of then
  concatenating) copies the prompt's keys and values, so longer prompts read higher (1,024 tokens: 14-36 % at each
  machine's dispatch, against 6-17 % at 256);
- greedy decoding in place of FastChat's temperature-0.7 sampling (a softmax and a draw a token, not priced), and
  FastChat's own host work a token (streaming, detokenising) not modelled beyond transformers' launches.

Each row is scored twice: at the default host dispatch (25 us a launch, EnergAIzer's hosts) and at its machine's own
(one machine a GPU), read from the machine's rows of the other models (`machine_dispatch`: the median of the
dispatch a launch for which physics' generation takes each row's measured time, `generation_jobs.dispatch_for_time`),
so that no model's rows set their own figure. A generation at batch 1 launches some 1,400 kernels a token from
Python, and every card here is host-bound: their tokens a second (24-34 for the 7B models) hardly differ though
their bandwidths span 696-1,555 GB/s.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd
from generation_jobs import dispatch_for_time
from shared_data import EXTERNAL

from joulecast.estimator.jobs import generate
from joulecast.estimator.loading import load_estimator

DATA = EXTERNAL / "mlenergy-v1" / "runs.csv"
# the set's models of LLaMA's architecture -> the catalog's model of their size (each a fine-tune of LLaMA 1 or Llama 2
# of that size, its model card says)
MODELS = {**dict.fromkeys(("metaai/llama-7B", "tatsu-lab/alpaca-7B", "lmsys/vicuna-7B", "BAIR/koala-7b",
                           "project-baize/baize-v2-7B", "metaai/Llama-2-7b-chat-hf"), "llama-2-7b"),
          **dict.fromkeys(("metaai/llama-13B", "lmsys/vicuna-13B", "BAIR/koala-13b", "camel-ai/CAMEL-13B-Combined-Data",
                           "nomic-ai/gpt4all-13b-snoozy", "openaccess-ai-collective/manticore-13b-chat-pyg",
                           "metaai/Llama-2-13b-chat-hf"), "llama-2-13b")}
GPUS = {"A100": "a100-sxm4-40gb", "A40": "a40", "V100": "v100-sxm2"}
DTYPE, ATTENTION = "fp16", "eager"


def rows() -> pd.DataFrame:
    table = pd.read_csv(DATA)
    table = table[table["model"].isin(MODELS)].copy()
    return table.assign(gpu=table["gpu"].map(GPUS), catalog_model=table["model"].map(MODELS),
                        output_len=table["response_length"].round().astype(int),
                        measured_energy_j=table["energy"], measured_time_s=table["latency"]).reset_index(drop=True)


def _generate(r, input_len: int, dispatch_s: float | None, estimator):
    """A row's response as `generate` estimates it: one sequence of `input_len` prompt tokens and its mean response
    length, at a host dispatch (None: the default) and an estimator (None: physics)."""
    return generate(r.catalog_model, r.gpu, batch=1, input_len=input_len, output_len=max(1, int(r.output_len)),
                    dtype=DTYPE, attention=ATTENTION, host_dispatch_s=dispatch_s,
                    estimator=estimator if estimator is not None else "physics")


def machine_dispatch(table: pd.DataFrame, input_len: int) -> dict[tuple[str, str], float]:
    """(GPU, model) -> the machine's dispatch a launch (s), the median over its rows of every other model of the
    dispatch their measured times imply (`dispatch_for_time`); none where no such row implies one."""
    implied = pd.Series([dispatch_for_time(lambda d, r=r: _generate(r, input_len, d, None).time_s, r.measured_time_s)
                         for r in table.itertuples()], index=table.index, dtype=float)
    out = {}
    for gpu, model in set(zip(table["gpu"], table["model"])):
        others = implied[(table["gpu"] == gpu) & (table["model"] != model)].dropna()
        if len(others):
            out[gpu, model] = float(others.median())
    return out


def score(table: pd.DataFrame, input_len: int, estimator,
          dispatch: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    """Each row's generation (at its machine's dispatch where `dispatch` has it, else the default) and its errors
    (energy, time and power, %), and whether its 90 % interval holds it."""
    out = []
    for r in table.itertuples():
        job = _generate(r, input_len, (dispatch or {}).get((r.gpu, r.model)), estimator)
        lo, hi = job.energy_interval_j or (np.nan, np.nan)
        out.append(dict(gpu=r.gpu, model=r.model, size=r.catalog_model, task=r.task, output_len=int(r.output_len),
                        measured_energy_j=r.measured_energy_j, predicted_energy_j=job.energy_j,
                        measured_time_s=r.measured_time_s, predicted_time_s=job.time_s,
                        inside=bool(lo <= r.measured_energy_j <= hi) if estimator is not None else None))
    frame = pd.DataFrame(out)
    frame["energy_err"] = 100 * (frame["predicted_energy_j"] / frame["measured_energy_j"] - 1)
    frame["time_err"] = 100 * (frame["predicted_time_s"] / frame["measured_time_s"] - 1)
    power = (frame["predicted_energy_j"] / frame["predicted_time_s"]) / (frame["measured_energy_j"]
                                                                        / frame["measured_time_s"])
    frame["power_err"] = 100 * (power - 1)
    return frame


def summary(frame: pd.DataFrame, **label) -> list[dict]:
    """Per GPU and model size: MAPE of energy, time and power, the energy's mean signed error, and the interval's
    coverage."""
    out = []
    for (gpu, size), part in frame.groupby(["gpu", "size"]):
        out.append(dict(**label, gpu=gpu, size=size, rows=len(part),
                        energy_mape=float(part["energy_err"].abs().mean()),
                        energy_bias=float(part["energy_err"].mean()),
                        time_mape=float(part["time_err"].abs().mean()),
                        power_mape=float(part["power_err"].abs().mean()),
                        coverage_pct=(float(100 * part["inside"].mean())
                                      if part["inside"].notna().all() else None)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-len", default="64,256,1024", help="assumed prompt lengths, comma-separated")
    parser.add_argument("--estimator", default=None, help="as for estimate (default: the shipped model)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    table = rows()
    residual = load_estimator(args.estimator)
    out, machines = [], {}
    for length in (int(x) for x in args.input_len.split(",")):
        machines[length] = machine_dispatch(table, length)
        for host, dispatch in (("default", None), ("machine's", machines[length])):
            out += summary(score(table, length, residual, dispatch), input_len=length, host=host, estimator="hybrid")
            out += summary(score(table, length, None, dispatch), input_len=length, host=host, estimator="physics")
    if args.json:
        print(json.dumps(dict(summary=out, machine_dispatch_us=[
            dict(input_len=length, gpu=gpu, model=model, dispatch_us=1e6 * d)
            for length, by in machines.items() for (gpu, model), d in sorted(by.items())]), indent=1))
        return 0
    print(f"ML.ENERGY v1, {len(table)} responses of 7B and 13B LLaMA-architecture models ({table['gpu'].nunique()} "
          "GPUs), generate with a KV cache at batch 1 (MAPE %, the energy's bias %, 90 % interval coverage %):")
    print(pd.DataFrame(out).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print("\neach machine's dispatch read from its other models' rows (us a launch, the range over the models scored):")
    for length, by in machines.items():
        for gpu in sorted({g for g, _ in by}):
            values = [1e6 * d for (g, _), d in by.items() if g == gpu]
            print(f"  {length}-token prompts, {gpu}: {min(values):.1f}-{max(values):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
