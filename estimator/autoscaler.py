"""A reactive autoscaler's instances over a load given window by window (`joulecast.serve`'s `reactive`).

It scales on the load it measured, so the instances it holds follow the instances each window needs late: by a
window (`reaction_s` None: it sizes each window by the one before it) or by `reaction_s` seconds after the load
changes (a metrics pipeline and its sync: Kubernetes' HPA syncs every 15 s by default). It scales in no sooner
than the largest need of the last `scale_in_delay_s` seconds allows (the HPA's scale-down stabilization window,
300 s by default; it holds "the highest recommendation" within it). An instance it starts serves `cold_start_s`
after its start, and one it stops is one not yet serving where it has any (Kubernetes' ReplicaSet deletes unready
pods first and, among alike, the newest), so the instances serving at a time t are the fewest held over
[t - cold_start_s, t]: an instance started in that span is not yet loaded, and one stopped in it is gone, the
newest first (instances as a stack).

Each is a piecewise-constant function of time (a value from each cut on, the first also before it: the load's
instances running before it starts), and each trailing extreme one too, with its cuts where a piece enters or
leaves the span, so a year of windows is a few passes of sorts and a sparse table's range extremes, never a loop
over windows. Each window takes its mean over its seconds: the instances it holds, those serving, and the
instance-seconds of starts not yet serving (drawing idle power).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np


class Reactive(NamedTuple):
    """How a reactive autoscaler follows the load (see the module's docstring), in seconds."""
    cold_start_s: float = 0.0
    reaction_s: float | None = None   # None: each window sized by the window before it
    scale_in_delay_s: float = 0.0


class Pieces(NamedTuple):
    """The stretches of a load's windows over which a count of instances holds still, in time order."""
    window: np.ndarray    # the window each lies in
    seconds: np.ndarray
    instances: np.ndarray  # throughout it


class Instances(NamedTuple):
    """A reactive autoscaler's instances, each window's mean over its seconds, and those serving as they change."""
    held: np.ndarray      # running (serving or starting)
    serving: np.ndarray   # loaded and serving
    started: np.ndarray   # instances started within the window
    starting_s: np.ndarray  # instance-seconds of starts not yet serving (held - serving, x seconds)
    pieces: Pieces        # those serving, stretch by stretch


def following_text(reaction_s: float | None, scale_in_delay_s: float,
                   seconds: Callable[[float], str] = lambda s: f"{s:g} s") -> str:
    """How a reactive autoscaler follows the load, in words (its refusals and tables say it), each time by
    `seconds`."""
    late = ("each window on what the window before needed" if reaction_s is None else
            f"scaling {seconds(reaction_s)} after a window's load changes")
    return late + (f", in to the most needed over {seconds(scale_in_delay_s)}" if scale_in_delay_s else "")


def reactive_instances(needed: np.ndarray, seconds: np.ndarray, how: Reactive) -> Instances:
    """Each window's instances under a reactive autoscaler `how`, the windows (of `seconds` each) needing `needed`
    (the first window's running already)."""
    edges = np.concatenate([[0.0], np.cumsum(seconds)])
    if how.reaction_s is None:  # each window on what the window before needed
        target = edges[:-1], np.concatenate([needed[:1], needed[:-1]])
    else:  # what each window needs from reaction_s into it
        target = edges[:-1] + how.reaction_s, needed
    held = _trailing(*target, how.scale_in_delay_s, np.maximum)
    serving = _trailing(*held, how.cold_start_s, np.minimum)
    pieces = _pieces(*serving, edges)
    held_mean, serving_mean = _means(_pieces(*held, edges), seconds), _means(pieces, seconds)
    rises = np.diff(held[1], prepend=held[1][:1]).clip(min=0.0)
    inside = (held[0] >= edges[0]) & (held[0] < edges[-1])
    started = np.bincount(np.searchsorted(edges, held[0][inside], side="right") - 1, rises[inside],
                          minlength=len(seconds))
    # held >= serving to rounding (a window mean of two sums over the same cuts)
    starting = np.clip(held_mean - serving_mean, 0.0, None) * seconds
    return Instances(held_mean, np.minimum(serving_mean, held_mean), started, starting, pieces)


def _trailing(cuts: np.ndarray, values: np.ndarray, span: float,
              pick: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The function g(t) = `pick` of f over [t - span, t], f the piecewise-constant `values` from each of `cuts` on
    (ascending; the first value also before them), as cuts and values: g's pieces change where one of f's enters
    the span (its cut) or leaves it (the next cut, `span` later)."""
    if span <= 0.0:
        return cuts, values
    out = np.unique(np.concatenate([cuts, cuts[1:] + span]))
    # the piece holding t - span: compared as cuts + span, the very sums `out` holds (out - span may round below)
    first = (np.searchsorted(cuts + span, out, side="right") - 1).clip(min=0)
    last = (np.searchsorted(cuts, out, side="right") - 1).clip(min=0)
    picked = _range_pick(values, first, last, pick)
    changes = np.concatenate([[True], picked[1:] != picked[:-1]])  # a cut where the value changes, no other
    return out[changes], picked[changes]


def _range_pick(values: np.ndarray, first: np.ndarray, last: np.ndarray,
                pick: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """`pick` (np.minimum or np.maximum) over values[first:last + 1] for each pair, from a sparse table: level k
    holds each run of 2^k values' extreme, and a range is two runs of its length's largest power of two that
    cover it. Levels are built only as far as the longest range asks (a span of a few windows: a few levels)."""
    level = np.frexp((last - first + 1).astype(np.float64))[1] - 1  # floor(log2(length)), exact on integers
    levels = [values]
    for k in range(1, int(level.max(initial=0)) + 1):
        below, run = levels[-1], 2 ** (k - 1)
        levels.append(pick(below[:-run], below[run:]))
    out = np.empty(len(first))
    for k in np.unique(level):
        at = level == k
        out[at] = pick(levels[k][first[at]], levels[k][last[at] - 2 ** k + 1])
    return out


def _pieces(cuts: np.ndarray, values: np.ndarray, edges: np.ndarray) -> Pieces:
    """The piecewise-constant `values` from each of `cuts` on, cut at the windows' `edges` too."""
    starts = np.union1d(cuts[(cuts > edges[0]) & (cuts < edges[-1])], edges[:-1])
    value = values[(np.searchsorted(cuts, starts, side="right") - 1).clip(min=0)]
    return Pieces(np.searchsorted(edges, starts, side="right") - 1, np.diff(np.append(starts, edges[-1])), value)


def _means(pieces: Pieces, seconds: np.ndarray) -> np.ndarray:
    """Each window's mean of its `pieces`' values over its `seconds`."""
    means = np.bincount(pieces.window, pieces.instances * pieces.seconds, minlength=len(seconds)) / seconds
    return np.clip(means, pieces.instances.min(), pieces.instances.max())  # within its values, not a rounding past
