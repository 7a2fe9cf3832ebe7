"""ResNet-50's images a second on one GPU as NVIDIA publishes them, beside joulecast's: a check of the vision path's
time (the training step of `train-run`, the inference pass of `estimate`) on two GPUs the shipped model has no rows
of, the A100-SXM4-80GB and the V100-SXM2, from a set nothing here was fitted on.

    python experiments/resnet_throughput.py [--json]

Rows: `data/published/resnet50_throughput.yaml` (NVIDIA DeepLearningExamples, pytorch-21.03; its header gives the
source of every figure). Each row is estimated as the README runs it: ResNet-50 v1.5 (the catalog's resnet-50,
microsoft/resnet-50, is v1.5), SGD with momentum, TF32 for the A100's fp32 run (cuDNN's default on Ampere), AMP as
fp16 kernels, NHWC (`channels_last`) where the configuration sets it. Approximations: AMP's casts of fp32 master
weights and its loss scaling are not priced (weights 25.6 M parameters: under 1 % of a step's bytes at 256 images);
the published figures are means over 100 iterations with DALI feeding the GPU, taken as GPU-bound (no loader rate);
the 16 GB and 32 GB V100s are one catalog card. No energy is published: time only. The 8-GPU rows are planned as
`joulecast plan` plans a job (one site of the DGX's GPUs, data-parallel, the per-GPU batch as the micro-batch), and
scored on their scaling too: their rate over eight times the one-GPU rate, published against planned.

The `layout` pair (PyTorch's channels-last tutorial: apex AMP training on a V100, NCHW and NHWC, the YAML's header)
checks what the NCHW default costs a tensor-core network, cuDNN's transposes of each convolution's input and
gradient (`features.arch.LAYOUT_TRANSPOSE_OP`): it is scored on the NHWC run's rate over the NCHW run's, published
against estimated. Its runs fed the GPU from a PyTorch DataLoader of 16 workers: their absolute rates are printed,
not scored.

The inference benchmark times whole iterations: at small batches its latency stays at a floor (10.2-10.5 ms at 1-4
images in FP32, 12.8-14.0 ms at 1-16 in AMP) that is the host's (the loop, its copies and synchronisation), which
the table does not state and an estimate at the default host dispatch does not know. The summary scores the rows that
saturate the GPU, by the published figures alone: throughput within `SATURATED` of the table's best for that
precision; every row is printed.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd
import yaml
from shared_data import PUBLISHED

from joulecast.estimator.api import estimate
from joulecast.estimator.plan import plan
from joulecast.estimator.train_run import train_run
from joulecast.features.lowering import workload

TABLE = PUBLISHED / "resnet50_throughput.yaml"
MODEL = "resnet-50"
SATURATED = 0.85  # a row's throughput over its precision's best published one, from which the GPU sets the pace
STEPS = 100  # the README's benchmark iterations; a run's rate does not depend on its length (no evaluation, no loader)


def rows(kind: str) -> pd.DataFrame:
    return pd.DataFrame(yaml.safe_load(TABLE.read_text())[kind])


def _fusions(layout: str) -> tuple[str, ...]:
    return ("channels_last",) if layout == "nhwc" else ()


def _training_rate(r, estimator: str | None) -> float:
    run = train_run(MODEL, r.gpu, global_batch=int(r.batch), steps=STEPS, dtype=r.dtype, optimizer="sgd",
                    fusions=_fusions(r.layout), estimator=estimator)
    return float(run.tokens_per_s)


def _inference_rate(r, estimator: str | None) -> float:
    w = workload(MODEL, phase="inference", batch=int(r.batch), dtype=r.dtype, fusions=_fusions(r.layout))
    return int(r.batch) / float(estimate(w, r.gpu, estimator=estimator).time_s)


def _data_parallel_rate(r, estimator: str | None) -> float:
    job = dict(name=f"{r.platform} {r.precision}", model=MODEL, steps=STEPS, global_batch=int(r.gpus * r.batch),
               micro_batch=int(r.batch), dtype=r.dtype, optimizer="sgd", fusions=list(_fusions(r.layout)),
               sites=[dict(name="dgx", gpu=r.gpu, gpus=int(r.gpus), grid="WORLD")], strategies=["ddp"])
    return job["global_batch"] * STEPS / plan(job, estimator=estimator).plans[0].time_s


_RATES = {"training": _training_rate, "layout": _training_rate, "inference": _inference_rate,
          "data_parallel": _data_parallel_rate}
KINDS = ("training", "data_parallel", "layout", "inference")


def score(kind: str) -> pd.DataFrame:
    """Each published row with joulecast's images a second (the shipped model's and physics'), and measured over
    estimated time (above 1: the GPU took longer than estimated)."""
    table = rows(kind)
    rate = _RATES[kind]
    out = table.assign(hybrid_images_per_s=[rate(r, None) for r in table.itertuples()],
                       physics_images_per_s=[rate(r, "physics") for r in table.itertuples()])
    best = out.groupby(["gpu", "precision"])["images_per_s"].transform("max")
    return out.assign(time_ratio=out["hybrid_images_per_s"] / out["images_per_s"],
                      physics_time_ratio=out["physics_images_per_s"] / out["images_per_s"],
                      saturated=out["images_per_s"] >= SATURATED * best)


def scaling(data_parallel: pd.DataFrame, training: pd.DataFrame) -> pd.DataFrame:
    """Each 8-GPU row's rate over its GPUs times its one-GPU row's (same platform and precision), published and as
    the plan and `train-run` give them (the shipped model's)."""
    one = training.set_index(["platform", "precision"])
    rows = []
    for r in data_parallel.itertuples():
        single = one.loc[(r.platform, r.precision)]
        rows.append(dict(platform=r.platform, precision=r.precision, gpus=r.gpus,
                         published=r.images_per_s / (r.gpus * single["images_per_s"]),
                         planned=r.hybrid_images_per_s / (r.gpus * single["hybrid_images_per_s"])))
    return pd.DataFrame(rows)


def layout_gain(layout: pd.DataFrame) -> pd.DataFrame:
    """Each platform's NHWC rate over its NCHW rate (same precision and batch), published and as `train-run` gives
    them (the shipped model's and physics')."""
    rows = []
    for (platform, precision), g in layout.groupby(["platform", "precision"], sort=False):
        by = g.set_index("layout")
        gain = lambda col: float(by.loc["nhwc", col] / by.loc["nchw", col])  # noqa: E731 - one ratio a column
        rows.append(dict(platform=platform, precision=precision, batch=int(by.loc["nchw", "batch"]),
                         published=gain("images_per_s"), estimated=gain("hybrid_images_per_s"),
                         physics=gain("physics_images_per_s")))
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Time MAPE and the median of measured over estimated time, by GPU and precision, over the rows that saturate
    the GPU (every training row does: one batch a configuration)."""
    frame = frame[frame["saturated"]]
    ape = lambda col: 100 * float(np.mean(np.abs(1 / col - 1)))  # noqa: E731 - time error, from a rate's ratio
    return pd.DataFrame([dict(gpu=gpu, precision=precision, rows=len(g),
                              time_mape_pct=ape(g["time_ratio"]), time_ratio_median=float(g["time_ratio"].median()),
                              physics_time_mape_pct=ape(g["physics_time_ratio"]))
                         for (gpu, precision), g in frame.groupby(["gpu", "precision"], sort=False)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scored = {kind: score(kind) for kind in KINDS}
    scale = scaling(scored["data_parallel"], scored["training"])
    layout_rows = scored.pop("layout")
    layout = layout_gain(layout_rows)
    if args.json:
        print(json.dumps({**{kind: dict(rows=frame.to_dict(orient="records"),
                                        summary=summary(frame).to_dict(orient="records"))
                             for kind, frame in scored.items()}, "scaling": scale.to_dict(orient="records"),
                          "layout": dict(rows=layout_rows.to_dict(orient="records"),
                                         gain=layout.to_dict(orient="records"))}))
        return 0
    for kind, frame in scored.items():
        shown = frame[["platform", "precision", "batch", "images_per_s", "hybrid_images_per_s",
                       "physics_images_per_s", "time_ratio", "saturated"]]
        print(f"ResNet-50 {kind}, images a second: published, joulecast (shipped model, physics); time_ratio: "
              f"measured over estimated time\n{shown.round(3).to_string(index=False)}\n\n"
              f"scored where the GPU is saturated (throughput >= {SATURATED:.2f} x its best published):\n"
              f"{summary(frame).round(3).to_string(index=False)}\n")
    print(f"8 GPUs' rate over 8 x one GPU's, published and planned:\n{scale.round(3).to_string(index=False)}\n")
    shown = layout_rows[["platform", "layout", "batch", "images_per_s", "hybrid_images_per_s", "physics_images_per_s"]]
    print(f"ResNet-50 layout pair, images a second: published, joulecast (shipped model, physics)\n"
          f"{shown.round(1).to_string(index=False)}\n\nNHWC (channels_last) over NCHW, published and estimated "
          f"(shipped model, physics):\n{layout.round(3).to_string(index=False)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
