"""Catalog transformers rebuilt in plain PyTorch from their config, with random weights (nothing is downloaded).

The structure follows the lowering (`joulecast.features.lower_transformers`) so that a measured pass and its physics
estimate describe the same kernels: pre-norm blocks, SDPA attention (the `flash` path), unfused RMSNorm as in the
Hugging Face code, a gated SiLU MLP for Llama-style models, GELU (GPT-2, BERT) or ReLU (OPT) otherwise. The training
step's loss is the mean square of the final hidden states: the lowering has no vocabulary projection in training,
so neither has the measured step. With `attention="eager"` (prefill, `workload_ref.RUNNER_EAGER_FAMILIES`) a block
runs as Hugging Face's eager code does and the lowering's `eager` path describes: scores by `torch.matmul` (its layout
copies included; Llama-style grouped keys and values repeated to every head first), each family's scaling and mask, a
softmax, the weighted values by `torch.matmul`, and GPT-2's `gelu_new` as its eight elementwise kernels. With
`attention="masked"` (Llama-style prefill) SDPA is handed the causal mask as a tensor, as transformers 4.38-4.39's Llama
did, which PyTorch runs on its memory-efficient kernel over every key block (the lowering's `masked`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from joulecast.data import models
from joulecast.data.errors import InputError

SUPPORTED = ("gpt2", "bert", "opt", "llama")


def _dim(config: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        if config.get(key):
            return int(config[key])
    if default is None:
        raise InputError(f"config.{keys[0]}", "missing from the model config")
    return default


class RMSNorm(nn.Module):
    """Hugging Face's eager RMSNorm: fp32 variance, rsqrt, scale (several kernels, as lowered)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """Hugging Face's `gelu_new` (GPT-2's activation) as its eager code runs it: eight elementwise kernels."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _causal(s_q: int, s_kv: int, device: torch.device) -> torch.Tensor:
    """True where a query sees a key: on and below the diagonal, the queries the last s_q of s_kv positions."""
    return torch.ones(s_q, s_kv, dtype=torch.bool, device=device).tril(s_kv - s_q)


def _additive(causal: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask as an additive one: 0 where seen, the dtype's minimum where hidden."""
    return torch.zeros(causal.shape, dtype=dtype, device=causal.device).masked_fill(~causal, torch.finfo(dtype).min)


class Block(nn.Module):
    def __init__(self, family: str, h: int, heads: int, kv_heads: int, head_dim: int, inner: int, eps: float,
                 attention: str = "flash"):
        super().__init__()
        self.family, self.heads, self.kv_heads, self.head_dim = family, heads, kv_heads, head_dim
        self.attention, self._mask = attention, None
        norm = (lambda: RMSNorm(h, eps)) if family == "llama" else (lambda: nn.LayerNorm(h, eps=eps))
        self.norm1, self.norm2 = norm(), norm()
        # Hugging Face's GPT-2 projects Q, K and V in one GEMM (its Conv1D c_attn), as the lowering does; the flash
        # path keeps three, as the collections measured so far ran
        widths = (heads * head_dim, kv_heads * head_dim, kv_heads * head_dim)
        self.qkv = nn.Linear(h, sum(widths), bias=True) if attention == "eager" and family == "gpt2" else None
        self.q, self.k, self.v = (None, None, None) if self.qkv is not None else (
            nn.Linear(h, w, bias=family != "llama") for w in widths)
        self.widths = widths
        self.o = nn.Linear(heads * head_dim, h, bias=family != "llama")
        self.up = nn.Linear(h, inner, bias=family != "llama")
        self.gate = nn.Linear(h, inner, bias=False) if family == "llama" else None
        self.down = nn.Linear(inner, h, bias=family != "llama")

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
                cache: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        b, s, _ = x.shape
        y = self.norm1(x)
        q, k, v = (self.qkv(y).split(self.widths, dim=2) if self.qkv is not None else
                   (self.q(y), self.k(y), self.v(y)))
        if self.attention == "eager" and self.family == "opt":
            q = q * self.head_dim ** -0.5  # OPT scales its queries after the projection
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = _rotate(q, *rope), _rotate(k, *rope)
        if cache is not None:  # decode: the new token's key and value go to the cache's last slot
            k_cache, v_cache = cache
            k_cache[:, :, -s:] = k
            v_cache[:, :, -s:] = v
            k, v = k_cache, v_cache
        if self.attention == "eager":
            a = self._eager(q, k, v)
        elif self.attention == "masked":  # SDPA given the causal mask as a tensor: PyTorch's memory-efficient kernel
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=self._kept_mask(q.shape[-2], k.shape[-2], q),
                                               enable_gqa=self.heads != self.kv_heads)
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None and self.family != "bert",
                                               enable_gqa=self.heads != self.kv_heads)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))
        y = self.norm2(x)
        if self.gate is not None:
            y = self.down(F.silu(self.gate(y)) * self.up(y))
        elif self.family == "opt":
            y = self.down(F.relu(self.up(y)))
        elif self.attention == "eager":  # GPT-2's gelu_new in eight kernels, BERT's exact GELU in one
            y = self.down(gelu_new(self.up(y)) if self.family == "gpt2" else F.gelu(self.up(y)))
        else:
            y = self.down(F.gelu(self.up(y), approximate="tanh"))
        return x + y

    def _kept_mask(self, s_q: int, s_kv: int, like: torch.Tensor) -> torch.Tensor:
        """The block's mask for `s_q` queries over `s_kv` keys (in `like`'s dtype and device), built once, as the
        models keep theirs: GPT-2's eager one boolean and causal, BERT's eager one all zeros (no padding), the others
        (OPT's and Llama's eager ones, and the causal mask transformers 4.38-4.39's Llama handed SDPA) additive."""
        if self._mask is None or self._mask.shape[-2:] != (s_q, s_kv):
            if self.attention == "eager" and self.family == "bert":
                self._mask = torch.zeros(1, 1, s_q, s_kv, dtype=like.dtype, device=like.device)
            else:
                causal = _causal(s_q, s_kv, like.device)
                boolean = self.attention == "eager" and self.family == "gpt2"
                self._mask = causal if boolean else _additive(causal, like.dtype)
        return self._mask

    def _eager(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Hugging Face's eager attention of the family, as the lowering lists it: the scores by `torch.matmul`, then
        GPT-2's division by a 0-dim tensor and `torch.where` on its causal mask, BERT's division by a Python float and
        its (all-zero) extended mask added, OPT's causal additive mask and a softmax in fp32 cast back, Llama's
        scaling, the same mask and softmax."""
        if self.kv_heads != self.heads:  # transformers' repeat_kv: every query head its own copy of its group's
            rep = self.heads // self.kv_heads
            k, v = (x[:, :, None].expand(x.shape[0], self.kv_heads, rep, *x.shape[2:]).reshape(
                x.shape[0], self.heads, *x.shape[2:]) for x in (k, v))
        scores = torch.matmul(q, k.transpose(-1, -2))
        mask = self._kept_mask(*scores.shape[-2:], scores)
        if self.family == "llama":  # Llama / Qwen2 / Mistral: scaled scores, an additive mask, softmax in fp32
            scores = scores * self.head_dim ** -0.5 + mask
            weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
        elif self.family == "gpt2":
            scores = scores / torch.full([], self.head_dim ** 0.5, dtype=scores.dtype, device=scores.device)
            weights = F.softmax(torch.where(mask, scores, torch.finfo(scores.dtype).min), dim=-1)
        elif self.family == "bert":
            weights = F.softmax(scores / math.sqrt(self.head_dim) + mask, dim=-1)
        else:
            weights = F.softmax((scores + mask).float(), dim=-1).to(scores.dtype)
        return torch.matmul(weights, v)


class Transformer(nn.Module):
    """A decoder (GPT-2, OPT, Llama/Qwen2/Mistral) or encoder (BERT) stack from a Hugging Face style config."""

    def __init__(self, config: Mapping[str, Any], attention: str = "flash"):
        super().__init__()
        family = models.family(config)
        if family not in SUPPORTED:
            raise InputError("model", f"the PyTorch runner builds {', '.join(SUPPORTED)} models, not {family}")
        # a dense layer in the place of experts, or attention without Qwen3's q and k norms, would measure other work
        if models.is_mixture_of_experts(config):
            raise InputError("model", "the PyTorch runner builds dense models, not a mixture of experts "
                                      f"({config.get('name') or config.get('model_type')})")
        if config.get("model_type") in models.QK_NORM_TYPES:
            raise InputError("model", f"the PyTorch runner builds no q and k norms ({config.get('model_type')})")
        self.family = family
        h = _dim(config, "hidden_size", "n_embd")
        heads = _dim(config, "num_attention_heads", "n_head")
        # grouped keys and values are the Llama family's alone, as lowered; GPT-2, BERT and OPT have one a head
        self.kv_heads = _dim(config, "num_key_value_heads", default=heads) if family == "llama" else heads
        self.head_dim = _dim(config, "head_dim", default=h // heads)
        inner = _dim(config, "intermediate_size", "ffn_dim", "n_inner", default=4 * h)
        layers = _dim(config, "num_hidden_layers", "n_layer")
        vocab = _dim(config, "vocab_size")
        eps = float(config.get("rms_norm_eps") or config.get("layer_norm_epsilon") or config.get("layer_norm_eps") or 1e-5)
        self.rope_theta = float(config.get("rope_theta") or 10000.0)
        self.embed = nn.Embedding(vocab, h)
        self.positions = None if family == "llama" else nn.Embedding(
            _dim(config, "max_position_embeddings", "n_positions", default=2048) + 2, h)
        self.blocks = nn.ModuleList(Block(family, h, heads, self.kv_heads, self.head_dim, inner, eps, attention)
                                    for _ in range(layers))
        self.norm = RMSNorm(h, eps) if family == "llama" else nn.LayerNorm(h, eps=eps)
        self.lm_head = nn.Linear(h, vocab, bias=False)

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        inv = 1.0 / self.rope_theta ** (torch.arange(0, self.head_dim, 2, device=positions.device).float() / self.head_dim)
        freqs = torch.outer(positions.float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, tokens: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
                start: int = 0) -> torch.Tensor:
        """Hidden states (prefill, training), or the last token's logits when decoding with `caches`."""
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.embed(tokens)
        if self.positions is not None:
            x = x + self.positions(positions.clamp(max=self.positions.num_embeddings - 1))
        rope = self._rope(positions, x.dtype) if self.family == "llama" else None
        for i, block in enumerate(self.blocks):
            x = block(x, rope, caches[i] if caches is not None else None)
        x = self.norm(x)
        return self.lm_head(x[:, -1]) if caches is not None else x
