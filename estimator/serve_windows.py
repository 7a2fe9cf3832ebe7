"""A serving load window by window (`joulecast.serve`'s `window_rates`, `window_s`, `window_lengths`, `queue`): its
checks, the length classes whose windows share one grid of steps, and an autoscaled load's instances (its headroom,
its idle spares or its cold starts); the queue that carries a window's excess on is `estimator.fluid_queue`.

A window's requests are priced at their own mean lengths where `window_lengths` gives them (a trace's:
`data.requests.RequestTrace.window_lengths`): an hour of long prompts costs more a token than the trace's mean says.
Each distinct pair of lengths would be a grid of steps of its own (about 5 ms of CPU each, every class's steps in one
estimate pass), so windows are grouped into at most LENGTH_BINS^2 classes by the requests' quantiles of each mean
length, and a class is priced at its windows' pooled lengths (their requests' means and spread, as one file of them
reads); each window's own answer length still sets its requests in flight (Little's law) and its tokens.
experiments/trace_reading.py measures what the classes cost against a grid for every window.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError, require
from joulecast.data.files import kind_of
from joulecast.data.requests import LENGTH_FIELDS, MAX_TIME_S, MAX_WINDOWS, MIN_WINDOW_S

# Bins a length (prompts, answers) by the requests' quantiles: at most 16 classes, each a grid of steps. On
# experiments/trace_reading.py's week with prompts and answers that follow the day, 4 keep the hourly estimate within
# 0.1 % of a grid for every window (experiments/HISTORY.md, 2026-12-07's twentieth session, has the figures).
LENGTH_BINS = 4
# What an autoscaled load does with the instances a window does not need (`serve`'s `spare`): "off", released and
# drawing nothing (a cloud fleet scaled in), each one started again paying its cold start; "idle", kept powered and
# loaded, each GPU at its idle power (a warm pool on one's own hardware), starting nothing.
SPARES = ("off", "idle")
MAX_COLD_START_S = 86_400.0   # an instance's start from off to serving: a day is past any model's load
MAX_HEADROOM = 10.0           # capacity kept over a window's demand, as a share of it (10: 11x the demand)


def check_windows(rates: Any, window_s: Any, last_s: Any, *others: Any) -> tuple[np.ndarray, np.ndarray]:
    """`serve`'s window_rates as an array of requests a second from 0 to 2^24, at most MAX_WINDOWS of them and a
    request in all at least, each window_s long (from MIN_WINDOW_S to MAX_TIME_S) but the last, `last_s` long where
    given (from MIN_WINDOW_S to window_s + MIN_WINDOW_S), given together with none of `others` (a concurrency, a
    rate, a duration, a token count): the rates and each window's seconds; else one line naming the field."""
    require(rates is not None and window_s is not None, "window_s" if window_s is None else "window_rates",
            "give window_rates and window_s together (a rate for each window of window_s seconds)")
    require(all(v is None for v in others), "window_rates", "the load window by window: give no concurrency, "
            "request_rate, duration_s or output_tokens beside it (its totals are its windows')")
    window_s = positive("window_s", window_s, low=MIN_WINDOW_S, high=MAX_TIME_S, high_text=f"{MAX_TIME_S:g} s")
    array = numbers(rates)
    if array is None or array.ndim != 1 or not 0 < len(array) <= MAX_WINDOWS or not (
            (array >= 0) & (array <= 2**24)).all():  # NaN fails the range
        raise InputError("window_rates", f"must be 1 to {MAX_WINDOWS:,} requests a second from 0 to 2^24, one a "
                                         f"window, got {kind_of(rates)}")
    seconds = np.full(len(array), window_s)
    if last_s is not None:
        seconds[-1] = positive("last_window_s", last_s, low=MIN_WINDOW_S, high=window_s + MIN_WINDOW_S,
                               high_text=f"window_s + {MIN_WINDOW_S:g} s")
    # a request in all at least (a rate too small for one made no output token, and its J a token 0 / 0)
    require(np.dot(array, seconds) >= 1.0, "window_rates", "every window is empty (under one request in all): some "
                                                           "window must have arrivals")
    return array, seconds


def positive(name: str, value: object, integer: bool = False, low: float = 0.0, high: float = 2**24,
             high_text: str = "2^24") -> float:
    """`value` as a float in (0, high], or in [low, high] where `low` is given."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and value > 0
    if not ok or not low <= value <= high or (integer and int(value) != value):  # the range first: int(inf) raises
        kind = "integer" if integer else "number"
        span = f"from {low:g} to {high_text}" if low else f"up to {high_text}"
        raise InputError(name, f"must be a positive {kind} {span}, got {value!r}")
    return float(value)


def check_window_lengths(table: Any, requests: np.ndarray) -> np.ndarray:
    """`serve`'s window_lengths for windows with `requests` arrivals each: a table, a row a window (a pandas
    DataFrame, or a mapping of column to a list or an array), of its requests' mean `input_len` and `output_len` in
    tokens (from 0 to 2^24, not 0) and, where given, their spread `input_len_cv` and `output_len_cv` (from 0 to 10;
    0 where not given), each read only where its window has arrivals (NaN or None elsewhere). As an array, a row a
    window in LENGTH_FIELDS' order, a window without arrivals at the load's pooled lengths; else one line naming
    window_lengths."""
    require(isinstance(table, (pd.DataFrame, Mapping)), "window_lengths", "must be a table of each window's lengths "
            f"(columns {', '.join(LENGTH_FIELDS)}), got {kind_of(table)}")
    unknown = sorted(str(k) for k in table.keys() if k not in LENGTH_FIELDS)
    require(not unknown, "window_lengths", f"{unknown[0] if unknown else ''} is not a column; allowed: "
                                           f"{', '.join(LENGTH_FIELDS)}")
    busy = requests > 0
    out = np.zeros((len(requests), len(LENGTH_FIELDS)))
    for j, name in enumerate(LENGTH_FIELDS):
        given = name in table.keys()
        require(given or name.endswith("_cv"), "window_lengths", f"needs a column {name} (each window's mean)")
        if not given:
            continue
        column = numbers(table[name], missing=True)
        require(column is not None and column.shape == requests.shape, "window_lengths",
                f"{name} must hold a number for each of the {len(requests):,} windows, got {kind_of(table[name])}")
        spread = name.endswith("_cv")
        bad = busy & ~(((column >= 0) if spread else (column > 0)) & (column <= (10 if spread else 2**24)))
        if bad.any():  # NaN fails the range
            k = int(np.argmax(bad))
            allowed = "a number from 0 to 10" if spread else "a positive number up to 2^24"
            raise InputError("window_lengths", f"{name} of window {k + 1:,} (it has arrivals) must be {allowed}, got "
                                               f"{float(column[k])!r}")
        out[:, j] = np.where(busy, column, 0.0)
    out[~busy] = pooled_whole(out[busy], requests[busy])
    return out


def length_classes(lengths: np.ndarray, requests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Windows (`lengths`: a row each, as `check_window_lengths` gives them; `requests` arriving in each) grouped
    into classes that share one grid of steps: each distinct row its own where there are LENGTH_BINS^2 or fewer,
    else by LENGTH_BINS bins of the mean prompt and of the mean answer at the requests' quantiles. Returns the
    classes' pooled lengths (`pooled`) and each window's class."""
    rows, label = np.unique(lengths, axis=0, return_inverse=True)
    if len(rows) > LENGTH_BINS**2:
        code = np.zeros(len(lengths), dtype=np.int64)
        for j in (0, 1):  # the prompts', then the answers' mean
            code = code * LENGTH_BINS + np.searchsorted(_quantiles(lengths[:, j], requests), lengths[:, j])
        _, label = np.unique(code, return_inverse=True)
    label = label.reshape(-1)
    classes = int(label.max()) + 1
    # a class of windows without arrivals (their lengths the load's) weighed alike, not by their zero requests
    weight = np.where(np.bincount(label, requests, classes)[label] > 0, requests, 1.0)
    return pooled(lengths, weight, label, classes), label


def pooled(lengths: np.ndarray, weight: np.ndarray, label: np.ndarray, classes: int) -> np.ndarray:
    """Each class's lengths (a row each, LENGTH_FIELDS' order) over its windows' requests (`weight` a window, in
    class `label`): the mean of the means, and the spread of all its requests (a window's E[x^2] is
    mean^2 (1 + cv^2)), at most 10."""
    total = np.bincount(label, weight, classes)
    out = np.empty((classes, len(LENGTH_FIELDS)))
    for j in (0, 1):  # a length's mean, then its spread
        mean, cv = lengths[:, j], lengths[:, j + 2]
        out[:, j] = np.bincount(label, weight * mean, classes) / total
        square = np.bincount(label, weight * mean * mean * (1.0 + cv * cv), classes) / total
        # within serve's bound on a spread (10): windows whose means lie orders of magnitude apart pool past it
        out[:, j + 2] = np.clip(np.sqrt(np.maximum(square / (out[:, j] * out[:, j]) - 1.0, 0.0)), 0.0, 10.0)
    return out


def pooled_whole(lengths: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """`pooled` of every window as one class: the whole load's lengths (a row, LENGTH_FIELDS' order)."""
    return pooled(lengths, weight, np.zeros(len(lengths), dtype=np.int64), 1)[0]


def _quantiles(values: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The inner edges of LENGTH_BINS bins holding as many of the requests (`weight` a value) each."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weight[order])
    at = np.arange(1, LENGTH_BINS) / LENGTH_BINS * cumulative[-1]
    return values[order][np.minimum(np.searchsorted(cumulative, at), len(values) - 1)]


def numbers(values: Any, missing: bool = False) -> np.ndarray | None:
    """A numpy array of numbers (a pandas column's too), or a list or tuple of them (not true or false), as float64;
    with `missing`, None in a list read as NaN; else None."""
    if callable(getattr(values, "to_numpy", None)):  # a pandas Series: its values
        values = values.to_numpy()
    if isinstance(values, np.ndarray):
        if values.dtype == object and missing:
            values = list(values)
        else:
            return values.astype(np.float64) if values.dtype.kind in "iuf" else None
    if isinstance(values, (list, tuple)) and all(isinstance(v, (int, float, np.integer, np.floating))
                                                 and not isinstance(v, bool) or (missing and v is None)
                                                 for v in values):
        return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    return None


def share(name: str, value: object, high: float, high_text: str) -> float:
    """`value` as a float from 0 to `high`, else one line naming `name`."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok or not 0.0 <= value <= high:  # NaN fails the range
        raise InputError(name, f"must be a number from 0 to {high_text}, got {value!r}")
    return float(value)


def scaled_in(demand: np.ndarray, reach: np.ndarray, fleet: int, headroom: float, least: int = 1) -> np.ndarray:
    """An autoscaled load's instances serving each window: the fewest of the `fleet` whose capacity (`reach`
    requests a second each) covers the window's `demand` with `headroom` to spare (a share of it: an autoscaler's
    target utilisation of 1 / (1 + headroom), so that a burst within the window finds room), `least` at least (one
    wherever a window has a load)."""
    return np.clip(np.ceil(demand * (1.0 + headroom) / reach), least, fleet)


def standby(serving: np.ndarray, fleet: int, seconds: np.ndarray, idle_w: float, spare: str,
            cold_start_s: float) -> tuple[np.ndarray, np.ndarray]:
    """An autoscaled load's energy beyond its serving instances', each window's (J), and the instances started for
    each: with `spare` "idle", the ones not serving at `idle_w` (an instance's GPUs' idle power) all the window; with
    "off", each instance started for a window (more than the window before it serves; the first window's are running
    already) at `idle_w` for `cold_start_s` seconds, started that long ahead (a scheduled scale-out: it serves from
    the window's start), charged to the window it serves (a reactive autoscaler's: `autoscaler.reactive_instances`).
    A start draws about idle power: Wilkins' 35 model loads
    (Hugging Face transformers, 7-70B models on one to four A100s or a V100, 7-297 s) drew 0.70-1.49x their cards'
    catalog idle power, which reads them with a 21.6 % mean error, -7.3 % bias (experiments/cold_start.py)."""
    started = np.diff(serving, prepend=serving[:1]).clip(min=0.0)
    if spare == "idle":
        return (fleet - serving) * idle_w * seconds, np.zeros_like(serving)
    return started * idle_w * cold_start_s, started
