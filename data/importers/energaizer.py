"""Importer for the EnergAIzer ISPASS'26 artifact (measured prefill/vision inference energy on A10 and A100).

PATH holds `measurements/<gpu>.csv` and `workloads/{all,dvfs}/*.json` as in
shared/data/external/energaizer-artifact (see its PROVENANCE.md). Each measurement row is joined with its traced
kernel list; rows without one (fp32 runs, some sequence lengths and eager variants) get the catalog lowering of the
model, batch, sequence and precision in the row name, marked `kernel_list = lowered`.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pandas as pd

from joulecast.data.errors import DataError, InputError, UnknownNameError
from joulecast.data.gpus import gpu as catalog_gpu
from joulecast.data.importers._common import read_csv
from joulecast.data.schema import CLOCK_STEP_MHZ, conform
from joulecast.data.workload_ref import catalog_ref, kernels_ref

log = logging.getLogger(__name__)

# The CSV's stem names the GPU (PROVENANCE: a100 is the A100-40GB-PCIe at its default 250 W cap; dvfs.csv is the
# same A100). Power limits are the catalog's defaults.
GPU_OF_FILE = {"a10": "a10", "a100": "a100-pcie-40gb", "dvfs": "a100-pcie-40gb", "h100": "h100-sxm"}
MODELS = {"gpt2model_gpt2": "gpt2", "bertmodel_large": "bert-large", "optmodel_opt-1p3b": "opt-1.3b",
          "qwen2model_qwen2-1p5b": "qwen2-1.5b", "vitmodel_large": "vit-large", "mobilevitmodel_small": "mobilevit-small",
          "resnet101_": "resnet-101"}
FAMILY = {"gpt2": "gpt2", "bert-large": "bert", "opt-1.3b": "opt", "qwen2-1.5b": "qwen2", "vit-large": "vit",
          "mobilevit-small": "mobilevit", "resnet-101": "resnet"}
_NAME = re.compile(r"^(?P<model>.+?)_p(?P<prec>bf16|fp32|fp16)_b(?P<batch>\d+)(?:_s(?P<seq>\d+))?(?:_mode(?P<mode>[a-z]+))?"
                   r"(?P<eager>_attneager)?_freq(?P<freq>\d+)_iter(?P<iter>\d+)\.csv$")
# PROVENANCE: good rows span about 30 s of repeats; failed (out-of-memory) runs span 1.3-2.2 s at near-idle power.
MIN_SPAN_S = 10.0
# Incomplete traces. The convolutional models' record only convolutions, activations and the classifier GEMM:
# ResNet-101's has 205 launches where eager PyTorch runs 344 (batch norms, residual adds, pooling). Host-bound small
# runs take 27-30 us per launch (PROVENANCE), and ResNet-101 at batch 8 on the A100 took 9.6 ms: 28 us x 344
# launches, not 47 us x 205. GPT-2's lacks the torch.where of its causal mask, a pass over every attention score.
# These rows take the catalog lowering, which has those kernels.
INCOMPLETE_TRACES = {"resnet-101", "mobilevit-small", "gpt2"}
# Rows without the `attneager` mark ran eager attention too: the 15 A100 configurations measured with and without
# it take the same time (OPT-1.3B, batch 8, 1024 tokens: 0.350 s both), which a fused kernel that never writes the
# scores out could not match, and every trace, marked or not, is eager. Lowered rows are lowered eager likewise.
EAGER_AS_RUN = "eager"
NUMBERS = ("energy", "time", "avg_freq", "temp")  # a measurements CSV's measured columns, each a number a row


def parse_name(name: str) -> dict[str, object]:
    """Split a measurement row's `workload` field into its parts."""
    match = _NAME.match(name) if isinstance(name, str) else None  # a blank cell reads as NaN
    if not match or match["model"] not in MODELS:
        raise DataError(f"energaizer: cannot parse workload name {name!r}")
    seq = int(match["seq"]) if match["seq"] else None
    return dict(model=MODELS[match["model"]], raw_model=match["model"], dtype=match["prec"], batch=int(match["batch"]),
                seq=seq, phase=match["mode"] or "inference", attention="eager" if match["eager"] else "flash",
                freq=float(match["freq"]), iterations=int(match["iter"]))


def _trace_path(root: Path, file_stem: str, parts: dict[str, object]) -> Path | None:
    stem = f"{parts['raw_model']}_p{parts['dtype']}_b{parts['batch']}"
    stem += f"_s{parts['seq']}_mode{parts['phase']}" if parts["seq"] else f"_freq{int(parts['freq'])}"
    order = ("dvfs", "all") if file_stem == "dvfs" else ("all", "dvfs")
    for folder in order:
        path = root / "workloads" / folder / f"{stem}.json"
        if path.exists():
            return path
    return None


def import_energaizer(path: str | Path) -> pd.DataFrame:
    """Read every `measurements/*.csv` under PATH into the measurement schema.

    Raises:
        InputError: PATH does not hold the artifact layout.
        DataError: a CSV lacks a column or a row name cannot be parsed.
    """
    root = Path(path)
    csvs = sorted((root / "measurements").glob("*.csv"))
    if not csvs:
        raise InputError("PATH", f"{root} has no measurements/*.csv (expected the energaizer-artifact layout)")
    frames = []
    for csv in csvs:
        gpu_of_file(csv)
        raw = read_csv(csv, ("workload", *NUMBERS), NUMBERS)
        frames.append(_rows(root, csv, raw))
    table = conform(pd.concat(frames, ignore_index=True), f"import of {path}")
    counts = table["kernel_list"].value_counts().to_dict()
    log.info("energaizer: %d rows (%d joined with a traced kernel list, %d lowered from the catalog); %d flagged as "
             "failed runs", len(table), counts.get("traced", 0), counts.get("lowered", 0), int(table["flag_failed_run"].sum()))
    return table


def gpu_of_file(csv: Path) -> str:
    """The catalog GPU a measurements CSV's stem names: the artifact's own stems (GPU_OF_FILE), else any catalog
    name or alias (`h100-sxm.csv`, `h100_sxm5.csv`: a later release's file for another card)."""
    if csv.stem in GPU_OF_FILE:
        return GPU_OF_FILE[csv.stem]
    try:
        return catalog_gpu(csv.stem.replace("_", "-")).name
    except UnknownNameError:
        raise DataError(f"{csv}: unknown GPU file stem {csv.stem!r}; known: {', '.join(GPU_OF_FILE)} or a catalog "
                        "GPU's name or alias ('joulecast gpus')") from None


def _rows(root: Path, csv: Path, raw: pd.DataFrame) -> pd.DataFrame:
    gpu = gpu_of_file(csv)
    power_limit_w = catalog_gpu(gpu).power_limit_w
    records = []
    for i, row in enumerate(raw.itertuples(index=False)):
        parts = parse_name(row.workload)
        trace = None if parts["model"] in INCOMPLETE_TRACES else _trace_path(root, csv.stem, parts)
        if trace is not None:
            ref, kernel_list = kernels_ref(str(trace)), "traced"
        else:
            ref = catalog_ref(parts["model"], phase=parts["phase"] if parts["seq"] else None, batch=parts["batch"],
                              seq=parts["seq"], dtype=parts["dtype"], attention=EAGER_AS_RUN)
            kernel_list = "lowered"
        time_s = row.time / 1e3
        too_short = bool(parts["iterations"] * time_s < MIN_SPAN_S)
        records.append(dict(
            measurement_id=f"{csv.stem}:{row.workload.removesuffix('.csv')}", source="energaizer",
            provenance=f"energaizer-artifact/measurements/{csv.name} row {i + 2}", workload_ref=ref,
            kernel_list=kernel_list, model=parts["model"], model_family=FAMILY[parts["model"]], phase=parts["phase"],
            batch=parts["batch"], seq=parts["seq"], dtype=parts["dtype"], attention=parts["attention"], gpu=gpu,
            sm_clock_mhz=row.avg_freq, sm_clock_min_mhz=parts["freq"], sm_clock_max_mhz=parts["freq"],
            power_limit_w=power_limit_w, temperature_c=row.temp, iterations=parts["iterations"], repeats=1,
            time_s=time_s, energy_j=row.energy, method="power_samples",
            power_w=row.energy / time_s if time_s else float("inf"),  # a time of 0: the schema refuses it by name
            flag_clock_moved=bool(abs(row.avg_freq - parts["freq"]) > CLOCK_STEP_MHZ),
            flag_window_short=too_short, flag_failed_run=too_short,
        ))
    return pd.DataFrame.from_records(records)
