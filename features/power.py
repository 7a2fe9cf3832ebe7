"""Power of a kernel from its module utilisations, and the clock a power cap leaves it.

power = idle(f) (1 + hot-static ratio * SM-active share)
        + (V/Vmax)^2 (f/fmax) * budget * sum(coefficient * utilisation) + DRAM bytes/s * energy per bit,
with budget = power limit - idle at the maximum clock (see `features.arch` for each constant's source).
"""

from __future__ import annotations

import numpy as np

from joulecast.data.gpus import GpuSpec
from joulecast.data.kept import kept_for
from joulecast.features import arch
from joulecast.features.arch import IDLE_VOLTAGE_EXPONENT, V_KNEE_CLOCK_RATIO, V_MIN_RATIO

# The lowest SM clock DVFS tables list, relative to the maximum (A100: 210 of 1410 MHz; H100: 345 of 1980).
MIN_CLOCK_RATIO = 0.15


def voltage_ratio(clock_ratio: np.ndarray) -> np.ndarray:
    """V/Vmax: flat at `V_MIN_RATIO` up to the knee, then linear to 1 at the maximum clock."""
    rising = V_MIN_RATIO + (1 - V_MIN_RATIO) * (clock_ratio - V_KNEE_CLOCK_RATIO) / (1 - V_KNEE_CLOCK_RATIO)
    # minimum/maximum rather than np.clip: the same values, at a fifth of its per-call cost on small arrays. At or
    # below the knee `rising` is at most V_MIN_RATIO and above it at least, so the floor alone gives the flat part.
    return np.minimum(np.maximum(rising, V_MIN_RATIO), 1.0)


def dynamic_scale(clock_ratio: np.ndarray) -> np.ndarray:
    """(V/Vmax)^2 * f/fmax: how switching power scales with DVFS."""
    return voltage_ratio(clock_ratio) ** 2 * clock_ratio


def _idle_shape(clock_ratio: np.ndarray | float) -> np.ndarray:
    return voltage_ratio(np.asarray(clock_ratio)) ** IDLE_VOLTAGE_EXPONENT * clock_ratio


_IDLE_SHAPE_AT_MIN = _idle_shape(MIN_CLOCK_RATIO)


def idle_power_w(gpu: GpuSpec, clock_mhz: np.ndarray | float) -> np.ndarray:
    """Idle power at a locked SM clock: the GPU's measured DVFS idle table where it has one (linear between its
    clocks), else from the catalog's idle (lowest clock) to idle at the maximum clock along the default shape."""
    if gpu.idle_power_table:
        clocks, watts = _table(gpu.idle_power_table)
        return np.interp(np.asarray(clock_mhz, dtype=float), clocks, watts)
    ratio = np.asarray(clock_mhz, dtype=float) / gpu.boost_clock_mhz
    low = _IDLE_SHAPE_AT_MIN
    fraction = np.minimum(np.maximum((_idle_shape(ratio) - low) / (1 - low), 0.0), 1.0)
    return gpu.idle_power_w + (gpu.idle_power_max_clock_w - gpu.idle_power_w) * fraction


def power_w(gpu: GpuSpec, clock_mhz: np.ndarray, u_tensor: np.ndarray, u_fma: np.ndarray, u_l2: np.ndarray,
            u_sm: np.ndarray, dram_bytes_per_s: np.ndarray) -> np.ndarray:
    """The module docstring's power of a kernel at `clock_mhz`, from its module utilisations and DRAM traffic (each
    constant's source in `features.arch`; read from there at each call, so a study that sets one sees it). The same
    under a power limit: a cap that leaves a kernel at a clock draws what that clock locked would."""
    c = arch.POWER_COEFFICIENTS
    budget = gpu.power_limit_w - gpu.idle_power_max_clock_w
    chip = dynamic_scale(clock_mhz / gpu.boost_clock_mhz) * budget * (
        c["tensor"] * u_tensor + c["fma"] * u_fma + c["l2"] * u_l2 + c["sm"] * u_sm)
    dram_w = dram_bytes_per_s * 8 * arch.DRAM_PJ_PER_BIT.get(gpu.memory_type, 3.9) * 1e-12
    static = idle_power_w(gpu, clock_mhz)
    if arch.HOT_STATIC_RATIO:  # at 0 (a study's setting): idle x 1, the same bits without the two passes
        static = static * (1 + arch.HOT_STATIC_RATIO * u_sm)
    return static + chip + dram_w


def waiting_power_w(gpu: GpuSpec, sm_clock_mhz: float | None) -> float:
    """A GPU waiting (on a collective, on an engine's host work) holds its clock: idle power at the locked clock, or
    the catalog's idle at the maximum clock where none is locked."""
    return gpu.idle_power_max_clock_w if sm_clock_mhz is None else float(idle_power_w(gpu, sm_clock_mhz))


def _table(table: tuple[tuple[float, float], ...]) -> tuple[np.ndarray, np.ndarray]:
    """A DVFS idle table's (clocks, watts) arrays, made once a table object (looked up by identity: hashing the
    table's pairs on every call cost more than the interpolation)."""
    def make() -> tuple[np.ndarray, np.ndarray]:
        clocks, watts = zip(*table)
        return np.array(clocks), np.array(watts)
    return kept_for(_TABLES, (table,), make, 64)


_TABLES: dict = {}  # a table's (clocks, watts) (`_table`)
