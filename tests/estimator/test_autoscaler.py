"""A reactive autoscaler's instances (`estimator.autoscaler`) against a second-by-second simulation of one: its
target late by a window or its reaction, scaled in to the most of its stabilization span, its starts loading for
their cold start and its stops taking the newest instance first."""

import numpy as np
import pytest

from joulecast.estimator.autoscaler import Reactive, reactive_instances
from joulecast.estimator.fluid_queue import queued, queued_within


def _simulated(needed, seconds, how):
    """Each window's mean instances held and serving, its starts and its starting instance-seconds, second by
    second (every length a whole number of seconds), the instances a stack of their start times."""
    edges = np.concatenate([[0], np.cumsum(seconds)]).astype(int)
    window_of = np.repeat(np.arange(len(seconds)), seconds)
    lag = int(seconds[0]) if how.reaction_s is None else int(how.reaction_s)

    def target(t):
        if how.reaction_s is None:  # the window before's need (the first window's own)
            return needed[max(window_of[t] - 1, 0)]
        return needed[window_of[t - lag]] if t >= lag else needed[0]

    aims = np.array([target(t) for t in range(edges[-1])])
    stack = [-np.inf] * int(aims[0])  # running before the load, loaded long since
    held, serving, started = (np.zeros(len(seconds)) for _ in range(3))
    for t in range(edges[-1]):
        w = window_of[t]
        want = int(aims[max(t - int(how.scale_in_delay_s), 0):t + 1].max())  # the most over the span
        while len(stack) < want:
            stack.append(t)
            started[w] += 1
        del stack[want:]  # the newest go first
        held[w] += len(stack)
        serving[w] += sum(start <= t - how.cold_start_s for start in stack)
    return held / seconds, serving / seconds, started, held - serving


@pytest.mark.parametrize("seed", range(12))
def test_a_reactive_autoscaler_s_instances_as_one_runs_second_by_second(seed):
    rng = np.random.default_rng(seed)
    windows = int(rng.integers(1, 9))
    seconds = rng.integers(20, 200, windows)
    needed = rng.integers(1, 7, windows).astype(float)
    how = Reactive(cold_start_s=float(rng.integers(0, 400)),
                   reaction_s=None if seed % 3 == 0 else float(rng.integers(0, 150)),
                   scale_in_delay_s=float(rng.integers(0, 300)) if seed % 2 else 0.0)
    got = reactive_instances(needed, seconds.astype(float), how)
    held, serving, started, starting = _simulated(needed, seconds, how)
    assert got.held == pytest.approx(held, abs=1e-9) and got.serving == pytest.approx(serving, abs=1e-9), how
    assert got.started == pytest.approx(started) and got.starting_s == pytest.approx(starting, abs=1e-6), how


def test_a_start_within_a_window_serves_its_rest_and_a_longer_one_the_windows_after():
    """Sized a window late, a start of a fifth of a window serves the window's last four fifths (held less the
    started over the share they load); one of 2.5 windows serves from half into the third window after its own."""
    needed = np.array([1.0, 3.0, 3.0, 3.0, 3.0, 1.0])
    seconds = np.full(6, 600.0)
    short = reactive_instances(needed, seconds, Reactive(cold_start_s=120.0))
    assert short.held.tolist() == [1, 1, 3, 3, 3, 3] and short.started.tolist() == [0, 0, 2, 0, 0, 0]
    assert short.serving == pytest.approx([1, 1, 3 - 2 * 0.2, 3, 3, 3])
    long = reactive_instances(needed, seconds, Reactive(cold_start_s=1500.0))
    assert long.serving == pytest.approx([1, 1, 1, 1, 2, 3]) and long.starting_s.sum() == pytest.approx(2 * 1500)


def test_a_reaction_and_a_scale_in_delay_shift_the_instances_within_windows():
    """Scaling 60 s after the load changes, a start of 60 s serving 120 s in; scaling in 300 s after the need
    fell, the rest of that window on the fewer."""
    got = reactive_instances(np.array([1.0, 3.0, 3.0, 1.0]), np.full(4, 600.0), Reactive(60.0, 60.0, 300.0))
    assert got.held == pytest.approx([1, (60 + 3 * 540) / 600, 3, (3 * 360 + 240) / 600])
    assert got.serving == pytest.approx([1, (120 + 3 * 480) / 600, 3, (3 * 360 + 240) / 600])
    assert got.started.tolist() == [0, 2, 0, 0] and got.starting_s == pytest.approx([0, 120, 0, 0])
    # acting at once and loading at once: each window on its own need
    now = reactive_instances(np.array([1.0, 3.0, 3.0, 1.0]), np.full(4, 600.0), Reactive(0.0, 0.0, 0.0))
    assert now.held.tolist() == now.serving.tolist() == [1, 3, 3, 1]


def test_a_year_of_hourly_windows_in_whole_instances():
    """8,760 windows: every mean within the needs, whole where nothing moves within a window (a window late, no
    start or delay), and a drop that comes back within a cold start restarts its instance."""
    rng = np.random.default_rng(0)
    needed = rng.integers(1, 40, 8760).astype(float)
    plain = reactive_instances(needed, np.full(8760, 3600.0), Reactive())
    assert plain.held.tolist() == [needed[0], *needed[:-1]] and (plain.serving == plain.held).all()
    slow = reactive_instances(needed, np.full(8760, 3600.0), Reactive(600.0, 90.0, 300.0))
    assert ((slow.serving >= 1) & (slow.serving <= slow.held) & (slow.held <= 39)).all()
    dip = reactive_instances(np.array([2.0, 1.0, 2.0, 2.0]), np.array([600.0, 10.0, 600.0, 600.0]),
                             Reactive(60.0, 0.0))
    assert dip.started.tolist() == [0, 0, 1, 0] and dip.serving[2] == pytest.approx(2 - 60 / 600)


def test_a_queue_over_the_stretches_a_start_leaves_as_a_fluid_queue_runs():
    """`fluid_queue.queued_within`: a rising window's arrivals past its first stretch's instances queue until the
    start serves, then drain at the capacity after it: each window's backlog at its end, its arrivals' mean wait and
    its worst, first in first out, as a fluid queue stepped every millisecond has them (each arrival served when the
    requests served reach those arrived before it); a window alike throughout reads as `queued` does."""
    seconds, rates, reach = np.array([100.0, 100.0, 100.0]), np.array([1.0, 3.0, 1.0]), np.ones(3)
    scaled = reactive_instances(np.array([1.0, 5.0, 1.0]), seconds, Reactive(cold_start_s=30.0, reaction_s=10.0))
    got = queued_within(rates * seconds, reach, seconds, *scaled.pieces)
    dt = 1e-3
    t = np.arange(0, 300, dt) + dt / 2
    window = (t // 100).astype(int)
    # scaled to 5 at 110 s, serving from 140 s; back to 1 at 210 s
    capacity = reach[window] * np.select([t < 140, t < 210], [1, 5], 1)
    excess = np.cumsum((rates[window] - capacity) * dt)
    backlog = excess - np.minimum(np.minimum.accumulate(excess), 0.0)
    ends = backlog[np.searchsorted(t, [100, 200, 300]) - 1]
    assert got["backlog"] == pytest.approx(ends, abs=1e-2) and got["backlog"].tolist() == [0, 0, 0]
    came = np.cumsum(rates[window] * dt)
    served = came - backlog
    waits = t[np.minimum(np.searchsorted(served, came - 1e-9), len(t) - 1)] - t  # first in, first out
    assert got["wait_s"] == pytest.approx(np.bincount(window, waits) / np.bincount(window), abs=1e-2)
    # the backlog of 80 built in the first 40 s drains at 5 a second: its arrivals wait 18.7 s on average, 26.7 s at
    # most (13.3 s in), where the backlog found over the capacity then read 40 and 80 s; those after, 5.3 s
    assert got["wait_s"][1] == pytest.approx((40 * (18 + 2 / 3) + 60 * (5 + 1 / 3)) / 100)
    assert got["worst_wait_s"] == pytest.approx([0, 26 + 2 / 3, 0], abs=1e-9)
    assert got["worst_wait_s"][1] == pytest.approx(waits[window == 1].max(), abs=1e-2)
    whole = queued(rates * seconds, reach * scaled.serving, seconds)
    assert got["wait_s"][0] == whole["wait_s"][0] and whole["wait_s"][1] < got["wait_s"][1] / 10


def test_a_fluid_queue_waits_first_in_first_out():
    """`fluid_queue.queued` on windows: at one capacity, each arrival waits the backlog it finds over the capacity
    (a window whose backlog grows to 100 at 2 a second: 25 s on average, 50 s at most); past the last window, its
    backlog drains at the last capacity; a window with no arrivals waits nothing."""
    line = queued(np.array([300.0, 100.0, 0.0]), np.full(3, 2.0), np.array([100.0, 100.0, 100.0]))
    assert line["wait_s"] == pytest.approx([25, 25, 0]) and line["worst_wait_s"] == pytest.approx([50, 50, 0])
    line = queued(np.array([50.0, 400.0]), np.array([1.0, 2.0]), np.array([100.0, 100.0]))
    assert line["backlog"].tolist() == [0, 200] and line["drain_s"] == 100
    # in window 2 the backlog grows 2 a second: the last arrival waits 200 / 2 s, on average half that
    assert line["wait_s"] == pytest.approx([0, 50]) and line["worst_wait_s"] == pytest.approx([0, 100])


def test_a_stretch_that_serves_none_holds_its_arrivals_until_one_does():
    """A stretch of no capacity (scaled to zero, its start loading): its arrivals wait for the first that serves,
    first in, first out (50 s at none then 2 a second, 1 arriving a second: 37.5 s on average, 50 s at most, then
    6.25 s and 25 s); a backlog left past the last stretch drains at the capacity given for it."""
    line = queued(np.array([50.0, 100.0]), np.array([0.0, 2.0]), np.array([50.0, 100.0]))
    assert line["backlog"].tolist() == [50, 0] and line["served"].tolist() == [0, 150]
    assert line["wait_s"] == pytest.approx([37.5, 6.25]) and line["worst_wait_s"] == pytest.approx([50, 25])
    left = queued(np.array([50.0]), np.array([0.0]), np.array([50.0]), drain_capacity=5.0)
    # the arrival at t served at 50 + t / 5: waits 50 - 0.8 t
    assert left["drain_s"] == 10 and left["wait_s"] == pytest.approx([30])
    assert left["worst_wait_s"] == pytest.approx([50])
