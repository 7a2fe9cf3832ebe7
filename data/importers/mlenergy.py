"""Importer for the ML.ENERGY leaderboard v2 (A100-SXM4-40GB, H100) and v3 (H100, B200) LLM serving rows.

PATH is `shared/data/external/mlenergy-v2` or `mlenergy-v3` (their `llm_mllm_runs.csv`), or a folder holding both.
Only text LLM rows are read (v2 `llm_text_generation`, v3 family `llm`); vision-language and diffusion rows are left out.

A row is a steady-state vLLM serving run. One iteration here is one step of the running batch:
    time_s   = avg batch / output throughput          (s per step)
    energy_j = energy per output token x avg batch    (J per step, all GPUs of the instance)
    power_w  = energy per output token x throughput   (W, summed over the instance's `num_gpus`)
Models whose shapes the catalog holds get a workload reference; other models keep `kernel_list = none`. Neither
release records its prompts' lengths. v2's references are serving steps (`serve:`, `joulecast.features.serve_step`,
the step `joulecast.serve` prices): the running batch's decodes and the prompts arriving meanwhile, at an assumed
mean prompt of V2_PROMPT_TOKENS, which the row's provenance repeats. v3's are decode steps alone, with a KV cache of
half the mean output length (a stated lower bound).
vLLM replays decode steps as captured CUDA graphs unless told `enforce_eager` (its default is False; no v3 server
config in `benchmark_configs.csv` sets it, two set `cudagraph_mode`), so the references launch as graphs: no host
dispatch per kernel, which for a small batch would otherwise be most of the step (llama-3-8b, batch 8, B200:
physics 25.5 ms eager against 4.95 ms as graphs; measured 4.9 ms). v2's references name their engine, vLLM 0.5.4,
whose own host work between steps was most of a v2 step (`joulecast.features.arch.SERVING_ENGINES`; llama-3-8b, batch
128, H100: the kernels' physics 12.2 ms, measured 59.4 ms).
v3's references are `kernel_list = partial`: its steps also run the prompts of arriving requests, GPU work that is
not recorded and that no engine constant stands for (see PARTIAL_RELEASES), so the training table leaves them out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from joulecast.data.errors import DataError
from joulecast.data.gpus import gpu as catalog_gpu
from joulecast.data.importers._common import find_files, read_csv
from joulecast.data.models import family_of_name
from joulecast.data.schema import conform
from joulecast.data.workload_ref import catalog_ref, serve_ref

GPUS = {"NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb", "NVIDIA H100 80GB HBM3": "h100-sxm", "H100": "h100-sxm", "B200": "b200"}
# Hugging Face ids whose shapes equal a catalog model (Llama 3.1 and 3.3 have entries of their own, Llama 3's shapes
# with a longer context; Mistral v0.3 differs from the catalog's v0.1 only in vocabulary, 32,768 against 32,000
# tokens; Qwen3-30B-A3B's and Qwen3-235B-A22B's 2507 releases keep their shapes, with a longer context, and their FP8
# checkpoints too, the weights in fp8; Llama-3.1-405B's FP8 checkpoint is its entry's).
CATALOG = {"meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
           "meta-llama/Meta-Llama-3.1-70B-Instruct": "llama-3.1-70b",
           "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
           "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b", "meta-llama/Llama-3.1-405B-Instruct": "llama-3.1-405b",
           "meta-llama/Llama-3.1-405B-Instruct-FP8": "llama-3.1-405b",
           "mistralai/Mistral-7B-Instruct-v0.3": "mistral-7b",
           "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b", "Qwen/Qwen3-8B": "qwen3-8b",
           "Qwen/Qwen3-14B": "qwen3-14b", "Qwen/Qwen3-32B": "qwen3-32b",
           "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B-Thinking-2507": "qwen3-30b-a3b",
           **{f"Qwen/Qwen3-235B-A22B-{kind}-2507{fp8}": "qwen3-235b-a22b" for kind in ("Instruct", "Thinking")
              for fp8 in ("", "-FP8")}}
# v2 ran vLLM 0.5.4 (its PROVENANCE), whose host work per step the physics adds (arch.SERVING_ENGINES); v3's vLLM
# 0.11.1 has no entry there.
V2_ENGINE = "vllm-0.5.4"
# v2's mean prompt (500 ShareGPT chat prompts; lengths not recorded): an assumption, the longest of
# experiments/serving_jobs.py's PROMPT_GRID whose step at each single-GPU configuration's largest measured batch fits
# vLLM's 0.9 of the GPU's memory (`--prompt-bounds`: 128 tokens for Mistral-7B on the H100, 192-256 for the others).
# It also makes vLLM 0.5.4's host work what host work is, the same on both GPUs (experiments/serving_overhead.py;
# serving steps at 128 / 192 / 256 prompt tokens: A100-SXM4 0.406 / 0.391 / 0.368 ms a running sequence at 1.48 /
# 1.33 / 1.08x idle power, the H100, whose steps run 1.8-2.6x faster, 0.399 / 0.391 / 0.383 ms at 1.47 / 1.39 /
# 1.31x; with the decodes alone, 0.447 and 0.415 ms at 1.85 and 1.63x).
V2_PROMPT_TOKENS = 128
# Releases whose decode-step references lack GPU work the measurement includes. vLLM 0.11.1 (v3) schedules the
# prompts of arriving requests into its decode steps (chunked prefill, a budget of 8192 tokens per step in
# benchmark_configs.csv's `max-num-batched-tokens`), and the prompts are not recorded. Its rows' measured/physics
# time rises with the batch, as steps that carry more arrivals' prompts would: llama-3-8b 0.98x at batch 8 to 4.4x
# at 511 on the B200, 0.93x to 2.6x at 691 on the H100 (where the GPU then draws 685 W against the decode kernels'
# 601 W); v2's rows stay within 0.78-1.16x. Trained on, the residual keyed that gap on high physics power (no other
# rows reached 400 W) and carried it to other GPUs' high-power work: see `joulecast.training.dataset.usable`.
PARTIAL_RELEASES = ("mlenergy-v3",)
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "mxfp4": "mxfp4"}
V2_COLUMNS = ("category", "task", "Model", "GPU", "TP", "PP", "Energy/req (J)", "Token tput (tok/s)",
              "Avg Output Tokens", "Avg BS (reqs)", "Max BS (reqs)")
V3_COLUMNS = ("family", "task", "model_id", "gpu_model", "num_gpus", "max_num_seqs", "avg_batch_size",
              "weight_precision", "avg_output_len", "energy_per_token_joules", "output_throughput_tokens_per_sec")
V2_NUMBERS = V2_COLUMNS[4:]   # the columns computed with (`_common.read_csv` checks each holds numbers)
V3_NUMBERS = ("num_gpus", "max_num_seqs", "avg_batch_size", "avg_output_len", "energy_per_token_joules",
              "output_throughput_tokens_per_sec")


def import_mlenergy(path: str | Path) -> pd.DataFrame:
    """Read the LLM rows of every ML.ENERGY `llm_mllm_runs.csv` found at PATH into the measurement schema."""
    root = Path(path)
    files = find_files(root, ("llm_mllm_runs.csv", "mlenergy-v*/llm_mllm_runs.csv"),
                       "shared/data/external/mlenergy-v2 or -v3, or their parent")
    frames = []
    for csv in files:
        header = pd.read_csv(csv, nrows=0).columns
        version = "v3" if "model_id" in header else "v2"
        raw = read_csv(csv, *((V3_COLUMNS, V3_NUMBERS) if version == "v3" else (V2_COLUMNS, V2_NUMBERS)))
        frames.append(_v3(raw, csv) if version == "v3" else _v2(raw, csv))
    return conform(pd.concat(frames, ignore_index=True), f"import of {path}")


def _v2(raw: pd.DataFrame, csv: Path) -> pd.DataFrame:
    rows = raw["category"].eq("llm_text_generation")
    raw = raw[rows]
    per_token_j = raw["Energy/req (J)"] / raw["Avg Output Tokens"]
    return _table(csv, "mlenergy-v2", raw.index, model=raw["Model"], task=raw["task"], gpu=raw["GPU"],
                  num_gpus=raw["TP"] * raw["PP"], batch=raw["Avg BS (reqs)"], max_batch=raw["Max BS (reqs)"],
                  dtype=pd.Series(pd.NA, index=raw.index), output_len=raw["Avg Output Tokens"],
                  per_token_j=per_token_j, throughput=raw["Token tput (tok/s)"], engine=V2_ENGINE,
                  prompt_tokens=V2_PROMPT_TOKENS, tp=raw["TP"])


def _v3(raw: pd.DataFrame, csv: Path) -> pd.DataFrame:
    raw = raw[raw["family"].eq("llm")]
    return _table(csv, "mlenergy-v3", raw.index, model=raw["model_id"], task=raw["task"], gpu=raw["gpu_model"],
                  num_gpus=raw["num_gpus"], batch=raw["avg_batch_size"], max_batch=raw["max_num_seqs"],
                  dtype=raw["weight_precision"].map(DTYPES), output_len=raw["avg_output_len"],
                  per_token_j=raw["energy_per_token_joules"], throughput=raw["output_throughput_tokens_per_sec"],
                  engine=None)


def _table(csv: Path, release: str, index: pd.Index, *, model, task, gpu, num_gpus, batch, max_batch, dtype,
           output_len, per_token_j, throughput, engine: str | None, prompt_tokens: int | None = None,
           tp: pd.Series | None = None) -> pd.DataFrame:
    """The rows in the measurement schema: with `prompt_tokens`, each a serving step (decodes and arriving prompts of
    that mean length, `tp` GPUs' tensor parallelism); without, a decode step alone (KV cache = output / 2)."""
    gpus = gpu.map(GPUS)
    if gpus.isna().any():
        raise DataError(f"{csv}: unknown GPU {gpu[gpus.isna()].iloc[0]!r}; known: {', '.join(GPUS)}")
    catalog_model = model.map(CATALOG)
    batch_int = np.maximum(1, np.round(batch.to_numpy(float))).astype(int)
    out_len = output_len.to_numpy(float)
    if prompt_tokens is None:
        kv_len = np.maximum(1, np.round(out_len / 2)).astype(int)
        refs = [catalog_ref(m, phase="decode", batch=b, seq=s, dtype=d if isinstance(d, str) else "bf16",
                            launch_mode="graph", engine=engine)
                if isinstance(m, str) else None
                for m, b, s, d in zip(catalog_model, batch_int, kv_len, dtype)]
        assumed = "KV length assumed = output/2 (prompts not recorded)"
    else:
        # the running requests' mean context, as the step counts it (every answer taken as long: none recorded)
        kv_len = np.maximum(1, np.round(prompt_tokens + out_len / 2)).astype(int)
        refs = [serve_ref(m, batch=b, input_len=prompt_tokens, output_len=round(o, 1),
                          dtype=d if isinstance(d, str) else "bf16", engine=engine, tp=int(t))
                if isinstance(m, str) else None
                for m, b, o, d, t in zip(catalog_model, batch_int, out_len, dtype, tp)]
        assumed = f"mean prompt assumed = {prompt_tokens} tokens (prompts not recorded)"
    step_s = batch.to_numpy(float) / throughput.to_numpy(float)
    line = (index.to_numpy() + 2).astype(str)
    ids = [f"{release}:{t}:{m}:{g}:x{n}:bs{int(b)}:row{r}" for t, m, g, n, b, r in
           zip(task, model, gpus, num_gpus, max_batch, line)]
    return pd.DataFrame(dict(
        measurement_id=ids, source="mlenergy",
        provenance=[f"{release}/{csv.name} row {r}" + (f"; {assumed}" if isinstance(m, str) else "")
                    for r, m in zip(line, catalog_model)],
        workload_ref=refs,
        kernel_list=np.where(catalog_model.notna(), "partial" if release in PARTIAL_RELEASES else "lowered", "none"),
        model=catalog_model.fillna(model), model_family=catalog_model.fillna(model).map(family_of_name), phase="decode",
        batch=batch_int, seq=np.where(catalog_model.notna(), kv_len, pd.NA), output_len=np.round(output_len),
        dtype=dtype, gpu=gpus, num_gpus=num_gpus,
        power_limit_w=[catalog_gpu(g).power_limit_w for g in gpus],  # default limit (PROVENANCE: not stated per run)
        iterations=pd.NA, repeats=1, time_s=step_s, energy_j=per_token_j.to_numpy(float) * batch.to_numpy(float),
        power_w=per_token_j.to_numpy(float) * throughput.to_numpy(float), method="energy_counter",
    ))
