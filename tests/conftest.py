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


@pytest.fixture(scope="session")
def energaizer() -> Path:
    return require_path(ENERGAIZER)


@pytest.fixture(scope="session")
def external() -> Path:
    """shared/data/external: the published measurement sets, one folder each."""
    return require_path(EXTERNAL)
