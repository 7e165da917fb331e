"""The admission webhook server under clients that try to get past its limits.

Each test is bounded in count and time and talks to a server on loopback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time

import pytest

from metal3_ipam.controller import review_body, webhook_server
from metal3_ipam.controller.admission import BUSY, Admission
from metal3_ipam.controller.webhook_server import Limits, WebhookServer
from metal3_ipam.testing import webhook_load as load
from metal3_ipam.testing.certs import Authority
from metal3_ipam.testing.waiting import eventually
from served_webhook import CLAIM_PATH, POOL, POOL_PATH, GatedAdmission, Served, address
from ipam_objects import admission_request as request
from ipam_objects import inventory_of as inventory
from metal3_ipam.core.conversion import CONVERSION_PATH
from metal3_ipam.core import conversion


def test_small_costly_reviews_do_not_get_a_good_review_refused(tmp_path):
    """A dozen clients posting reviews just under 64 KiB that take long to judge, all waiting on one judge: an
    ordinary review (a few hundred bytes) is judged ahead of them (smallest first), so it is answered while
    they wait. The judge is held at a gate and let through one review at a time, so that this is a matter of
    order, not of time: judged in arrival order, the ordinary review would wait for every costly review sent
    before it. How long each takes is measured by bench/admission.py."""
    body = load.review(load.pool_request(load.costly_small_pool()))
    assert len(body) <= Limits().small_review_bytes
    admission = GatedAdmission(inventory())
    gate = admission.gate
    costly_count = 12

    async def scenario() -> None:
        # No judging deadline: every review is judged however long it is held, never refused for its time.
        async with Served(tmp_path, Limits(judge_seconds=600), admission) as served:
            lane = served.server._lanes["small"]
            costly: list[int] = []
            good: list[tuple[int, int]] = []  # (status, costly reviews let through before it was answered)

            def post_costly() -> None:
                status, _ = load.post(served.port, served.context, POOL_PATH, body, timeout=600)
                costly.append(status)

            def post_good() -> None:
                status, _ = load.post(served.port, served.context, CLAIM_PATH, load.review(load.claim_request()),
                                      timeout=600)
                good.append((status, gate.passed))

            def ask() -> None:
                # One costly review at the gate, the others queued behind it (each holds one place in the lane).
                eventually(lambda: gate.arrived == 1 and lane.taken == costly_count, timeout=300, interval=0.02,
                           what="the costly reviews to wait for the judge")
                asking = threading.Thread(target=post_good, daemon=True)
                asking.start()
                eventually(lambda: lane.taken == costly_count + 1, timeout=300, interval=0.02,
                           what="the ordinary review to wait for the judge")
                # Let the costly reviews through one at a time, until the ordinary one is answered: each time
                # once the next one is at the gate and the ordinary one waits in the queue (not on its way back
                # to the server's loop between its reading and its judging, which a loaded machine draws out).
                def ordinary_queued() -> bool:
                    return min(list(lane._waiting.values()), default=len(body)) < len(body) // 2

                given = 0
                while not good and given < costly_count:
                    gate.let_through()
                    given += 1
                    eventually(lambda: gate.passed == given and (
                        good or given == costly_count or (gate.arrived > given and ordinary_queued())),
                        timeout=300, interval=0.02, what="the judge to reach the gate again")
                asking.join(300)

            senders = [threading.Thread(target=post_costly, daemon=True) for _ in range(costly_count)]
            for thread in senders:
                thread.start()
            try:
                await asyncio.to_thread(ask)
            finally:
                gate.open()
                await asyncio.to_thread(lambda: [t.join(300) for t in senders])
            print(f"the ordinary review answered {good} after {good[0][1] if good else '?'} of "
                  f"{costly_count} costly reviews")
            assert costly == [200] * costly_count, costly
            (status, let_through), = good
            assert status == 200
            # Smallest first: it waits for the costly review under way, and perhaps for one more that the judge
            # took up while the ordinary review went back to the server's loop between its reading and its
            # judging (each step is judged in turn); in arrival order it would wait for all twelve.
            assert let_through <= 2, f"answered after {let_through} of {costly_count} costly reviews were judged"

    asyncio.run(scenario())


def test_a_pool_deletion_is_not_refused_because_the_controller_is_busy():
    """A deletion is never held on what is not known (the pool's finalizer keeps it anyway): the inventory not
    copied in time is no reason to refuse one either."""
    pool_in_use = inventory(POOL, address("a", "192.168.0.12"))
    admission = Admission(pool_in_use)
    assert not admission.review(request("DELETE", None, POOL))["allowed"]  # known: refused while in use
    assert admission.review(request("DELETE", None, POOL), live=BUSY)["allowed"]


def test_a_review_that_arrives_on_a_kept_alive_connection_is_not_cut_while_it_is_read(tmp_path):
    """The API server keeps its connections: one idle for a while then sends a review whose body takes a moment
    to arrive. Meanwhile the connections are at their cap and newcomers wait: the review on its way is
    answered, not cut because its connection had been idle before it."""
    async def scenario() -> None:
        async with Served(tmp_path, Limits(connections=4)) as served:
            def ask() -> str:
                body = load.review(load.claim_request())
                with load.tls_socket(served.port, served.context) as kept:
                    time.sleep(1.0)  # idle longer than its grace: it is the longest waiting
                    kept.sendall(f"POST {CLAIM_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:100])
                    others = [load.tls_socket(served.port, served.context) for _ in range(3)]  # at the cap
                    try:
                        time.sleep(0.3)  # the rest of the body is on its way
                        kept.sendall(body[100:])
                        return load.status_line(kept, 5)
                    finally:
                        for sock in others:
                            sock.close()
            line = await asyncio.to_thread(ask)
            assert line.startswith("HTTP/1.1 200 "), line

    asyncio.run(scenario())


def test_a_refusal_of_a_hostile_name_is_logged_in_one_line(tmp_path, caplog):
    """A review sent straight to the port (the API server would have refused the name first), its name and
    values full of line breaks: its refusal is still one line of log."""
    pool = json.loads(json.dumps(POOL))
    pool["metadata"]["name"] = "p\nERROR forged line\r\n"
    pool["spec"]["pools"] = [{"start": "192.168.0.20\nERROR forged", "end": "192.168.0.10"}]

    async def scenario() -> None:
        async with Served(tmp_path, Limits()) as served:
            status, answer = await asyncio.to_thread(served.post, load.review(request("CREATE", pool)))
            assert status == 200 and not json.loads(answer)["response"]["allowed"]

    with caplog.at_level(logging.INFO, logger="metal3_ipam"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("metal3_ipam") and "refused" in r.getMessage()]
    assert lines and all("\n" not in line and "\r" not in line for line in lines), lines


def test_the_switch_interval_is_restored_when_the_server_cannot_start(tmp_path):
    """A server that cannot listen (its port taken) leaves the process's switch interval as it found it."""
    authority = Authority.create()
    authority.issue(tmp_path)
    before = sys.getswitchinterval()

    async def scenario() -> None:
        import socket
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            with pytest.raises(OSError):
                await WebhookServer(Admission(inventory()), "127.0.0.1", taken.getsockname()[1], tmp_path).start()
        assert sys.getswitchinterval() == before

    asyncio.run(scenario())


def test_hostile_kinds_are_not_kept_once_answered(tmp_path):
    """Reviews whose object has a kind of megabytes, each a different one: once they are answered, the
    server's resident memory is back near where it was (nothing of them is kept)."""
    with load.ServerProcess(tmp_path) as server:
        port, context = server.port, server.context
        status, _ = load.post(port, context, CLAIM_PATH, load.review(load.claim_request()))
        assert status == 200
        before = load.rss_bytes(server.pid)
        statuses = set()
        for i in range(48):
            obj = {"apiVersion": f"x{i}/v1", "kind": "K" * (2 * 1024 * 1024), "metadata": {"name": "n"}}
            status, _ = load.post(port, context, POOL_PATH, load.review(
                {"uid": f"u{i}", "operation": "CREATE", "kind": {"group": "g", "version": "v", "kind": "K"},
                 "object": obj}))
            statuses.add(status)
        after = load.rss_bytes(server.pid)
    assert statuses == {200}, statuses
    assert after - before < 48 * 2**20, f"{before / 2**20:.0f} MiB before, {after / 2**20:.0f} MiB after"


@pytest.mark.parametrize("namespace", ["x/ippools/../../../../api/v1/secrets?", "a" * (1024 * 1024), "ns\nERROR forged",
                                       "default?watch=true", "default\n"])
def test_a_namespace_no_api_server_would_send_is_never_listed(namespace, caplog):
    """A pool review sent straight to the port, its namespace not a namespace's name: the controller lists
    nothing for it (the namespace would go into the path it asks the API server for), and logs no more than
    a line of bounded length."""
    asked = []

    def list_pools(ns: str) -> list[dict]:
        asked.append(ns)
        raise RuntimeError(f"GET /apis/ipam.metal3.io/v1alpha1/namespaces/{ns}/ippools: 404")

    pool = json.loads(json.dumps(POOL))
    pool["metadata"]["namespace"] = namespace
    review = request("CREATE", pool)
    with caplog.at_level(logging.DEBUG, logger="metal3_ipam"):
        assert Admission(inventory(), list_pools=list_pools).current_pools(review) is None
    assert asked == []
    assert all(len(r.getMessage()) < 1000 and "\n" not in r.getMessage() for r in caplog.records)


def test_a_full_lane_makes_way_for_smaller_reviews_and_keeps_its_bound():
    """The lane's queue full of large reviews, smaller ones arriving together take their places one for one:
    never more than its bound queued, the largest dropped first (503), each dropped once, and the count of
    what is queued back to zero once all is done."""
    async def scenario() -> None:
        lane = webhook_server._Lane("test lane", 3)
        gate = threading.Event()
        try:
            deadline = asyncio.get_running_loop().time() + 10
            big = [asyncio.create_task(lane.run(gate.wait, size, deadline)) for size in (900, 800, 700)]
            await asyncio.sleep(0.05)  # the smallest of them (700) is under way, held by the gate
            small = [asyncio.create_task(lane.run(lambda: "small", size, deadline)) for size in (10, 20, 30)]
            await asyncio.sleep(0)
            assert lane.taken <= lane.bound
            gate.set()
            results = await asyncio.gather(*big, *small, return_exceptions=True)
            refused = [isinstance(r, webhook_server._Refused) and r.status == 503 for r in results]
            assert refused == [True, True, False, False, False, True], results  # 900, 800 made way; 700 under way
            await asyncio.sleep(0.05)
            assert lane.taken == 0
        finally:
            lane.close()

    asyncio.run(scenario())


def test_a_request_with_a_bad_method_is_logged_without_a_traceback(tmp_path, caplog):
    """A method that is not one (what a client speaking another protocol sends first): 400, and its log line
    (aiohttp's, at debug level) carries no traceback."""
    async def scenario() -> None:
        async with Served(tmp_path, Limits()) as served:
            def ask() -> str:
                with load.tls_socket(served.port, served.context) as sock:
                    sock.sendall(f"P\x00ST {POOL_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
                    return load.status_line(sock, 5)
            assert " 400 " in await asyncio.to_thread(ask)
            await asyncio.to_thread(eventually, lambda: _lines(caplog), timeout=5, interval=0.05,
                                    what="the request's line")

    with caplog.at_level(logging.DEBUG, logger="metal3_ipam"):
        asyncio.run(scenario())
    lines = _lines(caplog)
    assert len(lines) == 1 and not lines[0].exc_info and "\n" not in lines[0].getMessage(), \
        [(r.getMessage(), r.exc_info) for r in lines]


def _lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("metal3_ipam.webhook") and "handshake" not in r.getMessage()]


def test_brackets_inside_strings_are_not_counted_as_objects_and_lists():
    """The API server lets an object carry 256 KiB of annotations, whatever characters they hold: a claim whose
    annotation is 150,000 brackets is a review it sends, and is read (the bound on objects and lists counts
    those the body holds, not characters of its strings)."""
    claim = {"apiVersion": "ipam.metal3.io/v1alpha1", "kind": "IPClaim",
             "metadata": {"name": "c", "namespace": "default", "annotations": {"note": "[{" * 75_000}},
             "spec": {"pool": {"name": "pool1"}}}
    _, read = review_body.read_review(load.review(request("CREATE", claim)))
    assert read["object"]["metadata"]["annotations"]["note"].startswith("[{")
    with pytest.raises(review_body.Malformed) as refused:  # the bound still holds for what a body holds
        review_body.read_review(load.review(request("CREATE", dict(claim, spec={"x": [[]] * 100_001}))))
    assert refused.value.status == 413


def test_the_server_accepts_again_after_running_out_of_file_descriptors(tmp_path):
    """The process's descriptors run out while clients connect (accept fails with EMFILE): once they are
    back, the server accepts and answers again; it does not stop accepting for good."""
    import os
    import resource
    import socket

    async def scenario() -> None:
        async with Served(tmp_path, Limits()) as served:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

            def ask() -> int:
                clients = []
                resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 12, hard))
                try:
                    for _ in range(10):  # each takes a descriptor here and one in the server, until none is left
                        try:
                            clients.append(socket.create_connection(("127.0.0.1", served.port), timeout=2))
                        except OSError:
                            break
                    time.sleep(0.5)
                finally:
                    for sock in clients:
                        sock.close()
                    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
                good = load.review(load.claim_request())
                return eventually(lambda: load.post(served.port, served.context, CLAIM_PATH, good, timeout=10)[0],
                                  timeout=120, interval=0.2, what="a good review answered",
                                  retry_on=(AssertionError, OSError))

            assert await asyncio.to_thread(ask) == 200

    asyncio.run(scenario())


# -- ConversionReviews: a whole LIST in one body ---------------------------------------------------------


V1ALPHA2 = "ipam.cluster.x-k8s.io/v1alpha2"


def _stored_v1alpha1_pool(i: int, note: str = "") -> dict:
    """An InClusterIPPool as the API server sends it to be converted: read at v1alpha1, managedFields and all."""
    meta = {"name": f"pool-{i}", "namespace": "default", "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i), "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"apiVersion": V1ALPHA2, "fieldsType": "FieldsV1", "manager": "kubectl",
                               "fieldsV1": {"f:spec": {".": {}, "f:addresses": {}, "f:gateway": {}, "f:prefix": {}}},
                               "operation": "Update", "time": "2026-01-01T00:00:00Z"}]}
    if note:
        meta["annotations"] = {"note": note}
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha1", "kind": "InClusterIPPool", "metadata": meta,
            "spec": {"subnet": f"10.{i // 256 % 256}.{i % 256}.0/24", "gateway": f"10.{i // 256 % 256}.{i % 256}.1"}}


def _conversion_body(objects: list, desired: str = V1ALPHA2, **request) -> bytes:
    return json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                       "request": {"uid": "c-1", "desiredAPIVersion": desired, "objects": objects, **request}}).encode()


def test_a_v1alpha1_list_longer_than_the_admission_reviews_cap_is_converted(tmp_path):
    """The API server converts a LIST read at v1alpha1 in one ConversionReview holding every pool of it: one
    past the AdmissionReviews' cap (6.25 MiB) is answered, each pool converted as it is alone."""
    pools = [_stored_v1alpha1_pool(i, note="n" * 2048) for i in range(3000)]
    body = _conversion_body(pools)
    assert review_body.MAX_REVIEW_BYTES < len(body) < review_body.MAX_CONVERSION_BYTES

    async def scenario() -> None:
        async with Served(tmp_path, Limits()) as served:
            status, answer = await asyncio.to_thread(served.post, body, CONVERSION_PATH)
            assert status == 200, answer[:300]
            response = json.loads(answer)["response"]
            assert response["uid"] == "c-1" and response["result"] == {"status": "Success"}
            converted = response["convertedObjects"]
            assert len(converted) == len(pools)
            for i in (0, 1234, len(pools) - 1):
                assert converted[i] == conversion.convert(pools[i], V1ALPHA2)

    asyncio.run(scenario())


def test_a_conversion_review_is_read_and_answered_one_object_at_a_time():
    """What a review costs is its body, its answer and one object parsed: never the whole list parsed (which
    takes about ten times the body), measured against the body's size in the same run."""
    import tracemalloc

    body = _conversion_body([_stored_v1alpha1_pool(i) for i in range(4000)])
    tracemalloc.start()
    try:
        read = review_body.read_conversion_body(body)
        _, answer = webhook_server._conversion_answer(read)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert json.loads(answer) == conversion.convert_review(json.loads(body))
    assert peak < len(body) + 2 * len(answer), (peak, len(body), len(answer))


def test_a_conversion_review_is_read_whatever_its_layout():
    """Keys in any order (objects before desiredAPIVersion), indented, values longer than the first slice a
    value is looked for in, a character of several bytes across that slice's end, numbers in the envelope."""
    pools = [_stored_v1alpha1_pool(i, note="é" * (review_body._FIRST_READ // 2 + i)) for i in range(3)]
    review = {"request": {"objects": pools, "extra": 1234567, "uid": "c-1", "desiredAPIVersion": V1ALPHA2},
              "kind": "ConversionReview", "apiVersion": "apiextensions.k8s.io/v1"}
    for body in (json.dumps(review, indent=2, ensure_ascii=False).encode(), json.dumps(review).encode()):
        _, answer = webhook_server._conversion_answer(review_body.read_conversion_body(body))
        assert json.loads(answer) == conversion.convert_review(review)


@pytest.mark.parametrize("body, words", [
    (_conversion_body([{}] * 100_000), "more than one object per 64 bytes"),
    (_conversion_body([], extra=["xy"] * 1_200_000), "longer than"),
    (_conversion_body([], **{f"k{i}": "v" * 200 for i in range(40_000)}), "besides its objects"),
    (_conversion_body([{"big": "x" * (review_body.MAX_REVIEW_BYTES + 1)}]), "longer than"),
    (_conversion_body([{"deep": [[]] * 100_001}]), "objects and lists"),
], ids=["tiny objects", "a long value", "many values", "a long object", "a dense object"])
def test_what_a_conversion_body_may_hold_besides_objects_is_bounded_as_a_review_is(body, words):
    """Each value parsed at a time is at most an AdmissionReview's size and density, the review but its objects
    too, and the objects are not many tiny ones: past that, 413 before anything more is parsed."""
    with pytest.raises(review_body.Malformed) as refused:
        review_body.read_conversion_body(body)
    assert refused.value.status == 413 and words in str(refused.value), refused.value
