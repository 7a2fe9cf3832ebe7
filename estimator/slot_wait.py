"""A request's wait for one of a continuous-batching engine's slots (`serve`'s `slot_wait_s`, part of its `ttft_s`).

An engine runs at most `max_batch` requests a step; one arriving while every slot is taken waits in its queue
before its prefill. At a concurrency C past max_batch the wait is Little's law's on the closed loop: C - max_batch
requests queue in front of a throughput of X requests a second, so each waits (C - max_batch) / X. At a request
rate (Poisson arrivals) the requests in the engine are a birth-death chain: n of them (in service, or queued past
max_batch) go up at the rate and down at the throughput X(n) = min(n, max_batch) / (output_len x step(n)), the
engine's capacity curve (`serve`'s), so P(n) is proportional to rate^n / (X(1) ... X(n)), exact where each
request's remaining work is memoryless (answers of geometric length); past max_batch the chain is geometric. The
mean queue over the rate is the mean wait (Little's law), scaled for answers whose lengths spread less (cv 0: all
as long, M/D/c by Cosmetatos' approximation; between, interpolated in cv^2) or more (Allen and Cunneen's
(1 + cv^2) / 2): `spread_factor`; and before it the step
an arrival finds running, half of it (engines admit requests between steps; Poisson arrivals see the chain's time
averages, so that step is step(n) with n as the chain has it). Because the step lengthens with the batch, the
requests in the engine swing far more than a Poisson count around their mean: near capacity a queue forms long
before the mean batch nears max_batch. A window at or past its capacity has no steady state; its wait is the fluid
queue's alone (`fluid_queue.queued`); a window of a load that varies has its queue bounded by what a window that
long builds (`transient_queue`). A quantile of the first token (`quantile_s`, `serve`'s `ttft_p99_s`) takes the
wait's shape: the step found running (its distribution over the chain's states, in bins finer in its tail,
FOUND_BINS: near capacity the batch, and so the step, swings far past its mean), and where every slot is taken an
exponential queue (`exceeding`).
experiments/slot_wait.py checks the mean and the 99th percentile against a simulation of the engine's steps, each as
long as its batch's step.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# The chain is summed over at most this many requests in the engine: a max_batch past it is priced at it, which
# waits at least as long (fewer slots), and the same where the chain's mass there is nil (a load far under it); a
# rate past what that many serve reads no wait (a load of more than 16,384 requests in flight an instance)
MAX_STATES = 16_384
CHUNK_CELLS = 4_000_000  # windows x states summed at once (32 MB of float64)
# The step an arrival finds running where a slot is free, as bins of its distribution over the chain's states between
# these quantiles (a bin's mean step and probability; finer in the tail, which a quantile of the wait reads):
# experiments/slot_wait.py's 99th percentiles 3.1 % off on average, 13.5 % low at 256 slots near capacity, where the
# batch's tail sets the step found (a million requests a run; at 100,000 a run, 24 % against 35 % with the step's
# mean a standard deviation either side)
FOUND_BINS = (0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)


class SlotWaits(NamedTuple):
    """Each stream's wait for a slot (`open_waits`; a column a stream): its mean (s), and its shape for quantiles
    (`quantile_s`): the share of arrivals that find a step running, the step they find where a slot is free (the
    mean step of each bin of its distribution over the chain's states, FOUND_BINS, a row a bin, and the share of
    arrivals that find it: the batch, and so the step, swings), the share that find every slot taken, the step then
    (every slot's), and the rate (1/s) at which such a wait's tail falls (exponential: the chain's queue past the
    slots is geometric)."""

    mean_s: np.ndarray
    busy: np.ndarray
    found_s: np.ndarray
    found_share: np.ndarray
    waiting: np.ndarray
    full_s: np.ndarray
    decay: np.ndarray


def open_waits(rate: np.ndarray, slots: int, batches: np.ndarray, capacity: np.ndarray, step_s: np.ndarray,
               cv: np.ndarray, window_s: np.ndarray | None = None) -> SlotWaits:
    """The wait for a slot of Poisson streams of `rate` requests a second each (one a window), `slots` slots, the
    engine serving capacity[j] requests a second with batches[j] in service (its capacity curve, rising) in steps
    of step_s[j] (both read between their points linearly), the service time's spread `cv` each; none where the
    rate is none, or at or past the capacity with every slot taken. `window_s`: each stream lasts that long, so its
    queue is at most what one that long builds (`transient_queue`), where the steady state's is longer (the share
    that waits kept, its tail falling the faster)."""
    rate = np.asarray(rate, dtype=np.float64)
    cv = np.asarray(cv, dtype=np.float64)
    bins = len(FOUND_BINS) + 1
    out = {f: np.zeros((bins, len(rate)) if f in ("found_s", "found_share") else len(rate)) for f in SlotWaits._fields}
    out["decay"][:] = np.inf  # no wait: a tail that falls at once
    states = min(int(slots), MAX_STATES)
    n = np.arange(1, states + 1)
    log_x = np.log(np.interp(n, batches, capacity))  # X(n) a second, n in service
    full = capacity[-1] if states == slots else float(np.interp(states, batches, capacity))
    step = np.interp(n, batches, step_s)  # the step with n in service
    live = np.flatnonzero((rate > 0) & (rate < full * (1.0 - 1e-12)))
    rows = max(1, CHUNK_CELLS // (states + 1))
    for lo in range(0, len(live), rows):  # chunks of windows, each summed over the states at once
        at = live[lo:lo + rows]
        log_rate = np.log(rate[at])[:, None]
        terms = np.concatenate([np.zeros((len(at), 1)), np.cumsum(log_rate - log_x, axis=1)], axis=1)  # n = 0..
        top = terms.max(axis=1, keepdims=True)
        weight = np.exp(terms - top)
        r = rate[at] / full  # the chain's ratio past the slots: every one taken, the queue geometric
        last = weight[:, -1]
        total = weight[:, :-1].sum(axis=1) + last / (1.0 - r)
        queued = last * r / (1.0 - r) ** 2 / total * spread_factor(cv[at], r, slots)  # the mean queue past the slots
        if window_s is not None:
            queued = np.minimum(queued, transient_queue(rate[at], cv[at], np.asarray(window_s, np.float64)[at]))
        running = weight[:, 1:-1] @ step[:-1] + last / (1.0 - r) * step[-1]  # the step found, n > 0, unnormalised
        waiting = last / (1.0 - r) / total
        wait = queued / rate[at]
        out["found_s"][:, at], out["found_share"][:, at] = _found(weight[:, 1:-1], step[:-1], total)
        out["mean_s"][at], out["busy"][at] = wait + running / 2.0 / total, 1.0 - weight[:, 0] / total
        out["waiting"][at], out["full_s"][at] = waiting, step[-1]
        out["decay"][at] = np.divide(waiting, wait, out=np.full(len(at), np.inf), where=wait > 0)
    return SlotWaits(**out)


def spread_factor(cv: np.ndarray, load: np.ndarray, slots: int) -> np.ndarray:
    """The mean queue of `slots` servers at `load` (rate over their capacity) whose service times spread `cv`, over
    the memoryless chain's (cv 1): for cv under 1, M/M/c's and M/D/c's interpolated in cv^2, M/D/c's by Cosmetatos'
    approximation, half M/M/c's raised by (1 - load)(c - 1)(sqrt(4 + 5c) - 2) / (16 load c) (G. Cosmetatos, INFOR
    13, 1975, as Liu, Pantelidis, Tam and Chow print it, arXiv 2102.05851 eq. 2: exact at one server, the
    Pollaczek-Khinchine mean, and half M/M/c's in heavy traffic, where the interpolation is Allen and Cunneen's
    (1 + cv^2) / 2); past 1, Allen and Cunneen's. Kimura (JORS 42, 1991) finds Cosmetatos' figure high for many
    servers in light traffic, where the queue past the slots is nil."""
    c2 = np.asarray(cv, dtype=np.float64) ** 2
    load = np.asarray(load, dtype=np.float64)
    # (its light-traffic term grows as 1 / load, the queue it scales falls as load^slots: floored where both vanish,
    # so that their product is no 0 x inf)
    light = (1.0 - load) * (slots - 1) * (np.sqrt(4.0 + 5.0 * slots) - 2.0) / (16.0 * np.maximum(load, 1e-9) * slots)
    return np.where(c2 < 1.0, c2 + (1.0 - c2) * 0.5 * (1.0 + light), (1.0 + c2) / 2.0)


def _found(weight: np.ndarray, step: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The step an arrival finds running with a slot free, each stream's (a row of `weight`, the chain's unnormalised
    probability of each state with a slot free, `total` its sum over all states; `step` each state's step), as bins
    of its distribution between FOUND_BINS' quantiles in the states' order (the step rising with the batch): each
    bin's mean step and the share of arrivals in it (a row a bin, a column a stream)."""
    free = weight.sum(axis=1, keepdims=True)
    within = np.cumsum(weight, axis=1) - weight / 2  # each state's middle, in the free states' mass
    which = np.searchsorted(np.asarray(FOUND_BINS), within / np.where(free > 0, free, 1.0), side="right")
    bins = len(FOUND_BINS) + 1
    cells = which + bins * np.arange(len(weight))[:, None]  # a stream's bins apart from the others'
    mass, seconds = (np.bincount(cells.ravel(), w.ravel(), bins * len(weight)).astype(np.float64).reshape(
        len(weight), bins) for w in (weight, weight * step))  # (a float: with one slot no state has a slot free)
    return np.divide(seconds, mass, out=np.zeros_like(mass), where=mass > 0).T, (mass / total[:, None]).T


def open_wait_s(rate: np.ndarray, slots: int, batches: np.ndarray, capacity: np.ndarray, step_s: np.ndarray,
                cv: np.ndarray, window_s: np.ndarray | None = None) -> np.ndarray:
    """The mean wait for a slot (s) of `open_waits`' streams."""
    return open_waits(rate, slots, batches, capacity, step_s, cv, window_s).mean_s


def exceeding(waits: SlotWaits, t: np.ndarray) -> np.ndarray:
    """The share of each stream's arrivals that wait longer than `t` seconds for a slot: none while the engine is
    idle; the rest of the step found running, uniform over it, where a slot is free (at each bin of its
    distribution, with its share); and that plus an exponential queue where every slot is taken."""
    t = np.asarray(t, dtype=np.float64)
    s, delta, p_wait = waits.full_s, waits.decay, waits.waiting

    def rest(length: np.ndarray, t: np.ndarray = t) -> np.ndarray:  # P(U(0, length) > t)
        return np.where(length > 0, np.clip(1.0 - t / np.where(length > 0, length, 1.0), 0.0, 1.0), 0.0)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # P(U(0, s) + Exp(delta) > t), stable for any delta s
        within = np.where(t < s, (s - t + -np.expm1(-delta * t) / delta) / s,
                          np.exp(-delta * (t - s)) * -np.expm1(-delta * s) / (delta * s))
        tail = np.where(s > 0, within, np.exp(-delta * t))
    tail = np.where(np.isfinite(delta), tail, rest(s))  # a queue with no wait: the step found alone
    # every bin of the step found at once: (..., bins, streams), summed over the bins
    found = (waits.found_share * rest(waits.found_s, t[..., None, :] if t.ndim else t)).sum(axis=-2)
    return np.where(t < 0, 1.0, found + p_wait * np.nan_to_num(tail))


def quantile_s(waits: SlotWaits, p: float, shift_s: np.ndarray, weights: np.ndarray | None = None,
               mix: np.ndarray | None = None) -> np.ndarray:
    """The `p` quantile of each stream's time (s) to its first token, `shift_s` (its prefill, a backlog's wait) and
    its wait for a slot (`exceeding`); with `weights` (its arrivals), the quantile of them all together; with `mix`,
    `shift_s` a row each of several shifts (a prompt's prefill at each bin of its lengths) and `mix` their
    probabilities, a stream's share past t theirs weighed. By bisection, every stream at once, to a microsecond or
    1e-4 of it."""
    shift_s = np.asarray(shift_s, dtype=np.float64)
    shifts, mix = (shift_s[None], np.ones((1, shift_s.shape[-1]))) if mix is None else (shift_s, np.asarray(mix))
    # past the longest shift, the step found and the queue's tail down to 1 - p, no stream has more than 1 - p left
    reach = np.log(np.maximum(waits.waiting, 1e-300) / (1.0 - p)).clip(min=0.0)
    queue = np.divide(reach, waits.decay, out=np.zeros_like(reach), where=(reach > 0) & (waits.decay > 0))
    hi_each = shifts.max(axis=0) + np.maximum(waits.found_s.max(axis=0), waits.full_s) + queue
    lo, hi = (np.zeros(1), np.array([hi_each.max()])) if weights is not None else (np.zeros_like(hi_each), hi_each)
    for _ in range(64):  # halving the bracket until it is narrow enough
        if (hi - lo <= 1e-6 + 1e-4 * hi).all():
            break
        mid = (lo + hi) / 2
        share = (mix * exceeding(waits, mid - shifts)).sum(axis=0)
        if weights is not None:
            share = np.array([np.dot(share, weights) / weights.sum()])
        over = share > 1.0 - p
        lo, hi = np.where(over, mid, lo), np.where(over, hi, mid)
    return hi if weights is None else hi[0]


def transient_queue(rate: np.ndarray, cv: np.ndarray, window_s: np.ndarray) -> np.ndarray:
    """The mean queue, over a window of `window_s` seconds started empty, of a stream of `rate` requests a second at
    its engine's capacity: a reflected Brownian motion without drift, its variance a second rate x (1 + cv^2)
    (Poisson arrivals, and departures at about the rate with the service time's spread), is sqrt(2 var t / pi) deep
    at t, (2/3) sqrt(2 var T / pi) on average over [0, T]. Near capacity the steady state's queue takes longer to
    build than a window lasts (an hour at 2.5 requests a second: 20 s of queue at most, where the steady state
    reads minutes), and a queue under a drift toward empty is no deeper than this."""
    return 2.0 / 3.0 * np.sqrt(2.0 * rate * (1.0 + cv**2) * window_s / np.pi)


def closed_wait_s(concurrency: float, slots: float, requests_per_s: float) -> float:
    """A closed loop's wait for a slot (s): `concurrency` requests kept in flight, `slots` of them served at
    `requests_per_s`, the rest queued in front (Little's law)."""
    return max(concurrency - slots, 0.0) / requests_per_s
