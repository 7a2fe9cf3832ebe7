"""The model catalog: architecture configs (shape fields only, no weights) under `data/models/`."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from joulecast.data.errors import InputError, UnknownNameError
from joulecast.data.files import check_count, kind_of, read_json

MODEL_DIR = Path(__file__).parent / "models"

# model_type (Hugging Face config) -> lowering family
MODEL_TYPES = {"gpt2": "gpt2", "bert": "bert", "opt": "opt", "llama": "llama", "qwen2": "llama", "mistral": "llama",
               "mixtral": "llama", "qwen3": "llama", "qwen3_moe": "llama", "vit": "vit", "resnet": "resnet",
               "mobilevit": "mobilevit"}
CONVOLUTIONAL = ("resnet", "mobilevit")  # lowering families whose configs give no transformer width or depth
VISION = frozenset({"vit", "resnet", "mobilevit"})  # lowering families over images: no sequence length
# A text model's training options, which a vision model's run (or plan) takes none of: each one's value when left as
# is, and what it is for
TEXT_TRAINING_OPTIONS = {"lora_rank": (0, "LoRA's adapters on a transformer's linear layers"),
                         "lora_targets": ("all", "LoRA's adapters"),
                         "recompute": ("none", "the layers' activation recomputation"),
                         "head_tokens": (None, "the LM head's tokens"),
                         "head_outputs": (None, "a text model's task head"),
                         "forward_overhead_s": (0.0, "a transformer layer's framework overhead")}
# Llama-family types that normalise each head's queries and keys (RMSNorm over head_dim) before the rotary embedding
# (transformers' Qwen3Attention: q_norm, k_norm)
QK_NORM_TYPES = ("qwen3", "qwen3_moe")


# The shape fields the lowerings read as counts (Hugging Face's names, GPT-2's own, a vision model's): where a config
# gives one, a whole number from 1 to MAX_CONFIG_SIZE (`check_config`)
SIZE_FIELDS = ("hidden_size", "n_embd", "num_hidden_layers", "n_layer", "num_attention_heads", "n_head",
               "num_key_value_heads", "head_dim", "intermediate_size", "n_inner", "ffn_dim", "vocab_size",
               "max_position_embeddings", "n_positions", "type_vocab_size", "num_local_experts", "num_experts",
               "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step", "embedding_size", "image_size",
               "patch_size", "num_channels")
SIZE_LISTS = ("depths", "hidden_sizes", "neck_hidden_sizes")  # a ResNet's blocks and widths; a MobileViT's widths
RATIO_FIELDS = ("mlp_ratio", "expand_ratio")  # a MobileViT's MLP and inverted residuals' widths over their input's
# 2^24: 128 times the largest shape field in the catalog (Llama-3.1-405B's 131,072 positions), room for any longer
# context; past it a value is a slip, and its products would pass numpy's 64-bit counts
MAX_CONFIG_SIZE = 2**24
MAX_RATIO = 64  # 16 times MobileViT's own (expand_ratio 4): past it a slip


def check_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config a user gave (a mapping or a config.json), its model type and shape fields checked before a lowering
    reads them, each bad one a line naming `config.<field>`; whole-number floats (4096.0, as some tools write them)
    as integers. Before, a head_dim of "64" or 1e30 raised Python's or numpy's own error from inside the lowering."""
    fam = family(config)
    out = dict(config)
    for key in SIZE_FIELDS:
        if out.get(key) is not None:
            out[key] = check_size(out[key], f"config.{key}")
    for key in SIZE_LISTS:
        if out.get(key) is not None:
            values = out[key]
            if not isinstance(values, list) or not values:
                raise InputError(f"config.{key}", f"must be a list of whole numbers, got {kind_of(values)}")
            out[key] = [check_size(v, f"config.{key}[{i}]") for i, v in enumerate(values)]
    for key in RATIO_FIELDS:
        value = out.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 < value <= MAX_RATIO):
            raise InputError(f"config.{key}", f"must be a number over 0 and at most {MAX_RATIO}, got {kind_of(value)}")
    if fam not in CONVOLUTIONAL:
        _check_heads(out)
    return out


# Lowering families whose Hugging Face attention splits the width into its heads and refuses a width they do not
# divide (GPT2Attention, OPTAttention: "embed_dim must be divisible by num_heads"; BertSelfAttention,
# ViTSelfAttention: "The hidden size ... is not a multiple of the number of attention heads"); Llama's takes
# hidden_size // heads where head_dim is not given, as the lowering does
WHOLE_HEADS = ("gpt2", "bert", "opt", "vit")


def _check_heads(config: Mapping[str, Any]) -> None:
    """A transformer's width, depth and heads there (every use of it reads them), its heads as wide as a head can be
    where head_dim does not say (hidden_size / heads, none where heads outnumber the width; a whole share of it where
    its attention needs one, WHOLE_HEADS), its key-value heads a divisor of its heads (each serves a group of them:
    transformers' repeat_kv repeats each heads // key-value heads times)."""
    width, _, heads = hidden_size(config), layer_count(config), head_count(config)
    field = "num_attention_heads" if config.get("num_attention_heads") else "n_head"  # as the config names it
    if heads > width and config.get("head_dim") is None:
        raise InputError(f"config.{field}", f"must be at most the width ({width}) where head_dim is not given, got "
                                            f"{heads}")
    if family(config) in WHOLE_HEADS and width % heads:
        raise InputError(f"config.{field}", f"must divide the width ({width}), as {config['model_type']}'s attention "
                                            f"splits it into its heads, got {heads}")
    kv_heads = config.get("num_key_value_heads")
    if kv_heads and kv_heads > heads:
        raise InputError("config.num_key_value_heads", f"must be at most the attention heads ({heads}), got {kv_heads}")
    if kv_heads and heads % kv_heads:
        raise InputError("config.num_key_value_heads", f"must divide the attention heads ({heads}): each key-value "
                                                       f"head serves a group of them, got {kv_heads}")


def check_size(value: Any, field: str) -> int:
    """A config's count as given (4096.0 is 4096): a whole number from 1 to MAX_CONFIG_SIZE, else one line naming
    `field`."""
    return check_count(value, field, MAX_CONFIG_SIZE, whole=True)


def is_mixture_of_experts(config: Mapping[str, Any]) -> bool:
    """Whether a config's MLP is a mixture of experts (Mixtral's `num_local_experts`, Qwen3-MoE's `num_experts`)."""
    return config.get("num_local_experts") is not None or config.get("num_experts") is not None


@functools.cache
def catalog() -> Mapping[str, Mapping[str, Any]]:
    """All shipped model entries by canonical name."""
    entries = {}
    for path in sorted(MODEL_DIR.glob("*.json")):
        entry = json.loads(path.read_text())
        entries[entry["name"]] = MappingProxyType(entry)
    return MappingProxyType(entries)


@functools.cache
def _alias_index() -> Mapping[str, str]:
    """Every name and alias, lower-case, to its entry; a Hugging Face id's repository name alone too (its organisation
    left off, as people write it: Meta-Llama-3.1-70B-Instruct), where no other entry claims it."""
    named = {a.lower(): e["name"] for e in catalog().values() for a in (e["name"], *e["aliases"], e.get("hf_id", ""))
             if a}
    bare: dict[str, set[str]] = {}
    for alias, name in named.items():
        if "/" in alias:
            bare.setdefault(alias.rsplit("/", 1)[1], set()).add(name)
    return MappingProxyType({**{a: next(iter(n)) for a, n in bare.items() if len(n) == 1}, **named})


def is_model_name(name: object) -> bool:
    """Whether `name` names a catalog model (by name or alias, in any case)."""
    return str(name).strip().lower() in _alias_index()


def model_entry(name: str) -> Mapping[str, Any]:
    """A catalog model by name or alias; unknown names list close ones."""
    key = str(name).strip().lower()
    if key not in _alias_index():
        raise UnknownNameError("model", name, catalog().keys(), "Run 'joulecast models' to list the catalog.")
    return catalog()[_alias_index()[key]]


def load_config(path: str | Path, field: str = "--config") -> dict[str, Any]:
    """Read a Hugging Face style `config.json` (or a catalog entry file with a `config` key), whatever its file is
    named; a model's folder (a Hugging Face snapshot) by the config.json in it. Errors name `field`."""
    path = Path(path)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    raw = read_json(path, field)
    if not isinstance(raw, dict):
        raise InputError(field, f"{path.name} must hold a JSON object")
    return dict(raw["config"], **{k: v for k, v in raw.items() if k != "config"}) if "config" in raw else raw


def family(config: Mapping[str, Any]) -> str:
    """The lowering family of a config, from its `model_type`."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:  # a list is no type (nor hashable)
        said = repr(model_type) if isinstance(model_type, str) else kind_of(model_type)
        raise InputError("config.model_type", f"{said} is not supported; allowed: {', '.join(MODEL_TYPES)}")
    return MODEL_TYPES[model_type]


def is_vision(config: Mapping[str, Any]) -> bool:
    """Whether a config's model runs over images (`VISION`): a batch of images, no sequence length."""
    return family(config) in VISION


def hidden_size(config: Mapping[str, Any]) -> int:
    """A transformer config's model width: `hidden_size`, or GPT-2's `n_embd`."""
    return config_size(config, "hidden_size", "n_embd")


def layer_count(config: Mapping[str, Any]) -> int:
    """A transformer config's layers: `num_hidden_layers`, or GPT-2's `n_layer`."""
    return config_size(config, "num_hidden_layers", "n_layer")


def head_count(config: Mapping[str, Any]) -> int:
    """A transformer config's attention (query) heads: `num_attention_heads`, or GPT-2's `n_head`."""
    return config_size(config, "num_attention_heads", "n_head")


def config_size(config: Mapping[str, Any], *keys: str) -> int:
    """The first of `keys` a config gives (a field by its Hugging Face name, then another model's: GPT-2's `n_embd`),
    a whole number from 1 to MAX_CONFIG_SIZE; none there, or a bad one, is one line naming the field (before, a
    KeyError naming GPT-2's). The lowerings read every size through it."""
    for key in keys:
        if config.get(key) is not None:
            return check_size(config[key], f"config.{key}")
    also = f" (nor as {', '.join(keys[1:])})" if len(keys) > 1 else ""
    raise InputError(f"config.{keys[0]}", f"missing from the model config{also}")


def family_of_name(name: str) -> str:
    """A model's family for grouping results: the name's first word (llama-3-8b -> llama, Qwen3-14B -> qwen3,
    bert-large -> bert, Meta-Llama-3.1-8B -> llama, NVIDIA-Nemotron-Nano -> nemotron)."""
    import re

    return re.sub(r"^(meta|nvidia)-", "", str(name).split("/")[-1].lower()).split("-")[0]
