"""A file of requests: each one's prompt and answer lengths in tokens, and where the file has them its arrival times.

`generate --requests` runs the requests in static batches; `serve --requests` takes their load: the mean lengths,
their spread and, from the arrival times, the request rate. Besides joulecast's own columns (`input_len`,
`output_len`, optionally `arrival_s`), the public serving traces read as their publishers wrote them (`FORMATS`), so
a trace can be pointed at as downloaded.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.data.files import kind_of, read_text
from joulecast.data.workload import MAX_SIZE


@dataclass(frozen=True, slots=True)
class Format:
    """How a trace names its lengths and arrival times; `time_unit`: "s", "ms", or "datetime" (a date and time)."""
    name: str
    input: str
    output: str
    time: str | None = None
    time_unit: str = "s"


# Each trace's columns as its publisher documents them.
FORMATS = (
    Format("joulecast's columns", "input_len", "output_len", "arrival_s", "s"),
    # github.com/Azure/AzurePublicDataset, AzureLLMInferenceTrace_{code,conv}.csv (2023, Splitwise) and the 2024
    # week-long traces (DynamoLLM): TIMESTAMP,ContextTokens,GeneratedTokens
    Format("Azure LLM inference trace", "ContextTokens", "GeneratedTokens", "TIMESTAMP", "datetime"),
    # github.com/HPMLL/BurstGPT: Timestamp (seconds from the collection's start),Model,Request tokens,Response tokens,
    # Total tokens,Log Type
    Format("BurstGPT", "Request tokens", "Response tokens", "Timestamp", "s"),
    # Mooncake's traces (github.com/kvcache-ai/Mooncake, JSON lines): timestamp (ms), input_length, output_length
    Format("Mooncake", "input_length", "output_length", "timestamp", "ms"),
    # an OpenAI-compatible API's usage objects (vLLM's and SGLang's servers return them too)
    Format("OpenAI usage", "prompt_tokens", "completion_tokens"),
)
_SECONDS = {"s": 1.0, "ms": 1e-3}
# An arrival time's bound, in seconds either way of the file's zero: past a million years, no trace; it keeps the
# times' span finite (1e308 and -1e308 spanned infinity, a rate of zero).
MAX_TIME_S = 3.2e13
# The window a trace's busiest arrivals are counted in (`RequestTrace.peak_hour_rate`): an hour, as a grid's carbon
# intensity and a datacenter's load are read.
PEAK_WINDOW_S = 3600.0
# A load priced window by window (`RequestTrace.window_rates`): each window is served as a steady state, which a
# window shorter than its requests last never reaches, hence a minute at least; and at most a million windows (a
# year's trace at 32 s), each a few numbers in the estimate.
MIN_WINDOW_S = 60.0
MAX_WINDOWS = 1_000_000
# The serving options a list of requests sets, and so refuses beside it
LENGTH_FIELDS = ("input_len", "output_len", "input_len_cv", "output_len_cv")


@dataclass(frozen=True, slots=True)
class RequestTrace:
    """Requests read from a file: lengths in tokens, arrival times in seconds from the first (None where the file has
    none), the format read, and how many rows were left out for asking no output token (a failed request's row)."""
    input_len: np.ndarray
    output_len: np.ndarray
    arrival_s: np.ndarray | None
    format: str
    left_out: int = 0
    origin_s: float | None = None  # the first arrival, seconds since 1970 (UTC), where the file gives dates

    def pairs(self) -> list[list[int]]:
        """[[input_len, output_len], ...] in the file's order (`estimator.jobs.generate_requests`)."""
        return np.stack([self.input_len, self.output_len], axis=1).tolist()

    @property
    def span_s(self) -> float | None:
        """Seconds from the first arrival to the last, where the file has times."""
        return None if self.arrival_s is None else float(self.arrival_s.max() - self.arrival_s.min())

    @property
    def request_rate(self) -> float | None:
        """The mean arrival rate (requests a second: the gaps between the arrivals, over their span); None without
        times or with every request at one instant."""
        span = self.span_s
        return None if not span else (len(self.input_len) - 1) / span

    def load(self) -> dict[str, float]:
        """`serve`'s length options: the mean lengths and each one's standard deviation over its mean."""
        ins, outs = self.input_len.astype(float), self.output_len.astype(float)
        return {"input_len": float(ins.mean()), "output_len": float(outs.mean()),
                "input_len_cv": float(ins.std() / ins.mean()), "output_len_cv": float(outs.std() / outs.mean())}

    def windows(self, window_s: Any, field: str = "window_s") -> tuple[np.ndarray, float]:
        """The arrivals a second in each `window_s` seconds from the first arrival to the last, and the last window's
        own length, for `serve`'s `window_rates` and `last_window_s`: as many windows as cover the span (one at
        least), the last as long as the file runs into it (its rate its arrivals over that), a last one shorter than
        MIN_WINDOW_S joined to the one before (a sliver's rate would read its few arrivals as a burst); one line
        naming `field` where the file has no times or the window is not from MIN_WINDOW_S to the file's span
        (MAX_WINDOWS windows at most)."""
        _, seconds, count = self._by_window(window_s, field)
        return count / seconds, float(seconds[-1])

    def window_lengths(self, window_s: Any, field: str = "window_s") -> pd.DataFrame:
        """Each window's requests' lengths as `load` gives the whole file's (a row a window, `windows`' windows, the
        columns LENGTH_FIELDS; NaN for a window without arrivals), for `serve`'s `window_lengths`: an hour whose
        prompts run longer priced at its own lengths, not the file's mean."""
        which, _, count = self._by_window(window_s, field)
        return self._lengths_by(which, count)

    def _lengths_by(self, which: np.ndarray, count: np.ndarray) -> pd.DataFrame:
        """`window_lengths` of the requests in windows `which`, `count` in each."""
        columns = {}
        with np.errstate(invalid="ignore", divide="ignore"):  # an empty window's 0 / 0: NaN, as documented
            for name, lengths in (("input_len", self.input_len), ("output_len", self.output_len)):
                x = lengths.astype(float)
                mean = np.bincount(which, x, len(count)) / count
                square = np.bincount(which, x * x, len(count)) / count
                columns[name] = mean
                columns[f"{name}_cv"] = np.sqrt(np.maximum(square - mean * mean, 0.0)) / mean
        return pd.DataFrame(columns)[list(LENGTH_FIELDS)]

    def _by_window(self, window_s: Any, field: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each request's window, each window's seconds and its requests (`windows`), else one line naming
        `field`."""
        if self.arrival_s is None:
            raise InputError(field, "the requests have no arrival times to count in windows")
        span = self.span_s
        if span < MIN_WINDOW_S:
            raise InputError(field, f"the requests arrive within {span:.3g} s, under the shortest window's "
                                    f"{MIN_WINDOW_S:g} s: serve them without one (the file's mean rate)")
        number = isinstance(window_s, (int, float, np.integer, np.floating)) and not isinstance(window_s, bool)
        if not (number and MIN_WINDOW_S <= window_s <= span):  # NaN fails the range; one window longer than the file
            # would read its rate low
            raise InputError(field, f"must be seconds from {MIN_WINDOW_S:g} (a window is served as a steady state) to "
                                    f"the requests' span, {span:,.0f} s, got {window_s!r}")
        count = max(1, int(np.ceil(span / window_s)))
        if count > MAX_WINDOWS:
            raise InputError(field, f"{window_s:g} s over the requests' {span:,.0f} s is {count:,} windows, more than "
                                    f"{MAX_WINDOWS:,}; give at least {math.ceil(span / MAX_WINDOWS):,} s")
        last = span - (count - 1) * window_s
        if count > 1 and last < MIN_WINDOW_S:  # a sliver: the window before runs on to the last arrival
            count, last = count - 1, last + window_s
        seconds = np.full(count, float(window_s))
        seconds[-1] = last
        which = np.minimum(self.arrival_s // window_s, count - 1).astype(np.int64)
        return which, seconds, np.bincount(which, minlength=count).astype(float)

    def serving(self, *, concurrency: Any = None, request_rate: Any = None, duration_s: Any = None,
                output_tokens: Any = None, window_s: Any = None, rate_field: str = "request_rate") -> dict[str, Any]:
        """`serve`'s options for this load (`load`), given the caller's: its arrival rate where neither a concurrency
        nor a rate is given (none in the file: one line naming `rate_field`), totalled over its output tokens where
        neither a duration nor a token count is given; with `window_s`, its rate and lengths window by window
        (`window_rates`, `window_lengths`) and its totals theirs, so none of those four beside it."""
        if window_s is not None:
            given = next((k for k, v in (("concurrency", concurrency), ("request_rate", request_rate),
                                         ("duration_s", duration_s), ("output_tokens", output_tokens))
                          if v is not None), None)
            if given:
                raise InputError(given, "not with a window: the requests' arrivals set each window's rate, and "
                                        "its totals are theirs")
            which, seconds, count = self._by_window(window_s, "window_s")  # once for rates and lengths
            return {"window_rates": count / seconds, "window_s": float(window_s), "last_window_s": float(seconds[-1]),
                    "window_lengths": self._lengths_by(which, count)}
        out: dict[str, Any] = {**self.load(), "concurrency": concurrency, "request_rate": request_rate,
                               "duration_s": duration_s, "output_tokens": output_tokens}
        if concurrency is None and request_rate is None:
            if self.request_rate is None:
                raise InputError(rate_field, "the requests have no arrival times (or all at one instant); give "
                                             "a request rate or a concurrency")
            out["request_rate"] = self.request_rate
        if duration_s is None and output_tokens is None:  # the requests' own work
            out["output_tokens"] = float(self.output_len.sum())
        return out

    @property
    def peak_hour_rate(self) -> float | None:
        """The busiest whole hour's arrivals a second, where the times span two hours or more (None otherwise): a
        load served at the mean rate averages a trace's daily peaks away, and instances sized for the mean do not
        serve them."""
        span = self.span_s
        if not span or span < 2 * PEAK_WINDOW_S:
            return None
        # whole hours only (the last is cut short), counted by value: a bin an hour of a span of years would not fit
        hours = self.arrival_s // PEAK_WINDOW_S
        _, counts = np.unique(hours[hours < span // PEAK_WINDOW_S], return_counts=True)
        return float(counts.max()) / PEAK_WINDOW_S

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "requests": int(len(self.input_len)), "left_out": self.left_out,
                "first_arrival": None if self.origin_s is None else utc_text(self.origin_s), "span_s": self.span_s,
                "request_rate": self.request_rate, "peak_hour_rate": self.peak_hour_rate,
                **self.load()}


def refuse_windows(fields: Any) -> None:
    """One line naming window_rates, last_window_s or window_lengths given (not None) in `fields` beside a list of
    requests, whose arrivals set them (with window_s)."""
    given = next((k for k in ("window_rates", "last_window_s", "window_lengths") if fields.get(k) is not None), None)
    if given:
        raise InputError(given, "not with requests: their arrivals set each window's rate, lengths and the last one's "
                                "length (give window_s)")


def refuse_lengths(fields: Any) -> None:
    """One line naming the first of LENGTH_FIELDS given (not None) in `fields` beside a list of requests."""
    given = next((k for k in LENGTH_FIELDS if fields.get(k) is not None), None)
    if given:
        raise InputError(given, "not with requests: their lengths are the requests'")


def read_requests(path: str | Path, field: str = "--requests") -> RequestTrace:
    """A requests file: CSV (`.csv`, else anything not JSON), JSON (`.json`: a list of [input_len, output_len] pairs
    or of objects) or JSON lines (`.jsonl`: an object a line), its columns or keys those of one of `FORMATS`. Rows
    asking no output token are left out and counted; anything else wrong is one line naming `field` and the row."""
    path = Path(path)
    return _trace(_table(read_text(path, field), path, field), f"{path}: ", field)


def requests_from_rows(rows: Any, field: str = "requests") -> RequestTrace:
    """`read_requests` of a JSON file's content, as a service's body sends it: a list of [input_len, output_len]
    pairs or of objects with one format's keys (`FORMATS`)."""
    return _trace(_rows_table(rows, "", field), "", field)


def _trace(table: pd.DataFrame, where: str, field: str) -> RequestTrace:
    """`read_requests` of a table read (`where`: the file's name and a colon, for its messages)."""
    if table.empty:
        raise InputError(field, f"{where}holds no requests{', only its header' if len(table.columns) else ''}")
    form = next((f for f in FORMATS if {f.input, f.output} <= set(table.columns)), None)
    if form is None:
        names = "; ".join(f"{f.input} and {f.output} ({f.name})" for f in FORMATS)
        raise InputError(field, f"{where}needs a prompt and an answer length a request, as columns or keys: {names}")
    ins, outs = (_lengths(table[c], where, field, low) for c, low in ((form.input, 1), (form.output, 0)))
    times = _times(table[form.time], form, where, field) if form.time in table.columns else None
    kept = outs > 0  # a failed request asked no answer (BurstGPT's failure rows): nothing to generate or serve
    if not kept.any():
        raise InputError(field, f"{where}every request asks no output token")
    origin = None
    if times is not None:
        origin = float(times[kept].min())
        times = times[kept] - origin
    return RequestTrace(ins[kept], outs[kept], times, form.name, int((~kept).sum()),
                        origin if form.time_unit == "datetime" else None)


def utc_text(epoch_s: float) -> str:
    """Seconds since 1970 as an ISO 8601 UTC time to the second ('2023-11-16T18:15:46Z')."""
    return pd.Timestamp(epoch_s, unit="s", tz="UTC").strftime("%Y-%m-%dT%H:%M:%SZ")


def _table(text: str, path: Path, field: str) -> pd.DataFrame:
    """The file's rows as a table, one column a length or time (a JSON pair: input_len and output_len)."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".jsonl"):
        try:
            return pd.read_csv(io.StringIO(text), skipinitialspace=True)
        except pd.errors.EmptyDataError:
            return pd.DataFrame()
        except (pd.errors.ParserError, UnicodeError) as exc:
            raise InputError(field, f"{path}: not a CSV ({str(exc).splitlines()[0] if str(exc) else exc})") from None
    if suffix == ".jsonl":  # an object a line: parsed as one array, in one call
        lines = [line for line in text.splitlines() if line.strip()]
        try:
            rows = json.loads("[" + ",".join(lines) + "]")
        except json.JSONDecodeError:
            for n, line in enumerate(text.splitlines(), 1):  # only to name the line that is not JSON
                try:
                    json.loads(line) if line.strip() else None
                except json.JSONDecodeError as exc:
                    raise InputError(field, f"{path}: not JSON lines ({exc.msg}, line {n})") from None
            raise InputError(field, f"{path}: not JSON lines") from None  # not reached: some line failed
    else:
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(field, f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return _rows_table(rows, f"{path}: ", field)


def _rows_table(rows: Any, where: str, field: str) -> pd.DataFrame:
    """A JSON list of requests as a table: a pair's two lengths as input_len and output_len, an object's keys."""
    if not isinstance(rows, list):
        raise InputError(field, f"{where}a list of requests, got {kind_of(rows)}")
    for i, row in enumerate(rows):
        if not (isinstance(row, dict) or isinstance(row, list) and len(row) == 2):
            raise InputError(f"{field} row {i + 1}", f"{where}an [input_len, output_len] pair or an object, got "
                                                     f"{json.dumps(row, default=str)[:40]}")
    return pd.DataFrame([dict(zip(("input_len", "output_len"), r)) if isinstance(r, list) else r for r in rows])


def _lengths(values: pd.Series, where: str, field: str, low: int) -> np.ndarray:
    """A column of lengths as whole numbers from `low` to MAX_SIZE (512, 512.0 or 1e3), else one line naming the
    first bad row (in one pass over the column: a week's trace has millions of rows)."""
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(numbers) & (numbers == np.round(numbers)) & (numbers >= low) & (numbers <= MAX_SIZE)
    if values.dtype == object:  # JSON's true is no length, though pandas reads it as 1
        ok &= ~values.map(lambda v: isinstance(v, bool)).to_numpy(dtype=bool)
    elif values.dtype == bool:
        ok[:] = False
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise InputError(f"{field} row {i + 1}", f"{where}{values.name} must be a whole number from {low} to "
                                                 f"{MAX_SIZE:,}, got {_shown(values.iloc[i])!r}")
    return numbers.astype(np.int64)


def _times(values: pd.Series, form: Format, where: str, field: str) -> np.ndarray:
    """A column of arrival times in seconds, else one line naming the first bad row."""
    if form.time_unit == "datetime":
        # seconds since 1970 in UTC, a time without its zone's offset taken as UTC; ISO 8601 first (the traces'
        # form, twice mixed's speed), then each cell written otherwise ("11/16/2023 18:15") by its own form
        seconds = _epoch_s(pd.to_datetime(values, errors="coerce", format="ISO8601", utc=True))
        odd = np.isnan(seconds)
        if odd.any():
            seconds[odd] = _epoch_s(pd.to_datetime(values[odd], errors="coerce", format="mixed", utc=True))
        bad = np.isnan(seconds)
    else:
        seconds = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float) * _SECONDS[form.time_unit]
        bad = ~(np.abs(seconds) <= MAX_TIME_S)  # NaN too
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = ("a date and time" if form.time_unit == "datetime"
                else f"a number ({form.time_unit}) within {MAX_TIME_S:g} s of zero")
        raise InputError(f"{field} row {i + 1}", f"{where}{values.name} must be {what}, got {_shown(values.iloc[i])!r}")
    return seconds


def _epoch_s(stamps: pd.Series) -> np.ndarray:
    """UTC times as seconds since 1970 (NaN for none), whatever unit pandas holds them in."""
    return (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=float, copy=True)


def _shown(value: Any) -> Any:
    """A cell as its writer wrote it: numpy's scalars as Python's (1e+30, not np.float64(1e+30))."""
    return value.item() if isinstance(value, np.generic) else value
