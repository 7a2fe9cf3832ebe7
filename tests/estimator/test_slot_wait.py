"""A request's wait for a batch slot (`estimator.slot_wait`): the birth-death chain on an engine's capacity curve is
M/M/c's Erlang C where the capacity is linear in the slots taken, M/M/1's where there is one slot; M/D/c's by
Cosmetatos' approximation for answers all as long; the step an arrival finds running; and Little's law past
max_batch at a concurrency."""

import json
import math
import re

import numpy as np
import pytest

import joulecast
from joulecast.cli import main
from joulecast.estimator import slot_wait


def _erlang_c_wait(rate: float, mu: float, c: int) -> float:
    """M/M/c's mean wait, by its textbook sums."""
    a = rate / mu
    head = sum(a**k / math.factorial(k) for k in range(c))
    tail = a**c / math.factorial(c) / (1 - a / c)
    return tail / (head + tail) / (c * mu - rate)


@pytest.mark.parametrize("slots, rate", [(1, 0.5), (1, 0.9), (4, 2.0), (8, 7.5), (32, 30.0)])
def test_a_capacity_linear_in_the_slots_is_erlang_c(slots, rate):
    mu = 1.0  # each request served at one a second: X(n) = n up to the slots
    batches = np.arange(1, slots + 1)
    got = slot_wait.open_wait_s(np.array([rate]), slots, batches, batches * mu, np.zeros(slots), np.array([1.0]))
    assert got[0] == pytest.approx(_erlang_c_wait(rate, mu, slots), rel=1e-9)
    # answers all as long: M/D/c by Cosmetatos' approximation, half M/M/c's raised by its light-traffic term (none
    # at one slot: the Pollaczek-Khinchine mean, exactly half); spread cv 0.5 between them by cv^2
    load = rate / (slots * mu)
    md = got[0] / 2 * (1 + (1 - load) * (slots - 1) * (math.sqrt(4 + 5 * slots) - 2) / (16 * load * slots))
    half = slot_wait.open_wait_s(np.array([rate]), slots, batches, batches * mu, np.zeros(slots), np.array([0.0]))
    assert half[0] == pytest.approx(md, rel=1e-9) and (slots > 1 or half[0] == pytest.approx(got[0] / 2, rel=1e-9))
    some = slot_wait.open_wait_s(np.array([rate]), slots, batches, batches * mu, np.zeros(slots), np.array([0.5]))
    assert some[0] == pytest.approx(0.25 * got[0] + 0.75 * md, rel=1e-9)
    # answers spread past the memoryless: Allen and Cunneen's (1 + cv^2) / 2
    wide = slot_wait.open_wait_s(np.array([rate]), slots, batches, batches * mu, np.zeros(slots), np.array([2.0]))
    assert wide[0] == pytest.approx(got[0] * 2.5, rel=1e-9)


def test_the_step_an_arrival_finds_running_is_half_of_it_while_busy():
    """Light load on many slots: no queue, the wait half a step times the chance the engine is busy (1 - P(0))."""
    batches, step = np.array([1, 64]), np.array([0.01, 0.01])
    rate, mu = 0.5, 1.0
    got = slot_wait.open_wait_s(np.array([rate]), 64, batches, batches * mu, step, np.array([1.0]))
    busy = 1 - math.exp(-rate / mu)  # the chain is Poisson where no slot runs out
    assert got[0] == pytest.approx(busy * 0.005, rel=1e-9)


def test_no_rate_or_a_rate_at_capacity_waits_nothing_here_and_chunks_and_states_bound_the_work(monkeypatch):
    batches, capacity, step = np.array([1, 8]), np.array([1.0, 8.0]), np.array([0.01, 0.02])
    rates = np.array([0.0, 8.0, 9.0, 6.0, 7.0, 7.5])
    got = slot_wait.open_wait_s(rates, 8, batches, capacity, step, np.ones(6))
    assert got[:3].tolist() == [0.0, 0.0, 0.0] and (np.diff(got[3:]) > 0).all()
    monkeypatch.setattr(slot_wait, "CHUNK_CELLS", 10)  # a window a chunk: the same figures
    assert slot_wait.open_wait_s(rates, 8, batches, capacity, step, np.ones(6)) == pytest.approx(got, rel=1e-12)
    # past MAX_STATES, the chain summed over fewer slots: a wait at least the whole chain's where the rate is
    # under what those serve
    some = np.array([3.0, 4.0, 5.0])
    whole = slot_wait.open_wait_s(some, 8, batches, capacity, step, np.ones(3))
    monkeypatch.setattr(slot_wait, "MAX_STATES", 6)
    fewer = slot_wait.open_wait_s(some, 8, batches, capacity, step, np.ones(3))
    assert (fewer >= whole).all() and (fewer > whole).any()


def test_a_windows_queue_is_at_most_what_its_length_builds():
    """A window near capacity: its queue the transient's of a queue that long started empty, where the steady
    state's is deeper; a window long enough keeps the steady state's."""
    batches, step, rate, cv = np.arange(1, 9), np.zeros(8), np.array([7.99]), np.array([1.0])
    steady = slot_wait.open_wait_s(rate, 8, batches, batches * 1.0, step, cv)
    hour = slot_wait.open_wait_s(rate, 8, batches, batches * 1.0, step, cv, np.array([3600.0]))
    built = 2 / 3 * math.sqrt(2 * 7.99 * 2 * 3600 / math.pi)  # a driftless reflected Brownian motion's mean depth
    assert hour[0] == pytest.approx(built / 7.99, rel=1e-12) and hour[0] < steady[0]
    ages = slot_wait.open_wait_s(rate, 8, batches, batches * 1.0, step, cv, np.array([1e15]))
    assert ages[0] == pytest.approx(steady[0], rel=1e-12)


@pytest.mark.parametrize("slots, rate", [(1, 0.9), (4, 3.0), (8, 7.5)])
def test_the_wait_s_quantile_is_m_m_c_s_where_the_capacity_is_linear(slots, rate):
    """No step: M/M/c's P(W > t) = C exp(-(c mu - rate) t), so its p quantile is ln(C / (1 - p)) / (c mu - rate);
    with its arrivals as weights a single stream's quantile is its own, and a stream with none weighs nothing."""
    batches = np.arange(1, slots + 1)
    waits = slot_wait.open_waits(np.array([rate, 0.0]), slots, batches, batches * 1.0, np.zeros(slots),
                                 np.ones(2))
    c = _erlang_c_wait(rate, 1.0, slots) * (slots - rate)  # Erlang C: the mean wait x the spare capacity
    assert waits.waiting[0] == pytest.approx(c, rel=1e-9)
    for p in (0.9, 0.99):
        expected = max(0.0, math.log(c / (1 - p)) / (slots - rate))
        got = slot_wait.quantile_s(waits, p, np.zeros(2))
        assert got[0] == pytest.approx(expected, rel=1e-3, abs=1e-6) and got[1] == 0.0
        assert slot_wait.quantile_s(waits, p, np.zeros(2), np.array([5.0, 0.0])) == pytest.approx(got[0], rel=1e-9)
    t = np.linspace(-1, 10, 50)
    first = {f: v[..., :1].repeat(50, axis=-1) for f, v in waits._asdict().items()}  # (a bin a row)
    share = slot_wait.exceeding(waits._replace(**first), t)
    assert share[0] == 1.0 and (np.diff(share) <= 0).all()


def test_a_quantile_over_a_mixture_of_prefills_is_where_their_weighed_tail_crosses():
    """Several shifts (a prompt's prefill at each bin of its lengths) with their probabilities: the quantile is where
    the shares past it, each at its shift, weighed, cross 1 - p; one shift of probability one is the plain one."""
    batches = np.arange(1, 5)
    waits = slot_wait.open_waits(np.array([3.0, 2.0]), 4, batches, batches * 1.0, np.full(4, 0.01), np.ones(2))
    shifts = np.array([[0.01, 0.02], [0.5, 0.3]])
    mix = np.array([[0.97, 0.9], [0.03, 0.1]])
    got = slot_wait.quantile_s(waits, 0.99, shifts, mix=mix)
    for t, k in ((got, 1.0), (got * (1 - 1e-3), -1.0)):  # just past it: under 1 %; just short of it: over
        share = (mix * slot_wait.exceeding(waits, t - shifts)).sum(axis=0)
        assert (k * (share - 0.01) <= 1e-6).all(), (t, share)
    plain = slot_wait.quantile_s(waits, 0.99, shifts[0])
    np.testing.assert_allclose(slot_wait.quantile_s(waits, 0.99, shifts[:1], mix=np.ones((1, 2))), plain, rtol=1e-12)
    whole = slot_wait.quantile_s(waits, 0.99, shifts, np.array([1.0, 1.0]), mix=mix)
    assert got.min() <= whole <= got.max()


def test_a_closed_loop_queues_what_passes_its_slots():
    assert slot_wait.closed_wait_s(512, 256, 10.0) == pytest.approx(25.6)
    assert slot_wait.closed_wait_s(64, 256, 10.0) == 0.0


def test_serve_counts_the_wait_for_a_slot_in_its_first_token(capsys):
    """`serve`: at a concurrency past max_batch, the requests past it wait (Little's law); at a rate, the chain's
    wait, rising with the rate, none far under capacity, each window's as its rate's alone; ttft its prompt's
    prefill and it."""
    kw = dict(input_len=512, output_len=128, engine="vllm-0.5.4", estimator="physics")
    inside = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=32, max_batch=32, **kw)
    past = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=96, max_batch=32, **kw)
    assert inside.slot_wait_s == 0.0 and inside.ttft_s == inside.prefill_s > inside.step_time_s
    assert past.step_time_s == inside.step_time_s and past.slot_wait_s == pytest.approx(
        64 / inside.requests_per_s, rel=1e-12)
    assert past.ttft_s == pytest.approx(past.prefill_s + past.slot_wait_s, rel=1e-12) == past.ttft_p99_s
    most = inside.requests_per_s
    waits = [joulecast.serve("llama-3-8b", "h100-sxm", request_rate=f * most, max_batch=32, **kw)
             for f in (0.1, 0.5, 0.9, 0.97)]
    assert [w.slot_wait_s for w in waits] == sorted(w.slot_wait_s for w in waits)
    assert waits[0].slot_wait_s < waits[0].step_time_s / 2 < waits[-1].slot_wait_s / 10
    for w in waits:
        assert w.ttft_s == pytest.approx(w.prefill_s + w.slot_wait_s, rel=1e-12)
        assert w.prefill_s < w.ttft_p99_s and w.ttft_s < w.ttft_p99_s
    rates = [0.1 * most, 0.9 * most, 0.0]
    windowed = joulecast.serve("llama-3-8b", "h100-sxm", window_rates=rates, window_s=600, max_batch=32, **kw)
    for k in (0, 1):
        assert windowed.windows.slot_wait_s[k] == pytest.approx(waits[0 if k == 0 else 2].slot_wait_s, rel=1e-9)
    assert windowed.windows.slot_wait_s[2] == 0.0
    # each window's 99th percentile as its rate's alone; the whole's between its windows' with arrivals
    assert windowed.windows.ttft_p99_s[:2] == pytest.approx([waits[0].ttft_p99_s, waits[2].ttft_p99_s], rel=1e-3)
    assert windowed.windows.ttft_p99_s[0] < windowed.ttft_p99_s <= windowed.windows.ttft_p99_s[1]
    assert windowed.slot_wait_s == pytest.approx(np.average(windowed.windows.slot_wait_s[:2], weights=rates[:2]))
    # the table says it, and the JSON
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--input-len", "512",
            "--output-len", "128", "--concurrency", "96", "--max-batch", "32", "--engine", "vllm-0.5.4",
            "--estimator", "physics"]
    assert main(argv) == 0
    assert re.search(r"^ttft {7}[\d.]+ s on average: [\d.]+ ms for its prompt's prefill, after [\d.]+ s waiting for "
                     r"a batch slot; 99 % within [\d.]+ s$", capsys.readouterr().out, re.M)
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["slot_wait_s"] == pytest.approx(past.slot_wait_s) and out["ttft_s"] == pytest.approx(past.ttft_s)


def test_the_step_found_running_takes_the_batch_s_swing_into_the_wait_s_tail():
    """256 slots at 90 % of their capacity, a step lengthening with the batch (10 ms x (1 + B / 40), answers of 100
    steps): an arrival waits the rest of the step it finds, uniform over it, the step its state's. The binned
    distribution of that step (FOUND_BINS) keeps the share of arrivals that find one and the mean step found, and
    its 99th percentile is the chain's states' own within 0.5 % (the step's mean a standard deviation either side
    read it 2.2 % low)."""
    slots = 256
    batches = np.arange(1, slots + 1)
    step = 0.01 * (1 + batches / 40)
    capacity = batches / (100 * step)
    rate = 0.9 * capacity[-1]
    waits = slot_wait.open_waits(np.array([rate]), slots, batches, capacity, step, np.ones(1))
    # the chain by its terms: P(n) in proportion to rate^n / (X(1) ... X(n)), geometric past the slots
    terms = np.concatenate([[0.0], np.cumsum(math.log(rate) - np.log(capacity))])
    chain = np.exp(terms - terms.max())
    chain /= chain[:-1].sum() + chain[-1] / (1 - rate / capacity[-1])
    free, found = chain[1:-1], step[:-1]  # the states with a slot free, and the step each runs
    assert waits.found_share.sum() == pytest.approx(free.sum(), rel=1e-9)
    assert waits.found_share[:, 0] @ waits.found_s[:, 0] == pytest.approx(free @ found, rel=1e-9)
    assert waits.waiting[0] < 1e-3  # a slot free for nearly every arrival: the step found sets the tail
    t = np.linspace(0.0, 0.1, 100_001)
    past = (free[:, None] * np.clip(1 - t / found[:, None], 0, None)).sum(axis=0)
    want = t[np.argmax(past <= 0.01)]
    assert slot_wait.quantile_s(waits, 0.99, np.zeros(1))[0] == pytest.approx(want, rel=0.005)
