"""The estimate path holds to the reference saved before it was rewritten (`make_estimates.py`)."""

import numpy as np
import pandas as pd
import pytest
from make_estimates import COLUMNS, REFERENCE, estimates

import joulecast

RTOL = 1e-9


@pytest.fixture(scope="module")
def now_and_then():
    reference = pd.read_parquet(REFERENCE)
    configs = reference[["model", "phase", "batch", "seq", "dtype", "attention", "launch_mode", "engine", "gpu",
                         "sm_clock_mhz", "power_limit_w"]]
    return estimates(configs), reference


def test_every_number_matches_the_reference(now_and_then):
    now, then = now_and_then
    numbers = [c for c in then.columns if c.startswith(("hybrid_", "physics_only_")) and then[c].dtype.kind == "f"]
    assert len(numbers) == 12  # nine hybrid figures, the memory needed, two of physics alone
    for column in numbers:
        np.testing.assert_allclose(now[column].to_numpy(), then[column].to_numpy(), rtol=RTOL, err_msg=column)


def test_flags_and_domain_match_the_reference(now_and_then):
    """The same flags and domain reasons; the memory check flags exactly the rows that need more than their GPU
    holds."""
    now, then = now_and_then
    for column in ("hybrid_in_domain", "hybrid_outside_domain", "hybrid_flags"):
        assert (now[column].to_numpy() == then[column].to_numpy()).all(), column
    capacity = now["gpu"].map(lambda g: joulecast.gpu(g).memory_gb)
    assert (now["hybrid_flags"].str.contains("exceeds-memory") == (now["hybrid_memory_gb"] > capacity)).all()
    assert now["hybrid_flags"].str.contains("exceeds-memory").any()
    assert set(COLUMNS) <= {c.removeprefix("hybrid_") for c in then.columns}


def test_corrections_taken_in_other_batches_change_nothing(now_and_then, monkeypatch):
    """The residual's corrections taken a few configurations at a time (across GPU settings, and within one), over
    physics chunks of a few configurations, give every figure, flag and reason bit for bit."""
    from joulecast.estimator import many

    now, _ = now_and_then
    rows = now.sample(300, random_state=31).reset_index(drop=True)
    configs = rows[["model", "phase", "batch", "seq", "dtype", "attention", "launch_mode", "engine", "gpu",
                    "sm_clock_mhz", "power_limit_w"]]
    monkeypatch.setattr(many, "CORRECT_CONFIGS", 7)
    monkeypatch.setattr(many, "CHUNK_CONFIGS", 5)
    small = joulecast.estimate_many(configs)
    for column in ("energy_j", "time_s", "energy_lo_j", "energy_hi_j", "time_lo_s", "time_hi_s", "memory_gb"):
        np.testing.assert_array_equal(small[column].to_numpy(), rows[f"hybrid_{column}"].to_numpy(), err_msg=column)
    for column in ("in_domain", "outside_domain", "flags"):
        assert (small[column].to_numpy() == rows[f"hybrid_{column}"].to_numpy()).all(), column
