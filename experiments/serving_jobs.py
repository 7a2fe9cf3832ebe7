"""Score the `serve` job against ML.ENERGY's steady-state vLLM serving runs (v2: A100-SXM4-40GB and H100, vLLM
0.5.4; v3: H100 and B200, vLLM 0.11.1): energy per output token and output tokens a second, per release and GPU.

    python experiments/serving_jobs.py [--input-len 192,256,512,1024] [--prompt-bounds | --itl | --host-floor |
                                       --tp-host | --by-task] [--json]

Rows: every text-LLM row whose model the catalog holds (`data/importers/mlenergy.py`'s CATALOG: Llama-3.1-8B, 70B
and 405B, Llama-3.3-70B, Mistral-7B v0.3, Qwen3-8B, 14B and 32B, and three mixtures of experts, `moe` in the table:
v2's Mixtral-8x7B on 4 GPUs, each expert's width split, and v3's Qwen3-30B-A3B on one GPU and on two and
Qwen3-235B-A22B on 2-8, their experts split whole where the record's expert_parallel says so, `ep` in the table:
`serve`'s expert_parallel), served
at the row's measured mean batch as the concurrency, its max batch, its mean output length and its GPU count as
tensor parallelism. Stated assumptions: the prompts' mean length is not recorded
(the sources say so), so each figure is given at several assumed means (`--input-len`; the rows' own batches leave
room for 128-384 tokens at most, `--prompt-bounds` below). How v3 built them, from its benchmark's code
(ml-energy/benchmark, mlenergy/benchmark/llm/datasets.py and workloads.py): lm-arena-chat samples
lmarena-ai/arena-human-preference-100k, one request a turn of a conversation, its prompt the user's prompts and the
model's answers so far (a first turn's prompt alone: the earlier 55k set's prompts hold a median of 16 words and a
mean of 54, heavy-tailed, by the data analysis in zjunlp/PredictBeforeExecute's da_result_lmsys-chatbot-arena.txt);
gpqa one GPQA question and its four choices. Each release runs its engine's entry of
`data/serving_engines.yaml`: v2 vLLM 0.5.4 with its measured host work between steps, v3 vLLM 0.11.1 with its host
work under the step (`--host-floor`), each release's requests sampling as SAMPLING says (v3's sampler a step's GPU
work: `joulecast.features.sampling`); bf16 where a row does not name its precision, and an fp8 checkpoint's every
linear layer in fp8 (the files do not say which layers a checkpoint keeps in bf16: Meta's Llama-3.1-405B FP8 scales
its weights by row, Qwen3's FP8 releases by 128 x 128 block; `serve` prices neither scaling, only each layer's
input quantized by a kernel of its own, `joulecast.features.builder`); the default power limit. The shipped
estimator was trained on v2's single-GPU rows as serving steps with prompts of an assumed 128 tokens
(`joulecast.data.importers.mlenergy.V2_PROMPT_TOKENS`), so those figures are in-sample for its residual at that
length; v2's tensor-parallel rows (Llama-3.1-70B on 8 A100s or 4 H100s) and v3's (`kernel_list = partial`) are not
trained on. The table splits each release and GPU by tensor parallelism (`tp`).

`--itl` checks the decode step on its own, apart from the unrecorded prompts: v3 records each configuration's median
inter-token latency, the step most tokens wait on. Beside it, `serve`'s step with 1-token prompts (decodes alone, its
estimate at the row's batch) and the measured mean step (batch over output tokens a second); per release, GPU and
tensor parallelism, the ratio of the decode-only step to the median one, at small batches (up to SMALL_BATCH running
sequences, where few prompts arrive per step) and at large ones (LARGE_BATCH or more).

`--prompt-bounds` checks the assumed prompt lengths against the rows themselves: at each configuration's largest
measured batch, the longest mean prompt (of PROMPT_GRID) whose step fits vLLM's default 0.9 of GPU memory
(`gpu_memory_utilization`; vLLM's engine arguments) by `serve`'s own memory sum (the shard's weights at the row's
precision, a bf16 KV cache over the running requests' length-biased context, activations); none where not even a
1-token prompt fits. Some do not, at the largest batches v3 ran (1,019-4,090 requests). For example v3's
Llama-3.1-70B on two B200s ran 2,042 requests at once (of max_num_seqs 2,048), which by that sum need 175.9 GiB a GPU
at 1-token prompts against 162 (80 layers' keys and values, 160 KiB a token a GPU, over contexts of 352 tokens: their
output lengths' histogram has a cv of 1.0). Its running requests held shorter contexts than the length-biased steady
state gives, 307 tokens at most (an eighth shorter); what set them is not in the files. Before 2026-12-05 an fp8
checkpoint's weights were summed at bf16's two bytes, and none of its configurations fitted.

`--host-floor [GPU]` derives vLLM 0.11.1's host work per running sequence, which runs under the GPU's step (v3 ran
async scheduling; `data/serving_engines.yaml`): per v3 row of the Llama models (HOST_FLOOR_MODELS, which says why
not Qwen3's), `serve`'s step with that host work taken out beside the
measured step; a row is host-bound where the measured step is at least HOST_BOUND_RATIO times the GPU's work alone;
on that GPU's host-bound rows (the B200's by default, its Llama-3.1-8B at 64-2,043 sequences), the measured steps
over the running sequences summed and the GPU's power while it waits, and each row's own (their lowest and highest:
the catalog's `host_ms_per_sequence_range`, which an estimate's interval spans). No H100 row is host-bound: they
check it.

`--tp-host` derives vLLM 0.5.4's host work a step per tensor-parallel GPU beyond the first (its driver broadcasting
each step's inputs to the other workers, `data/serving_engines.yaml`): per v2 row on several GPUs, the measured step
less physics' step without that work, over the GPUs beyond the first; the median over the rows of TP_HOST_MODELS
(Llama-3.1-70B on 8 A100-SXM4s and 4 H100s) is the catalog's figure, and the Mixtral rows, printed beside, check it.

`--by-task` summarises the scores per release, GPU and task instead of per layout: v3's gpqa rows (reasoning, answers of
7,000-9,500 tokens) apart from its lm-arena-chat rows; v2's are all chat.

The output lengths' spread (`serve`'s `output_len_cv`: a running request is length-biased, so its context averages
input + output (1 + cv^2) / 2): v3 from each configuration's own histogram of output lengths (`raw/models/*.json`,
50 bins, their midpoints), v2, which records none, as 0 (every answer as long). `--no-spread` takes 0 for v3 too.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
from shared_data import EXTERNAL

from joulecast.data import engines
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.importers.mlenergy import import_mlenergy
from joulecast.data.models import is_mixture_of_experts
from joulecast.estimator.loading import load_estimator
from joulecast.estimator.serving import serve
from joulecast.estimator.tensor_parallel import worker_host
from joulecast.features import arch
from joulecast.features.lowering import resolve_model

ENGINES = {"mlenergy-v2": "vllm-0.5.4", "mlenergy-v3": "vllm-0.11.1"}  # each release's engine (PROVENANCE.md)
# Each release's requests' sampling (`serve`'s `sampling`): v3's client (ml-energy/benchmark at the commit its
# PROVENANCE.md names, mlenergy/benchmark/llm/benchmark.py) sends every request with repetition_penalty 1.1 and no
# temperature or top-p, so vLLM takes those from the model's generation config (its default, `--generation-config
# auto`): Llama-3.1-8B- and 70B-Instruct's temperature 0.6, top_p 0.9. v2 records none: greedy (an assumption).
SAMPLING = {"mlenergy-v2": "greedy", "mlenergy-v3": "top-p-penalties"}
RAW_V3 = EXTERNAL / "mlenergy-v3" / "raw" / "models"
VLLM_MEMORY_SHARE = 0.9   # vLLM's default gpu_memory_utilization: the share of GPU memory the engine takes
PROMPT_GRID = (1, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024)
SMALL_BATCH, LARGE_BATCH = 32, 256   # `--itl`'s bands of running sequences
# `--host-floor`: a row is host-bound where its measured step is at least this many times the GPU's work alone (the
# rest the GPU waits); the prompts at the 192 tokens the rows' batches leave room for (`--prompt-bounds`)
HOST_BOUND_RATIO, HOST_FLOOR_PROMPT = 1.5, 192
# `--host-floor`'s rows: the v3 models the catalog's vLLM 0.11.1 figures were derived from (2026-12-04), before
# Qwen3's rows joined (2026-12-05). With Qwen3's chat rows too the B200 gives 0.097 ms at 1.46x idle (14 rows; v3's J
# a token on the B200 16.2 -> 16.6 %, Qwen3-30B-A3B's 17.2 -> 15.9 %: not adopted); with their gpqa rows 0.163 ms,
# but those hold a step at 31-45 ms at 8-32 sequences on the B200 whatever the model, three times the H100's same
# work: a floor a step, not host work a sequence, which this derivation does not model.
HOST_FLOOR_MODELS = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b")
# `--tp-host`'s rows: v2's dense models on several GPUs (Llama-3.1-70B on 8 A100-SXM4s and on 4 H100s) set vLLM
# 0.5.4's host work a step per GPU beyond the first; its Mixtral-8x7B rows on 4 of each check it. Prompts of 192
# tokens, the figures' default.
TP_HOST_MODELS, TP_HOST_PROMPT = ("llama-3.1-70b",), 192


@functools.cache
def _v3_configurations(task: str, model_id: str) -> dict[tuple[str, int, int], dict]:
    """(GPU, GPUs, max batch) -> a v3 configuration's raw record, for one model's `task` (`raw/models/*.json`)."""
    path = RAW_V3 / f"{model_id.replace('/', '__')}__{task}.json"
    return {(c["gpu_model"].lower(), int(c["num_gpus"]), int(c["max_num_seqs"])): c
            for c in json.loads(path.read_text())["configurations"]}


def _v3_record(measurement_id: str) -> dict:
    """A v3 row's configuration record (the catalog's h100-sxm is the raw files' H100: v3 ran H100 SXM and B200)."""
    _, task, model_id, gpu, gpus, batch = measurement_id.split(":")[:6]
    return _v3_configurations(task, model_id)[gpu.split("-")[0], int(gpus.removeprefix("x")),
                                               int(batch.removeprefix("bs"))]


def output_len_cv(measurement_id: str) -> float:
    """A v3 row's output lengths' coefficient of variation, from its configuration's histogram; 0 for v2."""
    if not measurement_id.startswith("mlenergy-v3:"):
        return 0.0
    histogram = _v3_record(measurement_id)["output_length_distribution"]
    bins, counts = (np.asarray(histogram[k], float) for k in ("bins", "counts"))
    mid = (bins[1:] + bins[:-1]) / 2
    mean = np.average(mid, weights=counts)
    return float(np.sqrt(np.average((mid - mean) ** 2, weights=counts)) / mean)


def rows() -> pd.DataFrame:
    table = import_mlenergy(EXTERNAL)
    table = table[table["workload_ref"].notna()].copy()
    # v3 spreads a mixture of experts over several GPUs by expert parallelism (its every such row: expert_parallel =
    # num_gpus, data_parallel 1, and its vLLM configs --enable-expert-parallel): vLLM's EP size is TP x DP, so the
    # GPUs split attention by heads and hold the experts whole, a share each (`serve`'s expert_parallel). A row whose
    # attention runs data-parallel (data_parallel > 1, none of the catalog's models) would be left out.
    table["moe"] = table["model"].map({m: is_mixture_of_experts(resolve_model(m)[0]) for m in set(table["model"])})
    layout = [_v3_record(m)["parallelization"] if m.startswith("mlenergy-v3:") else {}
              for m in table["measurement_id"]]
    table["expert_parallel"] = [int(p.get("expert_parallel") or 1) > 1 for p in layout]
    table = table[[int(p.get("data_parallel") or 1) == 1 for p in layout]].copy()
    table["release"] = table["provenance"].str.split("/").str[0]
    table["measured_j_per_token"] = table["energy_j"] / table["batch"]
    table["measured_tokens_per_s"] = table["batch"] / table["time_s"]
    return table.reset_index(drop=True)


def _row_dtype(r) -> str:
    """A row's weights' precision as `serve` takes it: fp8 where it records fp8, else bf16 (also where none)."""
    return r.dtype if isinstance(r.dtype, str) and r.dtype in ("bf16", "fp8") else "bf16"


def _serve_row(r, input_len: int, residual, cv: float, input_len_cv: float = 0.0):
    """`serve` at a row's configuration: its measured mean batch as the concurrency, its GPUs as tensor
    parallelism, its release's engine, the assumed mean prompt `input_len` (its spread `input_len_cv`), the output
    lengths' spread `cv`."""
    max_batch = int(r.measurement_id.split(":bs")[1].split(":")[0])
    return serve(r.model, r.gpu, input_len=input_len, output_len=float(r.output_len), concurrency=int(r.batch),
                 max_batch=max(max_batch, int(r.batch)), tp=int(r.num_gpus), engine=ENGINES[r.release],
                 dtype=_row_dtype(r),
                 output_len_cv=cv, input_len_cv=input_len_cv, sampling=SAMPLING[r.release],
                 expert_parallel=bool(r.expert_parallel),
                 estimator=residual if residual is not None else "physics")


def score(table: pd.DataFrame, input_len: int, residual, spread: bool = True) -> pd.DataFrame:
    out = []
    for r in table.itertuples():
        cv = output_len_cv(r.measurement_id) if spread else 0.0
        est = _serve_row(r, input_len, residual, cv)
        lo, hi = est.energy_per_output_token_interval_j or (np.nan, np.nan)
        out.append(dict(release=r.release, gpu=r.gpu, model=r.model, tp=int(r.num_gpus), moe=bool(r.moe),
                        ep=bool(r.expert_parallel), dtype=_row_dtype(r), batch=int(r.batch), cv=cv,
                        measured_j_per_token=r.measured_j_per_token,
                        predicted_j_per_token=est.energy_per_output_token_j,
                        measured_tokens_per_s=r.measured_tokens_per_s, predicted_tokens_per_s=est.tokens_per_s,
                        j_per_token_lo=lo, j_per_token_hi=hi,
                        inside=bool(lo <= r.measured_j_per_token <= hi) if residual is not None else None))
    frame = pd.DataFrame(out)
    frame["energy_ape"] = 100 * (frame["predicted_j_per_token"] / frame["measured_j_per_token"] - 1).abs()
    frame["throughput_ape"] = 100 * (frame["predicted_tokens_per_s"] / frame["measured_tokens_per_s"] - 1).abs()
    return frame


def task_table(frame: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """`score`'s rows summarised per release, GPU and task (v3's lm-arena-chat and gpqa; v2's one, `chat`): v3's
    B200 ran its single-GPU gpqa rows at a step of 31-45 ms at 8-32 sequences whatever the model (HOST_FLOOR_MODELS'
    comment), which `serve` does not model, and this shows what they weigh in each GPU's figure."""
    task = table["measurement_id"].str.split(":").str[1].where(table["release"] == "mlenergy-v3", "chat")
    signed = 100 * (frame["predicted_j_per_token"] / frame["measured_j_per_token"] - 1)
    parts = frame.assign(task=task.to_numpy(), signed=signed, inside=frame["inside"].astype(float))
    return (parts.groupby(["release", "gpu", "task"])
            .agg(rows=("signed", "size"), j_per_token_mape=("energy_ape", "mean"), bias_pct=("signed", "mean"),
                 coverage_pct=("inside", "mean"))
            .assign(coverage_pct=lambda t: 100 * t["coverage_pct"]).reset_index())


def decode_steps(table: pd.DataFrame, residual) -> pd.DataFrame:
    """Per v3 row: the measured median inter-token latency and mean step (batch over output tokens a second, ms),
    and `serve`'s step with 1-token prompts (decodes alone) at the row's batch."""
    out = []
    for r in table[table["release"] == "mlenergy-v3"].itertuples():
        est = _serve_row(r, 1, residual, output_len_cv(r.measurement_id))
        out.append(dict(release=r.release, gpu=r.gpu, model=r.model, tp=int(r.num_gpus), batch=int(r.batch),
                        median_itl_ms=float(_v3_record(r.measurement_id)["median_itl_ms"]),
                        mean_step_ms=1e3 * r.time_s,
                        decode_step_ms=1e3 * r.batch / est.tokens_per_s))
    frame = pd.DataFrame(out)
    frame["decode_over_median"] = frame["decode_step_ms"] / frame["median_itl_ms"]
    return frame


def decode_step_summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Per release, GPU and tensor parallelism: the median ratio of the decode-only step to the measured median one
    at small and at large batches (NaN where none), at large ones what the median step exceeds it by per running
    sequence (ms), and the median step's share of the mean step."""
    def band(part: pd.DataFrame, keep: pd.Series, column: str = "decode_over_median") -> float:
        return float(part.loc[keep, column].median()) if keep.any() else float("nan")

    steps = steps.assign(excess_ms_per_sequence=(steps["median_itl_ms"] - steps["decode_step_ms"]) / steps["batch"])

    out = []
    for (release, gpu, tp), part in steps.groupby(["release", "gpu", "tp"]):
        out.append(dict(release=release, gpu=gpu, tp=int(tp), rows=len(part),
                        small_batch_ratio=band(part, part["batch"] <= SMALL_BATCH),
                        large_batch_ratio=band(part, part["batch"] >= LARGE_BATCH),
                        large_batch_excess_ms_per_sequence=band(part, part["batch"] >= LARGE_BATCH,
                                                                "excess_ms_per_sequence"),
                        median_over_mean_step=float((part["median_itl_ms"] / part["mean_step_ms"]).median())))
    return pd.DataFrame(out)


@contextmanager
def engine_host_off(engine: str) -> Iterator[None]:
    """`engine`'s host work taken out of the physics for a while (a study setting): its steps as GPU work alone."""
    spec = arch.SERVING_ENGINES[engine]
    before = spec["host_s_per_sequence"]
    spec["host_s_per_sequence"] = 0.0
    try:
        yield
    finally:
        spec["host_s_per_sequence"] = before


def host_floor_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Per v3 row: the measured step (batch over output tokens a second) and energy a step (all its GPUs) beside
    `serve`'s step with vLLM 0.11.1's host work taken out (its GPU work alone), and whether the measured step is at
    least HOST_BOUND_RATIO times that (host-bound: the GPU waits on the engine)."""
    v3 = table[(table["release"] == "mlenergy-v3") & table["model"].isin(HOST_FLOOR_MODELS)]
    with engine_host_off(ENGINES["mlenergy-v3"]):
        est = [_serve_row(r, HOST_FLOOR_PROMPT, None, output_len_cv(r.measurement_id)) for r in v3.itertuples()]
    frame = pd.DataFrame(dict(gpu=v3["gpu"].to_numpy(), model=v3["model"].to_numpy(), tp=v3["num_gpus"].astype(int),
                              batch=v3["batch"].to_numpy(float),
                              measured_step_ms=1e3 * v3["time_s"].to_numpy(), measured_step_j=v3["energy_j"].to_numpy(),
                              gpu_step_ms=[1e3 * e.step_time_s for e in est],
                              gpu_step_j=[e.step_energy_j for e in est],
                              idle_w=[float(lookup_gpu(g).idle_power_max_clock_w) for g in v3["gpu"]]))
    frame["host_bound"] = frame["measured_step_ms"] >= HOST_BOUND_RATIO * frame["gpu_step_ms"]
    return frame


def host_floor(frame: pd.DataFrame, gpu: str) -> dict[str, float]:
    """An engine's host work under the step, from one GPU's host-bound rows (`host_floor_rows`): the measured steps
    summed over the running sequences summed (ms a sequence), and the energy beyond the GPU's work over the time
    beyond it at idle power (x idle, each GPU of a row)."""
    bound = frame[(frame["gpu"] == gpu) & frame["host_bound"]]
    extra_s = 1e-3 * (bound["measured_step_ms"] - bound["gpu_step_ms"])
    return dict(gpu=gpu, rows=len(bound), batch_min=float(bound["batch"].min()), batch_max=float(bound["batch"].max()),
                host_ms_per_sequence=float(bound["measured_step_ms"].sum() / bound["batch"].sum()),
                per_row_ms_min=float((bound["measured_step_ms"] / bound["batch"]).min()),
                per_row_ms_max=float((bound["measured_step_ms"] / bound["batch"]).max()),
                power_over_idle=float((bound["measured_step_j"] - bound["gpu_step_j"]).sum()
                                      / (extra_s * bound["idle_w"] * bound["tp"]).sum()))


def tp_host_rows(table: pd.DataFrame) -> pd.DataFrame:
    """v2's tensor-parallel rows (vLLM 0.5.4) in physics at TP_HOST_PROMPT-token prompts: the measured step, the
    physics step without the engine's host work for its other workers (`tensor_parallel.worker_host`), and what the
    measured step exceeds it by per GPU beyond the first (ms)."""
    v2 = table[(table["release"] == "mlenergy-v2") & (table["num_gpus"] > 1)]
    est = [_serve_row(r, TP_HOST_PROMPT, None, 0.0) for r in v2.itertuples()]
    shipped = [worker_host(ENGINES["mlenergy-v2"], int(r.num_gpus), lookup_gpu(r.gpu), None)[0]
               for r in v2.itertuples()]
    frame = pd.DataFrame(dict(gpu=v2["gpu"].to_numpy(), model=v2["model"].to_numpy(), tp=v2["num_gpus"].astype(int),
                              batch=v2["batch"].to_numpy(float), measured_step_ms=1e3 * v2["time_s"].to_numpy(),
                              physics_step_ms=[1e3 * (e.step_time_s - h) for e, h in zip(est, shipped)]))
    frame["excess_ms_per_worker"] = (frame["measured_step_ms"] - frame["physics_step_ms"]) / (frame["tp"] - 1)
    return frame


def prompt_bounds(table: pd.DataFrame) -> pd.DataFrame:
    """Per configuration (release, GPU, model, GPUs, the weights' precision) at its largest measured batch: the
    longest mean prompt of PROMPT_GRID whose step fits VLLM_MEMORY_SHARE of the GPU's memory (NaN: none fits), and
    the memory a 1-token prompt needs."""
    out = []
    table = table.assign(weights=[_row_dtype(r) for r in table.itertuples()])
    for (release, gpu, model, gpus, weights), part in table.groupby(["release", "gpu", "model", "num_gpus", "weights"]):
        r = part.sort_values("batch").iloc[-1]
        max_batch = int(r.measurement_id.split(":bs")[1].split(":")[0])
        cap_gb = VLLM_MEMORY_SHARE * lookup_gpu(gpu).memory_gb

        def need_gb(length: int) -> float:
            return serve(model, gpu, input_len=length, output_len=float(r.output_len), concurrency=int(r.batch),
                         max_batch=max(max_batch, int(r.batch)), tp=int(gpus), engine=ENGINES[r.release],
                         dtype=weights, expert_parallel=bool(r.expert_parallel),
                         output_len_cv=output_len_cv(r.measurement_id), estimator="physics").memory_gb

        need = {length: need_gb(length) for length in PROMPT_GRID}
        fits = [length for length, gib in need.items() if gib <= cap_gb]
        out.append(dict(release=release, gpu=gpu, model=model, tp=int(gpus), dtype=weights, batch=int(r.batch),
                        output_len=float(r.output_len), memory_cap_gib=cap_gb, need_at_1_token_gib=need[1],
                        longest_fitting_prompt=float(max(fits)) if fits else float("nan")))
    return pd.DataFrame(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-len", default="192,256,512,1024", help="assumed mean prompt lengths, comma-separated")
    parser.add_argument("--estimator", default=None, help="as for estimate (default: the shipped model)")
    parser.add_argument("--no-spread", action="store_true", help="every answer as long (output_len_cv 0) in v3 too")
    parser.add_argument("--prompt-bounds", action="store_true",
                        help="instead: the longest mean prompt each configuration's largest batch fits in memory")
    parser.add_argument("--itl", action="store_true",
                        help="instead: v3's decode step alone against its measured median inter-token latency")
    parser.add_argument("--host-floor", metavar="GPU", nargs="?", const="b200", default=None,
                        help="instead: vLLM 0.11.1's host work under the step, from this GPU's host-bound v3 rows")
    parser.add_argument("--tp-host", action="store_true",
                        help="instead: vLLM 0.5.4's host work a step per tensor-parallel GPU beyond the first, from "
                             "v2's dense models' rows on several GPUs (TP_HOST_MODELS), the others checking it")
    parser.add_argument("--by-task", action="store_true",
                        help="instead: J a token per release, GPU and task (v3's gpqa reasoning rows apart from its "
                             "chat rows), at each --input-len")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    table = rows()
    if args.tp_host:
        frame = tp_host_rows(table)
        groups = frame.groupby(["gpu", "model", "tp"])["excess_ms_per_worker"].describe()[["count", "25%", "50%",
                                                                                            "75%"]]
        derived = float(frame.loc[frame["model"].isin(TP_HOST_MODELS), "excess_ms_per_worker"].median())
        shipped = engines.engine(ENGINES["mlenergy-v2"]).host_s_per_tp_worker * 1e3
        if args.json:
            print(json.dumps(dict(derived_ms_per_worker=derived, shipped_ms_per_worker=shipped,
                                  rows=frame.to_dict(orient="records")), indent=1, default=float))
        else:
            print(frame.round(2).to_string(index=False))
            print(groups.round(2).to_string())
            print(f"\nfrom {', '.join(TP_HOST_MODELS)}: {derived:.2f} ms a step per GPU beyond the first (the "
                  f"median of their rows; shipped {shipped:.2f})")
        return 0
    if args.host_floor:
        frame = host_floor_rows(table)
        bound = set(frame.loc[frame["host_bound"], "gpu"])
        derived = {g: host_floor(frame, g) for g in sorted(bound)}
        if args.host_floor not in derived:
            print(f"--host-floor: no host-bound v3 rows of {args.host_floor!r}; GPUs with some: "
                  f"{', '.join(derived) or 'none'}", file=sys.stderr)
            return 2
        shipped = arch.SERVING_ENGINES[ENGINES["mlenergy-v3"]]
        out = dict(derived_from=args.host_floor, derived=derived.get(args.host_floor),
                   shipped=dict(host_ms_per_sequence=shipped["host_s_per_sequence"] * 1e3,
                                host_ms_per_sequence_range=[v * 1e3 for v in shipped["host_s_per_sequence_range"]],
                                power_over_idle=shipped["power_over_idle"]),
                   by_gpu=list(derived.values()))
        if args.json:
            print(json.dumps(out, indent=1, default=float))
        else:
            print(frame.round(2).to_string(index=False))
            print(pd.DataFrame(out["by_gpu"]).round(3).to_string(index=False))
        return 0
    if args.itl:
        steps = decode_steps(table, load_estimator(args.estimator))
        summary = decode_step_summary(steps)
        if args.json:  # pandas writes a band without rows (NaN) as null, which json.dumps would write as NaN
            print(f'{{"summary": {summary.to_json(orient="records")}, "rows": {steps.to_json(orient="records")}}}')
        else:
            print(summary.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
        return 0
    if args.prompt_bounds:
        bounds = prompt_bounds(table)
        print(bounds.to_json(orient="records") if args.json else bounds.to_string(index=False, float_format="%.1f"))
        return 0
    residual = load_estimator(args.estimator)
    summary, by_task = [], []
    for length in (int(x) for x in args.input_len.split(",")):
        frame = score(table, length, residual, spread=not args.no_spread)
        if args.by_task:
            by_task.append(task_table(frame, table).assign(input_len=length))
            continue
        for (release, gpu, tp, moe, ep, dtype), part in frame.groupby(["release", "gpu", "tp", "moe", "ep", "dtype"]):
            summary.append(dict(input_len=length, release=release, gpu=gpu, tp=int(tp), moe=bool(moe), ep=bool(ep),
                                dtype=dtype,
                                rows=len(part),
                                j_per_token_mape=float(part["energy_ape"].mean()),
                                tokens_per_s_mape=float(part["throughput_ape"].mean()),
                                output_len_cv=float(part["cv"].mean()),
                                bias_pct=float(100 * (part["predicted_j_per_token"] / part["measured_j_per_token"]
                                                      - 1).mean()),
                                # physics alone has no interval: no coverage
                                coverage_pct=float(100 * part["inside"].mean()) if residual is not None else None))
    if args.by_task:  # v3's gpqa: reasoning, 7,000-9,500-token answers
        tasks = pd.concat(by_task)
        print(tasks.to_json(orient="records") if args.json
              else tasks.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
        return 0
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(pd.DataFrame(summary).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
