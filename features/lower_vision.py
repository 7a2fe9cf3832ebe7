"""Lowering of convolutional vision models (ResNet, MobileViT) to kernel records.

Convolutions become implicit GEMMs (M = N*P*Q, N = C_out, K = C_in*R*S), as cuDNN lowers them, each after the NCHW to
NHWC transpose of its input that cuDNN launches itself (`KernelBuilder.conv2d`). Unlike the EnergAIzer traces, which
record only convolutions, activations and GEMMs, batch-norm (inference affine), residual adds and pooling are kept
here: they are real kernels with real DRAM traffic.
"""

from __future__ import annotations

from typing import Any, Mapping

from joulecast.data.errors import InputError, require_choice
from joulecast.data.files import kind_of
from joulecast.data.models import check_size, config_size
from joulecast.features.builder import KernelBuilder
from joulecast.features.lower_transformers import Shape, transformer_encoder

OUTPUT_STRIDES = (8, 16, 32)  # transformers' MobileViTEncoder: 8 dilates layers 4 and 5, 16 layer 5, 32 neither
SEGMENTATION = "MobileViTForSemanticSegmentation"  # config.json's architectures: the encoder under DeepLabV3's head
RESNET_BLOCKS = ("bottleneck", "basic")  # transformers' ResNetConfig.layer_types
BOTTLENECK_REDUCTION = 4  # a bottleneck's inner convs a quarter of its output's channels (ResNetBottleNeckLayer)


def _conv_bn_act(b: KernelBuilder, n: int, c_in: int, c_out: int, hw: int, k: int, stride: int, act: str | None,
                 depthwise: bool = False) -> int:
    hw_out = b.conv2d(n, c_in, c_out, hw, k, stride, k // 2, depthwise=depthwise)
    b.ew("batchnorm", n * c_out * hw_out * hw_out)
    if act:
        b.ew(act, n * c_out * hw_out * hw_out)
    return hw_out


def resnet(b: KernelBuilder, c: Mapping[str, Any], s: Shape, attention: str, lm_head: bool) -> None:
    """ResNet as transformers' ResNetModel runs it: a 7x7 stem and max pool, then stages of bottleneck blocks (v1.5:
    stride on the 3x3 conv, as torchvision's resnet101) or, with `layer_type` basic (ResNet-18/34), of two 3x3 convs;
    a block's shortcut projects where its channels or stride change; the first stage strides only with
    `downsample_in_first_stage`."""
    n, hw = s.batch, 224
    width = config_size(c, "embedding_size")
    depths, widths = c.get("depths"), c.get("hidden_sizes")
    if not depths or not widths or len(depths) != len(widths):
        raise InputError("config.depths", "and config.hidden_sizes must list a block count and a width for each stage, "
                                          f"as many of each; got {kind_of(depths)} and {kind_of(widths)}")
    layer_type = c.get("layer_type") or "bottleneck"
    require_choice(layer_type, RESNET_BLOCKS, "config.layer_type")
    bottleneck = layer_type == "bottleneck"
    hw = _conv_bn_act(b, n, c.get("num_channels") or 3, width, hw, 7, 2, "relu")
    hw = (hw + 2 - 3) // 2 + 1
    b.ew("maxpool", n * width * hw * hw)
    c_in = width
    strides = [2 if c.get("downsample_in_first_stage") else 1] + [2] * (len(depths) - 1)
    for depth, c_out, stride in zip(depths, widths, strides):
        inner = max(1, c_out // BOTTLENECK_REDUCTION)
        for block in range(depth):
            block_stride = stride if block == 0 else 1
            if bottleneck:
                _conv_bn_act(b, n, c_in, inner, hw, 1, 1, "relu")
                hw_out = _conv_bn_act(b, n, inner, inner, hw, 3, block_stride, "relu")
                _conv_bn_act(b, n, inner, c_out, hw_out, 1, 1, None)
            else:
                hw_out = _conv_bn_act(b, n, c_in, c_out, hw, 3, block_stride, "relu")
                _conv_bn_act(b, n, c_out, c_out, hw_out, 3, 1, None)
            if c_in != c_out or block_stride != 1:
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
    stages = mobilevit_stages(c)
    n, expand, heads = s.batch, c.get("expand_ratio") or 4.0, c.get("num_attention_heads") or 4
    stem = stages["conv_stem"]
    hw = _conv_bn_act(b, n, stem["in_channels"], stem["out_channels"], c.get("image_size") or 256, 3, 2, "silu")
    for name in ("layer_1", "layer_2"):
        st = stages[name]
        c_in = st["in_channels"]
        for i in range(st["num_stages"]):
            hw = _inverted_residual(b, n, c_in, st["out_channels"], hw, st["stride"] if i == 0 else 1, expand)
            c_in = st["out_channels"]
    patch = c.get("patch_size") or 2
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
    archs = c.get("architectures")
    if SEGMENTATION in (archs if isinstance(archs, list) else [archs]):  # the encoder's last map, into DeepLabV3
        _deeplab_v3(b, c, n, stages["conv_1x1_exp"]["in_channels"], hw)
        return
    exp = stages["conv_1x1_exp"]
    _conv_bn_act(b, n, exp["in_channels"], exp["out_channels"], hw, 1, 1, "silu")
    b.ew("avgpool", n * exp["out_channels"] * hw * hw)


def _deeplab_v3(b: KernelBuilder, c: Mapping[str, Any], n: int, c_in: int, hw: int) -> None:
    """transformers' MobileViTDeepLabV3 on the encoder's last map (`c_in` channels, no 1x1 expansion): ASPP's five
    branches (a 1x1 conv, three 3x3 convs dilated by `atrous_rates`, which keep the map's size and a 3x3 conv's work,
    and the map pooled to one pixel, 1x1-convolved and upsampled back), concatenated and projected by a 1x1 conv, then
    a 1x1 conv to the labels (logits at the map's size; the upsampling to the image is the loss's)."""
    # where a config leaves them out, transformers' MobileViTConfig defaults: aspp_out_channels 256, atrous_rates
    # [6, 12, 18]
    width = config_size(c, "aspp_out_channels") if c.get("aspp_out_channels") is not None else 256
    rates = c.get("atrous_rates", [6, 12, 18])
    if not isinstance(rates, list) or len(rates) != 3:
        raise InputError("config.atrous_rates", f"must list 3 dilation rates (ASPP's), got {kind_of(rates)}")
    labels = c.get("id2label")
    labels = len(labels) if isinstance(labels, Mapping) and labels else (
        config_size(c, "num_labels") if c.get("num_labels") is not None else 2)  # PretrainedConfig's default: 2
    _conv_bn_act(b, n, c_in, width, hw, 1, 1, "relu")
    for rate in rates:
        check_size(rate, "config.atrous_rates")  # each a whole number
        _conv_bn_act(b, n, c_in, width, hw, 3, 1, "relu")
    b.ew("avgpool", n * c_in * hw * hw)
    _conv_bn_act(b, n, c_in, width, 1, 1, 1, "relu")
    b.ew("fill", n * width * hw * hw)  # bilinear from one pixel: each output that pixel, writes alone
    b.ew("copy", n * 5 * width * hw * hw)  # torch.cat of the five branches
    _conv_bn_act(b, n, 5 * width, width, hw, 1, 1, "relu")
    b.conv2d(n, width, labels, hw, 1, 1, 0)


def mobilevit_stages(c: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A MobileViT's stages from its config, as transformers' MobileViTEncoder builds them: its depths and strides are
    in the code, not in config.json (two MobileNetV2 layers of 1 and 3 blocks, three MobileViT blocks of 2, 4 and 3
    transformer layers, every stage but the first halving the map), its widths `neck_hidden_sizes` (7: the stem's,
    each stage's, the last 1x1 conv's) and `hidden_sizes` (3: each MobileViT block's transformer, its MLP
    `mlp_ratio` times wider). The catalog's MobileViT-small records the same structure beside its config."""
    neck, hidden = c.get("neck_hidden_sizes"), c.get("hidden_sizes")
    if not isinstance(neck, list) or len(neck) != 7:
        raise InputError("config.neck_hidden_sizes", f"must list 7 widths (stem, five stages, last conv), got "
                                                     f"{kind_of(neck)}")
    if not isinstance(hidden, list) or len(hidden) != 3:
        raise InputError("config.hidden_sizes", f"must list 3 widths (the MobileViT blocks'), got {kind_of(hidden)}")
    output_stride = c.get("output_stride") or 32
    if isinstance(output_stride, bool) or output_stride not in OUTPUT_STRIDES:
        raise InputError("config.output_stride", f"must be 8, 16 or 32, got {output_stride!r}")
    # below 32, layers 5 (and 4) keep the map's size: their first block's depthwise conv dilated, not strided
    dilated = {"layer_4": output_stride == 8, "layer_5": output_stride in (8, 16)}
    ratio = c.get("mlp_ratio") or 2.0
    stages: dict[str, dict[str, Any]] = {
        "conv_stem": dict(in_channels=c.get("num_channels") or 3, out_channels=neck[0], kernel_size=3, stride=2)}
    for i, blocks in ((1, 1), (2, 3)):
        stages[f"layer_{i}"] = dict(num_stages=blocks, stride=1 if i == 1 else 2, in_channels=neck[i - 1],
                                    out_channels=neck[i])
    for i, layers in ((3, 2), (4, 4), (5, 3)):
        stages[f"layer_{i}"] = dict(stride=1 if dilated.get(f"layer_{i}") else 2, in_channels=neck[i - 1],
                                    out_channels=neck[i],
                                    transformer_hidden_size=hidden[i - 3], transformer_layers=layers,
                                    transformer_intermediate_size=int(hidden[i - 3] * ratio))
    stages["conv_1x1_exp"] = dict(in_channels=neck[5], out_channels=neck[6], kernel_size=1)
    return stages
