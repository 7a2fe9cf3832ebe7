"""Collectives by the alpha-beta model (Thakur, Rabenseifner and Gropp 2005; NCCL's bus-bandwidth convention,
nccl-tests doc/PERFORMANCE.md; as summarised in shared/reference/distributed.md, section 2), vectorised.

Per rank, a ring over n ranks sends (and receives) `factor(n) x payload`: all-reduce 2(n-1)/n, reduce-scatter,
all-gather and all-to-all (n-1)/n, point-to-point and broadcast 1; its time is that volume over the link's
bandwidth plus `steps(n)` message latencies (2(n-1) for an all-reduce ring, n-1 for the others, 1 for a send).
"""

from __future__ import annotations

import numpy as np

from joulecast.data.errors import require

COLLECTIVES = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "p2p", "broadcast")


def _factor_steps(kind: str, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    require(kind in COLLECTIVES, "collective", f"unknown {kind!r}; allowed: {', '.join(COLLECTIVES)}")
    n = np.asarray(n, float)
    single = n <= 1
    if kind == "all-reduce":
        factor, steps = 2.0 * (n - 1) / n, 2.0 * (n - 1)
    elif kind in ("reduce-scatter", "all-gather", "all-to-all"):
        factor, steps = (n - 1) / n, n - 1
    else:
        factor, steps = np.ones_like(n), np.ones_like(n)
    return np.where(single, 0.0, factor), np.where(single, 0.0, steps)


def sent_bytes(kind: str, n: np.ndarray | int, payload_bytes: np.ndarray | float) -> np.ndarray:
    """Bytes each rank sends in one collective of `payload_bytes` over `n` ranks (0 for one rank)."""
    factor, _ = _factor_steps(kind, n)
    return factor * np.asarray(payload_bytes, float)


def time_s(kind: str, n: np.ndarray | int, payload_bytes: np.ndarray | float, gbytes_per_s: np.ndarray | float,
           latency_us: np.ndarray | float) -> np.ndarray:
    """Seconds for one collective: sent bytes over the bandwidth (GB/s, one direction, per rank) plus latencies."""
    factor, steps = _factor_steps(kind, n)
    volume = factor * np.asarray(payload_bytes, float)
    return volume / (np.asarray(gbytes_per_s, float) * 1e9) + steps * np.asarray(latency_us, float) * 1e-6
