"""The allocation key a claim of a QueuedIPPool carries (``queued-ipam.test.metal3-ipam.io/key``): the one
name the queued source knows its address by."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from metal3_ipam.core.problems import Problem

GROUP = "queued-ipam.test.metal3-ipam.io"
KEY_ANNOTATION = f"{GROUP}/key"
_KEY = re.compile(r"^q-[0-9a-f]{32}$")


def read_key(claim: Mapping[str, Any]) -> tuple[str | None, Problem | None]:
    """(key, None); (None, None) when the claim carries none yet; (None, problem) when it is not a key."""
    meta = claim.get("metadata") if isinstance(claim.get("metadata"), Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    key = annotations.get(KEY_ANNOTATION)
    if key is None:
        return None, None
    if not isinstance(key, str) or not _KEY.match(key):
        return None, Problem(f"metadata.annotations[{KEY_ANNOTATION}]", key,
                             "is not a key of the queued IPAM (q- and 32 hexadecimal digits)")
    return key, None


def new_key(rng: Any) -> str:
    """A fresh key, drawn from the pass's random source."""
    return f"q-{rng.getrandbits(128):032x}"
