"""An estimate whose machine states no host dispatch takes the default, and its interval reaches as far as what the
measured hosts (`arch.HOST_DISPATCH_RANGE_S`) make of physics, added in quadrature to its own reach (independent
unknowns): the point stays where it was."""

import numpy as np
import pandas as pd
import pytest

import joulecast
from joulecast.estimator import api
from joulecast.features import arch
from joulecast.render import estimate_table

GPU = "a100-pcie-40gb"
DEFAULT = arch.HOST_DISPATCH_S["eager"]


def _host_bound(**kw):
    return joulecast.workload("llama-2-7b", batch=1, seq=32, **kw)  # 937 launches, GPU busy half the time


def test_an_unstated_host_stretches_the_interval_as_far_as_the_measured_hosts_move_physics(monkeypatch):
    unstated, stated = (joulecast.estimate(w, GPU) for w in (_host_bound(), _host_bound(host_dispatch_s=DEFAULT)))
    assert unstated.energy_j == stated.energy_j and unstated.time_s == stated.time_s
    assert not unstated.host_dispatch_stated and stated.host_dispatch_stated
    physics = {d: joulecast.estimate(_host_bound(host_dispatch_s=d), GPU, estimator="physics")
               for d in (*arch.HOST_DISPATCH_RANGE_S, DEFAULT)}
    fast, slow = (physics[d] for d in arch.HOST_DISPATCH_RANGE_S)
    base = physics[DEFAULT]
    assert fast.time_s < base.time_s < slow.time_s  # host-bound: a faster host shortens the pass
    (lo, hi), (s_lo, s_hi) = unstated.energy_interval_j, stated.energy_interval_j

    def reach(bound: float, point: float) -> float:
        return abs(np.log(bound / point))

    # each side's reach (log) is the stated host's and the hosts' range's in quadrature
    e, t = stated.energy_j, stated.time_s
    assert reach(lo, e) == pytest.approx(np.hypot(reach(s_lo, e), reach(fast.energy_j, base.energy_j)), rel=1e-9)
    assert reach(hi, e) == pytest.approx(np.hypot(reach(s_hi, e), reach(slow.energy_j, base.energy_j)), rel=1e-9)
    (t_lo, t_hi), (s_t_lo, s_t_hi) = unstated.time_interval_s, stated.time_interval_s
    assert reach(t_lo, t) == pytest.approx(np.hypot(reach(s_t_lo, t), reach(fast.time_s, base.time_s)), rel=1e-9)
    assert reach(t_hi, t) == pytest.approx(np.hypot(reach(s_t_hi, t), reach(slow.time_s, base.time_s)), rel=1e-9)
    # wider than the stated host's, narrower than the range's ends added to its bounds (the rule before, still a
    # study's setting)
    assert s_lo * fast.energy_j / base.energy_j < lo < s_lo and s_hi < hi < s_hi * slow.energy_j / base.energy_j
    monkeypatch.setattr(api, "SPREADS_IN_QUADRATURE", False)
    added = joulecast.estimate(_host_bound(), GPU).energy_interval_j
    assert added[0] / s_lo == pytest.approx(fast.energy_j / base.energy_j, rel=1e-9)
    assert added[1] / s_hi == pytest.approx(slow.energy_j / base.energy_j, rel=1e-9)
    monkeypatch.undo()
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
