"""Finding a trained estimator: the shipped default, a folder, or an MLflow model URI."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from joulecast.errors import InputError

if TYPE_CHECKING:
    from joulecast.training.residual import ResidualModel

DEFAULT_DIR = Path(__file__).parent / "default_model"
PHYSICS = "physics"


@functools.cache
def load_estimator(uri: str | None = None) -> "ResidualModel | None":
    """`None`: the shipped default; `"physics"`: no residual; a folder saved by `joulecast train --out`;
    or an MLflow URI (`models:/joulecast@champion`, `runs:/<run id>/model`)."""
    if uri == PHYSICS:
        return None  # before importing xgboost: the GPU machine's collector runs without it
    from joulecast.training.residual import ResidualModel

    if uri is None:
        if not (DEFAULT_DIR / "estimator.json").exists():
            return None  # a source checkout before the first `joulecast train`: physics only
        return ResidualModel.load(DEFAULT_DIR)
    if uri.startswith(("models:/", "runs:/")):
        import mlflow

        try:
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
        except Exception as exc:  # MLflow raises its own exception types for unknown runs, models and aliases
            raise InputError("--estimator", f"cannot load {uri!r} ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
        folder = local / "artifacts" / "estimator"
        return ResidualModel.load(folder if folder.exists() else local)
    folder = Path(uri)
    if not (folder / "estimator.json").exists():
        raise InputError("--estimator", f"{uri!r} is not an estimator folder (no estimator.json), nor models:/ or runs:/")
    return ResidualModel.load(folder)
