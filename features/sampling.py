"""A serving step's sampler as GPU work: the passes over every decode's logits (B rows of the vocabulary) that an
engine's PyTorch-native sampler runs after the LM head, where the requests sample (top-p or top-k) and where they
also penalise repeats. An engine's entry names its sampler (`data/serving_engines.yaml`, `sampler`); one without
(FlashInfer's fused sampling kernels, a pass or two over the logits) and greedy requests add nothing here.

`sort`, vLLM's `apply_top_k_top_p` (V1: vllm/v1/sample/ops/topk_topp_sampler.py `forward_native`; V0:
vllm/model_executor/layers/sampler.py `_apply_top_k_top_p`): the fp32 logits sorted along the vocabulary
(`torch.sort`, which for rows this long and 128 rows or more is CUB's segmented radix sort of fp32 keys with int64
indices: aten/src/ATen/native/cuda/SortStable.cu), a softmax and a cumulative sum of the sorted row, the mask of the
tail beyond p, the sorted row scattered back, then a softmax and exponential-race sampling over the row
(`random_sample`: probs / Exp(1) noise, argmax). Penalties (`apply_penalties`,
vllm/model_executor/layers/utils.py): each row's prompt and output tokens counted into int64 tables of the
vocabulary's width (`get_token_bin_counts_and_mask`), their masks, the repetition penalty over logits and masks, the
frequency and presence terms subtracted.

The passes' traffic is counted in 4-byte elements a vocabulary entry (an int64 table as two, a bool mask inside a
pass's count) and priced by the streaming rule like any elementwise kernel (from L2 where a table fits, as at small
batches; B x 128K fp32 is 0.5 GB at batch 1,024). Assumptions: the radix sort takes 6 passes (CUB's segmented
policy sorts 32-bit keys 6 bits a pass; under 128 rows ATen sorts them whole with the row in the key's high bits,
counted the same), each reading the keys twice (its up-sweep and down-sweep) and the int64 values once and writing
both; a softmax is one read and one write (its row held on chip).
"""

from __future__ import annotations

from typing import Any

from joulecast.data.engines import SAMPLERS
from joulecast.data.errors import require, require_choice

SAMPLING = ("greedy", "top-p", "top-p-penalties")
RADIX_PASSES = 6

# (op, 4-byte elements a vocabulary entry): the streaming rule's ops (`kinds.streaming`'s INPUTS and OUTPUTS give
# each op's operands: `fill` writes, `copy` reads one and writes one, `pointwise_add` reads two and writes one,
# `radix_pass` reads four and writes three)
_TOP_P = (
    ("copy", 1.5),                            # the LM head's bf16 logits cast to fp32 (2 B read, 4 B written)
    ("copy", 1),                              # temperature: logits.div_
    ("fill", 2),                              # the sort's int64 indices
    *(("radix_pass", 1),) * RADIX_PASSES,     # the radix sort
    ("copy", 1), ("copy", 1),                 # softmax and cumulative sum of the sorted row
    ("copy", 1), ("copy", 1),                 # the mask beyond p, masked_fill
    ("copy", 2),                              # scatter back (int64 index and value read, value written: 16 B)
    ("copy", 1),                              # softmax
    ("fill", 1), ("pointwise_add", 1),        # Exp(1) noise, probs / noise
    ("fill", 1),                              # argmax (one 4-byte pass: a read, priced as fill's write)
)
_PENALTIES = (
    ("fill", 2), ("fill", 2),                 # prompt tokens' int64 counts zeroed; counts > 0 (their 8 B read)
    ("fill", 2), ("fill", 2),                 # output tokens' counts, counts > 0
    ("pointwise_add", 1),                     # repetition penalty: logits and both masks read, logits written
    ("pointwise_add", 1), ("pointwise_add", 1),  # frequency: penalty x int64 counts, logits -= it
    ("copy", 1), ("pointwise_add", 1),        # presence: penalty x mask, logits -= it
)
_PASSES = {"greedy": (), "top-p": _TOP_P, "top-p-penalties": _PENALTIES + _TOP_P}


def check_sampling(sampling: object) -> str:
    """`sampling` as given where it is one of SAMPLING; otherwise one error naming the field and what it allows."""
    require_choice(sampling, SAMPLING, "sampling")
    return str(sampling)


def sampler_records(batch: int, vocab: int, sampling: str, sampler: str | None) -> list[dict[str, Any]]:
    """The step's sampling passes over its `batch` decodes' logits (`vocab` wide) as elementwise fp32 records:
    none for greedy requests or an engine whose sampler the physics does not price."""
    if sampler not in SAMPLERS:
        return []
    return [dict(kind="elementwise", op=op, dtype="fp32", acc_dtype="fp32", rows=1,
                 cols=int(round(batch * vocab * per_entry)), count=1)
            for op, per_entry in _PASSES[sampling]]
