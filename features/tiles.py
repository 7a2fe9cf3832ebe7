"""Waves and residency of each kernel, vectorised over the kernel table (each kind's grid comes from its rule,
`joulecast.features.kinds`).

A kernel is a grid of CTAs ("tiles"); the GPU runs `sm_count * ctas_per_sm` of them at once (a wave), so a kernel
takes `waves = ceil(tiles / slots)` waves and its last wave may be partly empty.
"""

from __future__ import annotations

import numpy as np


def ceil_div(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    return -(-a // b)


def waves(tiles: np.ndarray, ctas_per_sm: np.ndarray, sm_count: int) -> tuple[np.ndarray, np.ndarray]:
    """(waves, occupancy of the last wave in (0, 1])."""
    slots = sm_count * ctas_per_sm
    w = ceil_div(tiles, slots)
    last = (tiles - (w - 1) * slots) / slots
    return w, last
