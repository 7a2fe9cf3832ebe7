"""The residual's features of a workload are the same alone as in a batch, bit for bit."""

import numpy as np
import pytest

import joulecast
from joulecast.features.design import design_block


@pytest.mark.parametrize("model, phase, gpu", [("llama-3-8b", "prefill", "h100-sxm"),
                                               ("llama-3-70b", "training", "h200"), ("gpt2", "decode", "a10"),
                                               ("resnet-101", "inference", "l40s")])
def test_one_workloads_design_row_is_its_row_in_a_batch(model, phase, gpu):
    """One workload's sums (busy time, time-weighted traits, launches and launch-weighted totals) are taken as two
    blocks, its rows added to the sums in turn as bincount adds them for a batch: every feature of its design row
    equals its row among others, to the bit."""
    spec = joulecast.gpu(gpu)
    w = joulecast.workload(model, phase=phase, batch=3, seq=700)
    other = joulecast.workload("gpt2", batch=2, seq=128)
    alone = design_block([w], spec, None, None)[0]
    together = design_block([w, other], spec, None, None)[0]
    assert alone.columns == together.columns
    np.testing.assert_array_equal(alone.values[0], together.values[0])


@pytest.mark.parametrize("gpus, clocks, limits", [
    (["a10"] * 3, [np.nan] * 3, [np.nan] * 3),                      # one setting: the default clock and limit
    (["a10"] * 3, [900.0] * 3, [120.0] * 3),                        # one setting, stated
    (["a10", "a10", "h200"], [np.nan] * 3, [np.nan] * 3),           # two GPUs
    (["a10"] * 4, [np.nan, 900.0, np.nan, 900.0], [np.nan] * 4),    # a clock on some rows only
    (["a10"] * 3, [900.0] * 3, [120.0, np.nan, 120.0]),             # a limit on some rows only
])
def test_setting_groups_hold_each_row_once_with_its_own_setting(gpus, clocks, limits):
    """Every row in exactly one group, whose GPU, clock and limit (None for NaN, the default) are the row's own:
    the single-setting shortcut and the grouped path alike."""
    from joulecast.features.design import setting_groups

    seen = []
    for gpu, clock, limit, idx in setting_groups(gpus, np.array(clocks), np.array(limits)):
        for i in idx.tolist():
            assert gpus[i] == gpu
            assert (clock is None and np.isnan(clocks[i])) or clock == clocks[i]
            assert (limit is None and np.isnan(limits[i])) or limit == limits[i]
        seen += idx.tolist()
    assert sorted(seen) == list(range(len(gpus)))
