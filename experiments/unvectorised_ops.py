"""Elementwise ops that ATen runs unvectorised (`joulecast.features.kinds.streaming.UNVECTORISED_OPS`): the H200's
kernel rows that set their cost, and physics with and without it on every set it touches.

    python experiments/unvectorised_ops.py [--json]

1. The H200's elementwise kernel rows (data/measurements/h200: h200-masked, h200-eager's division, h200-first's
   add and multiply): ps an element, DRAM bytes an element as physics counts them, the rate in TB/s and SM cycles an
   element (time x SMs x clock / elements). The broadcast ops and the casts run at about the same rate whatever their
   bytes: the shipped constant is the median of the broadcast rows.
2. Physics energy, time and power MAPE and mean signed error, without the unvectorised cost (every op vectorised)
   and with it: EnergAIzer's A10 and A100-PCIe rows at 900 MHz and the A100's DVFS sweep (510-1,410 MHz; none of it
   used to set the constant), and the H200's eager prefill passes (h200-eager).
3. The checks where the cost was not set, measured after it was set and kept out of training: the same broadcast
   ops in fp16 and fp32 (data/probes/h200/h200-masked-dtypes), and Llama-3-8B's and Mistral-7B's eager prefill
   (h200-eager-check), physics' signed errors, the passes' with and without the cost.
"""

from __future__ import annotations

import argparse
import json
from contextlib import contextmanager, nullcontext
from pathlib import Path
from unittest import mock

import pandas as pd
from physics_baseline import DEFAULT, evaluate, mape_table

import joulecast
from joulecast.data.importers.energaizer import import_energaizer
from joulecast.data.store import load_collection
from joulecast.features import physics
from joulecast.features.kinds import streaming
from joulecast.features.refs import resolve

REPO = Path(__file__).resolve().parents[1]
MEASUREMENTS = REPO / "data" / "measurements"
BROADCAST = ("where", "mask_add", "div")  # the plan ops whose kernels have a stride-0 operand


@contextmanager
def vectorised():
    """Physics with every elementwise op vectorised (the model before the unvectorised cost)."""
    with mock.patch.object(streaming, "UNVECTORISED_OPS", ()):
        streaming._op_table.cache_clear()
        try:
            yield
        finally:
            streaming._op_table.cache_clear()


def kernel_rates() -> pd.DataFrame:
    """The H200's single elementwise kernels: their measured rate an element."""
    rows = pd.concat([load_collection(MEASUREMENTS, "h200", c) for c in ("h200-masked", "h200-eager", "h200-first")])
    rows = rows[rows["phase"] == "kernel"]
    gpu = joulecast.gpu("h200")
    out = []
    for row in rows.itertuples():
        op = row.measurement_id.split("/")[0]
        table = resolve(row.workload_ref).columns
        if table["kind"][0] != "elementwise":
            continue
        elements = float(table["cols"][0])
        features = physics.analyze(pd.DataFrame(table), gpu, sm_clock_mhz=row.sm_clock_mhz)[0]
        out.append(dict(item=row.measurement_id, op=op, kernel_op=table["op"][0], elements_m=elements / 1e6,
                        ps_an_element=row.time_s / elements * 1e12,
                        bytes_an_element=float(features["dram_bytes"].iloc[0]) / elements,
                        tb_per_s=float(features["dram_bytes"].iloc[0]) / row.time_s / 1e12,
                        sm_cycles=row.time_s * gpu.sm_count * row.sm_clock_mhz * 1e6 / elements,
                        sm_clock_mhz=row.sm_clock_mhz, power_w=row.power_w))
    return pd.DataFrame(out).sort_values(["op", "elements_m"]).reset_index(drop=True)


def dtype_check() -> pd.DataFrame:
    """Physics' signed errors (%) on the broadcast ops in the dtypes the cost was not set on."""
    rows = load_collection(REPO / "data" / "probes", "h200", "h200-masked-dtypes")
    scored = evaluate(rows)
    return pd.DataFrame({"item": scored["measurement_id"], "time_ms": scored["time_s"] * 1e3,
                         "time_bias": scored["time_bias"], "energy_bias": scored["energy_bias"],
                         "power_bias": scored["power_bias"]}).round(2)


def pass_check() -> pd.DataFrame:
    """Physics' signed errors (%) on eager passes the cost was not set on, with and without it."""
    rows = load_collection(REPO / "data" / "probes", "h200", "h200-eager-check")
    parts = {}
    for model, context in (("without", vectorised), ("with", nullcontext)):
        with context():
            parts[model] = evaluate(rows)
    out = pd.DataFrame({"item": rows["measurement_id"], "energy_j": rows["energy_j"]})
    for model, scored in parts.items():
        out[f"energy_bias_{model}"], out[f"time_bias_{model}"] = scored["energy_bias"], scored["time_bias"]
    return out.round(2)


def physics_tables() -> pd.DataFrame:
    """Physics' errors without and with the unvectorised cost, per set."""
    energaizer = import_energaizer(DEFAULT)
    energaizer = energaizer[~energaizer["flag_failed_run"]]
    dvfs = energaizer["measurement_id"].str.startswith("dvfs:")
    eager = load_collection(MEASUREMENTS, "h200", "h200-eager")
    sets = {"900 MHz": energaizer[~dvfs], "A100 DVFS sweep": energaizer[dvfs],
            "H200 eager passes": eager[eager["phase"] == "prefill"]}
    parts = []
    for model, context in (("vectorised", vectorised), ("unvectorised cost", nullcontext)):
        with context():
            for name, rows in sets.items():
                table = mape_table(evaluate(rows), ["gpu"]).reset_index()
                parts.append(table.assign(set=name, physics=model))
    out = pd.concat(parts, ignore_index=True)
    return out[["set", "gpu", "physics", *[c for c in out.columns if c not in ("set", "gpu", "physics")]]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the tables as JSON")
    args = parser.parse_args()
    rates = kernel_rates()
    broadcast = rates[rates["op"].isin(BROADCAST)]
    cycles = float(broadcast["sm_cycles"].median())
    errors = physics_tables().sort_values(["set", "gpu", "physics"], ascending=[True, True, False])
    check, passes = dtype_check(), pass_check()
    if args.json:
        print(json.dumps({"kernels": rates.round(4).to_dict("records"), "sm_cycles_fitted": round(cycles, 4),
                          "sm_cycles_shipped": streaming.UNVECTORISED_SM_CYCLES_PER_ELEMENT,
                          "physics": errors.to_dict("records"), "dtype_check": check.to_dict("records"),
                          "pass_check": passes.to_dict("records")},
                         default=float))
        return
    pd.set_option("display.width", 160)
    print("H200 elementwise kernels (bf16): measured ps an element, physics' DRAM bytes an element, the rate they "
          "reach and SM cycles an element")
    print(rates.round(3).to_string(index=False))
    print(f"\nthe broadcast rows' median: {cycles:.3f} SM cycles an element (shipped: "
          f"{streaming.UNVECTORISED_SM_CYCLES_PER_ELEMENT}); as FP32-lane slots "
          f"{cycles * 128:.0f} on Hopper's 128 lanes an SM, {cycles * 64:.0f} on Ampere's 64")
    print("\nphysics alone, MAPE and mean signed error % (bias > 0: physics reads high), without and with the cost:")
    print(errors.to_string(index=False))
    print("\nwhere the cost was not set (fp16, fp32; data/probes, measured after it was set): physics' signed errors %")
    print(check.to_string(index=False))
    print("\neager passes it was not set on (data/probes), physics' signed errors % with and without the cost:")
    print(passes.to_string(index=False))
    print(f"\nthe {len(broadcast)} broadcast rows: {broadcast['ps_an_element'].min():.2f}-"
          f"{broadcast['ps_an_element'].max():.2f} ps an element over {broadcast['elements_m'].min():.0f}M-"
          f"{broadcast['elements_m'].max():.0f}M elements")


if __name__ == "__main__":
    main()
