"""Reading user-supplied files with errors that name the option and the file; writing files atomically."""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from joulecast.data.errors import InputError

# The largest input file read (a kernel list of a whole training step is a few MB): a device or a mistaken path to
# a huge file is refused before it is read.
MAX_INPUT_BYTES = 256 * 2**20


def read_text(path: str | Path, field: str) -> str:
    """The text of a user-supplied file given through `field`; anything but a readable regular file (missing, a
    folder, a device such as /proc/self/mem, a path through a file, unreadable, too large) -> one-line InputError."""
    path = Path(path)
    try:
        if not path.is_file():
            what = "is a folder" if path.is_dir() else "does not exist" if not os.path.lexists(path) else \
                "is not a regular file"
            raise InputError(field, f"{str(path)!r} {what}; give a file")
        if path.stat().st_size > MAX_INPUT_BYTES:
            raise InputError(field, f"{str(path)!r} is over {MAX_INPUT_BYTES // 2**20} MB")
        # UTF-8 whatever the locale, and a byte-order mark dropped: spreadsheets and Windows editors write one
        # ('\ufeffinput_len' was no column of a requests CSV; json.loads refuses it)
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:  # NotADirectoryError (f.json/x.json), PermissionError, ...
        raise InputError(field, f"cannot read {str(path)!r} ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise InputError(field, f"{str(path)!r} is not a text file") from None


_BOOL_TAG = "tag:yaml.org,2002:bool"


@functools.cache
def yaml_loader() -> type:
    """PyYAML's SafeLoader with two of YAML 1.2's readings where PyYAML follows YAML 1.1:
    - a number in exponent form is a float as written (`tokens: 1e10`, `3.35e3`). YAML 1.1 wants a dot and a signed
      exponent (1.0e+10) and reads the others as strings, so a user's file said 'must be an integer, got '1e10''.
    - only true and false are booleans. YAML 1.1's yes, no, on, off, y and n are text, so Norway's grid code (`grid:
      NO`) or a site named `on` stays as written; a flag given `no` says it takes true or false."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                                 re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
                                 list("-+0123456789."))
    Loader.yaml_implicit_resolvers = {  # the subclass's own copy since the call above: YAML 1.1's booleans out
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
        for first, resolvers in Loader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    return Loader


def load_yaml(text: str) -> Any:
    """A user's YAML file's content, read by `yaml_loader` (raises yaml.YAMLError as yaml.safe_load does)."""
    import yaml

    return yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a SafeLoader subclass


def kind_of(value: Any) -> str:
    """What a YAML or JSON value is, as its writer would say it ('nothing (an empty file or field)', 'a list'), not
    Python's type name ('NoneType')."""
    if value is None:
        return "nothing (an empty file or field)"
    for kinds, said in (((bool,), "true or false"), ((int, float), "a number"), ((str,), "text"),
                        ((list, tuple), "a list"), ((dict,), "a mapping")):
        if isinstance(value, kinds):
            return f"{said} ({value!r})" if said in ("a number", "text") and len(repr(value)) <= 40 else said
    return type(value).__name__


def whole_number(value: Any) -> Any:
    """JSON has one number type: a float that is a whole number (1e9, 8.0) as the integer it names; anything else (a
    fraction, NaN, infinity, a string) as given, for its check to refuse by name."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def check_count(value: Any, field: str, high: int, *, low: int = 1, high_text: str | None = None,
                whole: bool = False) -> int:
    """A count from `low` to `high` (`high_text` where it reads better, '2^40'), else one line naming `field`; `whole`:
    as a file gives it (JSON's 128.0 is 128), the value said as its writer would say it (`kind_of`)."""
    if whole:
        value = whole_number(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        said = kind_of(value) if whole else repr(value)
        raise InputError(field, f"must be {'a whole number' if whole else 'an integer'} from {low} to "
                                f"{high_text or f'{high:,}'}, got {said}")
    return int(value)


REQUEST_LENGTHS = ("input_len", "output_len")


def request_pairs(pairs: Any) -> Any:
    """A JSON list of requests, [input_len, output_len] pairs or objects with those keys, their lengths
    `whole_number`s; anything else as given."""
    return [_request_lengths(r) for r in pairs] if isinstance(pairs, list) else pairs


def _request_lengths(request: Any) -> Any:
    if isinstance(request, list):
        return [whole_number(v) for v in request]
    if isinstance(request, dict):
        return {k: whole_number(v) if k in REQUEST_LENGTHS else v for k, v in request.items()}
    return request


def read_json(path: str | Path, field: str) -> Any:
    """Decode a JSON file given through `field` (e.g. ``--kernels``); unreadable or malformed -> one-line InputError."""
    text = read_text(path, field)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(field, f"{Path(path).name} is not valid JSON ({exc})") from None


def check_output_folder(path: str | Path, field: str) -> Path:
    """A folder the command will write into, checked before any work starts: it may exist (as a folder) or be
    creatable, and must be writable; otherwise one-line InputError. A folder not there yet is not made here (the
    writers make it, `write_atomic`): a command refused later for another reason leaves no empty folder behind."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(field, f"{str(path)!r} exists and is not a folder")
    nearest = Path(os.path.abspath(path))
    while not nearest.exists():  # the folder that exists, in which the missing ones would be made
        nearest = nearest.parent
    if not nearest.is_dir():
        raise InputError(field, f"cannot write into {str(path)!r} ({str(nearest)!r} is not a folder)")
    try:
        with tempfile.TemporaryFile(dir=nearest):
            pass
    except OSError as exc:
        raise InputError(field, f"cannot write into {str(path)!r} ({exc.strerror or type(exc).__name__})") from None
    return path


def write_atomic(path: Path, write: Callable[[Path], Any]) -> None:
    """`write(tmp)` a temporary file beside `path`, then move it into place: readers see the old file or the new one,
    never half of one, and an interrupted write leaves nothing behind. A link is followed: the file it leads to is
    replaced, the link kept."""
    path = Path(os.path.realpath(path))
    _check_replaceable_file(path, "out")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # as an ordinary open() would make it; mkstemp's 0600 is for secrets
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# A table of points (a sweep's, a plan sweep's) in the format its file's name says: CSV for a spreadsheet, Parquet
# (pyarrow) for the rest, a name without a suffix too, as before CSV was offered.
TABLE_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", "": "parquet"}


def table_format(path: str | Path, field: str) -> str:
    """The format `write_table` writes `path` in, by its suffix; another suffix is one line naming `field` (a
    `points.xlsx` would otherwise hold Parquet a spreadsheet cannot open)."""
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_FORMATS:
        raise InputError(field, f"{str(path)!r}: name a .csv or .parquet file (the suffix sets the format), "
                                f"got {suffix}")
    return TABLE_FORMATS[suffix]


def write_table(frame: Any, path: str | Path, field: str = "out") -> None:
    """`frame` (a pandas DataFrame) written atomically to `path`, as CSV or Parquet by its suffix (`table_format`)."""
    if table_format(path, field) == "csv":
        write_atomic(Path(path), lambda tmp: frame.to_csv(tmp, index=False))
    else:
        write_atomic(Path(path), lambda tmp: frame.to_parquet(tmp, index=False))


def check_output_file(path: str | Path, field: str) -> Path:
    """A file the command will write (replacing one there), checked before any work starts: not a folder, in a
    folder it may create and write into; otherwise one-line InputError."""
    path = Path(path)
    if path.is_dir():
        raise InputError(field, f"{str(path)!r} is a folder; give a file name")
    _check_replaceable_file(path, field)
    check_output_folder(path.parent, field)
    return path


def _check_replaceable_file(path: Path, field: str) -> None:
    """Refuse a target that is there and no regular file (a device, a pipe, a socket): written atomically, it would be
    replaced by the new file, as /dev/full once was, not written through."""
    if os.path.exists(path) and not os.path.isfile(path):
        raise InputError(field, f"{str(path)!r} is not a regular file; give a file name (a file there is replaced "
                                "whole)")


def check_replaceable_folder(path: str | Path, marker: str, field: str) -> Path:
    """A folder the command writes whole (`write_folder_atomic`), checked before any work starts: new, empty, or one
    written so before (holding `marker`), which it replaces; a file or another folder is the user's and is refused
    (one-line InputError), as is a parent the command cannot write into."""
    path = Path(os.path.realpath(path))  # "." names its folder; a link, the folder it leads to (replaced in place)
    if os.path.lexists(path):
        if not path.is_dir():
            raise InputError(field, f"{str(path)!r} is a file; give a new folder or one holding {marker}")
        if any(path.iterdir()) and not (path / marker).is_file():
            raise InputError(field, f"{str(path)!r} is a folder without {marker}, which would be replaced whole; "
                                    f"give a new folder or one holding {marker}")
    check_output_folder(path.parent, field)
    return path


def write_folder_atomic(path: str | Path, write: Callable[[Path], Any], marker: str, field: str = "out") -> Path:
    """`write(tmp)` a whole folder beside `path`, then move it into place (a folder already there is replaced only
    once the new one is complete): an interrupted write, a SIGTERM or a full disk leaves the old folder, or none.
    Only a folder `check_replaceable_folder` allows is replaced (`marker`: the file a written folder holds)."""
    path = check_replaceable_folder(path, marker, field)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))  # empty: a folder renames onto it
    try:
        write(tmp)
        os.chmod(tmp, 0o777 & ~_umask())
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
