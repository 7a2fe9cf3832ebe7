"""The serving engine's host time per step: the shipped constant is what ML.ENERGY's rows measure over the physics of
their serving steps (decodes and arriving prompts)."""

import pytest

from joulecast.data.importers import import_source
from joulecast.features import arch
from joulecast.training.dataset import usable
from joulecast.training.engine_overhead import kernels_alone, pooled


def test_vllm_054_host_time_is_what_its_a100_rows_leave_over_physics_and_holds_on_the_h100(external):
    rows, _ = usable(import_source("mlenergy", external / "mlenergy-v2"))
    frame = kernels_alone(rows)
    by_gpu = {gpu: pooled(part) for gpu, part in frame.groupby("gpu")}
    a100, h100 = by_gpu["a100-sxm4-40gb"], by_gpu["h100-sxm"]
    assert (a100["rows"], h100["rows"]) == (12, 17)  # llama-3-8b and mistral-7b on one GPU
    shipped = arch.SERVING_ENGINES["vllm-0.5.4"]
    assert a100["host_s_per_sequence"] == pytest.approx(shipped["host_s_per_sequence"], abs=0.5e-6)
    assert a100["power_over_idle"] == pytest.approx(shipped["power_over_idle"], abs=0.005)
    # the spread its interval takes: those rows' own, one by one
    low, high = shipped["host_s_per_sequence_range"]
    assert (a100["per_row_ms_min"], a100["per_row_ms_max"]) == pytest.approx((low * 1e3, high * 1e3), abs=0.0005)
    # Host work: the H100, whose kernels' physics runs the same steps (model, batch 64-319) 1.8-2.6x faster, leaves
    # the same time over (0.399 against 0.406 ms), at the same power, once the steps carry the prompts arriving
    # meanwhile (the decodes alone left 0.447 against 0.415 ms, at 1.85 against 1.63x idle)
    steps = frame.pivot_table(index=["model", "batch"], columns="gpu", values="physics_time_s").dropna()
    assert len(steps) == 10 and (steps["a100-sxm4-40gb"] / steps["h100-sxm"]).between(1.8, 2.65).all()
    assert h100["host_s_per_sequence"] == pytest.approx(a100["host_s_per_sequence"], rel=0.02)
    assert h100["power_over_idle"] == pytest.approx(a100["power_over_idle"], rel=0.01)
    assert (frame["extra_ms_per_sequence"] > 0.3).all()  # every row, batch 32 to 1,230
