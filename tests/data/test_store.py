import re

import numpy as np
import pandas as pd
import pytest
from conftest import REPO

from joulecast.data import store
from joulecast.data.errors import DataError
from joulecast.data.schema import conform, validate_measurements


def _rows(n, start=0):
    return conform(pd.DataFrame({
        "measurement_id": [f"m{i}" for i in range(start, start + n)], "source": "test", "provenance": "unit test",
        "kernel_list": "lowered", "gpu": "h200", "time_s": 0.01, "energy_j": 3.0, "power_w": 300.0,
        "method": "energy_counter", "batch": list(range(1, n + 1)),
    }))


def test_round_trip_and_resume_ids(tmp_path):
    store.write_part(_rows(3), tmp_path, "h200", "c1")
    store.write_part(_rows(2, start=3), tmp_path, "h200", "c1")
    store.write_card(tmp_path, "h200", "c1", {"what": "test"})
    loaded = store.load_store(tmp_path)
    assert list(loaded["measurement_id"]) == ["m0", "m1", "m2", "m3", "m4"]
    assert loaded["batch"].tolist() == [1, 2, 3, 1, 2] and loaded["flag_throttled"].dtype == bool
    assert store.existing_ids(tmp_path, "h200", "c1") == {f"m{i}" for i in range(5)}
    store.write_part(_rows(1, start=5), tmp_path, "h200", "c2")  # another collection of the same GPU stays apart
    assert list(store.load_collection(tmp_path, "h200", "c1")["measurement_id"]) == [f"m{i}" for i in range(5)]
    assert store.load_collection(tmp_path, "h200", "c3").empty
    assert not list(tmp_path.rglob(".part-*"))  # no temporary files left behind


def test_a_store_is_read_from_its_root_a_gpu_s_folder_or_one_collection(tmp_path):
    """Before, only a store's root: a GPU's folder or a collection's (data/holdout/h200) held "no measurements"."""
    store.write_part(_rows(3), tmp_path, "h200", "c1")
    store.write_part(_rows(2, start=3), tmp_path, "h200", "c2")
    store.write_card(tmp_path, "h200", "c1", {"what": "test", "host_dispatch_s": 18e-6})
    assert len(store.load_store(tmp_path)) == 5 and len(store.load_store(tmp_path / "h200")) == 5
    one = store.load_store(tmp_path / "h200" / "c1")
    assert one["measurement_id"].tolist() == ["m0", "m1", "m2"] and (one["host_dispatch_s"] == 18e-6).all()
    (tmp_path / "h200" / "c3").mkdir()
    assert store.load_store(tmp_path / "h200" / "c3").empty   # a collection with no part yet


def test_a_file_that_breaks_the_schema_names_file_and_column(tmp_path):
    path = tmp_path / "h200" / "c1" / "part-00000.parquet"
    path.parent.mkdir(parents=True)
    _rows(2).drop(columns=["energy_j"]).to_parquet(path)
    with pytest.raises(DataError, match=r"part-00000.parquet: missing column\(s\) energy_j"):
        store.load_store(tmp_path)
    bad = _rows(2)
    bad["power_w"] = -1.0
    bad.to_parquet(path)
    with pytest.raises(DataError, match="part-00000.parquet: column 'power_w' must be positive"):
        store.load_store(tmp_path)


def test_a_part_cut_short_or_a_card_that_is_no_mapping_names_its_file(tmp_path):
    """A part cut short (a copy that stopped half-way) is one line naming it, not pyarrow's own exception; so is a
    dataset card that holds a list."""
    store.write_part(_rows(3), tmp_path, "h200", "c1")
    part = next((tmp_path / "h200" / "c1").glob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[:100])
    with pytest.raises(DataError, match=rf"^{re.escape(str(part))}: not a readable Parquet file \(\w+\)$"):
        store.load_store(tmp_path)
    card = tmp_path / "h200" / "c1" / "CARD.yaml"
    card.write_text("- what\n- test\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(card))}: a dataset card must hold a YAML mapping$"):
        store.read_card(card)


def test_duplicate_ids_and_unknown_method_are_rejected():
    with pytest.raises(DataError, match="duplicates"):
        validate_measurements(pd.concat([_rows(2), _rows(1)]))
    bad = _rows(1)
    bad["method"] = "guess"
    with pytest.raises(DataError, match="'method' must be one of"):
        validate_measurements(bad)


def test_a_plan_run_again_under_another_collection_loads_beside_the_first(tmp_path):
    """An item's id is unique within its collection (the resume key), not across collections: a repeat of a plan
    under a new collection id holds the same ids (before, the whole store then failed to load: the shipped probes,
    h200-dispatch and h200-waiting, both measured wait/spin/us1000). Within one collection a repeated id is still
    refused."""
    store.write_part(_rows(2), tmp_path, "h200", "first")
    store.write_part(_rows(2), tmp_path, "h200", "again")
    assert sorted(store.load_store(tmp_path)["measurement_id"]) == ["m0", "m0", "m1", "m1"]
    store.write_part(_rows(1), tmp_path, "h200", "first")  # a second part of `first` repeating m0
    with pytest.raises(DataError, match="first: column 'measurement_id' has duplicates"):
        store.load_store(tmp_path)
    assert len(store.load_store(REPO / "data" / "probes")) > 0


def test_a_cards_host_dispatch_reaches_its_collections_rows_and_is_checked(tmp_path):
    store.write_part(_rows(2), tmp_path, "h200", "c1")
    store.write_part(_rows(1, start=2), tmp_path, "h200", "c2")
    store.write_card(tmp_path, "h200", "c1", {"what": "test", "host_dispatch_s": 1.8e-5})
    loaded = store.load_store(tmp_path).set_index("measurement_id")["host_dispatch_s"]
    assert loaded[["m0", "m1"]].tolist() == [1.8e-5, 1.8e-5] and np.isnan(loaded["m2"])  # c2 states none
    store.write_card(tmp_path, "h200", "c1", {"host_dispatch_s": "fast"})
    with pytest.raises(DataError, match=r"CARD.yaml: host_dispatch_s must be a number of seconds"):
        store.load_store(tmp_path)
    store.write_card(tmp_path, "h200", "c1", {"host_dispatch_s": 0.5})  # half a second a launch: no host
    with pytest.raises(DataError, match=r"column 'host_dispatch_s' must be from 0 to 0.001 s"):
        store.load_store(tmp_path)


def test_collector_rows_stored_before_references_named_the_runners_fusions_load_with_them(tmp_path):
    """The H200's collections of 2026-11-30 were written with plain GPT-2 references; their runner ran the activation
    as one kernel all the same, so they load naming the fusion. Rows of other sources, references naming their own
    fusions and other models' load as written."""
    plain = "catalog:gpt2?phase=prefill&batch=8&seq=512&dtype=bf16&attention=flash"
    refs = [plain, plain + "&fusions=norm", "catalog:llama-3-8b?phase=prefill&batch=1&seq=512&dtype=bf16", plain]
    rows = _rows(4).assign(workload_ref=refs, source=["joulecast-collector"] * 3 + ["test"])
    store.write_part(rows, tmp_path, "h200", "c1")
    loaded = store.load_store(tmp_path).set_index("measurement_id")["workload_ref"]
    assert list(loaded) == [plain + "&fusions=activation", *refs[1:]]
    first = store.load_collection(REPO / "data" / "measurements", "h200", "h200-first")
    gpt2 = first.loc[first["measurement_id"].str.startswith("gpt2/"), "workload_ref"]
    assert len(gpt2) == 3 and gpt2.str.endswith("&fusions=activation").all()
    shipped = store.load_store(REPO / "data" / "measurements")  # later collections name it as written
    refs = shipped.loc[shipped["measurement_id"].str.startswith("gpt2/"), "workload_ref"]
    eager = refs.str.contains("attention=eager")  # h200-eager: Hugging Face's eager code, gelu_new unfused
    assert eager.any() and refs[~eager].str.endswith("&fusions=activation").all()
    assert not refs[eager].str.contains("fusions").any()

