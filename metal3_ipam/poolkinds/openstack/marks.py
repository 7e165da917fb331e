"""The marks on a floating IP written one tag at a time (Neutron's single-tag calls), so that a mark another
cluster writes meanwhile is never lost, and what a claim is told of a floating IP homed at another cluster."""

from __future__ import annotations

import dataclasses
from typing import Iterable

from metal3_ipam.poolkinds.openstack import homes
from metal3_ipam.poolkinds.openstack.client import FloatingIP, Neutron
from metal3_ipam.poolkinds.openstack.pool import OpenStackPool


def tagged(neutron: Neutron, fip: FloatingIP, tags: Iterable[str]) -> FloatingIP:
    """``fip`` with ``tags`` added, one at a time: the tags another cluster adds meanwhile (its marks) stay."""
    missing = sorted(set(tags) - set(fip.tags))
    for tag in missing:
        neutron.add_tag(fip.id, tag)
    return dataclasses.replace(fip, tags=(*fip.tags, *missing)) if missing else fip


def marked(neutron: Neutron, fip: FloatingIP, change: homes.Change) -> FloatingIP:
    """``fip`` with the marks of ``change`` written: its tags added first, then the others removed, one at a time
    (never a moment without a mark, and no other cluster's mark lost)."""
    fip = tagged(neutron, fip, change.add)
    for tag in change.remove:
        neutron.remove_tag(fip.id, tag)
    return dataclasses.replace(fip, tags=tuple(t for t in fip.tags if t not in change.remove))


def homed_elsewhere_message(pool: OpenStackPool, fip: FloatingIP, there: homes.Home) -> str:
    return (f"floating IP {fip.address} ({fip.id}) of this claim's key, in the project of {pool.text}'s cloud, is "
            f"homed at {there.text}, an object of another cluster, where a claim carries the key too (a copy of "
            "this claim restored from a directory while its source runs?): both hold one IP, and neither claim's "
            "deletion releases it while the other lives; delete one of the two claims")
