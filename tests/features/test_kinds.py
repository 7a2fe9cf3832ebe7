"""The kinds registry is where every list of kernel kinds comes from, and a new kind is one module."""

import numpy as np
import pytest

import joulecast
from joulecast.features import design, kinds, physics
from joulecast.features.kernel_specs import KERNEL_OPS, kernel_workload
from joulecast.features.kernel_table import kernel_table

SCAN = '''
from joulecast.features.kinds import KernelKind, Streaming

KIND = KernelKind(name="scan", order=99, sizes=("rows", "cols"), rule="streaming",
                  streaming=Streaming(elements="rows x cols", ctas="rows", reduction=True,
                                      instructions_per_element=30))
'''


def test_every_list_of_kinds_comes_from_the_registry():
    assert kinds.KINDS == ("gemm", "attention", "softmax", "norm", "elementwise", "embedding", "conv2d")
    assert set(kinds.REQUIRED_SIZES) == set(kinds.KINDS)
    assert set(KERNEL_OPS) == set(kinds.PLAN_OPS) == {"gemm", "bmm", "attention", "softmax", "layernorm", "rmsnorm",
                                                       "add", "mul", "div", "gelu", "silu", "where", "mask_add",
                                                       "scale", "cast_fp32"}
    X, _, _ = design.design_matrix([joulecast.workload("gpt2", batch=2, seq=64)], joulecast.gpu("a10"), None, None)
    assert [c for c in X.columns if c.startswith("share_") and not c.endswith("_bound")] == \
        [f"share_{k}" for k in kinds.KINDS]
    for name, kind in kinds.REGISTRY.items():
        assert kind.rule in kinds.RULES and (kind.rule != "streaming" or kind.streaming is not None), name


@pytest.mark.parametrize("op", sorted(kinds.PLAN_OPS))
def test_each_plan_op_builds_a_kernel_of_its_kind(op):
    sizes = {name: 64 for name in kinds.PLAN_OPS[op].sizes}
    w = kernel_workload(op, **sizes)
    assert len(w.columns["kind"]) == 1 and w.columns["kind"][0] in kinds.KINDS
    assert joulecast.estimate(w, "h100-sxm", estimator="physics").energy_j > 0


def test_a_new_kind_is_one_module(tmp_path, monkeypatch):
    """A module dropped into the package registers its kind; physics, validation and the residual's features take it
    from the registry, with no other file touched."""
    (tmp_path / "scan.py").write_text(SCAN)
    monkeypatch.setattr(kinds, "__path__", [*kinds.__path__, str(tmp_path)])
    registry = kinds._discover()
    assert list(registry)[-1] == "scan" and registry["scan"].sizes == ("rows", "cols")
    monkeypatch.setattr(kinds, "REGISTRY", registry)
    monkeypatch.setattr(kinds, "KINDS", tuple(registry))
    monkeypatch.setattr(kinds, "REQUIRED_SIZES", {n: k.sizes for n, k in registry.items()})
    table = kernel_table([dict(kind="scan", op="cumsum", rows=4096, cols=4096),
                          dict(kind="norm", op="layernorm", rows=4096, cols=4096)])
    features, totals = physics.analyze(table, joulecast.gpu("a100-pcie-40gb"))
    scan, norm = features.iloc[0], features.iloc[1]
    # the same grid and bytes as a norm over the same rows; more instructions issued (30 against 40: fewer)
    assert scan["tiles"] == norm["tiles"] == 4096 and scan["dram_bytes"] == norm["dram_bytes"]
    assert scan["exec_flops"] == pytest.approx(norm["exec_flops"] * 30 / 40)
    assert np.isfinite(totals.energy_j).all()
    with pytest.raises(joulecast.InputError, match=r"kernels\[0\].cols: a scan kernel needs cols > 0"):
        kernel_table([dict(kind="scan", op="cumsum", rows=8)])
