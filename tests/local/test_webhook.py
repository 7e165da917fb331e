"""The admission webhooks: answers from the rules and the live inventory, and the TLS server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import socket
import ssl
import threading

import aiohttp
import pytest
from cryptography import x509

from metal3_ipam.controller import review_body, webhook
from metal3_ipam.controller.admission import Admission
from metal3_ipam.controller.certificates import CertificateFiles
from metal3_ipam.controller.webhook import hooks
from metal3_ipam.controller.webhook_server import WebhookServer
from metal3_ipam.core import kinds
from metal3_ipam.testing.certs import Authority
from ipam_objects import capi_claim, ipclaim, ippool
from ipam_objects import admission_request as request
from ipam_objects import inventory_of as inventory
from metal3_ipam.controller.admission import MESSAGE_CHARS
from metal3_ipam.controller.review_body import Malformed, read_review
from metal3_ipam.controller.webhook_server import Limits
from metal3_ipam.testing import webhook_load as load
from metal3_ipam.testing.waiting import eventually
from metal3_ipam.core.conversion import CONVERSION_PATH
from metal3_ipam.core import conversion
from metal3_ipam.poolkinds.incluster.spec import SKIP_DELETE_VALIDATION_ANNOTATION
from served_webhook import CLAIM_PATH, POOL, POOL_PATH, GatedAdmission, Served, free_port, address

MOVE = "clusterctl.cluster.x-k8s.io/delete-for-move"


def capi_address(name: str, ip: str, pool: str = "pool1", ns: str = "default") -> dict:
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"address": ip, "prefix": 24, "claimRef": {"name": name},
                     "poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": pool}}}


# -- the answers --------------------------------------------------------------------

def test_a_valid_create_is_allowed():
    response = Admission(inventory()).review(request("CREATE", POOL))
    assert response == {"uid": "u-1", "allowed": True}


def test_an_invalid_create_is_denied_naming_object_field_and_value():
    bad = ippool("bad", pools=[{"start": "192.168.0.20", "end": "192.168.0.10"}], gateway="2001:db8::1")
    response = Admission(inventory()).review(request("CREATE", bad))
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"].startswith('IPPool.ipam.metal3.io "bad" is invalid: ')
    assert 'spec.gateway: is IPv6 but the pool is IPv4' in status["message"]
    assert 'spec.pools[0]: starts after it ends' in status["message"]
    assert {c["field"] for c in status["details"]["causes"]} == {"spec.gateway", "spec.pools[0]"}


def test_warnings_are_admission_warnings():
    twin = ippool("pool2", namePrefix="pool1", prefix=24, pools=[{"start": "192.168.0.15", "end": "192.168.0.30"}])
    response = Admission(inventory(POOL)).review(request("CREATE", twin))
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert warning.startswith("spec.pools[0]: shares 192.168.0.15-192.168.0.20 with IPPool pool1")


def test_a_pool_sharing_addresses_under_another_name_prefix_is_denied():
    other = ippool("pool2", pools=[{"start": "192.168.0.15", "end": "192.168.0.30"}])
    admission = Admission(inventory(POOL))
    response = admission.review(request("CREATE", other))
    assert not response["allowed"]
    assert "spec.pools[0]" in response["status"]["message"] and "IPPool pool1" in response["status"]["message"]
    # Other namespaces' pools do not count, nor does a pool being deleted.
    elsewhere = ippool("pool2", ns="other", pools=[{"start": "192.168.0.15", "end": "192.168.0.30"}])
    assert admission.review(request("CREATE", elsewhere))["allowed"]
    deleting = dict(POOL, metadata=dict(POOL["metadata"], deletionTimestamp="2024-01-01T00:00:00Z"))
    assert Admission(inventory(deleting)).review(request("CREATE", other))["allowed"]


def test_a_create_without_namespace_in_the_body_is_judged_in_the_request_namespace():
    other = ippool("pool2", pools=[{"start": "192.168.0.15", "end": "192.168.0.30"}])
    del other["metadata"]["namespace"]
    req = request("CREATE", other)
    req["namespace"] = "default"
    assert not Admission(inventory(POOL)).review(req)["allowed"]


def test_a_pool_update_may_not_drop_an_address_in_use_of_either_api():
    live = inventory(POOL, address("pool1-192-168-0-12", "192.168.0.12"), capi_address("c1", "192.168.0.19"))
    shrunk = ippool("pool1", pools=[{"start": "192.168.0.10", "end": "192.168.0.15"}])
    response = Admission(live).review(request("UPDATE", shrunk, POOL))
    assert not response["allowed"]
    message = response["status"]["message"]
    assert "spec.pools: no longer holds 192.168.0.19, which is in use (IPAddress c1 (Cluster API))" in message
    assert "192.168.0.12" not in message
    grown = ippool("pool1", pools=[{"start": "192.168.0.10", "end": "192.168.0.40"}])
    assert Admission(live).review(request("UPDATE", grown, POOL))["allowed"]


def test_immutable_fields():
    admission = Admission(inventory(POOL))
    renamed = ippool("pool1", namePrefix="other", pools=POOL["spec"]["pools"])
    response = admission.review(request("UPDATE", renamed, POOL))
    assert "spec.namePrefix: is immutable" in response["status"]["message"]
    claim = ipclaim("c1", pool="pool1")
    moved = ipclaim("c1", pool="pool2")
    assert "spec.pool: is immutable" in admission.review(request("UPDATE", moved, claim))["status"]["message"]


def test_pool_deletion_is_refused_while_addresses_are_in_use_except_for_clusterctl_move():
    live = inventory(POOL, address("pool1-192-168-0-12", "192.168.0.12"))
    admission = Admission(live)
    response = admission.review(request("DELETE", None, POOL))
    assert not response["allowed"]
    assert "spec.pool: is still in use" in response["status"]["message"]
    assert "pool1-192-168-0-12" in response["status"]["message"]
    moving = dict(POOL, metadata=dict(POOL["metadata"], annotations={MOVE: ""}))
    assert admission.review(request("DELETE", None, moving))["allowed"]
    assert Admission(inventory(POOL)).review(request("DELETE", None, POOL))["allowed"]
    # Other kinds' deletions are not judged.
    assert admission.review(request("DELETE", None, ipclaim("c1")))["allowed"]


def test_until_the_inventory_is_loaded_live_rules_wait_and_deletions_pass():
    admission = Admission(inventory(), loaded=lambda: False)
    response = admission.review(request("CREATE", POOL))
    assert not response["allowed"] and response["status"]["code"] == 503
    assert "try again" in response["status"]["message"]
    assert admission.review(request("DELETE", None, POOL))["allowed"]
    # Rules that need no live state answer at once.
    assert admission.review(request("CREATE", ipclaim("c1")))["allowed"]
    assert not admission.review(request("CREATE", ipclaim("c1", ip="x")))["allowed"]


def test_namespaces_the_controller_does_not_watch_get_the_rules_without_live_state():
    admission = Admission(inventory(POOL), loaded=lambda: False, namespaces=["mine"])
    other = ippool("pool2", pools=[{"start": "192.168.0.15", "end": "192.168.0.30"}])
    assert admission.review(request("CREATE", other))["allowed"]
    assert admission.review(request("DELETE", None, POOL))["allowed"]


def test_capi_claims():
    admission = Admission(inventory())
    assert admission.review(request("CREATE", capi_claim("c1")))["allowed"]
    bad = capi_claim("c1", ip="10.0.0.300")
    response = admission.review(request("CREATE", bad))
    assert "metadata.annotations.ipAddress" in response["status"]["message"]
    theirs = capi_claim("c1", ip="10.0.0.300", api_group="pools.example.com", kind="OtherPool")
    assert admission.review(request("CREATE", theirs))["allowed"]


def test_defaulting_sets_the_allocation_strategy_as_metal3_does():
    pool = ippool("pool1")
    response = Admission(inventory()).review(request("CREATE", pool), mutating=True)
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/spec/allocationStrategy", "value": "sequential"}]
    random_pool = ippool("pool1", allocationStrategy="random")
    assert "patch" not in Admission(inventory()).review(request("CREATE", random_pool), mutating=True)
    assert "patch" not in Admission(inventory()).review(request("CREATE", ipclaim("c")), mutating=True)


@pytest.mark.parametrize("broken", [{}, {"operation": "CREATE", "object": "x"}, {"operation": "UPDATE", "object": {}},
                                    {"operation": "DELETE"}])
def test_odd_requests_never_raise(broken):
    assert "allowed" in Admission(inventory()).review(broken)


# -- the configuration ----------------------------------------------------------------

def test_every_served_kind_has_a_validating_hook_and_deletions_never_fail_closed():
    validating = {(h.kind, op) for h in hooks() if not h.mutating for op in h.operations}
    for kind in (kinds.IPPOOL, kinds.IPCLAIM, kinds.IPADDRESS, kinds.CAPI_CLAIM):
        assert (kind, "CREATE") in validating and (kind, "UPDATE") in validating
    assert (kinds.IPPOOL, "DELETE") in validating
    for hook in hooks():
        if "DELETE" in hook.operations:
            assert hook.operations == ("DELETE",) and hook.failure_policy == "Ignore"
            names = {c["name"] for c in hook.match_conditions}
            assert {"not-delete-for-move", "not-namespace-teardown"} <= names
        assert hook.timeout_seconds <= 10
    assert len({h.name for h in hooks()}) == len(hooks())
    (capi,) = [h for h in hooks() if h.kind == kinds.CAPI_CLAIM]
    assert any("poolRef.apiGroup == 'ipam.metal3.io'" in c["expression"] for c in capi.match_conditions)


def test_configurations_cover_every_hook():
    mutating, validating = webhook.configurations(lambda h: {"url": f"https://127.0.0.1:1{h.path}"})
    assert mutating["kind"] == "MutatingWebhookConfiguration"
    assert [w["name"] for w in mutating["webhooks"] + validating["webhooks"]] == \
        [h.name for h in hooks() if h.mutating] + [h.name for h in hooks() if not h.mutating]
    for entry in validating["webhooks"]:
        assert entry["sideEffects"] == "None" and entry["admissionReviewVersions"] == ["v1"]
        assert entry["clientConfig"]["url"].endswith(next(h.path for h in hooks() if h.name == entry["name"]))


# -- the server -------------------------------------------------------------------------


def _served_certificate(port: int, ca: bytes) -> x509.Certificate:
    context = ssl.create_default_context(cadata=ca.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def test_the_server_answers_over_tls_and_reloads_a_renewed_certificate(tmp_path):
    authority = Authority.create()
    first = authority.issue(tmp_path)
    port = free_port()

    async def scenario() -> None:
        server = await WebhookServer(Admission(inventory(POOL)), "127.0.0.1", port, tmp_path,
                                     reload_seconds=0.05).start()
        try:
            context = ssl.create_default_context(cadata=authority.pem.decode())
            async with aiohttp.ClientSession() as session:
                path = next(h.path for h in hooks() if h.kind == kinds.IPPOOL and not h.mutating)
                review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                          "request": request("CREATE", ippool("bad", namePrefix="Bad"))}
                async with session.post(f"https://127.0.0.1:{port}{path}", json=review, ssl=context) as resp:
                    assert resp.status == 200
                    answer = await resp.json()
                assert answer["kind"] == "AdmissionReview" and answer["response"]["uid"] == "u-1"
                assert "spec.namePrefix" in answer["response"]["status"]["message"]
                async with session.post(f"https://127.0.0.1:{port}{path}", data=b"{", ssl=context) as resp:
                    assert resp.status == 400
            served = await asyncio.to_thread(_served_certificate, port, authority.pem)
            assert served.serial_number == first.serial_number
            second = authority.issue(tmp_path)
            deadline = asyncio.get_running_loop().time() + 10
            while (await asyncio.to_thread(_served_certificate, port, authority.pem)).serial_number \
                    != second.serial_number:
                assert asyncio.get_running_loop().time() < deadline, "the renewed certificate was never served"
                await asyncio.sleep(0.05)
        finally:
            await server.close()

    asyncio.run(scenario())


def test_broken_certificate_files_keep_the_old_certificate(tmp_path):
    authority = Authority.create()
    authority.issue(tmp_path)
    files = CertificateFiles(tmp_path)
    assert files.loads == 1 and not files.reload_if_changed()
    (tmp_path / "tls.crt").write_text("not a certificate")
    assert not files.reload_if_changed()
    assert files.loads == 1
    authority.issue(tmp_path)
    assert files.reload_if_changed() and files.loads == 2


def test_missing_certificates_fail_at_start(tmp_path):
    with pytest.raises(OSError):
        CertificateFiles(tmp_path)


def test_only_pool_reviews_read_the_inventory():
    assert Admission.reads_inventory(request("CREATE", POOL))
    assert Admission.reads_inventory(request("DELETE", None, POOL))
    assert not Admission.reads_inventory(request("CREATE", POOL), mutating=True)
    for obj in (ipclaim("c"), capi_claim("c"), address("a", "10.0.0.1")):
        assert not Admission.reads_inventory(request("CREATE", obj))
    # Whatever the request claims to be about, the object decides.
    assert not Admission.reads_inventory({"operation": "CREATE", "kind": {"group": "ipam.metal3.io",
                                                                          "kind": "IPPool"}, "object": {}})


def _post(port: int, ca: bytes, path: str, review: dict) -> dict:
    import urllib.request

    context = ssl.create_default_context(cadata=ca.decode())
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", data=json.dumps(review).encode(),
                                 headers={"Content-Type": "application/json"})
    with opener.open(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_reviews_are_answered_while_the_controller_loop_is_busy(tmp_path):
    """A reconcile pass holding the controller's event loop does not hold up the API server's
    admission calls; a pool review, which reads the inventory, reads it on that loop, so waits for it.
    The loop is held until the claim's answer has come (never, if that answer needed the loop)."""
    import threading

    authority = Authority.create()
    authority.issue(tmp_path)
    port = free_port()
    claim_path = next(h.path for h in hooks() if h.kind == kinds.IPCLAIM)
    pool_path = next(h.path for h in hooks() if h.kind == kinds.IPPOOL and not h.mutating)
    answered = {name: threading.Event() for name in ("claim", "pool")}
    read_on: list[threading.Thread] = []

    class Watched(Admission):
        def live(self, *args, **kwargs):
            read_on.append(threading.current_thread())
            return super().live(*args, **kwargs)

    def ask(name: str, path: str, obj: dict) -> None:
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request("CREATE", obj)}
        assert _post(port, authority.pem, path, review)["response"]["allowed"]
        answered[name].set()

    async def scenario() -> None:
        # No judging deadline: the pool review waits for the loop however long the claim's answer takes.
        server = await WebhookServer(Watched(inventory()), "127.0.0.1", port, tmp_path,
                                     limits=Limits(judge_seconds=600)).start()
        try:
            askers = [threading.Thread(target=ask, args=("claim", claim_path, ipclaim("c1"))),
                      threading.Thread(target=ask, args=("pool", pool_path, POOL))]
            for t in askers:
                t.start()
            # The controller's loop, busy: nothing else runs on it meanwhile.
            claim_answered = answered["claim"].wait(60)
            pool_answered_meanwhile = answered["pool"].is_set()
            await asyncio.to_thread(lambda: [t.join(60) for t in askers])
            assert claim_answered, "a claim review waited for the controller's loop"
            assert not pool_answered_meanwhile, "a pool review was answered while the controller's loop was held"
            assert answered["pool"].is_set(), "the pool review was not answered once the loop was free"
            assert read_on == [threading.current_thread()], "a pool review read the inventory off the controller's loop"
        finally:
            await server.close()

    asyncio.run(scenario())


def test_overlap_is_judged_against_the_pools_the_api_server_holds_now():
    """A pool created a moment ago is not in the inventory yet (its watch event is on its way): the pools the
    overlap check reads come from the API server, so back-to-back creates cannot both get in."""
    other = {**POOL, "metadata": {"name": "pool2", "namespace": "default"},
             "spec": {**POOL["spec"], "namePrefix": "other"}}
    listed = []

    def list_pools(namespace: str) -> list[dict]:
        listed.append(namespace)
        return [POOL]

    admission = Admission(inventory(), list_pools=list_pools)
    req = request("CREATE", other)
    response = admission.review(req, pools=admission.current_pools(req))
    assert not response["allowed"] and "pool1" in response["status"]["message"] and listed == ["default"]


def test_when_the_pools_cannot_be_listed_the_inventory_answers():
    def list_pools(namespace: str) -> list[dict]:
        raise OSError("connection refused")

    other = {**POOL, "metadata": {"name": "pool2", "namespace": "default"},
             "spec": {**POOL["spec"], "namePrefix": "other"}}
    admission = Admission(inventory(POOL), list_pools=list_pools)
    req = request("CREATE", other)
    assert admission.current_pools(req) is None
    assert not admission.review(req, pools=None)["allowed"]
    assert admission.current_pools(request("CREATE", address("a", "10.0.0.5"))) is None  # only pools list


# -- hostile clients ----------------------------------------------------------------------


def _envelope(request_json: str) -> bytes:
    return ('{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": %s}' % request_json).encode()


GOOD = '{"uid": "u", "operation": "CREATE", "kind": {"group": "g", "version": "v", "kind": "IPClaim"}, %s}'
MALFORMED = {
    "not JSON": b"{",
    "not UTF-8": b'{"a": "\xff"}',
    "a list": b"[]",
    "nested deeper than the parser goes": b"[" * 100_000 + b"]" * 100_000,
    "objects and lists past the bound": b"[" + b"[]," * 100_001 + b"[]]",
    "NaN": _envelope(GOOD % '"object": {"a": NaN}'),
    "Infinity": _envelope(GOOD % '"object": {"a": -Infinity}'),
    "a number out of range": _envelope(GOOD % '"object": {"a": 1e999}'),
    "an integer of 5000 digits": _envelope(GOOD % ('"object": {"a": %s}' % ("9" * 5000))),
    "another apiVersion": b'{"apiVersion": "v1", "kind": "AdmissionReview", "request": {}}',
    "request a string": _envelope('"x"'),
    "request.kind null": _envelope('{"uid": "u", "operation": "CREATE", "kind": null}'),
    "request.kind a string": _envelope('{"uid": "u", "operation": "CREATE", "kind": "IPPool"}'),
    "request.kind a list": _envelope('{"uid": "u", "operation": "CREATE", "kind": ["IPPool"]}'),
    "request.kind.kind a list": _envelope('{"uid": "u", "operation": "CREATE", "kind": {"kind": []}}'),
    "request.kind missing": _envelope('{"uid": "u", "operation": "CREATE"}'),
    "request.uid a number": _envelope('{"uid": 7, "operation": "CREATE", "kind": {}}'),
    "request.uid too long": _envelope('{"uid": "%s", "operation": "CREATE", "kind": {}}' % ("u" * 200)),
    "request.operation unknown": _envelope('{"uid": "u", "operation": "PATCH", "kind": {}}'),
    "request.object a string": _envelope(GOOD % '"object": "x"'),
    "request.namespace a list": _envelope(GOOD % '"namespace": []'),
    "request.userInfo a string": _envelope(GOOD % '"userInfo": "root"'),
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_what_the_api_server_never_sends_is_malformed(body):
    with pytest.raises(Malformed) as refused:
        read_review(body)
    assert 400 <= refused.value.status < 500 and len(str(refused.value)) <= 200


def test_a_good_review_reads():
    version, request = read_review(_envelope(GOOD % '"object": {"a": 1.5}, "namespace": "default"'))
    assert version == "admission.k8s.io/v1" and request["object"] == {"a": 1.5}


def test_the_largest_refusal_is_a_few_kib():
    response = Admission(inventory()).review(load.pool_request(load.largest_refused_pool()))
    assert not response["allowed"]
    message = response["status"]["message"]
    assert len(message) <= MESSAGE_CHARS and message.endswith("more problem(s)")
    assert len(response["status"]["details"]["causes"]) <= 16
    assert len(json.dumps(response)) < 16 * 1024


def _webhook_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(("metal3_ipam", "aiohttp", "asyncio"))]


def test_every_malformed_request_is_a_4xx_with_one_line_of_log(tmp_path, caplog):
    async def scenario() -> None:
        async with Served(tmp_path, Limits(read_seconds=1.0)) as served:
            def ask() -> None:
                for name, body in MALFORMED.items():
                    caplog.clear()
                    status, answer = served.post(body)
                    assert 400 <= status < 500, (name, status, answer)
                    assert "not an AdmissionReview" in json.loads(answer)["error"], name
                    lines = _webhook_lines(caplog)
                    assert len(lines) == 1 and not lines[0].exc_info, (name, [r.getMessage() for r in lines])
                    assert len(lines[0].getMessage()) < 600, name
                # Headers past their limits: refused by the HTTP parser, in one line too.
                for headers in ("X-Long: " + "a" * 9000 + "\r\n", "".join(f"X-{i}: a\r\n" for i in range(100))):
                    caplog.clear()
                    with load.tls_socket(served.port, served.context) as sock:
                        sock.sendall(f"POST {POOL_PATH} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
                        assert " 400 " in load.status_line(sock, 5)
                    eventually(lambda: _webhook_lines(caplog), timeout=5, interval=0.05, what="the header's line")
                    lines = _webhook_lines(caplog)
                    assert len(lines) == 1 and not lines[0].exc_info and len(lines[0].getMessage()) < 600, \
                        [r.getMessage() for r in lines]
                # A body abandoned half way: one line, no traceback.
                caplog.clear()
                with load.tls_socket(served.port, served.context) as sock:
                    sock.sendall(f"POST {POOL_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{{".encode())
                eventually(lambda: _webhook_lines(caplog), timeout=5, interval=0.05, what="the abandoned body's line")
                lines = _webhook_lines(caplog)
                assert len(lines) == 1 and "abandoned" in lines[0].getMessage() and not lines[0].exc_info
            await asyncio.to_thread(ask)

    with caplog.at_level(logging.DEBUG, logger="metal3_ipam"), caplog.at_level(logging.INFO):
        asyncio.run(scenario())


def test_bodies_over_the_cap_are_refused_before_they_are_read(tmp_path):
    async def scenario() -> None:
        async with Served(tmp_path, Limits()) as served:
            def ask() -> None:
                with load.tls_socket(served.port, served.context) as sock:  # announced: refused on the headers
                    sock.sendall(f"POST {POOL_PATH} HTTP/1.1\r\nHost: x\r\n"
                                 f"Content-Length: {review_body.MAX_REVIEW_BYTES + 1}\r\n\r\n".encode())
                    assert load.status_line(sock, 5).startswith("HTTP/1.1 413 ")
                with load.tls_socket(served.port, served.context) as sock:  # chunked: refused past the cap
                    sock.sendall(f"POST {POOL_PATH} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
                    chunk = b"0" * 65536
                    sock.settimeout(5)
                    try:
                        for _ in range(review_body.MAX_REVIEW_BYTES // len(chunk) + 2):
                            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    except OSError:
                        pass
                    assert load.status_line(sock, 5).startswith("HTTP/1.1 413 ")
            await asyncio.to_thread(ask)

    asyncio.run(scenario())


def _answer(sock: ssl.SSLSocket, timeout: float) -> bytes:
    """All the server sends on ``sock`` until it closes it (or ``timeout`` passes with nothing more)."""
    sock.settimeout(timeout)
    data = b""
    with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
        while chunk := sock.recv(4096):
            data += chunk
    return data


def test_idle_half_sent_and_slow_connections_are_closed_after_their_timeout(tmp_path):
    """Closed after the timeouts the server was given (0.5 s), not the defaults (5 s for a body, 15 s idle): the
    slow ones are answered 408 naming the time they had; each is waited for ten times its timeout."""
    limits = Limits(idle_seconds=0.5, read_seconds=0.5)
    defaults = Limits()

    async def scenario() -> None:
        async with Served(tmp_path, limits) as served:
            def ask() -> None:
                idle = [load.tls_socket(served.port, served.context) for _ in range(5)]
                half = [load.tls_socket(served.port, served.context) for _ in range(5)]
                slow = [load.tls_socket(served.port, served.context) for _ in range(3)]
                for sock in half:
                    sock.sendall(f"POST {POOL_PATH} HTTP/1.1\r\nHost: x\r\nContent-".encode())
                for sock in slow:
                    sock.sendall(f"POST {POOL_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{".encode())
                try:
                    assert all(load.closed_by_server(sock, 5) for sock in idle + half), "a connection stayed open"
                    for sock in slow:
                        answer = _answer(sock, 5)
                        assert answer.startswith(b"HTTP/1.1 408 "), answer
                        assert f"within {limits.read_seconds:g} s".encode() in answer, answer
                        assert f"within {defaults.read_seconds:g} s".encode() not in answer, answer
                finally:
                    for sock in idle + half + slow:
                        sock.close()
            await asyncio.to_thread(ask)

    asyncio.run(scenario())


def test_when_connections_are_at_the_cap_the_longest_waiting_makes_room(tmp_path):
    """Eight idle connections at a cap of eight, with an idle timeout longer than any test runs: a newcomer is
    answered because the oldest of them is closed for it (no timeout can have made the room)."""
    async def scenario() -> None:
        async with Served(tmp_path, Limits(connections=8, idle_seconds=3600)) as served:
            await asyncio.sleep(0)
            def ask() -> None:
                idle = [load.tls_socket(served.port, served.context) for _ in range(8)]
                try:
                    status, answer = load.post(served.port, served.context, CLAIM_PATH,
                                               load.review(load.claim_request()), timeout=120)
                    assert status == 200 and json.loads(answer)["response"]["allowed"], answer
                    assert load.closed_by_server(idle[0], 5), "the oldest idle connection was kept"
                finally:
                    for sock in idle:
                        sock.close()
            await asyncio.to_thread(ask)

    asyncio.run(scenario())


def test_judging_holds_up_neither_the_controller_loop_nor_good_reviews(tmp_path):
    """The largest refused pool held at the gate of the judge judging it, for as long as the test wants: the
    loop that owns the inventory keeps turning (it only copies what a pool review reads; the judging is on a
    thread of its own), and ordinary reviews are answered meanwhile (their judge never waits for a large
    review being judged). Shown by order, not by time: were either judged on the loop or on one thread, the
    ordinary reviews could not be answered until the held review is let through. How long they take beside
    such reviews is measured by bench/admission.py."""
    admission = GatedAdmission(inventory())
    gate = admission.gate

    async def scenario() -> None:
        # No judging deadline: the held review is judged however long it is held (never refused 503).
        async with Served(tmp_path, Limits(judge_seconds=600), admission) as served:
            ticks = [0]

            async def ticker() -> None:
                while True:
                    await asyncio.sleep(0.01)
                    ticks[0] += 1

            ticking = asyncio.create_task(ticker())
            largest = load.review(load.pool_request(load.largest_refused_pool()))
            held = asyncio.ensure_future(asyncio.to_thread(load.post, served.port, served.context, POOL_PATH,
                                                           largest, 600))
            try:
                await asyncio.to_thread(eventually, lambda: gate.arrived, timeout=300, interval=0.05,
                                        what="the largest review to reach its judge")
                turned = ticks[0]
                for _ in range(5):
                    await asyncio.to_thread(served.good_review)
                await asyncio.to_thread(eventually, lambda: ticks[0] >= turned + 5, timeout=300, interval=0.05,
                                        what="the controller's loop to turn")
                assert gate.passed == 0 and not held.done(), "the largest review was not held meanwhile"
            finally:
                gate.open()
            status, answer = await held
            ticking.cancel()
            assert status == 200 and not json.loads(answer)["response"]["allowed"], answer[:300]
            assert gate.threads.isdisjoint({threading.main_thread().name, "admission webhooks"}), gate.threads

    asyncio.run(scenario())


def test_memory_stays_bounded_whatever_clients_send(tmp_path):
    """The server alone in a process: 60 clients sending 8 MiB bodies, others bodies just under the cap,
    idle and half-sent connections, and the largest refused review back to back. Its peak resident memory
    stays within a bound, and ordinary reviews are answered meanwhile, not refused, as the API server sends
    them: on a connection it keeps open, and again on a new one when that was closed (the connection cap test
    shows that it gets one). No judging deadline: however loaded the machine, no review is refused for its
    time, so every one of them is judged and held while it is. How long ordinary reviews take beside each load
    is measured by bench/admission.py."""
    with load.ServerProcess(tmp_path, judge_seconds=600) as server, contextlib.ExitStack() as kept:
        port, context, authority = server.port, server.context, server.authority
        api_server = load.KeptAlive(port, context, timeout=600)  # as the API server calls a webhook: kept
        kept.callback(api_server.close)
        status, _ = api_server.post(CLAIM_PATH, load.review(load.claim_request()))
        assert status == 200
        before = load.rss_bytes(server.pid)
        good = []
        stages = [dict(big_bodies=60), dict(big_bodies=24, big_body_bytes=review_body.MAX_REVIEW_BYTES - 1),
                  dict(idle=40, half_headers=20, largest_reviews=4, big_bodies=8)]
        for stage in stages:
            with load.HostileProcess(port, authority.pem, POOL_PATH, tmp_path, seconds=20, **stage) as hostile:
                for _ in range(3):
                    status, _ = api_server.post(CLAIM_PATH, load.review(load.claim_request()))
                    good.append((status, len(good) // 3))
            print(stage, hostile.answers, f"peak {load.rss_bytes(server.pid, 'VmHWM') / 2**20:.0f} MiB")
        peak = load.rss_bytes(server.pid, "VmHWM")
        after = load.rss_bytes(server.pid)
    print(f"resident: {before / 2**20:.0f} MiB before, {peak / 2**20:.0f} MiB at the peak, {after / 2**20:.0f} after")
    assert all(status == 200 for status, _ in good), good
    assert peak - before < 160 * 2**20, f"peak {peak / 2**20:.0f} MiB from {before / 2**20:.0f} MiB"


# -- /convert: the in-cluster IP pool CRDs' conversion, on the same server ------------------------


def _conversion_review(desired: str, *objects: dict, uid: str = "c-1") -> bytes:
    return json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                       "request": {"uid": uid, "desiredAPIVersion": desired, "objects": list(objects)}}).encode()


V1ALPHA1_POOL = {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha1", "kind": "InClusterIPPool",
                 "metadata": {"name": "old", "namespace": "default"},
                 "spec": {"subnet": "10.0.0.0/24", "start": "10.0.0.10", "gateway": "10.0.0.1"}}
MALFORMED_CONVERSIONS = {
    "not JSON": b"{",
    "a list": b"[]",
    "an AdmissionReview": _envelope(GOOD % '"object": {}'),
    "another apiVersion": b'{"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "ConversionReview", "request": {}}',
    "request a string": b'{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": "x"}',
    "no uid": _conversion_review("ipam.cluster.x-k8s.io/v1alpha2", uid=""),
    "uid too long": _conversion_review("ipam.cluster.x-k8s.io/v1alpha2", uid="u" * 200),
    "desiredAPIVersion a number": json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                                              "request": {"uid": "u", "desiredAPIVersion": 2, "objects": []}}).encode(),
    "objects a map": json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                                 "request": {"uid": "u", "desiredAPIVersion": "v", "objects": {}}}).encode(),
    "objects holding a string": _conversion_review("ipam.cluster.x-k8s.io/v1alpha2", "x"),  # type: ignore[arg-type]
    "NaN": _conversion_review("ipam.cluster.x-k8s.io/v1alpha2", {"a": 1}).replace(b"1}", b"NaN}"),
}


def test_the_crds_name_the_path_the_server_serves():
    from metal3_ipam import crds
    for kind in ("InClusterIPPool", "GlobalInClusterIPPool"):
        config = crds.crd_for_kind(kind)["spec"]["conversion"]["webhook"]["clientConfig"]
        assert config["service"]["path"] == CONVERSION_PATH


def test_conversion_reviews_are_answered_by_core_conversion_on_the_webhook_server(tmp_path, caplog):
    async def scenario() -> None:
        async with Served(tmp_path, Limits(read_seconds=1.0)) as served:
            def ask() -> None:
                body = _conversion_review("ipam.cluster.x-k8s.io/v1alpha2", V1ALPHA1_POOL)
                status, answer = served.post(body, CONVERSION_PATH)
                assert status == 200
                assert json.loads(answer) == conversion.convert_review(json.loads(body))
                (converted,) = json.loads(answer)["response"]["convertedObjects"]
                assert converted["spec"] == {"addresses": ["10.0.0.10-10.0.0.254"], "prefix": 24,
                                             "gateway": "10.0.0.1"}
                assert json.loads(answer)["response"]["uid"] == "c-1"

                # An object that cannot be converted: a Failure naming object, field and value, answered 200.
                bad = dict(V1ALPHA1_POOL, spec={"subnet": "10.0.0.0/33"})
                status, answer = served.post(_conversion_review("ipam.cluster.x-k8s.io/v1alpha2", bad),
                                             CONVERSION_PATH)
                result = json.loads(answer)["response"]["result"]
                assert status == 200 and result["status"] == "Failure", answer
                assert "InClusterIPPool/default/old" in result["message"] and "spec.subnet" in result["message"] \
                    and "10.0.0.0/33" in result["message"], result

                # Malformed bodies: 400 (413 past the bounds), one line of log, never a traceback.
                for name, body in MALFORMED_CONVERSIONS.items():
                    caplog.clear()
                    status, answer = served.post(body, CONVERSION_PATH)
                    assert 400 <= status < 500, (name, status, answer)
                    assert "not a ConversionReview" in json.loads(answer)["error"], name
                    lines = _webhook_lines(caplog)
                    assert len(lines) == 1 and not lines[0].exc_info, (name, [r.getMessage() for r in lines])
                    assert len(lines[0].getMessage()) < 600, name
                # The server's bounds apply here too: a body over /convert's cap is refused on its headers.
                with load.tls_socket(served.port, served.context) as sock:
                    sock.sendall(f"POST {CONVERSION_PATH} HTTP/1.1\r\nHost: x\r\n"
                                 f"Content-Length: {review_body.MAX_CONVERSION_BYTES + 1}\r\n\r\n".encode())
                    assert load.status_line(sock, 5).startswith("HTTP/1.1 413 ")
                with load.tls_socket(served.port, served.context) as sock:  # and one too slow, after read_seconds
                    sock.sendall(f"POST {CONVERSION_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{".encode())
                    assert load.status_line(sock, 5).startswith("HTTP/1.1 408 ")
            await asyncio.to_thread(ask)

    with caplog.at_level(logging.DEBUG, logger="metal3_ipam"), caplog.at_level(logging.INFO):
        asyncio.run(scenario())


# -- the in-cluster provider's IP pools ----------------------------------------------------------


INCLUSTER = "ipam.cluster.x-k8s.io/v1alpha2"


def incluster_pool(name: str, kind: str = "InClusterIPPool", ns: str | None = "default", **spec) -> dict:
    meta = {"name": name, **({"namespace": ns} if kind == "InClusterIPPool" else {})}
    return {"apiVersion": INCLUSTER, "kind": kind, "metadata": meta,
            "spec": {"addresses": ["10.1.0.10-10.1.0.20"], "prefix": 24, **spec}}


def incluster_address(name: str, ip: str, pool: str, kind: str = "InClusterIPPool", ns: str = "default") -> dict:
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"address": ip, "prefix": 24, "claimRef": {"name": name},
                     "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": kind, "name": pool}}}


@pytest.mark.parametrize("kind", ["InClusterIPPool", "GlobalInClusterIPPool"])
def test_an_incluster_pool_is_judged_by_its_rules_and_keeps_its_addresses_in_use(kind):
    pool = incluster_pool("ip1", kind)
    # The same name in two namespaces: for a global pool two addresses, for a namespaced one the other
    # namespace's names another pool.
    live = inventory(pool, incluster_address("a1", "10.1.0.19", "ip1", kind),
                     incluster_address("a1", "10.1.0.18", "ip1", kind, ns="other"),
                     incluster_address("a2", "10.1.0.11", "ip1", kind))
    admission = Admission(live)
    assert admission.review(request("CREATE", pool))["allowed"]
    bad = admission.review(request("CREATE", incluster_pool("ip2", kind, gateway="10.2.0.1")))
    assert not bad["allowed"] and "spec.gateway" in bad["status"]["message"] and "10.2.0.1" in bad["status"]["message"]
    other_family = admission.review(request("CREATE", incluster_pool("ip2", kind, excludedAddresses=["fd00::1"])))
    assert "spec.excludedAddresses[0]: " in other_family["status"]["message"]

    shrunk = incluster_pool("ip1", kind, addresses=["10.1.0.10-10.1.0.15"])
    response = admission.review(request("UPDATE", shrunk, pool))
    assert not response["allowed"]
    message = response["status"]["message"]
    if kind == "GlobalInClusterIPPool":
        assert "10.1.0.18 is in use (IPAddress other/a1 (Cluster API))" in message, message
        assert "10.1.0.19 is in use (IPAddress default/a1 (Cluster API))" in message, message
    else:
        assert "10.1.0.19 is in use (IPAddress a1 (Cluster API))" in message and "10.1.0.18" not in message, message
    assert "10.1.0.11" not in message
    assert admission.review(request("UPDATE", incluster_pool("ip1", kind, addresses=["10.1.0.0/24"]), pool))["allowed"]

    refused = admission.review(request("DELETE", None, pool))
    assert not refused["allowed"] and "Pool has IPAddresses allocated" in refused["status"]["message"]
    for note in (SKIP_DELETE_VALIDATION_ANNOTATION, MOVE):
        marked = dict(pool, metadata=dict(pool["metadata"], annotations={note: ""}))
        assert admission.review(request("DELETE", None, marked))["allowed"], note
    assert Admission(inventory(pool)).review(request("DELETE", None, pool))["allowed"]


def test_a_pool_sharing_addresses_with_a_pool_of_another_kind_of_the_namespace_is_admitted_with_a_warning():
    """An IP of a namespace is handed out by one pool only (the earlier owns an overlap): the webhook says so
    to whoever creates the later pool, naming the other pool and the shared range, for every kind that keeps
    IPs unique in the namespace."""
    ippool_first = ippool("pool1", prefix=24, pools=[{"start": "10.1.0.15", "end": "10.1.0.30"}])
    ippool_first["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    admission = Admission(inventory(ippool_first))
    response = admission.review(request("CREATE", incluster_pool("ip1", "InClusterIPPool")))
    assert response["allowed"] is True, response
    (warning,) = response["warnings"]
    assert warning.startswith("spec.addresses: shares 10.1.0.15-10.1.0.20 with IPPool pool1"), warning
    assert "not handed out from this pool" in warning
    # The other way round, and as the API server's listing of IPPools answers.
    first = incluster_pool("ip1", "InClusterIPPool")
    first["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    admission = Admission(inventory(first), list_pools=lambda namespace: [])
    later = ippool("pool1", prefix=24, pools=[{"start": "10.1.0.15", "end": "10.1.0.30"}])
    req = request("CREATE", later)
    response = admission.review(req, pools=admission.current_pools(req))
    assert response["allowed"] is True, response
    (warning,) = response["warnings"]
    assert warning.startswith("spec.pools[0]: shares 10.1.0.15-10.1.0.20 with InClusterIPPool ip1"), warning
    # A global pool is told of them as a pool of another scope: independent until it has a claim there.
    (warning,) = admission.review(request("CREATE", incluster_pool("g", "GlobalInClusterIPPool")))["warnings"]
    assert "they are independent for now" in warning, warning


def test_claims_naming_incluster_pools_are_ours_and_other_kinds_of_the_group_are_not():
    admission = Admission(inventory())
    ours = capi_claim("c1", ip="10.0.0.300", api_group="ipam.cluster.x-k8s.io", kind="InClusterIPPool")
    response = admission.review(request("CREATE", ours))
    assert not response["allowed"] and "metadata.annotations.ipAddress" in response["status"]["message"]
    theirs = capi_claim("c1", ip="10.0.0.300", api_group="ipam.cluster.x-k8s.io", kind="InfobloxIPPool")
    assert admission.review(request("CREATE", theirs))["allowed"]
    # And the API server is told to send only ours of that group.
    (hook,) = [h for h in hooks() if h.kind == kinds.CAPI_CLAIM]
    expression = next(c["expression"] for c in hook.match_conditions if c["name"] == "metal3-pool")
    assert ("object.spec.poolRef.kind in ['GlobalInClusterIPPool', 'GlobalInClusterPrefixPool', 'InClusterIPPool', "
            "'InClusterPrefixPool']") in expression, expression


@pytest.mark.parametrize("group,kind", [("ipam.cluster.x-k8s.io", "InfobloxIPPool"), ("ipam.example.com", "IPPool")])
def test_a_claim_moved_away_from_our_pools_is_refused_naming_the_field_and_both_pools(group, kind):
    ours = capi_claim("c1", pool="p", api_group="ipam.cluster.x-k8s.io", kind="InClusterIPPool")
    theirs = capi_claim("c1", pool="p", api_group=group, kind=kind)
    response = Admission(inventory()).review(request("UPDATE", theirs, ours))
    message = response["status"]["message"]
    assert not response["allowed"] and 'IPAddressClaim.ipam.cluster.x-k8s.io "c1"' in message, message
    assert 'spec.poolRef: is immutable (was "InClusterIPPool.ipam.cluster.x-k8s.io p")' in message, message
    assert f'(value: "{kind}.{group} p")' in message, message
    # And the API server is told to send it: the old object names one of our pools.
    (hook,) = [h for h in hooks() if h.kind == kinds.CAPI_CLAIM]
    expression = next(c["expression"] for c in hook.match_conditions if c["name"] == "metal3-pool")
    assert "request.operation == 'UPDATE' && oldObject != null && (has(oldObject.spec)" in expression, expression


def test_a_fault_of_ours_in_conversion_is_a_500_in_one_line(tmp_path, caplog, monkeypatch):
    def broken(obj, desired):
        raise KeyError("boom")
    monkeypatch.setattr(conversion, "convert", broken)

    async def scenario() -> None:
        async with Served(tmp_path, Limits()) as served:
            def ask() -> None:
                caplog.clear()
                status, answer = served.post(_conversion_review("ipam.cluster.x-k8s.io/v1alpha2", V1ALPHA1_POOL),
                                             CONVERSION_PATH)
                assert status == 500 and json.loads(answer) == {"error": "the review could not be answered"}
                (line,) = _webhook_lines(caplog)
                assert not line.exc_info and "KeyError: 'boom'" in line.getMessage(), line.getMessage()
                assert CONVERSION_PATH in line.getMessage()
            await asyncio.to_thread(ask)

    with caplog.at_level(logging.INFO, logger="metal3_ipam"):
        asyncio.run(scenario())
