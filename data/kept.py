"""Values kept for the very objects they were made from: a bounded cache looked up by the objects' identities
(`id`), for objects that cannot be hashed (a GPU spec with dicts in it) or whose hash costs more than the work kept
(a table of pairs). Each entry holds its objects, so no id is reused while it is kept."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


def kept_for(cache: dict[Any, tuple[tuple, T]], objects: tuple, make: Callable[[], T], limit: int,
             content: Hashable = ()) -> T:
    """`make()` for these very `objects` (and a hashable `content` beside them, where the value depends on more),
    made once while kept; the cache emptied when it holds `limit` entries."""
    key = (*map(id, objects), content)
    entry = cache.get(key)
    if entry is None or any(a is not b for a, b in zip(entry[0], objects)):
        if len(cache) >= limit:
            cache.clear()
        entry = cache[key] = (objects, make())
    return entry[1]
