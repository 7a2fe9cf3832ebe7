"""The few exception classes joulecast raises; the CLI maps them to one stderr line and exit code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class JoulecastError(Exception):
    """Base class: a problem the user can fix, described in one line."""

    exit_code = 2


class InputError(JoulecastError, ValueError):
    """A bad value in user input: names the field, the value and what is allowed."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class UnknownNameError(InputError):
    """An unknown catalog name; suggests close names."""

    def __init__(self, field: str, value: str, known: Iterable[str], hint: str = ""):
        known = sorted(known)
        close = difflib.get_close_matches(str(value).lower(), known, n=3, cutoff=0.5)
        msg = f"unknown {value!r}"
        msg += f"; did you mean {', '.join(repr(c) for c in close)}?" if close else f"; known: {', '.join(known)}."
        super().__init__(field, msg + (f" {hint}" if hint else ""))


class DataError(JoulecastError):
    """A data file that breaks its schema: names the file and the field or column."""


def require(condition: bool, field: str, message: str) -> None:
    """Raise `InputError(field, message)` unless `condition` holds (user input only, never `assert`)."""
    if not condition:
        raise InputError(field, message)
