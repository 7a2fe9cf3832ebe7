"""Sweeps: every combination of GPUs, clocks, power limits, batch sizes, lengths and dtypes for one model and phase,
estimated in one vectorised pass (`estimate_many`), with the Pareto front of energy against time and the best point
under constraints. A sweep of whole jobs (a training run, a generation, or steady-state serving: `JOB_PHASES`)
estimates each configuration as that job, so that it answers which GPU, clock and power cap finish a run with the
least energy by a deadline, or serve a load at the least energy a token within a latency."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.carbon import Grid, grid_at, with_carbon
from joulecast.data.engines import normal_engine
from joulecast.data.errors import InputError, UnknownFieldError, require, require_choice
from joulecast.data.files import kind_of, whole_number
from joulecast.data.fusions import check_fusions
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.kernels import dtype_name
from joulecast.data.models import TEXT_TRAINING_OPTIONS, is_mixture_of_experts
from joulecast.data.requests import RequestTrace, refuse_lengths, refuse_windows, requests_from_rows
from joulecast.data.workload import AUTO_MICRO_BATCH, AUTO_TP, PHASES, check_host_dispatch
from joulecast.estimator.many import estimate_many
from joulecast.estimator.serve_windows import MAX_COLD_START_S, MAX_HEADROOM
from joulecast.estimator.tensor_parallel import check_expert_parallel, check_tp
from joulecast.estimator.train_run import left_as_is
from joulecast.features.lowering import check_job as check_model_job
from joulecast.features.lowering import (IGNORED_BY, fusions_refusal, idle_fusions, ignored_field, is_vision,
                                        resolve_model, workload)
from joulecast.features.power import MIN_CLOCK_RATIO
from joulecast.features.train_step import RECOMPUTE

OBJECTIVES = ("energy", "time", "carbon")
# The axes of the front: a pass's energy against its time, or, where the points do different work (several batch
# sizes or lengths), energy per token against time per token (the inverse of throughput); for serving at a request
# rate, whose throughput the load sets, energy per token against each request's time between tokens (`latency`).
FRONTS = {"pass": ("time_s", "energy_j"), "token": ("s_per_token", "energy_per_token_j"),
          "latency": ("time_s", "energy_per_token_j"), "ttft": ("ttft_s", "energy_per_token_j")}
# The front's carbon in place of its energy: where the objective is carbon, or the points are drawn on several grids
# (each configuration's energy the same on each: `joulecast.data.carbon`).
CARBON_AXES = {"energy_j": "carbon_g", "energy_per_token_j": "carbon_per_token_g"}
# A sweep larger than this is refused before any work: at ~2,000 hybrid estimates a CPU-second it would take
# minutes, and its points table would not fit a report (split it, or use a cluster).
MAX_POINTS = 1_000_000
# Configurations a partition holds (a task of a Dask sweep): about 10 s of hybrid estimates, 2 of physics.
PART_ROWS = 20_000
# Phases whose points are whole jobs (`joulecast.train_run`, `joulecast.generate`, `joulecast.serve`): one job
# estimate a configuration, each vectorised over its own steps (about 2-4 ms CPU a training run or a serving load, 20
# ms a generation of 256 tokens: experiments/speed.py, 2026-12-06), so a job sweep is bounded lower, and partitioned
# finer for the progress bar to move.
JOB_PHASES = ("train-run", "generate", "serve")
# The jobs whose options JOB_AXES a sweep may take as axes: a generation's and a serving load's tensor-parallel GPUs an
# instance and output length.
AXIS_PHASES = ("generate", "serve")
# each then a column of the points; and serving's alone, SERVING_AXES: its instances, and an autoscaler's headroom,
# cold start and reaction (the what-ifs of an autoscaler's target, a faster model load, a faster metrics pipeline)
# that FLOAT_AXES bound (the most each takes, and what its list holds, for the line refusing a value)
FLOAT_AXES = {"headroom": (MAX_HEADROOM, "a share of each window's rate from 0 to 10"),
              "cold_start_s": (MAX_COLD_START_S, f"a time from 0 to {MAX_COLD_START_S:,.0f} s"),
              "reaction_s": (MAX_COLD_START_S, f"a time from 0 to {MAX_COLD_START_S:,.0f} s")}
SERVING_AXES = ("instances", *FLOAT_AXES)
# ... and a training run's, TRAINING_AXES: its LoRA rank (0: full fine-tuning) and activation recomputation, a text
# model's (a vision model's points take neither: one point where a text model's take each)
TRAINING_AXES = ("lora_rank", "recompute")
JOB_AXES = ("tp", "output_len", *SERVING_AXES, *TRAINING_AXES)
MAX_JOB_POINTS = 5_000
JOB_PART_ROWS = 50
# A job sweep's fixed options, each passed to its job as is (the axes are the grid's columns: for a training run
# `batch` is its micro-batch and `seq` its sequence length; for a generation, its sequences and their prompt length;
# for serving, the requests kept in flight and their mean prompt length).
JOB_OPTIONS = {"train-run": ("global_batch", "steps", "tokens", "lora_rank", "lora_targets", "recompute", "optimizer",
                             "launch_mode", "head_tokens", "head_outputs", "attention", "fusions",
                             "forward_overhead_s", "loader_rate", "eval_tokens", "evals"),
               "generate": ("output_len", "kv_cache", "attention", "launch_mode", "offload_gb", "h2d_gbps", "engine",
                            "tp", "expert_parallel"),
               "serve": ("output_len", "engine", "tp", "max_batch", "chunk_tokens", "launch_mode", "output_len_cv",
                         "input_len_cv", "sampling", "expert_parallel", "instances", "window_rates", "window_s",
                         "last_window_s", "window_lengths", "autoscale", "spare", "cold_start_s", "headroom",
                         "ttft_target_s", "ttft_p99_target_s", "itl_p99_target_s", "reactive", "reaction_s",
                         "scale_in_delay_s", "min_instances", "queue")}
# What a single-pass sweep (prefill, decode, training, inference) may fix for every configuration: `estimate_many`'s
# columns, as `estimate` takes them for one pass.
PASS_OPTIONS = ("attention", "launch_mode", "fusions", "engine")
# What the grid's two size axes are in each job phase's points.
SIZES = {"train-run": ("micro_batch", "seq"), "generate": ("batch", "input_len"), "serve": ("concurrency", "input_len")}
# A serving sweep's load given, in place of the requests kept in flight, as requests arriving a second: the load a
# service sees, the GPU idling where it serves it faster; a point past the GPU's capacity (`max_batch` in flight)
# cannot serve it and is flagged `exceeds-capacity`, infeasible as one past memory is.
RATE_SIZES = ("request_rate", "input_len")
# A training sweep's micro-batch, or a generation's or serving load's tensor-parallel GPUs, given as the word auto
# (`train_run`'s "the largest that fits", `serve`'s and `generate`'s "the fewest whose shards fit"): a value of its
# column no count takes, each point then showing the one chosen (and `micro_batch_auto` or `tp_auto` True)
AUTO_SIZE = 0
AUTO_FIELDS = ("micro_batch", "tp")
UNSERVABLE = ("exceeds-memory", "exceeds-capacity")  # a point so flagged cannot run its load
# The job option (and the points' columns, a grid's index after it) that carry a load window by window's hourly
# series in (each grid on one, else None) and each point's intensity out, its windows' hours weighted by their energy
# (`sweep`, `estimate_jobs`)
WINDOW_INTENSITY = "window_g_per_kwh"


@dataclass(frozen=True)
class SweepResult:
    points: pd.DataFrame          # every configuration estimated, with tokens_per_s, feasible and pareto columns
    skipped: dict[str, int]       # configurations left out, by reason (a clock or limit the GPU does not allow)
    objective: str
    front: str                    # a key of FRONTS
    constraints: dict[str, float] = field(default_factory=dict)
    sizes: tuple[str, str] = ("batch", "seq")           # the points' two size columns (`SIZES`)
    job: dict[str, Any] = field(default_factory=dict)  # a job sweep's fixed options
    cost: str = "energy"                                # the front's cost axis: energy, or carbon (CARBON_AXES)
    unit: str = "token"     # what tokens_per_s counts: "image" where every model is a vision model's (seq 1)
    trace: dict[str, Any] | None = None  # a serving sweep's requests read (`RequestTrace.to_dict`), where it had some

    @property
    def axes(self) -> tuple[str, str]:
        """(time-like, energy- or carbon-like) columns of the front."""
        x, y = FRONTS[self.front]
        return x, CARBON_AXES[y] if self.cost == "carbon" else y

    @property
    def pareto(self) -> pd.DataFrame:
        """The feasible points no other feasible point beats on both axes, fastest first."""
        return self.points[self.points["pareto"]].sort_values(self.axes[0])

    @property
    def best(self) -> pd.Series | None:
        feasible = self.points[self.points["feasible"]]
        if not len(feasible):
            return None
        x, y = FRONTS[self.front]
        return feasible.loc[feasible[{"energy": y, "carbon": CARBON_AXES[y], "time": x}[self.objective]].idxmin()]


# A setting axis given as "range" (or "range:N"): N values evenly over each GPU's own span, ends included.
RANGE_STEPS, MAX_RANGE_STEPS = 8, 64


def _range_steps(value: object, field: str) -> int | None:
    """How many values `value` asks of a GPU's span where it is "range" or "range:N" (N from 2 to MAX_RANGE_STEPS);
    None for a number or None."""
    if not isinstance(value, str):
        return None
    head, _, count = value.strip().lower().partition(":")
    steps = int(count) if count.strip().isdigit() else None if count else RANGE_STEPS
    if head != "range" or steps is None or not 2 <= steps <= MAX_RANGE_STEPS:
        raise InputError(field, f"{value!r} is not a number, nor range or range:N (N values over each GPU's span, "
                                f"N from 2 to {MAX_RANGE_STEPS})")
    return steps


def settings_of(values: Sequence[float | str | None], low: float, high: float, field: str) -> list[float | None]:
    """A sweep's clocks or power limits for one GPU whose span is [low, high]: each number as given, None (the
    GPU's default) as given, and "range" or "range:N" as N whole values evenly from low (rounded up) to high."""
    out: list[float | None] = []
    for value in values:
        steps = _range_steps(value, field)
        if steps is None:
            out.append(value)  # type: ignore[arg-type]
        elif math.ceil(low) <= math.floor(high):  # an empty span (GPUs that share no limit) gives none
            out += [float(v) for v in np.unique(np.round(np.linspace(math.ceil(low), math.floor(high), steps)))]
    return list(dict.fromkeys(out))


def grid(model: str | Sequence[str], phase: str, *, gpus: Sequence[str], batches: Sequence[int], seqs: Sequence[int],
         dtypes: Sequence[str] = ("bf16",), sm_clocks: Sequence[float | str | None] = (None,),
         power_limits: Sequence[float | str | None] = (None,), host_dispatch_s: float | None = None,
         tps: Sequence[int] = (), output_lens: Sequence[int] = (), request_rates: Sequence[float] = (),
         serving_axes: Mapping[str, Sequence[float]] | None = None,
         training_axes: Mapping[str, Sequence[int | str]] | None = None) -> tuple[pd.DataFrame, dict[str, int]]:
    """The configurations of a sweep (one row each) of a model or each of a list of them, less the clocks and power
    limits each GPU does not allow, and how many were left out for which reason; `host_dispatch_s`, the machine's host
    time an eager launch where known (every configuration's `host_dispatch_s`; none: the default, its interval
    spanning the measured hosts); `tps`, a generation's or a serving load's tensor-parallel GPUs an instance as an
    axis (a `tp` column; each checked against the model first); `output_lens`, their tokens generated a sequence (a
    serving load's mean) as an axis (an `output_len` column, in place of the fixed option); `request_rates`, a serving
    sweep's requests a second in place of its `batches` (a `request_rate` column, RATE_SIZES); `serving_axes`, a
    serving load's SERVING_AXES' lists, each an axis (a column of its name): its identical `instances` (a
    concurrency that is no multiple of one left out, as each instance keeps a whole share in flight), and an
    autoscaled load's `headroom` over each window's rate, `cold_start_s` and `reaction_s`; `training_axes`, a
    training run's TRAINING_AXES' lists, each an axis (a text model's: a vision model's point takes neither, as it
    takes no seq). A clock or limit of
    "range" ("range:N") is each GPU's own span in RANGE_STEPS (N) whole values: its clocks from MIN_CLOCK_RATIO of its
    boost clock up, its power limits over the range it takes."""
    for name, values in zip(JOB_AXES, (tps, output_lens)):
        require(not values or phase in AXIS_PHASES, name, f"applies to --phase {' or '.join(AXIS_PHASES)} only")
    for name, values in (serving_axes or {}).items():
        require(name in SERVING_AXES, name, f"is no serving axis ({', '.join(SERVING_AXES)})")
        require(not values or phase == "serve", name, "applies to --phase serve only")
    serving_axes = {name: list(dict.fromkeys((serving_axes or {}).get(name, ()))) for name in SERVING_AXES}
    for name, values in (training_axes or {}).items():
        require(name in TRAINING_AXES, name, f"is no training axis ({', '.join(TRAINING_AXES)})")
        require(not values or phase == "train-run", name, "applies to --phase train-run only")
    training_axes = {name: list(dict.fromkeys((training_axes or {}).get(name, ()))) for name in TRAINING_AXES}
    instances = serving_axes["instances"]
    models = [model] if isinstance(model, str) else list(model)
    if tps:  # each divides every model's heads (auto: each finds its own)
        tps = list(dict.fromkeys(tp if tp == AUTO_SIZE else check_tp(resolve_model(m)[0], tp) for m in models
                                 for tp in tps))
    output_lens = list(dict.fromkeys(output_lens))  # each checked by its jobs, as the sizes are
    if request_rates:
        require(phase == "serve", "request_rate", "applies to --phase serve only")
        require(not batches, "request_rate", "give concurrency or request_rate, not both")
        batches = [float(r) for r in listed(request_rates, "request_rate", [])]  # checked and deduplicated there
    specs = {g: lookup_gpu(g) for g in gpus}
    settings = {g: (settings_of(sm_clocks, MIN_CLOCK_RATIO * spec.boost_clock_mhz, spec.boost_clock_mhz,
                                "sm_clock_mhz"),
                    settings_of(power_limits, *spec.power_limit_whole_range_w, "power_limit_w"))
                for g, spec in specs.items()}
    # an image model's pass (or training run) has no sequence: one configuration, its seq empty, not one a sequence
    # length it ignores
    images = {m for m in models if (phase not in JOB_PHASES or phase == "train-run")
              and is_vision(resolve_model(m)[0])}
    settings_count = sum(len(clocks) * len(limits) for clocks, limits in (settings[g] for g in gpus))
    texts = math.prod(max(1, len(v)) for v in training_axes.values())  # a text model's points a setting
    size = (sum(1 if m in images else len(seqs) * texts for m in models) * len(batches) * len(dtypes)
            * max(1, len(tps)) * max(1, len(output_lens)) * math.prod(max(1, len(v)) for v in serving_axes.values())
            * settings_count)
    most = MAX_JOB_POINTS if phase in JOB_PHASES else MAX_POINTS
    if size > most:
        raise InputError("sweep", f"{size:,} configurations; at most {most:,}{' jobs' if phase in JOB_PHASES else ''} "
                                  "(narrow the lists)")
    frame = pd.DataFrame([row for m in models for g in gpus for row in itertools.product(
                             [m], [g], batches, [None] if m in images else seqs, dtypes, *settings[g], tps or [None],
                             output_lens or [None], *(values or [None] for values in serving_axes.values()),
                             *([None] if m in images or not values else values for values in training_axes.values()))],
                         columns=["model", "gpu", "request_rate" if request_rates else "batch", "seq", "dtype",
                                  "sm_clock_mhz", "power_limit_w", *JOB_AXES])
    frame = frame.drop(columns=[c for c, values in zip(JOB_AXES, (tps, output_lens, *serving_axes.values(),
                                                                   *training_axes.values())) if not values])
    frame.insert(1, "phase", phase)
    frame[["sm_clock_mhz", "power_limit_w"]] = frame[["sm_clock_mhz", "power_limit_w"]].astype(float)
    if host_dispatch_s is not None:
        frame["host_dispatch_s"] = float(check_host_dispatch(host_dispatch_s))
    boost = frame["gpu"].map(lambda g: specs[g].boost_clock_mhz)
    clock_ok = frame["sm_clock_mhz"].isna() | frame["sm_clock_mhz"].between(MIN_CLOCK_RATIO * boost, boost)
    limits = frame["power_limit_w"].to_numpy()
    limit_ok = np.isnan(limits)
    for g, spec in specs.items():  # a loop over the few GPUs, each one's rows in one array test
        mine = (frame["gpu"] == g).to_numpy()
        limit_ok[mine] |= spec.power_limit_allowed(limits[mine])
    limit_ok = pd.Series(limit_ok, index=frame.index)
    # each instance keeps a whole share of a concurrency in flight
    shared = (pd.Series(True, index=frame.index) if not instances or request_rates
              else frame["batch"] % frame["instances"] == 0)
    skipped = {"clock outside the GPU's range": int((~clock_ok).sum()),
               "power limit outside the GPU's range": int((clock_ok & ~limit_ok).sum()),
               "concurrency not a multiple of instances": int((clock_ok & limit_ok & ~shared).sum())}
    return frame[clock_ok & limit_ok & shared].reset_index(drop=True), {k: v for k, v in skipped.items() if v}


def pareto_mask(energy: np.ndarray, time: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Per point, whether it is a candidate that no other candidate beats (no more energy and no more time, one of
    them less): sorted by time, a point is on the front where its energy is below every faster point's."""
    out = np.zeros(len(energy), dtype=bool)
    idx = np.flatnonzero(candidates)
    if not len(idx):
        return out
    order = idx[np.lexsort((energy[idx], time[idx]))]
    best_before = np.minimum.accumulate(np.concatenate([[np.inf], energy[order][:-1]]))
    out[order[energy[order] < best_before]] = True
    return out


def check_options(objective: str, front: str, max_time_s: float | None, min_tokens_per_s: float | None,
                  max_power_w: float | None, max_wait_s: float | None = None, max_ttft_s: float | None = None,
                  max_ttft_p99_s: float | None = None, max_itl_p99_s: float | None = None) -> None:
    """A sweep's objective, front and constraints, checked before any work."""
    require_choice(objective, OBJECTIVES, "objective")
    require_choice(front, (*FRONTS, "auto"), "front")
    for name, value in (("max_time_s", max_time_s), ("min_tokens_per_s", min_tokens_per_s),
                        ("max_power_w", max_power_w), ("max_wait_s", max_wait_s), ("max_ttft_s", max_ttft_s),
                        ("max_ttft_p99_s", max_ttft_p99_s), ("max_itl_p99_s", max_itl_p99_s)):
        number = isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
        if value is not None and not (number and 0 < value < np.inf):  # NaN fails the range
            raise InputError(name, f"must be a positive number, got {value!r}")


def check_job(phase: str, job: Mapping[str, Any] | None) -> dict[str, Any]:
    """A sweep's fixed options: for a single-pass phase PASS_OPTIONS, for a job phase only the options its job
    takes."""
    job = dict(job or {})
    if phase not in JOB_PHASES:
        for name in sorted(job):
            if name not in PASS_OPTIONS:
                raise InputError(name, f"applies to --phase {' or '.join(JOB_PHASES)} only")
            if name != "fusions" and not isinstance(job[name], str):  # a column of every configuration: one name
                raise InputError(name, f"must be a name, got {kind_of(job[name])}")
    else:
        for name in job:
            if name not in JOB_OPTIONS[phase]:
                raise InputError(name, f"has no effect with --phase {phase}")
    if "expert_parallel" in job:  # checked here too: a sweep of dense models alone never passes it to a job
        job["expert_parallel"] = check_expert_parallel(job["expert_parallel"])
    if "fusions" in job:  # checked once, and written as the list the job reports
        job["fusions"] = list(check_fusions(job["fusions"]))
    if "engine" in job:  # "none" is the default, no engine; else the engine as the catalog names it
        job["engine"] = normal_engine(job["engine"])
        if job["engine"] is None:
            del job["engine"]
    return job


def estimate_jobs(configs: pd.DataFrame, job: Mapping[str, Any], estimator: Any) -> pd.DataFrame:
    """Each configuration as the whole job of its phase, with the sweep's fixed `job` options: a training run
    (`batch` its micro-batch), a generation (`batch` sequences of `seq` prompt tokens), or serving (`batch` requests
    in flight of `seq` prompt tokens on average; a point is one engine step, its time the time an output token);
    its energy, time, power, energy interval and the tokens it does (trained, generated, or a step's)."""
    from joulecast.estimator.jobs import generate
    from joulecast.estimator.loading import load_estimator
    from joulecast.estimator.serving import BeyondCapacityError, serve
    from joulecast.estimator.train_run import train_run

    loaded = estimator if hasattr(estimator, "predict") else load_estimator(estimator)
    model = loaded if loaded is not None else "physics"
    out = []
    # a mixture's experts split over the GPUs where the sweep asks: its dense models run as without
    dense = {m: not is_mixture_of_experts(resolve_model(m)[0]) for m in configs["model"].unique()}
    images = {m: is_vision(resolve_model(m)[0]) for m in configs["model"].unique()}
    by_window = job.get(WINDOW_INTENSITY, ())  # each grid on an hourly series, else None (`sweep`)
    job = {k: v for k, v in job.items() if k != WINDOW_INTENSITY}
    split = {k: v for k, v in job.items() if k != "expert_parallel"}
    # a loop over configurations, not kernel rows: each job estimates all its own steps in one vectorised pass
    for c in configs.itertuples(index=False):
        own = split if dense[c.model] else job
        dispatch = getattr(c, "host_dispatch_s", np.nan)
        setting = dict(dtype=c.dtype, estimator=model,
                       sm_clock_mhz=None if np.isnan(c.sm_clock_mhz) else c.sm_clock_mhz,
                       power_limit_w=None if np.isnan(c.power_limit_w) else c.power_limit_w,
                       host_dispatch_s=None if np.isnan(dispatch) else dispatch)
        if c.phase == "train-run":  # a vision model's run over images: its seq empty (`grid`), a text model's
            # options left to the text models among the sweep's (as its seq is)
            text = job if not images[c.model] else {k: v for k, v in job.items() if k not in TEXT_TRAINING_OPTIONS}
            r = _train_point(c.model, c.gpu, None if images[c.model] else int(c.seq), int(c.batch),
                             {**text, **setting, **_axes(c)})
            figures = dict(time_s=r.time_s, energy_j=r.energy_j, tokens=r.tokens, band=r.energy_interval_j,
                           gpu_busy_share=np.nan, micro_batch=r.micro_batch)
        elif c.phase == "generate":
            r = generate(c.model, c.gpu, batch=int(c.batch), input_len=int(c.seq), **own, **setting, **_axes(c),
                         suggest_tp=False)  # a point past memory is infeasible: the search would only slow the sweep
            figures = dict(time_s=r.time_s, energy_j=r.energy_j, tokens=r.batch * r.output_len,
                           band=r.energy_interval_j, gpu_busy_share=np.nan, **_tp_taken(c, r.tp))
        else:  # a step: its output tokens at the estimate's throughput and energy a token
            load = ({} if "window_rates" in own  # a load window by window (`_window_fields`): the job's
                    else {"request_rate": float(c.request_rate)} if hasattr(c, "request_rate")
                    else {"concurrency": int(c.batch)})
            if "window_lengths" in own:  # each window at its own lengths (a file's: its means the point's columns)
                lengths = {}
                own = {k: v for k, v in own.items() if k != "output_len"}
            else:
                lengths = {"input_len": float(c.seq)}
            try:
                r = serve(c.model, c.gpu, **load, **lengths, **own, **setting, **_axes(c), suggest_tp=False)
            except BeyondCapacityError as exc:  # a rate this GPU cannot serve: a point, infeasible, with the reason
                out.append(dict(time_s=np.nan, energy_j=np.nan, tokens=np.nan, energy_lo_j=np.nan, energy_hi_j=np.nan,
                                gpu_busy_share=np.nan, ttft_s=np.nan, ttft_p99_s=np.nan, itl_p99_s=np.nan,
                                power_w=np.nan,
                                memory_gb=np.nan, flags="exceeds-capacity",
                                outside_domain=exc.message, method="", **_tp_taken(c, None)))
                continue
            tokens = r.tokens_per_s * r.step_time_s
            band = r.energy_per_output_token_interval_j
            # where host work sets the step (serve's own); a request's first token (its waits for a slot and a
            # backlog, and a step) on average and 99 %'s; the gap 99 % of tokens come within of the one before
            figures = dict(time_s=r.step_time_s, energy_j=r.energy_per_output_token_j * tokens, tokens=tokens,
                           band=None if band is None else tuple(b * tokens for b in band),
                           gpu_busy_share=r.gpu_busy_share, ttft_s=r.ttft_s, ttft_p99_s=r.ttft_p99_s,
                           itl_p99_s=np.nan if r.itl_p99_s is None else r.itl_p99_s, **_tp_taken(c, r.tp))
            if r.wait_s is not None:  # queued: a request's mean wait for the backlog it finds
                figures["wait_s"] = r.wait_s
            w = r.windows
            for k, where in enumerate(by_window):  # on a grid's hourly series: each window's hours' intensity
                if where is not None:             # weighted by its energy (a queued load's own drain included)
                    at = where.mean_between(w.start_s, w.start_s + w.duration_s)
                    figures[f"{WINDOW_INTENSITY}_{k}"] = float(np.dot(w.energy_j, at) / w.energy_j.sum())
        lo, hi = figures.pop("band") or (np.nan, np.nan)
        out.append(dict(**figures, energy_lo_j=lo, energy_hi_j=hi, power_w=r.power_w, memory_gb=r.memory_gb,
                        flags=",".join(r.flags), outside_domain="; ".join(r.outside_domain), method=r.method))
    configs = configs.reset_index(drop=True)
    points = pd.DataFrame(out)
    for column, taken in (("batch", "micro_batch"), ("tp", "tp")):  # the size each job took: auto's choice where
        if taken in points:                                           # the word was given
            auto = configs[column].eq(AUTO_SIZE)
            configs[column] = points.pop(taken)
            if auto.any():
                configs.insert(configs.columns.get_loc(column) + 1, f"{taken}_auto", auto)
            else:
                configs[column] = configs[column].astype(np.int64)
    if configs["phase"].eq("train-run").any() and any(images.values()):  # an image is one "token", as a pass's seq
        configs["seq"] = np.where(configs["model"].map(images).to_numpy(bool), 1, configs["seq"]).astype(np.int64)
    return pd.concat([configs, points], axis=1)


def _train_point(model: str, gpu: str, seq: int | None, micro_batch: int, options: Mapping[str, Any]) -> Any:
    """A training sweep's point: `train_run` at `micro_batch`, or at the largest that fits where it is AUTO_SIZE;
    where not one sequence a micro-batch fits, at one, flagged exceeds-memory (infeasible) as a number past memory
    is, not the sweep refused."""
    from joulecast.estimator.train_run import train_run

    try:
        return train_run(model, gpu, seq=seq, micro_batch=AUTO_MICRO_BATCH if micro_batch == AUTO_SIZE
                         else micro_batch, **options)
    except InputError as exc:
        if micro_batch != AUTO_SIZE or exc.field != "micro_batch":
            raise
        return train_run(model, gpu, seq=seq, micro_batch=1, **options)


def _tp_taken(config: Any, tp: int | None) -> dict[str, float]:
    """A generation's or serving point's tensor-parallel GPUs where the sweep has them as an axis: those its job
    took (tp auto's choice), NaN where it took none (a rate no tp served)."""
    if not hasattr(config, "tp"):
        return {}
    if tp is None:  # no job: the tp asked for, none known where it was auto
        tp = np.nan if config.tp == AUTO_SIZE else float(config.tp)
    return {"tp": tp}


def _axes(config: Any) -> dict[str, float]:
    """A configuration's JOB_AXES where the sweep has them as axes (columns), for its job (the counts whole, a
    recomputation its name)."""
    values = {name: getattr(config, name, None) for name in JOB_AXES}
    return {name: float(v) if name in FLOAT_AXES else v if name == "recompute"
            else AUTO_TP if name == "tp" and v == AUTO_SIZE else int(v)
            for name, v in values.items() if v is not None and v == v}


def estimate_part(configs: pd.DataFrame, estimator: Any, job: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """One partition of a sweep (a task on a Dask worker, or a step here)."""
    if len(configs) and configs["phase"].iloc[0] in JOB_PHASES:
        return estimate_jobs(configs, job or {}, estimator)
    fixed = {k: ",".join(v) if k == "fusions" else v for k, v in (job or {}).items()}  # each a column of every row
    return estimate_many(configs.assign(**fixed) if fixed else configs, estimator=estimator)


def estimate_all(configs: pd.DataFrame, estimator: Any = None, run: Any = None,
                 progress: Any = None, job: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """`estimate_many` of every configuration (or each its job, `estimate_jobs`), in partitions of at most
    PART_ROWS (JOB_PART_ROWS) run by `run` (an executor, `joulecast.data.executors`; default in-process), gathered
    in order: the same rows whatever ran them."""
    from joulecast.data.executors import InProcess

    run = run or InProcess()
    jobs = len(configs) > 0 and configs["phase"].iloc[0] in JOB_PHASES
    rows = JOB_PART_ROWS if jobs else PART_ROWS
    count = max(1, -(-len(configs) // rows), 2 * run.workers if run.workers > 1 else 1)
    bounds = np.linspace(0, len(configs), min(count, len(configs)) + 1).astype(int)
    parts = [configs.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return pd.concat(run.map(estimate_part, parts, estimator, job, progress=progress), ignore_index=True)


def sweep(configs: pd.DataFrame, *, objective: str = "energy", front: str = "auto", max_time_s: float | None = None,
          min_tokens_per_s: float | None = None, max_power_w: float | None = None, max_wait_s: float | None = None,
          max_ttft_s: float | None = None, max_ttft_p99_s: float | None = None, max_itl_p99_s: float | None = None,
          estimator: Any = None, skipped: dict[str, int] | None = None, run: Any = None, progress: Any = None,
          job: Mapping[str, Any] | None = None, grids: Sequence[Grid] = ()) -> SweepResult:
    """Estimate every configuration (of a job phase: each as its job, with the fixed options `job`); mark those
    that fit in their GPU's memory and meet the constraints (`feasible`) and the Pareto front among them
    (`pareto`); throughput is tokens a second (a prefill's or a training step's batch x seq, a decode step's batch;
    a training run's tokens trained, a generation's tokens generated, a serving step's output tokens). `front`:
    "pass" (a pass's or a job's energy against its time), "token", or "auto" (per token where the points do
    different work: they differ in batch or length, or, for jobs, in tokens).
    `run` says where the partitions run (`joulecast.data.executors`; default here); `progress` is called with each
    partition's count as it finishes. Each point's carbon (`carbon_g`, its interval's ends, `carbon_per_token_g`) is
    its energy's on each of `grids` (`joulecast.data.carbon.Grid`; default WORLD's at the average PUE), a point a
    configuration and grid; the front weighs carbon where the objective is carbon or there are several grids.
    `max_wait_s`: a queued serving load's (`queue` in `job`) requests' mean wait at most this long; `max_ttft_s`: a
    serving point's mean time to first token (its waits for a slot and any backlog, and the step) at most this;
    `max_ttft_p99_s`: the time within which 99 % of its requests have theirs at most this; `max_itl_p99_s`: the gap
    within which 99 % of its output tokens come after the one before at most this."""
    check_options(objective, front, max_time_s, min_tokens_per_s, max_power_w, max_wait_s, max_ttft_s, max_ttft_p99_s,
                  max_itl_p99_s)
    grids = tuple(dict.fromkeys(grids)) or (grid_at(),)  # a grid named twice is one
    if len(configs) * len(grids) > MAX_POINTS:
        raise InputError("grid", f"{len(configs):,} configurations on {len(grids):,} grids; at most {MAX_POINTS:,} "
                                   "points (narrow the lists)")
    phase = str(configs["phase"].iloc[0]) if len(configs) else ""
    job = check_job(phase, job)
    require(max_wait_s is None or bool(job.get("queue")), "max_wait_s", "applies to a queued serving load (queue, "
            "with a load window by window): only its requests wait")
    for name, bound, what in (("max_ttft_s", max_ttft_s, "a request's time to its first token"),
                              ("max_ttft_p99_s", max_ttft_p99_s, "a request's time to its first token"),
                              ("max_itl_p99_s", max_itl_p99_s, "the gaps between a request's tokens")):
        require(bound is None or phase == "serve", name, f"applies to --phase serve only ({what})")
    for name in JOB_AXES:
        require(name not in job or name not in configs, name, "an axis of the grid or a fixed option, not both")
    # a load window by window on an hourly series: each point's carbon at its own windows' hours (`estimate_jobs`)
    on_series = [bool(g.series) and "window_rates" in job for g in grids]
    points = estimate_all(configs, estimator, run, progress, {**job, WINDOW_INTENSITY: tuple(
        g if hourly else None for g, hourly in zip(grids, on_series))} if any(on_series) else job)
    intensities = [points.pop(f"{WINDOW_INTENSITY}_{k}") if f"{WINDOW_INTENSITY}_{k}" in points
                   else pd.Series(np.nan, index=points.index) if hourly else None  # every point past capacity
                   for k, hourly in enumerate(on_series)]
    if phase in JOB_PHASES:
        tokens = points.pop("tokens").astype(float)
        varies = tokens.nunique() > 1
    else:
        # a decode step makes a token a sequence; an image model's pass takes its images as its tokens
        tokens = points["batch"] * np.where((points["phase"] == "decode") | points["seq"].isna(), 1, points["seq"])
        varies = len(configs[["batch", "seq"]].drop_duplicates()) > 1
    require(front not in ("latency", "ttft") or phase == "serve", "front", f"{front} applies to --phase serve only "
            "(energy a token against the time between a request's tokens, or its first token)")
    if front == "auto":
        front = "latency" if "request_rate" in configs else "token" if varies else "pass"
    points["tokens_per_s"] = tokens / points["time_s"]
    points["energy_per_token_j"] = points["energy_j"] / tokens
    points["s_per_token"] = points["time_s"] / tokens
    points = on_grids(points, grids, None if phase == "serve" else points["time_s"].to_numpy(), intensities)
    # a configuration that does not fit in its GPU's memory cannot run, so it meets no constraint; nor one without
    # figures (its best was once an idxmin over nothing)
    feasible = ~points["flags"].fillna("").str.contains("|".join(UNSERVABLE)).to_numpy(bool)
    feasible &= np.isfinite(points[["time_s", "energy_j"]].to_numpy(float)).all(axis=1)
    for column, bound, upper in (("time_s", max_time_s, True), ("tokens_per_s", min_tokens_per_s, False),
                                 ("power_w", max_power_w, True), ("wait_s", max_wait_s, True),
                                 ("ttft_s", max_ttft_s, True), ("ttft_p99_s", max_ttft_p99_s, True),
                                 ("itl_p99_s", max_itl_p99_s, True)):
        if bound is not None:
            feasible &= (points[column] <= bound) if upper else (points[column] >= bound)
    points["feasible"] = feasible
    cost = "carbon" if objective == "carbon" or len(grids) > 1 else "energy"
    x, y = FRONTS[front]
    y = CARBON_AXES[y] if cost == "carbon" else y
    points["pareto"] = pareto_mask(points[y].to_numpy(), points[x].to_numpy(), feasible)
    constraints = {k: v for k, v in (("max_time_s", max_time_s), ("min_tokens_per_s", min_tokens_per_s),
                                     ("max_power_w", max_power_w), ("max_wait_s", max_wait_s),
                                     ("max_ttft_s", max_ttft_s), ("max_ttft_p99_s", max_ttft_p99_s),
                                     ("max_itl_p99_s", max_itl_p99_s))
                   if v is not None}
    sizes = RATE_SIZES if "request_rate" in points else SIZES.get(phase, ("batch", "seq"))
    points = points.rename(columns=dict(zip(("batch", "seq"), sizes)))
    images = len(points) > 0 and all(is_vision(resolve_model(m)[0]) for m in points["model"].unique())
    if "window_rates" in job:  # the result says how many windows; their rates and lengths are the caller's (a
        # year's: 8,760)
        job = {**{k: v for k, v in job.items() if k not in ("window_rates", "window_lengths")},
               "windows": len(job["window_rates"])}
    return SweepResult(points=points, skipped=dict(skipped or {}), objective=objective, front=front,
                       constraints=constraints, sizes=sizes, job=job, cost=cost, unit="image" if images else "token")


# A sweep named by fields (`run_sweep`, `joulecast.sweep`, POST /v1/sweep): those beyond its phase's two sizes
# (`SIZES`) and fixed options (`JOB_OPTIONS`, `PASS_OPTIONS`). model, gpu, dtype, sm_clock_mhz, power_limit_w, tp,
# output_len, grid and the sizes take a value or a list (an axis each).
FIELDS = ("model", "phase", "gpu", "dtype", "sm_clock_mhz", "power_limit_w", "tp", "output_len", "objective", "front",
          "max_time_s", "min_tokens_per_s", "max_power_w", "max_wait_s", "max_ttft_s", "max_ttft_p99_s",
          "max_itl_p99_s", "host_dispatch_s", "grid", "carbon_intensity", "pue", "carbon_series")
# What a field's list holds, for the line that refuses a value (a count's: `_is_count`).
_KINDS = {"gpu": "a GPU's name (joulecast gpus)", "sm_clock_mhz": "a clock in MHz or \"range\"",
          "request_rate": "a number of requests a second above 0 and at most 2^24",
          "power_limit_w": "a power limit in W or \"range\"", "grid": "a grid's name", "dtype": "a dtype's name",
          "micro_batch": "a whole number from 1 to 2^24, or auto (the largest that fits the GPU)",
          "tp": "a whole number from 1 to 2^24, or auto (the fewest GPUs whose shards fit)",
          "lora_rank": "a whole number from 0 (full fine-tuning) to 2^24", "recompute": "none, selective or full",
          **{name: kind for name, (_, kind) in FLOAT_AXES.items()}}
_COUNT_FIELDS = ("tp", "output_len", "instances", *{size for pair in SIZES.values() for size in pair}, "batch", "seq")


def _is_auto(value: Any) -> bool:
    """Whether a sweep's micro-batch or tensor-parallel GPUs (AUTO_FIELDS) are the word auto (`AUTO_SIZE`), as
    `train_run`, `generate` and `serve` take it."""
    return isinstance(value, str) and value in (AUTO_MICRO_BATCH, AUTO_TP)


def _is_count(value: Any) -> bool:
    """A size or count a sweep takes: a whole number from 1 to 2^24."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 1 <= value <= 2**24


def is_setting(value: object) -> bool:
    """Whether `value` is a clock or power limit a sweep takes: a number, None for the GPU's default, or text ("range"
    or "range:N", which `settings_of` reads)."""
    return value is None or isinstance(value, str) or (isinstance(value, (int, float, np.number))
                                                       and not isinstance(value, bool))


def listed(value: Any, name: str, default: list) -> list:
    """A sweep field's value as a list of checked values (a value alone: a list of one; a count as JSON may send it,
    8.0 or 1e3, the whole number it names), else `default` where not given; a bad value or an empty list is one line
    naming `name`."""
    if isinstance(value, (list, tuple)) and not len(value):
        raise InputError(name, "an empty list: give a value or a list of them")
    if value is None:
        return default
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if name == "lora_rank":  # 0: full fine-tuning
        values = [whole_number(v) for v in values]
        bad = [v for v in values if not (_is_count(v) or v == 0 and not isinstance(v, bool))]
    elif name == "recompute":
        bad = [v for v in values if not isinstance(v, str) or v not in RECOMPUTE]
    elif name in _COUNT_FIELDS:
        auto = [name in AUTO_FIELDS and _is_auto(v) for v in values]
        values = [AUTO_SIZE if a else whole_number(v) for a, v in zip(auto, values)]
        bad = [v for a, v in zip(auto, values) if not a and not _is_count(v)]
    elif name == "request_rate":  # requests a second, as `serve` takes them
        bad = [v for v in values if not isinstance(v, (int, float, np.number)) or isinstance(v, bool)
               or not 0 < v <= 2**24]
    elif name in ("sm_clock_mhz", "power_limit_w"):
        bad = [v for v in values if not is_setting(v)]
    elif name in FLOAT_AXES:  # a share of each window's rate or a time, as `serve` takes it
        bad = [v for v in values if not isinstance(v, (int, float, np.number)) or isinstance(v, bool)
               or not 0 <= v <= FLOAT_AXES[name][0]]
    else:  # names
        bad = [v for v in values if not isinstance(v, str)]
    if bad:
        kind = _KINDS.get(name, "a whole number from 1 to 2^24" if name in _COUNT_FIELDS else "a name")
        raise InputError(name, f"{bad[0]!r} is not {kind} (give a value or a list of them)")
    return list(dict.fromkeys(values))  # a value given twice is one


def _sizes(phase: str, fields: Mapping[str, Any]) -> tuple[list[int], list[int], list[float]]:
    """A sweep's two size axes (`SIZES`) from its fields, with their defaults (a single pass: batch 1, seq 512; a
    training run: its global batch as one micro-batch, seq 512; a generation: batch 1), and a serving sweep's
    request rates where given in place of its concurrency (RATE_SIZES; else none); and what a job phase needs
    first: a training run's global batch, a generation's or serving load's output_len."""
    global_batch = whole_number(fields.get("global_batch"))
    if phase == "train-run" and not _is_count(global_batch):
        raise InputError("global_batch", f"required with phase train-run: sequences an optimizer step, a whole number "
                                         f"from 1 to 2^24, got {global_batch!r}")
    if phase in AXIS_PHASES and fields.get("output_len") is None:
        raise InputError("output_len", f"required with phase {phase}: tokens generated a sequence")
    by_rate = phase == "serve" and fields.get("request_rate") is not None
    require(not by_rate or fields.get("concurrency") is None, "request_rate",
            "give concurrency or request_rate, not both")
    names = RATE_SIZES if by_rate else SIZES.get(phase, ("batch", "seq"))
    defaults = {"train-run": ([global_batch], [512]), "generate": ([1], []), "serve": ([], [])}.get(phase, ([1], [512]))
    axes = [listed(fields.get(name), name, default) for name, default in zip(names, defaults)]
    for name, values in zip(names, axes):
        if not values:
            more = " (or request_rate: requests a second)" if name == "concurrency" else ""
            raise InputError(name, f"required with phase {phase}: a size or a list of them{more}")
    return ([], axes[1], axes[0]) if by_rate else (axes[0], axes[1], [])


def _refuse_what_no_model_takes(models: Sequence[str], phase: str, fields: Mapping[str, Any], job: Mapping[str, Any],
                                batches: Sequence[int], seqs: Sequence[int], dtypes: Sequence[str]) -> None:
    """A single pass's seq, attention or fusions that every model ignores (`features.lowering.ignored_field`), and
    fusions that change none of any model's kernels (`idle_fusions`, read on each model's first configuration): one
    line naming the field, not points labelled with what they ignore (`joulecast sweep` names its flags first)."""
    if phase in ("generate", "serve"):
        return
    if phase == "train-run" and all(is_vision(resolve_model(m)[0]) for m in models):
        if fields.get("seq") is not None:
            raise InputError("seq", f"has no effect with {' or '.join(models)} (a vision model's run is over images: "
                                    "global_batch images a step); leave it out")
        for name, (default, what) in TEXT_TRAINING_OPTIONS.items():  # a text model's, as `train_run` refuses them
            if not left_as_is(job.get(name, fields.get(name, default)), default):  # a fixed option, or an axis
                raise InputError(name, f"{what}: has no effect on {' or '.join(models)}, "
                                       f"{'a vision model' if len(models) == 1 else 'vision models'}; leave it out")
    if phase not in JOB_PHASES:
        given = {k for k in IGNORED_BY if (fields if k == "seq" else job).get(k) is not None}
        ignored = ignored_field(list(models), given)
        if ignored:
            raise InputError(ignored[0], ignored[1].replace("{batch}", "batch"))
    if not job.get("fusions"):
        return
    pass_phase = "training" if phase == "train-run" else phase
    takers, idle = [m for m in models if not ignored_field([m], {"fusions"})], None
    for name in takers:  # a few models: a kernel table each, one more for each fusion given (`idle_fusions`)
        image = is_vision(resolve_model(name)[0])
        shape = dict(model=name, phase=pass_phase, batch=batches[0], **({} if image else {"seq": seqs[0]}),
                     dtype=dtypes[0], fusions=job["fusions"],
                     **({"attention": job["attention"]} if job.get("attention") else {}))
        own = set(idle_fusions(workload(**shape), **shape))
        idle = own if idle is None else idle & own
    message = idle and fusions_refusal([f for f in check_fusions(job["fusions"]) if f in idle], job["fusions"],
                                       takers, pass_phase)
    if message:
        raise InputError("fusions", message)


def run_sweep(model: str | Sequence[str], gpu: str | Sequence[str], *, phase: str = "prefill", estimator: Any = None,
              run: Any = None, progress: Any = None, max_points: int | None = None, **fields: Any) -> SweepResult:
    """A sweep named by fields, as `joulecast sweep` takes its flags and POST /v1/sweep its body (`joulecast.sweep`):
    every combination of `model` (a catalog name or a list of them), `gpu`, the phase's two sizes (`SIZES`: batch and
    seq; micro_batch and seq; batch and input_len; concurrency and input_len), `dtype`, `sm_clock_mhz` and
    `power_limit_w` (numbers, None for the default, or "range" / "range:N"), a generation's or serving load's `tp` and
    `output_len` (one output_len: every job's; several: an axis), a serving load's `instances`, a training run's
    `lora_rank` and `recompute` (one: every run's; several: an axis), "auto" among the micro-batches or tps (each
    point the largest that fits, the fewest whose shards fit: `micro_batch_auto`, `tp_auto`), and the carbon
    `grid` (or `carbon_intensity` or `carbon_series`, at `pue`), each a value or a list; the phase's fixed options
    (`JOB_OPTIONS`, `PASS_OPTIONS`) as its job takes them; the `objective`, `front` and constraints (`max_time_s`,
    `min_tokens_per_s`, `max_power_w`, a queued serving load's `max_wait_s`) as `sweep` takes them; a serving
    sweep's `requests` (a `joulecast.read_requests` result, or its rows) in place of its lengths, their spread and,
    unless a load is given, its rate (`_trace_fields`). Refused before any estimate:
    a field it does not take (naming the closest), a bad value, and more configurations than MAX_JOB_POINTS jobs or
    MAX_POINTS passes (on their grids), or than `max_points` where given.

        >>> joulecast.sweep("llama-3-8b", ["h100-sxm", "a100-sxm4-80gb"], phase="generate", batch=[1, 16],
        ...                 input_len=512, output_len=[64, 256], power_limit_w="range:4").best"""
    if not isinstance(phase, str):
        raise InputError("phase", f"must be a phase's name, got {phase!r}")
    phase = phase.lower()  # in any case, as the CLI reads --phase
    phases = (*PHASES, *JOB_PHASES)
    require_choice(phase, phases, "phase")
    fixed = JOB_OPTIONS.get(phase, PASS_OPTIONS)
    allowed = [*FIELDS, *SIZES.get(phase, ("batch", "seq")), *(RATE_SIZES[:1] if phase == "serve" else ()), *fixed,
               *(("requests",) if phase == "serve" else ())]
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise UnknownFieldError(unknown[0], unknown[0], allowed, f"not a field of a {phase} sweep")
    require(fields.get("window_lengths") is None or fields.get("requests") is not None, "window_lengths",
            "a sweep takes each window's lengths from its requests (give requests and window_s): its seq is a length")
    trace, fields = _trace_fields(fields) if fields.get("requests") is not None else (None, fields)
    if phase == "serve" and any(fields.get(k) is not None for k in ("window_rates", "window_s", "last_window_s")):
        fields = _window_fields(fields)
    require(max_points is None or isinstance(max_points, int) and not isinstance(max_points, bool) and max_points > 0,
            "max_points", f"a positive integer, or none for no bound of the caller's, got {max_points!r}")
    check_options(fields.get("objective", "energy"), fields.get("front", "auto"), fields.get("max_time_s"),
                  fields.get("min_tokens_per_s"), fields.get("max_power_w"), fields.get("max_wait_s"),
                  fields.get("max_ttft_s"), fields.get("max_ttft_p99_s"), fields.get("max_itl_p99_s"))
    batches, seqs, rates = _sizes(phase, fields)
    job = {k: fields[k] for k in fixed if fields.get(k) is not None and k not in JOB_AXES}
    output_lens = listed(fields.get("output_len"), "output_len", []) if phase in AXIS_PHASES else []
    if len(output_lens) == 1:  # one length: a fixed option of every job; several: an axis
        job["output_len"] = output_lens.pop()
    serving_axes = {name: listed(fields.get(name), name, []) if phase == "serve" else [] for name in SERVING_AXES}
    for name in FLOAT_AXES:  # as the lengths (instances: a column where given, as ever)
        if len(serving_axes[name]) == 1:
            job[name] = serving_axes[name].pop()
    training_axes = {name: listed(fields.get(name), name, []) if phase == "train-run" else []
                     for name in TRAINING_AXES}
    for name, values in training_axes.items():  # one value: every run's option; several: an axis
        if len(values) == 1:
            job[name] = values.pop()
    grids = [grid_at(name, fields.get("carbon_intensity"), fields.get("pue"), fields.get("carbon_series"))
             for name in listed(fields.get("grid"), "grid", [None])]
    gpus, models = listed(gpu, "gpu", []), listed(model, "model", [])
    require(gpus, "gpu", "required: a GPU's name or a list of them (joulecast gpus)")
    require(models, "model", "required: a model's name or a list of them (joulecast models)")
    resolved = {name: resolve_model(name) for name in models}  # an unknown name before any estimate
    for config, _, _ in resolved.values():  # or a config that cannot run the phase
        if phase in JOB_PHASES:
            check_model_job(config, phase)
    # each model and GPU by its catalog name, as an estimate names them, so that two spellings of one ("h100",
    # "NVIDIA H100 80GB HBM3") are one, as a name given twice is; a config file keeps its path
    models = list(dict.fromkeys(named if source == "catalog" else name
                                for name, (_, named, source) in resolved.items()))
    gpus = list(dict.fromkeys(lookup_gpu(g).name for g in gpus))
    dtypes = list(dict.fromkeys(dtype_name(d) for d in listed(fields.get("dtype"), "dtype", ["bf16"])))
    configs, skipped = grid(models, phase, gpus=gpus, batches=batches, seqs=seqs, dtypes=dtypes,
                            sm_clocks=listed(fields.get("sm_clock_mhz"), "sm_clock_mhz", [None]),
                            power_limits=listed(fields.get("power_limit_w"), "power_limit_w", [None]),
                            host_dispatch_s=fields.get("host_dispatch_s"), tps=listed(fields.get("tp"), "tp", []),
                            output_lens=output_lens, request_rates=rates, serving_axes=serving_axes,
                            training_axes=training_axes)
    if max_points is not None and len(configs) * len(grids) > max_points:  # a caller's bound (the service's)
        raise InputError("sweep", f"{len(configs) * len(grids):,} points; at most {max_points:,} here (narrow the "
                                  "lists, or run joulecast sweep)")
    if not len(configs):
        reasons = "; ".join(f"{n:,} left out: {k}" for k, n in skipped.items())
        raise InputError("sweep", f"no configuration left ({reasons})")
    _refuse_what_no_model_takes(models, phase, fields, job, batches, seqs, dtypes)
    result = sweep(configs, objective=fields.get("objective", "energy"), front=fields.get("front", "auto"),
                   max_time_s=fields.get("max_time_s"), min_tokens_per_s=fields.get("min_tokens_per_s"),
                   max_power_w=fields.get("max_power_w"), max_wait_s=fields.get("max_wait_s"),
                   max_ttft_s=fields.get("max_ttft_s"), max_ttft_p99_s=fields.get("max_ttft_p99_s"),
                   max_itl_p99_s=fields.get("max_itl_p99_s"), estimator=estimator,
                   skipped=skipped, run=run, progress=progress, job=job, grids=grids)
    return result if trace is None else dataclasses.replace(result, trace=trace.to_dict())


def _trace_fields(fields: Mapping[str, Any]) -> tuple[RequestTrace, dict[str, Any]]:
    """A serving sweep's `requests` (a `RequestTrace`, or rows as a requests JSON file holds them) as the fields its
    load sets (`RequestTrace.serving`): its mean lengths to the whole token (a sweep's lengths are whole), their
    spread, and its arrival rate where neither concurrency nor request_rate is given; a length given beside it is
    one line naming it."""
    requests = fields["requests"]
    trace = requests if isinstance(requests, RequestTrace) else requests_from_rows(requests)
    refuse_lengths(fields)
    refuse_windows(fields)
    load = trace.serving(concurrency=fields.get("concurrency"), request_rate=fields.get("request_rate"),
                         window_s=fields.get("window_s"))
    whole = trace.load()
    out = {k: v for k, v in fields.items() if k not in ("requests", "concurrency", "request_rate")}
    out.update({k: fields[k] for k in ("concurrency", "request_rate") if fields.get(k) is not None},
               input_len=max(1, round(whole["input_len"])), output_len=max(1, round(whole["output_len"])))
    if "window_rates" in load:  # its load window by window (`_window_fields`), each window at its own lengths (the
        # points' seq and output_len the file's means)
        out.update({k: load[k] for k in ("window_rates", "last_window_s", "window_lengths")})
        return trace, out
    out.update(input_len_cv=load["input_len_cv"], output_len_cv=load["output_len_cv"])
    if "concurrency" not in out and "request_rate" not in out:  # the requests' own rate
        out["request_rate"] = load["request_rate"]
    return trace, out


def _window_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A serving sweep's load window by window (`serve`'s window_rates and window_s, checked as it checks them),
    every point at it: the grid's request rate its mean, for the points' columns and the front."""
    from joulecast.estimator.serve_windows import check_windows

    rates, seconds = check_windows(fields.get("window_rates"), fields.get("window_s"), fields.get("last_window_s"),
                                   fields.get("concurrency"), fields.get("request_rate"))
    return {**fields, "window_rates": rates, "request_rate": float(np.dot(rates, seconds) / seconds.sum())}


def on_grids(points: pd.DataFrame, grids: Sequence[Grid], seconds: np.ndarray | None,
             intensities: Sequence[Any] = ()) -> pd.DataFrame:
    """`points` once on each grid (in the grids' order, then the points'), with the grid, its intensity and PUE, and
    the carbon of each energy figure: the whole point's (`carbon_g`, its interval's `carbon_lo_g` and
    `carbon_hi_g`) and a token's; on an hourly series over each point's `seconds` (none, a serving step's: around
    the clock), or at each point's intensity where `intensities` gives the grid's (a column: a load window by
    window, its windows' energy at their hours)."""
    given = list(intensities) + [None] * (len(grids) - len(intensities))
    parts = [with_carbon(points, where, seconds, None if at is None else at.to_numpy())
             for where, at in zip(grids, given)]  # a loop over the few grids
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
