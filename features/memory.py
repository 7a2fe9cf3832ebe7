"""GPU memory a workload needs: weights, gradients and optimizer state, activations, and the KV cache, from its kernel
table and its weight count, for one workload or thousands (rows with a `workload_id`) at once.

Approximations (stated, not measured):
- weights: every weight element at the compute dtype's width (fp8/int8 workloads keep 1-byte weights);
- training with AdamW: gradients at the weights' width, plus fp32 Adam moments and, for 16- and 8-bit weights, an
  fp32 master copy: 16 bytes a parameter in mixed precision (ZeRO, Rajbhandari et al. SC'20, section 3.1: 2 + 2 + 12
  bytes per parameter), 16 in fp32 (4 + 4 + 8);
- activations in training: every forward kernel's output, as autograd saves them for the backward pass (an upper
  bound where outputs are views or recomputed), but for those it keeps none of (`_NOT_SAVED_OPS`); in inference, the
  largest kernel's output and input, live at once;
- KV cache: each fused attention kernel's keys and values (batch x key-value heads x keys x head dim, twice), as
  the cache holds them for decode and a prefill writes them; eager attention's are counted in its activations only;
- nothing for the CUDA context, the allocator's fragmentation or the framework's workspaces.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from joulecast.data.kernels import BACKWARD_SUFFIXES, DTYPE_BYTES
from joulecast.data.labels import Labels
from joulecast.features.arch import LAYOUT_TRANSPOSE_OP

_OPTIMIZER_OPS = ("adamw", "sgd_momentum")
# Forward kernels whose outputs autograd keeps none of (PyTorch, tools/autograd/derivatives.yaml): a library's own
# kernels inside one call (cuDNN's layout transposes write its workspace, freed when the call returns), and a ReLU's,
# one tensor with its input: its backward reads its result (`threshold_backward(grad, result, 0)`), and the ops the
# lowerings put before one (a linear or a convolution, a batch norm, a residual sum) read their inputs, not their
# outputs, so of a ReLU's input and output one is kept (torchvision overwrites the input in place; Hugging Face's frees
# it). With both counted, ResNet-50's fp32 training step at a batch of 128 read 23.4 GiB, where NVIDIA trains it at 128
# on a 16 GB T4 and at 256 on a 32 GB V100 (DeepLearningExamples, PyTorch/Classification/ConvNets/configs.yml, FP32
# batch sizes); without them 13.8 and 27.1 GiB.
_NOT_SAVED_OPS = (LAYOUT_TRANSPOSE_OP, "relu")
# The optimizer's fp32 state a parameter (ZeRO section 3.1): AdamW's two moments, SGD's momentum
MOMENT_BYTES = {"adamw": 8.0, "sgd": 4.0}
GIB = 2**30


@functools.lru_cache(maxsize=256)
def _forward(ops: tuple[str, ...]) -> np.ndarray:
    """Per op name, whether its kernel belongs to the forward pass (not a backward kernel or an optimizer step): a
    lowering's few names decided once, not on every estimate."""
    return np.array([not (o.endswith(BACKWARD_SUFFIXES) or o in _OPTIMIZER_OPS) for o in ops] or [False])


@functools.lru_cache(maxsize=256)
def _saved(ops: tuple[str, ...]) -> np.ndarray:
    """Per op name, whether autograd keeps its kernel's output for the backward pass: a forward kernel's, but for
    `_NOT_SAVED_OPS`."""
    return _forward(ops) & np.array([o not in _NOT_SAVED_OPS for o in ops] or [False])


def update_bytes(width: Any, optimizer: str = "adamw") -> tuple[Any, Any]:
    """Bytes a trainable parameter of `width`-byte weights (a number or an array) needs for its gradient, and for its
    optimizer state: a gradient at the weights' width (2 bytes at least), an fp32 master copy where the weights are
    narrower than fp32, the optimizer's fp32 state (`MOMENT_BYTES`). With AdamW, 16 bytes a parameter in fp32
    (4 + 4 + 8) and in mixed precision (2 + 2 + 12) alike (ZeRO section 3.1)."""
    width = np.asarray(width, dtype=float)
    return np.maximum(width, 2.0), np.where(width >= 4, 0.0, 4.0) + MOMENT_BYTES[optimizer]


def need_bytes(columns: Mapping[str, np.ndarray], n: int, params: np.ndarray, phase: np.ndarray,
               dtype: np.ndarray) -> dict[str, np.ndarray]:
    """Per workload (ids 0..n-1 in `columns["workload_id"]`): weights_bytes, optimizer_bytes (gradients and
    optimizer state), activation_bytes, kv_cache_bytes and total_bytes."""
    wid = np.asarray(columns.get("workload_id", np.zeros(len(columns["count"]), np.int64)), np.int64)
    kind, op = Labels.of(columns["kind"]), Labels.of(columns["op"])
    out_bytes = Labels.of(columns["acc_dtype"]).lookup(DTYPE_BYTES, 2.0)
    sizes = ("batch", "m", "n", "rows", "cols", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "count")
    c = dict(zip(sizes, np.array([columns[name] for name in sizes], dtype=float)))  # one conversion, not eleven
    # by kind (np.where in turn, not np.select: the same values at a third of its cost on one workload's rows)
    attention = kind == "attention"
    elements = np.where(kind == "gemm", c["batch"] * c["m"] * c["n"], np.where(
        kind == "conv2d", c["m"] * c["n"], np.where(
            attention, c["batch"] * c["heads"] * c["seq_q"] * c["head_dim"], np.where(
                kind == "elementwise", c["cols"], c["rows"] * c["cols"]))))
    output = elements * out_bytes
    names = tuple(op.names.tolist())
    forward = _forward(names)[op.codes]
    training = np.asarray(phase, dtype=str) == "training"
    saved = np.bincount(wid, np.where(_saved(names)[op.codes], output * c["count"], 0.0), minlength=n)
    inputs_and_outputs = np.where(forward, 2.0 * output, 0.0)
    if n == 1:  # one workload: its largest (ufunc.at costs several times a max)
        largest = inputs_and_outputs.max(initial=0.0, keepdims=True)
    else:
        largest = np.zeros(n)
        np.maximum.at(largest, wid, inputs_and_outputs)
    kv = np.where(attention, 2.0 * c["batch"] * c["kv_heads"] * c["seq_kv"] * c["head_dim"] * out_bytes
                  * c["count"], 0.0)
    weight_width = Labels.of(dtype).lookup(DTYPE_BYTES, 2.0)
    weights = np.asarray(params, float) * weight_width
    grad, state = update_bytes(weight_width)
    out = {"weights_bytes": weights,
           "optimizer_bytes": np.where(training, np.asarray(params, float) * (grad + state), 0.0),
           "activation_bytes": np.where(training, saved, largest),
           "kv_cache_bytes": np.where(training, 0.0, np.bincount(wid, kv, minlength=n))}
    out["total_bytes"] = sum(out.values())
    return out
