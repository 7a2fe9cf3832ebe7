"""Finding a trained estimator: the shipped default, a folder, or an MLflow model URI."""

from __future__ import annotations

import functools
from pathlib import Path

from joulecast.data.errors import InputError
from joulecast.estimator.residual import TREES_FILE, Residual

DEFAULT_DIR = Path(__file__).parent / "default_model"
PHYSICS = "physics"


@functools.cache
def load_estimator(uri: str | None = None) -> Residual | None:
    """`None`: the shipped default; `"physics"`: no residual; a folder saved by `joulecast train --out`;
    or an MLflow URI (`models:/joulecast@champion`, `runs:/<run id>/model`)."""
    if uri == PHYSICS:
        return None
    if uri is None:
        if not (DEFAULT_DIR / "estimator.json").exists():
            return None  # a source checkout before the first `joulecast train`: physics only
        return load_folder(DEFAULT_DIR, "the shipped model")
    if uri.startswith(("models:/", "runs:/")):
        try:
            import mlflow
        except ImportError:
            raise InputError("--estimator", f"{uri!r} is an MLflow URI: install the training extra "
                                            "(pip install 'joulecast[train]')") from None
        try:
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
        except Exception as exc:  # MLflow raises its own exception types for unknown runs, models and aliases
            raise InputError("--estimator", f"cannot load {uri!r} ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
        folder = local / "artifacts" / "estimator"
        return load_folder(folder if folder.exists() else local, uri)
    folder = Path(uri)
    if not (folder / "estimator.json").exists():
        raise InputError("--estimator", f"{uri!r} is not an estimator folder (no estimator.json), nor models:/ or runs:/")
    return load_folder(folder, uri)


def load_folder(folder: Path, name: str) -> Residual:
    """The fitted model in `folder`; one saved before tree arrays were shipped needs converting once."""
    if not (folder / TREES_FILE).exists():
        raise InputError("--estimator", f"{name} ({folder}) was saved without tree arrays; add them once with "
                                        f"python -c \"from joulecast.training.residual import convert; "
                                        f"convert('{folder}')\" (needs pip install 'joulecast[train]')")
    return Residual.load(folder)
