"""The rooms stand on each other one way: data <- features <- estimator <- training, with the collector
(`joulecast.data.collect`) beside training above the estimator, and the facade (CLI, render) on top. An estimate
imports none of the training stack."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOM_DIRS = {"data": "data", "features": "features", "estimator": "estimator", "training": "training",
             "joulecast": "joulecast"}
# room -> the rooms it may import (itself always)
ALLOWED = {
    "data": set(),
    "features": {"data"},
    "estimator": {"data", "features"},
    "training": {"data", "features", "estimator"},
    "collect": {"data", "features", "estimator"},
    "joulecast": {"data", "features", "estimator", "training", "collect"},
}
# (pyarrow is not among them: pandas imports it where it is installed)
HEAVY = ("xgboost", "sklearn", "scipy", "mlflow", "matplotlib", "torch", "pynvml", "tqdm")


def room_of_module(name: str) -> str | None:
    """joulecast.data.collect.plan -> collect; joulecast.features.x -> features; joulecast.cli -> joulecast."""
    parts = name.split(".")
    if parts[0] != "joulecast":
        return None
    if parts[1:3] == ["data", "collect"]:
        return "collect"
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else "joulecast"


def room_of_file(path: Path) -> str:
    relative = path.relative_to(REPO).parts
    if relative[:2] == ("data", "collect"):
        return "collect"
    return relative[0]


def imports(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside functions (lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def import_graph() -> dict[str, dict[str, set[str]]]:
    """room -> imported room -> the files that import it."""
    graph: dict[str, dict[str, set[str]]] = {}
    for folder in ROOM_DIRS.values():
        for path in (REPO / folder).rglob("*.py"):
            room = room_of_file(path)
            for module in imports(path):
                target = room_of_module(module)
                if target and target != room:
                    graph.setdefault(room, {}).setdefault(target, set()).add(str(path.relative_to(REPO)))
    return graph


def test_no_import_runs_back_up_the_staircase():
    back = [f"{room} -> {target} ({', '.join(sorted(files))})" for room, targets in import_graph().items()
            for target, files in targets.items() if target not in ALLOWED[room]]
    assert not back, "back edges: " + "; ".join(back)


def test_the_walk_sees_lazy_imports(tmp_path):
    """The checker is no stub: an import inside a function is found."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from joulecast.training.train import train\n")
    assert room_of_module(next(m for m in imports(probe) if m.startswith("joulecast.training"))) == "training"


def test_an_estimate_imports_no_training_stack():
    """Nor the collector or the audit: parsing the CLI's arguments imports no room below the facade."""
    code = ("import sys\nfrom joulecast.cli import main\n"
            "assert main(['estimate', '--model', 'gpt2', '--gpu', 'a10', '--json']) == 0\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), "
            "sorted(m for m in sys.modules if m.startswith(('joulecast.training.', 'joulecast.data.collect'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip().splitlines()[-1] == "[] ['joulecast.training.gates']", out.stdout


def test_the_package_lists_its_api_and_loads_each_name_on_use():
    """`dir(joulecast)` is the API (`__all__`) and the version, not the facade's own imports; each name loads its
    room on first use (PEP 562) and is what that room defines."""
    import joulecast
    from joulecast.estimator import api

    assert dir(joulecast) == sorted([*joulecast.__all__, "__version__"])
    assert not {"importlib", "Path", "Any", "annotations"} & set(dir(joulecast))
    assert joulecast.estimate is api.estimate
    with pytest.raises(AttributeError, match="has no attribute 'estimat'"):
        joulecast.estimat  # noqa: B018 - the attribute lookup is the test
