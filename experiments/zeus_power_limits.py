"""Score the `train-run` job against Zeus' power-limit x batch-size training sweep (You, Chung and Chowdhury, NSDI'23):
BERT-base fine-tuned on SQuAD on a V100 and an A40, one epoch per (batch size, power limit), energy per epoch by
power limit.

    python experiments/zeus_power_limits.py [--gpu v100|a40] [--network bert|resnet50] [--json]

Rows: `../shared/data/external/zeus-nsdi23-powerlimit/summary_power_{v100,a40}.csv`, network `bert_base_uncased`,
dataset `squad` (V100: 49 rows, batch 8-56, power limits 100-250 W; A40: 72 rows, batch 8-72, 100-300 W; measured
time per epoch and average GPU power, energy their product). The trace names neither SKU nor precision, nor the
epoch's sequence count, so these assumptions are stated here and in the note:
- the catalog's V100-PCIe-16GB: the sweep set limits of 100-250 W, which a V100-SXM2 refuses below 150 W (its range
  150-300 W, shared/reference/gpus.md), and tops out at the PCIe card's 250 W (its memory is not recorded: the
  16 GB card stands for either). With the V100-SXM2 in its place (the catalog's one V100 before 2026-12-04): energy
  per epoch MAPE 22.5 % (bias +22.5 %), its power at the 250 W limit read 246 W against 226 measured. And the
  catalog's A40 (300 W, the sweep's highest limit too). Neither card is trained on: their estimates are spec-only;
- fp32 (the trace records no mixed precision; fp32 is what the Hugging Face SQuAD example runs without `--fp16`): on
  the V100's CUDA cores, and as TF32 on the A40's tensor cores. The Zeus Docker image of the paper's time ships
  PyTorch 1.10.1 (Zeus docs, "Setting Up the Environment": `symbioticlab/zeus`, CUDA 11.3.1), whose
  `torch.backends.cuda.matmul.allow_tf32` defaulted to True ("pytorch had this mode on by default since pt-1.7",
  huggingface/transformers#14606, December 2021); PyTorch 1.12 turned it off (pytorch/pytorch#67384);
- an epoch of EPOCH_SEQUENCES sequences of SEQ tokens (SQuAD v1.1's training questions at the example's
  `max_seq_length` 384, a long context split in two at `doc_stride` 128), AdamW, no recomputation;
- SQuAD's span head in place of BERT's masked-LM head: a start and an end logit a token (HEAD_OUTPUTS; Hugging Face's
  `BertForQuestionAnswering`, `qa_outputs = nn.Linear(hidden_size, 2)`, which its SQuAD example fine-tunes), not the
  30,522-wide vocabulary. With the vocabulary head, energy per epoch MAPE V100 37.9 %, A40 7.8 %;
- eager attention (ATTENTION): Hugging Face's `BertSelfAttention` of the paper's time multiplies out the scores,
  softmax and dropout and multiplies by the values, kernel by kernel; PyTorch's fused SDPA came with 2.0. With the
  fused kernel instead, V100 12.9 % (bias +11.8 %), A40 27.3 % (bias -27.3 %), the A40's shape 2.0-5.4 % a batch,
  regret 0-0.3 %.
What the V100's epochs say of those assumptions (measured 2026-12-04, physics' own counts): a step of 8 sequences
does 1.70 TFLOP of GEMMs and the measured epoch leaves it 143 ms, so the GEMMs alone would run at 11.9 TFLOP/s, 84 %
of the PCIe card's 14.1 fp32 peak (its catalog entry's, sourced there) with every other kernel free (at 32 sequences
10.8, 77 %); physics gives the step 195 ms, 45 of them outside GEMMs, and reads the V100's time 1.18-1.36x the
measured at 250 W. Memory points the same way: `train_run`'s check has batches of 48-56 at fp32 need 23.5-27.2 GB
(32: 16.2), over the 16 GB card (21-36 GB when first measured; since 2026-12-06's thirteenth session a run in fp32
counts its gradients at 4 bytes, its state without a master copy, its activations at 4 bytes and its loss). So the
trace's card, precision or epoch is likely not quite as assumed (the A40's time MAPE is 9.1 %).
Measured, not adopted: as a V100S-PCIe-32GB (80 SMs at 1,597 MHz, 1.03 TiB/s = 1,134 GB/s, 31.75 GiB: TensorFlow's
device listing of a 'Tesla V100S-PCIE-32GB', public-repository index id 44478820372; the hypothetical
`v100-pcie-16gb:clock*1.1572:memory_bandwidth_gbs*1.26:memory_gb*2`) energy per epoch MAPE 18.0 -> 10.7 % (bias
-2.7 %), time 16.3 -> 10.6 %, the shape by limit and the limit picked the same; choosing the card by the trace's
own times would fit it to the rows it is scored on.
`--network resnet50` scores the trace's other network on both cards, ResNet-50 trained on ImageNet (56 V100 rows,
81 A40 rows, batch 8-512), by `train_run` over images: the catalog's `resnet-50`, an epoch of ImageNet-1k's
IMAGENET_IMAGES training images at 224 x 224 (`--tokens`), fp32 on the V100 and TF32 on the A40 as for BERT, and the
trace's Adadelta priced as AdamW (each keeps two fp32 state tensors a weight and updates it in one pass). Read with
HISTORY.md's 2026-12-06 twelfth-, fourteenth- and fifteenth-session entries: the A40's epochs run slower than the
V100's from batch 64 up, and 1.17-1.51x physics' time at every limit from 125 W, their rate rising with the limit up
to 225 W (the GPU's pace, not an input pipeline's, as the twelfth session read them) and flat above it at about 330
images a second whatever the batch (possibly a bound outside the GPU there).
The epoch's sequence count scales every prediction alike, so the figures that do not depend on it are reported
beside the absolute ones: per batch size, energy at each limit relative to the 250 W default (the shape an operator
reads), the energy-optimal limit, and the energy measured at the limit joulecast picks against the best measured one.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pandas as pd
from shared_data import EXTERNAL

from joulecast.estimator.loading import load_estimator
from joulecast.estimator.train_run import train_run

DATA = EXTERNAL / "zeus-nsdi23-powerlimit"
# the trace's GPU token -> (catalog GPU, default power limit: the sweep's highest, the dtype fp32 runs as),
# assumptions (module docstring)
GPUS = {"v100": ("v100-pcie-16gb", 250.0, "fp32"), "a40": ("a40", 300.0, "tf32")}
MODEL = "bert-base"
SEQ, EPOCH_SEQUENCES = 384, 88_000                      # assumptions (module docstring)
HEAD_OUTPUTS = 2                                        # SQuAD's span head: start and end logits (module docstring)
ATTENTION = "eager"                                     # BERT's attention before PyTorch's SDPA (module docstring)
# the trace's (network, dataset) -> the catalog's model; `--network resnet50` (module docstring)
NETWORKS = {"bert": ("bert_base_uncased", "squad", MODEL), "resnet50": ("resnet50", "imagenet", "resnet-50")}
IMAGENET_IMAGES = 1_281_167                             # ILSVRC-2012's training images (ImageNet-1k): an epoch


def rows(token: str, network: str = "bert") -> pd.DataFrame:
    name, dataset, _ = NETWORKS[network]
    d = pd.read_csv(DATA / f"summary_power_{token}.csv")
    d = d[(d["network"] == name) & (d["dataset"] == dataset)].copy()
    d["energy_j"] = d["time_per_epoch"] * d["average_power"]
    return d.sort_values(["batch_size", "power_limit"]).reset_index(drop=True)


def _epoch(network: str, gpu: str, dtype: str, batch: int, limit: float, residual):
    """One epoch of `network` at a batch size and power limit, as `train_run` estimates it."""
    common = dict(global_batch=batch, dtype=dtype, power_limit_w=limit,
                  estimator=residual if residual is not None else "physics")
    if network == "resnet50":
        return train_run(NETWORKS[network][2], gpu, tokens=IMAGENET_IMAGES, **common)
    return train_run(MODEL, gpu, seq=SEQ, steps=math.ceil(EPOCH_SEQUENCES / batch), head_outputs=HEAD_OUTPUTS,
                     attention=ATTENTION, **common)


def predict(d: pd.DataFrame, gpu: str, dtype: str, residual, network: str = "bert") -> pd.DataFrame:
    out = []
    for r in d.itertuples():
        run = _epoch(network, gpu, dtype, int(r.batch_size), float(r.power_limit), residual)
        lo, hi = run.energy_interval_j if run.method == "hybrid" else (np.nan, np.nan)  # physics: no interval
        out.append(dict(pred_energy_j=run.energy_j, pred_time_s=run.time_s, pred_power_w=run.power_w,
                        energy_lo_j=lo, energy_hi_j=hi))
    return pd.concat([d, pd.DataFrame(out)], axis=1)


def per_batch(frame: pd.DataFrame, default_limit_w: float) -> pd.DataFrame:
    """Per batch size: energy relative to the default limit (measured and predicted), the energy-optimal limit each
    way, and the regret: measured energy at the predicted optimum over the measured optimum, less one."""
    out = []
    for batch, g in frame.groupby("batch_size"):
        default = g[g["power_limit"] == default_limit_w]
        if default.empty:
            continue
        at_default, pred_at_default = float(default["energy_j"].iloc[0]), float(default["pred_energy_j"].iloc[0])
        rel_meas, rel_pred = g["energy_j"] / at_default, g["pred_energy_j"] / pred_at_default
        best_meas = g.loc[g["energy_j"].idxmin()]
        best_pred = g.loc[g["pred_energy_j"].idxmin()]
        out.append(dict(batch=int(batch), rows=len(g),
                        relative_energy_mape=100 * float(np.mean(np.abs(rel_pred / rel_meas - 1))),
                        best_limit_measured_w=float(best_meas["power_limit"]),
                        best_limit_predicted_w=float(best_pred["power_limit"]),
                        saving_at_best_measured_pct=100 * (1 - float(best_meas["energy_j"]) / at_default),
                        saving_at_best_predicted_pct=100 * (1 - float(best_pred["pred_energy_j"]) / pred_at_default),
                        regret_pct=100 * (float(best_pred["energy_j"] / best_meas["energy_j"]) - 1)))
    return pd.DataFrame(out)


def summary(frame: pd.DataFrame) -> dict:
    ape = lambda p, m: float(100 * np.mean(np.abs(frame[p] / frame[m] - 1)))  # noqa: E731
    covered = (frame["energy_lo_j"] <= frame["energy_j"]) & (frame["energy_j"] <= frame["energy_hi_j"])
    return dict(rows=len(frame), energy_mape=ape("pred_energy_j", "energy_j"),
                energy_bias_pct=float(100 * np.mean(frame["pred_energy_j"] / frame["energy_j"] - 1)),
                time_mape=ape("pred_time_s", "time_per_epoch"), power_mape=ape("pred_power_w", "average_power"),
                coverage_pct=float(100 * covered.mean()) if frame["energy_lo_j"].notna().all() else None)


def score(token: str, residual, network: str = "bert") -> dict:
    """Per estimator (the hybrid where one is given, and physics), the summary and the per-batch figures."""
    gpu, default_limit_w, dtype = GPUS[token]
    d = rows(token, network)
    frames = {"hybrid" if residual is not None else "physics": predict(d, gpu, dtype, residual, network)}
    if residual is not None:
        frames["physics"] = predict(d, gpu, dtype, None, network)
    return {"gpu": gpu, "dtype": dtype, "default_limit_w": default_limit_w, **{
        name: {"summary": summary(f), "per_batch": per_batch(f, default_limit_w).to_dict(orient="records")}
        for name, f in frames.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimator", default=None, help="as for estimate (default: the shipped model)")
    parser.add_argument("--gpu", choices=sorted(GPUS), action="append", help="the trace's GPU (default: every one)")
    parser.add_argument("--network", choices=sorted(NETWORKS), default="bert",
                        help="the trace's network: BERT-base on SQuAD (default) or ResNet-50 on ImageNet")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    residual = load_estimator(args.estimator)
    result = {token: score(token, residual, args.network) for token in (args.gpu or GPUS)}
    epoch = ({"epoch_images": IMAGENET_IMAGES} if args.network == "resnet50"
             else {"seq": SEQ, "epoch_sequences": EPOCH_SEQUENCES})
    result["assumptions"] = {"network": args.network, "model": NETWORKS[args.network][2], **epoch,
                             "gpus": {t: dict(gpu=g, default_limit_w=w, dtype=d) for t, (g, w, d) in GPUS.items()}}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    pd.set_option("display.width", 160)
    for token in args.gpu or GPUS:
        r = result[token]
        work = (f"ResNet-50 on ImageNet, {token} ({r['physics']['summary']['rows']} rows; assumed {r['gpu']}, "
                f"{r['dtype']}, {IMAGENET_IMAGES:,} images an epoch, Adadelta as AdamW)" if args.network == "resnet50"
                else f"BERT-base on SQuAD, {token} ({r['physics']['summary']['rows']} rows; assumed {r['gpu']}, "
                f"{r['dtype']}, {EPOCH_SEQUENCES:,} sequences of {SEQ} tokens an epoch)")
        print(f"Zeus NSDI'23, {work}")
        for name in ("hybrid", "physics"):
            if name not in r:
                continue
            s = r[name]["summary"]
            cover = "" if s["coverage_pct"] is None else f", 90 % interval covers {s['coverage_pct']:.1f} %"
            print(f"\n{name}: energy per epoch MAPE {s['energy_mape']:.1f} % (bias {s['energy_bias_pct']:+.1f} %), "
                  f"time {s['time_mape']:.1f} %, power {s['power_mape']:.1f} %{cover}")
            print(pd.DataFrame(r[name]["per_batch"]).round(2).to_string(index=False))
        print()


if __name__ == "__main__":
    main()
