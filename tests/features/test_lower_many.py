"""Many configurations lowered at once reproduce the lowering of each, kernel for kernel."""

import numpy as np
import pandas as pd
import pytest

import joulecast
from joulecast.data.kernels import KEY_COLUMNS
from joulecast.data.labels import plain
from joulecast.features import lower_many
from joulecast.features.lower_many import _records, template
from joulecast.features.lowering import resolve_model

CASES = [(m, p, a) for m in ("gpt2", "bert-large", "opt-1.3b", "qwen2-1.5b", "llama-3-8b", "mistral-7b", "llama-3-70b")
         for p in ("prefill", "decode", "training") for a in ("flash", "eager") if not (m == "bert-large" and p == "decode")]
CASES += [(m, p, "flash") for m in ("vit-large", "resnet-101", "mobilevit-small") for p in ("inference", "training")]
CASES = [(*c, ()) for c in CASES]
# fused kernels (`joulecast.data.fusions`) as polynomial as the eager ones
CASES += [(m, p, "flash", f) for m, f in (("llama-3-8b", ("activation", "attention_layout", "norm", "rope")),
                                          ("gpt2", ("activation",)), ("bert-large", ("gemm_activation",)))
          for p in ("prefill", "training")]


@pytest.mark.parametrize("model, phase, attention, fusions", CASES)
def test_a_template_is_the_lowering_at_any_size(model, phase, attention, fusions):
    t = template(model, phase, "bf16", attention, None, fusions)
    assert t is not None  # every catalog structure is polynomial in batch and length
    rng = np.random.default_rng(len(model) + len(phase))
    batch, seq = rng.integers(1, 300, 6), rng.integers(1, 9000, 6)
    got = pd.DataFrame(plain(t.columns(batch, seq)))
    config = resolve_model(model)[0]
    assert t.rows <= len(_records(config, t.phase, 5, 7, "bf16", attention, None, fusions)["count"])
    for i, (b, s) in enumerate(zip(batch, seq)):
        expected = by_kernel(pd.DataFrame(_records(config, t.phase, int(b), int(s), "bf16", attention, None, fusions)))
        pd.testing.assert_frame_equal(by_kernel(got[got["workload_id"] == i]), expected, obj=f"b{b} s{s}")


def test_a_template_merges_the_kernels_its_layers_repeat():
    """A transformer's layers repeat their kernels: the template holds each once with its count, as many rows as the
    lowering of one size merges them into (fewer rows for physics to work through)."""
    for model, phase in (("llama-3-8b", "prefill"), ("llama-3-70b", "training"), ("gpt2", "decode")):
        t = template(model, phase, "bf16", "flash", None)
        merged = joulecast.workload(model, phase=phase, batch=4, seq=512).columns
        config = resolve_model(model)[0]
        unmerged = _records(config, t.phase, 4, 512, "bf16", "flash", None, ())
        assert t.rows == len(merged["count"]) < len(unmerged["count"])
        assert t.columns([4], [512])["count"].sum() == merged["count"].sum()


def by_kernel(rows: pd.DataFrame) -> pd.DataFrame:
    """Each distinct kernel and its summed count (a row each, sorted): what a table of kernel rows stands for."""
    return rows.groupby(KEY_COLUMNS, sort=True)["count"].sum().reset_index()


def test_a_structure_the_polynomial_misses_is_lowered_one_by_one(monkeypatch):
    """Where the check points disagree (here: made to), estimate_many lowers each configuration and still agrees
    with estimate."""
    template.cache_clear()
    monkeypatch.setattr(lower_many, "_CHECKS", ((1, 1),))  # a prefill of one token: seq_q == 1 flips the op below
    monkeypatch.setattr(lower_many, "engine_records", lambda records, engine: [
        dict(r, op="paged") if r["kind"] == "attention" and r.get("seq_q") == 1 else r for r in records])
    try:
        assert template("llama-3-8b", "prefill", "bf16", "flash", None) is None
        frame = pd.DataFrame({"model": "llama-3-8b", "gpu": "a10", "batch": [1, 4], "seq": [128, 256]})
        out = joulecast.estimate_many(frame, estimator="physics")
    finally:
        template.cache_clear()
    for row in out.itertuples():
        one = joulecast.estimate(joulecast.workload("llama-3-8b", batch=row.batch, seq=row.seq), "a10",
                                 estimator="physics")
        assert row.energy_j == pytest.approx(one.energy_j, rel=1e-12)
