"""The prompt tokens a serving step carries and the gaps between a request's tokens (`estimator.token_gaps`),
against their distributions computed another way: Poisson's by its terms, a lognormal sum by sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from joulecast.estimator import token_gaps


def _poisson_quantile(rate: float, q: float) -> int:
    """The least k with P(N <= k) >= q, N Poisson at `rate`, summed term by term."""
    k, term = 0, math.exp(-rate)
    cdf = term
    while cdf < q:
        k += 1
        term *= rate / k
        cdf += term
    return k


@pytest.mark.parametrize("admitted", [0.005, 0.05, 0.3, 1.7])
def test_prompts_all_as_long_arrive_a_poisson_number_a_step(admitted):
    """Every prompt as long (cv 0) and shorter than the chunk: a step's prompt tokens are a Poisson count of them."""
    q = np.array([0.5, 0.9, 0.99])
    got = token_gaps.prompt_tokens_quantile(admitted, 192.0, 0.0, 8192, q)
    want = np.array([_poisson_quantile(admitted, x) for x in q]) * 192.0
    _, level = token_gaps.prompt_cdfs(np.array([admitted]), 192.0, 0.0, 8192)
    np.testing.assert_allclose(got, want, atol=8192 / token_gaps.CHUNK_POINTS * 2.0 ** level[0])  # a grid's point


def test_spread_prompts_match_a_sampled_lognormal_sum():
    """Lognormal prompts (cv 3.2, the spread lm-arena-chat's first turns give): the quantiles of a sampled compound
    Poisson sum cut at the chunk."""
    q = np.array([0.9, 0.95, 0.99])
    np.testing.assert_allclose(token_gaps.prompt_tokens_quantile(0.4, 192.0, 3.2, 8192, q),
                               np.quantile(_sampled_sums(0.4, 192.0, 3.2, 8192), q), rtol=0.05)


def test_a_prompt_longer_than_the_chunk_runs_over_several_steps():
    """A 30,000-token prompt runs as three full chunks of 8,192 and the rest, 5,424, in four steps: the steps
    carrying a piece are four times those admitting a prompt, 1 - exp(-4 x 0.008) = 3.1 %."""
    q = np.array([0.9, 0.968, 0.975, 0.99])
    got = token_gaps.prompt_tokens_quantile(0.008, 30_000.0, 0.0, 8192, q)
    assert got[0] == 0.0 and got[1] == 0.0  # 96.8 % of the steps carry none
    assert got[2] == pytest.approx(5424, abs=30)   # the rest, a quarter of the pieces
    assert got[3] == pytest.approx(8192, abs=30)  # and the full chunks (within the grid's point)


def test_a_step_past_its_chunk_carries_the_chunk():
    """Prompts arriving faster than a chunk a step: every step carries a whole chunk."""
    got = token_gaps.prompt_tokens_quantile(30.0, 1024.0, 1.0, 2048, np.array([0.01, 0.5, 0.99]))
    np.testing.assert_array_equal(got, [2048, 2048, 2048])


def _sampled_sums(admitted: float, mean: float, cv: float, chunk: int, steps: int = 200_000) -> np.ndarray:
    """The prompt tokens of `steps` sampled steps: a Poisson count of lognormal prompts each, cut at the chunk."""
    rng = np.random.default_rng(0)
    sigma2 = math.log1p(cv ** 2)
    counts = rng.poisson(admitted, steps)
    lengths = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), counts.sum())
    return np.minimum(np.bincount(np.repeat(np.arange(steps), counts), weights=lengths, minlength=steps), chunk)


def test_a_busy_step_s_coarser_grid_keeps_the_sum():
    """Five 1,024-token prompts a step on average (cv 1): a grid 8 times the finest's spacing (its pieces merged
    pairwise) spans the sum, whose quantiles match a sampled one's."""
    cdf, level = token_gaps.prompt_cdfs(np.array([5.0]), 1024.0, 1.0, 8192)
    assert level[0] == 3
    q = np.array([0.5, 0.9, 0.99])
    np.testing.assert_allclose(token_gaps.prompt_tokens_quantile(5.0, 1024.0, 1.0, 8192, q),
                               np.quantile(_sampled_sums(5.0, 1024.0, 1.0, 8192), q), rtol=0.05)


def _one(step_s: np.ndarray, admitted: float, input_len: float, cv: float, q: np.ndarray) -> np.ndarray:
    """`quantiles_s` of one window at `admitted` on steps `step_s` (at `prompt_points(8192)`, one batch)."""
    gaps = token_gaps.gaps(token_gaps.prompt_points(8192), np.array([8.0]), step_s[None], np.array([admitted]),
                           input_len, cv)
    return token_gaps.quantiles_s([gaps], np.zeros(1, dtype=np.int64), np.array([8.0]), np.array([admitted]), q)[:, 0]


def test_the_gap_is_the_step_at_the_quantile_s_prompt_tokens():
    """A window's gap is the step's time at the quantile's prompt tokens, between the points it was priced at, and
    never less for more tokens (a step's time taken monotone)."""
    points = token_gaps.prompt_points(8192)
    assert points[0] == 0 and points[-1] == 8192 and (np.diff(points) > 0).all()
    steps = 0.010 + 1e-6 * points  # 1 us a prompt token
    q = np.array([0.5, 0.9, 0.99])
    tokens = token_gaps.prompt_tokens_quantile(0.3, 512.0, 1.0, 8192, q)
    np.testing.assert_allclose(_one(steps, 0.3, 512.0, 1.0, q), 0.010 + 1e-6 * tokens, rtol=1e-12)
    dipped = steps.copy()
    dipped[2] = steps[0]  # a step priced lower at more tokens
    gaps = _one(dipped, 2.0, 512.0, 1.0, np.linspace(0.01, 0.99, 50))
    assert (np.diff(gaps) >= 0).all() and gaps.min() >= steps[0]


def test_windows_between_the_rates_computed_read_within_a_percent_of_their_own():
    """Windows admitting prompts at rates between those a class's distributions are computed at
    (`admitted_points`, 16 a decade) read their gaps within 1.5 % of those computed at their own rates, on steps
    read at their own batches; a window admitting none makes no gap."""
    points = token_gaps.prompt_points(8192).astype(float)
    batches = np.array([1.0, 64.0, 256.0])
    steps = np.array([[0.008], [0.012], [0.020]]) + 3e-6 * points * np.array([[1.0], [1.1], [1.3]])
    rng = np.random.default_rng(1)
    admitted = np.exp(rng.uniform(np.log(0.002), np.log(5.0), 120))  # more than the points computed
    batch = rng.uniform(1, 256, 120)
    q = np.array([0.9, 0.99])
    for mean, cv in ((192.0, 3.2), (1024.0, 1.0), (4000.0, 0.5)):
        gaps = token_gaps.gaps(points, batches, steps, admitted, mean, cv)
        assert len(gaps.admitted) == 1 + math.ceil(16 * math.log10(admitted.max() / admitted.min()))
        got = token_gaps.quantiles_s([gaps], np.zeros(120, dtype=np.int64), batch, admitted, q)
        own = np.array([token_gaps.quantiles_s([token_gaps.gaps(points, batches, steps, [a], mean, cv)],
                                               np.zeros(1, dtype=np.int64), np.array([b]), np.array([a]), q)[:, 0]
                        for a, b in zip(admitted, batch)]).T
        np.testing.assert_allclose(got, own, rtol=0.015)
    none = token_gaps.quantiles_s([gaps], np.zeros(2, dtype=np.int64), batch[:2], np.array([0.0, 0.3]), q)
    assert np.isnan(none[:, 0]).all() and np.isfinite(none[:, 1]).all()


def test_all_windows_gaps_together_are_their_mixture_s_quantiles():
    """Two windows of 192-token prompts (cv 0), one admitting 0.05 a step and making 3 times the gaps of the other,
    admitting 0.6: the quantiles of their gaps together are those of the mixture of their Poisson counts, weighed
    so, on a step of 10 ms and 1 us a prompt token; each window alone its own count's; no gap in any: none."""
    points = token_gaps.prompt_points(8192).astype(float)
    steps = (0.010 + 1e-6 * points)[None]
    admitted, weights = np.array([0.05, 0.6]), np.array([3.0, 1.0])
    gaps = token_gaps.gaps(points, np.array([8.0]), steps, admitted, 192.0, 0.0)
    label, batch = np.zeros(2, dtype=np.int64), np.array([8.0, 8.0])
    q = np.array([0.5, 0.9, 0.97, 0.99])
    k = np.arange(40)
    pmf = np.array([np.exp(-a) * a ** k / np.array([math.factorial(int(i)) for i in k]) for a in admitted])
    mixed = np.cumsum(weights @ pmf) / weights.sum()
    want = 0.010 + 1e-6 * 192.0 * np.searchsorted(mixed, q * (1 - 1e-12))
    np.testing.assert_allclose(token_gaps.quantiles_s([gaps], label, batch, admitted, q, weights=weights), want,
                               rtol=1e-6)
    each = token_gaps.quantiles_s([gaps], label, batch, admitted, q)
    np.testing.assert_allclose(each, 0.010 + 1e-6 * 192.0 * np.array(
        [[_poisson_quantile(a, x) for a in admitted] for x in q]), rtol=1e-12)
    assert np.isnan(token_gaps.quantiles_s([gaps], label, batch, np.zeros(2), q, weights=weights)).all()
