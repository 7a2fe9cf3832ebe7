"""Many configurations lowered at once reproduce the lowering of each, row for row."""

import numpy as np
import pandas as pd
import pytest

import joulecast
from joulecast.data.kernels import KERNEL_COLUMNS
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
    got = plain(t.columns(batch, seq))
    config = resolve_model(model)[0]
    for i, (b, s) in enumerate(zip(batch, seq)):
        expected = _records(config, t.phase, int(b), int(s), "bf16", attention, None, fusions)
        rows = got["workload_id"] == i
        for column in KERNEL_COLUMNS:
            np.testing.assert_array_equal(got[column][rows], expected[column], err_msg=f"{column} at b{b} s{s}")


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
