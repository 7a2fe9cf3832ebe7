"""Lowering of convolutional vision models (ResNet, MobileViT) to kernel records.

Convolutions become implicit GEMMs (M = N*P*Q, N = C_out, K = C_in*R*S), as cuDNN lowers them, each after the NCHW to
NHWC transpose of its input that cuDNN launches itself (`KernelBuilder.conv2d`). Unlike the EnergAIzer traces, which
record only convolutions, activations and GEMMs, batch-norm (inference affine), residual adds and pooling are kept
here: they are real kernels with real DRAM traffic.
"""

from __future__ import annotations

from typing import Any, Mapping

from joulecast.features.builder import KernelBuilder
from joulecast.features.lower_transformers import Shape, transformer_encoder


def _conv_bn_act(b: KernelBuilder, n: int, c_in: int, c_out: int, hw: int, k: int, stride: int, act: str | None,
                 depthwise: bool = False) -> int:
    hw_out = b.conv2d(n, c_in, c_out, hw, k, stride, k // 2, depthwise=depthwise)
    b.ew("batchnorm", n * c_out * hw_out * hw_out)
    if act:
        b.ew(act, n * c_out * hw_out * hw_out)
    return hw_out


def resnet(b: KernelBuilder, c: Mapping[str, Any], s: Shape, attention: str, lm_head: bool) -> None:
    """Bottleneck ResNet (v1.5: stride on the 3x3 conv, as torchvision's resnet101 and HF's ResNet)."""
    n, hw = s.batch, 224
    derived = c.get("derived", {})
    hw = _conv_bn_act(b, n, c.get("num_channels", 3), c["embedding_size"], hw, 7, 2, "relu")
    hw = (hw + 2 - 3) // 2 + 1
    b.ew("maxpool", n * c["embedding_size"] * hw * hw)
    c_in = c["embedding_size"]
    strides = derived.get("stage_strides", [1, 2, 2, 2])
    for depth, c_out, stride in zip(c["depths"], c["hidden_sizes"], strides):
        inner = c_out // 4
        for block in range(depth):
            block_stride = stride if block == 0 else 1
            _conv_bn_act(b, n, c_in, inner, hw, 1, 1, "relu")
            hw_out = _conv_bn_act(b, n, inner, inner, hw, 3, block_stride, "relu")
            _conv_bn_act(b, n, inner, c_out, hw_out, 1, 1, None)
            if block == 0:
                _conv_bn_act(b, n, c_in, c_out, hw, 1, block_stride, None)  # projection shortcut
            b.ew("pointwise_add", n * c_out * hw_out * hw_out)
            b.ew("relu", n * c_out * hw_out * hw_out)
            c_in, hw = c_out, hw_out
    b.ew("avgpool", n * c_in * hw * hw)
    b.linear(c.get("classifier_head", {}).get("num_labels", 1000), n, c_in)


def _inverted_residual(b: KernelBuilder, n: int, c_in: int, c_out: int, hw: int, stride: int, expand: float) -> int:
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 project (+ residual when shapes allow)."""
    mid = int(round(c_in * expand))
    _conv_bn_act(b, n, c_in, mid, hw, 1, 1, "silu")
    hw_out = _conv_bn_act(b, n, mid, mid, hw, 3, stride, "silu", depthwise=True)
    _conv_bn_act(b, n, mid, c_out, hw_out, 1, 1, None)
    if stride == 1 and c_in == c_out:
        b.ew("pointwise_add", n * c_out * hw_out * hw_out)
    return hw_out


def mobilevit(b: KernelBuilder, c: Mapping[str, Any], s: Shape, attention: str, lm_head: bool) -> None:
    """MobileViT (Mehta & Rastegari, ICLR'22) following transformers' MobileViTEncoder stage structure."""
    stages = c["stage_structure_from_transformers_modeling_code"]
    n, expand, heads = s.batch, c.get("expand_ratio", 4.0), c.get("num_attention_heads", 4)
    stem = stages["conv_stem"]
    hw = _conv_bn_act(b, n, stem["in_channels"], stem["out_channels"], c.get("image_size", 256), 3, 2, "silu")
    for name in ("layer_1", "layer_2"):
        st = stages[name]
        c_in = st["in_channels"]
        for i in range(st["num_stages"]):
            hw = _inverted_residual(b, n, c_in, st["out_channels"], hw, st["stride"] if i == 0 else 1, expand)
            c_in = st["out_channels"]
    patch = c.get("patch_size", 2)
    for name in ("layer_3", "layer_4", "layer_5"):
        st = stages[name]
        c_out, hidden = st["out_channels"], st["transformer_hidden_size"]
        hw = _inverted_residual(b, n, st["in_channels"], c_out, hw, st["stride"], expand)
        _conv_bn_act(b, n, c_out, c_out, hw, 3, 1, "silu")
        b.conv2d(n, c_out, hidden, hw, 1, 1, 0)
        tokens = (hw // patch) ** 2  # unfolded: batch * patch_area sequences of (hw/patch)^2 tokens
        shape = Shape(n * patch * patch, tokens, tokens, False)
        # unfolding and folding each transpose then reshape twice: two copies of the feature map each way
        b.ew("copy", n * hidden * hw * hw, count=2)
        transformer_encoder(b, shape, hidden, st["transformer_layers"], heads, st["transformer_intermediate_size"],
                            "silu", "eager", add_positions=False)  # transformers' MobileViT has no fused attention
        b.ew("copy", n * hidden * hw * hw, count=2)
        _conv_bn_act(b, n, hidden, c_out, hw, 1, 1, "silu")
        b.ew("copy", n * 2 * c_out * hw * hw)  # torch.cat of the block's input and output
        _conv_bn_act(b, n, 2 * c_out, c_out, hw, 3, 1, "silu")  # fusion of concat(input, output)
    exp = stages["conv_1x1_exp"]
    _conv_bn_act(b, n, exp["in_channels"], exp["out_channels"], hw, 1, 1, "silu")
    b.ew("avgpool", n * exp["out_channels"] * hw * hw)
