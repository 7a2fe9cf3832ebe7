"""A reactive autoscaler's load queued to its last request (`joulecast.serve`'s `reactive` with `queue`).

Requests still waiting when the last window ends are served after it, in a drain at the capacity of the instances
the autoscaler holds for the last window's load (one at least: a queue is load). Those instances are the last
window's for as long as the drain runs, so its power and energy, and its serving and running instances' means over
its lengthened seconds, count them.

Where none serves at the last window's end (scaled to zero, or its starts still loading), none can drain the queue
until the autoscaler's instances have come up: a tail after the last window, without arrivals, as long as the
autoscaler takes to act and an instance to load (`reaction_s`, none where it sizes each window by the one before,
plus `cold_start_s`), over which the queue waits on and the starts draw idle power. The tail is run as one more
window of the autoscaler and the queue, then folded into the last window. (Where a start already loading at the last
window's end serves within the tail, the queue drains as soon, and the tail still counts whole: a start's worth at
most.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from joulecast.estimator.autoscaler import Instances, Reactive, reactive_instances
from joulecast.estimator.fluid_queue import queued_within


def queued_reactive(arrivals: np.ndarray, reach: np.ndarray, seconds: np.ndarray, needed: np.ndarray,
                    how: Reactive) -> tuple[dict[str, Any], Instances]:
    """The queue (`fluid_queue.queued_within`'s figures, its `drain_s` the seconds the last window runs past its
    end) and the instances (`autoscaler.Instances`, the last window's over its lengthened seconds) of `arrivals`
    requests a window of `seconds`, served at up to `reach` requests a second an instance by the instances a reactive
    autoscaler `how` holds for windows needing `needed` (see the module's docstring)."""
    last = max(float(needed[-1]), 1.0)  # the instances draining what waits past the last window
    scaled = reactive_instances(needed, seconds, how)
    line = queued_within(arrivals, reach, seconds, *scaled.pieces, drain_capacity=reach[-1] * last)
    tail_s = (how.reaction_s or 0.0) + how.cold_start_s
    if line["backlog"][-1] > 0 and scaled.pieces.instances[-1] == 0 and tail_s > 0:
        # one window more, of the tail's seconds and no arrivals, its need `last` (sized by the window before it
        # where the autoscaler reacts a window late)
        late = how.reaction_s is None
        wanted = np.append(needed[:-1] if late else needed, [last, last] if late else [last])
        longer = np.append(seconds, tail_s)
        scaled = reactive_instances(wanted, longer, how)
        line = queued_within(np.append(arrivals, 0.0), np.append(reach, reach[-1]), longer, *scaled.pieces,
                             drain_capacity=reach[-1] * last)
        drain_s = line["drain_s"]  # past the tail
        line, scaled = _folded(line, scaled, seconds[-1], tail_s)
        return line, _drained(scaled, seconds[-1] + tail_s, drain_s, last)
    return line, _drained(scaled, seconds[-1], line["drain_s"], last)


def _folded(line: dict[str, Any], scaled: Instances, last_s: float, tail_s: float
            ) -> tuple[dict[str, Any], Instances]:
    """The tail (the last of `line`'s and `scaled`'s windows, `tail_s` long) folded into the window before it (of
    `last_s` seconds): its requests served, its starts and their seconds added, its instances' means over both, its
    seconds in the drain's."""
    n = len(scaled.held) - 1

    def mean(values: np.ndarray) -> np.ndarray:
        return np.append(values[:-2], (values[-2] * last_s + values[-1] * tail_s) / (last_s + tail_s))

    def add(values: np.ndarray) -> np.ndarray:
        return np.append(values[:-2], values[-2] + values[-1])

    pieces = scaled.pieces
    out = {"served": add(line["served"]), "backlog": line["backlog"][:-1], "wait_s": line["wait_s"][:-1],
           "worst_wait_s": line["worst_wait_s"][:-1], "drain_s": tail_s + line["drain_s"]}
    return out, Instances(mean(scaled.held), mean(scaled.serving), add(scaled.started), add(scaled.starting_s),
                          pieces._replace(window=np.minimum(pieces.window, n - 1)))


def _drained(scaled: Instances, before_s: float, drain_s: float, last: float) -> Instances:
    """`scaled` with the last window's means over its `before_s` seconds and the drain's `drain_s` after them, `last`
    instances serving through the drain."""
    if drain_s <= 0:
        return scaled

    def mean(values: np.ndarray) -> np.ndarray:
        return np.append(values[:-1], (values[-1] * before_s + last * drain_s) / (before_s + drain_s))

    return scaled._replace(held=mean(scaled.held), serving=mean(scaled.serving))
