"""Where `data/serving_engines.yaml`'s vLLM figures come from: a serving engine's host work per decode step.

For each ML.ENERGY release and GPU (one GPU per run, models with a catalog workload), what the physics of the kernels
alone leaves out of a measured step: extra time per running sequence (ms) and the GPU's power during it (x idle).
vLLM 0.5.4's constants are the pooled figures of --derive-from's v2 rows, and its range the lowest and highest of
their rows' own (per_row_ms_min / max: the spread an estimate's interval takes); the other GPU's rows check them (host
work takes the same time on any GPU). See `joulecast.training.engine_overhead`.

Usage: python experiments/serving_overhead.py [PATH-TO-shared/data/external] [--derive-from a100-sxm4-40gb] [--json]
"""

from __future__ import annotations

import argparse
import json

import pandas as pd
from shared_data import EXTERNAL

from joulecast.data.importers import import_source
from joulecast.features import arch
from joulecast.training.dataset import usable
from joulecast.training.engine_overhead import kernels_alone, pooled

DEFAULT = EXTERNAL


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", default=str(DEFAULT))
    parser.add_argument("--derive-from", default="a100-sxm4-40gb", help="the GPU whose v2 rows set the constants")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    table = import_source("mlenergy", args.path)
    # v3's partial kernel lists too: the work they lack is part of what this measures
    rows, _ = usable(table, partial=True)
    frame = kernels_alone(rows)
    frame["release"] = frame["measurement_id"].str.split(":").str[0]
    table = pd.DataFrame([{"release": release, "gpu": gpu, **pooled(part)}
                          for (release, gpu), part in frame.groupby(["release", "gpu"])])
    table["host_ms_per_sequence"] = table.pop("host_s_per_sequence") * 1e3
    derived = table.set_index(["release", "gpu"]).loc[("mlenergy-v2", args.derive_from)]
    shipped = arch.SERVING_ENGINES["vllm-0.5.4"]
    result = dict(derived_from=args.derive_from, host_ms_per_sequence=round(float(derived["host_ms_per_sequence"]), 3),
                  power_over_idle=round(float(derived["power_over_idle"]), 2),
                  shipped=dict(host_ms_per_sequence=shipped["host_s_per_sequence"] * 1e3,
                               power_over_idle=shipped["power_over_idle"]),
                  by_release_gpu=table.round(3).to_dict(orient="records"))
    if args.json:
        print(json.dumps(result, indent=1, default=float))
        return 0
    pd.set_option("display.width", 160)
    print("Extra over the kernels' physics per decode step (ML.ENERGY, one GPU per run):")
    print(table.round(3).to_string(index=False))
    print(f"\nvLLM 0.5.4 (v2) from the {args.derive_from} rows: {result['host_ms_per_sequence']:.3f} ms per running "
          f"sequence at {result['power_over_idle']:.2f}x idle power (shipped: "
          f"{shipped['host_s_per_sequence'] * 1e3:.3f} ms, {shipped['power_over_idle']:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
