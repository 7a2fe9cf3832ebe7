"""The training table's reading of a row's GPU setting, on the project's own H200 measurements."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from joulecast.data.importers import import_source
from joulecast.data.store import load_collection, load_store
from joulecast.training.dataset import setting_of, training_table, usable

OWN = Path(__file__).resolve().parents[2] / "data" / "measurements"


def test_the_collectors_throttled_rows_ran_at_the_default_clock_under_their_power_limit():
    rows = load_store(OWN)
    rows = rows[rows["gpu"] == "h200"].reset_index(drop=True)
    clock, limit = setting_of(rows)
    throttled = rows["flag_throttled"].to_numpy(bool)
    assert 0 < throttled.sum() < len(rows)
    assert np.isnan(clock[throttled]).all()  # no lock: the power cap lowered the clock
    assert (clock[~throttled] == rows.loc[~throttled, "sm_clock_max_mhz"]).all() and (limit == 700.0).all()
    # So the physics meets the cap as the GPU did: a 16k GEMM draws its 700 W limit, not the 290 W that locking the
    # clock at the lowest one seen (1,110 MHz) would give, and takes the measured time to within 5 %.
    gemm = rows.index[rows["measurement_id"] == "gemm/m16384/n16384/k16384/bf16"]
    table = training_table(rows.loc[gemm])
    physics_power = table.rows["physics_energy_j"] / table.rows["physics_time_s"]
    assert np.allclose(physics_power, 700.0, rtol=0.01)
    assert np.allclose(table.rows["physics_time_s"], table.rows["time_s"], rtol=0.05)


def test_rows_whose_kernel_list_lacks_work_the_run_did_are_not_trained_on(external):
    measured = import_source("mlenergy", external)
    rows, dropped = usable(measured)
    partial = measured["kernel_list"] == "partial"  # ML.ENERGY v3's decode steps, which also ran unrecorded prompts
    assert dropped["kernel list partial (the run did more work)"] == partial.sum() > 0
    assert not rows["measurement_id"].isin(measured.loc[partial, "measurement_id"]).any()
    assert set(rows["kernel_list"]) == {"lowered"}  # v2's, whose engine constant stands for its host work
    # A study of that missing work asks for them by name, and gets them, still marked partial.
    kept, kept_dropped = usable(measured, partial=True)
    extra = kept["kernel_list"] == "partial"
    assert "kernel list partial (the run did more work)" not in kept_dropped
    assert 0 < extra.sum() <= partial.sum() and len(kept) == len(rows) + extra.sum()
    assert kept.loc[~extra, "measurement_id"].tolist() == rows["measurement_id"].tolist()


def test_a_collection_states_its_hosts_dispatch_and_its_rows_physics_use_it():
    """h200-first's card states the machine's host dispatch a launch (18.0 us, from its own host-bound rows): every
    row of it carries it (h200-prefill's and h200-eager's, other machines', their own 24.7 and 22.3 us; h200-masked,
    of single kernels, states none and takes the default), and a host-bound decode row's physics
    takes launches x that dispatch in a 2-norm with the GPU, as its measured time does (llama-3-8b at batch 1 took
    19.8 ms; physics 19.1 ms, or 25.8 ms at the default 25 us)."""
    rows = load_store(OWN)
    first = rows["gpu_uuid_hash"] == load_collection(OWN, "h200", "h200-first")["gpu_uuid_hash"].iloc[0]
    assert (rows.loc[first, "host_dispatch_s"] == 18.0e-6).all()
    for collection, stated in (("h200-prefill", 24.7e-6), ("h200-eager", 22.3e-6)):  # their machines, own rows
        own = rows["gpu_uuid_hash"] == load_collection(OWN, "h200", collection)["gpu_uuid_hash"].iloc[0]
        assert (rows.loc[own, "host_dispatch_s"] == stated).all() and not (own & first).any()
    masked = rows["gpu_uuid_hash"] == load_collection(OWN, "h200", "h200-masked")["gpu_uuid_hash"].iloc[0]
    assert rows.loc[masked, "host_dispatch_s"].isna().all() and (rows.loc[masked, "phase"] == "kernel").all()
    decode = rows[rows["measurement_id"] == "llama-3-8b/decode/b1/s2048/bf16"].reset_index(drop=True)
    stated = training_table(decode).rows
    default = training_table(decode.assign(host_dispatch_s=np.nan)).rows
    assert stated["physics_time_s"][0] == pytest.approx(stated["time_s"][0], rel=0.05)  # 19.1 ms
    assert default["physics_time_s"][0] > 1.25 * stated["time_s"][0]


def test_an_unstated_hosts_reach_is_read_per_target_and_scored_rows_join_it_as_an_estimate_does():
    """`TrainingTable.host_reach`: a host-bound decode (llama-3-8b at batch 1, h200-first's row) whose set states no
    host reaches, in time and energy, as far as physics with the hosts' range of dispatch (18-30 us a launch) moves
    from physics at the default, each side apart; the same row stating its machine's reaches nothing. Scored for an
    interval (`scored_frame`, as the training report, audits and experiments score), each bound of the unstated
    row's lies the margin's reach and the host's in quadrature from the point, as `estimate` gives it; the stated
    row's, and rows without the table's host columns, the margin's alone."""
    from joulecast.estimator.api import HOST_RANGE_COLUMNS, scored_frame
    from joulecast.features import arch

    rows = load_store(OWN)
    decode = rows[rows["measurement_id"] == "llama-3-8b/decode/b1/s2048/bf16"].head(1)
    both = pd.concat([decode, decode.assign(host_dispatch_s=np.nan)], ignore_index=True)
    table = training_table(both)
    reach = table.host_reach()
    at_ends = [training_table(both.assign(host_dispatch_s=h)).rows.iloc[1] for h in arch.HOST_DISPATCH_RANGE_S]
    for target, column in (("time", "physics_time_s"), ("energy", "physics_energy_j")):
        assert (reach[target][0] == 0.0).all()   # its host stated
        own = table.rows[column][1]
        np.testing.assert_allclose(reach[target][1], [np.log(e[column] / own) for e in at_ends])
        assert reach[target][1, 0] < 0 < reach[target][1, 1]
    margin = 0.1
    corr = {k: np.full(2, v) for k, v in (("time", 0.0), ("time_lo", -margin), ("time_hi", margin), ("energy", 0.0),
                                          ("energy_lo", -margin), ("energy_hi", margin))}
    frame = scored_frame(table.rows.assign(power_limit_w=np.nan), corr)
    plain = scored_frame(table.rows.drop(columns=list(HOST_RANGE_COLUMNS)).assign(power_limit_w=np.nan), corr)
    for target, unit, column in (("time", "s", "physics_time_s"), ("energy", "j", "physics_energy_j")):
        point = table.rows[column].to_numpy()
        low, high = reach[target][:, 0], reach[target][:, 1]
        np.testing.assert_allclose(frame[f"lo_{target}_{unit}"], point * np.exp(-np.hypot(margin, low)))
        np.testing.assert_allclose(frame[f"hi_{target}_{unit}"], point * np.exp(np.hypot(margin, high)))
        np.testing.assert_allclose(plain[f"lo_{target}_{unit}"], point * np.exp(-margin))
        assert frame[f"lo_{target}_{unit}"][0] == plain[f"lo_{target}_{unit}"][0]
