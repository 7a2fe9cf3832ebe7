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
         for p in ("prefill", "decode", "training") for a in ("flash", "eager", "masked")
         if not (m == "bert-large" and p == "decode")]
CASES += [(m, p, "flash") for m in ("vit-large", "resnet-101", "mobilevit-small") for p in ("inference", "training")]
# Qwen3's q and k norms; mixtures of experts, whose experts' GEMMs the template fits unsplit and splits over the
# experts each size runs (`Template.experts`)
CASES += [(m, p, a) for m in ("qwen3-8b", "mixtral-8x7b", "qwen3-30b-a3b") for p in ("prefill", "decode", "training")
          for a in ("flash", "eager")]
CASES = [(*c, ()) for c in CASES]
# fused kernels (`joulecast.data.fusions`) as polynomial as the eager ones
CASES += [(m, p, "flash", f) for m, f in (("llama-3-8b", ("activation", "attention_layout", "norm", "rope")),
                                          ("mistral-7b", ("norm", "packed_projections", "residual_norm")),
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
        for row in out.itertuples():
            one = joulecast.estimate(joulecast.workload("llama-3-8b", batch=row.batch, seq=row.seq), "a10",
                                     estimator="physics")
            assert row.energy_j == pytest.approx(one.energy_j, rel=1e-12)
    finally:  # the templates made under the patched checks (None) are not kept for later tests
        template.cache_clear()


@pytest.mark.parametrize("model, phase, batch, seq, attention, engine, fusions, lowered", [
    ("llama-3-8b", "prefill", 8, 1024, "flash", None, (), False),
    ("llama-3-70b", "training", 4, 4096, "flash", None, ("norm", "rope"), False),
    ("mistral-7b", "decode", 64, 512, "flash", "vllm-0.5.4", (), False),
    ("resnet-101", "inference", 16, None, "flash", None, (), False),
    ("gpt2", "prefill", 1, 64, "eager", None, (), True),          # two kernels meet at 64 tokens (the head width)
    ("llama-3-8b", "prefill", 2, 1, "flash", "vllm-0.5.4", (), True),  # one token meets the engine's decode swap
    ("qwen3-30b-a3b", "decode", 8, 512, "flash", "vllm-0.11.1", (), False),  # 52 of 128 experts, 2 slots each
    ("mixtral-8x7b", "training", 2, 64, "flash", None, (), False),
])
def test_a_catalog_workload_is_its_templates_value_or_else_lowered(model, phase, batch, seq, attention, engine,
                                                                    fusions, lowered, monkeypatch):
    """`joulecast.workload` of a catalog model takes its kernel table from the structure's template, identical to
    the lowering's (rows, order, values, dtypes, weight count); where two of the template's rows meet at the size,
    or a one-token prefill meets an engine's decode swap, it lowers instead."""
    from joulecast.data.kernels import KERNEL_COLUMNS
    from joulecast.features import lowering
    from joulecast.features.kernel_table import kernel_columns

    kwargs = dict(phase=phase, batch=batch, seq=seq, attention=attention, engine=engine, fusions=fusions)
    joulecast.workload(model, **kwargs)  # the template built
    config = resolve_model(model)[0]
    records, params = lowering.lower(config, phase=lowering.normal_phase(config, phase), batch=batch, seq=seq,
                                     dtype="bf16", attention=attention, fusions=fusions)
    expected = kernel_columns(lowering.engine_records(records, engine))
    calls = []
    real = lowering.lower
    monkeypatch.setattr(lowering, "lower", lambda *a, **k: calls.append(1) or real(*a, **k))
    w = joulecast.workload(model, **kwargs)
    assert bool(calls) == lowered and w.params == params
    for name in KERNEL_COLUMNS:
        assert w.columns[name].dtype == expected[name].dtype, name
        np.testing.assert_array_equal(w.columns[name], expected[name], err_msg=name)


def test_a_templates_codes_travel_with_its_workload_only_while_its_columns_do():
    """A workload built from a template carries its string columns' codes, which physics reads instead of encoding
    the strings again; a copy whose columns were replaced falls back to its own strings."""
    import dataclasses

    from joulecast.data.labels import Labels

    w = joulecast.workload("llama-3-8b", batch=8, seq=1024)
    encoded = w.encoded_columns()
    assert {n for n, v in encoded.items() if isinstance(v, Labels)} == {"kind", "op", "dtype", "acc_dtype"}
    for name in ("kind", "op", "dtype", "acc_dtype"):
        np.testing.assert_array_equal(encoded[name].strings(), w.columns[name])
    swapped = dataclasses.replace(w, columns={**w.columns, "op": np.full(len(w.columns["op"]), "linear", object)})
    assert not isinstance(swapped.encoded_columns()["op"], Labels)
    assert isinstance(swapped.encoded_columns()["kind"], Labels)
