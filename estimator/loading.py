"""Finding a trained estimator: the shipped default, a folder, or an MLflow model URI."""

from __future__ import annotations

import functools
import os
import zipfile
from pathlib import Path

from joulecast.data.errors import InputError
from joulecast.data.files import kind_of
from joulecast.estimator.residual import ESTIMATOR_FILE, TREES_FILE, Residual

DEFAULT_DIR = Path(__file__).parent / "default_model"
PHYSICS = "physics"


def default_tracking_uri() -> str:
    """$JOULECAST_TRACKING_URI, else the SQLite store `mlflow.db` in the working folder."""
    return os.environ.get("JOULECAST_TRACKING_URI") or f"sqlite:///{Path('mlflow.db').resolve()}"


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a local SQLite tracking URI (`sqlite:///mlflow.db`, `sqlite:////abs/mlflow.db`), else
    None."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return Path(tracking_uri.removeprefix("sqlite:///").split("?")[0])


def resolved_tracking_uri(tracking_uri: str | None = None) -> str:
    """Where a models:/ or runs:/ estimator is looked up: the URI given; else one the caller set
    (mlflow.set_tracking_uri, $MLFLOW_TRACKING_URI); else joulecast's own (`default_tracking_uri`)."""
    if tracking_uri:
        return tracking_uri
    import mlflow
    from mlflow.tracking._tracking_service.utils import is_tracking_uri_set

    return mlflow.get_tracking_uri() if is_tracking_uri_set() else default_tracking_uri()


def load_estimator(uri: str | os.PathLike | None = None, tracking_uri: str | None = None) -> Residual | None:
    """`None`: the shipped default; `"physics"`: no residual; a folder saved by `joulecast train --out`;
    or an MLflow URI (`models:/joulecast@champion`, `runs:/<run id>/model`) on `tracking_uri` (default: the one
    MLflow was set to, else `default_tracking_uri()`, where `joulecast train` logs). Loaded once a process for each
    (`load_estimator_again` reads it anew)."""
    return _load_once(_estimator_uri(uri), tracking_uri)


def load_estimator_again(uri: str | os.PathLike | None = None, tracking_uri: str | None = None) -> Residual | None:
    """`load_estimator` read anew, not from the process's cache (a service whose champion may move)."""
    return _load(_estimator_uri(uri), tracking_uri)


def _estimator_uri(uri: object) -> str | None:
    """An estimator argument as text (a path object's own), checked before the cache hashes it: anything but text,
    a path or None is one line naming the estimator."""
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if uri is not None and not isinstance(uri, str):
        raise InputError("--estimator", f"{PHYSICS!r}, an estimator folder or an MLflow URI (models:/..., runs:/...), "
                                        f"or none for the shipped model; got {kind_of(uri)}")
    return uri


def _load(uri: str | None, tracking_uri: str | None) -> Residual | None:
    """`load_estimator`'s reading, uncached."""
    if uri == PHYSICS:
        return None
    if uri is None:
        if not (DEFAULT_DIR / ESTIMATOR_FILE).exists():
            return None  # a source checkout before the first `joulecast train`: physics only
        return load_folder(DEFAULT_DIR, "the shipped model")
    if uri.startswith(("models:/", "runs:/")):
        try:
            import mlflow
        except ImportError:
            raise InputError("--estimator", f"{uri!r} is an MLflow URI: install the training extra "
                                            "(pip install 'joulecast[train]')") from None
        from mlflow.tracking._tracking_service.utils import _use_tracking_uri

        tracking = resolved_tracking_uri(tracking_uri)
        database = sqlite_path(tracking)
        if database is not None and not database.is_file():  # reading one would make an empty one and find nothing
            raise InputError("--tracking-uri", f"no MLflow store at {database} to load {uri!r} from (give "
                                               "--tracking-uri, or run joulecast train where it is)")
        try:
            # MLflow 3 resolves a registered version's logged model (models:/m-...) on the process's tracking store,
            # not the one passed: without it, --tracking-uri was ignored there and ./mlflow.db made and searched
            with _use_tracking_uri(tracking):
                local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, tracking_uri=tracking,
                                                                 registry_uri=tracking))
        except Exception as exc:  # MLflow raises its own exception types for unknown runs, models and aliases
            raise InputError("--estimator", f"cannot load {uri!r} ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
        folder = local / "artifacts" / "estimator"
        return load_folder(folder if folder.exists() else local, uri)
    folder = Path(uri)
    if not _is_file(folder / ESTIMATOR_FILE):
        raise InputError("--estimator", f"{uri!r} is not an estimator folder (no estimator.json), nor models:/ or runs:/")
    return load_folder(folder, uri)


_load_once = functools.cache(_load)


def _is_file(path: Path) -> bool:
    """Whether `path` is a file; False for a name the system cannot hold (too long: Path.exists raises there)."""
    try:
        return path.is_file()
    except OSError:
        return False


def load_folder(folder: Path, name: str) -> Residual:
    """The fitted model in `folder`; one saved before tree arrays were shipped needs converting once."""
    if not (folder / TREES_FILE).exists():
        raise InputError("--estimator", f"{name} ({folder}) was saved without tree arrays; add them once with "
                                        f"python -c \"from joulecast.training.residual import convert; "
                                        f"convert('{folder}')\" (needs pip install 'joulecast[train]')")
    try:
        return Residual.load(folder)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as exc:
        # a truncated copy, a hand edit, a file of another kind: the folder is named, not a decoder's traceback
        where = name if name == str(folder) else f"{name} ({folder})"
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        raise InputError("--estimator", f"{where} is not a readable saved model ({type(exc).__name__}: {detail}); "
                                        "save it again with joulecast train --out") from None
