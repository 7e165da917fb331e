"""Leader election on a coordination.k8s.io Lease.

Only the holder of the Lease reconciles; the others keep their inventory
warm and take over when the holder stops renewing. Correctness never rests
on this: the name lock and conditional writes keep the invariants with any
number of active replicas. The election only keeps them from doing the same
work twice.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import uuid
from typing import Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger("metal3_ipam.leader")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class LeaderElector:
    def __init__(self, api_client: client.ApiClient, namespace: str, name: str = "metal3-ipam-controller",
                 lease_seconds: int = 15, renew_seconds: float = 5.0,
                 on_change: Callable[[bool], None] = lambda leading: None) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.on_change = on_change
        self.leading = False

    async def run(self) -> None:
        try:
            while True:
                try:
                    leading = await asyncio.to_thread(self._try_acquire)
                except ApiException as err:
                    log.warning("lease %s/%s: %s", self.namespace, self.name, err.reason)
                    leading = False
                self._set(leading)
                await asyncio.sleep(self.renew_seconds)
        finally:
            if self.leading:
                await asyncio.to_thread(self._release)
            self._set(False)

    def _set(self, leading: bool) -> None:
        if leading != self.leading:
            self.leading = leading
            log.info("%s leadership of lease %s/%s", "took" if leading else "lost", self.namespace, self.name)
            self.on_change(leading)

    def _try_acquire(self) -> bool:
        now = _now()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=self.lease_seconds,
                                        acquire_time=now, renew_time=now, lease_transitions=0))
            try:
                self.api.create_namespaced_lease(self.namespace, body)
                return True
            except ApiException as create_err:
                if create_err.status == 409:
                    return False
                raise
        spec = lease.spec
        held_by_other = spec.holder_identity not in (None, "", self.identity)
        renewed = spec.renew_time or spec.acquire_time
        expired = renewed is None or (now - renewed).total_seconds() > (spec.lease_duration_seconds or self.lease_seconds)
        if held_by_other and not expired:
            return False
        if spec.holder_identity != self.identity:
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
            spec.acquire_time = now
        spec.holder_identity = self.identity
        spec.lease_duration_seconds = self.lease_seconds
        spec.renew_time = now
        try:
            # The resourceVersion in the body makes this a compare-and-swap.
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    def _release(self) -> None:
        """Step down at shutdown so a standby takes over at once."""
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = ""
                lease.spec.renew_time = None
                self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as err:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, err.reason)
