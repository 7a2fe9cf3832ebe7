"""A reactive autoscaler's queue to its last request (`estimator.reactive_queue`): what waits past the last window
is drained by the instances it needed, and where none serves at its end, after they start."""

import numpy as np
import pytest

from joulecast.data.gpus import gpu as lookup
from joulecast.estimator.autoscaler import Reactive
from joulecast.estimator.reactive_queue import queued_reactive
from joulecast.estimator.serving import serve

KW = dict(input_len=512, output_len=256, engine="vllm-0.11.1", estimator="physics", window_s=600, instances=4,
          autoscale=True, max_batch=16, cold_start_s=60, min_instances=0, reactive=True, queue=True)


def test_a_last_window_no_instance_serves_waits_for_a_start_then_drains():
    """Scaled to zero before a last window with arrivals, an autoscaler a window late serves none of them in it:
    they wait for an instance to start after it (60 s) and are served first in, first out by it, each arrival at
    v / 2 s served at 660 s + v / c (c the instance's requests a second); the start's minute at idle power, the
    instance's running and serving seconds in the window's means, every answer's tokens counted."""
    one = serve("llama-3-8b", "h100-sxm", window_rates=[2.0, 0.0, 2.0], **KW)
    w = one.windows
    drain = w.duration_s[-1] - 660.0                       # 1,200 requests at c a second
    assert w.duration_s[:2].tolist() == [600, 600] and drain > 0
    assert w.wait_s[-1] == pytest.approx(660.0 + drain / 2 - 300.0, rel=1e-9)   # the mean of 660 + v / c - v / 2
    assert w.backlog[-1] == pytest.approx(1200.0)          # waiting at the window's end
    assert w.started.tolist() == [0, 0, 1] and w.standby_j[-1] == pytest.approx(60 * lookup("h100-sxm").idle_power_w)
    assert w.serving[-1] == pytest.approx(drain / w.duration_s[-1], rel=1e-9)
    assert w.instances[-1] == pytest.approx((60.0 + drain) / w.duration_s[-1], rel=1e-9)
    assert w.output_tokens[-1] == pytest.approx(1200 * 256) and w.energy_j[-1] > w.standby_j[-1]
    assert one.energy_j == pytest.approx(w.energy_j.sum()) and np.isfinite(one.ttft_s)
    # its only window's arrivals so (the first window running none): finite figures, no division by none
    first = serve("llama-3-8b", "h100-sxm", window_rates=[0.0, 3.0], **KW)
    assert first.windows.output_tokens.tolist() == pytest.approx([0, 1800 * 256])
    assert np.isfinite([first.energy_j, first.ttft_s, first.step_time_s, first.power_w]).all()
    assert first.windows.energy_j[0] == 0


def test_a_drain_runs_on_the_instances_the_last_window_needed():
    """An instance serving at the last window's end: no tail; the drain's seconds at the instances draining (those
    the last window needed, one at least) in the window's means, the queue as before."""
    seconds, arrivals, reach = np.array([600.0, 600.0]), np.array([600.0, 3000.0]), np.array([4.0, 4.0])
    how = Reactive(cold_start_s=60.0, reaction_s=30.0)
    line, scaled = queued_reactive(arrivals, reach, seconds, np.array([1.0, 1.0]), how)
    assert line["drain_s"] == pytest.approx((3000 - 600 * 4) / 4)   # 600 past what one serves in the window
    assert scaled.serving[-1] == pytest.approx(1.0) and scaled.held[-1] == pytest.approx(1.0)
    two, scaled2 = queued_reactive(arrivals, reach, seconds, np.array([1.0, 2.0]), how)
    # a second instance from 30 s, serving from 90 s: 510 s at 8 a second, 90 s at 4 (4,440 served in the window)
    assert two["backlog"][-1] == pytest.approx(0.0) and two["drain_s"] == 0
    assert scaled2.serving[-1] == pytest.approx((90 + 2 * 510) / 600)
    late, scaled3 = queued_reactive(np.array([600.0, 6000.0]), reach, seconds, np.array([1.0, 2.0]), how)
    drain = late["drain_s"]
    assert drain == pytest.approx((6000 - 4440) / 8)              # drained at the two it needed
    assert scaled3.serving[-1] == pytest.approx((90 + 2 * 510 + 2 * drain) / (600 + drain))


@pytest.mark.parametrize("seed", range(4))
def test_every_request_of_a_queued_load_is_served_and_paid_for(seed):
    """Random loads with idle windows, autoscaled and queued, reactive or sized ahead, scaling to zero or not:
    every arrival's answer counted, each window with tokens drawing energy, the windows summing to the whole, and
    no figure NaN."""
    rng = np.random.default_rng(seed)
    for _ in range(6):
        rates = np.where(rng.random(5) < 0.4, 0.0, rng.uniform(0.1, 12, 5)).round(2)
        rates[-1] = rates[-1] or 1.0
        kw = {**KW, "window_s": float(rng.choice([60, 600])), "cold_start_s": float(rng.choice([0, 60, 900])),
              "min_instances": int(rng.integers(0, 2)), "reactive": bool(rng.integers(0, 2))}
        if kw["reactive"]:
            kw.update(reaction_s=[None, 0.0, 700.0][int(rng.integers(0, 3))],
                      scale_in_delay_s=float(rng.choice([0, 300])))
        one = serve("llama-3-8b", "h100-sxm", window_rates=rates.tolist(), **kw)
        w = one.windows
        assert w.output_tokens.sum() == pytest.approx(rates.sum() * kw["window_s"] * 256, rel=1e-9)
        assert (w.energy_j[w.output_tokens > 0] > 0).all() and w.energy_j.sum() == pytest.approx(one.energy_j)
        assert (w.serving <= w.instances + 1e-9).all()
        assert np.isfinite([one.energy_j, one.ttft_s, one.power_w, one.energy_per_output_token_j]).all()


def test_a_window_no_instance_serves_serves_nothing():
    """Scaled to zero before it, reacting a window late: a window's arrivals all wait, and it serves none of them,
    not a rounding's worth of tokens at no energy."""
    late = serve("llama-3-8b", "h100-sxm", window_rates=[8.26, 0.0, 0.0, 3.82, 5.98],
                 **{**KW, "window_s": 3600.0, "cold_start_s": 0.0})
    w = late.windows
    assert w.serving[3] == 0 and w.output_tokens[3] == 0 and w.energy_j[3] == 0
    assert w.backlog[3] == pytest.approx(3.82 * 3600) and w.output_tokens.sum() == pytest.approx(
        sum([8.26, 3.82, 5.98]) * 3600 * 256)
