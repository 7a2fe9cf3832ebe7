"""The host's dispatch time a kernel launch, read from a collection's own host-bound rows (issue 31).

    python experiments/host_dispatch.py [--store data/measurements] [--gpu h200] [--collection h200-first]
        [--kernels] [--energaizer [PATH]] [--json]

PyTorch eager dispatches every kernel from the host. Where the GPU finishes each kernel sooner than the host
launches the next, a pass takes the host's time, which depends on the machine's CPU and software, not on the GPU.
Physics combines the two as a 2-norm (`joulecast.features.arch.OVERLAP_NORM`); for each model row (prefill, decode,
training: not the single-kernel loops, whose one op a call dispatches with less Python around it) that physics
calls host-bound at the default dispatch (`arch.HOST_DISPATCH_S`, set on EnergAIzer's hosts), this inverts the rule
for the dispatch a launch: sqrt(measured time^2 - GPU busy time^2) / launches (a workload of one kernel, which
physics paces by the slower side, measured time / launches; a training step, whose launches pay autograd's host time
too and whose sides overlap by their own norm, `arch.TRAINING_DISPATCH_FACTOR` and `TRAINING_OVERLAP_NORM`, by that
norm over the launches times the factor). The median over those rows is the
machine's figure, which a collection's dataset card states as `host_dispatch_s` (`joulecast.data.store` gives it
to the collection's rows, and training rebuilds their physics with it). A row whose measured time is not above
physics' GPU busy time implies nothing and is left out.

`--kernels` reads the single-kernel loops instead (each a call of one op: `torch.matmul`,
`F.scaled_dot_product_attention`, `torch._scaled_mm`, ...). On h200-first their figure is no lower than the models':
21.8 us a launch over 12 loops (quartiles 16.8-27.9), ranging with the op's Python from 12.6-21.4 us (bf16 matmuls)
and 16.6-31.0 us (fp8 `_scaled_mm`, its scales checked on the host) to 22.3-27.2 us (attention) and 24.9-29.8 us
(norms), so the card's one figure serves both. (Read with the 2-norm before one kernel's loop was paced by the
slower side: 17.3 us; with the three loops whose time physics' GPU busy time passes counted as 0 us, 12.6, which,
taken for the loops, brought H200 physics energy MAPE 15.6 -> 14.6 % but power 10.7 -> 12.9 %; not shipped.)

On h200-first (the lent H200: a Firecracker microVM with 16 cores, PyTorch 2.11) the decode rows take the same
time at batch 1, 16 and 64 (19.8, 19.2, 18.7 ms for llama-3-8b's 1,002 launches): host-bound, whatever the GPU does.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd
from shared_data import EXTERNAL, MEASUREMENTS

from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.importers.energaizer import import_energaizer
from joulecast.data.store import load_collection
from joulecast.features import arch
from joulecast.features.design import physics_batch
from joulecast.features.refs import resolve
from joulecast.training.dataset import setting_of, usable


def implied_dispatch(store: str, gpu: str, collection: str, kernels: bool = False) -> list[dict]:
    """Per model row (single-kernel loop with `kernels`) that physics calls host-bound at the default dispatch: its
    launches, GPU busy time and the dispatch a launch its measured time implies."""
    rows, _ = usable(load_collection(store, gpu, collection))
    return implied_by_rows(rows[(rows["phase"] == "kernel") == kernels].reset_index(drop=True))


def implied_by_rows(rows: pd.DataFrame) -> list[dict]:
    """`implied_dispatch` of measured rows, each on its own GPU."""
    clock, limit = setting_of(rows)
    out = []
    for i, row in rows.iterrows():
        spec = lookup_gpu(row["gpu"])
        w = resolve(row["workload_ref"])
        c = None if np.isnan(clock[i]) else min(clock[i], spec.boost_clock_mhz)
        _, totals = physics_batch([w], spec, c, None if np.isnan(limit[i]) else limit[i])
        busy, host = float(totals.gpu_busy_s[0]), float(totals.host_s[0])
        # a training step's launches pay autograd's host time too, and its sides overlap by their own norm
        training = row["phase"] == "training"
        factor = arch.TRAINING_DISPATCH_FACTOR if training else 1.0
        norm = arch.TRAINING_OVERLAP_NORM if training else arch.OVERLAP_NORM
        per_launch = float(totals.host_dispatch_s[0])  # the default: the workload states none
        launches = host / (per_launch * factor) if per_launch else 0.0
        if host <= busy or not launches:
            continue
        measured = float(row["time_s"])
        if measured <= busy:  # physics' GPU time passes the measured time: no dispatch to read
            continue
        # physics' rule inverted: a workload of one kernel takes the larger of the two, any other their norm
        host_s = measured if len(w.kernels) == 1 else (measured ** norm - busy ** norm) ** (1 / norm)
        out.append(dict(measurement_id=row["measurement_id"], gpu=row["gpu"], launches=int(round(launches)),
                        measured_ms=1e3 * measured, gpu_busy_ms=1e3 * busy,
                        dispatch_us=1e6 * host_s / (launches * factor)))
    return out


def _summary(rows: list[dict]) -> dict:
    values = [r["dispatch_us"] for r in rows]
    return dict(rows=len(rows), median_dispatch_us=float(np.median(values)),
                quartiles_us=[float(np.percentile(values, q)) for q in (25, 75)],
                default_us=1e6 * arch.HOST_DISPATCH_S["eager"])


def energaizer_hosts(path: str, as_json: bool) -> int:
    """The dispatch each EnergAIzer GPU's file implies (one machine a file), by GPU: measured, not stated on its rows
    (`joulecast.features.arch.HOST_DISPATCH_S` says what stating it did)."""
    rows = import_energaizer(path)
    by_gpu = {}
    for gpu, part in rows[~rows["flag_failed_run"]].groupby("gpu"):
        implied = implied_by_rows(part.reset_index(drop=True))
        if implied:
            by_gpu[str(gpu)] = _summary(implied)
    if as_json:
        print(json.dumps({"by_gpu": by_gpu}, indent=1))
        return 0
    for gpu, summary in by_gpu.items():
        low, high = summary["quartiles_us"]
        print(f"{gpu}: median {summary['median_dispatch_us']:.1f} us a launch over {summary['rows']} host-bound model "
              f"rows (quartiles {low:.1f}-{high:.1f}); the default is {summary['default_us']:.0f} us")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=str(MEASUREMENTS))
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--collection", default="h200-first")
    parser.add_argument("--kernels", action="store_true", help="the single-kernel loops' rows, not the models'")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--energaizer", nargs="?", const=str(EXTERNAL / "energaizer-artifact"), metavar="PATH",
                        help="each GPU's file of the EnergAIzer artifact instead (its machine's own host-bound rows)")
    args = parser.parse_args()
    if args.energaizer:
        return energaizer_hosts(args.energaizer, args.json)
    rows = implied_dispatch(args.store, args.gpu, args.collection, args.kernels)
    what = "single-kernel loop" if args.kernels else "model"
    if not rows:
        print(f"{args.collection}: no host-bound {what} rows", file=sys.stderr)
        return 1
    summary = dict(collection=args.collection, **_summary(rows), rows_read=what)
    if args.json:
        print(json.dumps({"summary": summary, "rows": rows}, indent=1))
        return 0
    for r in rows:
        print(f"{r['measurement_id']:40s} {r['launches']:5d} launches  measured {r['measured_ms']:7.2f} ms  "
              f"GPU busy {r['gpu_busy_ms']:7.2f} ms  -> {r['dispatch_us']:5.1f} us a launch")
    low, high = summary["quartiles_us"]
    print(f"{summary['collection']}: median {summary['median_dispatch_us']:.1f} us a launch over {len(rows)} "
          f"host-bound {what} rows (quartiles {low:.1f}-{high:.1f}); the default is {summary['default_us']:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
