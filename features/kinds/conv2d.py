"""Convolutions, as cuDNN runs them: implicit GEMMs (M = N*P*Q, N = C_out, K = C_in*R*S) under the gemm rule, whose
activations are read in place (`conv_in_elements`), never materialised as im2col; an fp32 3x3 one on CUDA cores with
Winograd's fewer multiplies (`winograd`)."""

from typing import Any, Mapping

import numpy as np

from joulecast.features.kinds import KernelKind

KIND = KernelKind(name="conv2d", order=6, sizes=("m", "n", "k", "conv_in_elements"), rule="gemm", implicit_input=True)


def winograd(k: Mapping[str, Any], on_tensor: np.ndarray) -> np.ndarray:
    """Per row, a 3x3, stride-1 convolution's forward pass or data gradient in fp32 (TF32 storage) off the tensor
    cores, which cuDNN runs as a fused Winograd kernel (`arch.WINOGRAD_MULTIPLY_REDUCTION`). A stride-1 "same"
    convolution has as many output pixels as input ones, so its K is nine times the input's channels: K x M = 9 x the
    input's elements (the data gradient's N holds the forward's K)."""
    rows = (k["kind"] == "conv2d") & ~on_tensor
    if not rows.any():  # a transformer's table (every estimate of one): nothing more to look at
        return rows
    rows &= k["dtype"].isin(("fp32", "tf32"))
    m, inputs = k["m"].astype(float), 9.0 * k["conv_in_elements"]
    forward = (k["op"] == "conv2d") & (k["k"] * m == inputs)
    data_gradient = (k["op"] == "conv2d_dgrad") & (k["n"] * m == inputs)
    return rows & (forward | data_gradient)
