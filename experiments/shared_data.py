"""Where the experiments read their data, wherever they run from: the published sets in `../shared/data/external`
beside the repository (or under $JOULECAST_SHARED where that is set, as the tests set it), and the project's own
store, probes and repeats in the repository's `data/` (a path relative to the working directory read nothing from
`experiments/`, and a script said its set had no rows)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("JOULECAST_SHARED", REPO.parent / "shared"))
EXTERNAL = SHARED / "data" / "external"
MEASUREMENTS = REPO / "data" / "measurements"   # the project's own collections
PROBES = REPO / "data" / "probes"
REPEATS = REPO / "data" / "repeats"
PUBLISHED = REPO / "data" / "published"   # figures others published, copied with their sources


def training_measurements():
    """The rows `joulecast train` reads by default from the repository's root (its own store and the published
    sets with workloads), read from here wherever the script runs."""
    from joulecast.cli import load_measurements

    return load_measurements(None, None, store=MEASUREMENTS, external=EXTERNAL)
