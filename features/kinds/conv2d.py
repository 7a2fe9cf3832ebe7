"""Convolutions, as cuDNN runs them: implicit GEMMs (M = N*P*Q, N = C_out, K = C_in*R*S) under the gemm rule, whose
activations are read in place (`conv_in_elements`), never materialised as im2col."""

from joulecast.features.kinds import KernelKind

KIND = KernelKind(name="conv2d", order=6, sizes=("m", "n", "k", "conv_in_elements"), rule="gemm", implicit_input=True)
