import json
import re

import numpy as np
import pandas as pd
import pytest

import joulecast
from joulecast.data.errors import InputError
from joulecast.data.fusions import FUSIONS, check_fusions
from joulecast.data.kernels import KERNEL_COLUMNS
from joulecast.features import arch
from joulecast.features.kinds.attention import MEMORY_EFFICIENT_RATE
from joulecast.features.kernel_table import kernel_columns
from joulecast.features.lowering import lower, resolve_model
from joulecast.features.physics import analyze

TRACED = {"gpt2model_gpt2": "gpt2", "bertmodel_large": "bert-large", "optmodel_opt-1p3b": "opt-1.3b",
          "qwen2model_qwen2-1p5b": "qwen2-1.5b"}
_NAME = re.compile(r"([\w-]+?)_p(\w+?)_b(\d+)_s(\d+)_mode(\w+)\.json")
KEYS = [c for c in KERNEL_COLUMNS if c != "count"]


def _as_multiset(table):
    return table.set_index(KEYS)["count"].sort_index()


def test_eager_lowering_reproduces_every_traced_transformer(energaizer):
    """GEMM shapes and every other kernel of the lowering equal the EnergAIzer traces (85 workloads, 4 models).

    The one deliberate difference: the lowering adds the embedding gathers, which the tracer does not record. The
    reader adds GPT-2's causal-mask `torch.where`, also unrecorded, and names the scores' broadcast ops (the mask's
    add, GPT-2's division by a 0-dim tensor) for what they are, as the lowering does."""
    checked = 0
    for path in sorted((energaizer / "workloads").glob("*/*.json")):
        match = _NAME.match(path.name)
        if not match or match.group(1) not in TRACED:
            continue
        traced = joulecast.workload_from_kernels(path).kernels
        lowered = joulecast.workload(TRACED[match.group(1)], batch=int(match.group(3)), seq=int(match.group(4)),
                                     attention="eager").kernels
        assert set(lowered.loc[lowered.kind == "embedding", "op"]) == {"lookup"}
        lowered = lowered[lowered.kind != "embedding"]
        if match.group(1) == "gpt2model_gpt2":  # the causal-mask torch.where, as the reader adds it
            assert lowered.loc[lowered.op == "where", "count"].sum() == traced.loc[traced.op == "where", "count"].sum() == 12
        assert _as_multiset(traced).equals(_as_multiset(lowered)), path.name
        checked += 1
    assert checked == 85


def test_traced_gemm_shapes_by_hand():
    """GPT-2 at batch 2, 512 tokens: Conv1D GEMMs have M = tokens; attention GEMMs are batched over 2 x 12 heads."""
    k = joulecast.workload("gpt2", batch=2, seq=512, attention="eager").kernels
    gemms = {(r.batch, r.m, r.n, r.k): r.count for r in k[k.kind == "gemm"].itertuples()}
    assert gemms == {(1, 1024, 2304, 768): 12, (24, 512, 512, 64): 12, (24, 512, 64, 512): 12,
                     (1, 1024, 768, 768): 12, (1, 1024, 3072, 768): 12, (1, 1024, 768, 3072): 12}


def test_grouped_query_attention_shapes():
    k = joulecast.workload("llama-3-70b", batch=1, seq=128, attention="flash").kernels
    att = k[k.kind == "attention"].iloc[0]
    assert (att.heads, att.kv_heads, att.head_dim, att.causal, att["count"]) == (64, 8, 128, True, 80)
    linear = k[(k.kind == "gemm") & (k.op == "linear") & (k.k == 8192)]
    assert {(r.m, r.count) for r in linear.itertuples()} == {(8192, 160), (1024, 160), (28672, 160)}  # q and o; k, v; gate, up


def test_decode_step_has_one_query_and_the_lm_head():
    k = joulecast.workload("llama-3-8b", phase="decode", batch=4, seq=1000).kernels
    att = k[k.kind == "attention"].iloc[0]
    assert (att.seq_q, att.seq_kv, att.batch) == (1, 1000, 4)
    assert ((k.kind == "gemm") & (k.m == 128256) & (k.n == 4)).sum() == 1


def test_mixtral_routes_each_token_to_two_of_eight_experts_in_grouped_gemms():
    """Mixtral-8x7B (shared/reference/models): 46.7 B weights held, every expert's; a decode step of one token runs
    its two experts, one of many tokens all eight; the expert GEMMs' work is the routed tokens' alone."""
    from joulecast.features.lower_transformers import active_experts
    from joulecast.features.lowering import parameter_count

    assert parameter_count("mixtral-8x7b") == pytest.approx(46.70e9, rel=1e-3)
    assert (active_experts(1, 8, 2), active_experts(2, 8, 2), active_experts(64, 8, 2)) == (2, 4, 8)
    assert active_experts(8, 128, 8) == 52  # 128 x (1 - (120/128)^8) = 51.6: each token's draws apart
    for batch, active in ((1, 2), (32, 8)):
        k = joulecast.workload("mixtral-8x7b", phase="decode", batch=batch, seq=256).kernels
        experts = k[k.op == "experts"]
        assert set(experts.batch) == {active} and set(experts["count"]) == {32}  # one grouped GEMM a layer each
        assert {(r.m, r.k) for r in experts.itertuples()} == {(2 * 14336, 4096), (4096, 14336)}  # gate+up, down
        # each active expert's share of the batch's 2 routed slots a token
        assert set(experts.n) == {-(-2 * batch // active)}
        router = k[(k.op == "linear") & (k.m == 8)]
        assert int(router["count"].sum()) == 32
    dense = joulecast.workload("mistral-7b", phase="decode", batch=1, seq=256).kernels
    assert not (dense.op == "experts").any()
    with pytest.raises(InputError, match="num_experts_per_tok: must be at most the experts held \\(8\\), got 9"):
        lower({**resolve_model("mixtral-8x7b")[0], "num_experts_per_tok": 9}, phase="decode", batch=1, seq=8,
              dtype="bf16")


def test_qwen3_normalises_queries_and_keys_and_its_mixture_routes_to_8_of_128_narrow_experts():
    """Qwen3 (configs as copied in the catalog's source): each head's queries and keys RMS-normalised before the
    rotary embedding (HF's five eager kernels each, or one with the norm fusion); Qwen3-30B-A3B's experts are
    `moe_intermediate_size` wide, 8 of 128 a token, its weights the model card's 30.5 B held and 3.3 B a token."""
    from joulecast.features.lowering import active_parameter_count, parameter_count
    from joulecast.features.train_step import shard_config

    for model, held, active in (("qwen3-8b", 8.19e9, 8.19e9), ("qwen3-32b", 32.76e9, 32.76e9),
                                ("qwen3-30b-a3b", 30.53e9, 3.353e9)):
        assert parameter_count(model) == pytest.approx(held, rel=1e-3)
        assert active_parameter_count(model) == pytest.approx(active, rel=1e-3)
    qwen3 = joulecast.workload("qwen3-8b", phase="decode", batch=4, seq=256, fusions=("norm",)).kernels
    qwen2 = joulecast.workload("qwen2-7b", phase="decode", batch=4, seq=256, fusions=("norm",)).kernels
    norms = lambda k: {(r.rows, r.cols): r.count for r in k[k.op == "rmsnorm"].itertuples()}  # noqa: E731
    assert norms(qwen3) == {(4, 4096): 2 * 36 + 1, (4 * 32, 128): 36, (4 * 8, 128): 36}
    assert all(cols != 128 for _, cols in norms(qwen2))  # no q and k norms before Qwen3
    k = joulecast.workload("qwen3-30b-a3b", phase="decode", batch=8, seq=256).kernels
    experts = k[k.op == "experts"]
    assert {(r.batch, r.m, r.n, r.k) for r in experts.itertuples()} == {(52, 2 * 768, 2, 2048), (52, 2048, 2, 768)}
    shard = shard_config(resolve_model("qwen3-30b-a3b")[0], tp=4)
    assert (shard["moe_intermediate_size"], shard["num_attention_heads"], shard["num_key_value_heads"]) == (192, 8, 1)
    with pytest.raises(InputError, match="^config.mlp_only_layers: dense layers among a mixture of experts'"):
        lower({**resolve_model("qwen3-30b-a3b")[0], "mlp_only_layers": [0]}, phase="decode", batch=1, seq=8,
              dtype="bf16")


def test_llama_3_1_405b_holds_its_weights_and_fits_eight_h100s_only_in_fp8():
    """Llama-3.1-405B (torchtune's builder, the catalog's source): 405.85 B weights (ML.ENERGY v3 rounds them to
    405.0), 16 query heads and one key-value head a GPU over 8; served on 8 H100s (80 GiB) its weights fit in fp8
    (ML.ENERGY v3 ran it so) and not in bf16, where no tensor parallelism up to 8 would do."""
    from joulecast.estimator.serving import serve
    from joulecast.features.lowering import parameter_count
    from joulecast.features.train_step import shard_config

    assert parameter_count("llama-3.1-405b") == pytest.approx(405.85e9, rel=1e-4)
    shard = shard_config(resolve_model("llama-3.1-405b")[0], tp=8)
    assert (shard["num_attention_heads"], shard["num_key_value_heads"], shard["intermediate_size"]) == (16, 1, 6656)
    fp8, bf16 = (serve("llama-3.1-405b", "h100-sxm", input_len=192, output_len=370, concurrency=64, tp=8, dtype=dt,
                       engine="vllm-0.11.1", estimator="physics") for dt in ("fp8", "bf16"))
    assert fp8.memory_gb < 80 < bf16.memory_gb
    assert "exceeds-memory" not in fp8.flags and "exceeds-memory" in bf16.flags and bf16.fits_tp is None


@pytest.mark.parametrize("asked, entry, same_as", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", "llama-3-8b"),
    ("Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b", "llama-3-70b"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b", "llama-3-70b"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b", "llama-3-8b"),
    ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b", "llama-2-7b"),
])
def test_instruct_and_llama_3_1_names_lower_as_the_shapes_they_share(asked, entry, same_as, caplog, monkeypatch):
    """A chat or Instruct model is its base's shapes, and Llama 3.1 and 3.3 are Llama 3's with 131,072 positions:
    the same kernels, and a 32,768-token context past Llama 3's 8,192 warns only there."""
    from joulecast.data.models import model_entry

    assert model_entry(asked)["name"] == entry
    records = [lower(resolve_model(m)[0], phase="prefill", batch=1, seq=256, dtype="bf16") for m in (asked, same_as)]
    assert records[0] == records[1] and len(records[0][0]) > 0
    if entry != same_as:
        assert resolve_model(entry)[0]["max_position_embeddings"] == 131072
        monkeypatch.setattr("joulecast.features.lowering._WARNED", set())  # each model warns once a process
        with caplog.at_level("WARNING"):
            lower(resolve_model(entry)[0], phase="decode", batch=1, seq=32768, dtype="bf16")
            assert "trained context" not in caplog.text
            lower(resolve_model(same_as)[0], phase="decode", batch=1, seq=32768, dtype="bf16")
            assert "exceeds this model's 8192 trained context" in caplog.text


@pytest.mark.parametrize("name, card", [("llama-3.2-1b", 1.23e9), ("llama-3.2-3b", 3.21e9), ("qwen2.5-7b", 7.61e9),
                                        ("qwen2.5-14b", 14.7e9), ("qwen2.5-72b", 72.7e9)])
def test_llama_3_2_and_qwen2_5_hold_the_weights_their_model_cards_state(name, card):
    """torchtune's builders give the shapes; the weights they make come to the model cards' counts (Llama 3.2's
    1.23 and 3.21 B with tied embeddings, Qwen2.5's 7.61, 14.7 and 72.7 B), each card rounding to its last digit."""
    from joulecast.features.lowering import parameter_count

    assert parameter_count(name) == pytest.approx(card, rel=0.01)


def test_an_8_bit_gemms_input_is_quantized_by_a_kernel_of_its_own():
    """fp8 weights: each linear layer's bf16 input quantized to fp8 first (vLLM's scaled_fp8_quant), as many launches
    as the layers and as many elements as their inputs; a mixture's tokens once before its first grouped GEMM and each
    slot's SiLU-and-mul output before its second (fused_experts); nothing in bf16, nor in a training step, whose
    stack casts inside the kernels before its GEMMs. On an H100 the kernel takes what vLLM's benchmark adds to a
    16-token scaled GEMM beside the GEMM alone (+3.0-4.1 us, `features.builder`)."""
    packed = ("packed_projections",)  # as serving engines run them
    fp8 = joulecast.workload("llama-3-8b", phase="decode", batch=16, seq=512, dtype="fp8", fusions=packed).kernels
    bf16 = joulecast.workload("llama-3-8b", phase="decode", batch=16, seq=512, fusions=packed).kernels
    linears, quant = fp8[(fp8.op == "linear") & (fp8.dtype == "fp8")], fp8[fp8.op == "quantize_fp8"]
    assert int(quant["count"].sum()) == int(linears["count"].sum()) == 4 * 32 + 1  # qkv, o, gate-up, down; LM head
    assert (quant.cols * quant["count"]).sum() == (linears.k * linears.n * linears["count"]).sum()
    assert set(quant.dtype) == {"bf16"} and set(quant.acc_dtype) == {"fp8"}
    assert not bf16.op.str.startswith("quantize").any()
    training = joulecast.workload("llama-3-8b", phase="training", batch=1, seq=128, dtype="fp8").kernels
    forward, _ = lower(resolve_model("llama-3-8b")[0], phase="prefill", batch=1, seq=128, dtype="fp8", training=True)
    assert not training.op.str.startswith("quantize").any() and "quantize_fp8" not in {r["op"] for r in forward}
    assert len(fp8) == len(bf16) + len(quant)
    moe = joulecast.workload("qwen3-30b-a3b", phase="decode", batch=8, seq=256, dtype="fp8").kernels
    moe_quant, moe_linears = moe[moe.op == "quantize_fp8"], moe[(moe.op == "linear") & (moe.dtype == "fp8")]
    assert int(moe_quant["count"].sum()) == int(moe_linears["count"].sum()) + 2 * 48  # two grouped GEMMs a layer
    launches = lambda cols: int(moe_quant.loc[moe_quant.cols == cols, "count"].sum())  # noqa: E731
    assert launches(8 * 8 * 768) == 48  # the 8 tokens' 8 slots each, SiLU-and-mul's outputs
    assert launches(8 * 2048) == int(moe_linears.loc[moe_linears.k == 2048, "count"].sum()) + 48  # and the tokens
    one = quant[quant.cols == 16 * 4096].head(1).to_dict("records")
    h100 = analyze(kernel_columns(one), joulecast.gpu("h100-sxm"))[0]
    assert 2.5e-6 <= float(h100.time_s.iloc[0]) <= 4.1e-6


def test_expert_parallelism_holds_a_share_of_the_experts_whole_and_waits_for_the_busiest_gpu():
    """vLLM's --enable-expert-parallel over 4 GPUs: each holds 2 of Mixtral's 8 experts at their whole width (a
    quarter of the expert weights, as splitting each expert's width 4 ways gives), runs the router over all 8 and its
    grouped GEMMs over its own experts' slots; a step waits for the busiest GPU, whose expected count of active
    experts within 5 % of a simulation of the router's uniform draws (each GPU's experts taken as independent draws)."""
    import numpy as np

    from joulecast.features.lower_transformers import _expected_most, active_experts
    from joulecast.features.train_step import shard_config

    mixtral = resolve_model("mixtral-8x7b")[0]
    ep, tp = shard_config(mixtral, tp=4, expert_parallel=True), shard_config(mixtral, tp=4)
    assert (ep["expert_parallel_size"], ep["intermediate_size"], ep["num_attention_heads"]) == (4, 14336, 8)
    assert (tp["intermediate_size"], "expert_parallel_size" in tp) == (3584, False)
    by_ep, params_ep = lower(ep, phase="decode", batch=64, seq=256, dtype="bf16")
    by_tp, params_tp = lower(tp, phase="decode", batch=64, seq=256, dtype="bf16")
    assert params_ep == params_tp  # the same weights a GPU, split another way
    experts = [r for r in by_ep if r["op"] == "experts"]
    # 64 tokens x 2 slots over 4 GPUs: 32 slots a GPU over its 2 experts, each all of 14,336 wide
    assert {(r["batch"], r["m"], r["n"], r["k"]) for r in experts} == {(2, 2 * 14336, 16, 4096), (2, 4096, 16, 14336)}
    assert [r["m"] for r in by_ep if r["op"] == "linear" and r["m"] == 8]  # the router: every expert's logit
    # one token: its 2 experts on one GPU or two; the busiest runs 1 or 2 (1.25 expected)
    assert active_experts(1, 8, 2, shards=4) == 1 and active_experts(1, 8, 2) == 2
    rng = np.random.default_rng(0)
    for held, routed, shards, tokens in ((8, 2, 4, 3), (128, 8, 2, 8), (128, 8, 8, 4)):
        hits = np.zeros((4000, held), bool)
        for _ in range(tokens):
            picks = np.argsort(rng.random((4000, held)), axis=1)[:, :routed]
            np.put_along_axis(hits, picks, True, axis=1)
        simulated = hits.reshape(4000, shards, -1).sum(axis=2).max(axis=1).mean()
        chance = 1 - (1 - routed / held) ** tokens
        assert _expected_most(-(-held // shards), np.array([chance]), shards)[0] == pytest.approx(simulated, rel=0.05)
    with pytest.raises(InputError, match="^expert_parallel: splits a mixture of experts' experts over the GPUs; "
                                         "this model is dense"):
        shard_config(resolve_model("llama-3-8b")[0], tp=2, expert_parallel=True)


def test_training_adds_backward_and_optimizer():
    fwd = joulecast.workload("gpt2", phase="prefill", batch=2, seq=128).kernels
    train = joulecast.workload("gpt2", phase="training", batch=2, seq=128).kernels
    gemm_launches = lambda t: int(t.loc[t.kind == "gemm", "count"].sum())
    assert gemm_launches(train) == 3 * gemm_launches(fwd)
    adamw = train[train.op == "adamw"].iloc[0]
    assert 120e6 < adamw.cols < 130e6  # GPT-2 small has 124M parameters (with tied wte)



def test_a_streaming_ops_backward_launches_what_autograd_launches_for_it():
    """BERT's eager attention in training: the mask added to the scores has no backward kernel (the mask needs no
    gradient), the softmax and GELU one each reading the gradient and a saved tensor, a residual add one (the
    branches' gradients summed where the stream forks), a layer norm the default two; the same records in both
    training lowerings (`lowering.training_step` and `train_step.micro_step`)."""
    from joulecast.features import train_step
    from joulecast.features.kinds import streaming

    config = resolve_model("bert-base")[0]
    forward, _ = lower(config, phase="prefill", batch=2, seq=128, dtype="bf16", attention="eager", lm_head=False)
    train = joulecast.workload("bert-base", phase="training", batch=2, seq=128, attention="eager").kernels
    micro = train_step.micro_step(forward, 2 * 128)
    for steps in (train.to_dict("records"), micro):
        launches = lambda op: sum(int(r["count"]) for r in steps if r["op"] == op)  # noqa: E731
        assert launches("mask_add") == 12 and launches("mask_add_bwd") == 0
        for op in ("softmax", "gelu", "pointwise_add", "copy"):
            assert launches(op + "_bwd") == launches(op) > 0
        assert launches("layernorm_bwd") == streaming.BACKWARD_DEFAULT_LAUNCHES * launches("layernorm") > 0
    reads, writes = streaming._op_table(("softmax_bwd", "layernorm_bwd", "tanh", "tanh_bwd"))[:, :2].T
    assert (reads.tolist(), writes.tolist()) == ([2, 2, 1, 2], [1, 1, 1, 1])  # the gradient read beside its input
    transcendental = streaming._op_table(("tanh", "tanh_bwd"))[:, 3]
    assert transcendental[0] > 0 and transcendental[1] == 0  # 1 - y^2: none of tanh's own arithmetic

def test_fused_attentions_backward_does_two_and_a_half_times_its_forwards_flops():
    """FlashAttention-2's backward: five matmuls against the forward's two (Dao 2023, section 3.2)."""
    from joulecast.data.gpus import gpu

    kernels = joulecast.workload("llama-3-8b", phase="training", batch=1, seq=512).kernels
    rows, _ = analyze(kernels, gpu("h200"))
    flops = {op: float((rows.loc[kernels.op == op, "flops"] * kernels.loc[kernels.op == op, "count"]).sum())
             for op in ("flash", "flash_bwd")}
    assert flops["flash"] > 0 and flops["flash_bwd"] == pytest.approx(2.5 * flops["flash"], rel=1e-12)


def test_vision_models_lower_without_sequence():
    w = joulecast.workload("resnet-101", batch=8)
    assert w.phase == "inference" and w.seq is None
    convs = w.kernels[w.kernels.kind == "conv2d"]
    assert int(convs["count"].sum()) == 104  # 1 stem + 33 bottlenecks x 3 + 4 projections
    stem = convs.iloc[0]
    assert (stem.m, stem.n, stem.k) == (8 * 112 * 112, 64, 3 * 7 * 7)


def test_nchw_convolutions_transpose_their_input_for_cudnn_and_depthwise_ones_do_not():
    k = joulecast.workload("resnet-101", batch=8).kernels
    transposes = k[k.op == "nchw_to_nhwc"]
    assert int(transposes["count"].sum()) == int(k.loc[k.kind == "conv2d", "count"].sum()) == 104
    assert transposes.iloc[0].cols == 8 * 3 * 224 * 224  # the stem's input image, before its first convolution
    m = joulecast.workload("mobilevit-small", batch=8).kernels
    dense = int(m.loc[(m.kind == "conv2d") & (m.op == "conv2d"), "count"].sum())
    assert (m.op == "depthwise").any() and int(m.loc[m.op == "nchw_to_nhwc", "count"].sum()) == dense


@pytest.mark.parametrize("model", ["resnet-50", "mobilevit-small", "vit-large"])
def test_channels_last_drops_every_layout_transpose_and_nothing_else(model):
    """`channels_last` (NHWC activations, as cuDNN's tensor-core kernels read them): no transpose before a convolution
    nor in its backward; every other kernel of the pass and of the training step as it was."""
    for phase in ("inference", "training"):
        plain = joulecast.workload(model, phase=phase, batch=8).kernels
        nhwc = joulecast.workload(model, phase=phase, batch=8, fusions=["channels_last"]).kernels
        transposes = plain["op"].isin(arch.LAYOUT_TRANSPOSE_OPS)
        assert transposes.any() and not nhwc["op"].isin(arch.LAYOUT_TRANSPOSE_OPS).any()
        kept = plain[~transposes].reset_index(drop=True)
        pd.testing.assert_frame_equal(kept, nhwc.reset_index(drop=True), check_dtype=False)


def test_channels_last_is_refused_where_a_model_has_no_convolution():
    from joulecast.features.lowering import ignored_fusions

    fields = dict(model="gpt2", phase="training", batch=4, seq=128, fusions=["channels_last"])
    assert ignored_fusions(joulecast.workload(**fields), **fields) == (
        "['channels_last'] changes none of gpt2's kernels in training; leave it out")
    with pytest.raises(joulecast.InputError, match="^fusions: 'norm' changes none of resnet-50's kernels in training"):
        joulecast.train_run("resnet-50", "a10", global_batch=8, steps=1, fusions="norm", estimator="physics")
    run = joulecast.train_run("resnet-50", "a10", global_batch=8, steps=1, fusions="channels_last",
                              estimator="physics")
    bare = joulecast.train_run("resnet-50", "a10", global_batch=8, steps=1, estimator="physics")
    assert run.fusions == ("channels_last",) and bare.fusions == () and run.time_s < bare.time_s


def test_fp32_convolutions_use_tf32_tensor_cores_and_matmuls_do_not():
    """PyTorch defaults: torch.backends.cudnn.allow_tf32 is True, torch.backends.cuda.matmul.allow_tf32 False."""
    k = joulecast.workload("vit-large", batch=8, dtype="fp32").kernels
    conv, gemm = k[k.kind == "conv2d"].iloc[0], k[k.kind == "gemm"].iloc[0]
    assert (conv["dtype"], conv.tensor_core) == ("tf32", True) and (gemm["dtype"], gemm.tensor_core) == ("fp32", False)


def test_mobilevit_attention_is_eager_and_folding_copies():
    """transformers' MobileViT has no fused attention: batched GEMMs and softmax whatever `attention` says."""
    k = joulecast.workload("mobilevit-small", batch=8, attention="flash").kernels
    assert not (k.kind == "attention").any() and int(k.loc[k.op == "bmm", "count"].sum()) == 2 * 9  # 2 + 4 + 3 layers
    # per transformer stage: unfold 2, fold 2, concat 1; per layer: 4 attention layout copies
    assert int(k.loc[k.op == "copy", "count"].sum()) == 3 * 5 + 9 * 4


def test_fused_attention_merges_heads_with_one_copy():
    flash = joulecast.workload("gpt2", batch=2, seq=256).kernels
    assert int(flash.loc[flash.op == "copy", "count"].sum()) == 12
    assert flash.loc[flash.op == "copy", "cols"].item() == 2 * 256 * 768


def test_masked_attention_is_one_fused_kernel_over_every_key_block():
    """SDPA given an explicit mask runs PyTorch's memory-efficient kernel: the same one fused kernel a layer, told no
    causality (the mask carries it), so physics counts every key block where FlashAttention skips the hidden half;
    the other kernels are FlashAttention's workload's. A grouped decode's heads are not packed as FA2 packs them."""
    def kernels(attention, phase="prefill"):
        k = joulecast.workload("llama-2-7b", phase=phase, batch=1, seq=2048, attention=attention).kernels
        return k[k.kind == "attention"], k[k.kind != "attention"]
    (flash, rest), (masked, masked_rest) = kernels("flash"), kernels("masked")
    assert list(masked.op.unique()) == ["masked"] and not masked.causal.any() and flash.causal.all()
    assert int(masked["count"].sum()) == int(flash["count"].sum()) == 32
    assert _as_multiset(masked_rest).equals(_as_multiset(rest))
    gpu = joulecast.gpu("a100-sxm4-40gb")
    def physics(k, **kw):
        return analyze(kernel_columns(k[list(KERNEL_COLUMNS)].to_dict("records")), gpu, **kw)[0].iloc[0]
    per_kernel = {name: physics(k, sm_clock_mhz=900) for name, k in
                  (("flash", flash), ("masked", masked))}
    # causal FlashAttention computes (2,048 - 2,047 / 2) / 2,048 of the scores
    assert per_kernel["masked"].flops / per_kernel["flash"].flops == pytest.approx(2048 / (2048 - 2047 / 2))
    # at the memory-efficient kernel's share of FlashAttention-2's rate, in less than twice the time that leaves:
    # its CTAs run all their key blocks, a causal one's prologue weighs on about half
    flops_ratio = 2048 / (2048 - 2047 / 2)
    at_flash_rate = per_kernel["masked"].time_s * MEMORY_EFFICIENT_RATE
    assert 1.5 < at_flash_rate / per_kernel["flash"].time_s < flops_ratio
    grouped = joulecast.workload("mistral-7b", phase="decode", batch=16, seq=2048, attention="masked").kernels
    flash_grouped = joulecast.workload("mistral-7b", phase="decode", batch=16, seq=2048).kernels
    tiles = {name: physics(k[k.kind == "attention"]).tiles
             for name, k in (("flash", flash_grouped), ("masked", grouped))}
    assert tiles["masked"] == 4 * tiles["flash"]  # a CTA row per query head, not per key-value head


def test_config_file_and_mapping(tmp_path):
    cfg = json.loads((joulecast.data.models.MODEL_DIR / "qwen2-1.5b.json").read_text())["config"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    from_file = joulecast.workload(str(path), batch=2, seq=64)
    from_catalog = joulecast.workload("qwen2-1.5b", batch=2, seq=64)
    assert from_file.kernel_hash == from_catalog.kernel_hash and from_file.source == "config"


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="gpt2", batch=-1), "batch: must be an integer from 1 to 16,777,216, got -1"),
    (dict(model="gpt2", batch=True), "batch: must be an integer from 1"),
    (dict(model="gpt2", batch=10**30), "batch: must be an integer from 1 to 16,777,216, got 10000000000"),
    (dict(model="gpt2", batch=2.5), "batch: must be an integer from 1"),
    (dict(model="gpt2", seq=0), "seq: must be an integer from 1 to 16,777,216, got 0"),
    (dict(model="gpt2", batch=2**20, seq=2**20), "batch: batch x seq = 1,099,511,627,776 tokens a pass; at most"),
    (dict(model="gpt2", dtype="fp4"), "dtype: unknown 'fp4'"),
    (dict(model="bert-large", phase="decode"), "phase: 'decode' is not available for a bert model"),
    (dict(model="gpt2", attention="paged"), "attention: unknown 'paged'"),
    (dict(model="gpt-5"), "model: unknown 'gpt-5'"),
    (dict(model=5), r"model: a catalog model name, a config.json path or a config mapping, got a number \(5\)"),
    (dict(model={"model_type": "mamba"}), "config.model_type: 'mamba' is not supported"),
    (dict(model={"model_type": "llama", "hidden_size": 64}), "config.num_hidden_layers: missing"),
])
def test_bad_workload_inputs(kwargs, match):
    with pytest.raises(InputError, match=match):
        joulecast.workload(**kwargs)


def test_a_job_given_a_workload_for_its_model_says_to_give_the_model():
    """A job lowers its own passes (before: "model: unknown \"Workload(name='gpt2/prefill/...', ...)\"")."""
    with pytest.raises(InputError, match=r"model: .* got a Workload \(give its model, e.g. 'gpt2'\)$"):
        joulecast.generate(joulecast.workload("gpt2"), "a10", input_len=8, output_len=2)


def _ops(records):
    """(kind, op) -> launches, over records."""
    out = {}
    for r in records:
        out[r["kind"], r["op"]] = out.get((r["kind"], r["op"]), 0) + r["count"]
    return out


@pytest.mark.parametrize("model", ["bert-large", "gpt2", "llama-3-8b"])
def test_each_fusion_removes_or_merges_the_kernels_its_rule_names(model):
    config = resolve_model(model)[0]
    kw = dict(phase="prefill", batch=2, seq=128, dtype="bf16")
    eager, eager_params = lower(config, **kw)
    layers = config.get("num_hidden_layers") or config.get("n_layer")
    assert lower(config, fusions=(), **kw) == (eager, eager_params)  # none asked: the eager kernels, unchanged
    for name in FUSIONS:
        fused, params = lower(config, fusions=[name], **kw)
        before, after = _ops(eager), _ops(fused)
        assert params == eager_params and len(fused) <= len(eager)
        gemms = {k: v for k, v in before.items() if k[0] in ("gemm", "attention")}
        if name == "packed_projections" and model == "llama-3-8b":  # q, k, v one GEMM, gate and up one: 3 fewer a layer
            assert before[("gemm", "linear")] - after[("gemm", "linear")] == 3 * layers
            macs = [sum(r["m"] * r["n"] * r["k"] * r["count"] for r in x if r["kind"] == "gemm") for x in (eager, fused)]
            assert macs[0] == macs[1]  # the same math, over the same weights
            continue
        assert gemms == {k: v for k, v in after.items() if k[0] in ("gemm", "attention")}  # the math kernels stay
        if name == "attention_layout":  # one head-merging copy a layer goes
            assert before[("elementwise", "copy")] - after.get(("elementwise", "copy"), 0) == layers
        elif name == "activation" and model == "llama-3-8b":  # silu and the gate's multiply: one kernel reading both
            assert ("elementwise", "silu") not in after and after[("elementwise", "swiglu")] == layers
        elif name == "activation" and model == "gpt2":  # HF's eight-kernel tanh GELU as one kernel
            assert before[("elementwise", "tanh")] == layers and ("elementwise", "tanh") not in after
            assert after[("elementwise", "gelu")] == layers and sum(before.values()) - sum(after.values()) == 7 * layers
        elif name == "gemm_activation" and model != "llama-3-8b":  # in the GEMM's epilogue: no kernel at all
            act = "gelu" if model == "bert-large" else "tanh"
            assert before[("elementwise", act)] == layers and ("elementwise", act) not in after
            assert ("elementwise", "gelu") not in after
        elif name == "norm" and model == "llama-3-8b":  # HF's five RMSNorm kernels, one norm kernel
            assert after[("norm", "rmsnorm")] == 2 * layers + 1
            assert sum(before.values()) - sum(after.values()) == 4 * (2 * layers + 1)
        elif name == "rope" and model == "llama-3-8b":  # q and k each one kernel, not two multiplies and an add
            assert after[("elementwise", "rope")] == 2 * layers
            assert before[("elementwise", "pointwise_mul")] - after[("elementwise", "pointwise_mul")] == 4 * layers
        else:  # nothing of that kind in the model (the residual fusion needs the norm one): nothing changes
            assert fused == eager


def test_the_residual_add_runs_inside_the_next_norm_where_both_fusions_are_on():
    # vLLM's count for a Llama: 2 x layers norms that take the residual in, one that does not, and no residual adds
    config = resolve_model("llama-3-8b")[0]
    kw = dict(phase="decode", batch=4, seq=64, dtype="bf16")
    layers = config["num_hidden_layers"]
    norm, both = (_ops(lower(config, fusions=f, **kw)[0]) for f in (["norm"], ["norm", "residual_norm"]))
    assert norm[("norm", "rmsnorm")] == 2 * layers + 1 and ("norm", "add_rmsnorm") not in norm
    assert both[("norm", "add_rmsnorm")] == 2 * layers and both[("norm", "rmsnorm")] == 1
    assert norm[("elementwise", "pointwise_add")] - both[("elementwise", "pointwise_add")] == 2 * layers


def test_fused_kernels_move_what_their_operands_say():
    rows = kernel_columns([dict(kind="elementwise", op=op, dtype="bf16", acc_dtype="bf16", rows=1, cols=1 << 26,
                                count=1) for op in ("swiglu", "rope", "pointwise_mul")]
                           + [dict(kind="norm", op=op, dtype="bf16", acc_dtype="bf16", rows=1 << 13, cols=1 << 13,
                                   count=1) for op in ("add_rmsnorm", "rmsnorm")])
    features, _ = analyze(rows, joulecast.gpu("h100-sxm"))
    per_element = features["l2_bytes"].to_numpy() / (1 << 26)
    # swiglu reads gate and up, writes one (as a multiply); rope reads x and writes it rotated; the residual's norm
    # reads the layer's output and the residual and writes the sum and its norm
    assert per_element.tolist() == [6.0, 4.0, 6.0, 8.0, 4.0]


@pytest.mark.parametrize("fusions, match", [(["gelu"], "unknown fusion 'gelu'"), ("norm,fast", "unknown fusion 'fast'"),
                                            (7, "a list of fusion names")])
def test_unknown_fusions_name_the_field_and_what_is_allowed(fusions, match):
    with pytest.raises(joulecast.InputError, match=f"fusions: {match}.*") as err:
        lower(resolve_model("gpt2")[0], phase="prefill", batch=1, seq=8, dtype="bf16", fusions=fusions)
    assert "activation" in str(err.value)
    assert check_fusions("rope, norm,rope") == ("norm", "rope") and check_fusions(None) == ()
    # "none", as the help names the default, and empty are no fusion; inside a list "none" is still a bad name
    assert check_fusions("none") == check_fusions(" None ") == check_fusions("") == ()
    with pytest.raises(joulecast.InputError, match="unknown fusion 'none'"):
        check_fusions("none,rope")


def test_a_configs_whole_floats_are_its_sizes_and_a_bool_is_none():
    """A config written out by a tool that keeps 768.0 lowers as 768; `true` is no size (it passed as 1 before)."""
    from joulecast.data.models import model_entry

    config = dict(model_entry("gpt2")["config"])
    floats = {**config, "n_embd": float(config["n_embd"])}
    same = [joulecast.estimate(joulecast.workload(c, phase="prefill", batch=1, seq=64), "a10", estimator="physics")
            for c in (config, floats)]
    assert same[0].energy_j == same[1].energy_j
    with pytest.raises(InputError, match="config.n_embd: must be a whole number from 1 to 16,777,216, got true or "
                                         "false"):
        joulecast.workload({**config, "n_embd": True}, phase="prefill", batch=1, seq=64)


# torchvision's weights' num_params (pytorch.org/vision/stable/models/generated/torchvision.models.resnet18, resnet34,
# resnet50: IMAGENET1K_V1)
@pytest.mark.parametrize("layer_type, depths, widths, torchvision", [
    ("basic", [2, 2, 2, 2], [64, 128, 256, 512], 11_689_512),         # ResNet-18
    ("basic", [3, 4, 6, 3], [64, 128, 256, 512], 21_797_672),         # ResNet-34
    ("bottleneck", [3, 4, 6, 3], [256, 512, 1024, 2048], 25_557_032),  # ResNet-50
])
def test_a_resnet_config_holds_torchvisions_weights(layer_type, depths, widths, torchvision):
    """transformers' ResNet configs (layer_type, depths, hidden_sizes) lower to the convolutions torchvision's models
    hold: its weight counts (torchvision's model docs, num_params) less what the lowering leaves out, each batch
    norm's scale and shift and the classifier's 1,000 biases. Before, every ResNet ran bottleneck blocks (ResNet-18's
    basic ones too) and a fifth stage was dropped."""
    from joulecast.features.lowering import lower

    config = dict(model_type="resnet", embedding_size=64, hidden_sizes=widths, depths=depths, layer_type=layer_type)
    records, weights = lower(config, phase="inference", batch=1, seq=None, dtype="fp32")
    # the stem's norm, each block's convs', and a stage's shortcut where it projects (new channels or a stride)
    ins, strides = [64, *widths[:-1]], [1, 2, 2, 2]
    norm_channels = 64 + sum(depth * (c_out * (1 + 2 / 4) if layer_type == "bottleneck" else 2 * c_out)
                             + (c_out if c_in != c_out or stride != 1 else 0)
                             for depth, c_in, c_out, stride in zip(depths, ins, widths, strides))
    assert weights == torchvision - 2 * norm_channels - 1000
    with pytest.raises(InputError, match="config.layer_type: unknown 'basc'; did you mean 'basic'"):
        lower({**config, "layer_type": "basc"}, phase="inference", batch=1, seq=None, dtype="fp32")
    with pytest.raises(InputError, match="config.depths: and config.hidden_sizes must list a block count and a width "
                                         "for each stage, as many of each; got a list and a list"):
        joulecast.workload({**config, "depths": depths[:3]}, phase="inference", batch=1)


def test_a_mobilevit_config_alone_lowers_as_the_catalog_entry():
    """Hugging Face's MobileViT config.json holds widths, not the stages transformers' code builds from them: they are
    derived (`mobilevit_stages`) as the catalog entry records them, so the config alone is the catalog model. Before,
    the config alone raised a KeyError."""
    from joulecast.data.models import model_entry
    from joulecast.features.lower_vision import mobilevit_stages

    entry = model_entry("mobilevit-small")
    recorded = {k: {f: v for f, v in stage.items() if f != "type"}
                for k, stage in entry["stage_structure_from_transformers_modeling_code"].items()
                if isinstance(stage, dict) and k != "classifier"}
    assert mobilevit_stages(entry["config"]) == recorded
    alone, catalog = (joulecast.estimate(joulecast.workload(m, phase="inference", batch=8), "a10", estimator="physics")
                      for m in (dict(entry["config"]), "mobilevit-small"))
    assert alone.energy_j == catalog.energy_j and alone.time_s == catalog.time_s


def test_a_mobilevit_for_segmentation_dilates_and_lowers_deeplab_v3():
    """transformers' MobileViT at output_stride 16 (8) keeps the map's size in layer 5 (and 4), its first block's
    depthwise conv dilated; MobileViTForSemanticSegmentation puts DeepLabV3's head (ASPP: 1x1, three dilated 3x3,
    pooled branch, 1x1 projection; a 1x1 conv to the labels) on the unexpanded encoder. Before, both were refused.
    Its conv weights are transformers' count exactly, within 1 % of the 6.4 M parameters the model card of
    apple/deeplabv3-mobilevit-small gives (its norms and biases the rest)."""
    from joulecast.data.models import model_entry
    from joulecast.features.lower_vision import mobilevit_stages

    config = model_entry("mobilevit-small")["config"]
    strides = {s: [mobilevit_stages({**config, "output_stride": s})[f"layer_{i}"]["stride"] for i in (3, 4, 5)]
               for s in (32, 16, 8)}
    assert strides == {32: [2, 2, 2], 16: [2, 2, 1], 8: [2, 1, 1]}

    def conv_macs(output_stride: int) -> int:
        c = joulecast.workload({**config, "output_stride": output_stride}, phase="inference", batch=8).columns
        conv = np.asarray(c["kind"]) == "conv2d"
        return int((np.asarray(c["m"]) * np.asarray(c["n"]) * np.asarray(c["k"]) * np.asarray(c["count"]))[conv].sum())

    macs = {s: conv_macs(s) for s in (32, 16, 8)}
    assert macs[32] < macs[16] < macs[8]
    segment = {**config, "architectures": ["MobileViTForSemanticSegmentation"], "output_stride": 16,
               "image_size": 512, "aspp_out_channels": 256, "atrous_rates": [6, 12, 18],
               "id2label": {str(i): f"class {i}" for i in range(21)}}
    neck, width = config["neck_hidden_sizes"], 256
    head = neck[5] * width * (1 + 3 * 9 + 1) + 5 * width * width + width * 21
    classifier = joulecast.workload(config, phase="inference", batch=1).params
    assert joulecast.workload(segment, phase="inference", batch=1).params == classifier - neck[5] * neck[6] + head
    assert joulecast.workload(segment, phase="inference", batch=1).params == pytest.approx(6.4e6, rel=0.015)
    estimate = joulecast.estimate(joulecast.workload(segment, phase="inference", batch=8), "a10")
    assert estimate.energy_interval_j[0] < estimate.energy_j < estimate.energy_interval_j[1]
    for change, line in (({"output_stride": 12}, "config.output_stride: must be 8, 16 or 32, got 12"),
                         ({"atrous_rates": [6, 12]}, "config.atrous_rates: must list 3 dilation rates"),
                         ({"atrous_rates": [6, 12, 0.5]}, "config.atrous_rates: must be a whole number")):
        with pytest.raises(InputError, match=re.escape(line)):
            joulecast.workload({**segment, **change}, phase="inference", batch=8)


@pytest.mark.parametrize("change, line", [
    ({"head_dim": "64"}, "config.head_dim: must be a whole number from 1 to 16,777,216, got text ('64')"),
    ({"num_key_value_heads": 10**30}, "config.num_key_value_heads: must be a whole number from 1 to 16,777,216"),
    ({"model_type": ["llama"]}, "config.model_type: a list is not supported; allowed: gpt2, bert"),
    ({"num_attention_heads": 8192}, "config.num_attention_heads: must be at most the width (4096) where head_dim is "
                                    "not given, got 8192"),
    ({"num_key_value_heads": 64}, "config.num_key_value_heads: must be at most the attention heads (32), got 64"),
    # transformers' repeat_kv gives each key-value head heads // key-value heads queries: 32 over 5 builds no model
    ({"num_key_value_heads": 5}, "config.num_key_value_heads: must divide the attention heads (32): each key-value "
                                 "head serves a group of them, got 5"),
    ({"max_position_embeddings": [8192]}, "config.max_position_embeddings: must be a whole number"),
])
def test_a_configs_shape_fields_are_checked_before_it_lowers(change, line):
    """Before, each raised Python's or numpy's own error from inside the lowering (a TypeError, an OverflowError)."""
    from joulecast.data.models import model_entry

    with pytest.raises(InputError) as caught:
        joulecast.workload({**model_entry("llama-3-8b")["config"], **change}, batch=1, seq=64)
    assert str(caught.value).startswith(line)



@pytest.mark.parametrize("name, heads, allowed", [("gpt2", 7, False), ("bert-large", 12 + 1, False),
                                                  ("llama-3-8b", 30, True)])
def test_heads_that_do_not_divide_the_width_as_transformers_takes_them(name, heads, allowed):
    """GPT-2's, OPT's, BERT's and ViT's attention refuses a width its heads do not divide; Llama's takes
    hidden_size // heads (before, every family took it)."""
    from joulecast.data.models import model_entry

    config = dict(model_entry(name)["config"])
    config["n_head" if "n_head" in config else "num_attention_heads"] = heads
    config.pop("num_key_value_heads", None)
    if allowed:
        assert joulecast.workload(config, batch=1, seq=64).params > 0
        return
    with pytest.raises(InputError, match=r"config\.(n_head|num_attention_heads): must divide the width \((768|1024)\)"):
        joulecast.workload(config, batch=1, seq=64)
