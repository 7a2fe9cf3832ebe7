"""Reading user-supplied files with errors that name the option and the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from joulecast.errors import InputError


def read_json(path: str | Path, field: str) -> Any:
    """Decode a JSON file given through `field` (e.g. ``--kernels``); missing or malformed -> one-line InputError."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(field, f"file {str(path)!r} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(field, f"{path.name} is not valid JSON ({exc})") from None
