"""A second kind of pool (``OtherPool``) with the IPPool's lifecycle, read from ``spec.addresses``; registered by
the ``other_kind`` fixture."""

from __future__ import annotations

from ipam_objects import NS


OTHER = ("ipam.example.com", "OtherPool")


OTHER_FINALIZER = "ipam.metal3.io/otherpool"


def other_pool(name: str, addresses: list[str]) -> dict:
    return {"apiVersion": f"{OTHER[0]}/v1alpha2", "kind": OTHER[1], "metadata": {"name": name, "namespace": NS},
            "spec": {"addresses": addresses, "prefix": 24}}
