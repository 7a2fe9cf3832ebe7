"""Reading user-supplied files with errors that name the option and the file; writing files atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from joulecast.data.errors import InputError


def read_json(path: str | Path, field: str) -> Any:
    """Decode a JSON file given through `field` (e.g. ``--kernels``); missing or malformed -> one-line InputError."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(field, f"file {str(path)!r} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(field, f"{path.name} is not valid JSON ({exc})") from None


def write_atomic(path: Path, write: Callable[[Path], Any]) -> None:
    """`write(tmp)` a temporary file beside `path`, then move it into place: readers see the old file or the new one,
    never half of one, and an interrupted write leaves nothing behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
