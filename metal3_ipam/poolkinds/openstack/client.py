"""Neutron's floating IPs, asked with Keystone's credentials from a ``clouds.yaml``.

The OpenStack world's own libraries do what they do well, and only that:

* ``openstacksdk``'s configuration loader (``openstack.config``) reads the
  ``clouds.yaml`` a Secret holds, as ``openstack`` and every other client read
  it (``auth_type`` password or ``v3applicationcredential``, ``region_name``,
  ``interface``, ``cacert``/``verify``, profiles): no second reading of that
  format to drift from theirs. It reads only the file given (no environment
  variables, no files of the user's home).
* ``keystoneauth1`` (the session it gives) authenticates to Keystone, renews
  the token before it expires, and finds Neutron's endpoint in the service
  catalog for the region and interface.

Neutron itself is spoken to with plain REST calls on that session (not the
SDK's resource layer): a 409 means three things that only the body's
``NeutronError.type`` tells apart (``IpAddressGenerationFailure``, ``OverQuota``,
``IpAddressAlreadyAllocated``), and every refusal is classified here into one
:class:`OpenStackError` with a condition reason (``pool.NETWORK_FULL``, …).

Every call is synchronous (``requests`` underneath): the asks run them in
threads (``asyncio.to_thread``), never on the event loop.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote

import yaml
from keystoneauth1 import exceptions as ks_exc
from openstack import exceptions as sdk_exc
from openstack.config import loader

from metal3_ipam.poolkinds.openstack import pool as p


class OpenStackError(Exception):
    """A refusal or a failure, with its condition reason (``pool.OVER_QUOTA``, …) and a message; ``passing``: one
    that may pass, asked again (a read that failed, not an answer that the thing is not there)."""

    def __init__(self, reason: str, message: str, passing: bool = False):
        super().__init__(message)
        self.reason = reason
        self.passing = passing

    @property
    def server_down(self) -> bool:
        return self.reason in p.SERVER_DOWN


@dataclass(frozen=True)
class FloatingIP:
    id: str
    address: str
    description: str
    tags: tuple[str, ...]
    port_id: str | None
    network_id: str
    #: Neutron's ``revision_number``: bumped by every change (its tags' too); an update naming it (``If-Match``)
    #: is carried out only if nobody changed the floating IP since it was read.
    revision: int = 0
    created_at: str = ""  # ISO 8601, to the second

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> "FloatingIP":
        revision = body.get("revision_number")
        return cls(id=body["id"], address=body["floating_ip_address"], description=body.get("description") or "",
                   tags=tuple(body.get("tags") or ()), port_id=body.get("port_id"),
                   network_id=body.get("floating_network_id") or "",
                   revision=revision if isinstance(revision, int) else 0, created_at=body.get("created_at") or "")


def _neutron_error(status: int, body: Any) -> tuple[str, str]:
    error = body.get("NeutronError") if isinstance(body, Mapping) else None
    if isinstance(error, Mapping):
        return str(error.get("type") or ""), str(error.get("message") or "")
    return "", str(body)[:500]


def _reason(status: int, kind: str) -> str:
    if status == 409 and kind == "IpAddressGenerationFailure":
        return p.NETWORK_FULL
    if status == 409 and kind == "OverQuota":
        return p.OVER_QUOTA
    if status == 409 and kind == "IpAddressAlreadyAllocated":
        return p.ADDRESS_TAKEN
    if status == 403:
        return p.POLICY_FORBIDDEN
    if status == 401:
        return p.CREDENTIALS_REFUSED
    if status >= 500:
        return p.SERVER_ERROR
    return p.REFUSED_REQUEST


def classify(exc: BaseException, where: str) -> OpenStackError:
    """An exception of keystoneauth1 or openstacksdk (both families surface, depending on the call) as one
    :class:`OpenStackError`."""
    if isinstance(exc, OpenStackError):
        return exc
    if isinstance(exc, (ks_exc.ConnectTimeout, ks_exc.ConnectFailure)):
        # ConnectTimeout is a ConnectFailure too: which one, the message says.
        reason = p.TIMEOUT if isinstance(exc, ks_exc.ConnectTimeout) else p.UNREACHABLE
        return OpenStackError(reason, f"{where}: cannot reach the cloud ({exc})")
    if isinstance(exc, ks_exc.RequestTimeout):
        return OpenStackError(p.TIMEOUT, f"{where}: no answer in time ({exc})")
    if isinstance(exc, (ks_exc.Unauthorized, ks_exc.NotFound)) or (
            isinstance(exc, ks_exc.HttpError) and getattr(exc, "http_status", None) in (401, 404)):
        return OpenStackError(p.CREDENTIALS_REFUSED, f"{where}: Keystone refused the credentials of the "
                                                     f"clouds.yaml ({exc})")
    if isinstance(exc, ks_exc.Forbidden):
        return OpenStackError(p.POLICY_FORBIDDEN, f"{where}: Keystone refused ({exc})")
    if isinstance(exc, ks_exc.EndpointNotFound):
        return OpenStackError(p.REFUSED_REQUEST, f"{where}: no network (Neutron) endpoint in the service catalog "
                                                 f"for this region and interface ({exc})")
    if isinstance(exc, ks_exc.DiscoveryFailure):
        return OpenStackError(p.UNREACHABLE, f"{where}: Keystone's versions could not be found ({exc})")
    if isinstance(exc, ks_exc.HttpError):
        status = int(getattr(exc, "http_status", 0) or 0)
        return OpenStackError(p.SERVER_ERROR if status >= 500 else p.REFUSED_REQUEST, f"{where}: {exc}")
    if isinstance(exc, (ks_exc.MissingRequiredOptions, ks_exc.NoMatchingPlugin, ks_exc.AuthPluginException,
                        sdk_exc.ConfigException)):
        return OpenStackError(p.IDENTITY_MISSING, f"{where}: the clouds.yaml cannot be used ({exc})")
    if isinstance(exc, sdk_exc.HttpException):
        status = int(getattr(exc, "status_code", 0) or 0)
        return OpenStackError(_reason(status, ""), f"{where}: {exc}")
    if isinstance(exc, (ks_exc.ClientException, sdk_exc.SDKException)):
        return OpenStackError(p.REFUSED_REQUEST, f"{where}: {exc}")
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return OpenStackError(p.UNREACHABLE, f"{where}: {exc}")
    raise exc


def read_clouds_yaml(data: bytes, cloud: str) -> dict[str, Any]:
    """The ``clouds.yaml`` of a Secret, checked for the cloud named: a problem is an ``IdentityMissing`` error."""
    try:
        document = yaml.safe_load(data.decode())
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise OpenStackError(p.IDENTITY_MISSING, f"clouds.yaml is not YAML ({exc})") from None
    clouds = document.get("clouds") if isinstance(document, Mapping) else None
    if not isinstance(clouds, Mapping) or not isinstance(clouds.get(cloud), Mapping):
        names = ", ".join(sorted(map(str, clouds))) if isinstance(clouds, Mapping) else "none"
        raise OpenStackError(p.IDENTITY_MISSING, f"clouds.yaml has no cloud {cloud!r} "
                                                 f"(spec.identityRef.cloudName; it has: {names})")
    return dict(document)


class Neutron:
    """One cloud of a ``clouds.yaml`` (and a region) as the controller speaks to it. Synchronous; its session
    (keystoneauth1's, on ``requests``) may be used from several threads."""

    def __init__(self, clouds_yaml: bytes, cloud: str, region: str | None = None, *, cacert: bytes | None = None,
                 timeout: float = 10.0):
        document = read_clouds_yaml(clouds_yaml, cloud)
        self.timeout = timeout
        self._dir = tempfile.TemporaryDirectory(prefix="metal3-ipam-openstack-")
        entry = dict(document["clouds"][cloud])
        if cacert:
            path = os.path.join(self._dir.name, "cacert.pem")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
                f.write(cacert)
            entry["cacert"] = path
        entry["api_timeout"] = timeout
        path = os.path.join(self._dir.name, "clouds.yaml")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            yaml.safe_dump({"clouds": {cloud: entry}}, f)
        try:
            config = loader.OpenStackConfig(config_files=[path], vendor_files=[], secure_files=[],
                                            load_envvars=False, app_name="metal3-ipam")
            self.region = config.get_one(cloud=cloud, region_name=region or None)
            self.session = self.region.get_session()
        except Exception as exc:
            self._dir.cleanup()
            raise classify(exc, f"cloud {cloud!r} of the clouds.yaml") from None
        self.cloud = cloud
        self._endpoint: str | None = None

    def close(self) -> None:
        try:
            self.session.session.close()
        finally:
            self._dir.cleanup()

    def endpoint(self) -> str:
        """Neutron's URL, from the service catalog (Keystone asked on first use, and on each new token)."""
        if self._endpoint is None:
            try:
                found = self.session.get_endpoint(service_type="network",
                                                  interface=self.region.get_interface("network") or "public",
                                                  region_name=self.region.get_region_name("network"))
            except Exception as exc:
                raise classify(exc, "Keystone") from None
            if not found:
                raise OpenStackError(p.REFUSED_REQUEST, "no network (Neutron) endpoint in the service catalog")
            self._endpoint = found.rstrip("/")
        return self._endpoint

    def request(self, method: str, path: str, body: Any = None, params: Mapping[str, Any] | None = None,
                expect: tuple[int, ...] = (200,), headers: Mapping[str, str] | None = None,
                with_status: bool = False) -> Any:
        """Neutron's answer (its JSON body; with ``with_status``, (status, body)) when its status is one of
        ``expect``; any other raises :class:`OpenStackError`."""
        url = f"{self.endpoint()}/v2.0/{path}"
        where = f"Neutron {method} {path}"
        try:
            response = self.session.request(url, method, json=body, params=params, raise_exc=False,
                                            timeout=self.timeout, connect_retries=0,
                                            headers={"Accept": "application/json", **(headers or {})})
        except Exception as exc:
            raise classify(exc, where) from None
        if response.status_code in expect:
            body = response.json() if response.content and response.status_code < 300 else None
            return (response.status_code, body) if with_status else body
        try:
            answer = response.json()
        except ValueError:
            answer = response.text
        kind, message = _neutron_error(response.status_code, answer)
        raise OpenStackError(_reason(response.status_code, kind),
                             f"{where}: {response.status_code} {kind or ''} {message}".replace("  ", " ").strip())

    # -- networks ---------------------------------------------------------------------

    def networks(self, query: Mapping[str, Any]) -> list[dict[str, Any]]:
        return list(self.request("GET", "networks", params=dict(query))["networks"])

    # -- floating IPs -----------------------------------------------------------------

    def floating_ips(self, **query: Any) -> list[FloatingIP]:
        params = {k.replace("_", "-") if k in ("tags_any", "not_tags") else k: v for k, v in query.items()}
        return [FloatingIP.of(f) for f in self.request("GET", "floatingips", params=params)["floatingips"]]

    def get(self, fip_id: str) -> FloatingIP | None:
        found = self.request("GET", f"floatingips/{fip_id}", expect=(200, 404))
        return FloatingIP.of(found["floatingip"]) if isinstance(found, Mapping) and "floatingip" in found else None

    def create(self, network_id: str, description: str, address: str | None = None) -> FloatingIP:
        body: dict[str, Any] = {"floating_network_id": network_id, "description": description}
        if address is not None:
            body["floating_ip_address"] = address
        return FloatingIP.of(self.request("POST", "floatingips", {"floatingip": body}, expect=(201,))["floatingip"])

    def describe(self, fip_id: str, description: str, revision: int | None = None) -> FloatingIP | None:
        """The floating IP with its new description; with ``revision``, only if it is still at that revision
        (Neutron's compare-and-set: ``If-Match: revision_number=``), else None (someone changed it meanwhile)."""
        headers = {"If-Match": f"revision_number={revision}"} if revision is not None else None
        found = self.request("PUT", f"floatingips/{fip_id}", {"floatingip": {"description": description}},
                             expect=(200, 412) if revision is not None else (200,), headers=headers)
        return FloatingIP.of(found["floatingip"]) if isinstance(found, Mapping) else None

    def set_tags(self, fip_id: str, tags: list[str]) -> None:
        """The whole list of tags replaced: a tag another client added meanwhile is lost (see :meth:`add_tag`)."""
        self.request("PUT", f"floatingips/{fip_id}/tags", {"tags": sorted(set(tags))})

    def add_tag(self, fip_id: str, tag: str) -> None:
        """One tag added, the others left as they are (Neutron adds it atomically: two clients adding tags at
        once keep both)."""
        self.request("PUT", f"floatingips/{fip_id}/tags/{quote(tag, safe='')}", expect=(201, 200, 204))

    def remove_tag(self, fip_id: str, tag: str) -> None:
        """One tag removed (or already gone), the others left as they are."""
        self.request("DELETE", f"floatingips/{fip_id}/tags/{quote(tag, safe='')}", expect=(204, 404))

    def delete(self, fip_id: str, revision: int | None = None) -> bool:
        """Deleted (or already gone); with ``revision``, only if it is still at that revision (``If-Match``: no tag
        added and nothing changed since it was read), else False."""
        headers = {"If-Match": f"revision_number={revision}"} if revision is not None else None
        expect = (204, 404, 412) if revision is not None else (204, 404)
        return self.request("DELETE", f"floatingips/{fip_id}", expect=expect, headers=headers, with_status=True)[0] \
            != 412
