"""`joulecast serve`: estimates over HTTP (FastAPI on uvicorn, the `[serve]` extra), a thin shell over the Python API
as the CLI is: the same fields in, the same JSON out.

Routes: POST /v1/estimate (one workload, or a job with `"phase": "generate"`, `"serve"` or `"train-run"`), POST
/v1/estimate/batch (up to MAX_BATCH_ROWS rows, `estimate_many`), POST /v1/sweep (`joulecast sweep`'s lists), POST
/v1/plan, each estimate with the carbon of its energy (`grid`, `carbon_intensity` or `carbon_series`, and `pue`:
`joulecast.data.carbon`), GET /v1/gpus, GET /v1/models, GET /healthz, GET /metrics (Prometheus text), and the OpenAPI
docs at /docs. The estimator loads once at start; one named by an MLflow alias is checked again every
RELOAD_S seconds and reloaded when the alias moves; every response says which model answered. A bad request gets
422 naming the field, a body over MAX_BODY_BYTES 413, a missing or wrong key 401 where JOULECAST_API_KEY is set
(every route but /healthz). Requests name catalog models and GPUs only: no field is a path, so no request reads or
writes a file.
"""

# No `from __future__ import annotations` here: FastAPI reads the routes' annotations (`Request`) at run time.
import errno
import hmac
import os
import socket
import sys
import threading
import time
from collections import defaultdict
from typing import Any

from joulecast.data.errors import InputError, JoulecastError, UnknownFieldError, require
from joulecast.data.files import request_pairs, whole_number
from joulecast.data.models import is_model_name
from joulecast.render import finite

MAX_BATCH_ROWS = 10_000
MAX_BODY_BYTES = 2 * 2**20   # a full batch of rows is about 2 MB of JSON
RELOAD_S = 30.0
_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)  # latency histogram bounds (s)
# The job phases' fields (the Python API's names; `--phase serve` and `--phase train-run` of the CLI).
_JOBS = {"generate": ("input_len", "output_len", "kv_cache", "requests", "offload_gb", "h2d_gbps", "tp",
                      "expert_parallel"),
         "serve": ("input_len", "output_len", "requests", "concurrency", "request_rate", "max_batch", "tp",
                   "instances", "chunk_tokens", "duration_s", "output_tokens", "output_len_cv", "input_len_cv",
                   "sampling", "expert_parallel", "window_rates", "window_s", "last_window_s", "window_lengths",
                   "autoscale", "spare", "cold_start_s", "headroom", "ttft_target_s",
                   "ttft_p99_target_s", "itl_p99_target_s", "reactive", "reaction_s", "scale_in_delay_s",
                   "min_instances", "queue"),
         "train-run": ("seq", "global_batch", "micro_batch", "steps", "tokens", "lora_rank", "lora_targets",
                       "recompute", "optimizer", "head_tokens", "head_outputs", "attention", "fusions",
                       "forward_overhead_s", "loader_rate", "eval_tokens", "evals")}
_GENERATE = _JOBS["generate"]
# /v1/estimate's carbon fields, for every phase, in `data.carbon.grid_at`'s order (the series a list of numbers)
_CARBON = ("grid", "carbon_intensity", "pue", "carbon_series")
# The fields that count (sizes, lengths, steps, tokens, ranks, GPUs): JSON has one number type, so 1e9 or 8.0 sent
# for one is the integer it names (`_as_read`), as the CLI reads --tokens 1e9.
_COUNTS = frozenset({"batch", "seq", "input_len", "output_len", "steps", "tokens", "global_batch", "micro_batch",
                     "lora_rank", "head_tokens", "head_outputs", "concurrency", "max_batch", "tp", "instances",
                     "chunk_tokens", "eval_tokens", "evals", "min_instances"})


# Bodies each POST route takes, shown by /docs ("Try it out") and checked to answer by the tests: the fields are
# those of the CLI's flags by the Python API's names.
EXAMPLES: dict[str, dict[str, dict[str, Any]]] = {
    "/v1/estimate": {
        "a pass": {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "prefill", "batch": 8, "seq": 1024},
        "a generation": {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "generate", "batch": 16,
                         "input_len": 1024, "output_len": 256},
        "a serving load": {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "input_len": 512,
                           "output_len": 256, "request_rate": 4, "duration_s": 3600, "grid": "FR"},
        "serving a trace's requests (its lengths and arrival times)": {
            "model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "engine": "vllm-0.5.4",
            "requests": [{"ContextTokens": 374, "GeneratedTokens": 44, "TIMESTAMP": "2023-11-16 18:15:46.68"},
                         {"ContextTokens": 396, "GeneratedTokens": 109, "TIMESTAMP": "2023-11-16 18:15:50.99"},
                         {"ContextTokens": 879, "GeneratedTokens": 55, "TIMESTAMP": "2023-11-16 18:15:56.68"}]},
        "a load hour by hour (requests a second in each hour)": {
            "model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "engine": "vllm-0.5.4", "input_len": 1024,
            "output_len": 256, "window_rates": [0.5, 2.0, 4.0, 0.0], "window_s": 3600,
            "carbon_series": [300, 250, 200, 400]},
        "a load hour by hour, each hour at its own mean lengths": {
            "model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "engine": "vllm-0.5.4",
            "window_rates": [0.5, 2.0, 4.0, 0.0], "window_s": 3600,
            "window_lengths": {"input_len": [600, 1024, 2048, None], "output_len": [128, 256, 256, None]}},
        "a load hour by hour on as few of 4 instances as keep a request's first token within 0.5 s": {
            "model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "engine": "vllm-0.5.4", "input_len": 1024,
            "output_len": 256, "window_rates": [2.0, 6.5, 13.0, 0.0], "window_s": 3600, "instances": 4,
            "autoscale": True, "ttft_target_s": 0.5, "cold_start_s": 60},
        "a mixture of experts, its experts split over the GPUs": {"model": "qwen3-30b-a3b", "gpu": "h100-sxm",
                                                                  "phase": "serve", "input_len": 512,
                                                                  "output_len": 256, "concurrency": 64, "tp": 2,
                                                                  "expert_parallel": True, "engine": "vllm-0.11.1"},
        "a mixture of experts generating on 8 GPUs, its experts split over them": {
            "model": "qwen3-235b-a22b", "gpu": "h100-sxm", "phase": "generate", "batch": 4, "input_len": 1024,
            "output_len": 256, "tp": 8, "expert_parallel": True, "engine": "vllm-0.11.1"},
        "a fine-tuning run": {"model": "llama-3-8b", "gpu": "h100-sxm", "phase": "train-run", "seq": 2048,
                              "global_batch": 32, "micro_batch": 4, "steps": 1000, "lora_rank": 16},
        "an image model's epoch": {"model": "resnet-50", "gpu": "a100-sxm4-80gb", "phase": "train-run",
                                   "global_batch": 256, "tokens": 1_281_167},
    },
    "/v1/estimate/report": {
        "a load hour by hour, its carbon on an hourly series": {
            "model": "llama-3-8b", "gpu": "h100-sxm", "phase": "serve", "engine": "vllm-0.5.4", "input_len": 1024,
            "output_len": 256, "window_rates": [0.5, 2.0, 4.0, 0.0], "window_s": 3600,
            "carbon_series": [300, 250, 200, 400]},
    },
    "/v1/estimate/batch": {
        "two GPUs": {"rows": [{"model": "gpt2", "gpu": "a10", "batch": 8, "seq": 512},
                              {"model": "gpt2", "gpu": "h100-sxm", "batch": 8, "seq": 512}]},
    },
    "/v1/sweep": {
        "passes": {"model": "llama-3-8b", "phase": "prefill", "gpu": ["h100-sxm", "a100-sxm4-80gb"],
                   "batch": [1, 8, 64], "seq": 1024, "power_limit_w": [300, 500, 700], "max_time_s": 2},
        "a serving load's GPU and cap": {"model": "llama-3-8b", "phase": "serve", "gpu": ["h100-sxm", "l40s"],
                                         "request_rate": 4, "input_len": 512, "output_len": 256,
                                         "power_limit_w": "range:4", "max_time_s": 0.05},
        "a list of requests' load over two GPUs, on 2 instances each": {
            "model": "llama-3-8b", "phase": "serve", "gpu": ["h100-sxm", "a100-sxm4-80gb"], "instances": 2,
            "engine": "vllm-0.5.4", "requests": [{"input_len": 2048, "output_len": 256, "arrival_s": 0.0},
                                                 {"input_len": 512, "output_len": 64, "arrival_s": 0.4},
                                                 {"input_len": 1024, "output_len": 512, "arrival_s": 1.0}]},
        "a dense model or a mixture of experts": {"model": ["qwen3-8b", "qwen3-30b-a3b"], "phase": "serve",
                                                  "gpu": "h100-sxm", "concurrency": [8, 64], "input_len": 512,
                                                  "output_len": 256},
        "an architect's what-if beside its GPU": {"model": "llama-3-8b", "phase": "decode",
                                                  "gpu": ["h200", "h200:memory_bandwidth_gbs*2"], "batch": [1, 16, 64],
                                                  "seq": 4096},
    },
    "/v1/sweep/report": {
        "a serving load's GPU and cap": {"model": "llama-3-8b", "phase": "serve", "gpu": ["h100-sxm", "l40s"],
                                         "request_rate": 4, "input_len": 512, "output_len": 256,
                                         "power_limit_w": "range:4"},
    },
    "/v1/plan": {
        "two sites": {"name": "two sites", "model": "llama-3-8b", "tokens": 1_000_000_000, "seq": 2048,
                      "global_batch": 512, "micro_batch": 4, "layout": {"tp": 1, "pp": 1, "cp": 1, "zero": 1},
                      "sites": [{"name": "helsinki", "gpu": "h100-sxm", "gpus": 64, "grid": "FI"},
                                {"name": "sydney", "gpu": "h100-sxm", "gpus": 64, "grid": "AU"}],
                      "links": [{"between": ["helsinki", "sydney"], "gbps": 10, "rtt_ms": 300}],
                      "strategies": ["ddp", {"kind": "diloco", "H": 500}]},
    },
}


def _body_docs(route: str) -> dict[str, Any]:
    """The request body /docs shows for `route` (a JSON object; its EXAMPLES to try)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"type": "object"},
        "examples": {name: {"summary": name, "value": value} for name, value in EXAMPLES[route].items()}}}}}


class ModelHolder:
    """The estimator the service answers with, reloaded when the MLflow alias it names moves."""

    def __init__(self, uri: str | None, tracking_uri: str | None = None):
        self.uri, self.tracking_uri = uri, tracking_uri
        self.version: str | None = self._alias_version()
        self.model = self._load()
        self.checked = time.monotonic()
        self._lock = threading.Lock()

    def _load(self) -> Any:
        from joulecast.estimator.loading import load_estimator_again

        return load_estimator_again(self.uri, self.tracking_uri)  # not the process-wide cache: it may move

    def _alias_version(self) -> str | None:
        if not (self.uri or "").startswith("models:/") or "@" not in (self.uri or ""):
            return None
        import mlflow

        from joulecast.estimator.loading import resolved_tracking_uri

        name, alias = self.uri.removeprefix("models:/").split("@", 1)
        client = mlflow.MlflowClient(resolved_tracking_uri(self.tracking_uri))  # where the model was loaded from
        return str(client.get_model_version_by_alias(name, alias).version)

    def current(self) -> Any:
        """The model, after reloading it where its alias has moved (checked at most every RELOAD_S seconds)."""
        if self.version is not None and time.monotonic() - self.checked > RELOAD_S:
            with self._lock:
                self.checked = time.monotonic()
                version = self._alias_version()
                if version != self.version:
                    self.model, self.version = self._load(), version
        return self.model

    def describe(self) -> str:
        name = self.uri or "shipped default"
        return f"{name} (version {self.version})" if self.version else name


def _is_path(name: str) -> bool:
    """A name that would be read as a file (a config or kernel list) rather than looked up in a catalog: a Hugging
    Face id the catalog knows ("meta-llama/Llama-3.1-8B-Instruct") is looked up, as the CLI looks it up."""
    return ("/" in name or "\\" in name or name.endswith(".json")) and not is_model_name(name)


def _catalog_name(key: str, value: Any, where: str) -> None:
    """A `model` or `gpu` given as a catalog name: a path (which `workload` would read) is refused."""
    if not isinstance(value, str) or not value:
        raise InputError(f"{where}{key}", "required: a catalog name (GET /v1/models, /v1/gpus)")
    if _is_path(value):
        raise InputError(f"{where}{key}", f"{value!r} is not a catalog name (paths are not read here)")


def _check_names(row: dict[str, Any], where: str) -> None:
    """Catalog names only (`_catalog_name`), and the fields an estimate takes."""
    for key in ("model", "gpu"):
        _catalog_name(key, row.get(key), where)
    from joulecast.estimator.many import CONFIG_COLUMNS

    allowed = CONFIG_COLUMNS + _GENERATE + tuple(f for fields in _JOBS.values() for f in fields if f not in _GENERATE)
    unknown = sorted(set(row) - set(allowed))
    if unknown:
        raise UnknownFieldError(f"{where}{unknown[0]}", unknown[0], allowed)


def _as_read(row: dict[str, Any]) -> dict[str, Any]:
    """`row` as the CLI reads its flags: each count that JSON gave as a whole float (1e9, 8.0) an integer (a fraction,
    NaN or infinity left as sent, for the estimate to refuse by name), the phase in any case ("Serve" is serve)."""
    out = {k: whole_number(v) if k in _COUNTS else v for k, v in row.items()}
    if isinstance(out.get("phase"), str):
        out["phase"] = out["phase"].lower()
    if "requests" in out:  # a generation's [input_len, output_len] pairs
        out["requests"] = request_pairs(out["requests"])
    return out


def estimate_one(body: dict[str, Any], model: Any) -> dict[str, Any]:
    """POST /v1/estimate: one workload (the CLI's fields) or a job, by `model` (a loaded residual, or "physics"),
    with the carbon of its energy at `grid`, `carbon_intensity` or `carbon_series`, and `pue` (checked first); the
    CLI's JSON."""
    from joulecast.data.carbon import carbon, grid_at

    where = grid_at(*(body.get(k) for k in _CARBON))
    figures = _estimate({k: v for k, v in body.items() if k not in _CARBON}, model)
    return {**figures, **carbon(figures, where)}


def _estimate(body: dict[str, Any], model: Any) -> dict[str, Any]:
    """`estimate_one`'s estimate, its carbon fields left out."""
    import joulecast
    from joulecast.estimator.jobs import generate, generate_requests

    _check_names(body, "")
    body = _as_read(body)
    if body.get("phase") in ("serve", "train-run"):
        return _job(body, model)
    from joulecast.data.workload import check_host_dispatch
    from joulecast.estimator.many import CONFIG_COLUMNS

    job_only = [k for k in body if k not in CONFIG_COLUMNS and k not in _GENERATE]
    if job_only:
        raise InputError(job_only[0], f"applies to phase {_phases_of(job_only[0])} only")
    dispatch = check_host_dispatch(body.get("host_dispatch_s"))
    if body.get("phase") == "generate":
        if body.get("fusions") is not None:
            raise InputError("fusions", "applies to single passes and phase train-run, not to phase generate")
        args = {k: body[k] for k in ("batch", "dtype", "attention", "launch_mode", "engine", "sm_clock_mhz",
                                     "power_limit_w", "offload_gb", "h2d_gbps", "tp", "expert_parallel")
                if body.get(k) is not None} | {
            "host_dispatch_s": dispatch}
        if "requests" in body:  # a list of [input_len, output_len], in static batches of `batch`
            for key in ("input_len", "output_len"):
                if key in body:
                    raise InputError(key, "not with requests: each request gives its own lengths")
            return generate_requests(body["model"], body["gpu"], body["requests"],
                                     kv_cache=_kv_cache(body), estimator=model, **args).to_dict()
        for key in ("input_len", "output_len"):
            if key not in body:
                raise InputError(key, "required with phase generate")
        return generate(body["model"], body["gpu"], input_len=body["input_len"], output_len=body["output_len"],
                        kv_cache=_kv_cache(body), estimator=model, **args).to_dict()
    given = {k: body[k] for k in ("phase", "batch", "seq", "dtype", "attention", "launch_mode", "engine", "fusions")
             if body.get(k) is not None}
    if any(k in body for k in _GENERATE):
        key = next(k for k in _GENERATE if k in body)
        raise InputError(key, f"applies to phase {_phases_of(key)} only")
    from joulecast.features.lowering import ignored_field, ignored_fusions

    ignored = ignored_field([body["model"]], set(given))  # a field the model ignores, named rather than dropped
    if ignored:
        raise InputError(ignored[0], ignored[1].replace("{batch}", "batch"))
    workload = joulecast.workload(body["model"], host_dispatch_s=dispatch, **given)
    message = given.get("fusions") and ignored_fusions(workload, model=body["model"], host_dispatch_s=dispatch,
                                                       **given)
    if message:
        raise InputError("fusions", message)
    return joulecast.estimate(workload, body["gpu"], sm_clock_mhz=body.get("sm_clock_mhz"),
                              power_limit_w=body.get("power_limit_w"), estimator=model).to_dict()


def _phases_of(field: str) -> str:
    """The job phases that take `field` ('serve', 'generate or serve')."""
    return " or ".join(p for p, fields in _JOBS.items() if field in fields)


def _kv_cache(body: dict[str, Any]) -> bool:
    """A generation's `kv_cache`, JSON true or false (default true): not a string's truth, which reads "no" as yes."""
    value = body.get("kv_cache", True)
    if not isinstance(value, bool):
        raise InputError("kv_cache", f"must be true or false, got {value!r}")
    return value


def _job(body: dict[str, Any], model: Any) -> dict[str, Any]:
    """Phase serve or train-run: the job's fields as the CLI takes them (`joulecast estimate --phase ...`)."""
    from joulecast.estimator.serving import serve
    from joulecast.estimator.train_run import train_run

    phase = body["phase"]
    args = _job_args(body)
    if phase == "serve":
        job, trace = _served(body["model"], body["gpu"], args, model)
        out = job.to_dict()
        return out if trace is None else {**out, "trace": trace.to_dict()}
    if "engine" in args:
        raise InputError("engine", "not taken by phase train-run")
    if "global_batch" not in args:
        raise InputError("global_batch", "required with phase train-run")
    # seq: a text model's run needs it, a vision model's takes none (train_run says which)
    return train_run(body["model"], body["gpu"], estimator=model, **args).to_dict()


def _job_args(body: dict[str, Any]) -> dict[str, Any]:
    """A job body's fields but the model, GPU and phase, those given (not null); one its phase does not take is one
    line naming it."""
    phase = body["phase"]
    allowed = set(_JOBS[phase]) | {"model", "gpu", "phase", "dtype", "sm_clock_mhz", "power_limit_w", "engine",
                                   "launch_mode", "host_dispatch_s"}
    extra = sorted(set(body) - allowed)
    if extra:
        raise InputError(extra[0], f"not a field of phase {phase}; allowed: {', '.join(sorted(allowed))}")
    return {k: v for k, v in body.items() if k not in ("model", "gpu", "phase") and v is not None}


def _served(name: str, gpu: str, args: dict[str, Any], model: Any) -> tuple[Any, Any]:
    """A serve body's estimate (its fields but the model and GPU, `args`), and the requests it was read from (a
    `RequestTrace`, as `serve --requests` reads a file's) or None."""
    from joulecast.estimator.serving import serve

    trace = None
    if "requests" in args:  # a list of requests' load
        from joulecast.data.requests import refuse_lengths, refuse_windows, requests_from_rows

        refuse_lengths(args)
        refuse_windows(args)
        trace = requests_from_rows(args.pop("requests"))
        args.update(trace.serving(**{k: args.pop(k, None) for k in ("concurrency", "request_rate", "duration_s",
                                                                     "output_tokens", "window_s")}))
    for key in ("input_len", "output_len"):
        if key not in args and "window_lengths" not in args:
            raise InputError(key, "required with phase serve (or requests, or window_lengths)")
    return serve(name, gpu, estimator=model, **args), trace


def serve_page(body: dict[str, Any], model: Any) -> str:
    """POST /v1/estimate/report: a serving load window by window (phase serve with `window_rates` and `window_s`, or
    `requests` and `window_s`, /v1/estimate's fields) as the self-contained page `estimate --report` writes; its
    carbon at the body's grid or hourly series."""
    from joulecast import serve_report
    from joulecast.data.carbon import carbon, grid_at
    from joulecast.render import trace_line

    where = grid_at(*(body.get(k) for k in _CARBON))
    fields = _as_read({k: v for k, v in body.items() if k not in _CARBON})
    _check_names(fields, "")
    require(fields.get("phase") == "serve", "phase", "a report charts a serving load window by window: phase serve")
    require(fields.get("window_s") is not None, "window_s", "a report charts a load window by window: give window_s "
                                                            "(with window_rates, or requests)")
    job, trace = _served(fields["model"], fields["gpu"], _job_args(fields), model)
    source = (trace_line("the body's requests", trace) if trace is not None
              else f"the body's window_rates: {len(job.windows.request_rate):,} windows")
    return serve_report.render(job, carbon(job, where), source, None if trace is None else trace.origin_s)


def sweep_page(body: dict[str, Any], model: Any) -> str:
    """POST /v1/sweep/report: /v1/sweep's body as the self-contained page `sweep --report` writes (its Pareto front
    drawn, the best point and the front's points in tables)."""
    from joulecast import sweep_report

    result = _swept(body, model)
    return sweep_report.render(result, f"joulecast sweep: {body.get('model')} {body.get('phase', 'prefill')}")


def plan_job(body: dict[str, Any], model: Any) -> dict[str, Any]:
    """`joulecast plan` on a job file's content; fields that name files (an hourly carbon series, an estimator) are
    refused, and the model must be a catalog name or an inline config."""
    from joulecast.data.job_file import parse_job
    from joulecast.estimator.plan import plan

    if "estimator" in body:
        raise InputError("estimator", "not taken here: the service answers with its own estimator")
    model_name = body.get("model")
    if isinstance(model_name, str) and _is_path(model_name):
        raise InputError("model", f"{model_name!r} is not a catalog name (paths are not read here)")
    sites = body.get("sites")
    for i, site in enumerate(sites if isinstance(sites, list) else []):  # anything else: parse_job names it
        if isinstance(site, dict) and "carbon_series" in site:
            raise InputError(f"sites[{i}].carbon_series", "files are not read here; give grid: COUNTRY")
    return plan(parse_job(body), estimator=model).to_dict()


# A sweep over HTTP answers in the time of a request: at most this many jobs (about 5 ms a serving load or a
# training run, 0.1 s a generation of 256 tokens), and MAX_BATCH_ROWS points of single passes; a serving load by
# its request rate finds its batch among 21 steps, about 7 ms a point (5 GPUs x 8 rates, 0.29 s of CPU on the 2-core
# machine, the steps lowered once; 56 ms before they went through one estimate pass), and a trace's load window by
# window runs a grid for each of up to 16 length classes, about 33 ms a point (5 GPUs x 2 instance counts, an hour a
# window, a week's trace with lengths that follow the day: 0.33 s), so fewer of those.
MAX_SWEEP_JOBS = 500
MAX_SWEEP_RATES = 50


def sweep_points(body: dict[str, Any], model: Any) -> dict[str, Any]:
    """POST /v1/sweep: `joulecast.sweep` of the body's fields (`estimator.sweep.run_sweep`: its phase's two size axes,
    model, gpu, dtype, sm_clock_mhz, power_limit_w, tp, output_len and grid each a value or a list, its phase's fixed
    options, the constraints by their API names), catalog models and GPUs only, bounded to answer in a request's time;
    the CLI's JSON (points, pareto, best)."""
    from joulecast.render import sweep_payload

    payload = sweep_payload(_swept(body, model))
    return {**payload, **{k: payload[k].to_dict(orient="records") for k in ("points", "pareto")}}


def _swept(body: dict[str, Any], model: Any) -> Any:
    """`sweep_points`' sweep (a `SweepResult`)."""
    from joulecast.estimator.sweep import JOB_PHASES, listed, run_sweep

    for key in ("model", "gpu"):  # catalog names: nothing here reads a file
        for name in listed(body.get(key), key, [None]):
            _catalog_name(key, name, "")
    for key in ("estimator", "max_points", "run", "progress"):  # the service's own, not a body's
        if key in body:
            raise InputError(key, "not taken here: the service sweeps with its own estimator, bound and workers")
    fields = {k: v for k, v in body.items() if k not in ("model", "gpu", "phase")}
    phase = body.get("phase", "prefill")
    # a serving load without a concurrency is one by rate (given, a list of requests' own, or window by window)
    by_rate = str(phase).lower() == "serve" and body.get("concurrency") is None
    most = (MAX_SWEEP_RATES if by_rate else MAX_SWEEP_JOBS if str(phase).lower() in JOB_PHASES else MAX_BATCH_ROWS)
    return run_sweep(body.get("model"), body.get("gpu"), phase=phase, estimator=model, max_points=most, **fields)


def estimate_rows(body: dict[str, Any], model: Any) -> dict[str, Any]:
    """POST /v1/estimate/batch: `{"rows": [...]}`, each row `estimate_many`'s columns, with the carbon of each row's
    energy at the body's `grid`, `carbon_intensity` or `carbon_series`, and `pue` (as /v1/estimate's)."""
    import pandas as pd

    from joulecast.data.carbon import grid_at, with_carbon
    from joulecast.estimator.many import estimate_many

    extra = sorted(set(body) - {"rows", *_CARBON})
    if extra:
        raise UnknownFieldError(extra[0], extra[0], ["rows", *_CARBON])
    where = grid_at(*(body.get(k) for k in _CARBON))

    rows = body.get("rows")
    if not isinstance(rows, list) or not rows:
        raise InputError("rows", "required: a list of configurations (the fields of /v1/estimate)")
    if len(rows) > MAX_BATCH_ROWS:
        raise InputError("rows", f"{len(rows):,} rows; at most {MAX_BATCH_ROWS:,} a request")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InputError(f"rows[{i}]", "must be an object of fields")
        _check_names(row, f"rows[{i}].")
        if any(k in row for k in _GENERATE):
            raise InputError(f"rows[{i}]", "a batch holds single passes; post generations to /v1/estimate")
    out = estimate_many(pd.DataFrame([_as_read(row) for row in rows]), estimator=model)
    return {"rows": with_carbon(out, where, out["time_s"].to_numpy()).to_dict(orient="records")}


class Metrics:
    """Request counts and latencies per route and status, in Prometheus' text format."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int], int] = defaultdict(int)
        self.buckets: dict[str, list[int]] = defaultdict(lambda: [0] * (len(_BUCKETS) + 1))
        self.sums: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()

    def observe(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.counts[route, status] += 1
            self.sums[route] += seconds
            counts = self.buckets[route]
            for i, bound in enumerate((*_BUCKETS, float("inf"))):
                if seconds <= bound:
                    counts[i] += 1

    def text(self) -> str:
        lines = ["# HELP joulecast_requests_total Requests by route and status.",
                 "# TYPE joulecast_requests_total counter"]
        lines += [f'joulecast_requests_total{{route="{r}",status="{s}"}} {n}' for (r, s), n in sorted(self.counts.items())]
        lines += ["# HELP joulecast_request_seconds Request latency.", "# TYPE joulecast_request_seconds histogram"]
        for route, counts in sorted(self.buckets.items()):
            for bound, n in zip((*_BUCKETS, "+Inf"), counts):
                lines.append(f'joulecast_request_seconds_bucket{{route="{route}",le="{bound}"}} {n}')
            lines.append(f'joulecast_request_seconds_sum{{route="{route}"}} {self.sums[route]:.6f}')
            lines.append(f'joulecast_request_seconds_count{{route="{route}"}} {counts[-1]}')
        return "\n".join(lines) + "\n"


# What a browser opens without the API key: liveness, and the docs (/docs, /redoc, the schema they read and their
# scripts), which show what the service takes and compute nothing; every estimate wants the key.
_OPEN_ROUTES = frozenset({"/healthz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
_DOCS_STATIC = "/static-offline-docs/"  # fastapi-offline's scripts


def _open_route(route: str) -> bool:
    return route in _OPEN_ROUTES or route.startswith(_DOCS_STATIC)


def create_app(estimator: str | None = None, tracking_uri: str | None = None, api_key: str | None = None) -> Any:
    """The FastAPI application (`api_key` default: $JOULECAST_API_KEY; none: no key asked for)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse

    from joulecast.data.gpus import catalog

    key = api_key if api_key is not None else os.environ.get("JOULECAST_API_KEY")
    holder = None if estimator == "physics" else ModelHolder(estimator, tracking_uri)
    metrics = Metrics()
    try:  # /docs and /redoc served from this process: a service with no way out, as a datacenter's often is, shows
        # its docs, where FastAPI's own pages load their scripts from a CDN and stay blank
        from fastapi_offline import FastAPIOffline as make_app
    except ImportError:
        make_app = FastAPI
    app = make_app(title="joulecast", version="0.1.0",
                   description="GPU energy (J), time (s) and power (W) of AI workloads, with intervals.")

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        start, route = time.perf_counter(), request.url.path
        if key and not _open_route(route):
            given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
            if not hmac.compare_digest(given.encode(), key.encode()):
                response = JSONResponse({"detail": "missing or wrong API key (X-API-Key header)"}, status_code=401)
                metrics.observe(route, 401, time.perf_counter() - start)
                return response
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            response = JSONResponse({"detail": f"body over {MAX_BODY_BYTES:,} bytes"}, status_code=413)
        else:
            response = await call_next(request)
        metrics.observe(route, response.status_code, time.perf_counter() - start)
        return response

    def answer(handler: Any, body: Any, page: bool = False) -> Any:
        """The handler's answer to `body` as JSON (a page's as HTML, `page`), or the 413 or 422 naming the field."""
        if body is too_large:
            return JSONResponse({"detail": f"body over {MAX_BODY_BYTES:,} bytes"}, status_code=413)
        model = holder.current() if holder is not None else None
        model = "physics" if model is None else model  # none held, or a checkout without a shipped model
        who = holder.describe() if holder is not None else "physics"
        if not isinstance(body, dict):
            return JSONResponse({"detail": [{"loc": ["body"], "msg": "expected a JSON object"}], "estimator": who},
                                status_code=422)
        try:  # strict JSON, as the CLI's --json: a physics estimate's missing interval (NaN) is null, not a 500
            if page:
                return HTMLResponse(handler(body, model))
            return JSONResponse(finite({**handler(body, model), "estimator": who}))
        except JoulecastError as exc:
            field = getattr(exc, "field", "body")
            return JSONResponse({"detail": [{"loc": ["body", field], "msg": str(exc)}], "estimator": who},
                                status_code=422)

    too_large = object()  # a body sent without its length (chunked) that turns out too large

    async def _json(request: Request) -> Any:
        body = b""
        async for chunk in request.stream():  # read no further than the limit
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                return too_large
        try:
            import json

            return json.loads(body or b"null")
        except ValueError:
            return None

    @app.post("/v1/estimate", openapi_extra=_body_docs("/v1/estimate"),
              summary="One workload (the CLI's fields) or a job (phase generate, serve or train-run), with the carbon "
                      "of its energy (grid or carbon_intensity, pue)")
    async def post_estimate(request: Request) -> Any:
        return answer(estimate_one, await _json(request))

    @app.post("/v1/estimate/report", openapi_extra=_body_docs("/v1/estimate/report"), response_class=HTMLResponse,
              summary="A serving load window by window (phase serve, window_s with window_rates or requests) as a "
                      "self-contained HTML page, as estimate --report writes it")
    async def post_estimate_report(request: Request) -> Any:
        return answer(serve_page, await _json(request), page=True)

    @app.post("/v1/estimate/batch", openapi_extra=_body_docs("/v1/estimate/batch"),
              summary=f"Up to {MAX_BATCH_ROWS:,} configurations: {{\"rows\": [...]}}")
    async def post_batch(request: Request) -> Any:
        return answer(estimate_rows, await _json(request))

    @app.post("/v1/sweep", openapi_extra=_body_docs("/v1/sweep"),
              summary=f"A grid of configurations (joulecast sweep's lists; at most {MAX_SWEEP_JOBS:,} jobs, "
                      f"{MAX_SWEEP_RATES} serving loads by request rate, or "
                      f"{MAX_BATCH_ROWS:,} passes): points, Pareto front, best")
    async def post_sweep(request: Request) -> Any:
        return answer(sweep_points, await _json(request))

    @app.post("/v1/sweep/report", openapi_extra=_body_docs("/v1/sweep/report"), response_class=HTMLResponse,
              summary="/v1/sweep's body as a self-contained HTML page (its Pareto front drawn), as sweep --report "
                      "writes it")
    async def post_sweep_report(request: Request) -> Any:
        return answer(sweep_page, await _json(request), page=True)

    @app.post("/v1/plan", openapi_extra=_body_docs("/v1/plan"),
              summary="A training job's strategies side by side: a job file's content as JSON (README 'Job files'), "
                      "catalog names only")
    async def post_plan(request: Request) -> Any:
        return answer(plan_job, await _json(request))

    @app.get("/v1/gpus", summary="The GPU catalog")
    def get_gpus() -> Any:
        return [s.to_dict() for s in catalog().values()]

    @app.get("/v1/models", summary="The model catalog")
    def get_models() -> Any:
        from joulecast.features.lowering import model_listing

        return model_listing()

    @app.get("/", summary="What the service offers: its routes and where their documentation is")
    def index() -> Any:  # a browser or a script at the bare address gets a map, not a 404
        routes = {r.path: getattr(r, "summary", None) for r in app.routes
                  if getattr(r, "include_in_schema", False) and r.path != "/"}
        return {"service": "joulecast", "docs": "/docs", "openapi": "/openapi.json", "routes": routes}

    @app.get("/healthz", summary="Liveness: the service answers, and which estimator it holds")
    def healthz() -> Any:
        return {"status": "ok", "estimator": holder.describe() if holder is not None else "physics"}

    @app.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
    def get_metrics() -> Any:
        return PlainTextResponse(metrics.text(), media_type="text/plain; version=0.0.4")

    return app


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), for uvicorn to serve on: a port out of range, a host that does not resolve
    or an address taken is one line naming the option (uvicorn itself logs an error line and exits 1 or 3, or raises
    OverflowError for a port past 65535)."""
    if not 1 <= port <= 65535:
        raise InputError("--port", f"must be between 1 and 65535, got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError("--host", f"cannot resolve {host!r} ({getattr(exc, 'strerror', None) or exc})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn sets it: a restart need not wait
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        field = "--port" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "--host"
        raise InputError(field, f"cannot listen on {host}:{port} ({exc.strerror})") from None
    return sock


def serve(host: str, port: int, estimator: str | None, tracking_uri: str | None) -> None:
    """Serve until interrupted, on an address checked before the estimator loads; where, on stderr."""
    import uvicorn

    sock = listening_socket(host, port)
    try:
        app = create_app(estimator, tracking_uri)
        shown = f"[{host}]" if ":" in host else host
        print(f"joulecast serving on http://{shown}:{port} (docs at /docs; Ctrl-C stops)", file=sys.stderr)
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    finally:
        sock.close()
