"""Steady-state serving (`joulecast.serve`, `estimate --phase serve`): a model behind a continuous-batching engine at a
concurrency or a request rate, with mean prompt and output lengths (and the output lengths' spread); tokens a
second, J an output token, J a request, average power with the idle time a light load leaves.

The engine step (stated approximations):
- a step decodes one token for each of the B running requests, whose contexts average input + output (1 + cv^2) / 2
  tokens: a request caught running at a step is length-biased, a long answer running for more steps than a short
  one, so the output it has generated so far averages E[out^2] / (2 E[out]), output / 2 only where every answer is
  as long (cv, the output lengths' coefficient of variation, 0); prompt lengths taken independent of output lengths.
  The step carries prefill chunks of arriving prompts (chunked prefill, as vLLM 0.11.1 ran ML.ENERGY v3, at most 8,192
  tokens a step: `max-num-batched-tokens` in its benchmark_configs.csv; the default `chunk_tokens`): in the steady
  state a request finishes and is replaced every output_len / B steps, so a step carries p = B x input / output
  prompt tokens, at most `chunk_tokens`;
- one step is one pass: every kernel but attention runs once over the B + p tokens together (the linear layers'
  weights read once; engines flatten a step's tokens), the decode attention over the B contexts, the prompts'
  attention over their chunks (`joulecast.features.serve_step`, whose step ML.ENERGY v2's rows are trained as: the
  residual corrects the work it learned on);
- with tensor parallelism (tp GPUs) each GPU runs its shard (`features.train_step.shard_config`) and two all-reduces
  a layer of the step's activations over the GPUs' NVLink (`data/distributed/links.yaml`, the class of the catalog
  GPU's generation), by the engine's own one- or two-shot kernels where it has them (every engine listed; NCCL's
  ring for the kernels alone: `features.collectives`), not overlapped (the engines tested do not), the GPUs
  waiting at their idle power at their clock meanwhile (the maximum, or the one locked: `sm_clock_mhz`), and for
  the engine's host work a step per GPU beyond the first where it has some (vLLM 0.5.4's driver broadcasting each
  step's inputs to its other workers: `tensor_parallel.worker_host`), at its host work's power;
- engines as data (`data/serving_engines.yaml`, each figure sourced): their own host work between steps, per
  running request, at a measured power, their own decode attention kernel, and their sampler where it is GPU work
  worth pricing (vLLM's PyTorch-native one: a sort of every decode's logits for top-p or top-k, count tables for
  penalties; `features.sampling`) for requests that sample (`sampling`; greedy ones add nothing); "none" for the
  kernels alone (CUDA graphs by default, as the engines replay their decode steps).
Load: `concurrency` C keeps C requests in flight (B = min(C, max_batch)); `request_rate` (requests/s, Poisson)
gives B by Little's law, B = rate x output_len x step time(B), solved over a grid of B; with Poisson arrivals and
every request served at once the number in flight is Poisson, so the GPU idles a share exp(-B) of the time, at its
catalog idle power; a request's time to first token counts its wait for one of the max_batch slots
(`estimator.slot_wait`) and then its prompt's prefill: the step that runs its prompt beside the steady state's mean
prompt tokens (a prompt past the chunk a whole chunk a step before its last), priced at a few of a rate's grid of
batches and read between (PREFILL_BATCHES), over the prompts' lengths where they spread (lognormal,
`token_gaps.length_bins`). The gaps between a request's tokens are the steps it runs in, which differ by the prompts
they admit (`estimator.token_gaps`). A rate above what max_batch serves is an error naming the most it serves. A load
that varies (`window_rates`: a trace's arrivals a second in each window of `window_s`,
`data.requests.RequestTrace.windows`) is priced window by window, each window a steady state at its own rate (a
window without arrivals at idle power), at the load's lengths or, where `window_lengths` gives them, its own, in
length classes that share a grid of steps (`estimator.serve_windows`): its bursts cost what their batches draw, and
its hours of long prompts what theirs do, which the mean rate and lengths average away; with `queue`, a window's
arrivals past what it serves wait for the windows after it (a fluid queue: `fluid_queue.queued`) instead of being
refused.
Interval: the step's, every step sharing its error (comonotone, as `estimator.jobs`). Serving fp8 weights, it
reaches up to the same load's cost in bf16 (`FP8_REACHES_BF16`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from joulecast.data import engines
from joulecast.data.errors import InputError, require, require_choice, require_switch
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.kept import kept_for
from joulecast.data.kernels import DTYPES, dtype_name
from joulecast.data.workload import LAUNCH_MODES, MAX_TOKENS, Workload, check_host_dispatch, is_auto_tp
from joulecast.estimator import token_gaps
from joulecast.estimator.api import Estimate, estimate_batch
from joulecast.estimator.autoscaler import Instances, Pieces, Reactive, following_text, reactive_instances
from joulecast.estimator.fluid_queue import queued
from joulecast.estimator.loading import load_estimator
from joulecast.estimator.reactive_queue import queued_reactive
from joulecast.estimator.serve_windows import (
    MAX_COLD_START_S,
    MAX_HEADROOM,
    SPARES,
    check_window_lengths,
    check_windows,
    length_classes,
    pooled_whole,
    positive,
    scaled_in,
    share,
    standby,
)
from joulecast.estimator.slot_wait import SlotWaits, closed_wait_s, open_waits, quantile_s
from joulecast.estimator.tensor_parallel import (
    check_expert_parallel,
    SPLITS,
    check_tp,
    check_tp_or_auto,
    fewest_fitting,
    instance_wait,
)
from joulecast.features import serve_step
from joulecast.features.lowering import check_job, resolve_model
from joulecast.features.physics import check_setting
from joulecast.features.sampling import check_sampling

HOST_BOUND_SHARE = 0.8   # a step whose GPU runs kernels under this share of it is host-bound (`gpu_busy_share`)
MAX_TTFT_TARGET_S = 86_400.0  # an autoscaler's latency target: past a day, no latency is asked of it
TTFT_QUANTILE = 0.99  # the share of requests whose first token `ttft_p99_s` bounds (serving SLOs are set on it)
# the shares of output tokens whose gap from the token before `itl_p90_s` and `itl_p99_s` bound (the percentiles
# ML.ENERGY v3 publishes for its runs, ../shared/data/external/mlenergy-v3/PROVENANCE.md, against which
# experiments/token_gaps.py scores them)
ITL_QUANTILES = (0.9, 0.99)
ITL_TARGET_QUANTILE = 0.99  # the share of a window's gaps an autoscaler's `itl_p99_target_s` bounds
# A load at a rate prices a request's prompt's steps at this many of its grid's batch sizes, what they add to the
# step read between (at all 21 of the grid's: the week's autoscaled trace's first tokens the same to 0.1 %, at about
# twice the CPU time, experiments/trace_reading.py)
PREFILL_BATCHES = 6
# An FP8 checkpoint's scaled GEMMs are not modelled (whichever the engine picks on the GPU, block-scaled or by row):
# physics halves the weights' bytes and doubles the tensor rate. The measured FP8 deployments ran anywhere from that
# cost to bf16's and past it at small batches: ML.ENERGY v3, vLLM 0.11.1, Qwen3-235B-A22B's block-scaled experts on
# 2-8 H100s and B200s and Llama-3.1-405B's row-scaled layers on 8 H100s and 4 B200s (60 runs) read 35 % low on
# average against physics in fp8, their steps as long as in bf16 or longer from 8 to 96 requests, and drew more power
# (experiments/serving_jobs.py, experiments/HISTORY.md): Qwen3-235B-A22B's measured J a token in fp8 over bf16's, on
# the same GPUs and task, 1.54-1.61x at 8 requests, 1.22-1.30x at 16, 0.95-1.09x at 32, 0.88-0.96x from 64 to 192
# (a public report saw it too: GitHub vllm-project/vllm issue #25540, its FP8 checkpoint serving worse than bf16 on 4
# GPUs); the H200's single fp8 GEMMs, quantized beforehand, read as physics gives them. Each layer's activation
# quantization is priced since 2026-12-05's fourth session (`features.builder`): the 60 runs' J a token at 192-token
# prompts, bias -39.0 -> -35.8 %. So the interval of fp8 serving reaches up to the high end of the same load served in
# bf16; the point stays fp8's.
FP8_REACHES_BF16 = True


def reaches_bf16(dtype: str) -> bool:
    """Whether a serving estimate of weights in `dtype` has its interval reach the cost in bf16 (`FP8_REACHES_BF16`):
    the one test `serve` and its table both read."""
    return dtype == "fp8" and FP8_REACHES_BF16


@dataclass(frozen=True, slots=True)
class ServeEstimate:
    """Steady-state serving of one model on `instances` instances of `tp` GPUs each (SI units in the names): a step's
    time and energy (one instance's), tokens and requests a second, J an output token (with its interval) and a
    request, power with idle time counted (all instances'), and the totals over `duration_s` or `output_tokens`
    where given."""

    model: str
    gpu: str
    tp: int
    expert_parallel: bool         # a mixture's experts split whole over the tp GPUs, not each one's width
    engine: str
    dtype: str                    # the weights' precision (fp8: its interval reaches bf16's cost, FP8_REACHES_BF16)
    sampling: str                 # how the requests pick their tokens (`features.sampling.SAMPLING`)
    input_len: float
    output_len: float
    batch: float                  # requests in flight on average (while the GPU is busy: busy_batch)
    busy_batch: int
    idle_share: float
    step_time_s: float            # = time per output token
    step_energy_j: float          # all tp GPUs
    tokens_per_s: float
    requests_per_s: float
    power_w: float                # all tp GPUs of every instance, idle time included
    energy_per_output_token_j: float
    energy_per_request_j: float
    energy_per_output_token_interval_j: tuple[float, float] | None
    ttft_s: float                 # a request's mean wait for a batch slot (slot_wait_s), queued (`queue`) its
                                  # mean wait for the backlog it finds (wait_s), then its prompt's prefill
                                  # (prefill_s)
    gpu_busy_share: float         # of a step (physics' timeline), the GPU running kernels: the rest it waits on the
                                  # engine's host work, the all-reduces or launches (host-bound where this is low)
    memory_gb: float
    flags: tuple[str, ...]
    fits_tp: int | None           # exceeds-memory: the fewest tensor-parallel GPUs (2, 4, 8) whose shards fit
    method: str
    sm_clock_mhz: float           # the locked SM clock (the maximum where none was given; a power cap may lower it)
    power_limit_w: float          # a GPU's power limit
    duration_s: float | None = None   # serving totalled over this long (given, or the time `output_tokens` take)
    energy_j: float | None = None
    output_tokens: float | None = None  # output tokens served in duration_s
    energy_interval_j: tuple[float, float] | None = None  # energy_j's, the per-token figure's relative band
    outside_domain: tuple[str, ...] = ()  # out-of-domain: why (the step's, `Estimate.outside_domain`)
    tp_auto: bool = False         # tp "auto": `tp` the fewest GPUs whose shards fit and serve the load
    instances: int = 1            # identical instances the load is spread over, each its share (data-parallel)
    autoscale: bool = False       # window by window, as few of the instances as serve each window (`windows`)
    spare: str = "off"            # autoscaled: the instances not serving off (drawing nothing) or idle (warm)
    cold_start_s: float = 0.0     # autoscaled, spares off: an instance's start, at idle power, before it serves
    headroom: float = 0.0         # autoscaled: capacity kept over each window's demand, a share of it
    ttft_target_s: float | None = None  # autoscaled: the mean time to first token each window's instances keep to
    ttft_p99_target_s: float | None = None  # autoscaled: the time within which they keep 99 % of first tokens
    itl_p99_target_s: float | None = None  # autoscaled: the gap within which they keep 99 % of a window's tokens
    reactive: bool = False        # autoscaled: each window on the instances the window before needed, not its own
    reaction_s: float | None = None  # reactive: scaling this long after a window's load changes (None: a window on)
    scale_in_delay_s: float = 0.0  # reactive: scaling in to the most needed over this long (HPA's stabilization)
    min_instances: int = 1        # autoscaled: the fewest it keeps (0: it scales to zero where a window has no load)
    queue: bool = False           # window by window, the arrivals past what a window serves queued for the next
    wait_s: float | None = None   # queued: a request's mean wait for the backlog it finds (none without `queue`)
    slot_wait_s: float = 0.0      # a request's mean wait for one of max_batch slots (`estimator.slot_wait`)
    prefill_s: float = 0.0        # a request's time from its admission to its first token: its prompt's steps
    ttft_p99_s: float | None = None  # the time within which 99 % of requests have their first token
    # the time within which 90 % and 99 % of output tokens come after the token before (inter-token latency: the
    # steps differ by the prompts they admit, `estimator.token_gaps`), over every window's tokens (each window's in
    # `windows`); none where no request makes a token after its first
    itl_p90_s: float | None = None
    itl_p99_s: float | None = None
    windows: ServeWindows | None = None  # the load window by window, where it was given so (`window_rates`)

    @property
    def tpot_s(self) -> float:
        """Each request's time between its output tokens: one step (`generate`'s `tpot_s`, for scripts reading both)."""
        return self.step_time_s

    def to_dict(self) -> dict[str, Any]:
        out = {**{name: getattr(self, name) for name in self.__dataclass_fields__}, "tpot_s": self.tpot_s}
        return {**out, "windows": None if self.windows is None else self.windows.to_dict()}


@dataclass(frozen=True, slots=True)
class ServeWindows:
    """A load served window by window (`serve`'s `window_rates`): each window's length (all the same but the last,
    where the load stops within it), arrivals a second (every instance's), requests in flight an instance, share of
    time idle, seconds a token, average power and energy (all instances serving it), output tokens, the instances
    serving it, its requests' mean lengths (`window_lengths`'; the load's where it has none of its own, or no
    requests), queued (`queue`), its backlog at its end and its requests' mean wait, and autoscaled, the instances
    started for it (their cold starts and idle spares in its power and energy); a window's interval is the whole
    load's relative band (its steps share one error)."""

    duration_s: np.ndarray
    request_rate: np.ndarray
    batch: np.ndarray
    idle_share: np.ndarray
    step_time_s: np.ndarray
    power_w: np.ndarray
    energy_j: np.ndarray
    output_tokens: np.ndarray
    instances: np.ndarray         # serving the window: all of them, or as few as serve it where autoscaled
    # (reactive: those it held, serving or starting, its mean over the window where they change within it)
    input_len: np.ndarray
    output_len: np.ndarray
    backlog: np.ndarray           # requests waiting at the window's end (`queue`; 0 without it)
    wait_s: np.ndarray            # a request's mean wait for the backlog it finds in the window (`queue`)
    started: np.ndarray           # autoscaled, spares off: instances started (cold) to serve the window
    slot_wait_s: np.ndarray       # a request's mean wait for a batch slot in the window (`estimator.slot_wait`)
    ttft_p99_s: np.ndarray        # the time within which 99 % of the window's requests have their first token
    standby_j: np.ndarray         # autoscaled: its idle spares' or its cold starts' energy (in energy_j)
    prefill_s: np.ndarray         # a request's time from its admission to its first token in the window
    itl_p90_s: np.ndarray         # the gap within which 90 % of the window's tokens come after the one before
    itl_p99_s: np.ndarray         # and 99 % (NaN: no gap, answers of a token or no request)
    serving: np.ndarray           # instances loaded and serving (reactive: fewer than `instances` while starts load)

    @property
    def window_s(self) -> float:
        """The windows' length (the last's may differ)."""
        return float(self.duration_s[0])

    @property
    def start_s(self) -> np.ndarray:
        """Each window's start, seconds from the first arrival."""
        return np.concatenate([[0.0], np.cumsum(self.duration_s)[:-1]])

    def to_dict(self) -> dict[str, Any]:
        """Columns, a value a window (JSON's lists), the windows' length and the start of each."""
        return {"window_s": self.window_s, "start_s": self.start_s.tolist(),
                **{name: getattr(self, name).tolist() for name in self.__dataclass_fields__}}


# The most instances one serving estimate spreads a load over: a 100,000-GPU fleet at 8 GPUs an instance is 12,500.
MAX_INSTANCES = 100_000


class BeyondCapacityError(InputError):
    """A request rate beyond what `max_batch` in flight serve on the GPU: a sweep's point it cannot serve, not a bad
    value (`estimator.sweep` marks the point `exceeds-capacity`)."""


def _check_context(input_len: float, output_len: float, output_len_cv: float, concurrency: int | None,
                   max_batch: int, chunk_tokens: int, field: str = "input_len") -> None:
    """The largest step (a request rate's reach max_batch in flight) within a pass's MAX_TOKENS, its tokens over
    their context; else one line naming `field` with the longest context this load takes."""
    in_flight = max_batch if concurrency is None else min(concurrency, max_batch)
    tokens, context = serve_step.step_size(in_flight, input_len, output_len, output_len_cv, chunk_tokens)
    if tokens * context > MAX_TOKENS:
        which = "max_batch" if concurrency is None or concurrency > max_batch else "concurrency"
        raise InputError(field, f"{input_len:,.0f} tokens with {in_flight:,} in flight ({which}): a step's "
                         f"{tokens:,} tokens over a {context:,}-token context are {tokens * context:,}, over the "
                         f"{MAX_TOKENS:,} a pass holds; at this load, contexts up to {MAX_TOKENS // tokens:,} tokens "
                         "(the prompt and half the answer)")


# Serving steps lowered, by their catalog model and shape (`_evaluate`): at most this many kept, a few kB each (a
# sweep's GPUs, clocks and rates serve the same 69 steps at a rate: the grid's 21, 12 for a request's prompt and 36
# for the gaps between tokens; a trace's 16 length classes 16 x 69, kept for two traces, or a trace by the hour and
# by the minute)
STEPS_KEPT = 4096
_STEPS: dict = {}


def _evaluate(model: str, spec: Any, batches: np.ndarray | list[np.ndarray], sizes: Sequence[Mapping[str, float]],
              dtype: str, engine: str | None, launch_mode: str, tp: int, chunk_tokens: int, residual: Any,
              sm_clock_mhz: float | None = None, power_limit_w: float | None = None,
              host_dispatch_s: float | None = None, sampling: str = "greedy", expert_parallel: bool = False
              ) -> list[list[tuple[Estimate, float, float, float]]]:
    """For each of `sizes` (a length class's input_len, output_len, input_len_cv and output_len_cv), per batch size
    (`batches`: the same for every size, or a list of them, a size each): the step's estimate on one GPU, the
    seconds and joules a GPU its instance adds to it (`tensor_parallel.instance_wait`: all-reduces, the engine's host
    work for its other workers), and the step's prompt tokens."""
    config, named, source = resolve_model(model)
    shape = dict(dtype=dtype, engine=engine, launch_mode=launch_mode, tp=tp, chunk_tokens=chunk_tokens,
                 host_dispatch_s=host_dispatch_s, sampling=sampling, expert_parallel=expert_parallel)

    def step(b: int, size: Mapping[str, float]) -> tuple[Workload, int]:
        make = functools.partial(serve_step.step_workload, config, batch=b, **size, **shape)
        if source != "catalog":  # a config file's: lowered as read
            return make()
        # a catalog model's step kept: a sweep's GPUs, clocks, limits and rates serve the same steps
        return kept_for(_STEPS, (), make, STEPS_KEPT, (named, b, *size.items(), *shape.items()))

    each = list(batches) if isinstance(batches, list) else [batches] * len(sizes)
    works, prompts = zip(*(step(int(b), size) for size, some in zip(sizes, each) for b in some))
    # every class's and batch's step in one physics pass and one residual prediction
    ests = estimate_batch(list(works), spec, sm_clock_mhz=sm_clock_mhz, power_limit_w=power_limit_w,
                          estimator=residual if residual is not None else "physics")
    # every step's instance at once (one physics pass over the experts' GEMMs where they are split)
    tokens = np.concatenate([np.asarray(some, dtype=np.int64) for some in each]) + np.asarray(prompts, dtype=np.int64)
    wait_s, wait_j = instance_wait(config, spec, engine, tp, tokens, sm_clock_mhz, expert_parallel, dtype,
                                   power_limit_w)
    steps = [(est, float(s), float(j), float(p)) for est, s, j, p in zip(ests, wait_s, wait_j, prompts)]
    ends = np.cumsum([len(some) for some in each])
    return [steps[end - len(some):end] for some, end in zip(each, ends)]


def serve(model: str, gpu: str, *, input_len: float | None = None, output_len: float | None = None,
          concurrency: int | None = None, request_rate: float | None = None, max_batch: int = 256,
          engine: str = "none", tp: int | str = 1,
          dtype: str = "bf16", launch_mode: str = "graph", chunk_tokens: int = serve_step.CHUNK_TOKENS,
          duration_s: float | None = None,
          sm_clock_mhz: float | None = None, power_limit_w: float | None = None, output_tokens: float | None = None,
          output_len_cv: float | None = None, input_len_cv: float | None = None,
          host_dispatch_s: float | None = None, sampling: str = "greedy", expert_parallel: bool = False,
          instances: int = 1, window_rates: Any = None, window_s: float | None = None,
          last_window_s: float | None = None, window_lengths: Any = None, autoscale: bool = False,
          spare: str = "off", cold_start_s: float = 0.0, headroom: float = 0.0, ttft_target_s: float | None = None,
          ttft_p99_target_s: float | None = None, itl_p99_target_s: float | None = None, reactive: bool = False,
          reaction_s: float | None = None, scale_in_delay_s: float = 0.0, min_instances: int = 1,
          queue: bool = False, estimator: Any = None, suggest_tp: bool = True) -> ServeEstimate:
    """Estimate steady-state serving (see the module's docstring), at a locked SM clock and a power limit where
    given (each GPU of a tensor-parallel instance so set), else the GPU's defaults; totalled (`energy_j`) over
    `duration_s` seconds, or over the time `output_tokens` output tokens take at this load ("a million served
    tokens"). `output_len_cv`: the output lengths' standard deviation over their mean (0, or none: every answer as
    long); `input_len_cv` the prompts' (their chunks' attention grows with each prompt's length squared).
    `sampling`: how the requests pick their tokens, `greedy`, `top-p` (top-p or top-k) or `top-p-penalties` (also
    repetition, frequency or presence penalties), which an engine with a priced sampler turns into GPU work a step.
    `expert_parallel`: a mixture of experts' experts split whole over the `tp` GPUs (vLLM's --enable-expert-parallel:
    each GPU a tp-th of them, attention still split by heads, the same two all-reduces a layer) instead of each
    expert's width split `tp` ways.
    `instances`: identical instances (each `tp` GPUs) behind a load balancer, the load spread evenly over them (a
    Poisson stream split at random is Poisson at its share of the rate; a concurrency a whole number each): each
    serves its share as one instance alone would, and the figures of the whole (tokens and requests a second,
    power, totals) are theirs together; a step's time and energy, and memory, one instance's.
    `window_rates`: in place of a rate, the load's requests a second window by window (a list or an array, a figure
    for each `window_s` seconds, zero for a window without arrivals; `data.requests.RequestTrace.serving` reads a
    trace's), each served as a steady state on the same steps (see the module's docstring): `windows` holds each
    one's figures, and the whole's are theirs over all of them (no `duration_s` or `output_tokens` beside them);
    memory, flags and the interval at the busiest window's step. `last_window_s`: the last window's own length where
    the load stops within it (from MIN_WINDOW_S to window_s + MIN_WINDOW_S: a trace's last window runs to its last
    arrival), its rate that length's. `window_lengths`: in place of the four lengths, each window's own (a table, a
    row a window: its requests' mean `input_len` and `output_len`, and their `input_len_cv` and `output_len_cv`
    where known; `RequestTrace.window_lengths` reads a trace's), its steps those of its length class
    (`estimator.serve_windows`); the whole's lengths are its requests'. `autoscale`: each window served by the fewest
    of the `instances` that serve its rate within `max_batch` in flight (one at least), with `headroom` over it (a
    share of its rate: 0.25 keeps a fifth of their capacity free), the others off, drawing nothing (an autoscaler
    releasing them), each started again `cold_start_s` ahead of the window it serves at its GPUs' idle power, or
    with `spare` "idle", kept warm at idle power (`serve_windows.standby`); with `ttft_target_s`, more of them where
    a window's requests would wait longer than it for their first token (its prefill and the wait for a slot: an
    autoscaler on a latency target; the fleet where even all miss it), with `ttft_p99_target_s` where 99 % of them
    would not have it within that, with `itl_p99_target_s` where 99 % of a window's gaps between a request's tokens
    would not come within that (`itl_p99_s`, its windows'); `instances` then the most it may use. An autoscaler
    sized so is one that knows each window's load ahead (a schedule, a forecast); `reactive`: one that sizes each
    window by the one before it (scaling on the load it measured), so a window is served on the instances the
    window before needed, those it starts serving `cold_start_s` after their start (`estimator.autoscaler`), and
    a window past what they serve is refused, or with `queue` its excess waits; with `reaction_s`, it scales that
    long after a window's load changes instead of a window on (its metrics' lag), and with `scale_in_delay_s` it
    scales in to the most its windows needed over that long (Kubernetes' HPA: 300 s by default). `min_instances`:
    the fewest an autoscaler keeps, 1 by default; 0 scales to zero where a window has no load (Knative's and KEDA's
    scale to zero), so that the next window's requests wait for a start where it is reactive.
    `queue`: a window's arrivals past what the instances serve within `max_batch` wait for the windows after it
    (served at max_batch meanwhile, the last window running on until none waits: `fluid_queue.queued`; reactive,
    on the instances its load needed, one at least, after they start where none serves at its end:
    `reactive_queue`), where without it such a window is refused; `windows` gives each one's backlog and wait,
    `wait_s` the requests' mean wait. What waits is work, first in, first out: each request the instance-seconds its
    own lengths take (`_queued_load`), so a request a later window serves keeps its answer's tokens.
    `suggest_tp`: as `joulecast.generate`'s (the fewest tensor-parallel GPUs that hold a load past one GPU's memory).
    `tp` "auto": the load on the fewest GPUs (1, 2, 4 or 8) whose shards fit and serve it (`tp_auto`; a load past 8
    GPUs' memory on the fewest that serve it, flagged exceeds-memory; past what 8 serve, refused as at 8).

    Raises:
        InputError: naming the field (lengths, a load given both ways or neither, a rate beyond what max_batch
            serves (naming the fewest instances that would), an unknown engine, a layout the model's heads do not
            divide, experts split where the model has none, a clock or a limit the GPU does not allow).
    """
    if is_auto_tp(tp):
        return _fewest_gpus(dict(locals()))
    windows, spread, lengths = None, None, None
    if any(v is not None for v in (window_rates, window_s, last_window_s, window_lengths)):
        windows, seconds = check_windows(window_rates, window_s, last_window_s, concurrency, request_rate,
                                         duration_s, output_tokens)
        arrivals = windows * seconds  # requests in each window
        request_rate = float(arrivals.sum() / seconds.sum())  # its place in the checks below
        if window_lengths is not None:  # the whole's lengths its windows' requests'
            given = next((k for k, v in (("input_len", input_len), ("output_len", output_len), ("input_len_cv",
                          input_len_cv), ("output_len_cv", output_len_cv)) if v is not None), None)
            require(given is None, str(given), "not with window_lengths: the load's lengths are its windows'")
            lengths = check_window_lengths(window_lengths, arrivals)
            input_len, output_len, input_len_cv, output_len_cv = map(float, pooled_whole(lengths, arrivals))
    input_len, output_len = positive("input_len", input_len), positive("output_len", output_len)
    output_len_cv, input_len_cv = (0.0 if cv is None else cv for cv in (output_len_cv, input_len_cv))
    max_batch = int(positive("max_batch", max_batch, integer=True))
    chunk_tokens = int(positive("chunk_tokens", chunk_tokens, integer=True))
    require(not require_switch(autoscale, "autoscale") or windows is not None, "autoscale",
            "applies to a load window by window (window_rates and window_s)")
    require(not require_switch(queue, "queue") or windows is not None, "queue",
            "applies to a load window by window (window_rates and window_s)")
    require(not require_switch(reactive, "reactive") or autoscale, "reactive",
            "applies to autoscale (each window sized by the window before it)")
    require_choice(spare, SPARES, "spare")
    cold_start_s = share("cold_start_s", cold_start_s, MAX_COLD_START_S, f"{MAX_COLD_START_S:,.0f} s")
    headroom = share("headroom", headroom, MAX_HEADROOM, f"{MAX_HEADROOM:g} (a share of each window's rate)")
    ttft_target_s, ttft_p99_target_s, itl_p99_target_s = (None if value is None else positive(
        name, value, high=MAX_TTFT_TARGET_S, high_text=f"{MAX_TTFT_TARGET_S:,.0f} s")
        for name, value in (("ttft_target_s", ttft_target_s), ("ttft_p99_target_s", ttft_p99_target_s),
                            ("itl_p99_target_s", itl_p99_target_s)))
    for name, value, default in (("spare", spare, "off"), ("cold_start_s", cold_start_s, 0.0),
                                 ("headroom", headroom, 0.0), ("ttft_target_s", ttft_target_s, None),
                                 ("ttft_p99_target_s", ttft_p99_target_s, None),
                                 ("itl_p99_target_s", itl_p99_target_s, None)):
        require(value == default or autoscale, name, "applies to autoscale (the instances a window does not need)")
    require(spare == "off" or not cold_start_s, "cold_start_s", "applies where spare instances are off (an idle "
                                                                "one is loaded and starts nothing)")
    if reaction_s is not None:
        reaction_s = share("reaction_s", reaction_s, MAX_COLD_START_S, f"{MAX_COLD_START_S:,.0f} s")
    scale_in_delay_s = share("scale_in_delay_s", scale_in_delay_s, MAX_COLD_START_S, f"{MAX_COLD_START_S:,.0f} s")
    for name, value, default in (("reaction_s", reaction_s, None), ("scale_in_delay_s", scale_in_delay_s, 0.0)):
        require(value == default or reactive, name, "applies to reactive (an autoscaler scaling on the load it "
                                                    "measured)")
    how = Reactive(cold_start_s, reaction_s, scale_in_delay_s)
    require((concurrency is None) != (request_rate is None), "concurrency", "give concurrency or request_rate, one of "
            f"them; got {'neither' if concurrency is None else 'both'}")
    require(duration_s is None or output_tokens is None, "output_tokens", "give duration_s or output_tokens, not both")
    # totals reach a year of serving and a billion billion tokens; under one token is no serving (one small enough
    # made the duration and energy 0 s and 0 J)
    if duration_s is not None:
        duration_s = positive("duration_s", duration_s, high=1e10, high_text="1e10 s")
    if output_tokens is not None:
        output_tokens = positive("output_tokens", output_tokens, low=1.0, high=1e18, high_text="1e18")
    for name, cv, what in (("output_len_cv", output_len_cv, "every answer"), ("input_len_cv", input_len_cv,
                                                                            "every prompt")):
        require(isinstance(cv, (int, float)) and not isinstance(cv, bool) and 0.0 <= cv <= 10.0, name,
                f"must be a number from 0 ({what} as long) to 10, got {cv!r}")
    instances = int(positive("instances", instances, integer=True, high=MAX_INSTANCES, high_text=f"{MAX_INSTANCES:,}"))
    require(isinstance(min_instances, (int, np.integer)) and not isinstance(min_instances, bool)
            and 0 <= min_instances <= instances, "min_instances",
            f"must be a whole number from 0 to instances ({instances}), got {min_instances!r}")
    require(min_instances == 1 or autoscale, "min_instances", "applies to autoscale (the instances a window does not "
                                                              "need)")
    if concurrency is not None:
        concurrency = int(positive("concurrency", concurrency, integer=True))
        require(concurrency % instances == 0, "concurrency", f"{concurrency} in flight over {instances} instances: "
                f"give a multiple of instances (each keeps its whole share in flight)")
        concurrency //= instances  # one instance's
    # the lengths each grid of steps is priced at: the load's, or each length class's (`serve_windows`) where its
    # windows give their own, and each window's class
    classes, label = ((np.array([[input_len, output_len, input_len_cv, output_len_cv]]),
                       np.zeros(1 if windows is None else len(windows), dtype=np.int64)) if lengths is None
                      else length_classes(lengths, arrivals))
    for ins, outs, _, outs_cv in classes:  # a loop over the few classes
        _check_context(ins, outs, outs_cv, concurrency, max_batch, chunk_tokens,
                       "input_len" if lengths is None else "window_lengths")
    engine = engines.check_engine(engine) or "none"
    dtype = dtype_name(dtype)
    require_choice(dtype, DTYPES, "dtype")  # before a step is lowered (or kept by its dtype)
    require_choice(launch_mode, LAUNCH_MODES, "launch_mode")  # before: another name priced every step as NaN
    sampling = check_sampling(sampling)  # before the model loads, as the settings above
    config = resolve_model(model)[0]
    check_job(config, "serve")
    tp = check_tp_or_auto(config, tp)  # a whole number of GPUs the model's heads divide into
    expert_parallel = check_expert_parallel(expert_parallel, config)
    spec = lookup_gpu(gpu)
    clock, limit = check_setting(spec, sm_clock_mhz, power_limit_w)  # before the model loads: a bad one costs no wait
    residual = estimator if hasattr(estimator, "predict") else load_estimator(estimator)
    eng = None if engine == "none" else engine
    setting = dict(sm_clock_mhz=sm_clock_mhz, power_limit_w=power_limit_w,
                   host_dispatch_s=check_host_dispatch(host_dispatch_s), sampling=sampling,
                   expert_parallel=expert_parallel)
    # a class's lengths as `_evaluate` takes them
    sized = [dict(input_len=float(c[0]), output_len=float(c[1]), input_len_cv=float(c[2]), output_len_cv=float(c[3]))
             for c in classes]
    at = sized[0]  # the lengths of the step an estimate's flags and interval are read at
    if concurrency is not None:
        busy = min(concurrency, max_batch)
        # the step, a request's prompt's steps (`_first_sizes`) and the steps the gaps between tokens are read at
        # (`_gap_class`), in one pass
        first, own = _first_sizes(at, chunk_tokens, busy)
        ((est, wait_s, wait_j, _),), *more = _evaluate(
            model, spec, np.array([busy]), [at, *first, *_at_prompts(at, chunk_tokens, busy)], dtype=dtype,
            engine=eng, launch_mode=launch_mode, tp=tp, chunk_tokens=chunk_tokens, residual=residual, **setting)
        # (1, own): the step itself, then its own prompt's counts
        beside = np.concatenate([[[est.time_s + wait_s]], _seconds(more[:len(first)]).T], axis=1)
        lengths, mass = token_gaps.length_bins(at["input_len"], at["input_len_cv"])
        prefill = float(_prefill_at(beside, own, lengths)[0] @ mass)  # over the prompts' lengths
        # the prompt 99 % of requests' are within (the closed loop's wait about the same for each)
        tail = _prefill_at(beside, own, np.array([token_gaps.length_quantile(at["input_len"], at["input_len_cv"],
                                                                            TTFT_QUANTILE)]))
        mean_batch, idle = float(busy), 0.0
        admitted = _admitted(np.array([mean_batch]), output_len)  # a request admitted as one finishes
        gap_classes = [_gap_class(more[len(first):], np.array([busy]), at, admitted)]
        gap_at = (np.zeros(1, dtype=np.int64), np.array([mean_batch]), admitted)  # its classes, batches, admitted
        step_s, step_j = est.time_s + wait_s, tp * (est.energy_j + wait_j)
        tokens_per_s = busy / step_s
        busy_share = _busy_share(est, wait_s)
        slot_s = closed_wait_s(concurrency, busy, tokens_per_s / output_len)  # the requests past max_batch queue
        # a closed loop's queue moves at the throughput: each request waits about as long
        whole_p99 = float(tail[0, 0]) + slot_s
    else:
        rates = ([positive("request_rate", request_rate)] if windows is None else windows) / np.float64(instances)
        grid = np.unique(np.round(np.geomspace(1, max_batch, 24)).astype(int))
        # each class's steps, and its requests' prompts' steps (`_first_sizes`) at a few of the batches (what they add
        # to the step is smooth in the batch, read between them; then at its prompts' lengths, `_prefills`), in one
        # pass
        firsts = [_first_sizes(size, chunk_tokens, int(grid[-1])) for size in sized]
        some = np.unique(np.round(np.linspace(0, len(grid) - 1, PREFILL_BATCHES)).astype(int))
        first = [f for sizes_, _ in firsts for f in sizes_]
        # and the steps each class's gaps between tokens are read off (`token_gaps.Gaps`), at the same batches
        at_prompts = [_at_prompts(size, chunk_tokens, int(grid[-1])) for size in sized]
        gap_sizes = [g for sizes_ in at_prompts for g in sizes_]
        curves = _evaluate(model, spec, [grid] * len(sized) + [grid[some]] * (len(first) + len(gap_sizes)),
                           [*sized, *first, *gap_sizes], dtype=dtype, engine=eng, launch_mode=launch_mode, tp=tp,
                           chunk_tokens=chunk_tokens, residual=residual, **setting)
        curves, more, gap_rows = (curves[:len(sized)], curves[len(sized):len(sized) + len(first)],
                                  curves[len(sized) + len(first):])
        step_s = _seconds(curves)  # a row a class
        step_j_grid = np.array([[tp * (e.energy_j + j) for e, _, j, _ in steps] for steps in curves])
        prefill_grid = _prefills(more, firsts, sized, grid, some, step_s)
        # requests/s each batch size serves: rising with B, until an engine's host work under the step sets the step
        # (B x its time a request), where it stays flat; the running maximum keeps it monotone for the interpolation
        capacity = np.maximum.accumulate(grid / (classes[:, 1:2] * step_s), axis=1)
        # a window's requests run as long as its own answers on its class's steps: its rate scaled to the class's
        # answer length (Little's law's B = rate x output_len x step time), and the most it serves scaled back
        own_out = output_len if lengths is None else lengths[:, 1]
        scale = np.ones(len(rates)) if lengths is None else own_out / classes[label, 1]
        reach = capacity[label, -1] / scale
        answers = np.broadcast_to(np.asarray(own_out, dtype=np.float64), reach.shape)
        demand = windows  # requests a second each window serves, all instances'
        if queue and not reactive:  # arrivals past what the instances serve wait for the windows after it
            # (reactive, past what the instances it has serve: below)
            line, seconds, demand = _queued_load(queued(arrivals / reach, np.full(len(reach), float(instances)),
                                                        seconds), seconds, arrivals, reach, answers)
            rates = np.minimum(demand / instances, reach)  # within it but for rounding
        elif (rates > reach).any():
            k = int(label[np.argmax(rates > reach)])
            raise _beyond(rates, reach, instances, max_batch, None if windows is None else seconds,
                          _beyond_advice(curves[k][-1], spec, tp, math.ceil((rates * instances / reach).max())))
        steps = _Steps(grid, step_s, step_j_grid, capacity, *prefill_grid, classes[:, 1], classes[:, 3], label,
                       scale, max_batch, None if windows is None else seconds)
        serving = np.full(len(rates), float(instances))  # instances serving each window (all, unless autoscaled)
        held = serving  # and running (reactive: those it starts serve part of it)
        everyone = np.arange(len(rates))
        # the prompts admitted a step its windows may take: at their rates, or autoscaled from the most an instance
        # serves to the whole fleet's share
        span = (rates,) if not autoscale else (reach, np.minimum(demand / instances, reach))
        admitted = np.concatenate([_admitted(_batches(steps, r, everyone), answers) for r in span])
        labels = np.concatenate([label] * len(span))
        ends = np.cumsum([len(a) for a in at_prompts])
        gap_classes = [_gap_class(gap_rows[end - len(a):end], grid[some], size, admitted[labels == k],
                                  exact=not autoscale) for k, (a, end, size) in enumerate(zip(at_prompts, ends, sized))]
        if autoscale:  # the fewest that serve each window within max_batch in flight, one at least; the rest off
            serving = scaled_in(demand, reach, instances, headroom, min_instances)
            if any(t is not None for t in (ttft_target_s, ttft_p99_target_s, itl_p99_target_s)):  # and more where
                # their requests' first tokens or the gaps between their tokens come later than a target
                serving = _fewest_within(steps, demand, reach, serving, instances, ttft_target_s, ttft_p99_target_s,
                                         itl_p99_target_s, gap_classes, answers)
            held = serving
            if reactive:  # each window on what the window before needed
                needed = serving
                if queue:  # its arrivals past what those serve wait for the windows after it (as they start),
                    # what waits past the last window for the instances it needed (`reactive_queue`)
                    line, scaled = queued_reactive(arrivals / reach, np.ones(len(reach)), seconds, needed, how)
                    line, seconds, demand = _queued_load(line, seconds, arrivals, reach, answers)
                    steps = dataclasses.replace(steps, seconds=seconds)
                else:
                    scaled = reactive_instances(needed, seconds, how)
                    if _past_within(demand, reach, scaled.pieces, seconds).any():
                        raise _beyond_reactive(demand, reach, needed, scaled, seconds, how, instances)
                held, serving = scaled.held, scaled.serving
            # within it but for rounding (none on none: a window scaled to zero serves nothing)
            rates = np.minimum(np.divide(demand, serving, out=np.zeros_like(demand), where=serving > 0), reach)
        batches, step_time, step_energy, prefills, waits = _served(steps, rates, everyone)
        gap_at = (label, batches, _admitted(batches, answers))
        slot_s, prefill = waits.mean_s, prefills.mean_s
        # the first token's quantile: each window's, its prompt's steps (at each of its lengths' bins) and any
        # backlog's wait before its wait for a slot (a queued window's worst: the fluid backlog's wait is a mean, not
        # a spread)
        found = prefills.bins_s + line["worst_wait_s"] if queue else prefills.bins_s
        p99 = quantile_s(waits, TTFT_QUANTILE, found, mix=prefills.mass)
        whole_p99 = float(p99[0] if windows is None else quantile_s(waits, TTFT_QUANTILE, found, arrivals,
                                                                    mix=prefills.mass))
        busiest = int(np.argmax(batches))
        i = int(np.searchsorted(grid, batches[busiest]))  # the grid's batch at or above it (its flags, interval):
        est, wait_s, wait_j, _ = curves[label[busiest]][i]  # a window's load, the busiest
        at = sized[label[busiest]]
        busy = int(grid[i])
        step_s, step_j = step_time, step_energy
        idle = np.exp(-batches)
        tokens_per_s = rates * own_out
        busy_share = _busy_share(est, wait_s)
        if windows is None:  # one rate: its figures as numbers (its idle share by math's exp, as ever)
            mean_batch, step_s, step_j, tokens_per_s, slot_s, prefill = (float(a[0]) for a in (
                batches, step_s, step_j, tokens_per_s, slot_s, prefill))
            idle = math.exp(-mean_batch)
    power = (1.0 - idle) * step_j / step_s + idle * tp * spec.idle_power_w
    # the gaps between a request's tokens at ITL_QUANTILES, each window's (a row a quantile; NaN where its answers
    # make none: a token each, or no request)
    window_gaps = token_gaps.quantiles_s(gap_classes, *gap_at, np.array(ITL_QUANTILES))
    whole_gaps = window_gaps[:, 0]
    if windows is not None:  # each window's figures (every instance's), then the whole load's: averaged over time,
        # a token's time and step over the tokens
        own_lengths = ((np.full(len(seconds), input_len), np.full(len(seconds), output_len)) if lengths is None
                       else (lengths[:, 0], lengths[:, 1]))
        queued_at = (line["backlog"], line["wait_s"]) if queue else (np.zeros(len(seconds)),) * 2
        # autoscaled: its idle spares or its cold starts (`serve_windows.standby`), none where every instance serves
        if reactive and spare == "off":  # its starts as they ran: each at idle power until it serves
            extra_j, started = scaled.starting_s * tp * spec.idle_power_w, scaled.started
        else:
            extra_j, started = standby(held, instances, seconds, tp * spec.idle_power_w, spare, cold_start_s)
        spread = ServeWindows(seconds, arrivals / seconds if queue else rates * serving, batches, idle, step_s,
                              power * serving + extra_j / seconds, power * serving * seconds + extra_j,
                              line["served_tokens"] if queue else tokens_per_s * serving * seconds, held,
                              *own_lengths, *queued_at, started, slot_s, p99, extra_j, prefill, *window_gaps,
                              serving)
        # the whole load's: all its windows' gaps together (a request's tokens but its first)
        whole_gaps = token_gaps.quantiles_s(gap_classes, *gap_at, np.array(ITL_QUANTILES),
                                            weights=spread.output_tokens * np.clip(1.0 - 1.0 / answers, 0.0, None))
        tokens = spread.output_tokens.sum()
        mean_batch, idle = (float(np.average(a, weights=seconds)) for a in (batches, idle))  # over the time
        step_s, step_j = (float(np.dot(a, spread.output_tokens) / tokens) for a in (step_s, step_j))
        duration_s = float(seconds.sum())
        power, tokens_per_s = (float(a) / duration_s / instances for a in (spread.energy_j.sum(), tokens))
    per_token = power / tokens_per_s
    power, tokens_per_s = power * instances, tokens_per_s * instances  # every instance's, each at its share
    band = None
    if est.energy_interval_j is not None:  # the step's relative band on the per-token figure
        band = tuple(per_token * e / est.energy_j for e in est.energy_interval_j)
        if reaches_bf16(dtype):
            band = (band[0], max(band[1], per_token * _bf16_reach(
                est, wait_j, _evaluate(model, spec, np.array([busy]), [at], dtype="bf16", engine=eng,
                                       launch_mode=launch_mode, tp=tp, chunk_tokens=chunk_tokens,
                                       residual=residual, **setting)[0][0])))
    flags = set(est.flags)
    fits_tp = None
    if suggest_tp and "exceeds-memory" in flags:  # its step's shards at the same batch, in physics (memory's own)
        fits_tp = fewest_fitting(config, tp, lambda gpus: "exceeds-memory" not in _evaluate(
            model, spec, np.array([busy]), [at], dtype=dtype, engine=eng, launch_mode=launch_mode, tp=gpus,
            chunk_tokens=chunk_tokens, residual=None, **setting)[0][0][0].flags)
    gaps = tuple(float(g) if np.isfinite(g) else None for g in whole_gaps)  # none: answers of one token
    # queued: a request's mean wait for the backlog it finds, over the requests
    wait = float(np.average(line["wait_s"], weights=arrivals)) if queue else None
    if windows is not None:  # a request's wait for a slot, over the requests
        slot_s, prefill = (float(np.average(a, weights=arrivals)) for a in (slot_s, prefill))
    return ServeEstimate(
        model=est.workload.split("/")[0], gpu=spec.name, tp=tp, expert_parallel=expert_parallel, engine=engine,
        dtype=dtype, sampling=sampling, input_len=input_len,
        output_len=output_len, batch=mean_batch, busy_batch=busy, idle_share=idle, step_time_s=step_s,
        step_energy_j=step_j, tokens_per_s=tokens_per_s, requests_per_s=tokens_per_s / output_len, power_w=power,
        energy_per_output_token_j=per_token, energy_per_request_j=per_token * output_len,
        energy_per_output_token_interval_j=band, gpu_busy_share=busy_share,
        ttft_s=prefill + (wait or 0.0) + slot_s, slot_wait_s=slot_s, prefill_s=prefill, ttft_p99_s=whole_p99,
        itl_p90_s=gaps[0], itl_p99_s=gaps[1],
        memory_gb=float(est.memory_gb or 0.0),
        flags=tuple(sorted(str(f) for f in flags)), fits_tp=fits_tp, outside_domain=tuple(est.outside_domain),
        method=est.method,
        sm_clock_mhz=clock, power_limit_w=limit, instances=instances, autoscale=bool(autoscale), queue=bool(queue),
        spare=spare, cold_start_s=cold_start_s, headroom=headroom, ttft_target_s=ttft_target_s,
        ttft_p99_target_s=ttft_p99_target_s, itl_p99_target_s=itl_p99_target_s, reactive=bool(reactive),
        reaction_s=reaction_s, scale_in_delay_s=scale_in_delay_s, min_instances=int(min_instances),
        wait_s=wait,
        windows=spread,
        **_totals(power, tokens_per_s, duration_s, output_tokens, None if band is None else
                  tuple(b / per_token for b in band)))


def _fewest_gpus(called: dict[str, Any]) -> ServeEstimate:
    """`serve` with `tp` "auto" (`called`: its arguments): the load on each of 1, 2, 4 and 8 GPUs the model's heads
    divide into, fewest first, until one holds its shards and serves its rate; where none holds them, the fewest that
    serve it, flagged exceeds-memory; where none serves it, the refusal at the most."""
    config = resolve_model(called["model"])[0]
    held, refused = None, None
    for gpus in (1, *SPLITS):
        try:
            check_tp(config, gpus)
        except InputError:  # a split the model's heads do not take
            continue
        try:
            r = serve(**{**called, "tp": gpus, "suggest_tp": False})
        except BeyondCapacityError as exc:  # more GPUs an instance serve more
            refused = exc
            continue
        if "exceeds-memory" not in r.flags:
            return dataclasses.replace(r, tp_auto=True)
        held = held or r
    if held is None:
        raise refused
    return dataclasses.replace(held, tp_auto=True)


def _first_sizes(size: Mapping[str, float], chunk_tokens: int, batch: int
                 ) -> tuple[list[dict[str, float]], np.ndarray]:
    """A request's prompt's steps as `_evaluate`'s sizes: the steady state's step with one request's own prompt
    tokens beside its mean prompt tokens, at a few counts of them (`own`, ascending: none, which is the steady
    state's step itself and needs no size, the mean prompt's last chunk, a whole chunk: `_pass_chunk`'s, with up to
    `batch` decodes), between which `_prefill_at` reads any prompt's."""
    chunk = _pass_chunk(size, chunk_tokens, batch)
    _, last = _chunks(np.array([max(1.0, round(size["input_len"]))]), chunk)
    own = np.unique(np.array([0, int(last[0]), chunk]))
    return [dict(size, own_prompt=int(r)) for r in own[1:]], own


def _chunks(lengths: np.ndarray, chunk_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompts' whole chunks run before their last step, and the tokens of that last step (chunked prefill)."""
    full, last = np.divmod(np.maximum(np.round(lengths), 1.0), chunk_tokens)
    whole = last == 0  # a whole number of chunks: the last of them brings the first token
    return np.where(whole, full - 1, full), np.where(whole, chunk_tokens, last)


def _seconds(steps: Sequence[Sequence[tuple[Estimate, float, float, float]]]) -> np.ndarray:
    """The time of `_evaluate`'s steps, a row a size, a column a batch (each GPU's wait for its instance in it)."""
    return np.array([[est.time_s + wait_s for est, wait_s, _, _ in row] for row in steps])


def _prefill_at(beside: np.ndarray, own: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """A request's time from its admission to its first token, for prompts of `lengths` (a column each), from the
    steps that run `own` tokens of a prompt beside the mean's (`beside`, a row a batch, a column an own count, the
    last a whole chunk): its whole chunks' steps, then the step of its last tokens, read between the counts."""
    full, last = _chunks(lengths, int(own[-1]))
    between = np.array([np.interp(last, own, basis) for basis in np.eye(len(own))])  # own x lengths
    return beside @ between + beside[:, -1:] * full


def _prefills(steps: Sequence[Sequence[tuple[Estimate, float, float, float]]],
              firsts: Sequence[tuple[list[dict[str, float]], np.ndarray]], sized: Sequence[Mapping[str, float]],
              grid: np.ndarray, some: np.ndarray, step_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each class's time from a request's admission to its first token at each batch of `grid` and each bin of its
    prompts' lengths (`token_gaps.length_bins`; a class a row, padded with bins of no probability), and the bins'
    probabilities: from `_first_sizes`' steps (`steps`, `_evaluate`'s at the grid's batches `some`), what they add
    to the class's step (`step_s`) read between those batches."""
    bins = [token_gaps.length_bins(size["input_len"], size["input_len_cv"]) for size in sized]
    width = max(len(mass) for _, mass in bins)
    times, masses = np.zeros((len(sized), len(grid), width)), np.zeros((len(sized), width))
    end = 0
    for k, ((first, own), (lengths, mass)) in enumerate(zip(firsts, bins)):  # a loop over the few classes
        added = _seconds(steps[end:end + len(first)]) - step_s[k, some]  # own (past none) x some
        end += len(first)
        beside = step_s[k][:, None] + np.array([np.zeros(len(grid)), *(np.interp(grid, grid[some], row)
                                                                      for row in added)]).T
        times[k, :, :len(mass)], masses[k, :len(mass)] = _prefill_at(beside, own, lengths), mass
    return times, masses


def _pass_chunk(size: Mapping[str, float], chunk_tokens: int, batch: int) -> int:
    """The most prompt tokens a step of `batch` decodes is priced with (a request's prompt's steps, `_first_sizes`;
    the gaps between tokens, `_gap_class`): the chunk, or fewer where a step of that many tokens over the decodes'
    context would pass the tokens a pass holds (MAX_TOKENS, with the steady state's mean prompt tokens beside them;
    a load whose mean step holds, `_check_context`)."""
    context = serve_step.context_len(size["input_len"], size["output_len"], size["output_len_cv"])
    mean = serve_step.prompt_tokens(batch, size["input_len"], size["output_len"], chunk_tokens)
    return max(1, min(chunk_tokens, MAX_TOKENS // context - batch - mean))


def _at_prompts(size: Mapping[str, float], chunk_tokens: int, batch: int) -> list[dict[str, float]]:
    """A step's lengths (`_evaluate`'s sizes) at each of the prompt tokens the gaps between tokens read a step at
    (`token_gaps.prompt_points`, `_gap_class`)."""
    return [dict(size, prompt=int(p)) for p in token_gaps.prompt_points(_pass_chunk(size, chunk_tokens, batch))]


def _gap_class(rows: Sequence[Sequence[tuple[Estimate, float, float, float]]], batches: np.ndarray,
               size: Mapping[str, float], admitted: np.ndarray, exact: bool = True) -> token_gaps.Gaps:
    """A length class's `token_gaps.Gaps`: from the steps `_evaluate` priced at `_at_prompts`' prompt tokens (`rows`,
    a row each, a column for each of `batches`; the steps' own tokens, the most of them the chunk), its prompts'
    lengths (`size`) and the prompts admitted a step in its windows (`admitted`: their own, or with `exact` false
    the span they may take)."""
    prompts = np.array([row[0][3] for row in rows])
    return token_gaps.gaps(prompts, batches, _seconds(rows).T, admitted, size["input_len"], size["input_len_cv"],
                           exact)


def _admitted(batches: np.ndarray, answers: np.ndarray | float) -> np.ndarray:
    """The prompts admitted a step with `batches` running, each running for `answers` steps (a request admitted as
    one finishes: Little's law); none where an answer is a token alone (it makes no gap between tokens)."""
    answers = np.broadcast_to(np.asarray(answers, dtype=np.float64), batches.shape)
    return np.where(answers > 1.0, batches / answers, 0.0)


def _beyond(rates: np.ndarray, capacity: np.ndarray, instances: int, max_batch: int, seconds: np.ndarray | None,
            advice: str) -> BeyondCapacityError:
    """The error of a load past what `max_batch` in flight serve (`capacity` requests a second an instance, a figure
    a window at its lengths): its rate's, or its first window's past it (windows `seconds` long: its start, seconds
    from the first arrival)."""
    k = int(np.argmax(rates > capacity))
    rate, capacity = float(rates[k]), float(capacity[k])
    each = f" an instance ({rate * instances:g} over {instances})" if instances > 1 else ""
    where = "" if seconds is None else (f" in window {k + 1:,} of {len(rates):,} (its arrivals from "
                                        f"{seconds[:k].sum():,.0f} s after the first)")
    wait = "" if seconds is None else "; or let its excess wait for the windows after it (queue)"
    return BeyondCapacityError("window_rates" if seconds is not None else "request_rate",
                               f"{rate:g} requests/s{each}{where} is beyond what {max_batch} in flight serve "
                               f"({capacity:.4g}/s); {advice}{wait}")


@dataclass(frozen=True, slots=True)
class _Steps:
    """A load's steps at a rate (`serve`'s): each length class's grid of batches, its step's time and energy a row a
    class, the requests a second each batch serves, the classes' answer lengths and their spread, each window's
    class and the scale of its rate into the class's terms (its own answer length over the class's), the most
    requests in flight, and each window's length."""

    grid: np.ndarray
    step_s: np.ndarray
    step_j: np.ndarray
    capacity: np.ndarray
    prefill_s: np.ndarray         # a request's time from its admission to its first token: a class, a batch, a bin
    prefill_mass: np.ndarray      # of its prompts' lengths (`token_gaps.length_bins`): each bin's probability
    output_len: np.ndarray
    output_len_cv: np.ndarray
    label: np.ndarray
    scale: np.ndarray
    max_batch: int
    seconds: np.ndarray | None    # each window's length (none: one steady rate)


class Prefills(NamedTuple):
    """A request's time from its admission to its first token, a window each: its mean over the prompts' lengths,
    and at each bin of them (`token_gaps.length_bins`; a row a bin) with the bin's probability."""

    mean_s: np.ndarray
    bins_s: np.ndarray
    mass: np.ndarray


def _served(steps: _Steps, rates: np.ndarray, which: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Prefills, SlotWaits]:
    """Windows `which` served at `rates` requests a second an instance (one a window of them): each one's requests
    in flight (Little's law), step time and energy, a request's time from its admission to its first token
    (`Prefills`), and its wait for a slot (`estimator.slot_wait`, its queue what the window's length allows where the
    load is given window by window)."""
    batches = _batches(steps, rates, which)
    step_time, step_energy = (np.empty(len(which)) for _ in range(2))
    bins = steps.prefill_s.shape[2]
    prefill, mass = np.empty((bins, len(which))), np.empty((bins, len(which)))
    waits: dict[str, np.ndarray] = {}
    label, scale = steps.label[which], steps.scale[which]
    for k in range(len(steps.output_len)):  # a loop over the few classes, each over its windows at once
        mine = label == k
        own = rates[mine] * scale[mine]  # in the class's terms
        step_time[mine] = np.interp(batches[mine], steps.grid, steps.step_s[k])
        step_energy[mine] = np.interp(batches[mine], steps.grid, steps.step_j[k])
        prefill[:, mine] = [np.interp(batches[mine], steps.grid, column) for column in steps.prefill_s[k].T]
        mass[:, mine] = steps.prefill_mass[k][:, None]
        each = open_waits(own, steps.max_batch, steps.grid, steps.capacity[k], steps.step_s[k],
                          np.full(len(own), steps.output_len_cv[k]),
                          None if steps.seconds is None else steps.seconds[which][mine])
        for name, value in each._asdict().items():  # each field a column a window (the step found: a row a bin)
            waits.setdefault(name, np.empty(value.shape[:-1] + (len(which),)))[..., mine] = value
    return batches, step_time, step_energy, Prefills((prefill * mass).sum(axis=0), prefill, mass), SlotWaits(**waits)


def _batches(steps: _Steps, rates: np.ndarray, which: np.ndarray) -> np.ndarray:
    """Requests in flight an instance in windows `which` served at `rates` requests a second an instance (Little's
    law, `_in_flight`, in each one's class's terms)."""
    batches = np.empty(len(which))
    label, scale = steps.label[which], steps.scale[which]
    for k in range(len(steps.output_len)):  # a loop over the few classes, each over its windows at once
        mine = label == k
        batches[mine] = _in_flight(rates[mine] * scale[mine], steps.grid, steps.capacity[k], steps.output_len[k],
                                   steps.step_s[k, 0])
    return batches


def _fewest_within(steps: _Steps, demand: np.ndarray, reach: np.ndarray, low: np.ndarray, fleet: int,
                   target_s: float | None, p99_target_s: float | None, itl_target_s: float | None,
                   gaps: list[token_gaps.Gaps], answers: np.ndarray) -> np.ndarray:
    """An autoscaled load's instances serving each window where its requests' time to first token (its prompt's steps
    and the wait for a slot) is to come within `target_s` on average and within `p99_target_s` for 99 % of them,
    and 99 % of the gaps between their tokens within `itl_target_s` (`gaps`, each length class's; `answers`, each
    window's answer length) (each where given): the fewest from `low` (those its rate needs) up to the `fleet` that
    meet them, by bisection over every window at once (the first token comes sooner on more instances, and a step
    is shorter and admits fewer prompts); the fleet where none does, and `low` for a window without arrivals."""
    lo, hi = low.copy(), np.where(demand > 0, float(fleet), low)
    while (lo < hi).any():  # log2(fleet) passes
        which = np.flatnonzero(lo < hi)
        mid = np.floor((lo[which] + hi[which]) / 2)
        batches, _, _, prefills, waits = _served(steps, np.minimum(demand[which] / mid, reach[which]), which)
        met = np.ones(len(which), bool) if target_s is None else prefills.mean_s + waits.mean_s <= target_s
        if p99_target_s is not None:
            met &= quantile_s(waits, TTFT_QUANTILE, prefills.bins_s, mix=prefills.mass) <= p99_target_s
        if itl_target_s is not None:  # NaN (no gap: answers of a token) meets it
            met &= ~(token_gaps.quantiles_s(gaps, steps.label[which], batches, _admitted(batches, answers[which]),
                                            np.array([ITL_TARGET_QUANTILE]))[0] > itl_target_s)
        hi[which[met]] = mid[met]
        lo[which[~met]] = mid[~met] + 1
    return lo


def _in_flight(rates: np.ndarray, grid: np.ndarray, capacity: np.ndarray, output_len: float,
               first_step_s: float) -> np.ndarray:
    """Requests in flight at each rate (Little's law: B = rate x output_len x step time(B)): the first batch of the
    grid whose capacity reaches the rate, interpolated from the one below; under the smallest batch's capacity,
    rate x a request's time at it (`first_step_s` a step), the GPU idling between requests."""
    j = np.minimum(np.searchsorted(capacity, rates), len(capacity) - 1)  # (a rate at the last, rounded past it)
    low = np.maximum(j - 1, 0)
    gap = capacity[j] - capacity[low]  # 0 only where the rate is the smallest batch's capacity
    slope = np.divide(grid[j] - grid[low], gap, out=np.zeros_like(rates), where=gap > 0)
    # as np.interp computes it between the two (a rate at a batch's capacity: that batch)
    between = np.where(rates == capacity[j], grid[j], slope * (rates - capacity[low]) + grid[low])
    return np.where(rates >= capacity[0], between, rates * output_len * first_step_s)


def _queued_load(line: dict[str, Any], seconds: np.ndarray, arrivals: np.ndarray, reach: np.ndarray,
                 answers: np.ndarray) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """A load's windows with the arrivals past what they serve queued for the windows after them, `line` the queue
    of their work (`fluid_queue.queued` of each window's `arrivals` over `reach`, the requests a second an instance
    serves at its lengths: instance-seconds, so that a request waiting into a window of other lengths takes the
    work its own lengths make, first in, first out): the queue, its backlog in requests and each window's output
    tokens served (`served_tokens`, of the requests it serves, `answers` long on average where they came), the
    windows' seconds (the last running on until its backlog is served) and the requests a second each window serves,
    as requests of its own lengths that load its instances as much."""
    seconds = seconds.copy()
    seconds[-1] += line["drain_s"]
    # the work, requests and tokens arrived by each window's edge; what is served of them, first in, first out
    work, came, asked = (np.concatenate([[0.0], np.cumsum(a)]) for a in (arrivals / reach, arrivals,
                                                                          arrivals * answers))
    waiting = came[1:] - np.interp(work[1:] - line["backlog"], work, came)  # at each window's end, before the drain
    # a window that finds a backlog serves others' requests first; one that finds none serves its own alone, their
    # tokens its served work's at its own lengths (no difference of two running sums, which a tiny load would lose)
    carried = np.diff(np.interp(np.cumsum(line["served"]), work, asked), prepend=0.0)
    found = np.concatenate([[False], line["backlog"][:-1] > 0])
    out = {**line, "backlog": np.where(line["backlog"] > 0, np.maximum(waiting, 0.0), 0.0),
           "served_tokens": np.where(found, carried, line["served"] * reach * answers)}
    return out, seconds, line["served"] / seconds * reach


def _past(demand: np.ndarray, reach: np.ndarray, serving: np.ndarray) -> np.ndarray:
    """Whether each window's `demand` (requests a second) is past what its `serving` instances serve (`reach` an
    instance), but for rounding."""
    return demand > reach * serving * (1 + 1e-12)


def _past_within(demand: np.ndarray, reach: np.ndarray, pieces: Pieces, seconds: np.ndarray
                 ) -> np.ndarray:
    """Whether each window's `demand` is past what its instances serve in any stretch of it (`pieces`, those of a
    reactive autoscaler: a start serves part way in), a stretch of a rounding's length aside (of its window's
    `seconds`)."""
    return np.bincount(pieces.window, _short(demand, reach, pieces, seconds), minlength=len(demand)) > 0


def _short(demand: np.ndarray, reach: np.ndarray, pieces: Pieces, seconds: np.ndarray) -> np.ndarray:
    """Whether each of `pieces` serves less than its window's `demand`, one of a rounding's length (of its window's
    `seconds`) aside."""
    return (_past(demand[pieces.window], reach[pieces.window], pieces.instances)
            & (pieces.seconds > 1e-9 * seconds[pieces.window]))


def _beyond_reactive(demand: np.ndarray, reach: np.ndarray, needed: np.ndarray, scaled: Instances,
                     seconds: np.ndarray, how: Reactive, fleet: int) -> BeyondCapacityError:
    """The error of a reactive autoscaler's (`how`) load with a window past what its instances serve in a stretch of
    it (`demand` requests a second each window, `needed` the instances each window needed, `scaled` those it held
    and those serving, `reach` an instance's most): the first such window's, how far its load outgrew the one
    before, and the least headroom (`_least_headroom`) that serves every window."""
    # its first stretch short, in time order
    first = int(np.argmax(_short(demand, reach, scaled.pieces, seconds)))
    k = int(scaled.pieces.window[first])  # and its window
    fewest, stretch_s = float(scaled.pieces.instances[first]), float(scaled.pieces.seconds[first])
    grew = f"{demand[k] / demand[k - 1]:.3g}x the window before's" if k and demand[k - 1] > 0 else "after none"
    least = None if fewest == 0 else _least_headroom(demand, reach, needed, seconds, how, fleet)
    keep = ("keep an instance running where a window has no load (min_instances 1): none serves a start's first "
            "stretch" if fewest == 0 else f"keep at least {100 * least:.3g} % headroom over each window's rate"
            if least is not None else
            f"no headroom up to {MAX_HEADROOM:g} serves every window on {fleet:,} instances: add instances")
    return BeyondCapacityError("window_rates", f"{demand[k]:g} requests/s in window {k + 1:,} of {len(demand):,} "
                               f"(its arrivals from {seconds[:k].sum():,.0f} s after the first, {grew}) is beyond "
                               f"what {_held_text(scaled.held[k], fewest, stretch_s, how)} serve "
                               f"({reach[k] * fewest:.4g}/s): "
                               f"a reactive autoscaler ({following_text(how.reaction_s, how.scale_in_delay_s)}); "
                               f"{keep}, or let its excess wait for the "
                               "windows after it (queue)")


def _held_text(held: float, fewest: float, stretch_s: float, how: Reactive) -> str:
    """A window's instances as a refusal names them: those the window before needed, or those held and the
    `fewest` serving for `stretch_s` of it."""
    if how.reaction_s is None and not how.scale_in_delay_s and fewest == held:
        return f"the {held:g} instance{'s' if held != 1 else ''} the window before needed"
    return f"its instances ({held:.3g} held on average, {fewest:g} of them serving for {stretch_s:,.0f} s of it)"


def _least_headroom(demand: np.ndarray, reach: np.ndarray, needed: np.ndarray, seconds: np.ndarray,
                    how: Reactive, fleet: int) -> float | None:
    """The least headroom, to 0.1 % of the rate, over each window's rate with which a reactive autoscaler serves
    every window (each sized the more of what that headroom and what `needed` ask, its latency targets'; the
    capacity each window has rising with it), by bisection; None where even MAX_HEADROOM does not."""
    def fits(headroom: float) -> bool:
        sized = np.maximum(scaled_in(demand, reach, fleet, headroom, 0), needed)
        return not _past_within(demand, reach, reactive_instances(sized, seconds, how).pieces, seconds).any()

    if not fits(MAX_HEADROOM):
        return None
    lo, hi = 0.0, MAX_HEADROOM
    while hi - lo > 1e-3:  # about 14 passes
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def _beyond_advice(largest: tuple[Estimate, float, float, float], spec: Any, tp: int, fewest: int) -> str:
    """What serves a rate past `max_batch` in flight, judged at that batch's step: not a larger batch where that step
    already exceeds the GPU's memory, nor where the engine's host work sets it; else either; and the `fewest`
    instances that serve it at this batch bound."""
    est, wait_s = largest[:2]
    spread = f"at least {fewest} instances of this size for the rate"
    if "exceeds-memory" in est.flags:
        return (f"{est.memory_gb:.3g} GiB a GPU at that batch, more than {spec.name}'s {spec.memory_gb:g} GiB, so add "
                f"GPUs{' (tp)' if tp == 1 else ''} or instances, not max_batch ({spread})")
    if _busy_share(est, wait_s) < HOST_BOUND_SHARE:
        return f"the engine's host work sets the step at that batch, so add instances, not max_batch ({spread})"
    return f"raise max_batch or add GPUs ({spread})"


def _bf16_reach(est: Estimate, wait_j: float, bf16: tuple[Estimate, float, float, float]) -> float:
    """The high end of a step served in bf16 (its estimate, wait and the GPU's energy it adds: the step's band on
    the whole, as `serve`'s own) over the energy of the same step in fp8 (`est`, `wait_j`): how far up
    `FP8_REACHES_BF16` takes an fp8 estimate's interval."""
    twin, _, twin_wait_j, _ = bf16
    high = twin.energy_interval_j[1] / twin.energy_j if twin.energy_interval_j is not None else 1.0
    return (twin.energy_j + twin_wait_j) * high / (est.energy_j + wait_j)


def _busy_share(est: Estimate, wait_s: float) -> float:
    """Of a step on physics' timeline (its kernels and host work) and `wait_s` more (its all-reduces, the engine's
    host work for its workers), the share the GPU runs kernels."""
    return float(est.gpu_busy_s / (float(est.physics_time_s or est.time_s) + wait_s))


def _totals(power_w: float, tokens_per_s: float, duration_s: float | None, output_tokens: float | None,
            band: tuple[float, float] | None) -> dict[str, Any]:
    """Serving totalled over a duration, or over the time a count of output tokens takes (none: neither given), its
    energy's interval the relative `band` of the per-token figure (none: none)."""
    if output_tokens is not None:
        duration_s = output_tokens / tokens_per_s
    elif duration_s is not None:
        output_tokens = tokens_per_s * duration_s
    if duration_s is None:
        return dict(duration_s=None, energy_j=None, output_tokens=None)
    energy = power_w * duration_s
    return dict(duration_s=duration_s, energy_j=energy, output_tokens=output_tokens,
                energy_interval_j=None if band is None else tuple(energy * b for b in band))
