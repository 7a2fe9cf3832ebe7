import pytest

from joulecast.data.meters import ReplayMeter, Sample, counter_energy_j, integrate_power_j, summarise_window


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
