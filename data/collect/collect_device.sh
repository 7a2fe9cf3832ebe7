#!/usr/bin/env bash
# Run one or more collection plans on the lent GPU machine in one command; leaves the rows (Parquet), their meter
# readings, the dataset cards and the logs under $OUT. The device tool returns at most 8 files, two folders deep: one
# plan's files travel as $OUT/<gpu>/<collection>/..., several plans' as one $OUT/collections.tar.gz.
#
#   bash data/collect/collect_device.sh [PLAN ...]        # default: h200-first
#
# COLLECT_GPU names the catalog GPU measured where the machine's card is not the plans' (an H100 lent for an H200
# plan: COLLECT_GPU=h100-sxm): each plan is refused on a card it does not name (`joulecast collect --gpu`).
# COLLECT_LIMIT_S (default 420) bounds all the plans together: each runs under the time left (a plan with under
# 30 s left is skipped) and is stopped with SIGTERM, which it takes like Ctrl-C: the rows measured so far are flushed
# and still come back, and a rerun on the same machine resumes.
#
# The machine has torch, pandas, pyarrow, pyyaml and nvidia-ml-py but not xgboost or mlflow: joulecast is installed
# without dependencies, and collecting imports neither.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PLANS=("${@:-h200-first}")
OUT="${OUT:?set OUT to the folder that comes back}"
STORE="${COLLECT_STORE:-/tmp/joulecast-store}"  # a rerun on the same machine resumes from it
DEADLINE=$((SECONDS + ${COLLECT_LIMIT_S:-420}))
GPU_ARGS=()
[[ -n "${COLLECT_GPU:-}" ]] && GPU_ARGS=(--gpu "$COLLECT_GPU")
export PYTHONUNBUFFERED=1
# --upgrade: a rerun on a warm machine installs the tree it was sent, not the one installed before
python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/joulecast-site "$REPO" 2>&1 \
  | tail -2 || true
export PYTHONPATH=/tmp/joulecast-site
cd /tmp  # never import the checkout's joulecast/ folder: the installed package maps the rooms
nvidia-smi --query-gpu=name,driver_version,power.limit,power.default_limit,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/nvidia-smi.csv"
nvidia-smi -q -d POWER,CLOCK,TEMPERATURE,PERFORMANCE >"$OUT/nvidia-smi-q.txt" 2>&1 || true
status=0
for plan in "${PLANS[@]}"; do
  left=$((DEADLINE - SECONDS))
  if ((left < 30)); then echo "skipped $plan: ${left} s left" | tee -a "$OUT/collect.log"; status=124; continue; fi
  python3 -m joulecast.cli collect "$plan" ${GPU_ARGS[@]+"${GPU_ARGS[@]}"} --dry-run | tail -1 | tee -a "$OUT/collect.log"
  timeout -s TERM -k 30 "$left" \
    python3 -m joulecast.cli -v collect "$plan" ${GPU_ARGS[@]+"${GPU_ARGS[@]}"} --out "$STORE" 2>&1 | tr '\r' '\n' | tee -a "$OUT/collect.log" || status=$?
done
# One part file a collection for the trip back (the store flushes every 20 s); the cards travel as written.
DEST="$OUT"
((${#PLANS[@]} > 1)) && DEST="$STORE.out" && rm -rf "$DEST" && mkdir -p "$DEST"
python3 - "$STORE" "$DEST" <<'PY'
import shutil, sys
from pathlib import Path
from joulecast.data import store
src, out = Path(sys.argv[1]), Path(sys.argv[2])
for folder in sorted(p for p in src.glob("*/*") if p.is_dir()):
    gpu, collection = folder.parent.name, folder.name
    rows = store.load_collection(src, gpu, collection)  # this collection's rows only, read once
    if len(rows):
        store.write_part(rows, out, gpu, collection)
    samples = store.load_samples(src, gpu, collection)
    if len(samples):
        store.write_samples(samples, out, gpu, collection)
    (out / gpu / collection).mkdir(parents=True, exist_ok=True)
    shutil.copy(folder / store.CARD_NAME, out / gpu / collection / store.CARD_NAME)
    print(f"{len(rows)} rows, {len(samples)} meter readings -> {out / gpu / collection}")
PY
[[ "$DEST" != "$OUT" ]] && tar czf "$OUT/collections.tar.gz" -C "$DEST" .
exit "$status"
