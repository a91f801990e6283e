"""The one serialization of what leaves the matcher: compact JSON, UTF-8.

Match records, dead letters and `tsm replay`'s output are written by it, so
that the job and the replay give the same bytes for the same record.
"""

from __future__ import annotations

import json
from typing import Any

# `json.dumps(value, separators=(",", ":"), ensure_ascii=False)`, without a new
# encoder per call (json.dumps makes one whenever it is given separators)
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)

encode_text = _ENCODER.encode  # the text of `encode`: (value) -> str


def encode(value: Any) -> bytes:
    """Compact JSON, UTF-8; raises UnicodeEncodeError on a lone surrogate."""
    return _ENCODER.encode(value).encode()
