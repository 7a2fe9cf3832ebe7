"""The spread of a serving step, and so of a request's time between its output tokens (inter-token latency).

Under continuous batching every running request makes a token a step, so the gaps between a request's tokens are the
steps it runs in, and the steps differ by the prompts they admit: the engine admits a new request as one finishes
(B / output_len a step on average, B running), and a step carrying prompt tokens runs the decodes and those tokens
together (`features.serve_step`). A prompt longer than the engine's chunk (`chunk_tokens`, at most that many prompt
tokens a step) runs over several steps, a chunk each and the rest in one more. The prompt tokens a step carries are
then a compound Poisson sum: a Poisson number of such pieces a step, each of its own length (the prompts lognormal
about the load's mean with its spread, cv; all as long where cv is 0), cut at the chunk. Their distribution is
computed on a grid of tokens by the discrete Fourier transform, as a compound Poisson sum's characteristic function
is exp(rate x (phi - 1)) of its parts' (`prompt_cdfs`); a step's time at a quantile of the tokens is the step's time at
that many prompt tokens (`serving` prices steps at a few, `prompt_points`, and at a few batches, read between:
`Gaps`). A load window by window has its windows' batches and rates of prompts: each length class's distribution is
computed at a few of those rates (`admitted_points`) and a window's read between the two about its own, so that each
window has its quantiles, and all of them together theirs (`quantiles_s`). The same lengths spread a request's own
prompt's prefill, its first token's (`length_bins`, `length_quantile`: `serving`'s `prefill_s` and `ttft_p99_s`).

Stated approximations: the batch held at its mean (at a request rate it moves about it: read over the slot-wait
chain's distribution of it, tokens weighed, 99 % of the gaps moved by 0.1-0.6 % at 2-14 requests a second on an H100,
experiments/HISTORY.md, as the tail is the prompts'); a prompt's pieces arriving
independently of each other and of the steps before; a sum past the chunk cut at it (the rest in the next steps,
which this leaves as any other step); a window's distribution blended between two computed rates (where prompts
spread, within 1.5 % of its own; where every prompt is as long, 3-6 % at a Poisson count's jumps).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

GRID_POINTS = 4096   # the token grid's points: the sum's distribution on it
CHUNK_POINTS = 2048  # the finest grid's points to the chunk (4 tokens apart at 8,192); coarser ones a power of 2
MOST_CHUNKS = 16.0   # past this many chunks of prompt tokens a step on average, every step carries the chunk (a sum
# of pieces of at most a chunk each, its variance at most chunk x its mean: Bernstein's bound leaves under 0.1 %
# of steps with less)
# A length class's prompt tokens are computed at this many admitted rates a decade over its windows' (geometric, a
# ratio of 1.15), MAX_ADMITTED at most, and read between; tests/estimator/test_token_gaps.py holds a window's
# quantiles so read within 1.5 % of those at its own rate
ADMITTED_A_DECADE = 16
MAX_ADMITTED = 64
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
    long, or the spread is too narrow for the points to see."""
    sigma2 = np.log1p(input_len_cv ** 2)
    if sigma2 > 0.0:
        mu = np.log(input_len) - sigma2 / 2
        longest = input_len * (1 + SPAN_SDS * input_len_cv)
        apart = max(step, longest / LENGTH_POINTS)
        lengths = np.arange(1, int(np.ceil(longest / apart)) + 1) * apart
        with np.errstate(over="ignore"):  # a spread so narrow its square's inverse overflows: none seen
            weight = np.exp(-(np.log(lengths) - mu) ** 2 / (2 * sigma2)) / lengths
        if weight.sum() > 0.0:
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


def prompt_cdfs(admitted: np.ndarray, input_len: float, input_len_cv: float, chunk_tokens: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The distribution of the prompt tokens a step carries, `admitted` prompts a step on average (each a row), each
    `input_len` long on average with spread `input_len_cv`, at most `chunk_tokens` a step: its CDF at GRID_POINTS
    points from 0 (a row each; a point at the chunk or past it reads the chunk, where the sum is cut), and each
    row's level: its points 2^level times the finest spacing apart (CHUNK_POINTS to the chunk). A row's grid spans the
    chunk, and past it the sum's mean and SPAN_SDS of its deviations, so that no mass wraps round the transform's
    circle (a piece at most a chunk, the sum's variance at most chunk x its mean); the pieces are read once on the
    finest grid and merged pairwise for the coarser. Past MOST_CHUNKS chunks a step on average, the rate is read at
    that many: every step carries the chunk."""
    chunk = float(chunk_tokens)
    admitted = np.minimum(np.asarray(admitted, dtype=np.float64), MOST_CHUNKS * chunk / input_len)
    mean = admitted * input_len
    span = chunk + mean + SPAN_SDS * np.sqrt(mean * chunk)
    finest = chunk / CHUNK_POINTS
    level = np.ceil(np.log2(np.maximum(span / ((GRID_POINTS - 2) * finest), 1.0))).astype(np.int64)
    pieces, count = _pieces(input_len, input_len_cv, chunk_tokens, finest)
    cdf = np.empty((len(admitted), GRID_POINTS))
    for m in range(int(level.max(initial=0)) + 1):  # a loop over the few spacings (MOST_CHUNKS: 7 at most)
        rows = level == m
        if rows.any():
            length = np.zeros(GRID_POINTS)
            length[:len(pieces)] = pieces
            # a compound Poisson sum's distribution: exp(rate x (phi - 1)), phi the piece's transform
            total = np.clip(np.fft.irfft(np.exp(admitted[rows, None] * count * (np.fft.rfft(length) - 1.0)),
                                         GRID_POINTS, axis=1), 0.0, None)
            cdf[rows] = np.cumsum(total, axis=1) / total.sum(axis=1, keepdims=True)
        pieces = _halved(pieces)
    return cdf, level


def _halved(points: np.ndarray) -> np.ndarray:
    """A distribution on 2n + 1 points as one on n + 1 points twice as far apart, its mean kept (each odd point's
    mass half on either point about it)."""
    out = points[0::2].copy()
    out[:-1] += points[1::2] / 2
    out[1:] += points[1::2] / 2
    return out


def prompt_tokens_quantile(admitted: float, input_len: float, input_len_cv: float, chunk_tokens: int,
                           q: np.ndarray) -> np.ndarray:
    """The prompt tokens a step carries at quantiles `q`, `admitted` prompts a step on average, each `input_len`
    long on average with spread `input_len_cv`, at most `chunk_tokens` a step (`prompt_cdfs`)."""
    q = np.atleast_1d(np.asarray(q, dtype=np.float64))
    (cdf,), (level,) = prompt_cdfs(np.array([admitted]), input_len, input_len_cv, chunk_tokens)
    return np.minimum(np.searchsorted(cdf, q * (1 - 1e-12)) * (chunk_tokens / CHUNK_POINTS * 2.0 ** level),
                      float(chunk_tokens))


def admitted_points(values: np.ndarray, exact: bool = True) -> np.ndarray:
    """The prompts admitted a step at which a length class's prompt tokens are computed (`prompt_cdfs`), standing
    for `values`: where they are its windows' own (`exact`), those values themselves where few; else, or where its
    windows may take any value over their span (an autoscaler's choice), ADMITTED_A_DECADE a decade (geometric) over
    it, MAX_ADMITTED at most; one where none is positive (a load whose windows make no gaps)."""
    values = np.unique(values[np.isfinite(values) & (values > 0)])
    if len(values) == 0:
        return np.ones(1)
    decades = np.log10(values[-1]) - np.log10(values[0])  # (their ratio may pass the largest float)
    points = min(MAX_ADMITTED, 1 + int(np.ceil(ADMITTED_A_DECADE * decades)))
    return values if exact and len(values) <= points else np.geomspace(values[0], values[-1], points)


class Gaps(NamedTuple):
    """A length class's steps and prompt tokens, its windows' gaps between tokens read off them (`quantiles_s`): the
    prompt tokens its steps are priced at (ascending, from 0 to the most a step carries, the chunk), the batches
    they are priced at (ascending), the step's seconds (a row a batch, a column a prompt count; taken monotone in
    the prompts, a step never shorter for more of them), the prompts admitted a step at which the prompt tokens'
    distribution is computed (`admitted_points`, ascending), and that distribution (`prompt_cdfs`: its CDF, a row
    each, and each row's level)."""

    prompts: np.ndarray
    batches: np.ndarray
    step_s: np.ndarray
    admitted: np.ndarray
    cdf: np.ndarray
    level: np.ndarray

    def spacing(self, level: np.ndarray) -> np.ndarray:
        """Tokens between the points of a grid at `level`."""
        return self.prompts[-1] / CHUNK_POINTS * 2.0 ** level


def gaps(prompts: np.ndarray, batches: np.ndarray, step_s: np.ndarray, admitted: np.ndarray, input_len: float,
         input_len_cv: float, exact: bool = True) -> Gaps:
    """A length class's `Gaps`, its prompts `input_len` long on average with spread `input_len_cv`, from its steps
    (`step_s`, a row for each of `batches`, a column for each of `prompts`) and the prompts admitted a step in its
    windows (`admitted`: their own, or with `exact` false the ends of the span they may take, `admitted_points`)."""
    points = admitted_points(np.asarray(admitted, dtype=np.float64), exact)
    cdf, level = prompt_cdfs(points, input_len, input_len_cv, int(prompts[-1]))
    return Gaps(np.asarray(prompts, dtype=np.float64), np.asarray(batches, dtype=np.float64),
                np.maximum.accumulate(np.asarray(step_s, dtype=np.float64), axis=1), points, cdf, level)


class _Read(NamedTuple):
    """A length class's windows (`which`) as read off its `Gaps`: each one's step at each prompt count (its batch's,
    read between the batches priced: a row a window), and the two rows of the prompt tokens' distribution about its
    admitted prompts (the lower, the upper) with the upper's weight (between them in log)."""

    which: np.ndarray
    curve: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    weight: np.ndarray

    def cdf_at(self, gaps: Gaps, points: np.ndarray, level: np.ndarray) -> np.ndarray:
        """The share of each window's steps (a column) carrying at most `points` prompt tokens, in whole points of
        grids at `level` (the window's own), blended between its two rows (each a level its own: a coarser's
        points every 2^k of a finer's)."""
        tokens = points << level
        return sum(w * gaps.cdf[row, np.minimum(tokens >> gaps.level[row], GRID_POINTS - 1)]
                   for row, w in ((self.lower, 1.0 - self.weight), (self.upper, self.weight)))


def _read(gaps: Gaps, which: np.ndarray, batch: np.ndarray, admitted: np.ndarray) -> _Read:
    curve = np.stack([np.interp(batch, gaps.batches, column) for column in gaps.step_s.T], axis=1)
    at = np.interp(np.log(admitted), np.log(gaps.admitted), np.arange(len(gaps.admitted), dtype=np.float64))
    lower = np.clip(np.floor(at).astype(np.int64), 0, max(len(gaps.admitted) - 2, 0))
    return _Read(which, curve, lower, np.minimum(lower + 1, len(gaps.admitted) - 1), at - lower)


def _at_tokens(curve: np.ndarray, prompts: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Each window's step (a row of `curve`, at `prompts`) at its `tokens` (a row each), read between."""
    k = np.clip(np.searchsorted(prompts, tokens, side="right") - 1, 0, len(prompts) - 2) if len(prompts) > 1 else (
        np.zeros(tokens.shape, dtype=np.int64))
    high = np.minimum(k + 1, len(prompts) - 1)
    rows = np.arange(curve.shape[0])[:, None]
    span = prompts[high] - prompts[k]
    rise = np.divide(tokens - prompts[k], span, out=np.zeros_like(tokens), where=span > 0)
    return curve[rows, k] + np.clip(rise, 0.0, 1.0) * (curve[rows, high] - curve[rows, k])


def _share_within(classes: list[Gaps], reads: list[_Read], t: np.ndarray) -> np.ndarray:
    """The share of each window's gaps (a column of `t`, a window's reads') at most `t` seconds: the share of its
    steps whose prompt tokens are at most those its step takes `t` for (its curve read backwards between the prompt
    counts priced: none under its step without prompts, all from its step at the chunk)."""
    out = np.zeros_like(t)
    for gaps, read in zip(classes, reads):  # a loop over the few length classes, each over its windows at once
        if not len(read.which):
            continue
        at = t[:, read.which]
        curve = read.curve[None]
        last = curve.shape[-1] - 1
        k = (curve <= at[..., None]).sum(axis=-1) - 1  # the last prompt count whose step is at most t
        low = np.clip(k, 0, max(last - 1, 0))
        high = np.minimum(low + 1, last)
        start, end = (np.take_along_axis(curve, i[..., None], axis=-1)[..., 0] for i in (low, high))
        rise = np.divide(at - start, end - start, out=np.zeros_like(at), where=end > start)
        tokens = gaps.prompts[low] + rise * (gaps.prompts[high] - gaps.prompts[low])
        fine = np.minimum(gaps.level[read.lower], gaps.level[read.upper])
        points = np.floor(tokens / gaps.spacing(fine)).astype(np.int64)
        out[:, read.which] = np.where(k < 0, 0.0, np.where(k >= last, 1.0, read.cdf_at(gaps, points, fine)))
    return out


def quantiles_s(classes: list[Gaps], label: np.ndarray, batch: np.ndarray, admitted: np.ndarray, q: np.ndarray,
                weights: np.ndarray | None = None) -> np.ndarray:
    """The gaps between a request's output tokens (s) at quantiles `q` (a row each) in each window (a column each):
    its length class `label`'s steps (`classes`) at its `batch` running, `admitted` prompts a step on average (NaN
    where it admits none: no request, no gap); with `weights` (each window's gaps), the quantiles of all the windows'
    gaps together (a value each). A window's: its step at the least prompt tokens whose share reaches the quantile,
    by bisection over the points of its finer row's grid (every jump of its blended distribution on one of them);
    all together: the least time whose share (`_share_within`, over the windows) reaches it, by bisection, to 1e-7
    of it."""
    q = np.asarray(q, dtype=np.float64)
    live = np.flatnonzero(np.isfinite(admitted) & (admitted > 0))
    reads = [_read(gaps, live[mine], batch[live][mine], admitted[live][mine])
             for k, gaps in enumerate(classes) for mine in [label[live] == k]]
    if weights is None:
        out = np.full((len(q), len(batch)), np.nan)
        for gaps, read in zip(classes, reads):  # a loop over the few length classes, each over its windows at once
            fine = np.minimum(gaps.level[read.lower], gaps.level[read.upper])
            lo, hi = np.full((len(q), len(fine)), -1), np.broadcast_to(CHUNK_POINTS >> fine, (len(q), len(fine)))
            while (hi - lo > 1).any():  # log2(CHUNK_POINTS) + 1 passes
                mid = (lo + hi) // 2
                over = read.cdf_at(gaps, np.maximum(mid, 0), fine) >= q[:, None] * (1 - 1e-12)
                lo, hi = np.where(over, lo, mid), np.where(over, mid, hi)
            tokens = hi * gaps.spacing(fine)
            out[:, read.which] = _at_tokens(read.curve, gaps.prompts, tokens.T).T
        return out
    weights = np.where(np.isin(np.arange(len(batch)), live), weights, 0.0)
    if not weights.sum() > 0:
        return np.full(len(q), np.nan)
    ends = np.concatenate([read.curve[:, [0, -1]] for read in reads])
    lo, hi = np.full(len(q), ends[:, 0].min() * (1 - 1e-12)), np.full(len(q), ends[:, 1].max())
    for _ in range(64):  # halving the bracket until it is narrow enough
        if (hi - lo <= 1e-7 * hi).all():
            break
        mid = (lo + hi) / 2
        share = _share_within(classes, reads, np.repeat(mid[:, None], len(batch), axis=1)) @ weights / weights.sum()
        over = share >= q * (1 - 1e-12)
        lo, hi = np.where(over, lo, mid), np.where(over, mid, hi)
    return hi
