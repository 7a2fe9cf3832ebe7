"""The spread of a serving step, and so of a request's time between its output tokens (inter-token latency).

Under continuous batching every running request makes a token a step, so the gaps between a request's tokens are the
steps it runs in, and the steps differ by the prompts they admit: the engine admits a new request as one finishes
(B / output_len a step on average, B running), and a step carrying prompt tokens runs the decodes and those tokens
together (`features.serve_step`). A prompt longer than the engine's chunk (`chunk_tokens`, at most that many prompt
tokens a step) runs over several steps, a chunk each and the rest in one more. The prompt tokens a step carries are
then a compound Poisson sum: a Poisson number of such pieces a step, each of its own length (the prompts lognormal
about the load's mean with its spread, cv; all as long where cv is 0), cut at the chunk. Their distribution is
computed on a grid of tokens by the discrete Fourier transform, as a compound Poisson sum's characteristic function
is exp(rate x (phi - 1)) of its parts'; a step's time at a quantile of the tokens is the step's time at that many
prompt tokens (`serving` prices steps at a few, `prompt_points`, read between). The same lengths spread a request's
own prompt's prefill, its first token's (`length_bins`, `length_quantile`: `serving`'s `prefill_s` and `ttft_p99_s`).

Stated approximations: the batch held at its mean (at a request rate it moves about it); a prompt's pieces arriving
independently of each other and of the steps before; a sum past the chunk cut at it (the rest in the next steps,
which this leaves as any other step).
"""

from __future__ import annotations

import numpy as np

GRID_POINTS = 4096   # the token grid's points: the sum's distribution on it
SPAN_SDS = 12.0      # the grids span this many standard deviations past a mean (a prompt's length, the sum's)
LENGTH_POINTS = 1 << 16  # at most this many points of a prompt's length (spread prompts far longer than the chunk)
# A prompt's length distribution as bins between these quantiles, for its first token's (`length_bins`), read at
# this many points a mean length
LENGTH_BINS = (0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)
BIN_POINTS_A_MEAN = 64
# The prompt tokens a step is priced at, as shares of the chunk (0 and a geometric run up to the chunk itself): a
# step's time grows with its tokens, flat while its GEMMs stay bound by their weights' reads, then about linearly.
# Eleven points instead of these six moved ML.ENERGY v3's quantiles by under 0.3 points (experiments/token_gaps.py).
PROMPT_POINTS = np.concatenate([[0.0], np.geomspace(1.0 / 256, 1.0, 5)])


def prompt_points(chunk_tokens: int) -> np.ndarray:
    """The prompt tokens a step is priced at for `quantile_s` (whole tokens, ascending, from 0 to the chunk)."""
    return np.unique(np.round(PROMPT_POINTS * chunk_tokens).astype(np.int64))


def _lengths(input_len: float, input_len_cv: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Prompt lengths and their probabilities: lognormal at the mean `input_len` and spread `input_len_cv`, read at
    points `step` tokens apart (or further apart for the longest prompts: LENGTH_POINTS at most) out to its tail
    (SPAN_SDS of its deviations past its mean: at cv 3.2 the far tail cut off holds 0.1 % of the prompts and 5 % of
    their tokens; scaled to keep the mean, the quantiles read 5 % long); the mean alone where every prompt is as
    long."""
    if input_len_cv > 0.0:
        sigma2 = np.log1p(input_len_cv ** 2)
        mu = np.log(input_len) - sigma2 / 2
        longest = input_len * (1 + SPAN_SDS * input_len_cv)
        apart = max(step, longest / LENGTH_POINTS)
        lengths = np.arange(1, int(np.ceil(longest / apart)) + 1) * apart
        weight = np.exp(-(np.log(lengths) - mu) ** 2 / (2 * sigma2)) / lengths
        return lengths, weight / weight.sum()
    return np.array([float(input_len)]), np.ones(1)


def length_bins(input_len: float, input_len_cv: float) -> tuple[np.ndarray, np.ndarray]:
    """Prompt lengths standing for their distribution (`_lengths`): each bin's mean length and probability, the
    bins between the quantiles LENGTH_BINS (finer in the tail: a quantile of the first token is a long prompt's);
    one bin where every prompt is as long."""
    lengths, weight = _lengths(input_len, input_len_cv, input_len / BIN_POINTS_A_MEAN)
    which = np.searchsorted(np.asarray(LENGTH_BINS), np.cumsum(weight) - weight / 2, side="right")
    mass = np.bincount(which, weight, minlength=len(LENGTH_BINS) + 1)
    mean = np.bincount(which, weight * lengths, minlength=len(LENGTH_BINS) + 1)
    kept = mass > 0
    return mean[kept] / mass[kept], mass[kept] / mass[kept].sum()


def length_quantile(input_len: float, input_len_cv: float, q: float) -> float:
    """The prompt length at quantile `q` (`_lengths`)."""
    lengths, weight = _lengths(input_len, input_len_cv, input_len / BIN_POINTS_A_MEAN)
    return float(lengths[min(int(np.searchsorted(np.cumsum(weight), q * (1 - 1e-12))), len(lengths) - 1)])


def _pieces(input_len: float, input_len_cv: float, chunk_tokens: int, step: float) -> tuple[np.ndarray, float]:
    """The length of a prompt's piece a step (a chunk, or what is left of the prompt) on a grid of `step` tokens,
    from 0 to the chunk, and the pieces a prompt makes on average."""
    lengths, weight = _lengths(input_len, input_len_cv, step)
    whole = np.floor(lengths / chunk_tokens)  # full chunks a prompt runs
    rest = lengths - whole * chunk_tokens     # and what is left, in one more step
    size = int(round(chunk_tokens / step)) + 1
    pieces = np.zeros(size)
    pieces[-1] += float(np.dot(weight, whole))
    at = rest / step  # the rest's mass on the two points about it, its mean kept
    low = np.floor(at).astype(np.int64)
    some = rest > 0
    np.add.at(pieces, low[some], (weight * (1.0 - (at - low)))[some])
    np.add.at(pieces, np.minimum(low + 1, size - 1)[some], (weight * (at - low))[some])
    count = pieces.sum()
    return pieces / count, float(count)


def prompt_tokens_quantile(admitted: float, input_len: float, input_len_cv: float, chunk_tokens: int,
                           q: np.ndarray) -> np.ndarray:
    """The prompt tokens a step carries at quantiles `q`, `admitted` prompts a step on average, each `input_len`
    long on average with spread `input_len_cv`, at most `chunk_tokens` a step."""
    q = np.atleast_1d(np.asarray(q, dtype=np.float64))
    # the grid: the chunk, and past it the sum's mean (the prompt tokens admitted a step) and SPAN_SDS of its
    # deviations, so that no mass wraps round the transform's circle (a piece at most a chunk, the sum's variance
    # at most chunk x its mean)
    mean = admitted * input_len
    span = chunk_tokens + mean + SPAN_SDS * np.sqrt(mean * chunk_tokens)
    step = span / (GRID_POINTS - 2)  # tokens a point (the chunk's inside the grid)
    pieces, count = _pieces(input_len, input_len_cv, chunk_tokens, step)
    length = np.zeros(GRID_POINTS)
    length[:len(pieces)] = pieces
    # a compound Poisson sum's distribution: exp(rate x (phi - 1)), phi the piece's transform
    total = np.clip(np.fft.irfft(np.exp(admitted * count * (np.fft.rfft(length) - 1.0)), GRID_POINTS), 0.0, None)
    cdf = np.cumsum(total) / total.sum()
    return np.minimum(np.searchsorted(cdf, q * (1 - 1e-12)) * step, float(chunk_tokens))


def quantile_s(step_s: np.ndarray, prompts: np.ndarray, admitted: float, input_len: float, input_len_cv: float,
               chunk_tokens: int, q: np.ndarray) -> np.ndarray:
    """The time between a request's output tokens at quantiles `q`: the step's time (`step_s`, at `prompts` prompt
    tokens, ascending from 0) at the quantile of the prompt tokens a step carries (`prompt_tokens_quantile`)."""
    tokens = prompt_tokens_quantile(admitted, input_len, input_len_cv, chunk_tokens, q)
    return np.interp(tokens, prompts, np.maximum.accumulate(np.asarray(step_s, dtype=np.float64)))
