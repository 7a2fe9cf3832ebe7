import numpy as np
import pytest

from joulecast.data.collect.meters import (
    ReplayMeter,
    Sample,
    counter_energy_j,
    counter_fit_power_w,
    integrate_power_j,
    summarise_window,
)


def _trace(energies, clocks=None, throttle=None):
    clocks = clocks or [1980.0] * len(energies)
    throttle = throttle or [frozenset()] * len(energies)
    return [Sample(time_s=0.1 * i, energy_j=e, power_w=0.0, sm_clock_mhz=c, memory_clock_mhz=3201.0,
                   temperature_c=50.0, power_limit_w=700.0, throttle=t)
            for i, (e, c, t) in enumerate(zip(energies, clocks, throttle))]


def test_counter_difference_handles_wrap_and_reset():
    assert counter_energy_j([100.0, 130.0, 170.0]) == pytest.approx(70.0)
    assert counter_energy_j([90.0, 99.0, 4.0], wrap_j=100.0) == pytest.approx(14.0)  # 9 + (4 - 99 + 100)
    assert counter_energy_j([500.0, 530.0, 12.0, 40.0]) == pytest.approx(30 + 12 + 28)  # driver reset: count from 0


def test_power_integration():
    assert integrate_power_j([0.0, 1.0, 2.0], [100.0, 200.0, 100.0]) == pytest.approx(300.0)


def test_window_summary_and_flags():
    steady = summarise_window(_trace([0.0, 30.0, 60.0, 90.0, 120.0]), idle_power_w=80.0)
    assert steady.energy_j == pytest.approx(120.0) and steady.time_s == pytest.approx(0.4)
    assert steady.power_w == pytest.approx(300.0) and steady.idle_energy_j == pytest.approx(32.0)
    assert not steady.throttled and not steady.clock_moved
    moved = summarise_window(_trace([0, 30, 60], clocks=[1980, 1470, 1455],
                                    throttle=[frozenset(), frozenset({"sw_power_cap"}), frozenset()]), 80.0)
    assert moved.throttled and moved.clock_moved and moved.sm_clock_min_mhz == 1455


def test_replay_meter_plays_the_trace_in_order():
    meter = ReplayMeter(_trace([0.0, 5.0, 9.0]))
    seen = []
    for _ in range(4):
        t = meter.time_s()
        seen.append((t, meter.energy_j()))
    assert [e for _, e in seen] == [5.0, 9.0, 9.0, 9.0] and meter.clocks_mhz() == (1980.0, 3201.0)


def _coarse_counter(power_w, start_s, phase_s, seconds=1.0, update_s=0.1, sample_s=0.014, reset_at=None):
    """Readings of a counter that moves every `update_s` (as the H200's does), sampled every `sample_s`."""
    times = start_s + np.arange(0.0, seconds + 1e-9, sample_s)
    last_update = np.floor((times - phase_s) / update_s) * update_s + phase_s
    counter = power_w * last_update
    if reset_at is not None:  # a driver reload: the counter starts from zero again
        counter = np.where(times >= reset_at, counter - power_w * (np.floor((reset_at - phase_s) / update_s) * update_s
                                                                   + phase_s), counter)
    return times, counter


def test_a_coarse_counter_is_fitted_not_differenced():
    fit_errors, end_errors = [], []
    for phase in np.linspace(0.0, 0.099, 12):
        times, counter = _coarse_counter(700.0, start_s=10.0, phase_s=phase)
        fit_errors.append(abs(counter_fit_power_w(times, counter) / 700.0 - 1))
        end_errors.append(abs(counter_energy_j(counter) / (700.0 * (times[-1] - times[0])) - 1))
        window = summarise_window([Sample(time_s=t, energy_j=e, power_w=0.0, sm_clock_mhz=1980.0,
                                          memory_clock_mhz=3201.0, temperature_c=50.0, power_limit_w=700.0)
                                   for t, e in zip(times, counter)], idle_power_w=80.0)
        assert window.energy_j == pytest.approx(counter_fit_power_w(times, counter) * window.time_s)
    assert max(fit_errors) < 0.02 and max(end_errors) > 0.05  # the first/last difference is off by up to one update


def test_the_counter_fit_survives_a_reset_and_needs_enough_updates():
    times, counter = _coarse_counter(500.0, start_s=3.0, phase_s=0.03, reset_at=3.5)
    assert counter_fit_power_w(times, counter) == pytest.approx(500.0, rel=0.02)
    short_t, short_e = _coarse_counter(500.0, start_s=3.0, phase_s=0.03, seconds=0.15)
    assert counter_fit_power_w(short_t, short_e) is None  # one or two updates: the difference is all there is
