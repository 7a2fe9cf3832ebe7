"""An estimate whose machine states no host dispatch takes the default, and its interval spans what the measured
hosts (`arch.HOST_DISPATCH_RANGE_S`) make of physics: the point stays where it was."""

import numpy as np
import pandas as pd
import pytest

import joulecast
from joulecast.features import arch
from joulecast.render import estimate_table

GPU = "a100-pcie-40gb"
DEFAULT = arch.HOST_DISPATCH_S["eager"]


def _host_bound(**kw):
    return joulecast.workload("llama-2-7b", batch=1, seq=32, **kw)  # 937 launches, GPU busy half the time


def test_an_unstated_host_stretches_the_interval_as_far_as_the_measured_hosts_move_physics():
    unstated, stated = (joulecast.estimate(w, GPU) for w in (_host_bound(), _host_bound(host_dispatch_s=DEFAULT)))
    assert unstated.energy_j == stated.energy_j and unstated.time_s == stated.time_s
    assert not unstated.host_dispatch_stated and stated.host_dispatch_stated
    physics = {d: joulecast.estimate(_host_bound(host_dispatch_s=d), GPU, estimator="physics")
               for d in (*arch.HOST_DISPATCH_RANGE_S, DEFAULT)}
    fast, slow = (physics[d] for d in arch.HOST_DISPATCH_RANGE_S)
    base = physics[DEFAULT]
    assert fast.time_s < base.time_s < slow.time_s  # host-bound: a faster host shortens the pass
    (lo, hi), (s_lo, s_hi) = unstated.energy_interval_j, stated.energy_interval_j
    assert lo / s_lo == pytest.approx(fast.energy_j / base.energy_j, rel=1e-9)
    assert hi / s_hi == pytest.approx(slow.energy_j / base.energy_j, rel=1e-9)
    assert unstated.time_interval_s[0] / stated.time_interval_s[0] == pytest.approx(fast.time_s / base.time_s)
    assert unstated.time_interval_s[1] / stated.time_interval_s[1] == pytest.approx(slow.time_s / base.time_s)
    assert "by default (the interval: hosts of 18.00 - 30.00 µs)" in estimate_table(unstated)
    assert unstated.to_dict()["host_dispatch_stated"] is False


def test_cuda_graphs_dispatch_nothing_and_their_interval_spans_no_host():
    graphs = joulecast.workload("llama-2-7b", batch=1, seq=32, launch_mode="graph")
    est = joulecast.estimate(graphs, GPU)
    assert est.host_dispatch_s == 0.0 and est.host_dispatch_stated
    stated = joulecast.estimate(joulecast.workload("llama-2-7b", batch=1, seq=32, launch_mode="graph",
                                                   host_dispatch_s=DEFAULT), GPU)
    assert est.energy_interval_j == stated.energy_interval_j


def test_many_estimates_span_the_hosts_where_their_rows_state_none():
    rows = pd.DataFrame([dict(model="llama-2-7b", gpu=GPU, batch=1, seq=32, host_dispatch_s=h)
                         for h in (np.nan, DEFAULT)])
    many = joulecast.estimate_many(rows)
    for i, workload in enumerate((_host_bound(), _host_bound(host_dispatch_s=DEFAULT))):
        one = joulecast.estimate(workload, GPU)
        assert (many["energy_lo_j"][i], many["energy_hi_j"][i]) == pytest.approx(one.energy_interval_j, rel=1e-9)
        assert (many["time_lo_s"][i], many["time_hi_s"][i]) == pytest.approx(one.time_interval_s, rel=1e-9)
    assert many["energy_lo_j"][0] < many["energy_lo_j"][1] and many["energy_hi_j"][0] > many["energy_hi_j"][1]
