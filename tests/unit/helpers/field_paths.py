"""Reading the value a refusal's field path (``spec.addresses[2]``) names, to check it against the refusal."""

from __future__ import annotations

import re
from typing import Any


def value_at(spec: Any, field: str) -> Any:
    """The value at ``field`` of ``{"spec": spec}``; None when a key on the way is absent."""
    node = {"spec": spec}
    for name, index in re.findall(r"([A-Za-z]+)(?:\[(\d+)\])?", field):
        node = node.get(name)
        if index:
            node = node[int(index)]
    return node
