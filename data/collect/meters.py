"""The hardware seam: one small read-only `Meter` protocol, a replay meter for tests, and energy-window arithmetic.

Only `joulecast.data.collect.nvml_meter` imports pynvml. A meter never changes GPU settings: it only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

# NVML's power reading lags a change of load: on a lent H200 it read 286 W over the first 0.2 s after a 692 W GEMM
# ended and 167 W to 0.4 s, then the spinning kernel's 124 W (data/probes/h200/h200-thermal). Readings within this
# long of a change are left out where a study fits power to a steady load (experiments/thermal_leakage.py, sm_spin).
POWER_SETTLE_S = 1.0

from joulecast.data.schema import CLOCK_STEP_MHZ


class Meter(Protocol):
    """What the collector reads from a GPU (SI units at the seam)."""

    def energy_j(self) -> float: ...                  # cumulative counter; may reset or wrap, so diff with care
    def power_w(self) -> float: ...
    def clocks_mhz(self) -> tuple[float, float]: ...  # (sm, memory)
    def temperature_c(self) -> float: ...
    def power_limit_w(self) -> float: ...
    def throttle_reasons(self) -> frozenset[str]: ...
    def time_s(self) -> float: ...                    # the meter's clock (monotonic)


@dataclass(frozen=True)
class Sample:
    time_s: float
    energy_j: float
    power_w: float
    sm_clock_mhz: float
    memory_clock_mhz: float
    temperature_c: float
    power_limit_w: float
    throttle: frozenset[str] = frozenset()


class ReplayMeter:
    """Plays a recorded trace back.

    Without `clock`, each read of `time_s` advances to the next sample. With `clock` (a function returning seconds,
    e.g. a test's simulated time), every read returns the last sample at or before `clock()`, so readings depend on
    when they are taken, as on a real GPU, not on how often.
    """

    def __init__(self, samples: Sequence[Sample], clock: Callable[[], float] | None = None):
        if not samples:
            raise ValueError("a replay needs at least one sample")
        self._samples, self._i, self._clock = list(samples), 0, clock
        self._times = np.array([s.time_s for s in self._samples])

    def _now(self) -> Sample:
        if self._clock is not None:
            i = int(np.searchsorted(self._times, self._clock(), side="right")) - 1
            return self._samples[max(i, 0)]
        return self._samples[self._i]

    def time_s(self) -> float:
        if self._clock is not None:
            return float(self._clock())
        sample = self._now()
        self._i = min(self._i + 1, len(self._samples) - 1)
        return sample.time_s

    def describe(self) -> dict[str, str]:
        return {"name": "replay", "samples": str(len(self._samples))}

    def energy_j(self) -> float:
        return self._now().energy_j

    def power_w(self) -> float:
        return self._now().power_w

    def clocks_mhz(self) -> tuple[float, float]:
        return self._now().sm_clock_mhz, self._now().memory_clock_mhz

    def temperature_c(self) -> float:
        return self._now().temperature_c

    def power_limit_w(self) -> float:
        return self._now().power_limit_w

    def throttle_reasons(self) -> frozenset[str]:
        return self._now().throttle


def _counter_steps(readings: Sequence[float], wrap_j: float | None) -> np.ndarray:
    """Energy between successive cumulative-counter readings.

    A reading below its predecessor means the counter wrapped (when `wrap_j`, its range, is known: add the range) or
    reset (driver reload: count from zero again, i.e. take the new reading as the step).
    """
    values = np.asarray(readings, dtype=float)
    steps = np.diff(values)
    back = steps < 0
    if wrap_j is not None:
        steps[back] += wrap_j
    else:
        steps[back] = values[1:][back]
    return steps


def counter_energy_j(readings: Sequence[float], wrap_j: float | None = None) -> float:
    """Energy over a window from successive cumulative-counter readings: the counter's rise from first to last."""
    return float(_counter_steps(readings, wrap_j).sum())


# A counter fit needs this many updates inside the window, spanning at least this share of it.
FIT_MIN_UPDATES, FIT_MIN_SPAN = 3, 0.5


def counter_fit_power_w(times_s: Sequence[float], readings: Sequence[float], wrap_j: float | None = None) -> float | None:
    """Mean power from the instants the counter moved: the slope of energy against time over its updates.

    The counter does not count continuously: on the H200 it moves every 100 ms or so (joulecast's own samples,
    data/measurements/h200/h200-first). Its rise from a window's first reading to its last is then off by up to one
    update's energy at either end, ±10 % on a 1 s window; its updates fall on the sampling clock to within one sample
    (about 14 ms), so their slope is good to about 1 %. None where there are too few updates to fit.
    """
    times = np.asarray(times_s, dtype=float)
    steps = _counter_steps(readings, wrap_j)
    moved = np.flatnonzero(steps != 0) + 1          # the first reading showing each update
    if len(moved) < FIT_MIN_UPDATES or times[moved[-1]] - times[moved[0]] < FIT_MIN_SPAN * (times[-1] - times[0]):
        return None
    energy = np.concatenate([[0.0], np.cumsum(steps)])
    return float(np.polyfit(times[moved], energy[moved], 1)[0])


def integrate_power_j(times_s: Sequence[float], powers_w: Sequence[float]) -> float:
    """Energy from power samples (trapezoidal rule), for GPUs without an energy counter."""
    return float(np.trapezoid(np.asarray(powers_w, dtype=float), np.asarray(times_s, dtype=float)))


@dataclass(frozen=True)
class WindowResult:
    energy_j: float
    time_s: float
    power_w: float
    idle_energy_j: float   # idle power x window, for idle subtraction downstream
    sm_clock_mean_mhz: float
    sm_clock_min_mhz: float
    sm_clock_max_mhz: float
    throttled: bool
    clock_moved: bool
    method: str            # energy_counter, or power_samples where the GPU has no counter (NaN readings)


# Throttle reasons that mean the GPU slowed itself (NVML clocksThrottleReasons names, without the idle/app-clock ones).
THROTTLING = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})


def summarise_window(samples: Sequence[Sample], idle_power_w: float, wrap_j: float | None = None) -> WindowResult:
    """Energy, mean power and flags of one measured window from the samples taken inside it."""
    times = [s.time_s for s in samples]
    duration = times[-1] - times[0]
    if duration <= 0:
        raise ValueError("a window needs samples spanning a positive time")
    energies = np.array([s.energy_j for s in samples], dtype=float)
    if np.isfinite(energies).all():
        fit_w = counter_fit_power_w(times, energies, wrap_j)
        energy = fit_w * duration if fit_w is not None else counter_energy_j(energies, wrap_j)
        method = "energy_counter"
    else:
        energy, method = integrate_power_j(times, [s.power_w for s in samples]), "power_samples"
    clocks = np.array([s.sm_clock_mhz for s in samples])
    throttled = any(s.throttle & THROTTLING for s in samples)
    return WindowResult(energy_j=energy, time_s=duration, power_w=energy / duration, idle_energy_j=idle_power_w * duration,
                        sm_clock_mean_mhz=float(clocks.mean()), sm_clock_min_mhz=float(clocks.min()),
                        sm_clock_max_mhz=float(clocks.max()), throttled=throttled,
                        clock_moved=bool(clocks.max() - clocks.min() > CLOCK_STEP_MHZ), method=method)
