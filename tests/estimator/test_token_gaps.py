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
    step = (8192 + admitted * 192 + token_gaps.SPAN_SDS * math.sqrt(admitted * 192 * 8192)) / (
        token_gaps.GRID_POINTS - 2)
    np.testing.assert_allclose(got, want, atol=1.01 * step)  # within the grid's point


def test_spread_prompts_match_a_sampled_lognormal_sum():
    """Lognormal prompts (cv 3.2, the spread lm-arena-chat's first turns give): the quantiles of a sampled compound
    Poisson sum cut at the chunk."""
    rng = np.random.default_rng(0)
    admitted, mean, cv, chunk = 0.4, 192.0, 3.2, 8192
    sigma2 = math.log1p(cv ** 2)
    counts = rng.poisson(admitted, 200_000)
    lengths = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), counts.sum())
    sums = np.minimum(np.bincount(np.repeat(np.arange(len(counts)), counts), weights=lengths,
                                  minlength=len(counts)), chunk)
    q = np.array([0.9, 0.95, 0.99])
    np.testing.assert_allclose(token_gaps.prompt_tokens_quantile(admitted, mean, cv, chunk, q), np.quantile(sums, q),
                               rtol=0.05)


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


def test_the_gap_is_the_step_at_the_quantile_s_prompt_tokens():
    """`quantile_s` reads the step's time at the quantile's prompt tokens, between the points it was priced at, and
    never less for more tokens (a step's time taken monotone)."""
    points = token_gaps.prompt_points(8192)
    assert points[0] == 0 and points[-1] == 8192 and (np.diff(points) > 0).all()
    steps = 0.010 + 1e-6 * points  # 1 us a prompt token
    q = np.array([0.5, 0.9, 0.99])
    tokens = token_gaps.prompt_tokens_quantile(0.3, 512.0, 1.0, 8192, q)
    np.testing.assert_allclose(token_gaps.quantile_s(steps, points, 0.3, 512.0, 1.0, 8192, q), 0.010 + 1e-6 * tokens,
                               rtol=1e-12)
    dipped = steps.copy()
    dipped[2] = steps[0]  # a step priced lower at more tokens
    gaps = token_gaps.quantile_s(dipped, points, 2.0, 512.0, 1.0, 8192, np.linspace(0.01, 0.99, 50))
    assert (np.diff(gaps) >= 0).all() and gaps.min() >= steps[0]
