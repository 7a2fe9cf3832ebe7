"""The few exception classes joulecast raises; the CLI maps them to one stderr line and exit code 2."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np


class JoulecastError(Exception):
    """Base class: a problem the user can fix, described in one line."""

    exit_code = 2


class InputError(JoulecastError, ValueError):
    """A bad value in user input: names the field, the value and what is allowed."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


class UnknownNameError(InputError):
    """An unknown catalog name; suggests close names (among `known`), else lists `listed` (default `known`: a catalog
    whose aliases are known too lists its own names only)."""

    def __init__(self, field: str, value: str, known: Iterable[str], hint: str = "",
                 listed: Iterable[str] | None = None):
        known = sorted(known)
        close = difflib.get_close_matches(str(value).lower(), known, n=3, cutoff=0.5)
        shown = known if listed is None else sorted(listed)
        msg = f"unknown {value!r}"
        msg += f"; did you mean {', '.join(repr(c) for c in close)}?" if close else f"; known: {', '.join(shown)}."
        super().__init__(field, msg + (f" {hint}" if hint else ""))


class UnknownFieldError(InputError):
    """A field a mapping does not take (a job file's, a request body's): the closest one it does where a name is near
    (a typo: 'tokenz', 'tokens'), then every field it takes."""

    def __init__(self, field: str, name: str, allowed: Iterable[str], what: str = "unknown field"):
        allowed = list(dict.fromkeys(allowed))
        close = difflib.get_close_matches(str(name), allowed, n=1, cutoff=0.6)
        super().__init__(field, f"{what}; " + (f"did you mean {close[0]!r}? " if close else "")
                         + f"allowed: {', '.join(allowed)}")


class DataError(JoulecastError):
    """A data file that breaks its schema: names the file and the field or column."""


@contextmanager
def fields_under(prefix: str) -> Iterator[None]:
    """An InputError raised inside names its field under `prefix` (`batch` -> `models[1].batch`), where it does not
    already: a check deep in the lowering knows the value, not which entry of the user's file held it."""
    try:
        yield
    except InputError as exc:
        if exc.field == prefix or exc.field.startswith((f"{prefix}.", f"{prefix}[")):
            raise
        raise InputError(f"{prefix}.{exc.field}", exc.message) from None


@contextmanager
def field_renamed(names: dict[str, str]) -> Iterator[None]:
    """An InputError raised inside under one of `names`' keys names its value instead: the importers say PATH, as
    `joulecast import` takes it, where `--import SOURCE=PATH` or `audit --path` gave the folder."""
    try:
        yield
    except InputError as exc:
        if exc.field not in names:
            raise
        raise InputError(names[exc.field], exc.message) from None


def require(condition: bool, field: str, message: str) -> None:
    """Raise `InputError(field, message)` unless `condition` holds (user input only, never `assert`)."""
    if not condition:
        raise InputError(field, message)


def require_switch(value: object, field: str) -> bool:
    """`value` as a bool where it is one (JSON true or false, numpy's too), else one InputError naming `field`: a
    string's or a number's truth would read "no" or infinity as yes."""
    require(isinstance(value, (bool, np.bool_)), field, f"must be true or false, got {value!r}")
    return bool(value)


def is_choice(value: object, allowed: Iterable[str]) -> bool:
    """Whether `value` is a name among `allowed` (a name only: an array's `in` would compare it elementwise, a list's
    would be no name)."""
    return isinstance(value, str) and value in tuple(allowed)


def hyphenated(name: str) -> str:
    """A catalog name as people write it, read the catalog's way: lower case, spaces and underscores as hyphens
    ('NVIDIA H100 PCIe' -> 'nvidia-h100-pcie', 'TensorRT_LLM' -> 'tensorrt-llm')."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def choice_message(value: object, allowed: Iterable[str], what: str = "") -> str:
    """"unknown 'flsh'; did you mean 'flash'? allowed: flash, eager" (`what` names the kind: "unknown fusion 'x'"):
    the line `require_choice` raises, for checks that raise their own error (a data file's `DataError`)."""
    allowed = tuple(allowed)
    close = difflib.get_close_matches(value, allowed, n=1, cutoff=0.6) if isinstance(value, str) else []
    return (f"unknown {what + ' ' if what else ''}{value!r}; " + (f"did you mean {close[0]!r}? " if close else "")
            + f"allowed: {', '.join(map(str, allowed))}")


def require_choice(value: object, allowed: Iterable[str], field: str, what: str = "") -> None:
    """Raise unless `value` is one of `allowed`, with `choice_message`'s line."""
    allowed = tuple(allowed)  # read twice: a generator given would be spent by the first
    if not is_choice(value, allowed):
        raise InputError(field, choice_message(value, allowed, what))
