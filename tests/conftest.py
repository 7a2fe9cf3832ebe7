"""Shared fixtures: the `../shared` folder of published data (skip where absent, fail in CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("JOULECAST_SHARED", REPO.parent / "shared"))
EXTERNAL = SHARED / "data" / "external"
ENERGAIZER = EXTERNAL / "energaizer-artifact"


def require_path(path: Path) -> Path:
    """Return `path`, or skip (fail under JOULECAST_REQUIRE_SHARED=1) when it is missing."""
    if path.exists():
        return path
    reason = f"needs {path} (the ../shared data folder beside the repository)"
    if os.environ.get("JOULECAST_REQUIRE_SHARED") == "1":
        pytest.fail(f"JOULECAST_REQUIRE_SHARED=1 but {reason}")
    pytest.skip(reason)


def require_module(name: str, what: str, required_by: str):
    """Import `name`, or skip where it is not installed; fail instead where the variable `required_by` is 1 (as
    .ci/run sets JOULECAST_REQUIRE_TORCH, having installed the CPU build of torch)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        reason = f"needs {what} ({exc})"
        if os.environ.get(required_by) == "1":
            pytest.fail(f"{required_by}=1 but this test {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def energaizer() -> Path:
    return require_path(ENERGAIZER)


@pytest.fixture(scope="session")
def external() -> Path:
    """shared/data/external: the published measurement sets, one folder each."""
    return require_path(EXTERNAL)


@pytest.fixture(autouse=True, scope="session")
def isolated_home(tmp_path_factory):
    """GPUs added with `joulecast gpu add` go to $JOULECAST_HOME: a fresh folder, never the user's own."""
    from joulecast.data.gpus import reload_catalog

    previous = os.environ.get("JOULECAST_HOME")
    os.environ["JOULECAST_HOME"] = str(tmp_path_factory.mktemp("joulecast-home"))
    reload_catalog()
    yield
    if previous is None:
        os.environ.pop("JOULECAST_HOME", None)
    else:
        os.environ["JOULECAST_HOME"] = previous
    reload_catalog()


@pytest.fixture
def user_home(tmp_path, monkeypatch):
    """A per-test $JOULECAST_HOME, with the catalog reloaded before and after."""
    from joulecast.data.gpus import reload_catalog

    monkeypatch.setenv("JOULECAST_HOME", str(tmp_path / "home"))
    reload_catalog()
    yield tmp_path / "home"
    monkeypatch.undo()
    reload_catalog()
