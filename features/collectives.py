"""Collectives by the alpha-beta model (Thakur, Rabenseifner and Gropp 2005; NCCL's bus-bandwidth convention,
nccl-tests doc/PERFORMANCE.md; as summarised in shared/reference/distributed.md, section 2), vectorised.

Per rank, a ring over n ranks sends (and receives) `factor(n) x payload`: all-reduce 2(n-1)/n, reduce-scatter,
all-gather and all-to-all (n-1)/n, point-to-point and broadcast 1; its time is that volume over the link's
bandwidth plus `steps(n)` message latencies (2(n-1) for an all-reduce ring, n-1 for the others, 1 for a send).

Serving engines all-reduce a step's small activations with their own kernels over NVLink peer memory instead
(`custom_all_reduce_s`): one shot reads every peer's whole buffer, (n-1) x payload, in one latency; two shots
reduce-scatter then all-gather, 2(n-1)/n x payload, in two; the engine takes the faster (vLLM's custom all-reduce,
vllm-project/vllm PR #2192; TensorRT-LLM's ONESHOT and TWOSHOT strategies). With NVLink 4's 450 GB/s and 5 us a
shot, against the best of vLLM's all-reduces measured on 8,192-wide bf16 rows: 2 H100s, 0.5 MB, 6.2 against 7 us
(PR #24111); 4 GPUs, 0.5 / 1 / 2 / 4 MB, 8.5 / 12 / 17 / 24 against 10 / 14 / 21 / 28 us (PR #24532), where the
ring reads 32 / 34 / 37 / 44.
"""

from __future__ import annotations

import numpy as np

from joulecast.data.errors import require, require_choice

COLLECTIVES = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "p2p", "broadcast")


def _factor_steps(kind: str, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    require_choice(kind, COLLECTIVES, "collective")
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


def custom_all_reduce_s(n: np.ndarray | int, payload_bytes: np.ndarray | float, gbytes_per_s: np.ndarray | float,
                        latency_us: np.ndarray | float) -> np.ndarray:
    """Seconds for one all-reduce by a serving engine's own kernels (see the module's docstring): the faster of one
    shot, latency + (n-1) x payload over the bandwidth, and two, 2 latencies + 2(n-1)/n x payload; 0 for one rank."""
    n, payload = np.asarray(n, float), np.asarray(payload_bytes, float)
    bandwidth, latency = np.asarray(gbytes_per_s, float) * 1e9, np.asarray(latency_us, float) * 1e-6
    one = latency + (n - 1) * payload / bandwidth
    two = 2 * latency + 2 * (n - 1) / n * payload / bandwidth
    return np.where(n <= 1, 0.0, np.minimum(one, two))
