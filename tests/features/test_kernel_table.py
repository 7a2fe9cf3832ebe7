import json

import pytest

from joulecast.data.errors import InputError
from joulecast.data.kernels import kernel_table_hash
from joulecast.features import arch
from joulecast.features.kernel_list import parse_kernel_list, workload_from_kernels
from joulecast.features.kernel_table import kernel_table

GEMM = [{"batch": 1, "dimM": 128, "dimN": 2304, "dimK": 768, "precM": "bf16", "precA": "bf16", "useTensorCore": True},
        ["gemm", "tc", "bf16_bf16"]]
ADD = [{"dim": 98304, "op": "pointwise_add", "prec": "bf16"}, ["elementwise"]]
NORM = [{"batch": 128, "dim": 768, "prec": "bf16"}, ["layernorm", "bf16"]]
ATTENTION = [{"batch": 1, "heads": 12, "seq_q": 128, "seq_kv": 128, "head_dim": 64, "prec": "bf16"}, ["attention"]]


def test_identical_kernels_merge_into_counts():
    table = parse_kernel_list([ADD, NORM, GEMM, ADD, GEMM, ADD])
    assert len(table) == 3
    counts = dict(zip(table["kind"], table["count"]))
    assert counts == {"elementwise": 3, "norm": 1, "gemm": 2}
    gemm = table[table.kind == "gemm"].iloc[0]
    assert (gemm.m, gemm.n, gemm.k, gemm.batch, gemm.tensor_core) == (128, 2304, 768, 1, True)


def _bmm(m, n, k):
    return [{"batch": 24, "dimM": m, "dimN": n, "dimK": k, "precM": "bf16", "precA": "bf16", "useTensorCore": True},
            ["gemm", "tc", "bf16_bf16"]]


def test_each_traced_attention_brings_its_four_layout_copies():
    """Scores (M = N) then values; when both are 128 x 128 x 128 (head size 128, 128 tokens) the pair still counts once."""
    for scores, values in ((_bmm(512, 512, 64), _bmm(512, 64, 512)), (_bmm(128, 128, 128), _bmm(128, 128, 128))):
        table = parse_kernel_list([GEMM, scores, ADD, values, GEMM] * 2)
        copies = table[table.op == "copy"]
        assert len(copies) == 1 and copies["count"].item() == 4 * 2
        assert copies["cols"].item() == 24 * scores[0]["dimM"] * scores[0]["dimK"]  # batch x heads x tokens x head size
    assert not (parse_kernel_list([GEMM, ADD]).op == "copy").any()


def test_a_traced_attention_names_its_broadcast_score_ops():
    """Between the scores GEMM and the softmax, an add over the scores is the mask's and GPT-2's tensor division is by
    a 0-d tensor, followed by the causal where the tracer leaves out (`kinds.streaming.UNVECTORISED_OPS`); the add
    after the values GEMM stays an add."""
    scores, values = _bmm(512, 512, 64), _bmm(512, 64, 512)
    on_scores = 24 * 512 * 512
    mask = [{"dim": on_scores, "op": "pointwise_add", "prec": "bf16"}, ["elementwise"]]
    divide = [{"dim": on_scores, "op": "unspecified_tensor", "prec": "bf16"}, ["elementwise"]]
    softmax = [{"batch": 24 * 512, "dim": 512, "prec": "bf16"}, ["softmax", "bf16"]]
    table = parse_kernel_list([GEMM, scores, divide, mask, softmax, values, ADD, mask])
    ops = table.groupby("op")["cols"].apply(sorted).to_dict()
    assert ops["mask_add"] == ops["scalar_div"] == ops["where"] == [on_scores]
    assert ops["pointwise_add"] == sorted([ADD[0]["dim"], on_scores])  # after the softmax: not the scores' mask
    assert "unspecified_tensor" not in ops


def test_hash_ignores_order_and_sees_content():
    a = parse_kernel_list([ADD, GEMM])
    b = parse_kernel_list([GEMM, ADD])
    assert kernel_table_hash(a) == kernel_table_hash(b)
    assert kernel_table_hash(a) != kernel_table_hash(parse_kernel_list([GEMM, ADD, ADD]))


@pytest.mark.parametrize("entries, match", [
    ([], "non-empty JSON list"),
    ([[{"dim": 4}, []]], r"kernels\[0\]: expected a \[params, tags\] pair"),
    ([[{"dim": 4, "prec": "bf16"}, ["warp_shuffle"]]], r"kernels\[0\].tags: unknown kernel tag 'warp_shuffle'"),
    # a tag that is no name (a list: TypeError, unhashable, before), and one a letter off named
    ([[{"dim": 4, "prec": "bf16"}, [["gemm"]]]], r"kernels\[0\].tags: unknown kernel tag \['gemm'\]; allowed: "),
    ([[{"dim": 4, "prec": "bf16"}, ["elementwis"]]],
     r"tags: unknown kernel tag 'elementwis'; did you mean 'elementwise'\?"),
    ([[{**GEMM[0], "dimK": 0}, GEMM[1]]],
     r"kernels\[0\].dimK: must be a whole number from 1 to 2\^40, got a number \(0\)"),
    # a size past what the kernel table's 64-bit integers hold (10^30 was numpy's OverflowError)
    ([[{**GEMM[0], "dimM": 10**30}, GEMM[1]]],
     r"kernels\[0\].dimM: must be a whole number from 1 to 2\^40, got a number"),
    ([ADD, [{**ADD[0], "prec": "fp4"}, ["elementwise"]]], r"kernels\[1\].prec: unknown dtype 'fp4'"),
    # a flag is JSON's true or false: the string "false" was a string's truth, a tensor core and a causal mask
    ([[{**GEMM[0], "useTensorCore": "false"}, GEMM[1]]],
     r"kernels\[0\].useTensorCore: must be true or false, got 'false'"),
    ([[{**ATTENTION[0], "causal": "false"}, ATTENTION[1]]], r"kernels\[0\].causal: must be true or false"),
    # kv_heads a size like the others (text was a ValueError from the kernel table's integer column)
    ([[{**ATTENTION[0], "kv_heads": "x"}, ATTENTION[1]]],
     r"kernels\[0\].kv_heads: must be a whole number from 1 to 2\^40, got text \('x'\)"),
])
def test_malformed_kernel_lists_name_the_entry(entries, match):
    with pytest.raises(InputError, match=match):
        parse_kernel_list(entries)


def test_a_kernel_lists_flags_and_kv_heads_read_as_given():
    table = parse_kernel_list([[{**GEMM[0], "useTensorCore": False}, GEMM[1]],
                               [{**ATTENTION[0], "causal": True, "kv_heads": 4}, ATTENTION[1]]])
    gemm, attention = table.iloc[0], table.iloc[-1]
    assert not gemm["tensor_core"] and attention["causal"] and attention["kv_heads"] == 4
    plain = parse_kernel_list([ATTENTION]).iloc[-1]  # the defaults: no causal mask, as many key heads as heads
    assert not plain["causal"] and plain["kv_heads"] == 12


def test_kernel_table_validates_sizes_and_fields():
    with pytest.raises(InputError, match=r"kernels\[0\].m: a gemm kernel needs m > 0"):
        kernel_table([dict(kind="gemm", m=0, n=4, k=4)])
    with pytest.raises(InputError, match="unknown field"):
        kernel_table([dict(kind="gemm", m=4, n=4, k=4, colour="red")])
    with pytest.raises(InputError, match="kind: unknown 'fft'"):
        kernel_table([dict(kind="fft", cols=4)])
    with pytest.raises(InputError, match=r"kernels\[1\].count: must be at least 1, got 0"):
        kernel_table([dict(kind="gemm", m=4, n=4, k=4), dict(kind="gemm", m=8, n=4, k=4, count=0)])


def test_workload_from_file_and_bad_json(tmp_path):
    """The API names its own field, kernels (the CLI shows it as --kernels, tests/test_cli.py)."""
    good = tmp_path / "w.json"
    good.write_text(json.dumps([GEMM, ADD]))
    w = workload_from_kernels(good)
    assert w.kernel_count == 2 and w.source == "kernel-list" and w.name == "w"
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(InputError, match="^kernels: bad.json is not valid JSON"):
        workload_from_kernels(bad)
    with pytest.raises(InputError, match="does not exist"):
        workload_from_kernels(tmp_path / "missing.json")
    # a tracer's list in the same process, as its file reads (before, a TypeError: 'expected str ... not list')
    listed = workload_from_kernels([GEMM, ADD])
    assert listed.name == "kernels" and listed.kernels.equals(w.kernels)
    with pytest.raises(InputError, match="kernels: a kernel-list file's path or its list of .* got a mapping"):
        workload_from_kernels({"kernels": [GEMM]})


def test_every_traced_workload_parses(energaizer):
    files = sorted((energaizer / "workloads").glob("*/*.json"))
    assert len(files) == 96  # 90 in all/ and 6 in dvfs/
    for path in files:
        w = workload_from_kernels(path)
        entries = json.loads(path.read_text())
        copies = int(w.kernels.loc[w.kernels.op == "copy", "count"].sum())
        transposes = int(w.kernels.loc[w.kernels.op == arch.LAYOUT_TRANSPOSE_OP, "count"].sum())
        wheres = int(w.kernels.loc[w.kernels.op == "where", "count"].sum())
        bmms = sum(tags[0] == "gemm" and p.get("batch", 1) > 1 for p, tags in entries)
        tc_convs = sum(tags[0] == "conv2d" and p.get("useTensorCore", True) for p, tags in entries)
        divisions = sum(p.get("op") == "unspecified_tensor" for p, tags in entries)  # GPT-2's, of its scores
        # every recorded kernel, plus the four layout copies of each eager attention (two batched GEMMs each), the
        # input transpose of each tensor-core convolution and the causal where after each division of GPT-2's scores
        assert w.kernel_count == len(entries) + copies + transposes + wheres, path.name
        assert copies == 4 * (bmms // 2) and transposes == tc_convs and wheres == divisions, path.name
