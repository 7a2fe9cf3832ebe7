"""`joulecast` command line: a thin shell over the Python API. Each subcommand parses, calls one function, renders."""

from __future__ import annotations

import argparse
import difflib
import logging
import math
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from joulecast.data import engines
from joulecast.data.errors import InputError, JoulecastError, field_renamed
from joulecast.data.files import (
    check_output_file,
    check_output_folder,
    check_replaceable_folder,
    table_format,
    write_table,
)
from joulecast.data.fusions import FUSIONS

if TYPE_CHECKING:
    import pandas as pd

    from joulecast.data.collect.collector import CollectResult
    from joulecast.data.collect.plan import Plan

# What each optional extra brings (pyproject.toml): a command that needs one says which, instead of a traceback.
EXTRAS = {"train": ("xgboost", "sklearn", "mlflow", "matplotlib", "pyarrow"), "collect": ("torch", "pynvml", "pyarrow"),
          "parquet": ("pyarrow",), "serve": ("fastapi", "uvicorn"), "dask": ("dask", "distributed")}


def require_extra(extra: str, command: str) -> None:
    """Raise one clear line, exit 2, when a module of `extra` is missing (checked without importing it)."""
    import importlib.util

    missing = [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        name = "train" if extra == "parquet" else extra
        raise JoulecastError(f"{command} needs {', '.join(missing)}: pip install 'joulecast[{name}]'")


def _check_table_file(path: str, command: str) -> None:
    """A points file `command` will write (`data.files.write_table`), checked before any work: a .csv or .parquet
    name, pyarrow installed for Parquet, a place it may be written."""
    if table_format(path, "--out") == "parquet":
        require_extra("parquet", f"{command} (Parquet; a .csv name needs nothing more)")
    check_output_file(path, "--out")


def _estimate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import joulecast
    from joulecast import render
    from joulecast.data.models import load_config
    from joulecast.data.workload import check_host_dispatch

    sources = [flag for flag in ("model", "config", "kernels") if getattr(args, flag)]
    if len(sources) != 1:
        raise joulecast.InputError(f"--{sources[-1] if sources else 'model'}",
                                   "give one of --model NAME, --config PATH or --kernels FILE.json")
    if args.config:  # read here for its errors to name --config; the API reads the path again, as a model
        load_config(args.config)
    for flag, what in (("gpu", "GPU"), ("dtype", "dtype")):  # a list is a sweep's
        if "," in (getattr(args, flag) or ""):
            raise joulecast.InputError(f"--{flag}", f"one {what} an estimate, got {getattr(args, flag)!r}"
                                                    f"{_SWEEP_HINT}")
    if args.fusions is not None and args.phase in ("generate", "serve"):
        raise joulecast.InputError("--fusions", "applies to single passes and --phase train-run, not to "
                                                f"--phase {args.phase}")
    dispatch = check_host_dispatch(args.host_dispatch_us, "--host-dispatch-us", "us")
    where = _grid(args, args.grid)
    # a job phase's flag given to another phase (or to a single pass) is one line naming where it applies
    own = JOB_FLAGS.get(args.phase, ())
    for flag in dict.fromkeys(f for flags in JOB_FLAGS.values() for f in flags):
        if flag not in own and getattr(args, flag) not in (None, False):
            phases = ", ".join(p for p, flags in JOB_FLAGS.items() if flag in flags)
            given = f"--{flag.replace('_', '-')}"  # and the flag of this phase it may stand for (--tokens: serve's
            meant = _flags_meant(given, [f"--{f.replace('_', '-')}" for f in own])  # --output-tokens)
            raise joulecast.InputError(given, f"applies to --phase {phases} only" + (
                f"; --phase {args.phase} takes {' or '.join(meant)}" if meant else ""))
    _check_tracking_uri(args)
    if args.phase in JOB_FLAGS:
        if args.tracking_uri:  # a job's steps load the estimator by name: from the store named, not the process's
            from joulecast.estimator.loading import load_estimator

            args.estimator = load_estimator(args.estimator, args.tracking_uri)
        return {"generate": _generate, "train-run": _train_run, "serve": _serve_job}[args.phase](args, dispatch,
                                                                                                 where)
    if args.kernels:
        unused = [flag for flag in WORKLOAD_FLAGS if getattr(args, flag) is not None]
        if unused:  # a kernel list fixes its own shapes, dtypes and launches
            raise joulecast.InputError(f"--{unused[0].replace('_', '-')}", "has no effect with --kernels (the kernel "
                                                                          "list sets the work); leave it out")
        workload = replace(joulecast.workload_from_kernels(args.kernels), host_dispatch_s=dispatch)
    else:
        given = {flag: getattr(args, flag) for flag in WORKLOAD_FLAGS if getattr(args, flag) is not None}
        _refuse_flags_without_effect(args, [args.config or args.model])
        try:  # the flags not given take workload()'s defaults
            workload = joulecast.workload(args.config or args.model, host_dispatch_s=dispatch, **given)
        except InputError as exc:  # the API's phases are a pass's; --phase takes the jobs the model runs too
            if exc.field != "phase":
                raise
            jobs = _jobs_of(args.model) if args.model else []  # a job needs a catalog model (`_job_options`)
            raise InputError("--phase", exc.message + (f"; or a whole job: {', '.join(jobs)}" if jobs else "")) \
                from None
        if args.fusions is not None:
            _refuse_fusions_without_effect(workload, dict(model=args.config or args.model, host_dispatch_s=dispatch,
                                                          **given))
    est = joulecast.estimate(workload, args.gpu, sm_clock_mhz=args.sm_clock, power_limit_w=args.power_limit,
                             estimator=args.estimator, tracking_uri=args.tracking_uri)
    _show(est, render.estimate_table, args, where)
    return 0


def _grid(args: argparse.Namespace, name: str | None) -> Any:
    """Where an estimate's energy is drawn (`joulecast.data.carbon.grid_at`): `name` (a --grid), --carbon-intensity
    or --carbon-series, at --pue."""
    from joulecast.data.carbon import grid_at

    return grid_at(name, args.carbon_intensity, args.pue, _carbon_series(args))


def _carbon_series(args: argparse.Namespace) -> tuple[float, ...] | None:
    """--carbon-series's file read, held to the bounds the API's series has (`data.job_file`), naming the file."""
    from joulecast.data.job_file import read_carbon_series

    return None if args.carbon_series is None else read_carbon_series(args.carbon_series, "--carbon-series")


def _show(record: Any, table: Any, args: argparse.Namespace, where: Any, trace: Any = None) -> None:
    """An estimate as --json or its `table`, with the carbon of its energy at `where` (`joulecast.data.carbon`), and
    the requests file it was read from (`trace`, a `data.requests.RequestTrace`) where there is one."""
    from joulecast import render
    from joulecast.data.carbon import carbon

    figures = carbon(record, where)
    if args.json:
        print(render.to_json({**record.to_dict(), **figures,
                              **({"trace": trace.to_dict()} if trace is not None else {})}))
        return
    text = render.with_line(table(record), render.carbon_line(figures))
    print(text if trace is None else render.with_line(text, render.trace_line(args.requests, trace)))


def _jobs_of(model: str) -> list[str]:
    """The whole jobs (--phase generate, serve, train-run) a model runs (`features.lowering.check_job`)."""
    from joulecast.features.lowering import check_job, resolve_model

    config = resolve_model(model)[0]
    runs = []
    for job in JOB_FLAGS:
        try:
            check_job(config, job)
        except InputError:
            continue
        runs.append(job)
    return runs


def _job_options(args: argparse.Namespace, phase: str, *, needs: tuple[str, ...], needs_why: str,
                 refuses: tuple[str, ...], instead: str, optional: tuple[str, ...],
                 one_of: tuple[str, str] | None = None) -> dict:
    """The checks of a job phase's flags (a catalog --model, no flag it ignores, every flag it needs, exactly one of
    `one_of`), then its optional flags that were given."""
    import joulecast

    if args.kernels:  # the one source given (`_estimate`): a kernel list is one pass's
        raise joulecast.InputError("--kernels", f"--phase {phase} needs --model NAME or --config PATH (a kernel "
                                                "list is one pass's work)")
    args.model = args.model or args.config  # a job's steps lower the config as a model (its path names it)
    from joulecast.features.lowering import check_job, resolve_model

    # the model before the flags: a ResNet's train-run is refused as such, not for a --seq it cannot take
    check_job(resolve_model(args.model)[0], phase, field="--phase")
    for flag in refuses:
        if getattr(args, flag) not in (None, False):
            raise joulecast.InputError(f"--{flag.replace('_', '-')}", f"has no effect with --phase {phase} "
                                                                      f"(give {instead})")
    for flag in needs:
        if getattr(args, flag) is None:
            raise joulecast.InputError(f"--{flag.replace('_', '-')}", f"--phase {phase} needs it{needs_why}")
    _refuse_unqualified(args)
    if one_of is not None:  # the API names its fields (`concurrency`); here the flags, and which way it failed
        first, second = (f"--{flag.replace('_', '-')}" for flag in one_of)
        given = [getattr(args, flag) is not None for flag in one_of]
        if given[0] == given[1]:
            raise joulecast.InputError(first, f"--phase {phase} needs {first} or {second}, one of them; got "
                                              f"{'both' if given[0] else 'neither'}")
    return {flag: getattr(args, flag) for flag in optional if getattr(args, flag) is not None}


def _generate(args: argparse.Namespace, host_dispatch_s: float | None, where: Any) -> int:
    from joulecast import render
    from joulecast.data.requests import read_requests
    from joulecast.estimator.jobs import generate, generate_requests

    batch = 1 if args.batch is None else args.batch  # not `or 1`: --batch 0 is refused, not read as 1
    if args.requests:  # a list of requests in static batches of --batch
        given = _job_options(args, "generate", needs=(), needs_why="", refuses=("seq", "input_len", "output_len"),
                             instead="--requests alone: each request its own lengths",
                             optional=("dtype", "attention", "launch_mode", "engine", "offload_gb", "h2d_gbps",
                                       "tp", "expert_parallel"))
        trace = read_requests(args.requests)
        job = generate_requests(args.model, args.gpu, trace.pairs(), batch=batch,
                                kv_cache=not args.no_kv_cache, sm_clock_mhz=args.sm_clock,
                                power_limit_w=args.power_limit, host_dispatch_s=host_dispatch_s,
                                estimator=args.estimator, **given)
        _show(job, render.requests_table, args, where, trace)
        return 0
    given = _job_options(args, "generate", needs=("input_len", "output_len"), needs_why=" (tokens per sequence)",
                         refuses=("seq",), instead="--input-len and --output-len",
                         optional=("dtype", "attention", "launch_mode", "engine", "offload_gb", "h2d_gbps", "tp",
                                   "expert_parallel"))
    job = generate(args.model, args.gpu, batch=batch, input_len=args.input_len, output_len=args.output_len,
                   kv_cache=not args.no_kv_cache, sm_clock_mhz=args.sm_clock, power_limit_w=args.power_limit,
                   host_dispatch_s=host_dispatch_s, estimator=args.estimator, **given)
    _show(job, render.generation_table, args, where)
    return 0


def _serve_job(args: argparse.Namespace, host_dispatch_s: float | None, where: Any) -> int:
    from joulecast import render
    from joulecast.data.requests import LENGTH_FIELDS as lengths
    from joulecast.data.requests import read_requests
    from joulecast.estimator.serving import serve

    trace = None
    for flag, needs in WINDOW_SWITCHES:
        if getattr(args, flag) and args.window is None:
            raise InputError(f"--{flag}", needs)
    _refuse_without_autoscale(vars(args))
    if args.report is not None:
        if args.window is None:
            raise InputError("--report", "applies to --window (the load's windows over time, charted)")
        check_output_folder(args.report, "--report")
    if args.out is not None:
        if args.window is None:
            raise InputError("--out", "applies to --window (a row a window)")
        _check_table_file(args.out, "estimate --out")
    if args.requests:  # a trace's load: its mean lengths and their spread, its arrival rate unless a load is given
        given = _job_options(args, "serve", needs=(), needs_why="",
                             refuses=("batch", "seq", "attention", "no_kv_cache", *lengths),
                             instead="--requests alone: its lengths are the file's",
                             optional=("dtype", "launch_mode", "max_batch", "tp", "instances", "chunk_tokens",
                                       "sampling", "expert_parallel", "autoscale", *AUTOSCALE_OPTIONS, "queue"))
        trace = read_requests(args.requests)
        if args.concurrency is not None and args.request_rate is not None:
            raise InputError("--concurrency", "give --concurrency or --request-rate, not both")
        given.update(trace.serving(concurrency=args.concurrency, request_rate=args.request_rate,
                                   duration_s=args.duration, output_tokens=args.output_tokens,
                                   window_s=args.window, rate_field="--request-rate"))
    else:
        if args.window is not None:
            raise InputError("--window", WINDOW_NEEDS_REQUESTS)
        given = _job_options(args, "serve", needs=("input_len", "output_len"), needs_why=" (mean tokens a request)",
                             refuses=("batch", "seq", "attention", "no_kv_cache"),
                             instead="--concurrency or --request-rate",
                             optional=("dtype", "launch_mode", "max_batch", "tp", "instances", "chunk_tokens",
                                       *lengths, "sampling", "expert_parallel"),
                             one_of=("concurrency", "request_rate"))
        given.update(concurrency=args.concurrency, request_rate=args.request_rate, duration_s=args.duration,
                     output_tokens=args.output_tokens)
    # a rate the file set is the file's to name (its arrivals beyond what the GPU serves), not a flag's
    by_file = trace is not None and args.request_rate is None and args.concurrency is None
    settings = dict(engine=args.engine or "none", sm_clock_mhz=args.sm_clock, power_limit_w=args.power_limit,
                    host_dispatch_s=host_dispatch_s, estimator=args.estimator)
    with field_renamed({"request_rate": "--requests", "window_rates": "--requests", "window_lengths": "--requests"}
                       if by_file else {}):
        job = serve(args.model, args.gpu, **settings, **given)
    _show(job, lambda j: render.serve_table(j, None if trace is None else trace.origin_s), args, where, trace)
    if args.report is not None or args.out is not None:
        _window_files(args, job, trace, where)
    # served at its mean: say where its busiest hour is past what serves it
    if by_file and trace.peak_hour_rate and job.windows is None:
        from joulecast.estimator.serving import BeyondCapacityError

        try:
            serve(args.model, args.gpu, **settings, **{**given, "request_rate": trace.peak_hour_rate,
                                                       "duration_s": None, "output_tokens": None})
        except BeyondCapacityError as exc:
            print(f"joulecast: note: at the mean rate; its busiest hour, {exc.message}; --window 1h prices each "
                  "hour at its own rate", file=sys.stderr)
    return 0


def _window_files(args: argparse.Namespace, job: Any, trace: Any, where: Any) -> None:
    """A load served window by window (`job.windows`, from the requests file `trace`) as --report's page and --out's
    table (a row a window: its start, a UTC time too where the file has dates, its figures and carbon at `where`)."""
    import pandas as pd

    from joulecast import render, serve_report
    from joulecast.data.carbon import carbon
    from joulecast.data.requests import utc_text

    figures = carbon(job, where)
    said = sys.stderr if args.json else sys.stdout
    if args.report is not None:
        path = serve_report.write(job, figures, render.trace_line(args.requests, trace), args.report, trace.origin_s)
        print(f"wrote {path}", file=said)
    if args.out is not None:
        columns = {k: v for k, v in job.windows.to_dict().items() if k != "window_s"}
        if trace.origin_s is not None:
            columns = {"start_utc": [utc_text(trace.origin_s + t) for t in columns["start_s"]], **columns}
        write_table(pd.DataFrame({**columns, "carbon_g": figures["window_carbon_g"]}), args.out, "--out")
        print(f"wrote {args.out}", file=said)


def _train_run(args: argparse.Namespace, host_dispatch_s: float | None, where: Any) -> int:
    from joulecast import render
    from joulecast.estimator.train_run import train_run
    from joulecast.features.lowering import is_vision, resolve_model

    # a vision model's run is over images: no --seq to need (train_run refuses one, and a text model's options)
    images = not args.kernels and is_vision(resolve_model(args.model or args.config)[0])
    given = _job_options(args, "train-run", needs=("global_batch",) if images else ("seq", "global_batch"),
                         needs_why="",
                         refuses=("batch", "engine", "input_len", "output_len"),
                         instead="--global-batch and --micro-batch",
                         optional=("dtype", "attention", "lora_targets", "recompute", "optimizer", "launch_mode",
                                   "head_tokens", "head_outputs", "fusions", "forward_overhead_s", "loader_rate",
                                   "eval_tokens", "evals"),
                         one_of=("steps", "tokens"))
    if "fusions" in given:  # judged on one training pass of the run's shape, as for a single pass
        import joulecast

        micro = args.micro_batch if isinstance(args.micro_batch, int) else None  # "auto": judged on the global
        fields = dict(model=args.model, phase="training", batch=micro or args.global_batch, seq=args.seq,
                      fusions=given["fusions"], **{k: given[k] for k in ("dtype", "attention") if k in given})
        _refuse_fusions_without_effect(joulecast.workload(**fields), fields)
    job = train_run(args.model, args.gpu, seq=args.seq, global_batch=args.global_batch, micro_batch=args.micro_batch,
                    steps=args.steps, tokens=args.tokens, lora_rank=args.lora_rank or 0, sm_clock_mhz=args.sm_clock,
                    power_limit_w=args.power_limit, host_dispatch_s=host_dispatch_s, estimator=args.estimator,
                    **given)
    _show(job, render.train_run_table, args, where)
    return 0


def _check_tracking_uri(args: argparse.Namespace) -> None:
    """--tracking-uri (of estimate and serve) names the store a models:/ or runs:/ estimator comes from; with any
    other estimator it would be ignored."""
    if args.tracking_uri is not None and not str(args.estimator or "").startswith(("models:/", "runs:/")):
        raise InputError("--tracking-uri", "applies to a models:/ or runs:/ --estimator (a folder, 'physics' or the "
                                           "shipped model reads no MLflow store); leave it out")


# `plan`'s flags that set its sweep, each with what holds without one.
_PLAN_SWEEP_ONLY = {
    "H": "a strategy's own is the job file's strategies[].H", "P": "the job file's strategies[].P",
    "tau": "the job file's strategies[].tau", "bits": "the job file's strategies[].bits",
    "gbps": "the job file's links[].gbps", "site_sets": "a plan runs on every site of the job file",
    "power_limit": "a site's own limit is the job file's sites[].power_limit_w",
    "out": "the sweep's points as CSV or Parquet", "scheduler": "a plan's strategies are one quick evaluation",
    "workers": "a local cluster's, for --scheduler local"}


def _plan(args: argparse.Namespace) -> int:
    from joulecast import render
    from joulecast.data.executors import check_executor
    from joulecast.data.job_file import load_job
    from joulecast.estimator.plan import SWEEP_AXES, plan, sweep

    for flag, why in _PLAN_SWEEP_ONLY.items():  # before, all but three were taken and ignored without --sweep
        if getattr(args, flag) is not None and not args.sweep:
            raise InputError(f"--{flag.replace('_', '-')}", f"applies to --sweep ({why})")
    if args.sweep:
        check_executor(args.scheduler, args.workers)
    job = load_job(args.job)
    if args.report:
        check_output_folder(args.report, "--report")
    if args.out:
        _check_table_file(args.out, "plan --out")
    result = plan(job, estimator=args.estimator)
    out = result.to_dict()
    files = []
    if args.sweep:
        from tqdm.auto import tqdm

        from joulecast.data.executors import executor

        with executor(args.scheduler, args.workers) as run, tqdm(unit="part", desc=f"plan sweep on {run.name}",
                                                                  disable=True if args.json else None) as bar:
            axes = {a: _listed(getattr(args, a), int, f"--{a}", []) for a in SWEEP_AXES}  # none given: the API's
            points = sweep(job, **{a: values for a, values in axes.items() if values},
                           gbps=_listed(args.gbps, float, "--gbps", []) or None,
                           site_sets=[s.split("+") for s in args.site_sets.split(",")] if args.site_sets else None,
                           power_limits=_listed(args.power_limit, float, "--power-limit", [], spans=True) or None,
                           front=args.front, estimator=args.estimator, run=run, progress=bar.update)
        out["sweep"] = {"points": len(points), "front": args.front, "skipped": points.attrs.get("skipped", {}),
                        "pareto": points[points["pareto"]].sort_values("time_s").to_dict(orient="records")}
        if args.out:
            write_table(points, args.out, "--out")
            files.append(args.out)
    if args.report:
        from joulecast import plan_report
        files.append(str(plan_report.write(result, points if args.sweep else None, args.report, args.front)))
    if files:
        out["files"] = files
    if args.json:
        print(render.to_json(out))
        return 0
    table = render.plan_table(result)
    if args.sweep:  # the sweep's front in the terminal too, not only in --report and --out
        table += "\n\n" + render.plan_sweep_table(points, args.front)
    print(table + "".join(f"\nwrote {f}" for f in files))  # as sweep names its files
    return 0


def _listed(value: str | None, kind: type, flag: str, default: list, spans: bool = False) -> list:
    """A comma-separated list of `kind` values (a flag of `sweep`), or `default` where not given; where `spans`, an
    item "range" or "range:N" as it is, for the sweep to spread over each GPU's span (`estimator.sweep.grid`)."""
    if value is None:
        return default
    out, parse = [], _whole if kind is int else kind
    for item in value.split(","):
        if spans and item.strip().lower().startswith("range"):
            out.append(item.strip())
            continue
        try:
            out.append(parse(item.strip()))
        except (ValueError, argparse.ArgumentTypeError):
            what = {int: "an integer", _whole_or_auto: "an integer or auto", _share: "a share (0.25, or 25%)",
                    _seconds: "a time (90, 90s, 2min)"}.get(kind, "a number")
            raise JoulecastError(f"{flag}: {item.strip()!r} is not {what}; give a comma-separated list") from None
    return out


# Where a job sweep's flag of another phase (or the single-pass one) has its counterpart.
_SWEEP_INSTEAD = {"train-run": {"batch": "--micro-batch", "input_len": "--seq"},
                  "generate": {"seq": "--input-len", "micro_batch": "--batch"},
                  "serve": {"batch": "--concurrency", "seq": "--input-len"}}


# A job's flag that only qualifies another: given without it, it would change nothing. Flag -> (the flag, what it sets).
_QUALIFIES = {"h2d_gbps": ("offload_gb", "the rate the weights held in host memory are copied at"),
              "lora_targets": ("lora_rank", "the layers LoRA adapters train; full fine-tuning trains every weight")}


def _refuse_unqualified(args: argparse.Namespace) -> None:
    """`_QUALIFIES`' flags given without the flag they qualify: one line naming both."""
    for flag, (needs, sets) in _QUALIFIES.items():
        if getattr(args, flag, None) is not None and not getattr(args, needs, None):
            raise InputError(f"--{flag.replace('_', '-')}", f"has no effect without --{needs.replace('_', '-')} "
                                                            f"({sets}); leave it out or give both")


def _refuse_fusions_without_effect(workload: Any, fields: dict[str, Any]) -> None:
    """--fusions none of which changes the pass's kernels (`features.lowering.ignored_fusions`: GPT-2 has no rotary
    embedding, and its LayerNorm is one kernel already): one line, not a workload labelled fused that is not."""
    from joulecast.features.lowering import ignored_fusions

    message = ignored_fusions(workload, **fields)
    if message:
        raise InputError("--fusions", message)


def _refuse_flags_without_effect(args: argparse.Namespace, models: list[str]) -> None:
    """A single pass's flag given where every model ignores it (`features.lowering.ignored_field`): one line."""
    from joulecast.features.lowering import ignored_field

    given = {flag for flag in WORKLOAD_FLAGS if getattr(args, flag, None) is not None}
    ignored = ignored_field(models, given)
    if ignored:
        raise InputError(f"--{ignored[0].replace('_', '-')}", ignored[1].replace("{batch}", "--batch"))


def _sweep_axes(args: argparse.Namespace) -> tuple[list[int], list[int], dict, Any]:
    """(batch axis, sequence axis, the job's fixed options, the requests file read or None) of a sweep: for a
    training run its micro-batches and sequence lengths, for a generation its batch sizes and prompt lengths, for
    serving its requests in flight and mean prompt lengths (`estimator.sweep.SIZES`; the fixed options
    `JOB_OPTIONS`, --no-kv-cache for `kv_cache`), or a requests file's load (`_trace_load`); a flag its phase does
    not take is one line naming it."""
    from joulecast.estimator.sweep import JOB_OPTIONS, PASS_OPTIONS, SIZES

    flags_of = {p: tuple("no_kv_cache" if o == "kv_cache" else o for o in options)
                for p, options in JOB_OPTIONS.items()}
    # a file's windows: --window (the API's window_s) beside --requests, which sets the rest
    flags_of["serve"] = tuple(f for f in flags_of["serve"]
                              if f not in ("window_rates", "window_s", "last_window_s", "window_lengths"))
    flags_of["serve"] += ("request_rate", "requests", "window")  # in place of --concurrency (RATE_SIZES)
    phase = args.phase
    axes = SIZES.get(phase, ("batch", "seq"))
    flags_of.setdefault(phase, PASS_OPTIONS)  # a single pass: the settings estimate takes for one
    allowed = {*axes, *flags_of[phase]}
    job_flags = sorted({f for flags in flags_of.values() for f in flags})
    for flag in ("batch", "seq", *sorted({a for pair in SIZES.values() for a in pair} - {"batch", "seq"}), *job_flags):
        if getattr(args, flag) in (None, False) or flag in allowed:
            continue
        name = f"--{flag.replace('_', '-')}"
        if phase not in SIZES and flag not in ("batch", "seq"):
            takes = [p for p in SIZES if flag in flags_of[p] or flag in SIZES[p]]
            raise InputError(name, f"applies to --phase {', '.join(takes or SIZES)} only")
        instead = _SWEEP_INSTEAD.get(phase, {}).get(flag)
        raise InputError(name, f"has no effect with --phase {phase}" + (f" (give {instead})" if instead else ""))
    _refuse_unqualified(args)
    sizes = [_listed(getattr(args, a), _whole_or_auto if a == "micro_batch" else int, f"--{a.replace('_', '-')}", [])
             for a in axes]
    job = {f: getattr(args, f) for f in flags_of.get(phase, ()) if getattr(args, f) not in (None, False)}
    if phase == "train-run":
        if args.global_batch is None:
            raise InputError("--global-batch", "--phase train-run needs it (sequences an optimizer step)")
        if (args.steps is None) == (args.tokens is None):  # as estimate says it, by the flags
            raise InputError("--steps", "--phase train-run needs --steps or --tokens, one of them; got "
                                        f"{'neither' if args.steps is None else 'both'}")
        return sizes[0] or [args.global_batch], sizes[1], job, None  # no --seq: the API's 512 (images take none)
    trace = _trace_load(args) if job.pop("requests", None) else None
    if "window" in job:  # the file's load window by window
        if trace is None:
            raise InputError("--window", WINDOW_NEEDS_REQUESTS)
        job["window_s"] = job.pop("window")
    else:
        for flag, needs in WINDOW_SWITCHES:
            if job.get(flag):
                raise InputError(f"--{flag}", needs)
    _refuse_without_autoscale(job)
    if phase in ("generate", "serve"):
        for flag, given in (("--input-len", sizes[1]), ("--output-len", args.output_len)):
            if not given and trace is None:  # a file's requests give their own
                raise InputError(flag, f"--phase {phase} needs it (tokens per sequence)")
        if phase == "serve":
            rates = _listed(args.request_rate, float, "--request-rate", [])
            if sizes[0] and rates:
                raise InputError("--request-rate", "give --concurrency or --request-rate, not both")
            if not (sizes[0] or rates or trace):
                raise InputError("--concurrency", "--phase serve needs it (requests kept in flight) or "
                                                  "--request-rate (requests a second)")
            if rates:  # the load by its arrivals (estimator.sweep.RATE_SIZES)
                job["request_rate"] = rates
            return sizes[0], sizes[1], job, trace
        job["kv_cache"] = not job.pop("no_kv_cache", False)
        return sizes[0] or [1], sizes[1], job, None
    return sizes[0] or [1], sizes[1], job, None  # no --seq: the API's default (an image model takes none)


def _refuse_without_autoscale(given: Mapping[str, Any]) -> None:
    """One line naming the first of an autoscaled load's options (`AUTOSCALE_OPTIONS`) given without --autoscale."""
    flag = next((f for f in AUTOSCALE_OPTIONS if given.get(f) is not None), None)
    if flag is not None and not given.get("autoscale"):
        raise InputError(f"--{flag.removesuffix('_s').replace('_', '-')}", "applies to --autoscale (the instances "
                                                                           "a window does not need)")


def _trace_load(args: argparse.Namespace) -> Any:
    """A serving sweep's --requests file read (`data.requests.read_requests`), for its load (`run_sweep`'s
    `requests`); a length flag beside it is one line naming the flag."""
    from joulecast.data.requests import LENGTH_FIELDS, read_requests

    for flag in LENGTH_FIELDS:
        if getattr(args, flag) is not None:
            raise InputError(f"--{flag.replace('_', '-')}", "has no effect with --requests (its lengths are the "
                                                            "file's)")
    return read_requests(args.requests)


def _sweep(args: argparse.Namespace) -> int:
    from joulecast import render, sweep_report
    from joulecast.data.workload import check_host_dispatch
    from joulecast.estimator.sweep import SIZES, check_options, run_sweep

    check_options(args.objective, args.front, args.max_time, args.min_tokens_per_s, args.max_power, args.max_wait,
                  args.max_ttft, args.max_ttft_p99, args.max_itl_p99)
    batches, seqs, job, trace = _sweep_axes(args)  # each flag checked as the CLI names it, before the API sees it
    if args.phase not in SIZES:  # a single pass's flags: a text model among the models takes them
        _refuse_flags_without_effect(args, _listed(args.model, str, "--model", []))
    axes = {"tp": _listed(job.pop("tp", None), _whole_or_auto, "--tp", []) or None,
            "output_len": _listed(job.pop("output_len", None), int, "--output-len", []) or None,
            "instances": _listed(job.pop("instances", None), int, "--instances", []) or None,
            "headroom": _listed(job.pop("headroom", None), _share, "--headroom", []) or None,
            "lora_rank": _listed(job.pop("lora_rank", None), int, "--lora-rank", []) or None,
            "recompute": _listed(job.pop("recompute", None), str, "--recompute", []) or None,
            **{dest: _listed(job.pop(dest, None), _seconds, flag, []) or None for flag, dest, _ in _AUTOSCALE_TIMES
               if dest in SWEPT_TIMES}}
    sizes = {name: values for name, values in zip(SIZES.get(args.phase, ("batch", "seq")), (batches, seqs))
             if values}  # a serving load by its request rate has no concurrency
    fields = dict(sizes, **job, **{k: v for k, v in axes.items() if v is not None},
                  **({"requests": trace} if trace is not None else {}),
                  dtype=_listed(args.dtype, str, "--dtype", ["bf16"]),
                  sm_clock_mhz=_listed(args.sm_clock, float, "--sm-clock", [None], spans=True),
                  power_limit_w=_listed(args.power_limit, float, "--power-limit", [None], spans=True),
                  host_dispatch_s=check_host_dispatch(args.host_dispatch_us, "--host-dispatch-us", "us"),
                  grid=_listed(args.grid, str, "--grid", []) or None, carbon_intensity=args.carbon_intensity,
                  pue=args.pue, objective=args.objective, front=args.front, max_time_s=args.max_time,
                  min_tokens_per_s=args.min_tokens_per_s, max_power_w=args.max_power, max_wait_s=args.max_wait,
                  max_ttft_s=args.max_ttft, max_ttft_p99_s=args.max_ttft_p99, max_itl_p99_s=args.max_itl_p99,
                  carbon_series=_carbon_series(args))
    if args.out:
        _check_table_file(args.out, "sweep --out")
    if args.report:
        check_output_folder(args.report, "--report")
    from tqdm.auto import tqdm

    from joulecast.data.executors import executor

    # the bar on a terminal only (None: tqdm's own test), never under --json
    models = _listed(args.model, str, "--model", [])
    with executor(args.scheduler, args.workers) as run, tqdm(unit="part", desc=f"sweep on {run.name}",
                                                              disable=True if args.json else None,
                                                              dynamic_ncols=True) as bar:
        result = run_sweep(models, _listed(args.gpu, str, "--gpu", []), phase=args.phase, estimator=args.estimator,
                           run=run, progress=bar.update, **fields)
    files = []
    if args.out:
        write_table(result.points, args.out, "--out")
        files.append(args.out)
    if args.report:
        files.append(str(sweep_report.write(result, args.report,
                                            f"joulecast sweep: {', '.join(models)} {args.phase}")))
    best = result.best
    if args.json:
        render.write_json(render.sweep_payload(result, files), sys.stdout)
        return 0
    if trace is not None:
        print(render.trace_line(args.requests, trace))
    headings = sweep_report.headings(result)  # a token column's name in a sweep over images
    serving = ", serving their rate" if "request_rate" in result.points else ""  # a rate past capacity does not
    print(f"{sweep_report.counted(result.points)}, {int(result.points['feasible'].sum()):,} fitting in memory"
          f"{serving} and meeting the constraints ({sweep_report.constraints_text(result.constraints, result.unit)}), "
          f"{len(result.pareto)} on the Pareto front ({headings.get(result.axes[1], result.axes[1])} against "
          f"{headings.get(result.axes[0], result.axes[0])})"
          + "".join(f"; {n} left out: {k}" for k, n in result.skipped.items()))
    if len(result.pareto):  # an empty front is said below, not printed as pandas' 'Empty DataFrame'
        if args.phase == "serve":
            print(sweep_report.point_note(result) + ":")
        print(render.sweep_front(sweep_report.shown_table(result.pareto, result)))
    if best is not None:
        shown = sweep_report.columns(result)  # the model and TP where they vary, an image's seq never
        auto = bool(best.get("micro_batch_auto", False))  # the micro-batch auto chose
        sizes = " ".join(f"{c.replace('_', '-')} {render.figure(best[c])}" + (" (auto)" if c == "micro_batch" and auto
                                                                              else "")
                         for c in (*result.sizes, "output_len")
                         if c in best and c in shown)  # the output length where it is an axis; a rate of 4.0 as 4
        setting = "".join(f", {best[c]:.0f} {unit}" for c, unit in (("sm_clock_mhz", "MHz"), ("power_limit_w", "W"))
                          if best[c] == best[c])  # NaN: the GPU's default
        # a load by its request rate runs around the clock: its day's energy at the GPU's average power
        day = (f", {render.kwh_a_day(best['power_w'])} at {render.figure(best['power_w'])} W"
               if "request_rate" in best else "")
        def band(value: float) -> str:
            """The best point's 90 % energy interval around `value` (its energy, or a token's), where it has one."""
            lo, hi = (best.get(k, math.nan) * value / best["energy_j"] for k in ("energy_lo_j", "energy_hi_j"))
            return f" ({render.figure(lo)} - {render.figure(hi)})" if lo == lo and hi == hi else ""

        per_token = best["energy_per_token_j"]
        figures = (f"{render.figure(per_token)}{band(per_token)} J an output token at "
                   f"{render.figure(best['tokens_per_s'])} tokens/s, "
                   f"{render.duration(best['time_s'])} a token{day}" if args.phase == "serve"
                   else f"{render.figure(best['energy_j'])}{band(best['energy_j'])} J in "
                        f"{render.duration(best['time_s'])}" + (
                       f", {render.figure(best['energy_per_token_j'])} J and "
                       f"{render.duration(best['s_per_token'])} {render.article(result.unit)} {result.unit}"
                       + (" (the front's axes)" if result.cost == "energy" else "") if result.front == "token" else ""))
        tp = f", TP {best['tp']:.0f}" if "tp" in shown and best["tp"] == best["tp"] else ""
        tp += " (auto)" if tp and bool(best.get("tp_auto", False)) else ""
        tp += f", {best['instances']:.0f} instances" if "instances" in shown else ""
        # a training run's axes (a vision model's point has neither)
        tp += f", LoRA rank {best['lora_rank']:.0f}" if "lora_rank" in shown and best["lora_rank"] >= 0 else ""
        tp += f", recompute {best['recompute']}" if "recompute" in shown and isinstance(best["recompute"], str) else ""
        carbon = (f"{render.mass(1e6 * best['carbon_per_token_g'])} CO2e a million output tokens"
                  if args.phase == "serve" else f"{render.mass(best['carbon_g'])} CO2e")
        model = f"{best['model']} on " if "model" in shown else ""
        print(f"best by {result.objective}: {model}{best['gpu']} {sizes} {best['dtype']}{tp}{setting}, {figures}; "
              f"{carbon} {render.grid_place(best['grid'])}")
    else:
        print(render.unmet_text(result.points))
    for f in files:
        print(f"wrote {f}")
    return 0


# `estimate`'s workload flags: None in the parser, so that one given with --kernels is seen, and `workload` sets the
# defaults of those not given
WORKLOAD_FLAGS = ("phase", "batch", "seq", "dtype", "attention", "launch_mode", "engine", "fusions")
# --window without --requests (estimate's and sweep's)
WINDOW_NEEDS_REQUESTS = "applies to --requests (the file's arrival times set each window's rate)"
AUTOSCALE_NEEDS_WINDOW = "applies to --window (each window served by the fewest of --instances that serve it)"
QUEUE_NEEDS_WINDOW = "applies to --window (a window's arrivals past what it serves wait for the windows after it)"
WINDOW_SWITCHES = (("autoscale", AUTOSCALE_NEEDS_WINDOW), ("queue", QUEUE_NEEDS_WINDOW))  # each refused without it
# the API's names (the flags' dests); each needs --autoscale
AUTOSCALE_OPTIONS = ("spare", "cold_start_s", "headroom", "ttft_target_s", "ttft_p99_target_s", "itl_p99_target_s",
                     "reactive", "reaction_s", "scale_in_delay_s", "min_instances")
# The flags of the job phases, each an error with any other phase.
JOB_FLAGS = {"generate": ("input_len", "output_len", "no_kv_cache", "requests", "offload_gb", "h2d_gbps", "tp",
                          "expert_parallel"),
             "serve": ("input_len", "output_len", "requests", "concurrency", "request_rate", "max_batch", "tp",
                       "instances", "chunk_tokens", "duration", "output_tokens", "output_len_cv", "input_len_cv",
                       "sampling", "expert_parallel", "window", "autoscale", *AUTOSCALE_OPTIONS, "queue", "report",
                       "out"),
             "train-run": ("steps", "tokens", "global_batch", "micro_batch", "lora_rank", "lora_targets", "recompute",
                           "optimizer", "head_tokens", "head_outputs", "forward_overhead_s", "loader_rate",
                           "eval_tokens", "evals")}


def _serve(args: argparse.Namespace) -> int:
    require_extra("serve", "serve")
    from joulecast.service import serve

    signal.signal(signal.SIGTERM, _interrupt)
    _check_tracking_uri(args)
    serve(args.host, args.port, args.estimator, args.tracking_uri)
    return 0


def _gpus(args: argparse.Namespace) -> int:
    import pandas as pd

    from joulecast import render
    from joulecast.data.gpus import catalog
    from joulecast.estimator.loading import load_estimator

    model = load_estimator(None)
    trained = set(model.gpus) if model is not None else set()
    rows = [dict(name=s.name, gpu=s.display_name, arch=s.architecture, sms=s.sm_count, boost_mhz=s.boost_clock_mhz,
                 memory_gb=s.memory_gb, bandwidth_gbs=s.memory_bandwidth_gbs, l2_mb=s.l2_mb,
                 bf16_tflops=s.tensor_tflops.get("bf16", "none"),  # Volta has no bf16 hardware (not 'NaN')
                 fp32_tflops=s.cuda_tflops["fp32"], power_limit_w=s.power_limit_w,
                 limits_w="{}-{}".format(*s.power_limit_whole_range_w), idle_w=s.idle_power_w, link=s.peer_link,
                 shipped_model="trained on" if s.name in trained else "spec-only", aliases=", ".join(s.aliases))
            for s in catalog().values()]
    if args.json:
        print(render.to_json([{**s.to_dict(), "trained_on_by_shipped_model": s.name in trained}
                              for s in catalog().values()]))
        return 0
    print(render.frame(pd.DataFrame(rows)))
    print("--gpu takes a name, an alias or the name nvidia-smi gives the board ('NVIDIA H100 80GB HBM3'). "
          "shipped_model: 'trained on' where the shipped model was trained on that GPU's measurements; 'spec-only' "
          "GPUs are estimated from their specs (flagged, with wider intervals); limits_w: the power limits an "
          "estimate takes (--power-limit); link: what a node's GPUs reach each other by (--tp, a site's intra). "
          f"Any of them scaled, as --gpu NAME:FIELD*FACTOR (or =VALUE; fields {', '.join(WHAT_IF_FIELDS)}), is a "
          "what-if: physics on its specs with the GPU's learned correction")
    return 0


def _models(args: argparse.Namespace) -> int:
    from joulecast import render
    from joulecast.features.lowering import model_listing

    entries = model_listing()
    if args.json:
        print(render.to_json(entries))
    else:
        import pandas as pd
        print(render.frame(pd.DataFrame([{**e, "params": render.count_text(e["params"]),
                                          "active_params": render.count_text(e["active_params"]),
                                          "context": "-" if e["context"] is None else f"{e['context']:,}",
                                          "aliases": ", ".join(e["aliases"])} for e in entries])))
    return 0


def _import(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from joulecast import render
    from joulecast.data import store
    from joulecast.data.importers import importer

    if args.out:
        require_extra("parquet", "import --out")
        check_output_folder(args.out, "--out")
    source = importer(args.source)
    table = source.read(args.path)
    if not len(table):  # before: "0 rows ... written to OUT", with nothing written
        raise InputError("PATH", f"{args.path} holds no measurement rows that the {args.source} importer reads")
    summary = {
        "source": args.source, "rows": int(len(table)),
        "by_gpu": {str(k): int(v) for k, v in table["gpu"].value_counts().items()},
        "kernel_list": {str(k): int(v) for k, v in table["kernel_list"].value_counts().items()},
        "flagged_failed_runs": int(table["flag_failed_run"].sum()),
    }
    if args.out:
        collection, added = f"import-{args.source}", 0
        for gpu, rows in table.groupby("gpu"):
            folder = store.collection_dir(args.out, str(gpu), collection)
            stored = store.existing_ids(args.out, str(gpu), collection)
            new = rows[~rows["measurement_id"].isin(stored)]
            if len(new):  # importing twice adds nothing
                store.write_part(new, args.out, str(gpu), collection)
                added += len(new)
            store.write_card(args.out, str(gpu), collection, {
                "what": f"{args.source} measurements imported by joulecast", "source_path": str(args.path),
                "imported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "rows": int(len(rows)),
                "method": source.method, "folder": str(folder)})
        summary["written_to"], summary["new_rows"] = str(args.out), added
    if args.json:
        print(render.to_json(summary))
    else:
        print(f"{summary['rows']} rows from {args.source}: " + ", ".join(f"{g} {n}" for g, n in summary["by_gpu"].items()))
        lists = summary["kernel_list"]
        print(f"kernel lists: {lists.get('traced', 0)} traced, {lists.get('lowered', 0)} lowered from the catalog, "
              f"{lists.get('partial', 0)} partial, {lists.get('none', 0)} none; "
              f"{summary['flagged_failed_runs']} rows flagged as failed runs")
        if args.out:
            print(f"written to {args.out}: {added} new rows ({summary['rows'] - added} already stored)")
    return 0


def _collect(args: argparse.Namespace) -> int:
    from joulecast import render
    from joulecast.data import store
    from joulecast.data.collect.plan import expected_durations, load_plan

    if args.gpu_index < 0:
        raise InputError("--gpu-index", f"must be a GPU's index, 0 or more, got {args.gpu_index}")
    plan = load_plan(args.plan)
    default_collection = plan.name
    if args.gpu:  # the plan's items measured on another GPU, and its rows stored under that GPU
        import dataclasses

        from joulecast.data.gpus import gpu as catalog_gpu

        if ":" in args.gpu:
            raise InputError("--gpu", f"a hypothetical GPU is not hardware to measure, got {args.gpu!r}; name a "
                                      "catalog GPU ('joulecast gpus')")
        measured_as = catalog_gpu(args.gpu).name
        if measured_as != plan.gpu:
            plan, default_collection = dataclasses.replace(plan, gpu=measured_as), f"{plan.name}-on-{measured_as}"
    collection = store.check_collection_id(args.collection, "--collection") if args.collection else default_collection
    done = store.existing_ids(args.out, plan.gpu, collection)
    if args.dry_run:
        estimates = expected_durations(plan)
        todo_s = sum(e.seconds for e in estimates if e.item.id not in done)
        total_s = todo_s + 2 * plan.settings.idle_s
        rows = [dict(item=e.item.id, ms_per_iter=round(e.physics_time_s * 1e3, 4), iters_per_window=e.iterations,
                     expected_s=round(e.seconds, 2), stored=e.item.id in done) for e in estimates]
        summary = dict(plan=plan.source, gpu=plan.gpu, collection=collection, items=len(rows), stored=len(done),
                       expected_s=round(total_s, 1), settings=dict(vars(plan.settings)), rows=rows)
        if args.json:
            print(render.to_json(summary))
        else:
            import pandas as pd
            print(render.frame(pd.DataFrame(rows)))
            print(f"{len(rows)} items ({len(done & {r['item'] for r in rows})} already stored) on {plan.gpu}: "
                  f"about {render.duration(total_s)} (physics estimate, idle windows and setup included)")
        return 0
    check_output_folder(args.out, "--out")
    if args.scheduler:  # the items go to the cluster's GPU workers, which need the [collect] extra; this process not
        from joulecast.data.collect.fleet import NvmlStation, collect_on
        from joulecast.data.executors import executor

        with executor(args.scheduler, None) as run:
            result = collect_on(run.client, plan, args.out, NvmlStation(), collection=collection,
                                progress=not args.json)
        return _collected(args, plan, collection, result)
    require_extra("collect", "collect")
    from joulecast.data.collect.collector import collect
    from joulecast.data.collect.nvml_meter import open_meter
    from joulecast.data.collect.torch_runner import TorchRunner

    signal.signal(signal.SIGTERM, _interrupt)  # a timeout's SIGTERM stops as cleanly as Ctrl-C
    meter = open_meter(args.gpu_index)
    runner = TorchRunner(f"cuda:{args.gpu_index}")
    result = collect(plan, args.out, meter, runner, collection=collection, progress=not args.json)
    return _collected(args, plan, collection, result)


def _collected(args: argparse.Namespace, plan: "Plan", collection: str, result: "CollectResult") -> int:
    from joulecast import render
    from joulecast.data import store

    summary = dict(vars(result))
    if args.json:
        print(render.to_json(summary))
    else:
        print(f"{result.written} rows written to {store.collection_dir(args.out, plan.gpu, collection)} "
              f"({result.skipped} already stored, {len(result.failed)} failed"
              f"{', interrupted: rerun the same command to resume' if result.interrupted else ''})")
        for item, reason in result.failed.items():
            print(f"  failed {item}: {reason}")
    return 130 if result.interrupted else 0


SHARED_EXTERNAL = "../shared/data/external"
DEFAULT_STORE = "data/measurements"
DEFAULT_IMPORTS = (("energaizer", "energaizer-artifact"), ("mlenergy", ""))


def load_measurements(stores: list[str] | None, imports: list[str] | None, *, store: str | Path = DEFAULT_STORE,
                      external: str | Path = SHARED_EXTERNAL) -> "pd.DataFrame":
    """Measurements from store folders and importer sources (NAME=PATH); by default (neither given) the project's
    own store, `store`, and the published sets under `external` that have workloads (EnergAIzer, ML.ENERGY): from
    the working folder, as `joulecast train` runs, unless a caller that runs elsewhere names them."""
    import pandas as pd

    from joulecast.data.importers import import_source
    from joulecast.data.store import load_store

    frames = []
    if not stores and not imports:
        stores = [str(store)] if Path(store).exists() else []
        imports = [f"{name}={Path(external) / sub}" for name, sub in DEFAULT_IMPORTS if (Path(external) / sub).exists()]
    for folder in stores or []:
        frames.append(load_store(folder))
    for spec in imports or []:
        name, sep, path = spec.partition("=")
        if not sep:
            raise InputError("--import", f"expected NAME=PATH, got {spec!r}")
        with field_renamed({"SOURCE": "--import", "PATH": "--import"}):
            frames.append(import_source(name, path))
    frames = [f for f in frames if len(f)]
    if not frames and stores:
        raise InputError("--store", f"no measurements in {', '.join(stores)}: a store holds "
                                    f"GPU/COLLECTION/part-*.parquet files (one GPU's folder or collection is read too)")
    if not frames:
        raise InputError("--store", "no measurements found: give --store DIR or --import SOURCE=PATH")
    return pd.concat(frames, ignore_index=True)


def _train(args: argparse.Namespace) -> int:
    require_extra("train", "train")
    from joulecast.estimator.residual import ESTIMATOR_FILE

    if args.out:
        check_replaceable_folder(args.out, ESTIMATOR_FILE, "--out")
    signal.signal(signal.SIGTERM, _interrupt)  # a timeout's SIGTERM stops as cleanly as Ctrl-C: nothing half-saved
    from joulecast import render
    from joulecast.data.executors import check_executor, executor
    from joulecast.training.dataset import dropped_text
    from joulecast.training.train import headline, train

    check_executor(args.scheduler, args.workers)  # before the measurements are read
    measurements = load_measurements(args.store, args.imports)
    with executor(args.scheduler, args.workers) as run:
        result = train(measurements, exclude_gpu=args.exclude_gpu or (), exclude_model=args.exclude_model or (),
                       exclude_source=args.exclude_source or (), out=args.out, tracking_uri=args.tracking_uri,
                       register=not args.no_register, log_mlflow=not args.no_mlflow, progress=not args.json,
                       quick=args.quick, client=getattr(run, "client", None))
    summary = dict(rows=len(result.table.rows), dropped=result.table.dropped, params=result.model.params,
                   trained_on=run.name,
                   metrics=headline(result.metrics),
                   run_id=result.run_id, model_version=result.model_version, out=result.out)
    if args.json:
        print(render.to_json(summary))
        return 0
    print(f"trained on {summary['rows']} rows (dropped: {dropped_text(result.table.dropped)})")
    cv = result.partitions[(result.partitions["split"] == "cv") & (result.partitions["by"] == "gpu")]
    print("grouped cross-validation by model family (MAPE %; coverage: % of rows inside the 90 % energy interval; "
          "chance: the coverage chance allows, a family's rows on one GPU sharing an offset; p_in_target: how likely "
          "that coverage would be were the true one within 86-94 %):")
    columns = ["rows", "energy_mape", "time_mape", "power_mape", "coverage", "chance", "p_in_target"]
    print(render.frame(render.dashed(render.rounded(render.with_chance_text(cv))[["estimator", "value", *columns]])))
    held = render.with_chance_text(result.partitions[result.partitions["split"] == "held_out"])
    if len(held):
        print("held out (excluded from training):")
        print(render.frame(render.dashed(render.rounded(held)[["by", "value", *columns]])))
    if result.run_id:
        print(f"MLflow run {result.run_id}" + (f", model version {result.model_version} is @champion" if result.model_version else ""))
    if result.out:
        print(f"saved to {result.out} (use --estimator {result.out})")
    return 0


def _audit(args: argparse.Namespace) -> int:
    require_extra("train", "audit")
    check_output_folder(args.report, "--report")
    from joulecast import render
    from joulecast.estimator.loading import load_estimator
    from joulecast.training.audit import AUDIT_EXPERIMENT, audit, describe_estimator, log_audit, score_measurements
    from joulecast.training.report import write_report

    if bool(args.store) == bool(args.source):
        raise InputError("--store", "give either --store PATH or --source NAME --path PATH")
    if args.source and not args.path:
        raise InputError("--path", f"--source {args.source} needs --path (the data folder)")
    data = f"store {args.store}" if args.store else f"{args.source} at {args.path}"
    from joulecast.data.importers import import_source
    from joulecast.training.train import default_tracking_uri, use_experiment

    if args.store:  # read first: a store or folder that is not there leaves no tracking database behind
        measurements = load_measurements([args.store], None)
    else:
        with field_renamed({"SOURCE": "--source", "PATH": "--path"}):
            measurements = import_source(args.source, args.path)
    uri = args.tracking_uri or default_tracking_uri()
    if not args.no_mlflow:  # a tracking store that cannot be logged to, before the scoring
        use_experiment(uri, AUDIT_EXPERIMENT)
    model = load_estimator(args.estimator, args.tracking_uri)
    frame, dropped = score_measurements(measurements, "physics" if model is None else model)  # loaded once
    trained_on = set(model.cv.get("meta", {}).get("sources", [])) if model is not None else set()
    result = audit(frame, target=args.target, gate_on=_csv(args.gate_on), gate_by=_csv(args.gate_by),
                   min_rows=args.min_rows, meta=dict(estimator=describe_estimator(args.estimator, model), data=data,
                                                     dropped=dropped,
                                                     in_sample_sources=sorted(trained_on & set(frame["source"]))))
    files = write_report(result, args.report)
    if not args.no_mlflow:
        result.summary["mlflow_run_id"] = log_audit(result, files, uri, run_name=f"audit {data}")
    result.summary["report"] = [str(f) for f in files]
    if args.json:
        print(render.to_json(result.summary))
    else:
        print(render.audit_text(result))
    return 0 if result.passed else AUDIT_FAILED


# Zero-shot examples printed by `gpu add`: a small prefill, a large prefill and a decode step.
GPU_ADD_EXAMPLES = (("gpt2", "prefill", 8, 512), ("llama-3-8b", "prefill", 4, 2048), ("llama-3-8b", "decode", 16, 2048))


def _gpu_add(args: argparse.Namespace) -> int:
    import pandas as pd

    from joulecast import estimate_many, render
    from joulecast.data.gpus import add_gpu, user_gpu_dir

    spec = add_gpu(args.spec, replace=args.replace)
    configs = pd.DataFrame([dict(model=m, gpu=spec.name, phase=ph, batch=b, seq=q) for m, ph, b, q in GPU_ADD_EXAMPLES])
    examples = estimate_many(configs)[["model", "phase", "batch", "seq", "energy_j", "energy_lo_j", "energy_hi_j",
                                       "time_s", "power_w", "flags"]]
    summary = dict(added=spec.name, display_name=spec.display_name, file=str(user_gpu_dir() / f"{spec.name}.yaml"),
                   examples=examples.to_dict(orient="records"))
    if args.json:
        print(render.to_json(summary))
        return 0
    print(f"added {spec.display_name} as {spec.name!r} ({summary['file']})")
    print("zero-shot estimates (physics + residual on its spec features; wide intervals until it is measured):")
    print(examples.to_string(index=False, float_format=render.figure))  # 4 significant digits: 0.009712 s, not 0.0097
    print(f"when measurements arrive: joulecast retrain --gpu {spec.name}")
    return 0


def _gpu_remove(args: argparse.Namespace) -> int:
    from joulecast.data.gpus import remove_gpu

    print(f"removed {remove_gpu(args.name)}")
    return 0


def _retrain(args: argparse.Namespace) -> int:
    require_extra("train", "retrain")
    from joulecast.estimator.residual import ESTIMATOR_FILE

    check_output_folder(args.report, "--report")
    if args.out:
        check_replaceable_folder(args.out, ESTIMATOR_FILE, "--out")
    signal.signal(signal.SIGTERM, _interrupt)
    from joulecast import render
    from joulecast.data.gpus import gpu
    from joulecast.training.onboard import retrain

    gpu(args.gpu)  # an unknown name is one line naming it (close names too), before any measurement is read
    measurements = load_measurements(args.store, args.imports)
    result = retrain(measurements, args.gpu, tolerance=args.tolerance, tracking_uri=args.tracking_uri,
                     champion=args.champion, out=args.out, report_dir=args.report, progress=not args.json,
                     quick=args.quick)
    summary = result.summary()
    if args.json:
        print(render.to_json(summary))
        return 0
    for name in ("before", "after"):
        figures = summary[name]
        print(f"{name:<6} {'champion' if name == 'before' else 'candidate':<9} on {result.gpu} ({figures['rows']} rows): "
              f"energy {figures['energy_mape']:.2f} %, time {figures['time_mape']:.2f} %, power "
              f"{figures['power_mape']:.2f} % MAPE" + (f", coverage {figures['coverage']:.1f} %" if figures["coverage"] else ""))
    print(f"champion was: {result.champion}")
    print(render.frame(result.comparison.round(2)))
    decision = "PROMOTED to champion" if result.promoted else "NOT promoted (the champion stays)"
    version = result.trained.model_version
    print(f"candidate {('version ' + version) if version else ''} {decision}:")
    for reason in result.reasons:
        print(f"  - {reason}")
    if result.report:
        print(f"report: {result.report} (the champion's and the candidate's audits beside it)")
    return 0


AUDIT_FAILED = 3  # distinct from 1 (unexpected) and 2 (bad input): the audit ran and a gated partition missed


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line naming the flag and what it takes, as any other bad input is (the
    usage is one --help away: printed whole, it buried the line under 30 of the estimate's options)."""

    def error(self, message: str) -> NoReturn:
        if self.prog.endswith(" sweep"):  # a flag sweep takes one value of: its own hint points nowhere else
            message = message.replace(_SWEEP_HINT, _SWEEP_FIXED)
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:
        """As argparse's, but a flag the command does not take is named by that command ('joulecast import: error:
        unrecognized arguments: --source', see 'joulecast import --help'), not by the top level, with the flag it
        takes that is nearest."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:  # with the command's flag nearest a misspelt one (--bacth: --batch)
            command = _command_parser(self, parsed)
            typed = next((e for e in extras if e.startswith("-")), "").split("=")[0]
            meant = _flags_meant(typed, [o for a in command._actions for o in a.option_strings])
            hint = f" (did you mean {' or '.join(meant)}?)" if meant else ""
            if not meant and typed[2:].replace("-", "_") in {a.dest for a in command._actions if not a.option_strings}:
                # an argument given as a flag (import --source zeus, as audit takes it): its place, not a flag
                hint = f" ({typed[2:]} is given without a flag: {' '.join(command.format_usage().split())})"
            command.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed


# A hypothetical GPU's fields, as `joulecast.data.gpus.SCALABLE` has them (a test holds them equal; named here, so
# that a parser is built without loading the catalog's module)
WHAT_IF_FIELDS = ("sm_count", "clock", "memory_bandwidth_gbs", "l2_mb", "memory_gb", "power_limit_w")
_MOST_FLAGS_MEANT = 3  # a word that many flags hold names none of them (--len: --input-len, --output-len, ...)


def _flags_meant(typed: str, flags: Sequence[str]) -> list[str]:
    """The flag nearest a misspelt one (--bacth: --batch); else the flags holding the typed name as whole words
    (--rate: --request-rate; --limit: --power-limit), where only a few do."""
    if not typed.startswith("--") or len(typed) < 4:
        return []
    close = difflib.get_close_matches(typed, flags, n=1, cutoff=0.75)
    if close:
        return close
    words = typed[2:].split("-")
    holding = [f for f in flags if f.startswith("--") and any(
        f[2:].split("-")[i:i + len(words)] == words for i in range(f.count("-") - 1))]
    return holding if len(holding) <= _MOST_FLAGS_MEANT else []


def _carbon_flags(parser: Any, grid_help: str) -> None:
    """The flags that say where an estimate's energy is drawn (`_grid`): --grid, --carbon-intensity,
    --carbon-series and --pue."""
    parser.add_argument("--grid", help=grid_help)
    parser.add_argument("--carbon-intensity", type=float, help="instead, your grid's intensity in gCO2e a kWh")
    parser.add_argument("--carbon-series", help="instead, a CSV of hourly intensity from the job's start (a g_per_kwh "
                        "column, one row an hour, repeating), the energy spread over the job's time")
    parser.add_argument("--pue", type=_number_or_name, help="the datacenter's PUE, 1-3, or average (1.58) or "
                        "hyperscale (1.10); default average")


def _number_or_name(text: str) -> float | str:
    """A flag that takes a number or a named value (--pue 1.2 or --pue hyperscale)."""
    try:
        return float(text)
    except ValueError:
        return text


def _whole(text: str) -> int:
    """A count as users write one: an integer, or a whole number in exponent form (--tokens 1e9, 2.5e6)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != math.floor(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (an integer such as 512, or 1e9)"
                                         + (_SWEEP_HINT if "," in text else ""))
    return int(value)


def _whole_or_auto(text: str) -> int | str:
    """`_whole`, or the word auto (`--micro-batch auto`, `--tp auto`)."""
    if text == "auto":
        return text
    try:
        return _whole(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace(" is not a whole number (", " is not auto nor a whole "
                                                                                        "number (", 1)) from None


# A time flag's units (`_seconds`), in seconds
TIME_UNITS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86_400.0}


def _seconds(text: str) -> float:
    """A time as users write one: seconds (3600), or a number and a unit of TIME_UNITS (50ms, 90s, 15min, 1h, 1d)."""
    stripped = text.strip().lower()
    unit = next((u for u in sorted(TIME_UNITS, key=len, reverse=True) if stripped.endswith(u)), "s")
    try:
        value = float(stripped.removesuffix(unit) if stripped.endswith(unit) else stripped) * TIME_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: seconds (3600), or with a unit: 50ms, 90s, 15min, "
                                         "1h, 1d") from None
    return value


def _number(text: str) -> float:
    """A number flag of a single estimate (a clock, a limit), pointing a list to the command that takes one."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number" + (_SWEEP_HINT if "," in text else "")) from None


def _share(text: str) -> float:
    """A share as users write one: 0.25, or 25%."""
    stripped = text.strip()
    try:
        return float(stripped[:-1]) / 100 if stripped.endswith("%") else float(stripped)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share: 0.25, or 25%") from None


def _autoscale_flags(parser: argparse.ArgumentParser, prefix: str, lists: bool = False) -> None:
    """An autoscaled load's options (`serve`'s spare, cold_start_s, headroom, ttft_target_s, ttft_p99_target_s,
    itl_p99_target_s, reactive, reaction_s, scale_in_delay_s and min_instances), `prefix` leading their help; with
    `lists`, a sweep's: its headroom and SWEPT_TIMES lists to sweep."""
    parser.add_argument("--spare", choices=("off", "idle"), help=f"{prefix}with --autoscale, the instances a "
                        "window does not need: off (released, drawing nothing; each started again pays "
                        "--cold-start) or idle (kept loaded at the GPUs' idle power); default off")
    parser.add_argument("--headroom", type=str if lists else _share, help=f"{prefix}with --autoscale, capacity kept "
                        "over each window's rate, e.g. 0.25 or 25%% (the instances at most 80 %% busy)"
                        + ("; several to sweep, e.g. 0,10%%,25%% (each a point)" if lists else "") + "; default 0")
    parser.add_argument("--reactive", action="store_true", default=None, help=f"{prefix}with --autoscale, each "
                        "window sized by the window before it (an autoscaler scaling on the load it measured, every "
                        "--window), not by its own (one that knows the load ahead): a window whose load outgrew "
                        "the one before is refused, or with --queue its excess waits; its starts serve --cold-start "
                        "after they start")
    parser.add_argument("--min-instances", dest="min_instances", type=int, metavar="N", help=f"{prefix}with "
                        "--autoscale, the fewest instances kept (default 1); 0 scales to zero where a window has no "
                        "requests (its next requests wait for a start where --reactive)")
    for flag, dest, text in _AUTOSCALE_TIMES:  # times: seconds, or 90s, 2min, 50ms
        swept = lists and dest in SWEPT_TIMES
        parser.add_argument(flag, dest=dest, type=str if swept else _seconds, metavar="S", help=prefix + text + (
            "; several to sweep, e.g. 0,1min,5min (each a point)" if swept else ""))


# An autoscaled load's times a sweep takes as axes (`estimator.sweep.FLOAT_AXES`): a faster model load, a faster
# autoscaler
SWEPT_TIMES = ("cold_start_s", "reaction_s")


# An autoscaled load's options that are times: flag, the API's name, and help (after a sweep's or an estimate's prefix)
_AUTOSCALE_TIMES = (
    ("--cold-start", "cold_start_s", "with --autoscale, an instance's start from off to serving (loading the model: "
                                     "seconds, or 90s, 2min), at its GPUs' idle power, ahead of the window it serves; "
                                     "default 0"),
    ("--ttft-target", "ttft_target_s", "with --autoscale, more instances where a window's requests would wait longer "
                                       "than this for their first token on average (its prefill and the wait for a "
                                       "batch slot), e.g. 0.5"),
    ("--ttft-p99-target", "ttft_p99_target_s", "with --autoscale, more instances where 99 %% of a window's requests "
                                               "would not have their first token within this, e.g. 2"),
    ("--itl-p99-target", "itl_p99_target_s", "with --autoscale, more instances where 99 %% of a window's gaps between "
                                             "a request's tokens would not come within this (fewer running, fewer "
                                             "prompts a step), e.g. 50ms"),
    ("--reaction", "reaction_s", "with --reactive, scaling this long after a window's load changes (its metrics' lag "
                                 "and sync, e.g. 60s) instead of a window on"),
    ("--scale-in-delay", "scale_in_delay_s", "with --reactive, scaling in to the most instances needed over this long "
                                             "(Kubernetes' HPA scale-down stabilization: 5min by default there); "
                                             "default 0"))

# Where a single estimate's flag is given a list: the command that takes lists (each item a point).
_SWEEP_HINT = "; for a list, each a point, use joulecast sweep with the same flags"
# The same list given to one of sweep's own fixed flags (a train-run's --global-batch, --steps): one value a sweep.
_SWEEP_FIXED = "; a sweep takes one value of this flag (the flags it sweeps take lists)"


def _csv(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="joulecast", description="GPU energy, time and power of AI workloads.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    est = sub.add_parser("estimate", help="estimate a workload's energy (J), time (s) and power (W) on a GPU")
    src = est.add_argument_group("workload (one of)")
    src.add_argument("--model", help="catalog model name (see 'joulecast models')")
    src.add_argument("--config", help="a Hugging Face style config.json (any file name), or the model folder "
                                      "holding one")
    src.add_argument("--kernels", help="path to a kernel-list JSON file (EnergAIzer format)")
    est.add_argument("--gpu", required=True, help="catalog GPU name (see 'joulecast gpus'), or a what-if of one: "
                     f"h100-sxm:memory_bandwidth_gbs*2 (fields {', '.join(WHAT_IF_FIELDS)}; *FACTOR or =VALUE)")
    est.add_argument("--phase", type=str.lower, help="prefill, decode, training (one step; vision: inference), "
                     "generate (a whole generation: --input-len, --output-len), serve (steady-state serving: "
                     "--concurrency or --request-rate) or train-run (a whole training run: --steps or --tokens, "
                     "--global-batch, --seq; a vision model's over images, no --seq); default prefill")
    est.add_argument("--batch", type=_whole, help="batch size (sequences or images); default 1")
    est.add_argument("--seq", type=_whole, help="tokens per sequence (KV-cache length for decode); default 512")
    est.add_argument("--dtype", help="fp32, tf32, bf16, fp16, fp8, int8, in any case, or by PyTorch's and vLLM's "
                     "names (bfloat16, half, float8_e4m3fn); default bf16")
    est.add_argument("--attention", help="flash (fused), eager, or masked (fused, given an explicit mask: every key "
                     "block computed); default flash")
    est.add_argument("--launch-mode", help="eager (PyTorch) or graph (CUDA graphs); default graph where --engine "
                                           "names one (the engines replay their steps), else eager")
    est.add_argument("--host-dispatch-us", type=float, help="your host's time to dispatch one eager kernel launch, "
                     "in us (0-1000), where you have measured it (experiments/host_dispatch.py reads it from a "
                     "collection); default 25 (EnergAIzer's hosts), the interval then spanning the measured hosts' "
                     "18-30")
    est.add_argument("--engine", help="serving engine whose host work per step adds to the GPU's, and whose own "
                     "one- or two-shot kernels sum a tensor-parallel step: "
                     f"{', '.join(engines.catalog())} (data/serving_engines.yaml; as their projects write them "
                     "too, 'vLLM 0.5.4', 'TensorRT-LLM'); default none: the kernels alone, NCCL's ring")
    est.add_argument("--fusions", help="kernel fusions of the stack, comma-separated: "
                     f"{', '.join(FUSIONS)}; default none (Hugging Face's eager kernels); single passes and "
                     "--phase train-run")
    est.add_argument("--sm-clock", type=_number, help="locked SM clock in MHz (default: the maximum)")
    est.add_argument("--power-limit", type=_number, help="power limit in W (default: the GPU's default; the limits "
                     "each GPU takes: 'joulecast gpus', column limits_w)")
    est.add_argument("--estimator", help="trained estimator: a folder, models:/joulecast@champion, runs:/ID/model, "
                     "or 'physics' (default: the shipped model)")
    gen = est.add_argument_group("--phase generate")
    gen.add_argument("--input-len", type=_whole, help="prompt tokens per sequence")
    gen.add_argument("--output-len", type=_whole, help="generated tokens per sequence")
    gen.add_argument("--requests", help="a file of requests instead of the lengths: CSV (input_len, output_len "
                     "columns, arrival_s optional), JSON ([[input_len, output_len], ...] or objects), JSON lines, or a "
                     "public trace as published (Azure LLM inference, BurstGPT, Mooncake; OpenAI usage's "
                     "prompt_tokens and completion_tokens); rows asking no output token are left out. generate: in "
                     "static batches of --batch in the file's order, each padded to its longest prompt and answer. "
                     "serve: their mean lengths and spread, and their arrival rate unless --request-rate or "
                     "--concurrency is given (as Poisson arrivals: a trace's bursts are not modelled), totalled over "
                     "their output tokens unless --duration or --output-tokens is given")
    gen.add_argument("--no-kv-cache", action="store_true", help="recompute every token each step (HF transformers' "
                     "use_cache=False)")
    gen.add_argument("--offload-gb", type=float, help="GiB of weights kept in host memory and copied in before every "
                     "pass, as Accelerate's device_map='auto' runs a model the GPU cannot hold; default 0")
    gen.add_argument("--h2d-gbps", type=float, help="your host's pageable host-to-device copy rate for --offload-gb, "
                     "GB/s (CUDA's bandwidthTest --memory=pageable); default 6.95, the posted rates' median, the "
                     "interval spanning 3.2-15.9")
    srv = est.add_argument_group("--phase serve (steady-state serving; --input-len and --output-len are means)")
    srv.add_argument("--concurrency", type=_whole, help="requests kept in flight (or give --request-rate)")
    srv.add_argument("--request-rate", type=float, help="requests a second, Poisson arrivals")
    srv.add_argument("--max-batch", type=_whole, help="the engine's most requests in flight; default 256")
    srv.add_argument("--tp", type=_whole_or_auto, help="tensor-parallel GPUs of one instance (--phase generate too), "
                     "each its shard, two all-reduces a layer over the GPUs' own link (NVLink on SXM boards, PCIe on "
                     "PCIe cards), or auto: the fewest (1, 2, 4 or 8) whose shards fit; default 1")
    srv.add_argument("--expert-parallel", action="store_true", help="a mixture of experts' experts split whole over "
                     "the --tp GPUs, a share each (vLLM's --enable-expert-parallel), not each expert's width split "
                     "(--phase generate too)")
    srv.add_argument("--instances", type=_whole, help="identical instances (each --tp GPUs) the load is spread "
                     "over evenly behind a load balancer: each serves its share, the figures are all of theirs "
                     "(a --concurrency a multiple of it); default 1")
    srv.add_argument("--chunk-tokens", type=_whole, help="most prompt tokens a step carries; default 8192")
    srv.add_argument("--window", type=_seconds, metavar="S", help="with --requests: its load priced window by "
                     "window, each window this long at its own arrival rate and lengths (seconds, or 15min, 1h, 1d: "
                     "1h prices it hour by hour; at least 60 s), the figures theirs together: a bursty trace's peaks "
                     "cost what their batches draw")
    srv.add_argument("--autoscale", action="store_true", help="with --window: each window served by the fewest of "
                     "--instances that serve its rate within --max-batch in flight (one at least), the rest off")
    _autoscale_flags(srv, "")
    srv.add_argument("--queue", action="store_true", help="with --window: a window's arrivals past what the "
                     "instances serve within --max-batch wait for the windows after it (the last runs on until none "
                     "waits), each window's backlog and wait given, instead of refusing the window")
    srv.add_argument("--report", metavar="DIR", help="with --window: a folder for a self-contained report.html "
                     "charting the load's power, arrivals (instances where autoscaled, carbon on an hourly series) "
                     "window by window")
    srv.add_argument("--out", metavar="FILE", help="with --window: a row a window (its start, arrivals, power, "
                     "energy, tokens, instances and carbon) to this file: .csv, or .parquet (needs pyarrow)")
    srv.add_argument("--duration", type=float, help="seconds of serving to total (energy_j)")
    srv.add_argument("--output-tokens", type=float, help="output tokens to serve in total, e.g. 1e6: energy_j and the "
                     "time they take at this load (or give --duration)")
    srv.add_argument("--output-len-cv", type=float, help="the output lengths' standard deviation over their mean: a "
                     "request running at a step is length-biased, so contexts grow with it; default 0 (all as long); "
                     "chat sets measure about 1")
    srv.add_argument("--input-len-cv", type=float, help="the prompt lengths' standard deviation over their mean: a "
                     "prompt's attention grows with its length squared, and a step admitting a long one runs longer "
                     "(the gaps between tokens, lognormal lengths); default 0 (all as long); lm-arena-chat's "
                     "first-turn prompts give about 3")
    srv.add_argument("--sampling", help="how requests pick tokens: greedy, top-p (or top-k) or top-p-penalties "
                     "(repetition, frequency or presence penalties too); an engine whose sampler sorts the "
                     "vocabulary (vLLM) prices it as GPU work a step; default greedy")
    run = est.add_argument_group("--phase train-run (a whole training run; --seq is tokens per sequence; a vision "
                                 "model's run is over images: no --seq, --global-batch and --tokens count images)")
    run.add_argument("--steps", type=_whole, help="optimizer steps (or give --tokens)")
    run.add_argument("--tokens", type=_whole, help="tokens to train on (steps = tokens / (global batch x seq), rounded "
                     "up)")
    run.add_argument("--global-batch", type=_whole, help="sequences (a vision model: images) per optimizer step")
    run.add_argument("--micro-batch", type=_whole_or_auto, help="sequences per forward/backward pass (gradient "
                     "accumulation = global / micro), or auto: the largest dividing the global batch that fits the "
                     "GPU's memory; default the global batch")
    run.add_argument("--lora-rank", type=_whole, help="LoRA adapters of this rank (weights frozen); default 0: full "
                     "fine-tuning")
    run.add_argument("--lora-targets", help="all (every linear layer but the LM head) or attention; default all")
    run.add_argument("--recompute", help="activation recomputation: none, selective (attention) or full; default none")
    run.add_argument("--optimizer", help="adamw or sgd (with momentum); default adamw")
    run.add_argument("--head-tokens", type=_whole, help="tokens of each sequence the LM head and loss run over; "
                     "default every token (a masked LM with a dense output: its masked tokens, e.g. 76 of BERT's 512)")
    run.add_argument("--head-outputs", type=_whole, help="the output head's width: default the vocabulary (an LM "
                     "head); a fine-tuning task head's instead, e.g. 2 for extractive QA (start and end logits), the "
                     "label count for classification")
    run.add_argument("--forward-overhead-s", type=float, help="seconds a layer and forward pass the framework adds to "
                     "the kernels (host-side work they do not hide); default 0; NeMo's eager FP8 stack about 0.003")
    run.add_argument("--loader-rate", type=float, help="samples (sequences; a vision model: images) a second your "
                     "input pipeline delivers (iterate the data loader alone to measure it): where the GPU is faster, "
                     "each step waits for its batch at idle power; default: one that keeps up")
    run.add_argument("--eval-tokens", type=_whole, help="tokens (a vision model: images) evaluated over the run, "
                     "forward only, in whole global batches; default 0")
    run.add_argument("--evals", type=_whole, help="evaluations --eval-tokens is split into; default 1")
    _carbon_flags(est.add_argument_group("carbon of the energy (every phase; the GPU's energy x PUE, the host's not "
                                         "counted)"),
                  "a country's annual average grid intensity: FR, FI, BR, CA, DE, AU, CN, IN or WORLD "
                  "(data/distributed/grid_carbon.yaml); default WORLD")
    est.add_argument("--tracking-uri", help="MLflow tracking URI for a models:/ or runs:/ estimator (default: "
                     "$JOULECAST_TRACKING_URI, else sqlite:///mlflow.db here)")
    est.add_argument("--json", action="store_true", help="print JSON for scripts")
    est.set_defaults(func=_estimate)

    pl = sub.add_parser("plan", help="compare training strategies for a job over GPUs and sites (data-parallel, "
                        "FSDP, DiLoCo, Streaming DiLoCo, federated averaging): time, energy, carbon; README 'Job files'")
    pl.add_argument("job", help="the job file (YAML)")
    pl.add_argument("--json", action="store_true", help="print JSON for scripts")
    pl.add_argument("--report", help="write a self-contained HTML report to this folder")
    pl.add_argument("--estimator", help="trained estimator (as for estimate); default the job's, else the shipped one")
    pl.add_argument("--sweep", action="store_true", help="also sweep H, P, tau, bits, bandwidth and site sets, and "
                    "draw the Pareto front")
    pl.add_argument("--H", help="inner steps to sweep, comma-separated; default 50,100,500,1000")
    pl.add_argument("--P", help="streaming fragments to sweep; default 1,4,10")
    pl.add_argument("--tau", help="streaming overlap steps to sweep; default 0,1,5")
    pl.add_argument("--bits", help="bits per exchanged element to sweep (4, 8, 16, 32); default 4,8,16")
    pl.add_argument("--gbps", help="inter-site bandwidths (Gbit/s) to sweep; default the job's links")
    pl.add_argument("--site-sets", help="site subsets to sweep: names joined by + , sets by commas "
                    "(e.g. paris+oslo,paris); default all the job's sites")
    pl.add_argument("--power-limit", help="power limits to sweep (W), each set on every GPU of the sites, e.g. "
                    "300,500,700; a set whose GPUs cannot take one is left out; 'range' (or range:N) for 8 (N) over "
                    "the span every GPU of a set takes; default the job file's")
    pl.add_argument("--front", default="energy", help="the front's vertical axis: energy or carbon; default energy")
    pl.add_argument("--out", help="write the sweep's points to this file (with --sweep): .csv, or .parquet (needs "
                                  "pyarrow)")
    pl.add_argument("--scheduler", help="run the sweep's partitions (site set x limit x strategy) on Dask: local "
                    "or tcp://HOST:PORT (needs [dask])")
    pl.add_argument("--workers", type=_whole, help="a local cluster's worker processes (default one per core)")
    pl.set_defaults(func=_plan)

    sw = sub.add_parser("sweep", help="estimate a grid of configurations (lists are comma-separated); the Pareto "
                        "front of energy against time and the best point under constraints")
    sw.add_argument("--model", required=True, help="catalog model name, or several (comma-separated): an axis")
    sw.add_argument("--phase", default="prefill", type=str.lower, help="prefill, decode, training (vision: "
                    "inference), or a whole job: train-run (--global-batch, --steps or --tokens; its axes "
                    "--micro-batch and --seq), generate (--output-len; its axes --batch and --input-len, and "
                    "--output-len or --tp where several are given) or serve (--output-len; its axes --concurrency and "
                    "--input-len, the same two too; a point one engine step); default prefill")
    sw.add_argument("--gpu", required=True, help="GPUs, e.g. h100-sxm,a100-sxm4-80gb; a what-if of one beside it, "
                    "h100-sxm:memory_bandwidth_gbs*2 (as estimate takes it)")
    sw.add_argument("--batch", help="batch sizes, e.g. 1,8,64 (default 1)")
    sw.add_argument("--seq", help="tokens per sequence (decode: KV-cache length), e.g. 512,2048 (default 512)")
    sw.add_argument("--dtype", help="dtypes, e.g. bf16,fp8 (default bf16; bfloat16 and such as --dtype of estimate)")
    sw.add_argument("--sm-clock", help="locked SM clocks in MHz (default: the maximum); a GPU's out-of-range ones "
                    "are left out; 'range' (or range:N) for 8 (N) clocks over each GPU's span")
    sw.add_argument("--power-limit", help="power limits in W (default: each GPU's); out-of-range ones are left out "
                    "and counted ('joulecast gpus', column limits_w); 'range' (or range:N) for 8 (N) limits over "
                    "each GPU's range")
    sw.add_argument("--objective", default="energy", help="energy, time or carbon: what the best point minimises "
                    "(carbon: the front weighs it too)")
    sw.add_argument("--front", default="auto", help="pass (energy against time a pass), token (per token: J/token "
                    "against time a token), latency (serve: J/token against the time between a request's tokens), "
                    "ttft (serve: J/token against a request's mean time to first token), "
                    "or auto: latency for --request-rate, else per token where batch or length varies")
    sw.add_argument("--max-time", type=float, help="constraint: at most this many seconds a pass (a training run or "
                    "a generation: the whole job, a deadline; serving: the time an output token)")
    sw.add_argument("--min-throughput", dest="min_tokens_per_s", type=float,
                    help="constraint: at least this many tokens a second")
    sw.add_argument("--max-power", type=float, help="constraint: at most this average power (W)")
    sw.add_argument("--max-wait", type=float, help="constraint, serve with --queue: a request's mean wait for the "
                    "backlog it finds at most this many seconds")
    sw.add_argument("--max-ttft", type=float, help="constraint, serve: a request's mean time to its first token "
                    "(its wait for a batch slot and any queued backlog, and its prompt's prefill) at most this many "
                    "seconds")
    sw.add_argument("--max-ttft-p99", type=float, help="constraint, serve: the time within which 99 %% of requests "
                    "have their first token at most this many seconds")
    sw.add_argument("--max-itl-p99", type=float, help="constraint, serve: the gap within which 99 %% of output "
                    "tokens come after the one before (inter-token latency) at most this many seconds")
    _carbon_flags(sw, "grids whose carbon each point is read on, e.g. FR,DE,IN (a point each; several: the front "
                      "weighs carbon); default WORLD")
    sw.add_argument("--host-dispatch-us", type=float, help="your host's time to dispatch one eager kernel launch, in "
                    "us (0-1000), where you have measured it (default 25, the interval spanning the measured hosts)")
    sw.add_argument("--estimator", help="a folder, models:/..., runs:/..., or 'physics' (default: the shipped model)")
    sw.add_argument("--out", help="write every point to this file: .csv, or .parquet (needs pyarrow)")
    sw.add_argument("--report", help="folder for a self-contained report.html (the Pareto front, its points)")
    sw.add_argument("--scheduler", help="run the partitions on Dask (needs [dask]): local (a LocalCluster on "
                    "127.0.0.1, started and stopped here) or tcp://HOST:PORT (a running cluster); default in-process")
    sw.add_argument("--workers", type=_whole, help="a local cluster's worker processes (default one per core)")
    sw.add_argument("--json", action="store_true", help="print JSON: points, pareto, best")
    jobs = sw.add_argument_group("--phase train-run, generate and serve (a whole job a point); --attention, "
                                 "--launch-mode, --fusions and --engine also for a single pass")
    jobs.add_argument("--micro-batch", help="train-run: micro-batches to sweep, e.g. 1,2,4,auto (auto: the largest "
                      "dividing the global batch that fits each point's GPU; default the global batch)")
    jobs.add_argument("--global-batch", type=_whole, help="train-run: sequences (images) an optimizer step")
    jobs.add_argument("--steps", type=_whole, help="train-run: optimizer steps (or give --tokens)")
    jobs.add_argument("--tokens", type=_whole, help="train-run: tokens (a vision model: images) to train on")
    jobs.add_argument("--lora-rank", help="train-run: LoRA adapters of these ranks, e.g. 0,16 (0: full fine-tuning; "
                      "several: an axis); default 0")
    jobs.add_argument("--lora-targets", help="train-run: all or attention; default all")
    jobs.add_argument("--recompute", help="train-run: none, selective or full, or several, e.g. none,full (an axis); "
                      "default none")
    jobs.add_argument("--optimizer", help="train-run: adamw or sgd; default adamw")
    jobs.add_argument("--head-tokens", type=_whole, help="train-run: tokens a sequence the LM head runs over")
    jobs.add_argument("--head-outputs", type=_whole, help="train-run: a task head's width (default the vocabulary)")
    jobs.add_argument("--fusions", help=f"train-run and single passes: kernel fusions, comma-separated "
                                        f"({', '.join(FUSIONS)}); default none")
    jobs.add_argument("--forward-overhead-s", type=float, help="train-run: the framework's seconds a layer and "
                      "forward pass")
    jobs.add_argument("--loader-rate", type=float, help="train-run: samples (images) a second the input pipeline "
                      "delivers; default: one that keeps up")
    jobs.add_argument("--eval-tokens", type=_whole, help="train-run: tokens (images) evaluated over the run")
    jobs.add_argument("--evals", type=_whole, help="train-run: evaluations --eval-tokens is split into")
    jobs.add_argument("--launch-mode", help="eager or graph (CUDA graphs); default graph where --engine names one, "
                                            "else eager")
    jobs.add_argument("--input-len", help="generate, serve: prompt lengths to sweep (serve: means), e.g. 128,1024")
    jobs.add_argument("--output-len", help="generate, serve: tokens generated a sequence (serve: mean); several "
                                           "to sweep, e.g. 64,256,1024 (each a point)")
    jobs.add_argument("--concurrency", help="serve: requests kept in flight to sweep, e.g. 8,64,256")
    jobs.add_argument("--request-rate", help="serve: requests arriving a second to sweep, e.g. 1,4,16, in place of "
                                             "--concurrency (a rate past a GPU's capacity: an infeasible point)")
    jobs.add_argument("--requests", help="serve: a file of requests (as estimate's --requests reads it) for the load: "
                                         "its mean lengths to the whole token, their spread, and its arrival rate "
                                         "unless --concurrency or --request-rate is given")
    jobs.add_argument("--window", type=_seconds, metavar="S", help="serve: --requests' load priced window by "
                      "window, each window this long at its own arrival rate and lengths (seconds, or 15min, 1h, 1d; "
                      "at least 60 s)")
    jobs.add_argument("--autoscale", action="store_true", help="serve: with --window, each window served by the "
                      "fewest of --instances that serve it, the rest off")
    _autoscale_flags(jobs, "serve: ", lists=True)
    jobs.add_argument("--queue", action="store_true", help="serve: with --window, a window's arrivals past what "
                      "the instances serve wait for the windows after it, instead of marking the point past capacity")
    jobs.add_argument("--engine", help="serve, generate and single passes: serving engine "
                                       "(data/serving_engines.yaml); default none")
    jobs.add_argument("--tp", help="serve, generate: tensor-parallel GPUs of one instance, e.g. 1,2,4 (each a point); "
                                   "default 1")
    jobs.add_argument("--max-batch", type=_whole, help="serve: the engine's most requests in flight; default 256")
    jobs.add_argument("--instances", help="serve: identical instances the load is spread over (each --tp GPUs), e.g. "
                                          "1,2,4 (each a point; with --autoscale the most each may use); default 1")
    jobs.add_argument("--chunk-tokens", type=_whole, help="serve: most prompt tokens a step carries; default 8192")
    jobs.add_argument("--output-len-cv", type=float, help="serve: the output lengths' spread (std / mean); default 0")
    jobs.add_argument("--input-len-cv", type=float, help="serve: the prompt lengths' spread (std / mean); default 0")
    jobs.add_argument("--sampling", help="serve: greedy, top-p or top-p-penalties; default greedy")
    jobs.add_argument("--expert-parallel", action="store_true", help="serve, generate: a mixture of experts' "
                      "experts split whole over the --tp GPUs (vLLM's --enable-expert-parallel); dense models as "
                      "without it")
    jobs.add_argument("--no-kv-cache", action="store_true", help="generate: recompute every token each step")
    jobs.add_argument("--offload-gb", type=float, help="generate: GiB of weights in host memory, copied every pass")
    jobs.add_argument("--h2d-gbps", type=float, help="generate: the host's pageable copy rate for --offload-gb, GB/s")
    jobs.add_argument("--attention", help="generate, train-run and single passes: flash, eager or masked; "
                                          "default flash")
    sw.set_defaults(func=_sweep)

    sv = sub.add_parser("serve", help="estimates over HTTP (needs [serve]): POST /v1/estimate, /v1/estimate/batch, "
                        "/v1/sweep, /v1/plan; GET /v1/gpus, /v1/models, /healthz, /metrics; docs at /docs; "
                        "JOULECAST_API_KEY guards it")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=_whole, default=8000, help="port (default 8000)")
    sv.add_argument("--estimator", help="a folder, models:/joulecast@champion (reloaded when the alias moves), "
                    "runs:/ID/model, or 'physics' (default: the shipped model)")
    sv.add_argument("--tracking-uri", help="MLflow tracking URI for a models:/ or runs:/ estimator")
    sv.set_defaults(func=_serve)

    gpus = sub.add_parser("gpus", help="list the GPU catalog")
    gpus.add_argument("--json", action="store_true")
    gpus.set_defaults(func=_gpus)
    models = sub.add_parser("models", help="list the model catalog")
    models.add_argument("--json", action="store_true")
    models.set_defaults(func=_models)

    imp = sub.add_parser("import", help="convert a published measurement set into the measurement schema")
    imp.add_argument("source", help="energaizer, mlenergy, zeus or nvdvfs")
    imp.add_argument("path", help="the data folder, e.g. ../shared/data/external/energaizer-artifact")
    imp.add_argument("--out", help="store root to write Parquet parts and a dataset card into (default: summary only)")
    imp.add_argument("--json", action="store_true")
    imp.set_defaults(func=_import)

    col = sub.add_parser("collect", help="measure a plan's workloads on this machine's NVIDIA GPU (needs [collect])")
    col.add_argument("plan", help="plan YAML file, or a shipped plan's name (h200-first)")
    col.add_argument("--out", default="data/measurements", help="store root (default data/measurements)")
    col.add_argument("--collection", help="collection id (default: the plan's name); rerun to resume")
    col.add_argument("--gpu-index", type=_whole, default=0, help="which GPU (NVML and CUDA index); default 0")
    col.add_argument("--gpu", help="the catalog GPU measured (default: the plan's); the device must be it, as its SMs, "
                                   "compute capability, memory and default power limit tell; its rows are stored under "
                                   "it, the collection named PLAN-on-GPU unless --collection names it")
    col.add_argument("--dry-run", action="store_true", help="list the plan and its expected duration; measure nothing")
    col.add_argument("--scheduler", help="measure on a Dask cluster's GPU workers (tcp://HOST:PORT; each worker "
                     "started with --resources GPU=1 and its own CUDA_VISIBLE_DEVICES), one item per GPU at a time")
    col.add_argument("--json", action="store_true")
    col.set_defaults(func=_collect)

    tr = sub.add_parser("train", help="train the residual model (physics x learned correction), logged to MLflow")
    tr.add_argument("--store", action="append", help="measurement store folder (repeatable; default data/measurements)")
    tr.add_argument("--import", dest="imports", action="append", metavar="SOURCE=PATH",
                    help="an importer source and its folder (repeatable; default: energaizer and mlenergy from "
                         "../shared/data/external)")
    tr.add_argument("--exclude-gpu", action="append", metavar="NAME", help="hold a GPU out (zero-shot test)")
    tr.add_argument("--exclude-model", action="append", metavar="FAMILY", help="hold a model family out")
    tr.add_argument("--exclude-source", action="append", metavar="NAME", help="hold a source out")
    tr.add_argument("--out", help="save the trained estimator to this folder (load it with --estimator PATH)")
    tr.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here)")
    tr.add_argument("--no-register", action="store_true", help="log the run but register no model version")
    tr.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    tr.add_argument("--quick", action="store_true", help="the quick profile: one hyper-parameter set, bags of two, "
                    "five folds (about a tenth of the boosters; for trying things out, not for shipping)")
    tr.add_argument("--scheduler", help="fit every booster with xgboost.dask (needs [dask]): local (a LocalCluster on "
                    "127.0.0.1) or tcp://HOST:PORT (a running scheduler); default in-process")
    tr.add_argument("--workers", type=_whole, help="a local cluster's worker processes (default one per core)")
    tr.add_argument("--json", action="store_true")
    tr.set_defaults(func=_train)

    from joulecast.training.gates import GATE_ON, MIN_ROWS, PARTITIONS, TARGET_PCT, TOLERANCE_PTS

    au = sub.add_parser("audit", help="score an estimator on a measurement set, per partition, against a target; "
                        f"exit {AUDIT_FAILED} when a gated partition misses it")
    au.add_argument("--store", help="measurement store folder")
    au.add_argument("--source", help="an importer source (energaizer, mlenergy, zeus, nvdvfs), with --path")
    au.add_argument("--path", help="the source's data folder, e.g. ../shared/data/external/energaizer-artifact")
    au.add_argument("--estimator", help="a folder, models:/joulecast@champion, runs:/ID/model, or 'physics' "
                    "(default: the shipped model)")
    au.add_argument("--target", type=float, default=TARGET_PCT, help=f"MAPE target in percent (default {TARGET_PCT:g})")
    au.add_argument("--gate-on", default=",".join(GATE_ON), help=f"quantities the target applies to (default "
                    f"{','.join(GATE_ON)}; also time)")
    au.add_argument("--gate-by", default=",".join(PARTITIONS), help=f"partition kinds that are gated (default all: "
                    f"{','.join(PARTITIONS)})")
    au.add_argument("--min-rows", type=_whole, default=MIN_ROWS, help=f"smaller partitions are reported, not gated "
                    f"(default {MIN_ROWS})")
    au.add_argument("--report", default="audit-report", help="folder for report.html and audit.json (default audit-report)")
    au.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here)")
    au.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    au.add_argument("--json", action="store_true", help="print the JSON summary")
    au.set_defaults(func=_audit)

    gp = sub.add_parser("gpu", help="add a GPU to the catalog from a spec file, or remove one you added")
    gsub = gp.add_subparsers(dest="gpu_command", required=True)
    add = gsub.add_parser("add", help="validate a GPU spec YAML (see data/examples/a100-sxm4-80gb-500w.yaml) and add it")
    add.add_argument("spec", help="spec YAML: the catalog's fields, each number with its source")
    add.add_argument("--replace", action="store_true", help="replace a GPU you added before under the same name")
    add.add_argument("--json", action="store_true")
    add.set_defaults(func=_gpu_add)
    rm = gsub.add_parser("remove", help="remove a GPU you added")
    rm.add_argument("name")
    rm.set_defaults(func=_gpu_remove)

    rt = sub.add_parser("retrain", help="retrain with a new GPU's measurements; promote the candidate only if no "
                        "partition regresses")
    rt.add_argument("--gpu", required=True, help="the GPU whose measurements arrived (catalog name)")
    rt.add_argument("--store", action="append", help="measurement store folder (repeatable; default data/measurements)")
    rt.add_argument("--import", dest="imports", action="append", metavar="SOURCE=PATH",
                    help="an importer source and its folder (repeatable; default: energaizer and mlenergy)")
    rt.add_argument("--tolerance", type=float, default=TOLERANCE_PTS,
                    help=f"MAPE points a partition may lose before the candidate is refused (default {TOLERANCE_PTS:g})")
    rt.add_argument("--champion", help="the model to beat (default: models:/joulecast@champion, else the shipped model)")
    rt.add_argument("--out", help="also save the candidate to this folder")
    rt.add_argument("--report", default="retrain-report", help="folder for the before/after audit reports")
    rt.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here)")
    rt.add_argument("--quick", action="store_true", help="train's quick profile, for the candidate and its baseline")
    rt.add_argument("--json", action="store_true")
    rt.set_defaults(func=_retrain)
    return parser


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the subcommand that ran (estimate, gpu add, ...)."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or getattr(args, sub.dest, None) not in sub.choices:
            return parser
        parser = sub.choices[getattr(args, sub.dest)]


def _flag_of(parser: argparse.ArgumentParser, args: argparse.Namespace, field: str) -> str:
    """The flag the user gave a field's value by (--input-len for the API's input_len, --sm-clock for sm_clock_mhz:
    a unit the flag takes as the field does), so that an error names what was typed; else the field, as a job file
    or a batch file names it."""
    parser = _command_parser(parser, args)
    for dest in dict.fromkeys((field, field.removesuffix("_mhz").removesuffix("_w").removesuffix("_s"))):
        for action in parser._actions:
            if action.dest != dest or not action.option_strings:
                continue
            if getattr(args, dest, None) not in (None, action.default):  # given on the command line
                return next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
    return field


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 bad input or data, 1 unexpected failure)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return args.func(args)
    except InputError as exc:
        print(f"joulecast: error: {_flag_of(parser, args, exc.field)}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except JoulecastError as exc:
        print(f"joulecast: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("joulecast: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `joulecast ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
