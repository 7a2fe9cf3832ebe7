"""Jobs above one pass: a generation (a prefill, then one decode step a token with the KV cache growing), estimated
as all its steps at once (`estimate_many` over the steps, whose lowering is one vectorised template evaluation).

Intervals: the steps of one job share their model's error offset (the residual's errors are those of one model on
one GPU, not independent draws), so a job's interval is the sum of its steps' lower bounds to the sum of their upper
bounds: the rule for errors that move together (comonotone), which never narrows with more steps as independent
errors would.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.engines import check_engine, launch_mode_for
from joulecast.data.errors import InputError, require, require_choice, require_switch
from joulecast.data.files import REQUEST_LENGTHS, check_count, request_pairs
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.kernels import dtype_name
from joulecast.data.workload import LAUNCH_MODES, MAX_SIZE, check_host_dispatch, is_auto_tp
from joulecast.estimator.many import estimate_many
from joulecast.estimator.offload import H2D_DEFAULT_GBPS, check_offload, with_copies
from joulecast.estimator.tensor_parallel import (check_expert_parallel, check_tp_or_auto, fewest_fitting,
                                                 with_all_reduces)
from joulecast.features.design import host_dispatch, host_stated
from joulecast.features.lowering import ATTENTION_BACKENDS, check_job, resolve_model
from joulecast.features.physics import check_setting

# The most steps a list of requests may take in all (each batch its longest answer's): 50,000 steps took 8 CPU-s and
# 135 MB at their peak on the 2-core machine (1,000 requests of Llama-3-8B in batches of 8, 2026-12-07), so this bound
# about 80 s and 1.3 GB. A trace of millions of requests is a serving load (`serve` of its `RequestTrace.serving`).
MAX_REQUEST_STEPS = 500_000


@dataclass(frozen=True, slots=True)
class GenerationEstimate:
    """A generation of `output_len` tokens after `input_len` prompt tokens, for each of `batch` sequences."""

    model: str
    gpu: str
    batch: int
    input_len: int
    output_len: int
    kv_cache: bool
    energy_j: float
    time_s: float
    power_w: float
    energy_interval_j: tuple[float, float] | None
    time_interval_s: tuple[float, float] | None
    ttft_s: float                     # time to first token: the prefill
    tpot_s: float                     # time per output token after the first: the mean decode step
    energy_per_output_token_j: float  # the job's energy over every sequence's output tokens
    energy_per_request_j: float       # the job's energy over its sequences
    prefill_energy_j: float
    decode_energy_j: float
    memory_gb: float                  # the largest a step needs (the prefill's activations or the last KV cache)
    flags: tuple[str, ...] = ()
    outside_domain: tuple[str, ...] = ()  # out-of-domain: why, over every step (`job_reasons`)
    method: str = "hybrid"
    host_dispatch_s: float = 0.0      # the host's time an eager launch taken (0: CUDA graphs)
    host_dispatch_stated: bool = True  # False: the default taken, the interval spanning the measured hosts
    offload_gb: float = 0.0           # weights held in host memory, copied in every pass (`estimator.offload`)
    h2d_gbps: float | None = None     # their copy rate taken (None: nothing offloaded)
    h2d_stated: bool = True           # False: the posted rates' median taken, the interval spanning their range
    tp: int = 1                       # tensor-parallel GPUs: energy and power are all of theirs, memory one's
    expert_parallel: bool = False     # a mixture's experts split whole over the tp GPUs, not each one's width
    fits_tp: int | None = None        # exceeds-memory: the fewest tensor-parallel GPUs (2, 4, 8) whose shards fit
    tp_auto: bool = False             # tp "auto": `tp` the fewest GPUs whose shards fit (1 where one GPU holds it)
    steps: pd.DataFrame = field(default=None, compare=False, repr=False)  # each step's estimate

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "steps"}  # no table


def _positive(name: str, value: object) -> int:
    return check_count(value, name, MAX_SIZE)


def _steps(model: str, gpu: str, batch: int, input_len: int, output_len: int, kv_cache: bool,
           setting: dict[str, Any]) -> pd.DataFrame:
    """A generation's steps as `estimate_many` rows: the prompt's prefill, then `output_len - 1` decode steps, step t
    attending to `input_len + t` cached tokens (without a cache, a forward pass over every token so far)."""
    steps = np.arange(1, output_len)  # decode steps after the prefill's token
    if kv_cache:
        phases, seqs = ["prefill"] + ["decode"] * len(steps), np.concatenate([[input_len], input_len + steps - 1])
    else:
        phases, seqs = ["prefill"] * (1 + len(steps)), np.concatenate([[input_len], input_len + steps])
    frame = pd.DataFrame({"model": model, "gpu": gpu, "phase": phases, "batch": batch, "seq": seqs, **setting})
    if not kv_cache:
        frame["engine"] = ""  # a serving engine keeps a cache: HF's loop without one has no engine of its own
    return frame


def _setting(gpu: str, dtype: str, attention: str, launch_mode: str, engine: str | None,
             sm_clock_mhz: float | None, power_limit_w: float | None, host_dispatch_s: float | None = None,
             tp: int = 1, expert_parallel: bool = False) -> dict[str, Any]:
    # each a scalar: a list here became a column of its own length (a service body's "dtype": [] was a 500); the
    # names, the GPU, its clock and limit checked as one job's before its steps (`estimate_many` would name a bad
    # value's row: "row 0: ..."), the dtype by the lowering
    require(isinstance(dtype, str), "dtype", f"must be a name, got {dtype!r}")
    for name, value, allowed in (("attention", attention, ATTENTION_BACKENDS),
                                 ("launch_mode", launch_mode, LAUNCH_MODES)):
        require_choice(value, allowed, name)
    for name, value in (("sm_clock_mhz", sm_clock_mhz), ("power_limit_w", power_limit_w)):
        require(value is None or isinstance(value, (int, float, np.number)) and not isinstance(value, bool), name,
                f"must be a number, got {value!r}")
    check_setting(lookup_gpu(gpu), sm_clock_mhz, power_limit_w)
    host = check_host_dispatch(host_dispatch_s)
    return {"dtype": dtype, "attention": attention, "launch_mode": launch_mode, "engine": engine or "", "tp": tp,
            "expert_parallel": expert_parallel,
            "sm_clock_mhz": np.nan if sm_clock_mhz is None else sm_clock_mhz,
            "power_limit_w": np.nan if power_limit_w is None else power_limit_w,
            "host_dispatch_s": np.nan if host is None else host}


# An out-of-domain reason that names a feature's value: "seq = 4.1e+03 (trained 128 to 2.05e+03)"
_VALUE_REASON = re.compile(r"^(\S+) = (\S+) (\(.*)$")


def job_reasons(reasons: Iterable[str]) -> tuple[str, ...]:
    """Why a job's steps read outside the domain (`Estimate.outside_domain`, each step's joined by "; "), each reason
    once, in the order first met; a feature's value that the steps move (a generation's growing context) as the
    range they span: "kv_len = 129 to 192 (trained 16 to 2.05e+03)"."""
    said: dict[str, list[str]] = {}
    for joined in reasons:
        for reason in filter(None, str(joined).split("; ")):
            named = _VALUE_REASON.match(reason)
            key = f"{named[1]} = {{}} {named[3]}" if named else reason
            said.setdefault(key, [])
            if named:
                said[key].append(named[2])
    out = []
    for key, values in said.items():
        if not values:
            out.append(key)
            continue
        numbers = sorted(set(values), key=float)
        out.append(key.format(numbers[0] if len(numbers) == 1 else f"{numbers[0]} to {numbers[-1]}"))
    return tuple(out)


def _summed(out: pd.DataFrame) -> dict[str, Any]:
    """A job's totals over its steps' estimates: energy, time, average power, the comonotone intervals (physics
    alone: none), the largest memory, every flag raised and why a step read outside the domain, the method."""
    energy, time = float(out["energy_j"].sum()), float(out["time_s"].sum())
    hybrid = out["method"].iloc[0] == "hybrid"
    return dict(energy_j=energy, time_s=time, power_w=energy / time,
                energy_interval_j=(float(out["energy_lo_j"].sum()), float(out["energy_hi_j"].sum())) if hybrid
                else None,
                time_interval_s=(float(out["time_lo_s"].sum()), float(out["time_hi_s"].sum())) if hybrid else None,
                memory_gb=float(out["memory_gb"].max()),
                flags=tuple(sorted({f for joined in out["flags"] for f in str(joined).split(", ") if f})),
                outside_domain=job_reasons(out["outside_domain"]),
                method=str(out["method"].iloc[0]))


def generate(model: str, gpu: str, *, batch: int = 1, input_len: int, output_len: int, dtype: str = "bf16",
             kv_cache: bool = True, attention: str = "flash", launch_mode: str | None = None,
             engine: str | None = None,
             sm_clock_mhz: float | None = None, power_limit_w: float | None = None,
             host_dispatch_s: float | None = None, offload_gb: float = 0.0, h2d_gbps: float | None = None,
             tp: int | str = 1, expert_parallel: bool = False, estimator: Any = None,
             suggest_tp: bool = True) -> GenerationEstimate:
    """Estimate a whole generation: the prompt's prefill, then `output_len - 1` decode steps (the prefill yields the
    first token), step t attending to `input_len + t` cached tokens. Without a KV cache (HF transformers'
    `use_cache=False`) every step is a forward pass over all tokens so far.

    Approximation: a step without a cache is lowered as a prefill, without the LM head on its last token (one
    vocabulary-wide GEMV against a forward pass over every token).
    `host_dispatch_s`: the host's time an eager launch, where known (`Workload.host_dispatch_s`; default 25 us).
    `launch_mode`: default CUDA graphs (`graph`) where a serving `engine` runs the cached steps, else `eager`.
    `tp`: GPUs of one instance in tensor parallelism, each running its shard of every step and two all-reduces a
    layer (`estimator.tensor_parallel`); energy and power are every GPU's, memory one GPU's.
    `expert_parallel`: a mixture of experts' experts split whole over the `tp` GPUs, a share each (vLLM's
    --enable-expert-parallel; `features.lower_transformers.active_experts`: a step waits for its busiest GPU), not
    each expert's width.
    `offload_gb`: GiB of weights held in host memory and copied in before every pass, as Accelerate's
    `device_map="auto"` runs a model the GPU cannot hold, at `h2d_gbps` (the host's pageable copy rate, GB/s; default
    the posted rates' median, the interval spanning them: `estimator.offload`).
    `suggest_tp`: where the generation exceeds its GPU's memory, find the fewest tensor-parallel GPUs that hold it
    (`fits_tp`: a few passes of physics more; a sweep, which marks such a point infeasible, asks none).
    `tp` "auto": the generation on the fewest GPUs (1, 2, 4 or 8) whose shards fit (`tp_auto`; one past 8 GPUs'
    memory on one, flagged exceeds-memory with `fits_tp` none).

    Raises:
        InputError: naming the field that is wrong.
    """
    called = dict(locals())  # the arguments, for tp "auto"'s estimate on the GPUs found
    auto_tp = is_auto_tp(tp)
    suggest_tp = suggest_tp or auto_tp
    batch, input_len, output_len = (_positive(n, v) for n, v in (("batch", batch), ("input_len", input_len),
                                                                 ("output_len", output_len)))
    offload_gb, h2d_gbps = check_offload(offload_gb, h2d_gbps)
    (tp, expert_parallel), engine = _layout(model, tp, offload_gb, expert_parallel), check_engine(engine)
    kv_cache = require_switch(kv_cache, "kv_cache")
    launch_mode = launch_mode_for(launch_mode, engine if kv_cache else None)  # an engine's steps: CUDA graphs
    dtype = dtype_name(dtype)
    setting = _setting(gpu, dtype, attention, launch_mode, engine, sm_clock_mhz, power_limit_w, host_dispatch_s, tp,
                       expert_parallel)
    steps = _steps(model, gpu, batch, input_len, output_len, kv_cache, setting)
    out = with_copies(estimate_many(steps, estimator=estimator), gpu, offload_gb, h2d_gbps, sm_clock_mhz)
    out = _with_all_reduces(out, steps, model, gpu, tp, sm_clock_mhz, expert_parallel, dtype, power_limit_w)
    totals = _summed(out)
    energy = totals["energy_j"]
    fits_tp = _fits_tp(model, steps.iloc[[0, -1]], tp, totals["flags"], offload_gb) if suggest_tp else None
    if auto_tp and fits_tp:  # the fewest GPUs whose shards fit: the generation on them
        return dataclasses.replace(generate(**{**called, "tp": fits_tp, "suggest_tp": False}), tp_auto=True)
    dispatch = float(host_dispatch([launch_mode], [host_dispatch_s])[0])  # the host the steps took (design's rule)
    return GenerationEstimate(
        **_names(model, gpu), batch=batch, input_len=input_len, output_len=output_len, kv_cache=kv_cache, **totals,
        ttft_s=float(out["time_s"].iloc[0]),
        tpot_s=float(out["time_s"].iloc[1:].mean()) if output_len > 1 else float("nan"),
        energy_per_output_token_j=energy / (batch * output_len), energy_per_request_j=energy / batch,
        prefill_energy_j=float(out["energy_j"].iloc[0]), decode_energy_j=float(out["energy_j"].iloc[1:].sum()),
        host_dispatch_s=dispatch, host_dispatch_stated=host_stated(host_dispatch_s, dispatch),
        **_offload_fields(offload_gb, h2d_gbps), tp=tp, expert_parallel=expert_parallel, steps=out,
        fits_tp=fits_tp, tp_auto=auto_tp)


def _names(model: Any, gpu: str) -> dict[str, str]:
    """A job's model and GPU as the catalog names them (an alias or a config file given), as `serve` and
    `train_run` report theirs."""
    return {"model": resolve_model(model)[1], "gpu": lookup_gpu(gpu).name}


def _fits_tp(model: str, ends: pd.DataFrame, tp: int, flags: tuple[str, ...], offload_gb: float) -> int | None:
    """For a generation that exceeds its GPU's memory (and offloads none), the fewest tensor-parallel GPUs whose
    shards of its steps each fit a GPU, read at `ends`, the steps where its memory peaks (a batch's prefill, with
    the prompt's activations, and its last step, with the longest KV cache), in physics (memory takes no
    correction); else None."""
    if "exceeds-memory" not in flags or offload_gb:
        return None
    return fewest_fitting(resolve_model(model)[0], tp, lambda gpus: not estimate_many(
        ends.assign(tp=gpus), estimator="physics")["flags"].str.contains("exceeds-memory").any())


def _layout(model: str, tp: object, offload_gb: float, expert_parallel: object) -> tuple[int, bool]:
    """`tp` and `expert_parallel` checked: a whole number of GPUs the model's heads divide into
    (`features.train_step.shard_config`), no offloaded weights beside it (GPUs that hold a model between them need
    none), and experts split over them only where the model has experts."""
    # a generation's steps go through `estimate_many`, whose rows name their model: a config by its file's path
    require(not isinstance(model, Mapping), "model", "a catalog model name or a config.json path, got a mapping "
            "(a generation reads a config from its file)")
    config = resolve_model(model)[0]
    check_job(config, "generate")
    tp = check_tp_or_auto(config, tp)
    if tp > 1 and offload_gb:
        raise InputError("offload_gb", "give it or tp, not both: GPUs that hold the model between them copy none")
    return tp, check_expert_parallel(expert_parallel, config)


def _with_all_reduces(out: pd.DataFrame, steps: pd.DataFrame, model: str, gpu: str, tp: int,
                      sm_clock_mhz: float | None, expert_parallel: bool, dtype: str,
                      power_limit_w: float | None) -> pd.DataFrame:
    """Each step of a generation on `tp` GPUs (`estimator.tensor_parallel`): its all-reduces over the step's tokens
    (a prefill's batch x length, a decode step's batch), every GPU's energy (with the experts split over them, the
    GPUs other than the busiest running fewer)."""
    if tp == 1:
        return out
    tokens = steps["batch"].to_numpy(float) * np.where(steps["phase"] == "decode", 1.0, steps["seq"].to_numpy(float))
    engine = steps["engine"].iloc[0] or None  # a checked name, or "" (no engine: HF's loop without a cache too)
    return with_all_reduces(out, resolve_model(model)[0], lookup_gpu(gpu), engine, tp, tokens, sm_clock_mhz,
                            expert_parallel, dtype, power_limit_w)


def _offload_fields(offload_gb: float, h2d_gbps: float | None) -> dict[str, Any]:
    """A job's offload as its estimate reports it: the GiB, the copy rate taken (None where nothing is offloaded)
    and whether the host stated it."""
    return dict(offload_gb=offload_gb, h2d_gbps=None if not offload_gb else h2d_gbps or H2D_DEFAULT_GBPS,
                h2d_stated=h2d_gbps is not None or not offload_gb)


@dataclass(frozen=True, slots=True)
class RequestsEstimate:
    """A list of requests generated in static batches of `batch`, one batch after another in the list's order."""

    model: str
    gpu: str
    batch: int
    requests: int
    input_len_mean: float
    output_len_mean: float
    kv_cache: bool
    energy_j: float
    time_s: float
    power_w: float
    energy_interval_j: tuple[float, float] | None
    time_interval_s: tuple[float, float] | None
    ttft_mean_s: float                # a request's wait for its first token: the batches before its own, its prefill
    energy_per_output_token_j: float  # over the tokens the requests asked for (not their batch's padding)
    energy_per_request_j: float
    padding_share: float              # of the tokens the batches computed: those past a request's own end
    memory_gb: float
    flags: tuple[str, ...] = ()
    outside_domain: tuple[str, ...] = ()  # as `GenerationEstimate`'s
    method: str = "hybrid"
    offload_gb: float = 0.0           # as `GenerationEstimate`'s
    h2d_gbps: float | None = None
    h2d_stated: bool = True
    tp: int = 1
    expert_parallel: bool = False
    fits_tp: int | None = None        # as `GenerationEstimate`'s
    tp_auto: bool = False             # as `GenerationEstimate`'s

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _request_pair(request: Any, i: int) -> tuple:
    """A request as its (input_len, output_len): a pair, or an object with those two keys (a JSON list of request
    objects, as a CSV's columns: other keys, such as an id, left as they are)."""
    if isinstance(request, Mapping):
        missing = [key for key in REQUEST_LENGTHS if key not in request]
        require(not missing, f"requests[{i}]", f"an object needs {' and '.join(REQUEST_LENGTHS)}; it has no "
                                               f"{' or '.join(missing)}")
        return tuple(request[key] for key in REQUEST_LENGTHS)
    return tuple(request)


def generate_requests(model: str, gpu: str, requests: Any, *, batch: int = 1, dtype: str = "bf16",
                      kv_cache: bool = True, attention: str = "flash", launch_mode: str | None = None,
                      engine: str | None = None, sm_clock_mhz: float | None = None,
                      power_limit_w: float | None = None, host_dispatch_s: float | None = None,
                      offload_gb: float = 0.0, h2d_gbps: float | None = None, tp: int | str = 1,
                      expert_parallel: bool = False, estimator: Any = None) -> RequestsEstimate:
    """Estimate a list of requests, (input_len, output_len) each (or a frame's input_len and output_len columns),
    generated as Hugging Face's `generate` runs a batch: `batch` requests at a time in the list's order, each batch
    padded to its longest prompt and decoding until its longest answer ends (a finished sequence goes on as padding),
    one batch after another. Every batch's steps go through `estimate_many` in one pass; the interval adds up all
    steps' bounds, as `generate`'s; weights offloaded to host memory (`offload_gb`, `h2d_gbps`), tensor
    parallelism (`tp`, "auto" too) and experts split over its GPUs (`expert_parallel`) as `generate` takes them.

    Raises:
        InputError: naming the field that is wrong (`requests[i]` for a request).
    """
    called = dict(locals())  # the arguments, for tp "auto"'s estimate on the GPUs found
    batch = _positive("batch", batch)
    if isinstance(requests, pd.DataFrame):  # a requests CSV read by pandas: its two columns, lengths as the CLI reads
        require({"input_len", "output_len"} <= set(requests.columns), "requests",
                f"a frame needs input_len and output_len columns; it has {', '.join(map(str, requests.columns))}")
        requests = request_pairs(requests[["input_len", "output_len"]].to_numpy(dtype=object).tolist())
    try:
        pairs = [_request_pair(r, i) for i, r in enumerate(requests)]
    except TypeError:
        raise InputError("requests", "must be a list of [input_len, output_len] pairs") from None
    if not pairs:
        raise InputError("requests", "must hold at least one [input_len, output_len] pair")
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            raise InputError(f"requests[{i}]", f"must be [input_len, output_len], got {list(pair)!r}")
        _positive(f"requests[{i}].input_len", pair[0])
        _positive(f"requests[{i}].output_len", pair[1])
    lengths = np.array(pairs, dtype=np.int64)
    auto_tp = is_auto_tp(tp)
    offload_gb, h2d_gbps = check_offload(offload_gb, h2d_gbps)
    (tp, expert_parallel), engine = _layout(model, tp, offload_gb, expert_parallel), check_engine(engine)
    kv_cache = require_switch(kv_cache, "kv_cache")
    launch_mode = launch_mode_for(launch_mode, engine if kv_cache else None)
    dtype = dtype_name(dtype)
    setting = _setting(gpu, dtype, attention, launch_mode, engine, sm_clock_mhz, power_limit_w, host_dispatch_s, tp,
                       expert_parallel)
    starts = np.arange(0, len(lengths), batch)
    steps_needed = int(np.maximum.reduceat(lengths[:, 1], starts).sum())  # each batch decodes to its longest answer
    if steps_needed > MAX_REQUEST_STEPS:
        raise InputError("requests", f"{len(lengths):,} requests in batches of {batch} take {steps_needed:,} steps; at "
                                     f"most {MAX_REQUEST_STEPS:,} (about 80 s of CPU): give fewer, or serve them as "
                                     "a load (phase serve with the requests)")
    groups = [lengths[i:i + batch] for i in starts]
    frames = [_steps(model, gpu, len(g), int(g[:, 0].max()), int(g[:, 1].max()), kv_cache, setting) for g in groups]
    steps = pd.concat(frames, ignore_index=True)
    out = with_copies(estimate_many(steps, estimator=estimator), gpu, offload_gb, h2d_gbps, sm_clock_mhz)
    out = _with_all_reduces(out, steps, model, gpu, tp, sm_clock_mhz, expert_parallel, dtype, power_limit_w)
    group = np.repeat(np.arange(len(groups)), [len(f) for f in frames])  # each step's batch
    group_time = np.bincount(group, out["time_s"].to_numpy(float), minlength=len(groups))
    first = np.flatnonzero(np.diff(np.concatenate([[-1], group])))  # each batch's prefill row
    waits = np.concatenate([[0.0], np.cumsum(group_time)[:-1]]) + out["time_s"].to_numpy(float)[first]
    totals = _summed(out)
    asked = int(lengths[:, 1].sum())
    computed = sum(len(g) * int(g[:, 1].max()) for g in groups)
    fits_tp = _fits_tp(model, steps.iloc[np.concatenate([first, np.r_[first[1:], len(steps)] - 1])], tp,
                       totals["flags"], offload_gb)
    if auto_tp and fits_tp:  # the fewest GPUs whose shards fit: the requests on them
        return dataclasses.replace(generate_requests(**{**called, "tp": fits_tp}), tp_auto=True)
    return RequestsEstimate(
        **_names(model, gpu), batch=batch, requests=len(lengths), input_len_mean=float(lengths[:, 0].mean()),
        output_len_mean=float(lengths[:, 1].mean()), kv_cache=kv_cache, **totals,
        ttft_mean_s=float(np.repeat(waits, [len(g) for g in groups]).mean()),
        energy_per_output_token_j=totals["energy_j"] / asked, energy_per_request_j=totals["energy_j"] / len(lengths),
        padding_share=1.0 - asked / computed, **_offload_fields(offload_gb, h2d_gbps), tp=tp,
        expert_parallel=expert_parallel, fits_tp=fits_tp, tp_auto=auto_tp)
