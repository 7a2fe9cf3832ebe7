"""Reader for the EnergAIzer kernel-list JSON format (also joulecast's own `--kernels FILE.json`).

The format (see shared/data/external/energaizer-artifact/PROVENANCE.md) is a JSON list of ``[params, tags]`` pairs:
``[{"batch":1,"dimM":128,"dimN":2304,"dimK":768,"precM":"bf16","precA":"bf16","useTensorCore":true}, ["gemm","tc","bf16_bf16"]]``.
joulecast adds two tags the artifact never uses: ``attention`` (fused) and ``embedding``.

The EnergAIzer tracer does not record layout copies, yet eager attention makes four, each a launch and a pass over
DRAM: `torch.matmul` on Q, K and V viewed as (batch, heads, seq, dim) reshapes them to 3-D batches, which copies, and
Hugging Face merges the output's heads back with `transpose(1, 2).contiguous()`. Each batched GEMM of queries by keys
(M = N: a prefill attention's scores) therefore brings its four copies in with it, as the lowering has them.
Nor does it record cuDNN's NCHW -> NHWC transpose of a tensor-core convolution's input (`features.arch.
LAYOUT_TRANSPOSE_OP`), launched by cuDNN itself; each such convolution brings it in, as the lowering has it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from joulecast.data.errors import InputError, require_choice, require_switch
from joulecast.data.files import kind_of, read_json
from joulecast.data.kernels import DTYPES, check_kernel_size
from joulecast.data.workload import Workload
from joulecast.features import arch
from joulecast.features.kernel_table import kernel_table


def _dtype(value: Any, where: str) -> str:
    require_choice(value, DTYPES, where, what="dtype")
    return value


def _int(params: dict, key: str, where: str) -> int:
    return check_kernel_size(params.get(key), f"{where}.{key}")


def _switch(params: dict, key: str, where: str, default: bool) -> bool:
    """A flag as JSON's true or false, else one error (a string's truth read "false" as true)."""
    return require_switch(params.get(key, default), f"{where}.{key}")


def _gemm(p: dict, w: str) -> dict:
    dtype, acc = _dtype(p.get("precM"), f"{w}.precM"), _dtype(p.get("precA", p.get("precM")), f"{w}.precA")
    batch = _int(p, "batch", w)  # checked before it names the op
    return dict(kind="gemm", op="bmm" if batch > 1 else "linear", tensor_core=_switch(p, "useTensorCore", w, True),
                dtype=dtype, acc_dtype=acc, batch=batch, m=_int(p, "dimM", w), n=_int(p, "dimN", w),
                k=_int(p, "dimK", w))


def _conv(p: dict, w: str) -> dict:
    # dimM = N*P*Q output pixels, dimN = output channels, dimK = C*R*S (implicit GEMM, as cuDNN lowers it).
    inputs = _int(p, "b", w) * _int(p, "c", w) * _int(p, "hw", w) ** 2
    return dict(kind="conv2d", op="conv2d", tensor_core=_switch(p, "useTensorCore", w, True),
                dtype=_dtype(p.get("precM"), f"{w}.precM"), acc_dtype=_dtype(p.get("precA", p.get("precM")), f"{w}.precA"),
                batch=1, m=_int(p, "dimM", w), n=_int(p, "dimN", w), k=_int(p, "dimK", w), conv_in_elements=inputs)


def _rowwise(kind: str, op: str) -> Callable[[dict, str], dict]:
    def parse(p: dict, w: str) -> dict:
        dtype = _dtype(p.get("prec"), f"{w}.prec")
        return dict(kind=kind, op=op, dtype=dtype, acc_dtype=dtype, rows=_int(p, "batch", w), cols=_int(p, "dim", w))
    return parse


def _elementwise(p: dict, w: str) -> dict:
    dtype = _dtype(p.get("prec"), f"{w}.prec")
    op = str(p.get("op", "unspecified_tensor"))
    out = {"typecast_to_fp32": "fp32", "typecast_to_bf16": "bf16", "typecast_to_fp16": "fp16"}.get(op, dtype)
    return dict(kind="elementwise", op=op, dtype=dtype, acc_dtype=out, rows=1, cols=_int(p, "dim", w))


def _attention(p: dict, w: str) -> dict:
    dtype = _dtype(p.get("prec"), f"{w}.prec")
    heads = _int(p, "heads", w)
    return dict(kind="attention", op="flash", dtype=dtype, acc_dtype=dtype, tensor_core=True, batch=_int(p, "batch", w),
                heads=heads, kv_heads=_int(p, "kv_heads", w) if "kv_heads" in p else heads, seq_q=_int(p, "seq_q", w),
                seq_kv=_int(p, "seq_kv", w), head_dim=_int(p, "head_dim", w), causal=_switch(p, "causal", w, False))


def _embedding(p: dict, w: str) -> dict:
    dtype = _dtype(p.get("prec"), f"{w}.prec")
    return dict(kind="embedding", op="lookup", dtype=dtype, acc_dtype=dtype, rows=_int(p, "tokens", w), cols=_int(p, "dim", w))


_PARSERS: dict[str, Callable[[dict, str], dict]] = {
    "gemm": _gemm, "conv2d": _conv, "elementwise": _elementwise, "attention": _attention, "embedding": _embedding,
    "layernorm": _rowwise("norm", "layernorm"), "rmsnorm": _rowwise("norm", "rmsnorm"), "softmax": _rowwise("softmax", "softmax"),
}


def parse_kernel_list(entries: Any, origin: str = "kernels") -> pd.DataFrame:
    """Turn a decoded kernel-list JSON value into a kernel table.

    Raises:
        InputError: naming the entry index and field that is malformed.
    """
    if not isinstance(entries, list) or not entries:
        raise InputError(origin, "expected a non-empty JSON list of [params, tags] pairs")
    records = []
    for i, entry in enumerate(entries):
        where = f"{origin}[{i}]"
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], dict) and isinstance(entry[1], list) and entry[1]):
            raise InputError(where, "expected a [params, tags] pair, e.g. [{\"dim\": 4096, \"op\": \"relu\", \"prec\": \"bf16\"}, [\"elementwise\"]]")
        params, tags = entry
        require_choice(tags[0], _PARSERS, f"{where}.tags", what="kernel tag")
        parser = _PARSERS[tags[0]]
        records.append(parser(params, where))
    scores_gemms = _scores_gemms(records)
    return kernel_table(_scores_ops(records, scores_gemms) + _layout_copies(records, scores_gemms))


# The scores' ops with a broadcast operand, as the tracer names them: the mask added (a (seq, seq) or (1, seq) mask
# over every head) and GPT-2's division by a 0-d tensor; ATen runs both unvectorised (`kinds.streaming`). The
# causal where that follows GPT-2's division (`lower_transformers.gpt2`) goes unrecorded: the reader adds it.
_BROADCAST_ON_SCORES = {"pointwise_add": "mask_add", "unspecified_tensor": "scalar_div"}


def _scores_gemms(records: list[dict]) -> list[bool]:
    """Per record, whether it is an attention's scores GEMM: a batched GEMM of M = N, but not the values GEMM right
    after one, which may have the same shape (128 tokens of head size 128)."""
    out, values_next = [], False
    for r in records:
        bmm = r["kind"] == "gemm" and r["op"] == "bmm"
        out.append(bmm and not values_next and r["m"] == r["n"])
        values_next = out[-1] if bmm else values_next
    return out


def _scores_ops(records: list[dict], scores_gemms: list[bool]) -> list[dict]:
    """The records, each elementwise op between an attention's scores GEMM and its softmax over the scores named
    for its broadcast operand (`_BROADCAST_ON_SCORES`), GPT-2's division followed by its where."""
    scores, out = 0, []
    for r, is_scores in zip(records, scores_gemms):
        out.append(r)
        if r["kind"] == "gemm" and r["op"] == "bmm":
            scores = r["batch"] * r["m"] * r["n"] if is_scores else 0
        elif r["kind"] == "softmax":
            scores = 0
        elif r["kind"] == "elementwise" and scores and r["cols"] == scores and r["op"] in _BROADCAST_ON_SCORES:
            if r["op"] == "unspecified_tensor":  # GPT-2's: the causal where after it goes unrecorded
                out.append(dict(r, op="where"))
            r["op"] = _BROADCAST_ON_SCORES[r["op"]]
    return out


def _layout_copies(records: list[dict], scores_gemms: list[bool]) -> list[dict]:
    """The copies eager attention and cuDNN make that the tracer leaves out (see the module docstring): four with
    each attention's scores GEMM (`_scores_gemms`), a transpose with each tensor-core convolution."""
    out = []
    for r, is_scores in zip(records, scores_gemms):
        if r["kind"] == "conv2d" and r["tensor_core"]:
            storage = "fp32" if r["dtype"] == "tf32" else r["dtype"]  # TF32 is how fp32 is multiplied, not stored
            out.append(dict(kind="elementwise", op=arch.LAYOUT_TRANSPOSE_OP, dtype=storage, acc_dtype=storage,
                            rows=1, cols=r["conv_in_elements"]))
        elif is_scores:
            out.append(dict(kind="elementwise", op="copy", dtype=r["dtype"], acc_dtype=r["dtype"], rows=1,
                            cols=r["batch"] * r["m"] * r["k"], count=4))
    return out


def workload_from_kernels(source: str | os.PathLike | list, name: str | None = None) -> Workload:
    """A kernel list as a `Workload` (eager PyTorch launches, as traced): a JSON file's path, or its decoded list of
    [params, tags] pairs (a tracer's in the same process; named `name`, default 'kernels')."""
    if isinstance(source, list):
        table, name = parse_kernel_list(source), name or "kernels"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        table, name = parse_kernel_list(read_json(path, "kernels"), origin=path.name), name or path.stem
    else:
        raise InputError("kernels", f"a kernel-list file's path or its list of [params, tags] pairs, got "
                                    f"{kind_of(source)}")
    return Workload.from_table(table, name=name, source="kernel-list")
