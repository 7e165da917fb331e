"""The Metal3 IPPool tests' helpers (this folder's modules): the Go Metal3 IPAM's state (``go_state``) and
every write to a namespace recorded from watches and replayed (``history``)."""

import pytest

pytest.register_assert_rewrite("go_state", "history")
