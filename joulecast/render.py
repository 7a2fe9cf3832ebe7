"""Text renderings for the CLI (the only place, with cli.py, that prints)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import numpy as np
import pandas as pd


def si(value: float, unit: str) -> str:
    """`value` in `unit` with the SI prefix that reads best, three significant digits: 853 mJ, 2.25 MJ, 3 G."""
    for factor, prefix in ((1e-6, "µ"), (1e-3, "m"), (1.0, ""), (1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")):
        if abs(value) < factor * 1000:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _time_unit(seconds: float) -> tuple[float, str]:
    """The unit a time reads best in, and its seconds: ns, µs, ms and s, then minutes, hours and days."""
    for limit, factor, unit in ((1e-6, 1e-9, "ns"), (1e-3, 1e-6, "µs"), (1.0, 1e-3, "ms"), (120.0, 1.0, "s"),
                                (7200.0, 60.0, "min"), (172800.0, 3600.0, "h")):
        if abs(seconds) < limit:
            return factor, unit
    return 86400.0, "days"


def _in_unit(value: float, unit_of: Any) -> str:
    """`value` in the unit `unit_of` says it reads best in (a function of it: (its factor, the unit's name))."""
    factor, unit = unit_of(value)
    return f"{_g4(value / factor)} {unit}"


def _range_in_unit(low: float, high: float, unit_of: Any) -> str:
    """Two values in the unit the higher reads best in."""
    factor, unit = unit_of(max(abs(low), abs(high)))
    return f"{_g4(low / factor)} - {_g4(high / factor)} {unit}"


def duration(seconds: float) -> str:
    """A time in the unit that reads best (never megaseconds)."""
    return _in_unit(seconds, _time_unit)


def duration_range(low: float, high: float) -> str:
    """Two times in the unit the higher reads best in ('1.987 - 2.905 h', not '119.2 min - 2.905 h')."""
    return _range_in_unit(low, high, _time_unit)


def grid_place(name: str) -> str:
    """Where a point's carbon was drawn, as its line says it: a country's grid, or the intensity or hourly series the
    user gave (`data.carbon.grid_at` names them 'given' and 'series')."""
    return {"given": "at the given intensity", "series": "on the given hourly series"}.get(name, f"on {name}'s grid")


def kwh_a_day(power_w: float) -> str:
    """A steady load's energy over a day at its average power: serving runs around the clock."""
    return f"{figure(power_w * 24 / 1e3)} kWh a day"


def plural(n: int, noun: str) -> str:
    """`n` `noun`s, thousands separated: 1 site, 2 sites, 9,537 steps."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def figure(value: float, zeros: bool = False, digits: int = 4) -> str:
    """A figure to `digits` significant digits as people write it: 35,240 and 1,000,000, not 3.524e+04 (from 1,000
    up, thousands separated); 0.01921 and 0.00008946 (a serving step's grams of CO2e), not 8.946e-05, down to a
    millionth, as they are; trailing zeros kept where `zeros` (3.000 J, not 3 J)."""
    if math.isfinite(value) and abs(float(f"{value:.{digits}g}")) >= 1000:
        return f"{float(f'{value:.{digits}g}'):,.0f}"
    if math.isfinite(value) and 1e-6 <= abs(value) < 1e-4:  # where g would switch to an exponent
        rounded = float(f"{value:.{digits}g}")
        text = f"{rounded:.{digits - 1 - math.floor(math.log10(abs(rounded)))}f}"
        return text if zeros else text.rstrip("0")
    return f"{value:#.{digits}g}".rstrip(".") if zeros else f"{value:.{digits}g}"


def gib(value: float) -> str:
    """Memory in GiB to three significant digits: 33.4, 133, 1,220."""
    return figure(value, digits=3)


def _g4(value: float) -> str:
    """Four significant digits, trailing zeros kept (3.000 J, not 3 J), no bare trailing point."""
    return figure(value, zeros=True)


def _unstated_host() -> str:
    """What an estimate whose machine stated no host dispatch says of it."""
    from joulecast.features.arch import HOST_DISPATCH_RANGE_S

    return f" by default (the interval: hosts of {duration_range(*HOST_DISPATCH_RANGE_S)})"


def _engine_spread(name: str) -> str:
    """What a serving estimate's interval says of its engine's host work where the engine records the range it was
    measured over (`data/serving_engines.yaml`'s `host_ms_per_sequence_range`); nothing where it records none."""
    from joulecast.data import engines

    if engines.normal_engine(name) is None:
        return ""
    low, high = engines.engine(name).host_s_per_sequence_range
    return (f"; the interval: {name}'s host work of {duration_range(low, high)} a request a step, as measured"
            if high > low else "")


def _fp8_reach(dtype: str) -> str:
    """What a serving estimate's interval says of fp8 weights, where it reaches bf16's cost
    (`estimator.serving.reaches_bf16`)."""
    from joulecast.estimator.serving import reaches_bf16  # loaded already: its ServeEstimate is being rendered

    return ("; up to the cost in bf16: fp8 serving's scaled GEMMs are not modelled, and measured deployments ran as "
            "dear or dearer at small batches (1.5-1.6x bf16's J a token at 8 requests)" if reaches_bf16(dtype) else "")


def _mass_unit(grams: float) -> tuple[float, str]:
    """The unit a mass reads best in (mg, g, kg, t), and its grams."""
    return next(((f, u) for f, u in ((1e6, "t"), (1e3, "kg"), (1.0, "g")) if abs(grams) >= f), (1e-3, "mg"))


def mass(grams: float) -> str:
    """A mass of CO2e in the unit that reads best, four significant digits."""
    return _in_unit(grams, _mass_unit)


def mass_range(low: float, high: float) -> str:
    """Two masses in the unit the higher reads best in."""
    return _range_in_unit(low, high, _mass_unit)


def sample_of(unit: str) -> str:
    """What a training job's batch holds, for a job counting `unit`s: images, or a text model's sequences."""
    return "image" if unit == "image" else "sequence"


def article(word: str) -> str:
    """'an' before a word that starts with a vowel ('an image'), 'a' before others ('a token')."""
    return "an" if word[:1] in "aeiou" else "a"


def carbon_line(figures: Mapping[str, Any]) -> str:
    """A table's carbon line from `joulecast.data.carbon.carbon`'s figures: the whole estimate's (its interval too),
    else a serving load's a million output tokens; the grid and PUE it was read at."""
    grid = figures["carbon"]
    over = (", weighted by each window's energy" if figures.get("window_carbon_g") is not None
            else "' mean over the job's time")
    where = {"given": "given", "series": f"a {grid.get('series_hours')}-hour series{over}"}.get(
        grid["grid"], f"{grid['grid']} annual average")
    scale, what, band = 1.0, "", figures.get("carbon_interval_g")
    head = figures.get("carbon_g")
    if head is None:
        scale, what = 1e6, " a million output tokens"
        head, band = figures["carbon_per_output_token_g"], figures.get("carbon_per_output_token_interval_g")
    return (f"carbon     {mass(scale * head)} CO2e{what}"
            + (f" ({mass_range(scale * band[0], scale * band[1])})" if band else "")
            + f", at {figure(grid['g_per_kwh'])} g/kWh ({where}) x PUE {grid['pue']:g}: the GPU's energy alone")


def trace_line(path: str, trace: Any) -> str:
    """A table's line for the requests file a load was read from (`data.requests.RequestTrace`)."""
    return f"file       {path} ({trace.format}): {trace_text(trace.to_dict())}"


def trace_text(trace: Mapping[str, Any]) -> str:
    """Requests read (`RequestTrace.to_dict`) in words: how many, over how long, at what rate, and their mean
    lengths with their spread."""
    span = (f" over {duration(trace['span_s'])}, {figure(trace['request_rate'])} a second" if trace["request_rate"]
            else ", no arrival times")
    if trace.get("peak_hour_rate"):  # a bursty trace's busiest hour, which a load served at the mean averages away
        span += (f" (its busiest hour {figure(trace['peak_hour_rate'])}, "
                 f"{trace['peak_hour_rate'] / trace['request_rate']:.2g}x)")
    left = f"; {trace['left_out']:,} asking no output token left out" if trace["left_out"] else ""
    return (f"{trace['requests']:,} requests{span}; prompts {figure(trace['input_len'])} tokens mean (CV "
            f"{trace['input_len_cv']:.2f}), answers {figure(trace['output_len'])} (CV {trace['output_len_cv']:.2f})"
            + left)


def with_line(table: str, line: str) -> str:
    """A table with `line` after its figures: before its flags or its kernel classes."""
    lines = table.split("\n")
    start = lines.index("") + 1 if "" in lines else 0  # the figures follow the heading's blank line
    at = next((i for i in range(start + 1, len(lines)) if not lines[i] or lines[i].startswith("flag ")), len(lines))
    return "\n".join([*lines[:at], line, *lines[at:]])


def estimate_table(est: Any) -> str:
    lines = [
        f"workload   {est.workload}",
        f"gpu        {est.gpu} at {est.sm_clock_mhz:.0f} MHz, {est.power_limit_w:.0f} W limit",
        f"method     {est.method}",
        "",
        f"energy     {_g4(est.energy_j)} J",
        f"time       {duration(est.time_s)}  (GPU busy {duration(est.gpu_busy_s)}, {est.launches} kernel launches"
        f"{f', host {duration(est.host_dispatch_s)} a launch' if est.host_dispatch_s else ''}"
        f"{_unstated_host() if not getattr(est, 'host_dispatch_stated', True) else ''})",
        f"power      {_g4(est.power_w)} W (average)",
    ]
    limited = est.power_limited
    if limited.get("throttled_busy_share", 0.0) > 0:
        share, clock = limited["throttled_busy_share"], limited["busy_clock_mhz"]
        lines.append(f"           the {est.power_limit_w:.0f} W limit throttles {share:.0%} of GPU busy time (SM clock "
                     f"{clock:.0f} MHz on average while busy)")
    elif est.power_w >= est.power_limit_w * (1 - 1e-6):
        lines.append(f"           at the {est.power_limit_w:.0f} W limit")
    if getattr(est, "memory_gb", None) is not None:
        parts = ", ".join(f"{name.replace('_', ' ')} {gib(value)}" for name, value in est.memory_parts_gb.items()
                          if value)
        unweighed = "" if est.memory_parts_gb.get("weights") else "; a kernel list names no weights: add its model's"
        lines.append(f"memory     {gib(est.memory_gb)} GiB needed ({parts}){unweighed}{_has(est.gpu)}")
    interval = getattr(est, "energy_interval_j", None)
    if interval:
        lines.insert(5, f"           {_g4(interval[0])} - {_g4(interval[1])} J ({getattr(est, 'interval_level', 0.9):.0%} interval)")
    lines += [f"{'flag' if i == 0 else '':<11}{text}" for i, text in enumerate(_flag_lines(est))]
    lines = _fit_first(lines, est, _pass_hint(est))
    lines += ["", f"{'kernel class':<20}{'launches':>9}{'time':>12}{'energy':>12}{'share':>8}"]
    for row in est.by_kernel_class.itertuples():
        lines.append(f"{row.kernel_class:<20}{row.launches:>9}{duration(row.time_s):>12}{si(row.energy_j, 'J'):>12}"
                     f"{row.energy_share:>8.1%}")
    return "\n".join(lines)


def generation_table(job: Any) -> str:
    lines = [f"generation {job.model}: {job.batch} x ({job.input_len} in + {job.output_len} out) tokens"
             f"{'' if job.kv_cache else ', no KV cache'}",
             f"gpu        {job.gpu}{_tensor_parallel(job)}", f"method     {job.method}", "",
             f"energy     {_g4(job.energy_j)} J" + (f"  ({_g4(job.energy_interval_j[0])} - {_g4(job.energy_interval_j[1])}"
                                                  " J, 90% interval, steps' errors taken as moving together)"
                                                  if job.energy_interval_j else ""),
             f"time       {duration(job.time_s)}  (first token {duration(job.ttft_s)}, "
             + (f"then {duration(job.tpot_s)} a token)" if job.output_len > 1 else "no token after it)"),
             f"power      {_g4(job.power_w)} W (average)",
             f"per token  {_g4(job.energy_per_output_token_j)} J an output token, {_g4(job.energy_per_request_j)} J a "
             "request", f"split      prefill {_g4(job.prefill_energy_j)} J, decode {_g4(job.decode_energy_j)} J",
             f"memory     {gib(job.memory_gb)} GiB at the step that needs most{_has(job.gpu)}"]
    if job.host_dispatch_s:
        lines.append(f"host       {duration(job.host_dispatch_s)} a launch"
                     f"{_unstated_host() if not job.host_dispatch_stated else ''}")
    lines += _offload_lines(job)
    lines += [f"{'flag' if i == 0 else '':<11}{text}" for i, text in enumerate(_flag_lines(job))]
    return "\n".join(_fit_first(lines, job, _split_hint(job)))


def _pass_hint(est: Any) -> str:
    """What a pass that does not fit one GPU can do instead: the largest batch that fits at its length
    (`fits_batch`), or, where even one sequence does not, what the weights alone take."""
    if getattr(est, "fits_batch", None):
        return f"--batch {est.fits_batch} at most at this length, or a GPU with more memory"
    parts = est.memory_parts_gb
    held = parts.get("weights", 0.0) + parts.get("optimizer", 0.0)
    if held > _gpu_gib(est.gpu):
        what = "the weights and optimizer state" if parts.get("optimizer") else "the weights"
        return f"a GPU with more memory ({what} alone take {gib(held)} GiB)"
    return "a GPU with more memory, or a shorter sequence"


def _split_hint(job: Any) -> str:
    """What a generation or a serving load that does not fit one GPU can do instead: the fewest tensor-parallel
    GPUs whose shards fit (`fits_tp`), where the job found them."""
    if getattr(job, "offload_gb", 0.0):
        return "a larger --offload-gb, or a GPU with more memory"
    if job.fits_tp:
        return f"--tp {job.fits_tp}, the fewest GPUs whose shards each fit, or a GPU with more memory"
    return "a GPU with more memory (no --tp of 2, 4 or 8 fits)"


def _gpu_gib(name: str) -> float:
    """The memory a catalog GPU holds (GiB)."""
    from joulecast.data.gpus import gpu

    return gpu(name).memory_gb


def _has(name: str) -> str:
    """A memory line's end: what the GPU holds."""
    return f"; the GPU has {_gpu_gib(name):g} GiB"


def _fit_first(lines: list[str], est: Any, instead: str) -> list[str]:
    """A table whose workload exceeds its GPU's memory says so before its figures (a memory check before a number):
    what it needs, what the GPU holds and what would fit, in a `fits` line after the heading."""
    if "exceeds-memory" not in getattr(est, "flags", ()):
        return lines
    at = lines.index("") + 1
    return [*lines[:at], f"fits       no: needs {gib(est.memory_gb)} GiB, {est.gpu} has {_gpu_gib(est.gpu):g} GiB, "
                         f"so it would not run as given; the figures are as if it did. Instead: {instead}",
            *lines[at:]]


def _tensor_parallel(job: Any) -> str:
    """A job on several GPUs in tensor parallelism: how many, how a mixture's experts are split, and what its
    figures cover."""
    experts = ", experts split over the GPUs" if job.expert_parallel else ""
    auto = _tp_auto(job)
    if job.tp == 1:
        return f" (tp auto: {auto})" if auto else ""
    return (f" x {job.tp}, tensor parallel{experts} (energy and power all of them, memory one GPU's"
            f"{'; tp auto: ' + auto if auto else ''})")


def _tp_auto(job: Any) -> str:
    """What tp "auto" found, in words; empty where the job's tp was given."""
    if not getattr(job, "tp_auto", False):
        return ""
    return "not 8 GPUs' shards fit either" if "exceeds-memory" in job.flags else "the fewest GPUs whose shards fit"


def _offload_lines(job: Any) -> list[str]:
    """A generation's weights offloaded to host memory: how much, and the copy rate each pass waits on."""
    if not job.offload_gb:
        return []
    from joulecast.estimator.offload import H2D_RANGE_GBPS

    how = ("" if job.h2d_stated else f" by default (the posted pageable rates' median; the interval: "
           f"{H2D_RANGE_GBPS[0]:g} - {H2D_RANGE_GBPS[1]:g} GB/s)")
    return [f"offload    {job.offload_gb:.3g} GiB of weights in host memory, copied in every pass at "
            f"{job.h2d_gbps:.3g} GB/s{how}"]


def requests_table(job: Any) -> str:
    band = job.energy_interval_j
    lines = [f"requests   {job.model}: {job.requests:,} (mean {figure(job.input_len_mean)} in + "
             f"{figure(job.output_len_mean)} out tokens) in static batches of {job.batch}"
             f"{'' if job.kv_cache else ', no KV cache'}",
             f"gpu        {job.gpu}{_tensor_parallel(job)}", f"method     {job.method}", "",
             f"energy     {_g4(job.energy_j)} J" + (f"  ({_g4(band[0])} - {_g4(band[1])} J, 90% interval, steps' "
                                                  "errors taken as moving together)" if band else ""),
             f"time       {duration(job.time_s)}  (a request's first token after {duration(job.ttft_mean_s)} on "
             "average)", f"power      {_g4(job.power_w)} W (average)",
             f"per token  {_g4(job.energy_per_output_token_j)} J an output token asked for, "
             f"{_g4(job.energy_per_request_j)} J a request",
             f"padding    {100 * job.padding_share:.1f} % of the tokens the batches computed",
             f"memory     {gib(job.memory_gb)} GiB at the largest step{_has(job.gpu)}"]
    lines += _offload_lines(job)
    lines += [f"{'flag' if i == 0 else '':<11}{text}" for i, text in enumerate(_flag_lines(job))]
    return "\n".join(_fit_first(lines, job, _split_hint(job)))


SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 72  # the profile's characters at most: a window each, or the mean of as many as fit in one


def binned(values: np.ndarray, bins: int) -> np.ndarray:
    """`values` as `bins` means of consecutive runs (each value its own where they are as many): a chart's bars."""
    return np.array([b.mean() for b in np.array_split(values, bins)])  # a loop over the bars, a few hundred at most


def _window_lines(windows: Any, origin_s: float | None) -> list[str]:
    """A load served window by window (`estimator.serving.ServeWindows`): how many, the busiest and how many idle,
    its power's profile over time as a line of bars, and its windows' lengths where they differ."""
    from joulecast.data.requests import utc_text  # loaded already: the windows were read from a trace

    rate, power, seconds = windows.request_rate, windows.power_w, windows.duration_s
    k = int(np.argmax(rate))
    at = windows.start_s[k]
    start = (utc_text(origin_s + at) if origin_s is not None
             else f"{duration(at)} after the first request" if k else "the first request")
    last = f" (the last {duration(seconds[-1])})" if duration(seconds[-1]) != duration(seconds[0]) else ""
    idle = int((rate == 0).sum())
    means = binned(power, min(len(power), SPARK_WIDTH))
    span = power.max() - power.min()
    level = np.zeros(len(means), int) if span <= 0 else np.round((means - power.min()) / span * 7).astype(int)
    each = "a window" if len(means) == len(power) else f"{len(power) / len(means):.3g} windows a bar"
    lines = [f"windows    {plural(len(rate), 'window')} of {duration(windows.window_s)}{last}, each served at "
             f"its own arrival rate: busiest {figure(rate[k])} requests/s (from {start}) at {_g4(power[k])} W"
             + (f"; {idle:,} without arrivals" if idle else ""),
             f"profile    {''.join(SPARKS[v] for v in level)}  power {_g4(power.min())} - {_g4(power.max())} W "
             f"({each})"]
    if own_lengths(windows):
        ins, outs = (a[rate > 0] for a in (windows.input_len, windows.output_len))
        lines.append(f"lengths    by window, a request's mean: {figure(ins.min())} - {figure(ins.max())} tokens in, "
                     f"{figure(outs.min())} - {figure(outs.max())} out")
    return lines


def own_lengths(windows: Any) -> bool:
    """Whether a load's windows with arrivals were priced at lengths of their own that differ (`window_lengths`)."""
    busy = windows.request_rate > 0
    return bool(np.ptp(windows.input_len[busy]) or np.ptp(windows.output_len[busy]))


def _autoscale_lines(job: Any) -> list[str]:
    """How many of an autoscaled load's instances served, window by window (with its headroom), and what the others
    cost: idle spares, or the cold starts of those started again."""
    from joulecast.estimator.autoscaler import following_text

    windows, fleet = job.windows, job.instances
    used, seconds, extra = windows.instances, windows.duration_s, windows.standby_j.sum()
    lines = [f"autoscale  {figure(used.min(), digits=3)} - {figure(used.max(), digits=3)} of {fleet} instances "
             "serving by window "
             f"({figure(np.average(used, weights=seconds))} on average; {figure(np.dot(used, seconds) / 3600)} "
             f"instance-hours of the {figure(fleet * seconds.sum() / 3600)} the whole fleet would run)"
             + (f", {100 * job.headroom:.3g} % over each window's rate" if job.headroom else "")
             + (f"; reactive: {following_text(job.reaction_s, job.scale_in_delay_s, duration)}" if job.reactive
                else "")
             + (f"; {figure(np.average(windows.serving, weights=seconds))} of them serving on average, the rest "
                "starting" if not np.allclose(windows.serving, used) else "")]
    targets = [(f"a first token within {duration(t)} on average", windows.prefill_s + windows.slot_wait_s, t)
               for t in (job.ttft_target_s,) if t is not None]
    targets += [(f"99 % of first tokens within {duration(t)}", windows.ttft_p99_s, t)
                for t in (job.ttft_p99_target_s,) if t is not None]
    targets += [(f"99 % of the gaps between tokens within {duration(t)}", windows.itl_p99_s, t)
                for t in (job.itl_p99_target_s,) if t is not None]
    if targets:  # the windows with arrivals that meet the targets (a window making no gap meets a gap's)
        busy = windows.request_rate > 0
        late = busy & np.any([got > t * (1 + 1e-9) for _, got, t in targets], axis=0)
        lines.append(f"{'':11}{' and '.join(text for text, _, _ in targets)} in "
                     f"{int(busy.sum() - late.sum()):,} of {plural(int(busy.sum()), 'window')} with arrivals"
                     + (" (the rest on the whole fleet)" if late.any() else ""))
    if job.spare == "idle":
        lines.append(f"{'':11}the others idle, loaded: {_g4(extra / 3.6e6)} kWh "
                     f"({100 * extra / job.energy_j:.1f} % of the energy)")
    else:
        count = int(windows.started.sum())
        lines.append(f"{'':11}the others off; " + ("none started again" if not count else
                     f"{plural(count, 'start')}" + (f" of {duration(job.cold_start_s)} at idle power: "
                                                    f"{_g4(extra / 3.6e6)} kWh ({100 * extra / job.energy_j:.1f} % "
                                                    "of the energy)" if job.cold_start_s else
                                                    " (no cold start given: none priced)")))
    return lines


def _queue_line(job: Any) -> str:
    """How long a queued load's requests waited, window by window, and whether its last window ran on."""
    w = job.windows
    held = int((w.backlog > 0).sum())
    if not w.wait_s.any():
        return "queue      none: every window serves its arrivals as they come"
    return (f"queue      {held:,} of {plural(len(w.backlog), 'window')} end with requests waiting (at most "
            f"{figure(w.backlog.max())}); a request waits {duration(job.wait_s)} on average, "
            f"{duration(w.wait_s.max())} in the worst window"
            + ("; the last window runs on until none waits" if w.backlog[-1] > 0 else ""))


def serve_table(job: Any, origin_s: float | None = None) -> str:
    """A serving estimate's table; a load given window by window gets a line of its windows (their starts as UTC
    times where `origin_s`, the first arrival's, is known) and its power's profile."""
    from joulecast.estimator.serving import HOST_BOUND_SHARE  # loaded already: `job` is its ServeEstimate

    band = job.energy_per_output_token_interval_j
    lines = [f"serving {job.model}: {figure(job.input_len)} token{'' if job.input_len == 1 else 's'} in, "
             f"{figure(job.output_len)} out a request, "
             f"{job.batch:.3g} in flight{' an instance' if job.instances > 1 else ''}, engine {job.engine}"
             + (f", TP {job.tp}" if job.tp > 1 or _tp_auto(job) else "")
             + (f" (auto: {_tp_auto(job)})" if _tp_auto(job) else "")
             + (", experts split over the GPUs" if job.expert_parallel and job.tp > 1 else "")
             + (f", {job.sampling} sampling" if job.sampling != "greedy" else ""),
             f"gpu        {job.gpu}" + (f" x {job.tp * job.instances}" if job.tp * job.instances > 1 else "")
             + (f" ({job.instances} instances of {job.tp}, the load spread evenly)" if job.instances > 1 else "")
             + f" at {job.sm_clock_mhz:.0f} MHz, {job.power_limit_w:.0f} W limit", f"method     {job.method}", "",
             f"per token  {_g4(job.energy_per_output_token_j)} J an output token"
             + (f"  ({_g4(band[0])} - {_g4(band[1])} J{_engine_spread(job.engine)}{_fp8_reach(job.dtype)})"
                if band else ""),
             f"request    {_g4(job.energy_per_request_j)} J a request",
             f"throughput {_g4(job.tokens_per_s)} output tokens/s, {_g4(job.requests_per_s)} requests/s",
             f"power      {_g4(job.power_w)} W (average, idle {100 * job.idle_share:.1f} % of the time; "
             f"{kwh_a_day(job.power_w)} at this load)",
             f"latency    {duration(job.step_time_s)} a token " + (
                 f"(a step of {job.busy_batch})" if job.windows is None else
                 f"on average; {duration(job.windows.step_time_s.max())} in the busiest window (a step of "
                 f"{job.busy_batch})"), *_gap_lines(job),
             f"ttft       {duration(job.ttft_s)} on average: {duration(job.prefill_s)} for its prompt's prefill"
             + (f", after {duration(job.slot_wait_s)} waiting for a batch slot" if job.slot_wait_s else "")
             + (f", and {duration(job.wait_s)} for the queued backlog" if job.wait_s else "")
             + f"; 99 % within {duration(job.ttft_p99_s)}",
             f"gpu busy   {100 * job.gpu_busy_share:.0f} % of a step" + (
                 " (host-bound: the GPU waits on the engine's host work, the all-reduces or launches)"
                 if job.gpu_busy_share < HOST_BOUND_SHARE else "")]
    lines.append(f"memory     {gib(job.memory_gb)} GiB{' a GPU' if job.tp > 1 else ''} at a step of "
                 f"{job.busy_batch}{_has(job.gpu)}")
    if job.energy_j is not None:
        total = job.energy_interval_j
        lines.append(f"energy     {_g4(job.energy_j)} J ({_g4(job.energy_j / 3.6e6)} kWh) over "
                     f"{duration(job.duration_s)}, {job.output_tokens:,.0f} output tokens"
                     + (f"  ({_g4(total[0])} - {_g4(total[1])} J)" if total else ""))
    if job.windows is not None:
        lines += _window_lines(job.windows, origin_s)
        if job.autoscale:
            lines += _autoscale_lines(job)
        if job.queue:
            lines.append(_queue_line(job))
    lines += [f"{'flag' if i == 0 else '':<11}{text}" for i, text in enumerate(_flag_lines(job))]
    return "\n".join(_fit_first(lines, job, _split_hint(job)))


def _gap_lines(job: Any) -> list[str]:
    """A serving load's gaps between a request's tokens at their quantiles (`ServeEstimate.itl_p90_s`, `itl_p99_s`),
    where its requests make more than one token: the steps that admit prompts run longer."""
    if job.itl_p99_s is None:
        return []
    each = job.windows.itl_p99_s if job.windows is not None else np.full(1, np.nan)
    worst = f" (all windows; the worst's 99 % within {duration(float(np.nanmax(each)))})" if np.isfinite(
        each).any() else ""
    return [f"gaps       90 % of tokens within {duration(job.itl_p90_s)} of the one before, 99 % within "
            f"{duration(job.itl_p99_s)}{worst}"]


def _kernels(fusions: tuple[str, ...], overhead_s: float) -> str:
    """A training job's kernels beyond Hugging Face's eager ones: its fusions, a convolution's layout (channels_last)
    apart, and its framework's own time."""
    fused = [f for f in fusions if f != "channels_last"]
    text = "; ".join([*(["fused: " + ", ".join(fused)] if fused else []),
                      *(["NHWC layout (channels_last)"] if "channels_last" in fusions else [])])
    return ((text or "Hugging Face eager (no fusions)")
            + (f"; the framework's {1e3 * overhead_s:.3g} ms a layer and forward pass" if overhead_s else ""))


def train_run_table(job: Any) -> str:
    how = f"LoRA rank {job.lora_rank}" if job.lora_rank else "full fine-tuning"
    parts = ", ".join(f"{k} {gib(v)}" for k, v in job.memory_parts_gb.items())
    unit = getattr(job, "unit", "token")
    launches = "CUDA graphs" if job.launch_mode == "graph" else "eager"
    images = unit == "image"  # a vision model's run: images a step, none of a text model's heads, LoRA or recompute
    run = (f"{plural(job.global_batch, 'image')} ({plural(job.tokens, 'image')}), {how}, {job.dtype}" if images else
           f"{job.global_batch} x {plural(job.seq, 'token')} ({plural(job.tokens, 'token')}), {how}, {job.dtype}, "
           f"recompute {job.recompute}")
    lines = [f"training run {job.model}: {plural(job.steps, 'step')} x {run}, {job.optimizer}",
             f"gpu        {job.gpu}", f"method     {job.method}",
             f"batches    micro-batch {job.micro_batch}, {job.accumulation} accumulated a step"
             + (" (auto: the largest that fits)" if getattr(job, "micro_batch_auto", False) else "")]
    if images:
        lines += [f"launches   {launches}" + ("" if job.attention == "none" else f"; {job.attention} attention"),
                  f"kernels    {_kernels(job.fusions, 0.0)}", ""]
    else:
        lines += [f"launches   {launches}; "
                  f"{'LM head' if job.head_outputs is None else f'task head of {job.head_outputs} outputs'} over "
                  f"{job.head_tokens} of {job.seq} tokens a sequence",
                  f"kernels    {_kernels(job.fusions, job.forward_overhead_s)}; {job.attention} attention", ""]
    lines += [f"energy     {_g4(job.energy_j)} J = {_g4(job.energy_j / 3.6e6)} kWh  ({_g4(job.energy_interval_j[0])}"
              f" - {_g4(job.energy_interval_j[1])} J, steps' errors taken as moving together)",
              f"time       {duration(job.time_s)}  ({duration(job.step_time_s)} a step)",
              f"power      {_g4(job.power_w)} W (average)",
              f"{f'per {unit}':<11}{_g4(job.energy_per_token_j)} J {article(unit)} {unit}, "
              f"{_g4(job.tokens_per_s)} {unit}s/s",
              f"memory     {gib(job.memory_gb)} GiB ({parts}){_has(job.gpu)}"]
    if job.eval_tokens:
        lines.append(f"eval       {plural(job.eval_tokens, unit)} in {plural(job.evals, 'evaluation')}, forward only: "
                     f"{duration(job.eval_time_s)}, {_g4(job.eval_energy_j)} J of the run")
    rate = job.loader_rate
    if rate is not None:  # samples a second: images, or a text model's sequences
        share, sample = job.loader_wait_s / job.time_s, sample_of(unit)
        lines.append(f"input      {_g4(rate)} {sample}s/s from the input pipeline; the GPU waits for it "
                     f"{duration(job.loader_wait_s)} ({100 * share:.3g} % of the run) at idle power"
                     if job.loader_wait_s > 0 else
                     f"input      {_g4(rate)} {sample}s/s from the input pipeline, which keeps up with the GPU")
    lines += [f"{'flag' if i == 0 else '':<11}{text}" for i, text in enumerate(_flag_lines(job))]
    return "\n".join(_fit_first(lines, job, _fits(job) if "exceeds-memory" in job.flags else ""))


def _fits(job: Any) -> str:
    """What a training run that exceeds its GPU's memory would fit in, as the flags that get there."""
    if not job.fits:
        from joulecast.data.gpus import gpu
        from joulecast.estimator.train_run import state_gb

        fixed = state_gb(job.memory_parts_gb)
        if getattr(job, "unit", "token") == "image":  # no LoRA, and no plan over GPUs, for a vision model
            return f"a GPU with more memory (not one image a micro-batch fits: {gib(fixed)} GiB of state beside it)"
        sharded = getattr(job, "fits_sharded", None)
        how = ("" if job.lora_rank else "LoRA, --lora-rank; or ") + "shard over GPUs, joulecast plan" + (
            f": ZeRO 3 over {sharded['gpus']} GPUs fits, {gib(sharded['memory_gb'])} GiB a GPU" if sharded else "")
        if fixed > gpu(job.gpu).memory_gb:
            return (f"{how} (no micro-batch on one GPU: weights, gradients and optimizer state alone take "
                    f"{gib(fixed)} GiB)")
        return f"{how} (no micro-batch on one GPU, not one sequence fully recomputed)"
    return "; ".join(" ".join(([] if f["recompute"] == job.recompute else [f"--recompute {f['recompute']}"])
                              + [f"--micro-batch {f['micro_batch']}"]) + f" ({gib(f['memory_gb'])} GiB)"
                     for f in job.fits)


def plan_batch_text(job: Any) -> str:
    """A plan's global step and its total: 64 x 512 tokens (1,000 tokens), or over images 256 images (1,000
    images)."""
    if job.unit == "image":
        return f"{plural(job.global_batch, 'image')} ({plural(job.tokens, 'image')})"
    return f"{job.global_batch} x {job.seq} tokens ({plural(job.tokens, 'token')})"


def plan_table(result: Any) -> str:
    """The job's strategies side by side, then each one's energy split."""
    job = result.job
    unit = job.unit  # a vision model's plan counts images
    head = (f"plan {job.name}: {job.model_name}, {plural(job.gpus, 'GPU')} on {plural(len(job.sites), 'site')}, "
            f"{plural(job.steps, 'step')}, {plural(job.tokens, unit)}, layout TP {job.layout['tp']} PP "
            f"{job.layout['pp']} CP {job.layout['cp']}" + (f" ZeRO {job.layout['zero']}" if job.layout["zero"] else "")
            + (" (auto: the least that fits every site)" if getattr(job, "layout_auto", False) else ""))
    if job.fusions or job.forward_overhead_s:  # what the job says its framework does beyond HF's eager kernels
        head += f"\nkernels: {_kernels(job.fusions, job.forward_overhead_s)}"
    if isinstance(job.micro_batch, str):  # auto: each site's own
        head += "\nmicro-batch: auto, each site the largest that fits its GPUs: " + ", ".join(
            f"{s.site.name} {s.micro_batch} ({s.step.accumulation} accumulated a step)" for s in result.sites)
    if job.loader_rate:
        slow = [s for s in result.sites if s.input_floor_s > s.compute_s]
        head += (f"\ninput: {figure(job.loader_rate)} {sample_of(unit)}s a second a replica"
                 + ("; " + ", ".join(f"{s.site.name}'s steps take {duration(s.input_floor_s)} for their input, their "
                                     f"GPUs' {duration(s.compute_s)}" for s in slow) if slow
                    else ", which keeps up with every site's GPUs"))
    if job.step_jitter:
        head += (f"\nstragglers: step jitter {100 * job.step_jitter:.3g} % of a rank's micro-batch, each synchronous "
                 f"step waiting for its latest GPU")
    if job.eval_tokens:
        from joulecast.estimator.plan import eval_steps

        wait = f", each waiting {job.eval_overhead_s:g} s more" if job.eval_overhead_s else ""
        head += (f"\nevaluation: {job.eval_tokens:,} {unit}s in {job.evals:,} evaluation(s) of {eval_steps(job):,} "
                 f"global batch(es){wait}")
    rows = [dict(strategy=p.strategy, time=duration(p.time_s),
                 time_interval=duration_range(*p.time_interval_s),
                 energy_kwh=p.energy_j / 3.6e6,
                 interval_kwh=f"{figure(p.energy_interval_j[0] / 3.6e6)} - {figure(p.energy_interval_j[1] / 3.6e6)}",
                 carbon_kg=p.carbon_kg, utilisation=p.compute_utilisation,
                 **{f"j_per_{unit}": p.energy_per_token_j},  # j_per_image over images
                 local_share=p.locally_met_share, inter_site_gb=p.bytes_per_link["inter_site"] / 1e9,
                 gbps_for_90pct=bandwidth_text(p.bandwidth_for_90pct_gbps, len(job.sites)))
            for p in result.plans]
    splits = pd.DataFrame([{"strategy": p.strategy, **{k: v / 3.6e6 for k, v in p.energy_split_j.items()}}
                           for p in result.plans])
    notes = [f"internet (allocational, not in energy): {p.strategy} {figure(p.internet_allocational_kwh)} kWh"
             for p in result.plans if p.internet_allocational_kwh]
    if len(job.sites) > 1:  # what the last column means, and its blanks
        notes.insert(0, "gbps_for_90pct: the inter-site link (Gbit/s) that would give 90 % compute utilisation; "
                        "'not reached': not at 100 Tbit/s either (the link's round trips, a slower site, restarts "
                        "after failures or a site's own collectives bound it)")
    return "\n".join([head, "", pd.DataFrame(rows).to_string(index=False, float_format=figure), "",
                      "energy split (kWh):", splits.to_string(index=False, float_format=figure), *notes])


def bandwidth_text(gbps: float | None, sites: int) -> str:
    """A plan's inter-site bandwidth for 90 % utilisation as its tables show it (Gbit/s): 'not reached' where none up
    to 100 Tbit/s gives it, '-' on one site."""
    return figure(gbps) if gbps else "not reached" if sites > 1 else "-"


def count_text(n: float) -> str:
    """A parameter count as people write it: 124.3 M, 8.03 B."""
    return f"{n / 1e9:.3g} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def setting_text(values: pd.Series) -> list[str]:
    """A sweep's clocks (MHz) or power limits (W) as its tables show them: 'default' where none was set (NaN: the
    GPU's, or a plan's job file's own)."""
    return ["default" if math.isnan(v) else f"{v:g}" for v in values]


def settings_shown(points: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """A sweep's `columns` as its tables show them: a clock or limit not set reads 'default' (not NaN)."""
    table = points[list(columns)].copy()
    for column in ("sm_clock_mhz", "power_limit_w"):
        if column in table:
            table[column] = setting_text(table[column])
    return table


# What a sweep whose points exceed memory could try, by phase (a single pass: '').
_SMALLER = {"generate": "--tp 2,4,8 splits each over GPUs", "serve": "--tp 2,4,8 splits each over GPUs",
            "train-run": "a smaller --micro-batch, --recompute or --lora-rank",
            "": "a GPU with more memory, or a smaller --batch or --seq"}


def unmet_text(points: pd.DataFrame) -> str:
    """Why no point of a sweep meets its constraints: how many configurations exceed their GPU's memory (the least
    such need, and the GPU), how many cannot serve their request rate, and how many fit but miss the
    constraints."""
    if "grid" in points:  # on several grids a configuration is a point on each: count configurations
        points = points[points["grid"] == points["grid"].iloc[0]]
    over = points["flags"].fillna("").str.contains("exceeds-memory").to_numpy(bool)
    said = []
    if over.any():
        least = points[over].loc[points.loc[over, "memory_gb"].idxmin()]
        said.append(f"{int(over.sum()):,} of {len(points):,} configurations exceed their GPU's memory (the least "
                    f"needs {least['memory_gb']:.1f} GiB, on {least['gpu']}'s {_gpu_gib(least['gpu']):g} GB; "
                    f"{_SMALLER.get(str(least.get('phase')), _SMALLER[''])})")
    beyond = points["flags"].fillna("").str.contains("exceeds-capacity").to_numpy(bool)
    if beyond.any():
        said.append(f"{int(beyond.sum()):,} of {len(points):,} configurations cannot serve their request rate "
                    "(beyond what --max-batch in flight serve on their GPU: a lower rate, or --tp 2,4,8)")
    if not (over | beyond).all():
        said.append(f"{int((~over & ~beyond).sum()):,} fit but miss the constraints")
    return "no configuration meets the constraints: " + "; ".join(said)


def sweep_front(shown: pd.DataFrame) -> str:
    """A sweep's Pareto front in the terminal, as `sweep_report.shown_table` shows it: figures to four significant
    digits."""
    return shown.to_string(index=False, float_format=figure)


def plan_sweep_table(points: pd.DataFrame, front: str) -> str:
    """A plan sweep's points in a line, what it left out, and its Pareto front (energy or carbon against time to
    finish), fastest first."""
    axis = "energy" if front == "energy" else "carbon"
    skipped = points.attrs.get("skipped", {})
    best = points[points["pareto"]].sort_values("time_s")
    rows = pd.DataFrame(dict(strategy=best["strategy"], sites=best["sites"],
                             power_limit_w=setting_text(best["power_limit_w"]), H=best["H"], P=best["P"],
                             tau=best["tau"], bits=best["bits"],
                             gbps=best["gbps"], time=[duration(t) for t in best["time_s"]],
                             energy_kwh=best["energy_j"] / 3.6e6, carbon_kg=best["carbon_kg"],
                             utilisation=best["compute_utilisation"]))
    left = "".join(f"; {n:,} left out: {why}" for why, n in skipped.items())
    return "\n".join([f"sweep: {len(points):,} points{left}; the Pareto front of {axis} against time to finish "
                      f"({plural(len(best), 'point')}, fastest first):",
                      rows.to_string(index=False, float_format=figure)])


FLAG_MEANINGS = {"spec-only": "a GPU the model was not trained on, known by its specs only: wider interval",
                 "out-of-domain": "outside the training data: wider interval",
                 "exceeds-memory": "needs more memory than the GPU has: it would not run as given (see memory)",
                 "input-bound": "the input pipeline is slower than the GPU: each step waits for its batch (see input)",
                 "what-if": "a hypothetical GPU: physics on its specs, with its base GPU's learned correction "
                            "where the base runs the setting (see below)"}


def _flag_lines(est: Any) -> list[str]:
    """What each flag of an estimate or a job means, and for out-of-domain why (`outside_domain`: which features lie
    outside the training range, or what the GPU was not trained on)."""
    out = [f"{flag}: {FLAG_MEANINGS.get(flag, '')}".rstrip(": ") for flag in getattr(est, "flags", ())]
    return out + [f"  {reason}" for reason in getattr(est, "outside_domain", ())]


def frame(table: pd.DataFrame) -> str:
    return table.to_string(index=False)


def dashed(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with each missing figure shown as "-" (a partition too small to gate, an estimator without an
    interval): a column holding one made a column of objects first, as pandas 4 will not put text into a float
    column; the others keep their dtype, and so their printed decimals."""
    gaps = [c for c in table.columns if table[c].isna().any()]
    return table.assign(**{c: table[c].astype(object).where(table[c].notna(), "-") for c in gaps})


def sweep_payload(result: Any, files: Sequence[str] | None = None) -> dict[str, Any]:
    """A sweep's JSON as the CLI and the service give it: `points` (every configuration, frames for `write_json`),
    `pareto`, `best`, what was skipped, the objective, front, fixed options and constraints, what its token columns
    count (`unit`: "token", or "image" where every model is a vision model's), why nothing is best
    where nothing is (`unmet`), and the files written where the CLI wrote some."""
    best = result.best
    payload = {"points": result.points, "pareto": result.pareto, "best": None if best is None else best.to_dict(),
               "skipped": result.skipped, "objective": result.objective, "front": result.front, "job": result.job,
               "constraints": result.constraints, "unit": result.unit}
    if result.trace is not None:  # the requests a serving sweep's load was read from
        payload["trace"] = result.trace
    if files is not None:
        payload["files"] = list(files)
    return {**payload, "unmet": None if best is not None else unmet_text(result.points)}


def to_json(payload: Any) -> str:
    """Strict JSON (RFC 8259): a number that is not finite (a sweep's default clock, NaN) is null, as `jq` and
    JavaScript read it; numpy scalars as Python numbers."""
    return json.dumps(finite(payload), indent=2, allow_nan=False,
                      default=lambda o: finite(o.item()) if hasattr(o, "item") else str(o))


# A frame's records are turned into JSON this many at a time (`write_json`): a sweep's million points as Python
# dicts at once take about 10 KB each (176,128 points: 1.9 GB resident, against 0.34 GB without --json).
JSON_CHUNK_ROWS = 10_000


def write_json(payload: Mapping[str, Any], out: TextIO, chunk_rows: int = JSON_CHUNK_ROWS) -> None:
    """`to_json(payload)` and a newline written to `out`, each DataFrame value of `payload` as its list of records
    (`orient='records'`), `chunk_rows` of them at a time: the same text in the memory of a chunk."""
    out.write("{")
    for i, (key, value) in enumerate(payload.items()):
        out.write(("," if i else "") + "\n  " + json.dumps(key) + ": ")
        if not isinstance(value, pd.DataFrame):
            out.write(_nested(to_json(value)))
            continue
        out.write("[")
        for start in range(0, len(value), chunk_rows):
            records = to_json(value.iloc[start:start + chunk_rows].to_dict(orient="records"))
            out.write(("," if start else "") + "\n  " + _nested(records[2:-2]))  # within its own [ and ]
        out.write("\n  ]" if len(value) else "]")
    out.write("\n}\n" if payload else "}\n")


def _nested(text: str) -> str:
    """JSON text of indent 2 as a value one level down."""
    return text.replace("\n", "\n  ")


def finite(value: Any) -> Any:
    """`value` with every float that is not finite (NaN, infinity) as None, through dicts, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def with_chance_text(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with `chance`: the coverage a partition may show by chance, "low-high" (%), where it has
    chance_low and chance_high."""
    if "chance_low" not in table:
        return table
    return table.assign(chance=[f"{lo:.0f}-{hi:.0f}" if lo == lo else None
                                for lo, hi in zip(table["chance_low"], table["chance_high"])])


def rounded(table: pd.DataFrame) -> pd.DataFrame:
    """Figures to 2 decimals for printing; p-values (p_*) to 3, as 0.048 is not 0.05."""
    return table.round({c: 3 if c.startswith("p_") else 2 for c in table.select_dtypes("number").columns})


def audit_text(result: Any) -> str:
    from joulecast.training.dataset import dropped_text  # loaded already: the audit that made `result` needs it

    s = result.summary
    dropped = dropped_text(s.get("dropped") or {})
    lines = [f"audit of {s['estimator']}", f"on {s['data']}: {s['rows']} rows (dropped: {dropped})",
             f"overall MAPE: energy {s['energy_mape']:.2f} %, time {s['time_mape']:.2f} %, power {s['power_mape']:.2f} %"
             + (f"; {s['coverage']:.1f} % of rows inside the interval" if s.get("coverage") is not None else ""), ""]
    if s.get("in_sample_sources"):
        lines[-1:-1] = [f"note: the estimator was trained on {', '.join(s['in_sample_sources'])}: these figures measure its "
                        "fit, not its accuracy on new data (see train's cross-validation, experiments/)"]
    parts = with_chance_text(rounded(result.partitions))
    columns = [c for c in ("by", "value", "rows", "energy_mape", "energy_p90_ape", "time_mape", "power_mape", "coverage",
                           "chance", "p_in_target", "mean_width", "in_domain", "pass") if c in parts]
    lines.append(frame(dashed(parts[columns])))
    gate = f"target {s['target_pct']:g} % MAPE on {', '.join(s['gate_on'])}"
    lines += ["", f"PASS: every gated partition within {gate}" if s["pass"]
              else f"FAIL ({gate}): " + ", ".join(s["failed"]), f"report: {', '.join(s['report'])}"]
    if s.get("mlflow_run_id"):
        lines.append(f"MLflow run {s['mlflow_run_id']}")
    return "\n".join(lines)
