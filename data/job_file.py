"""The job file of `joulecast plan`: a training job, the sites that could run it, the links between them, and the
strategies to compare; read into typed records, every bad field one `InputError` naming it (README, "Job files").

The reference data it draws on (link classes, node power, grid carbon, PUE) are `data/distributed/*.yaml`, each
number sourced there.
"""

from __future__ import annotations

import csv
import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import yaml

from joulecast.data.errors import InputError, UnknownFieldError, fields_under, require, require_switch
from joulecast.data.files import kind_of, load_yaml, read_text
from joulecast.data.fusions import check_fusions, check_overhead
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.kernels import dtype_name
from joulecast.data.models import TEXT_TRAINING_OPTIONS, check_config, is_vision, model_entry
from joulecast.data.workload import (AUTO_MICRO_BATCH, LAUNCH_MODES, MAX_LOADER_RATE, MIN_LOADER_RATE,
                                     check_host_dispatch)

AUTO_LAYOUT = "auto"  # a job file's layout as this word: the least that fits every site's GPUs

DATA_DIR = Path(__file__).parent / "distributed"
STRATEGIES = ("ddp", "fsdp", "diloco", "streaming-diloco", "fedavg")
LINK_MODES = ("dedicated", "internet")
STRAGGLER_POLICIES = ("wait", "fewer-steps")
# Bits per exchanged element the strategies accept: fp32, bf16, int8/fp8, fp4 (Streaming DiLoCo's E3M0).
BITS = (32, 16, 8, 4)
# the bounds of a strategy's H, P and tau and of a link's Gbit/s, which a plan's sweep checks its axes against too.
# A link of at least MIN_LINK_GBPS (1 Mbit/s: a hundredth of the slowest a decentralised internet run reports,
# Covenant-72B's 110 Mb/s uplinks, shared/reference/distributed.md [Cov]): any rate above 0 once passed, and
# 2.2e-308 Gbit/s (found by tests/test_hostile_inputs.py) made a plan's time infinite and its carbon hours an
# OverflowError.
MIN_LINK_GBPS = 1e-3
AXIS_BOUNDS = {"H": dict(integer=True, low=1), "P": dict(integer=True, low=1), "tau": dict(integer=True, low=0),
               "gbps": dict(low=MIN_LINK_GBPS, unit="Gbit/s")}


@functools.cache
def reference(name: str) -> dict[str, Any]:
    """One of the shipped reference tables: links, systems, grid_carbon."""
    return yaml.safe_load((DATA_DIR / f"{name}.yaml").read_text())


@dataclass(frozen=True, slots=True)
class LocalEnergy:
    """Energy available on site, e.g. solar: `kw` from hour `start_hour` to `end_hour` each day (local time); an
    end before the start runs over midnight (night wind: 22 to 6)."""

    kw: float
    start_hour: float
    end_hour: float


@dataclass(frozen=True, slots=True)
class Site:
    name: str
    gpu: str
    gpus: int
    gpus_per_node: int
    intra: str                  # link class within a node
    inter_node: str             # link class between the site's nodes
    host_w: float               # per node, beyond its GPUs
    switch_w_per_node: float
    pue: float
    grid: str                   # a country code of grid_carbon.yaml, or "series"
    carbon_g_per_kwh: float     # the annual average (series: its mean)
    carbon_series: tuple[float, ...] = ()   # hourly gCO2/kWh from the job's start, repeating
    local_energy: LocalEnergy | None = None
    wait_w: float | None = None  # GPU power while waiting on communication (default: see estimator.plan)
    sm_clock_mhz: float | None = None   # every GPU's locked SM clock (default: the maximum)
    power_limit_w: float | None = None  # every GPU's power limit (default: the GPU's); both checked against the GPU
    # the site's host time to dispatch an eager launch (s), where measured (default: `arch.HOST_DISPATCH_S`, the
    # intervals spanning the measured hosts)
    host_dispatch_s: float | None = None

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)


@dataclass(frozen=True, slots=True)
class Link:
    a: str
    b: str
    gbps: float
    rtt_ms: float
    mode: str


@dataclass(frozen=True, slots=True)
class Strategy:
    kind: str
    name: str
    H: int = 1                   # inner steps between synchronisations (DiLoCo, streaming, fedavg)
    P: int = 1                   # fragments (streaming)
    tau: int = 0                 # overlap steps (streaming)
    bits: int = 16               # bits per exchanged element
    participation: float = 1.0   # share of clients in a round (fedavg)


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    model: str | dict[str, Any]       # a catalog name or an inline config
    model_name: str
    seq: int
    global_batch: int
    micro_batch: int | str            # or AUTO_MICRO_BATCH: each site the largest that fits its GPUs
    steps: int
    dtype: str
    lora_rank: int
    lora_targets: str
    recompute: str
    optimizer: str
    layout: dict[str, int]            # tp, pp, cp, vpp, zero; dp follows from the GPU count
    tp_overlap: bool
    fp8_attention: bool               # fused attention in FP8 too (with dtype fp8)
    eval_tokens: int
    startup_s: float                  # before the steady state: the first steps' warm-up (graph capture, set-up)
    sites: tuple[Site, ...]
    links: tuple[Link, ...]
    strategies: tuple[Strategy, ...]
    stragglers: str
    failures_per_island_hour: float
    restart_s: float
    checkpoint_every_s: float
    start_hour: float
    estimator: str | None = None
    launch_mode: str = "eager"        # eager, or graph (CUDA graphs: no host dispatch a kernel)
    head_tokens: int | None = None    # tokens a sequence the LM head and loss run over (None: every token)
    head_outputs: int | None = None   # a task head's width in place of the LM head (None: the vocabulary)
    fusions: tuple[str, ...] = ()     # kernel fusions of the training stack (`joulecast.data.fusions`)
    # seconds a layer and forward pass of a micro-batch that the framework adds to the kernels (host-side work they do
    # not hide): training forwards (and their recomputation) and evaluation forwards, at the micro-step's power
    forward_overhead_s: float = 0.0
    evals: int = 1                    # evaluations the eval tokens are split into, each in whole global batches
    eval_overhead_s: float = 0.0      # s each evaluation takes beyond its forwards (switching in and out), GPUs waiting
    # a rank's micro-batch time varies by this share (coefficient of variation, independent across ranks and
    # micro-batches): each synchronous step waits for its latest rank (`estimator.plan`, method 2b)
    step_jitter: float = 0.0
    source: str = field(default="", compare=False)
    unit: str = "token"               # what `seq` and `tokens` count: a text model's tokens, or images (`seq` 1)
    layout_auto: bool = False         # layout "auto": the least that fits every site (`estimator.plan.fitting_layout`)
    # samples (sequences, images) a second a replica's input pipeline delivers; None: one that keeps up
    loader_rate: float | None = None

    @property
    def tokens(self) -> int:
        return self.steps * self.global_batch * self.seq

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.sites)


# The largest integer a job file may give (2^53, the last exactly representable as a float): products of a few of
# them (tokens = steps x global batch x seq) stay finite.
_MAX_INTEGER = 2**53
# A link's round trip at most a minute (an assumption, a hundredfold margin): a geostationary satellite hop, the
# longest path in use, takes 4 x 35,786 km (up and down, each way) / c = 0.48 s before processing (derived from the
# geostationary altitude); more is no network path (and a round trip of 1e305 ms overflowed the plan's hours of
# carbon to read).
MAX_RTT_MS = 60_000.0


def _number(raw: Mapping[str, Any], key: str, where: str, default: Any = None, **bounds: Any) -> Any:
    value = raw.get(key, default)
    name = f"{where}.{key}" if where else key
    if value is None:
        raise InputError(name, "is required")
    return check_number(value, name, **bounds)


def check_number(value: Any, name: str, *, low: float | None = 0.0, high: float | None = None, integer: bool = False,
                 strict: bool = False, unit: str = "") -> Any:
    """`value` as a job file takes a number (an integer where `integer`, up to 2^53 unless `high`; at least, or
    with `strict` above, `low`; in `unit`, which the line gives), else one line naming `name`; numpy's numbers too,
    as an API's lists may hold."""
    shown = value.item() if isinstance(value, np.generic) else value
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating))
            or (integer and not (math.isfinite(value) and value == int(value)))):
        raise InputError(name, f"must be {'an integer' if integer else 'a number'}, got {shown!r}")
    if not math.isfinite(value):
        raise InputError(name, f"must be a finite number, got {shown!r}")
    # an integer's implicit bound is said only by a value past it
    high = _MAX_INTEGER if integer and high is None and value > _MAX_INTEGER else high
    if (low is not None and (value <= low if strict else value < low)) or (
            high is not None and value > high):
        bounds = f"{'above' if strict else 'at least'} {low:g}" if low is not None else ""
        bounds += (" and " if bounds and high is not None else "") + (
            f"at most {f'{int(high):,}' if integer else f'{high:g}'}" if high is not None else "")
        raise InputError(name, f"must be {bounds}{' ' + unit if unit else ''}, got {shown!r}")
    return int(value) if integer else float(value)


def check_bits(value: Any, name: str) -> int:
    """A strategy's bits a value (one of BITS), as a job file and a plan's sweep take them; else one line."""
    value = check_number(value, name, integer=True)
    require(value in BITS, name, f"must be one of {', '.join(map(str, BITS))}, got {value}")
    return value


def _choice(raw: Mapping[str, Any], key: str, where: str, allowed: tuple[str, ...] | list[str], default: Any) -> str:
    value = raw.get(key, default)
    require(value in allowed, f"{where}.{key}" if where else key,
            f"unknown {value!r}; allowed: {', '.join(map(str, allowed))}")
    return str(value)


def _known(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise UnknownFieldError(f"{where}.{unknown[0]}" if where else unknown[0], unknown[0], sorted(allowed))


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    require(isinstance(value, Mapping), where, f"must be a mapping of fields, got {kind_of(value)}")
    return value


# The most gCO2e a kWh an hour of a grid may be given (a carbon series, `joulecast.data.carbon`'s intensities): over
# any grid's annual average (coal-fired generation is about 1,000).
MAX_G_PER_KWH = 2_000.0
MAX_SERIES_HOURS = 24 * 366  # the longest hourly series, a year of hours: a file's and a request's alike


def read_carbon_series(path: str | Path, where: str) -> tuple[float, ...]:
    """An hourly carbon series: a CSV with a g_per_kwh column (one row an hour, at most MAX_SERIES_HOURS)."""
    text = read_text(path, where)
    rows = list(csv.DictReader(text.splitlines()))
    require(rows and "g_per_kwh" in rows[0], where, f"{path}: needs a g_per_kwh column, one row an hour")
    try:
        values = tuple(float(r["g_per_kwh"]) for r in rows)
    except (TypeError, ValueError):
        raise InputError(where, f"{path}: g_per_kwh must be numbers") from None
    require(all(0 <= v <= MAX_G_PER_KWH for v in values), where, f"{path}: g_per_kwh must lie in 0-{MAX_G_PER_KWH:.0f}")
    require(len(values) <= MAX_SERIES_HOURS, where, f"{path}: must hold 1 to {MAX_SERIES_HOURS:,} hourly figures "
                                                    f"(a year of hours), got {len(values):,}")
    return values


_SITE_FIELDS = {"name", "gpu", "gpus", "gpus_per_node", "system", "intra", "inter_node", "host_w", "switch_w_per_node",
                "pue", "grid", "carbon_series", "local_energy", "wait_w", "sm_clock_mhz", "power_limit_w",
                "host_dispatch_s"}


def _site(raw: Any, i: int, base: Path) -> Site:
    where = f"sites[{i}]"
    raw = _mapping(raw, where)
    _known(raw, _SITE_FIELDS, where)
    systems, links = reference("systems"), reference("links")
    system = _choice(raw, "system", where, list(systems), "generic")
    defaults = systems[system]
    name = str(raw.get("name") or f"site{i}")
    try:
        spec = lookup_gpu(str(raw.get("gpu", "")))
    except InputError as exc:  # the catalog's message (close names), under this file's field name
        raise InputError(f"{where}.gpu", str(exc).split(": ", 1)[-1]) from None
    in_site = [k for k in links if not k.startswith("wan")]  # the link classes within a site
    # a system without its own link (generic) takes the GPU's: NVLink on SXM boards, PCIe on PCIe cards
    intra = _choice(raw, "intra", where, in_site, defaults.get("intra") or spec.peer_link)
    inter = _choice(raw, "inter_node", where, in_site, defaults["inter_node"])
    carbon = reference("grid_carbon")
    series: tuple[float, ...] = ()
    if raw.get("carbon_series") is not None:
        series = read_carbon_series(base / str(raw["carbon_series"]), f"{where}.carbon_series")
        grid, intensity = "series", sum(series) / len(series)
    else:
        grid = _choice(raw, "grid", where, list(carbon["g_per_kwh"]), "WORLD")
        intensity = float(carbon["g_per_kwh"][grid])
    local = None
    if raw.get("local_energy") is not None:
        le = _mapping(raw["local_energy"], f"{where}.local_energy")
        _known(le, {"kw", "hours"}, f"{where}.local_energy")
        hours = le.get("hours", [0, 24])
        require(isinstance(hours, list) and len(hours) == 2
                and all(isinstance(h, (int, float)) and not isinstance(h, bool) for h in hours)
                and 0 <= hours[0] < 24 and 0 <= hours[1] <= 24 and hours[0] != hours[1], f"{where}.local_energy.hours",
                f"must be [start, end] hours of the day, 0 <= start < 24, 0 <= end <= 24, start != end (an end "
                f"before the start runs over midnight), got {hours!r}")
        local = LocalEnergy(_number(le, "kw", f"{where}.local_energy"), float(hours[0]), float(hours[1]))
    gpus = _number(raw, "gpus", where, integer=True, low=1)
    return Site(name=name, gpu=spec.name, gpus=gpus,
                gpus_per_node=_number(raw, "gpus_per_node", where, defaults["gpus_per_node"], integer=True, low=1),
                intra=intra, inter_node=inter, host_w=_number(raw, "host_w", where, defaults["host_w"]),
                switch_w_per_node=_number(raw, "switch_w_per_node", where, defaults["switch_w_per_node"]),
                pue=_number(raw, "pue", where, carbon["pue"]["average"], low=1.0, high=3.0), grid=grid,
                carbon_g_per_kwh=intensity, carbon_series=series, local_energy=local,
                wait_w=None if raw.get("wait_w") is None else _number(raw, "wait_w", where, high=spec.power_limit_w),
                # numbers here; the range each GPU allows is checked where the site is estimated (estimator.plan)
                **{key: None if raw.get(key) is None else _number(raw, key, where, strict=True)
                   for key in ("sm_clock_mhz", "power_limit_w")},
                host_dispatch_s=check_host_dispatch(raw.get("host_dispatch_s"), f"{where}.host_dispatch_s"))


def _strategy(raw: Any, i: int) -> Strategy:
    where = f"strategies[{i}]"
    raw = {"kind": raw} if isinstance(raw, str) else _mapping(raw, where)
    _known(raw, {"kind", "name", "H", "P", "tau", "bits", "participation"}, where)
    kind = _choice(raw, "kind", where, STRATEGIES, None)
    sync = kind in ("diloco", "streaming-diloco", "fedavg")
    H = _number(raw, "H", where, 100 if sync else 1, **AXIS_BOUNDS["H"])
    require(sync or H == 1, f"{where}.H", f"applies to diloco, streaming-diloco and fedavg, not {kind}")
    P = _number(raw, "P", where, 1, **AXIS_BOUNDS["P"])
    tau = _number(raw, "tau", where, 0, **AXIS_BOUNDS["tau"])
    if kind == "streaming-diloco":  # torchft's constraints: sync_every % fragments == 0, delay < H / P
        require(H % P == 0, f"{where}.P", f"{P} fragments must divide H = {H}")
        require(tau < H // P, f"{where}.tau", f"must be below H / P = {H // P}, got {tau}")
    else:
        require(P == 1 and tau == 0, f"{where}.P" if P != 1 else f"{where}.tau", "applies to streaming-diloco only")
    bits = check_bits(raw.get("bits", 16), f"{where}.bits")
    participation = _number(raw, "participation", where, 1.0, low=0.0, high=1.0, strict=True)
    require(kind == "fedavg" or participation == 1.0, f"{where}.participation", "applies to fedavg only")
    name = str(raw.get("name") or (kind if not sync else f"{kind} H={H}" + (f" P={P} tau={tau}" if P > 1 else "")
                                   + f" {bits}-bit"))
    return Strategy(kind=kind, name=name, H=H, P=P, tau=tau, bits=bits, participation=participation)


# A text model's job options, none of which a vision model's plan takes: its training options and a tensor-parallel
# layout's
_TEXT_ONLY = (*TEXT_TRAINING_OPTIONS, "tp_overlap", "fp8_attention")
_JOB_FIELDS = {"name", "model", "seq", "global_batch", "micro_batch", "steps", "tokens", "dtype", "lora_rank",
               "lora_targets", "recompute", "optimizer", "layout", "tp_overlap", "fp8_attention", "eval_tokens",
               "startup_s", "sites", "links", "strategies", "stragglers", "failures", "start_hour", "estimator",
               "launch_mode", "head_tokens", "head_outputs", "fusions", "forward_overhead_s", "evals",
               "eval_overhead_s", "step_jitter", "loader_rate"}


def parse_job(raw: Any, base: Path = Path("."), source: str = "") -> Job:
    """A job from its parsed YAML mapping; `base` resolves relative file names (carbon series)."""
    raw = _mapping(raw, "job")
    _known(raw, _JOB_FIELDS, "")
    model = raw.get("model")
    if isinstance(model, Mapping):
        require(isinstance(model.get("config"), Mapping), "model.config", "an inline model needs a config mapping "
                "(Hugging Face config.json fields) and a name")
        model_name = str(model.get("name") or model["config"].get("model_type"))
        with fields_under("model"):  # config.head_dim -> model.config.head_dim, as the file nests it
            model = {**check_config(model["config"]), "name": model_name}
    else:
        require(isinstance(model, str) and model, "model", "a catalog model name or {name, config}")
        model = model_name = str(model_entry(model)["name"])  # by its catalog name, as an estimate names it
    # a vision model's plan is over images: no sequence, none of a text model's options, data-parallel only
    images = is_vision(model if isinstance(model, Mapping) else model_entry(model)["config"])
    if images:
        for key in ("seq", *_TEXT_ONLY):
            require(key not in raw, key, f"has no effect on {model_name}, a vision model (a plan over images: "
                                         f"global_batch images a step); leave it out")
    seq = 1 if images else _number(raw, "seq", "", integer=True, low=1)
    global_batch = _number(raw, "global_batch", "", integer=True, low=1)
    micro_batch = raw.get("micro_batch", 1)
    if isinstance(micro_batch, str):  # the word auto, each site's largest (`estimator.plan.site_compute`)
        require(micro_batch == AUTO_MICRO_BATCH, "micro_batch", f"must be a whole number or {AUTO_MICRO_BATCH!r} "
                f"(each site the largest dividing its replicas' share of global_batch that fits its GPUs), got "
                f"{micro_batch!r}")
    else:
        micro_batch = _number(raw, "micro_batch", "", 1, integer=True, low=1)
    require(("steps" in raw) != ("tokens" in raw), "steps", "give steps or tokens, one of them")
    steps = (_number(raw, "steps", "", integer=True, low=1) if "steps" in raw
             else -(-_number(raw, "tokens", "", low=1, integer=True) // (global_batch * seq)))
    head_tokens = _number(raw, "head_tokens", "", integer=True, low=1) if "head_tokens" in raw else None
    require(head_tokens is None or head_tokens <= seq, "head_tokens",
            f"{head_tokens} is more than the sequence's {seq} tokens")
    head_outputs = _number(raw, "head_outputs", "", integer=True, low=1) if "head_outputs" in raw else None
    layout = raw.get("layout", {})
    layout_auto = isinstance(layout, str) and layout == AUTO_LAYOUT  # the plan finds the least that fits every site
    require(layout_auto or not isinstance(layout, str), "layout", f"must be a mapping of tp, pp, cp, vpp and zero, or "
            f"{AUTO_LAYOUT!r} (the least that fits every site's GPUs), got {layout!r}")
    layout = {} if layout_auto else _mapping(layout, "layout")
    _known(layout, {"tp", "pp", "cp", "vpp", "zero"}, "layout")
    lay = {k: _number(layout, k, "layout", 1, integer=True, low=1) for k in ("tp", "pp", "cp", "vpp")}
    lay["zero"] = _number(layout, "zero", "layout", 0, integer=True, low=0, high=3)
    require(not images or (lay["tp"], lay["pp"], lay["cp"], lay["zero"]) == (1, 1, 1, 0), "layout",
            f"{model_name}'s plan is data-parallel: tp, pp and cp 1, zero 0 (its layers split over no tokens), got "
            f"tp {lay['tp']}, pp {lay['pp']}, cp {lay['cp']}, zero {lay['zero']}")
    sites_raw = raw.get("sites")
    require(isinstance(sites_raw, list) and sites_raw, "sites", "a list of at least one site")
    sites = tuple(_site(s, i, base) for i, s in enumerate(sites_raw))
    names = [s.name for s in sites]
    require(len(set(names)) == len(names), "sites", f"site names must differ, got {names}")
    per_replica = lay["tp"] * lay["pp"] * lay["cp"]
    for i, s in enumerate(sites):
        require(s.gpus % per_replica == 0, f"sites[{i}].gpus",
                f"{s.gpus} GPUs do not hold whole replicas of TP x PP x CP = {per_replica}")
    links_raw = raw.get("links") or []
    require(isinstance(links_raw, list), "links", f"a list of links between sites, got {kind_of(links_raw)}")
    links = []
    for i, link in enumerate(links_raw):
        where = f"links[{i}]"
        link = _mapping(link, where)
        _known(link, {"between", "gbps", "rtt_ms", "mode"}, where)
        ends = link.get("between")
        require(isinstance(ends, list) and len(ends) == 2 and all(e in names for e in ends) and ends[0] != ends[1],
                f"{where}.between", f"two different site names of {names}, got {ends!r}")
        links.append(Link(ends[0], ends[1], _number(link, "gbps", where, **AXIS_BOUNDS["gbps"]),
                          _number(link, "rtt_ms", where, 0.0, high=MAX_RTT_MS),
                          _choice(link, "mode", where, LINK_MODES, "dedicated")))
    if len(sites) > 1:
        connected(names, links)
    strategies_raw = raw.get("strategies") or ["ddp"]
    require(isinstance(strategies_raw, list), "strategies", "a list of strategies")
    strategies = tuple(_strategy(s, i) for i, s in enumerate(strategies_raw))
    failures = _mapping(raw.get("failures", {}), "failures")
    _known(failures, {"per_island_hour", "restart_s", "checkpoint_every_s"}, "failures")
    eval_tokens = _number(raw, "eval_tokens", "", 0, integer=True)
    evals = _number(raw, "evals", "", 1, integer=True, low=1)
    require(evals == 1 or eval_tokens > 0, "evals", "splits eval_tokens, which the job does not give")
    eval_overhead_s = _number(raw, "eval_overhead_s", "", 0.0, high=3600.0)
    require(eval_overhead_s == 0 or eval_tokens > 0, "eval_overhead_s", "needs eval_tokens (the job evaluates)")
    return Job(
        name=str(raw.get("name") or model_name), model=model, model_name=model_name, seq=seq,
        global_batch=global_batch, micro_batch=micro_batch, steps=steps,
        dtype=str(dtype_name(raw.get("dtype", "bf16"))),
        lora_rank=_number(raw, "lora_rank", "", 0, integer=True), lora_targets=str(raw.get("lora_targets", "all")),
        recompute=str(raw.get("recompute", "none")), optimizer=str(raw.get("optimizer", "adamw")), layout=lay,
        tp_overlap=require_switch(raw.get("tp_overlap", False), "tp_overlap"),
        fp8_attention=require_switch(raw.get("fp8_attention", False), "fp8_attention"),
        eval_tokens=eval_tokens, evals=evals, eval_overhead_s=eval_overhead_s,
        step_jitter=_number(raw, "step_jitter", "", 0.0, high=0.5),
        startup_s=_number(raw, "startup_s", "", 0.0, high=86400.0),
        sites=sites, links=tuple(links), strategies=strategies,
        stragglers=_choice(raw, "stragglers", "", STRAGGLER_POLICIES, "wait"),
        failures_per_island_hour=_number(failures, "per_island_hour", "failures", 0.0, high=10.0),
        restart_s=_number(failures, "restart_s", "failures", 600.0),
        checkpoint_every_s=_number(failures, "checkpoint_every_s", "failures", 3600.0, strict=True),
        start_hour=_number(raw, "start_hour", "", 0.0, high=24.0), estimator=raw.get("estimator"),
        launch_mode=_choice(raw, "launch_mode", "", LAUNCH_MODES, "eager"), head_tokens=head_tokens,
        head_outputs=head_outputs, fusions=check_fusions(raw.get("fusions")),
        forward_overhead_s=check_overhead(raw.get("forward_overhead_s", 0.0)), source=source,
        unit="image" if images else "token", layout_auto=layout_auto,
        loader_rate=(_number(raw, "loader_rate", "", low=MIN_LOADER_RATE, high=MAX_LOADER_RATE)
                     if "loader_rate" in raw else None))


def connected(names: list[str], links: list[Link]) -> None:
    reached, frontier = {names[0]}, [names[0]]
    while frontier:
        here = frontier.pop()
        for link in links:
            for a, b in ((link.a, link.b), (link.b, link.a)):
                if a == here and b not in reached:
                    reached.add(b)
                    frontier.append(b)
    missing = [n for n in names if n not in reached]
    if missing:
        raise InputError("links", f"no link reaches site {missing[0]!r}; every site needs a path to the others")


def load_job(path: str | os.PathLike | Mapping) -> Job:
    """Read and validate a job file (YAML), or a job's mapping as the file would parse (its file names relative to
    the working folder)."""
    if isinstance(path, Mapping):
        return parse_job(path)
    if not isinstance(path, (str, os.PathLike)):
        raise InputError("job", f"a job file's path or its mapping, got {kind_of(path)}")
    text = read_text(path, "job")
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        raise InputError("job", f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return parse_job(raw, Path(path).parent, str(path))
