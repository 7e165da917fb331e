"""The reconcile step of one pool: what exists, what should, and the writes between.

``reconcile(snapshot)`` looks at a pool, the claims for it (Metal3 IPClaims and
Cluster API IPAddressClaims), the addresses that reference it, and its Cluster,
and returns a ``Plan``. It is pure: ``metal3-ipam plan`` runs it and executes
the plan its own way. The controller runs the same decisions as ``plan_pass``
over the pool's ``Ledger``, kept across passes: for what changed since the
last pass, or for everything (``reconcile`` is that full pass over a ledger
loaded afresh).

What it guarantees, whatever it is shown:
- a claim that has an address keeps it: status is rebuilt from the addresses,
  never allocated anew (this is what makes ``clusterctl move`` safe);
- a claim whose address objects were deleted under it gets the IP its status
  names back (see ``kept``), before any other claim of the pool is served,
  and meanwhile that IP is kept from every other claim. Where it cannot have
  it (the IP left the pool, is reserved, preallocated or held by another
  live claim) it gets a new IP and a Warning Event ``AddressChanged`` naming
  both: whatever runs on the claim must be told, but a machine left without
  any address (an error) would be worse, and CAPM3 reads an IPClaim's error
  as a failed machine;
- a claim gets at most one address: extra ones (a lost race) are removed;
- every new address is a Metal3 IPAddress named ``<namePrefix>-<ip>``, also
  for Cluster API claims, so one name lock guards every allocation (the
  kinds whose pools have no namePrefix name their locks
  ``<pool>.<ip>.<tag>``, a sub-prefix's ``<pool>.<base>.<length>.<tag>``: see
  ``Pool.lock_name``; those of a pool of cluster scope are all in one
  namespace, ``Snapshot.lock_namespace``, so that the lock guards an IP across
  every namespace). A lock is known by its spec (pool, claim, address), never
  by its name: locks an earlier version named otherwise hold as they are. An
  IP whose lock name another IP's address holds is skipped, or the claim told
  so (``NAME_COLLISION``). Written lock, then
  the claim's visible address, then its status; released the other way round;
- a deleted claim's address outlives it until the deadline its pool kind
  derives from the stored objects (``PoolKind.release_after``): both keep
  their finalizers, the IP stays held, and the plan says when to pass again
  (``Plan.due``);
- a Cluster API claim served by an earlier IPAM with only a Cluster API
  IPAddress (the Go Metal3 IPAM names it ``<namePrefix>-<ip>``) keeps that
  address; its lock is created for it, and the pool hands out nothing new
  until every such lock is in place;
- an address object a claim is not bound to yet is taken up only when no
  other claim holds its IP and, written before its claim, the pool could have
  given it that IP; otherwise the claim is told (``AddressConflict``), holds
  nothing and is given nothing else while the address names it (``refusal``);
- an IP that any address of the namespace holds, in any pool and of either
  API, or that lies inside a sub-prefix one holds, is never handed out (nor a
  sub-prefix holding such an IP); where pools with different namePrefixes overlap,
  the overlap belongs to one of them only (see ``overlap``), also across
  namespaces for a global pool;
- a claim whose own Cluster is paused is left alone, whatever its pool;
- a claim whose pool reference was changed away from the pool that gave it
  its address (it is immutable; no webhook stopped the edit) is still this
  pool's (the inventory files it with the pool its addresses are of, shown
  as naming it): it keeps its IP, is released when deleted, and carries a
  ``PoolReferenceChanged`` condition naming both pools, with one Warning Event;
- a claim whose Cluster (its own, or its pool's ``clusterName``) is not
  known is given nothing new until it is: ``clusterctl move`` creates a
  Cluster before its claims, and a claim seen first may still have a moved
  address on its way. Its Ready condition says what it waits for;
- a kind whose addresses an outside IPAM hands out (``PoolKind.outside``)
  asks it only for the allocation key the stored claim carries,
  written with the claim's finalizer before anything is asked; the plan says
  what it wants of each key (``Plan.intents``: want, release, forget) and the
  answers so far are the snapshot's (``Snapshot.answers``), as they were when
  the pass started (an answer filed while it runs wakes its claims for the next
  pass): meanwhile the claim is pending (Ready=False with the reason), a grant is locked and shown like
  any allocation, a deleted claim's objects and finalizer go only once its key
  is released, a claim deleted for a move is forgotten, never released;
- a claim that cannot be served gets an error in its status and an Event,
  written only when the error changes, and does not stop the next claim;
- nothing is written when nothing changed; a paused pool is left alone.

Events are planned for failures only: every API write counts, and a
successful allocation is already recorded by the IPAddress and the claim's
Ready condition.

Where each part of it is decided: ``snapshot`` (what a pass looks at),
``passes`` (the entry points and the pass over claims and addresses),
``state`` (what one pass holds), ``allocation`` (a new address for a claim),
``binding`` (a claim's lock, its Cluster API IPAddress and its status naming
them), ``adoption`` (address objects taken up as they are, or refused),
``release`` (addresses whose claim is gone or going, finalizers),
``outside`` (the allocation keys of an outside IPAM and its answers),
``guards`` (an IP guarded across pools and namespaces), ``conditions`` (what
claims are told), ``pool_status`` (the pool's own metadata and status),
``elsewhere`` (a global pool's claims in another management cluster) and
``pieces`` (small readings and writes of objects shared by them).
"""

from .binding import LOCK_SETTLE_SECONDS
from .conditions import (ADDRESS_CONFLICT, ADDRESS_HOMED_ELSEWHERE, ADDRESS_LOST, ALLOCATION_PENDING,
                         DUPLICATE_ADDRESS, POOL_REFERENCE_CHANGED, READY, WAITING_FOR_CLUSTER, moved_from,
                         waited_for)
from .outside import first_carrier, left_with
from .passes import DECISIONS_PER_YIELD, ident_of, load, needs_full, plan_pass, reconcile, run_to_end
from .snapshot import Snapshot


__all__ = [
    "ADDRESS_CONFLICT", "ADDRESS_HOMED_ELSEWHERE", "ADDRESS_LOST", "ALLOCATION_PENDING", "DECISIONS_PER_YIELD",
    "DUPLICATE_ADDRESS", "LOCK_SETTLE_SECONDS", "POOL_REFERENCE_CHANGED", "READY", "WAITING_FOR_CLUSTER", "Snapshot",
    "first_carrier", "ident_of", "left_with", "load", "moved_from", "needs_full", "plan_pass", "reconcile",
    "run_to_end", "waited_for",
]
