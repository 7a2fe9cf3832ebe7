"""Every `joulecast` command the README shows runs as written (exit 0), in a folder laid out as the README's reader
has it: the repository's `data/` beside `../shared`. The files it names for the reader to bring (a list of prompts,
a model's config.json, a traced kernel list) are made from the data at hand; outputs land in a temporary folder.
Left out, each with its reason in SKIPPED: installs, what needs an NVIDIA GPU, a model registry, a server that keeps
running, or minutes of training (each has tests of its own). Its Python example runs statement by statement, and
its job file plans."""

import ast
import json
import re
import shlex
import shutil

import pytest
from conftest import ENERGAIZER, REPO, SHARED, require_path

from joulecast.cli import main

SKIPPED = {  # a phrase of the command -> why this test leaves it out
    "pip install": "installs (the two gate commands; .ci/run runs the second)",
    "collect h200-first --out": "measures on an NVIDIA GPU",
    "collect h200-prefill --gpu": "measures on an NVIDIA GPU",
    "joulecast train": "trains the model for minutes (tests/training, test_cli's quick training)",
    "joulecast retrain": "trains twice (tests/training/test_onboard.py)",
    "models:/": "reads a model registry that a fresh clone has none of (tests/training/test_onboard.py)",
    "joulecast serve": "starts a server that keeps running (tests/test_service.py)",
}


def readme_commands() -> list[str]:
    """The README's shell commands, each joined across its continued lines, its comment left off."""
    text = (REPO / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        current = ""
        for line in block.splitlines():
            code = re.sub(r"\s+#.*$", "", line).strip()
            current = f"{current} {code}".strip()
            if current.endswith("\\"):
                current = current[:-1].rstrip()
                continue
            if current:
                commands.append(current)
            current = ""
    return commands


COMMANDS = [c for c in readme_commands() if c.startswith("joulecast ")
            and not any(phrase in c for phrase in SKIPPED)]


def test_the_readme_shows_commands_and_this_test_runs_most_of_them():
    every = readme_commands()
    assert every[0].startswith("pip install . && joulecast estimate ")  # the gate's first command
    assert len(COMMANDS) >= 25 and len(COMMANDS) + sum(any(p in c for p in SKIPPED) for c in every) == len(every)


@pytest.fixture(scope="module")
def reader_folder(tmp_path_factory):
    """A folder laid out as the README's reader has it, with the files the README asks them to bring."""
    require_path(ENERGAIZER)
    root = tmp_path_factory.mktemp("reader")
    work = root / "joulecast"
    work.mkdir()
    (work / "data").symlink_to(REPO / "data")
    (root / "shared").symlink_to(SHARED)
    (work / "prompts.csv").write_text("input_len,output_len\n128,32\n512,64\n64,16\n")
    # a trace as Azure publishes it: three hours, the second the busiest
    stamps = [f"2023-11-16 {h:02d}:{m:02d}:{s:02d}" for h, step in ((10, 60), (11, 6), (12, 120))
              for t in range(0, 3600, step) for m, s in [divmod(t, 60)]]
    (work / "trace.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    + "".join(f"{t},{300 + 7 * i % 900},{20 + 13 * i % 300}\n"
                                              for i, t in enumerate(stamps)))
    (work / "path" / "to").mkdir(parents=True)
    config = json.loads((SHARED / "reference" / "models" / "Qwen--Qwen2-1.5B.json").read_text())["config"]
    (work / "path" / "to" / "config.json").write_text(json.dumps(config))
    shutil.copy(ENERGAIZER / "workloads" / "all" / "bertmodel_large_pbf16_b16_s128_modeprefill.json",
                work / "trace.json")
    return work


@pytest.fixture
def own_catalog():
    """A command's user catalog (`gpu add` into this test's JOULECAST_HOME) forgotten after it: the loaded catalog
    is cached, and a later test would see the added GPU once its home was gone."""
    yield
    from joulecast.data.gpus import reload_catalog

    reload_catalog()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_readme_command_runs_as_written(command, reader_folder, tmp_path, monkeypatch, capsys, own_catalog):
    monkeypatch.chdir(reader_folder)
    monkeypatch.setenv("JOULECAST_HOME", str(tmp_path / "home"))  # `gpu add` writes the user's catalog there
    # outputs the command names by an absolute path (/tmp/store) go to this test's own folder; the others stay in
    # the reader's, which is this test run's too
    argv = [str(tmp_path / arg.removeprefix("/tmp/")) if arg.startswith("/tmp/") else arg
            for arg in shlex.split(command)[1:]]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.strip()
    if "--json" in argv:
        json.loads(out)


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def test_the_readme_python_example_runs(monkeypatch):
    """Each statement in turn, in the repository's folder (its job file's path is relative to it); a statement with
    `...` in place of a list is a shape for the reader to fill, not run (estimate_many has tests of its own)."""
    monkeypatch.chdir(REPO)
    (block,) = _blocks("python")
    namespace = {"pandas": pytest.importorskip("pandas")}
    ran = 0
    for node in ast.parse(block).body:
        if any(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(node)):
            continue
        exec(compile(ast.Module([node], type_ignores=[]), "README.md", "exec"), namespace)
        ran += 1
    assert ran >= 20 and namespace["est"].energy_j > 0 and namespace["sw"].best is not None
    assert namespace["result"].plans and all(p.energy_j > 0 for p in namespace["result"].plans)


def test_the_readme_job_file_plans(tmp_path, capsys):
    (block,) = _blocks("yaml")
    job = tmp_path / "job.yaml"
    job.write_text(block)
    assert main(["plan", str(job), "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert [p["strategy"].split()[0] for p in plans] == ["ddp", "fsdp", "diloco", "streaming-diloco", "fedavg"]
