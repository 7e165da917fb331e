"""Request bodies encoded by ``wire.encode`` mean to the API server what ``json.dumps`` made them mean.

Most bodies are JSON merge patches (``status``, ``metadata``): there, null
means "remove this field". A value JSON cannot carry (NaN, an infinity) was
sent by ``json.dumps`` as a bare ``NaN``, which the API server refuses (400:
the write is refused, and said so on the object); msgspec sends it as null,
which the API server reads as a removal, and the field silently goes. No code
builds such a value today (every number written is a count or a generation);
the encoder must not make one a deletion if some day one does.
"""

from __future__ import annotations

import json

import pytest

from metal3_ipam.controller.wire import encode


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_a_number_json_cannot_carry_is_refused_not_sent_as_a_removal(value):
    body = {"status": {"capacity": "4", "ratio": value}}
    try:
        sent = encode(body)
    except (ValueError, TypeError, OverflowError):
        return  # refused here, before anything is sent: as clear as the API server's 400
    read = json.loads(sent, parse_constant=lambda name: name)
    assert read["status"]["ratio"] is not None, \
        f"{value!r} is sent as {sent!r}: in a merge patch, null removes the field"
