"""A load's arrivals past what its instances serve, queued for later (`joulecast.serve`'s `queue`), as a fluid queue.

A load comes as stretches of time (a window, or a part of one where a reactive autoscaler's instances change within
it: `estimator.autoscaler`), each with its arrivals spread evenly over it and the most its instances serve. The
backlog at each stretch's end is Lindley's recursion, B = max(0, B_before + arrivals - capacity x seconds), in its
closed form (the running sum of the excess less its running minimum, below 0), so a year of windows is one pass;
what is left at the last stretch's end is served at its capacity in a drain that lengthens it.

A request waits first in, first out: one arriving at t, when A(t) requests have arrived, is served when the
requests served reach A(t), so its wait is D^-1(A(t)) - t, D the requests served by each time (`_fifo_waits`). A
backlog built while few instances serve drains as fast as the instances that come after serve it: an arrival's wait
is not the backlog it finds over the capacity it finds. Both curves are piecewise linear, so each stretch's mean wait
is an integral over the requests, exact, and its worst the largest at their knots.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def queued(arrivals: np.ndarray, capacity: np.ndarray, seconds: np.ndarray,
           drain_capacity: float | None = None) -> dict[str, Any]:
    """The fluid queue of `arrivals` requests in each stretch of `seconds`, served at up to `capacity` requests a
    second (see the module's docstring; a stretch may serve none), what is left past the last served at
    `drain_capacity` (the last stretch's where not given). Returns the requests served in each stretch, its backlog
    at its end (before the drain), its arrivals' mean wait (s) and its worst arrival's, and the drain's seconds."""
    excess = np.cumsum(arrivals - capacity * seconds)
    backlog = excess - np.minimum(np.minimum.accumulate(excess), 0.0)
    backlog[backlog <= 1e-9 * np.cumsum(arrivals + capacity * seconds)] = 0.0  # the running sum's rounding
    before = np.concatenate([[0.0], backlog[:-1]])
    served = np.clip(arrivals + before - backlog, 0.0, capacity * seconds)  # (the running sums' rounding: none
    # served by no capacity)
    last = capacity[-1] if drain_capacity is None else drain_capacity
    drain = float(backlog[-1] / last) if backlog[-1] > 0 else 0.0
    served[-1] += backlog[-1]
    wait, worst = _fifo_waits(arrivals, capacity, seconds, backlog, drain)
    return {"served": served, "backlog": backlog, "wait_s": wait, "worst_wait_s": worst, "drain_s": drain}


def queued_within(arrivals: np.ndarray, reach: np.ndarray, seconds: np.ndarray, window: np.ndarray,
                  lengths: np.ndarray, serving: np.ndarray, drain_capacity: float | None = None) -> dict[str, Any]:
    """`queued` where the instances serving change within a window (a reactive autoscaler's: a start serving part
    way in): over each window's stretches (`window`, their `lengths`, `serving` instances of `reach` requests a
    second each, in time order), its arrivals spread evenly over its seconds, then each window's: what it served, its
    backlog at its end, its arrivals' mean wait (over its stretches by their seconds, as the arrivals are) and its
    worst, and the drain (at `drain_capacity`, as `queued`'s)."""
    line = queued(arrivals[window] * lengths / seconds[window], reach[window] * serving, lengths, drain_capacity)
    firsts = np.flatnonzero(np.diff(window, prepend=-1))  # every window has a stretch from its start
    lasts = np.append(firsts[1:], len(window)) - 1
    return {"served": np.bincount(window, line["served"], minlength=len(seconds)), "backlog": line["backlog"][lasts],
            "wait_s": np.bincount(window, line["wait_s"] * lengths, minlength=len(seconds)) / seconds,
            "worst_wait_s": np.maximum.reduceat(line["worst_wait_s"], firsts), "drain_s": line["drain_s"]}


def _fifo_waits(arrivals: np.ndarray, capacity: np.ndarray, seconds: np.ndarray, backlog: np.ndarray,
                drain_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Each stretch's arrivals' mean wait and its worst (s), first in, first out: the wait of the v-th request is
    w(v) = D^-1(v) - A^-1(v), A and D the requests arrived and served by each time. A's knots are the stretches'
    edges; D's those, where a backlog drains within a stretch (served then as they come), and the drain's end. Between
    consecutive knots of either, w is linear in v, so its integral over a stretch's requests is exact; at a knot
    where a curve is flat (no arrivals; no service) w jumps, so each knot is read from both sides."""
    edges = np.concatenate([[0.0], np.cumsum(seconds)])
    came = np.concatenate([[0.0], np.cumsum(arrivals)])          # A at the edges
    done = came - np.concatenate([[0.0], backlog])                # D at the edges
    before, rate = np.concatenate([[0.0], backlog[:-1]]), arrivals / seconds
    drains = (before > 0) & (backlog == 0) & (capacity > rate)   # emptied within the stretch
    at = edges[:-1][drains] + np.minimum(before[drains] / (capacity - rate)[drains], seconds[drains])
    knots_t = np.concatenate([edges, at, [edges[-1] + drain_s]])
    knots_d = np.concatenate([done, came[:-1][drains] + rate[drains] * (at - edges[:-1][drains]), [came[-1]]])
    order = np.lexsort((knots_d, knots_t))
    knots_t, knots_d = knots_t[order], np.maximum.accumulate(knots_d[order])  # D never falls (rounding aside)
    v = np.unique(np.concatenate([knots_d, came]))
    w_after = _inverse(v, knots_d, knots_t, "right") - _inverse(v, came, edges, "right")
    w_before = _inverse(v, knots_d, knots_t, "left") - _inverse(v, came, edges, "left")
    w_after, w_before = np.maximum(w_after, 0.0), np.maximum(w_before, 0.0)  # (rounding below none)
    total = np.concatenate([[0.0], np.cumsum(np.diff(v) * (w_after[:-1] + w_before[1:]) / 2)])
    at_edges = total[np.searchsorted(v, came)]
    wait = np.divide(np.diff(at_edges), arrivals, out=np.zeros_like(arrivals), where=arrivals > 0)
    # the worst: w at the knots within each stretch's requests, from each side (v ascending, so each stretch's knots
    # follow one another)
    after = np.searchsorted(came, v, side="right") - 1            # the stretch whose requests start at or below v
    before_v = np.searchsorted(came, v, side="left") - 1          # the stretch whose requests end at or above v
    worst = np.maximum(_group_max(after, w_after, len(arrivals)), _group_max(before_v, w_before, len(arrivals)))
    return wait, np.where(arrivals > 0, worst, 0.0)


def _group_max(group: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """The largest of `values` in each of `size` groups (`group` ascending; those outside 0..size-1 left out), 0 in
    a group with none."""
    kept = (group >= 0) & (group < size)
    group, values = group[kept], values[kept]
    out = np.zeros(size)
    if len(group):
        firsts = np.flatnonzero(np.diff(group, prepend=-1))
        out[group[firsts]] = np.maximum.reduceat(values, firsts)
    return out


def _inverse(v: np.ndarray, values: np.ndarray, times: np.ndarray, side: str) -> np.ndarray:
    """The time a non-decreasing piecewise-linear curve (`values` at `times`) reaches each of `v`: "left", the first
    time it reaches it (the limit from below); "right", the last time it is at it (from above: past a flat stretch
    at v). Before the first knot, its time; past the last, the last's."""
    k = np.searchsorted(values, v, side=side)
    low, high = np.clip(k - 1, 0, len(values) - 1), np.clip(k, 0, len(values) - 1)
    rise = values[high] - values[low]
    share = np.divide(v - values[low], rise, out=np.zeros_like(v), where=rise > 0)
    return np.where(k <= 0, times[0], np.where(k >= len(values), times[-1],
                                               times[low] + np.clip(share, 0.0, 1.0) * (times[high] - times[low])))
