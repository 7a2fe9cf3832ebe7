"""The model catalog: architecture configs (shape fields only, no weights) under `data/models/`."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from joulecast.data.errors import InputError, UnknownNameError
from joulecast.data.files import read_json

MODEL_DIR = Path(__file__).parent / "models"

# model_type (Hugging Face config) -> lowering family
MODEL_TYPES = {"gpt2": "gpt2", "bert": "bert", "opt": "opt", "llama": "llama", "qwen2": "llama", "mistral": "llama",
               "mixtral": "llama", "qwen3": "llama", "qwen3_moe": "llama", "vit": "vit", "resnet": "resnet",
               "mobilevit": "mobilevit"}
# Llama-family types that normalise each head's queries and keys (RMSNorm over head_dim) before the rotary embedding
# (transformers' Qwen3Attention: q_norm, k_norm)
QK_NORM_TYPES = ("qwen3", "qwen3_moe")


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
    return MappingProxyType({a.lower(): e["name"] for e in catalog().values() for a in (e["name"], *e["aliases"])})


def model_entry(name: str) -> Mapping[str, Any]:
    """A catalog model by name or alias; unknown names list close ones."""
    key = str(name).strip().lower()
    if key not in _alias_index():
        raise UnknownNameError("model", name, catalog().keys(), "Run 'joulecast models' to list the catalog.")
    return catalog()[_alias_index()[key]]


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a Hugging Face style `config.json` (or a catalog entry file with a `config` key)."""
    path = Path(path)
    raw = read_json(path, "--config")
    if not isinstance(raw, dict):
        raise InputError("--config", f"{path.name} must hold a JSON object")
    return dict(raw["config"], **{k: v for k, v in raw.items() if k != "config"}) if "config" in raw else raw


def family(config: Mapping[str, Any]) -> str:
    """The lowering family of a config, from its `model_type`."""
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise InputError("config.model_type", f"{model_type!r} is not supported; allowed: {', '.join(MODEL_TYPES)}")
    return MODEL_TYPES[model_type]


def hidden_size(config: Mapping[str, Any]) -> int:
    """A transformer config's model width: `hidden_size`, or GPT-2's `n_embd`."""
    return int(config.get("hidden_size") or config["n_embd"])


def layer_count(config: Mapping[str, Any]) -> int:
    """A transformer config's layers: `num_hidden_layers`, or GPT-2's `n_layer`."""
    return int(config.get("num_hidden_layers") or config["n_layer"])


def head_count(config: Mapping[str, Any]) -> int:
    """A transformer config's attention (query) heads: `num_attention_heads`, or GPT-2's `n_head`."""
    return int(config.get("num_attention_heads") or config["n_head"])


def family_of_name(name: str) -> str:
    """A model's family for grouping results: the name's first word (llama-3-8b -> llama, Qwen3-14B -> qwen3,
    bert-large -> bert, Meta-Llama-3.1-8B -> llama, NVIDIA-Nemotron-Nano -> nemotron)."""
    import re

    return re.sub(r"^(meta|nvidia)-", "", str(name).split("/")[-1].lower()).split("-")[0]
