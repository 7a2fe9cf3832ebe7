"""Where the experiments read the published data: `../shared/data/external` beside the repository, or under
$JOULECAST_SHARED where that is set (as the tests set it)."""

from __future__ import annotations

import os
from pathlib import Path

SHARED = Path(os.environ.get("JOULECAST_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))
EXTERNAL = SHARED / "data" / "external"
