"""The memory a workload needs, against hand-worked figures, and the flag where it exceeds the GPU's."""

import pandas as pd
import pytest

import joulecast
from joulecast.features.memory import GIB


def parts(model, **kw):
    est = joulecast.estimate(joulecast.workload(model, **kw), kw.pop("gpu", "h100-sxm"), estimator="physics")
    return est, est.memory_parts_gb


def test_a_decode_steps_kv_cache_is_keys_and_values_of_every_layer():
    # Llama-3-8B: 32 layers, 8 key-value heads of 128; 16 sequences of 2,048 tokens in bf16: 2 x 32 x 16 x 8 x 2048
    # x 128 x 2 bytes = 4 GiB exactly
    est, p = parts("llama-3-8b", phase="decode", batch=16, seq=2048)
    assert p["kv_cache"] == pytest.approx(4.0, rel=1e-12)
    assert p["optimizer"] == 0 and p["weights"] == pytest.approx(est.memory_gb - p["kv_cache"] - p["activation"])
    assert "exceeds-memory" not in est.flags


def test_training_holds_sixteen_bytes_a_parameter_beside_its_activations():
    _, infer = parts("gpt2", batch=1, seq=128)
    est, train = parts("gpt2", phase="training", batch=1, seq=128)
    params = train["weights"] * GIB / 2  # bf16 weights
    assert 120e6 < params < 170e6  # GPT-2 small, embeddings included
    assert train["optimizer"] * GIB == pytest.approx(params * 14)  # ZeRO: 2 + 2 + 12 bytes, less the weight's 2
    assert train["activation"] > 10 * infer["activation"] and train["kv_cache"] == 0


def test_a_workload_that_does_not_fit_is_flagged_in_estimate_and_estimate_many():
    est = joulecast.estimate(joulecast.workload("llama-3-70b", phase="training", batch=64, seq=8192), "l4")
    assert "exceeds-memory" in est.flags and est.memory_gb > 24
    # 70.55 B parameters, less the 1.05 B of the LM head, which a training step's lowering leaves out
    assert est.memory_parts_gb["weights"] == pytest.approx((70.55e9 - 1.05e9) * 2 / GIB, rel=0.001)
    frame = pd.DataFrame({"model": ["llama-3-70b", "gpt2"], "gpu": "l4", "phase": ["training", "prefill"],
                          "batch": [64, 1], "seq": [8192, 128]})
    many = joulecast.estimate_many(frame)
    assert many["flags"][0].endswith("exceeds-memory") and "exceeds-memory" not in many["flags"][1]
    assert many["memory_gb"][0] == pytest.approx(est.memory_gb, rel=1e-12)
    small = joulecast.estimate(joulecast.workload("gpt2", batch=1, seq=128), "l4")
    assert many["memory_gb"][1] == pytest.approx(small.memory_gb, rel=1e-12)


def test_a_pass_holds_its_models_weights_a_tied_lm_head_once():
    """GPT-2's, OPT's and Qwen2-1.5B's heads read the embedding's weights: a decode step (which runs the head) holds
    the weights a prefill does, the model's count (`parameter_count`: GPT-2 124.3 M, 124.4 M with its biases and
    norms), in bf16. Before, the head was counted again (GPT-2 163 M, 31 % over)."""
    from joulecast.features.lowering import parameter_count

    for model in ("gpt2", "opt-1.3b", "qwen2-1.5b"):
        _, decode = parts(model, phase="decode", batch=1, seq=128)
        _, prefill = parts(model, phase="prefill", batch=1, seq=128)
        assert decode["weights"] == prefill["weights"] == pytest.approx(parameter_count(model) * 2 / GIB, rel=1e-12)
    # an untied head (Llama-3-8B's 128,256 x 4,096) is weights of its own, which a decode step holds and a prefill,
    # running none of it, holds too (before, 7.50 B weights: about 1 GiB low); a training step's loss runs over the
    # hidden states, as the collector's does, and holds no head
    for phase in ("decode", "prefill"):
        _, held = parts("llama-3-8b", phase=phase, batch=1, seq=128)
        assert held["weights"] == pytest.approx(parameter_count("llama-3-8b") * 2 / GIB, rel=1e-12)
    _, step = parts("llama-3-8b", phase="training", batch=1, seq=128)
    assert step["weights"] == pytest.approx((parameter_count("llama-3-8b") - 128_256 * 4_096) * 2 / GIB, rel=1e-12)


@pytest.mark.parametrize("gpu, batch", [("v100-pcie-16gb", 112), ("v100-pcie-16gb", 128), ("v100-sxm2", 256)])
def test_resnet50_trains_in_fp32_at_the_batches_nvidia_runs_on_cards_of_that_memory(gpu, batch):
    """NVIDIA's ResNet-50 recipe trains in FP32 at 112 images on a 16 GB V100, 128 on a 16 GB T4 and 256 on a 32 GB V100
    (DeepLearningExamples, PyTorch/Classification/ConvNets/configs.yml): the step fits, as autograd keeps neither
    cuDNN's layout transposes nor a ReLU's output beside its input (`features.memory._NOT_SAVED_OPS`); counting every
    forward output read 20.5, 23.4 and 46.5 GiB."""
    est = joulecast.estimate(joulecast.workload("resnet-50", phase="training", batch=batch, dtype="fp32"), gpu,
                             estimator="physics")
    assert "exceeds-memory" not in est.flags and est.memory_gb < joulecast.gpu(gpu).memory_gb
    assert est.memory_parts_gb["activation"] > 0.5 * est.memory_gb  # the activations still the bulk of it


def test_a_relu_and_a_library_transpose_keep_nothing_of_their_own_in_training():
    """Their kernels' outputs add nothing to a training step's activations (a ReLU's is its input's tensor, cuDNN's
    transposes its workspace), while every other forward kernel's output counts, and inference is unchanged."""
    from joulecast.features.memory import _NOT_SAVED_OPS, need_bytes

    def need(op, phase):
        columns = {"kind": ["elementwise"], "op": [op], "acc_dtype": ["bf16"], "batch": [1], "m": [0], "n": [0],
                   "rows": [1], "cols": [1 << 20], "heads": [0], "kv_heads": [0], "seq_q": [0], "seq_kv": [0],
                   "head_dim": [0], "count": [3], "workload_id": [0]}
        return need_bytes({k: pd.Series(v).to_numpy() for k, v in columns.items()}, 1, [0], [phase], ["bf16"])

    assert set(_NOT_SAVED_OPS) == {"nchw_to_nhwc", "relu"}
    for op in _NOT_SAVED_OPS:
        assert need(op, "training")["activation_bytes"][0] == 0
        assert need(op, "inference")["activation_bytes"][0] == 2 * 2 * (1 << 20)  # input and output, live at once
    assert need("gelu", "training")["activation_bytes"][0] == 3 * 2 * (1 << 20)  # three launches' outputs kept
