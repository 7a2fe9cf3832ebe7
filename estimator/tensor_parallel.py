"""Tensor parallelism over a job's passes: each of `tp` GPUs runs its shard of every pass
(`features.train_step.shard_config`: its heads, MLP and vocabulary split `tp` ways) and two all-reduces a layer of
the pass's activations (bf16, tokens x hidden) over the GPUs' own link (`GpuSpec.peer_link`: NVLink on SXM boards,
PCIe on PCIe cards), by NCCL's ring or an engine's own one- or two-shot kernels (`features.collectives`), which the
GPUs wait out at their waiting power, not overlapped (the engines tested do not overlap them), and an engine's host
work a step for its workers beyond the first where it has some (`worker_host`). A mixture's experts may instead be
split whole over the GPUs (expert parallelism): the step then waits for the busiest GPU, which the shard stands for,
and the others' lighter share comes off its energy (`expert_spread`). Shared by `serve` (a step) and `generate`
(each step of a generation).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data import engines
from joulecast.data.errors import InputError, require, require_switch
from joulecast.data.gpus import GpuSpec
from joulecast.data.job_file import reference
from joulecast.data.kernels import stack
from joulecast.data.models import hidden_size, layer_count
from joulecast.data.workload import AUTO_TP, is_auto_tp
from joulecast.features import collectives
from joulecast.features.kernel_table import kernel_columns
from joulecast.features.lower_transformers import expert_gemms
from joulecast.features.physics import analyze_arrays
from joulecast.features.power import waiting_power_w
from joulecast.features.train_step import shard_config


def check_tp(config: Mapping[str, Any], tp: object) -> int:
    """`tp` as a whole number of GPUs from 1 to 1,024 that the model's family has a rule for and its heads divide
    into (`features.train_step.shard_config`), else one InputError naming `tp`."""
    number = isinstance(tp, (int, float, np.integer, np.floating)) and not isinstance(tp, bool)
    if not number or not 1 <= tp <= 1024 or tp != int(tp):  # the range first: NaN and infinity fail it
        raise InputError("tp", f"must be a whole number of GPUs from 1 to 1,024, got {tp!r}")
    if tp > 1:
        try:
            shard_config(config, tp=int(tp))
        except InputError as exc:
            raise InputError("tp", str(exc).split(": ", 1)[-1]) from None
    return int(tp)


def check_expert_parallel(value: object, config: Mapping[str, Any] | None = None) -> bool:
    """`expert_parallel` as a bool (JSON true or false, not a string's truth, which reads "no" as yes), and where a
    model's `config` is given, true only for a mixture of experts (`features.train_step.shard_config`); else one
    InputError naming `expert_parallel`."""
    require_switch(value, "expert_parallel")
    if config is not None:
        shard_config(config, expert_parallel=bool(value))  # experts to split: a mixture's alone
    return bool(value)


# The instance sizes a memory hint tries: 2, 4 or 8 GPUs, within one node's NVLink domain (an HGX H100 node holds 8:
# data/distributed/systems.yaml's gpus_per_node, shared/reference/distributed.md [Latif]).
SPLITS = (2, 4, 8)


def check_tp_or_auto(config: Mapping[str, Any], tp: object) -> int:
    """`check_tp`, where `tp` may also be the word auto (`data.workload.AUTO_TP`: read as 1, the caller searching
    the fewest that fit), else one InputError naming `tp` that says so."""
    if is_auto_tp(tp):
        return 1
    if isinstance(tp, str):
        raise InputError("tp", f"must be a whole number of GPUs from 1 to 1,024 or {AUTO_TP!r} (the fewest whose "
                               f"shards fit), got {tp!r}")
    return check_tp(config, tp)


def fewest_fitting(config: Mapping[str, Any], tp: int, fits: Callable[[int], bool]) -> int | None:
    """The fewest tensor-parallel GPUs above `tp`, of SPLITS and dividing the model's heads (`check_tp`), for which
    `fits(gpus)`: what a job that passes its GPU's memory would hold on; None where none does."""
    for gpus in SPLITS:
        if gpus <= tp:
            continue
        try:
            check_tp(config, gpus)
        except InputError:
            continue
        if fits(gpus):
            return gpus
    return None


def all_reduce_s(config: Mapping[str, Any], spec: GpuSpec, engine: str | None, tp: int,
                 tokens: np.ndarray | float) -> np.ndarray:
    """Seconds a pass of `tokens` tokens spends in its tensor-parallel all-reduces: two a layer of tokens x hidden
    bf16 activations over the GPUs' own link (`GpuSpec.peer_link`, the reference's links), by the engine's own
    kernels where it has them and they run (NVLink, or two GPUs), else NCCL's ring; 0 on one GPU."""
    if tp <= 1:
        return np.zeros_like(np.asarray(tokens, float))
    link = reference("links")[spec.peer_link]
    # the engines' own kernels need every GPU linked by NVLink past two: vLLM turns them off ("not supported on more
    # than two PCIe-only GPUs", vllm/distributed/device_communicators/custom_all_reduce.py) and NCCL runs the sum
    custom = (engine is not None and engines.engine(engine).all_reduce == "custom"
              and (spec.peer_link.startswith("nvlink") or tp == 2))
    reduce = collectives.custom_all_reduce_s if custom else functools.partial(collectives.time_s, "all-reduce")
    payload = np.asarray(tokens, float) * hidden_size(config) * 2.0
    return 2 * layer_count(config) * reduce(tp, payload, link["gbytes_per_s"], link["latency_us"])


def worker_host(engine: str | None, tp: int, spec: GpuSpec, sm_clock_mhz: float | None) -> tuple[float, float]:
    """(seconds, watts a GPU) of the host work a step that an engine's tensor-parallel instance waits out for its
    workers beyond the first (`ServingEngine.host_s_per_tp_worker` x (tp - 1): vLLM 0.5's driver broadcasting each
    step's inputs to the other workers), at the engine's power over idle while its GPUs wait on the host; (0, 0) on
    one GPU, without an engine or for an engine without such work."""
    spec_of = engines.engine(engine) if engine is not None and tp > 1 else None
    if spec_of is None or not spec_of.host_s_per_tp_worker:
        return 0.0, 0.0
    return spec_of.host_s_per_tp_worker * (tp - 1), spec_of.power_over_idle * waiting_power_w(spec, sm_clock_mhz)


def instance_wait(config: Mapping[str, Any], spec: GpuSpec, engine: str | None, tp: int, tokens: np.ndarray | float,
                  sm_clock_mhz: float | None, expert_parallel: bool = False, dtype: str = "bf16",
                  power_limit_w: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, joules a GPU) that a step of `tokens` tokens adds on `tp` GPUs to one GPU's shard: its all-reduces
    (`all_reduce_s`) at the waiting power and the engine's host work for its other workers (`worker_host`) at its
    own, and with a mixture's experts split over the GPUs, what the split adds (`expert_spread`); 0 on one GPU."""
    comm = all_reduce_s(config, spec, engine, tp, tokens)
    host_s, host_w = worker_host(engine, tp, spec, sm_clock_mhz)
    seconds, joules = comm + host_s, comm * waiting_power_w(spec, sm_clock_mhz) + host_s * host_w
    if expert_parallel and tp > 1:
        spread_s, spread_j = expert_spread(config, spec, tp, tokens, dtype, sm_clock_mhz, power_limit_w)
        seconds, joules = seconds + spread_s, joules + spread_j
    return seconds, joules


def expert_spread(config: Mapping[str, Any], spec: GpuSpec, tp: int, tokens: np.ndarray | float, dtype: str,
                  sm_clock_mhz: float | None, power_limit_w: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, joules a GPU on average) that a step of `tokens` tokens adds to its shard's estimate where a
    mixture's experts are split whole over `tp` GPUs. The shard runs the whole experts the busiest GPU's expectation
    rounds to (`features.lower_transformers.expert_gemms`); the busiest runs that expectation, and the step waits for
    it, while the other tp - 1 run a GPU's share of the experts the tokens run on average and wait out the rest at
    the waiting power. Each GPU's grouped GEMMs' energy and time are the shard's in proportion to its experts (the
    weights each expert's GEMMs read: a step of few tokens, where the counts differ, is memory-bound). 0 where every
    GPU runs all its experts (a prefill, a large batch)."""
    shard = shard_config(config, tp=tp, expert_parallel=True)
    counts = np.asarray(tokens, dtype=np.int64)
    distinct = np.unique(counts)  # a job's steps share a few token counts (its prefill's, its decodes')
    parts, busiest, mean = {}, np.empty(len(distinct)), np.empty(len(distinct))
    for i, t in enumerate(distinct):
        records, busiest[i], mean[i] = expert_gemms(shard, int(t), dtype)
        parts[i] = kernel_columns(records)
    _, totals = analyze_arrays(stack(parts), spec, sm_clock_mhz=sm_clock_mhz, power_limit_w=power_limit_w)
    joules, seconds = totals.energy_j, totals.time_s
    waited = seconds * (busiest - mean) * waiting_power_w(spec, sm_clock_mhz)  # another GPU's wait for the busiest
    every = (joules * busiest + (tp - 1) * (joules * mean + waited)) / tp - joules  # a GPU's, against the shard's
    at = np.searchsorted(distinct, counts)
    return (seconds * (busiest - 1.0))[at], every[at]


def with_all_reduces(steps: pd.DataFrame, config: Mapping[str, Any], spec: GpuSpec, engine: str | None, tp: int,
                     tokens: np.ndarray, sm_clock_mhz: float | None, expert_parallel: bool = False,
                     dtype: str = "bf16", power_limit_w: float | None = None) -> pd.DataFrame:
    """Each step (an `estimate_many` row of one GPU's shard) as the instance runs it: its time and bounds with the
    step's all-reduces and its engine's host work for the other workers added (`instance_wait`, with what a
    mixture's experts split over the GPUs add), its energy and bounds every GPU's."""
    if tp <= 1:
        return steps
    wait_s, wait_j = instance_wait(config, spec, engine, tp, tokens, sm_clock_mhz, expert_parallel, dtype,
                                   power_limit_w)
    out = steps.copy()
    for column in ("time_s", "time_lo_s", "time_hi_s", "physics_time_s"):
        if column in out:
            out[column] = out[column] + wait_s
    for column in ("energy_j", "energy_lo_j", "energy_hi_j", "physics_energy_j"):
        if column in out:
            out[column] = tp * (out[column] + wait_j)
    out["power_w"] = out["energy_j"] / out["time_s"]
    return out
