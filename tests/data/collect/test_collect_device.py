"""data/collect/collect_device.sh, the one command a lent GPU machine runs, on this machine: `nvidia-smi` and the
collector's measuring run are stand-ins on PATH (a `python3` that writes an h200-first row as the plan's collection
where the real one would measure, and runs everything else as the real interpreter), the rest of the script as is."""

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "data" / "collect" / "collect_device.sh"
FIRST = REPO / "data" / "measurements" / "h200" / "h200-first"

PYTHON3 = f"""#!{sys.executable}
import os, shutil, subprocess, sys
from pathlib import Path
args = sys.argv[1:]
if args[:3] == ["-m", "pip", "install"]:
    sys.exit(0)  # the package is installed here already
if args[:2] == ["-m", "joulecast.cli"] and "collect" in args:
    plan = args[args.index("collect") + 1]
    gpu = args[args.index("--gpu") + 1] if "--gpu" in args else "h200"
    if "--dry-run" in args:
        print(f"1 items (0 already stored) on {{gpu}}: {{plan}}")
        sys.exit(0)
    folder = Path(args[args.index("--out") + 1]) / gpu / plan
    folder.mkdir(parents=True, exist_ok=True)
    import pandas as pd
    first = Path({str(FIRST)!r})
    pd.read_parquet(first / "part-00000.parquet").head(1).to_parquet(folder / "part-00000.parquet")
    shutil.copy(first / "CARD.yaml", folder / "CARD.yaml")
    print(f"1 rows written to {{folder}}")
    sys.exit(0)
sys.exit(subprocess.call([{sys.executable!r}, *args]))
"""


def _run(tmp_path: Path, *plans: str, limit_s: int = 60,
         **env_extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("collect_device.sh needs bash and coreutils' timeout")
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir(exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    (bin_dir / "python3").write_text(PYTHON3)
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'name, temperature.gpu'\necho 'NVIDIA H200, 38'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(out), "COLLECT_STORE": str(tmp_path / "store"),
           "COLLECT_LIMIT_S": str(limit_s), "HOME": str(tmp_path), **env_extra}
    done = subprocess.run(["bash", str(SCRIPT), *plans], env=env, capture_output=True, text=True, timeout=300)
    return done, out


def test_one_plan_comes_back_as_its_collection_folder(tmp_path):
    done, out = _run(tmp_path, "h200-thermal")
    assert done.returncode == 0, done.stderr[-2000:]
    folder = out / "h200" / "h200-thermal"
    assert len(pd.read_parquet(folder / "part-00000.parquet")) == 1 and (folder / "CARD.yaml").exists()
    assert (out / "nvidia-smi.csv").read_text().startswith("name")
    assert not (out / "collections.tar.gz").exists()


def test_several_plans_come_back_as_one_archive_and_a_rerun_keeps_what_was_stored(tmp_path):
    done, out = _run(tmp_path, "h200-thermal", "h200-waiting")
    assert done.returncode == 0, done.stderr[-2000:]
    with tarfile.open(out / "collections.tar.gz") as archive:
        names = {Path(n).as_posix().lstrip("./") for n in archive.getnames()}
    for plan in ("h200-thermal", "h200-waiting"):
        assert {f"h200/{plan}/part-00000.parquet", f"h200/{plan}/CARD.yaml"} <= names
    log = (out / "collect.log").read_text()
    assert "h200-thermal" in log and "h200-waiting" in log
    # the tool returns at most 8 files: the archive, the log and the two nvidia-smi readings
    assert len([p for p in out.rglob("*") if p.is_file()]) <= 8
    again, out = _run(tmp_path, "h200-dispatch")  # the same machine's store: earlier collections travel too
    assert again.returncode == 0
    assert (out / "h200" / "h200-thermal" / "CARD.yaml").exists() and (out / "h200" / "h200-dispatch").is_dir()


def test_a_plan_with_no_time_left_is_skipped_and_the_run_says_so(tmp_path):
    done, out = _run(tmp_path, "h200-thermal", "h200-waiting", limit_s=0)
    assert done.returncode == 124
    log = (out / "collect.log").read_text()
    assert "skipped h200-thermal" in log and "skipped h200-waiting" in log


def test_collect_gpu_measures_the_plans_as_the_lent_card_it_names(tmp_path):
    """COLLECT_GPU=h100-sxm (an H100 lent for an H200 plan): both the dry run and the measuring run are given --gpu."""
    done, out = _run(tmp_path, "h200-thermal", COLLECT_GPU="h100-sxm")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "h100-sxm" / "h200-thermal" / "CARD.yaml").exists() and not (out / "h200").exists()
    assert "on h100-sxm: h200-thermal" in (out / "collect.log").read_text()
