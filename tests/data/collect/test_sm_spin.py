"""The busy-SM probe's loop (data/collect/sm_spin.py) on a simulated GPU: a meter whose clock moves only when the
loop sleeps, whose power is 120 W plus 0.5 W a busy SM (after a lag of half a second, as the H200's meter lags), and a
launcher whose spins finish after their time and report the SMs their blocks ran on."""

import pytest

from joulecast.data.collect import sm_spin


class SimulatedGpu:
    def __init__(self):
        self.now, self.busy, self.since, self.energy = 0.0, 0, 0.0, 0.0

    def sleep(self, seconds):
        self.energy += self.power_w() * seconds
        self.now += seconds

    def time_s(self):
        return self.now

    def power_w(self):
        return 120.0 + (0.5 * self.busy if self.now - self.since >= 0.5 else 300.0)  # the lag reads high

    def energy_j(self):
        return self.energy

    def clocks_mhz(self):
        return 1980.0, 3201.0

    def temperature_c(self):
        return 40.0

    def launch(self, blocks, threads, seconds):
        if blocks != self.busy:
            self.busy, self.since = blocks, self.now
        end = self.now + seconds
        return (lambda: self.now >= end), (lambda: set(range(min(blocks, 132))))


def test_each_configuration_reads_its_settled_power_and_the_sms_its_blocks_ran_on():
    gpu = SimulatedGpu()
    configs = ((1, 32), (66, 32), (264, 1024))
    samples, summary = sm_spin.measure(gpu, gpu.launch, configs, window_s=2.0, sleep=gpu.sleep)
    assert [row["config"] for row in summary] == ["b1/t32", "b66/t32", "b264/t1024"]
    assert [row["sms"] for row in summary] == [1, 66, 132]
    for (blocks, _), row in zip(configs, summary):
        assert row["power_w"] == pytest.approx(120.0 + 0.5 * blocks)  # the lagging first second left out
        assert row["counter_power_w"] == pytest.approx(120.0 + 0.5 * blocks, rel=0.02)
        assert row["readings"] >= 90  # a reading every 10 ms over the second settled second
    assert {s["config"] for s in samples} == {"b1/t32", "b66/t32", "b264/t1024"}


def test_a_context_with_no_kernel_is_read_for_its_window_without_launching():
    gpu = SimulatedGpu()
    gpu.launch = None  # nothing may be launched
    _, summary = sm_spin.measure(gpu, gpu.launch, ((0, 0),), window_s=1.5, sleep=gpu.sleep)
    assert summary[0]["sms"] == 0 and summary[0]["readings"] >= 45
