"""A real Prometheus (Debian's package, ``metal3_ipam.testing.prometheus``) scrapes the controller while a pool
fills, with the project's alert rules (short ``for:`` through their parameters).

- The usage alerts (warning, then critical) and the exhaustion alert fire for the filling pool, with its
  namespace, name and kind; claims not Ready fire by reason; a NetBox pool whose server does not answer fires
  the external IPAM alert. All of them resolve once the claims (and the NetBox pool) are deleted.
- Every query of the project's dashboard returns series from that Prometheus.
- Every ``controller_runtime_*``, ``capi_reconcile_*``, ``workqueue_*`` and ``rest_client_*`` query of Cluster
  API's Grafana controller-runtime dashboard returns series of this controller.

The scrape goes to the controller's health port (``/metrics``); ``scrape_job`` takes any other endpoint.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import ssl
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from controller_fixtures import REPO, Kube
from metal3_ipam import observability
from metal3_ipam.testing.prometheus import Prometheus, PrometheusUnavailable, static_job
from metal3_ipam.testing.waiting import eventually
from netbox_fixtures import put_secret
from webhook_fixtures import apply, new_namespace

# Cluster API's Grafana dashboard of controller-runtime managers (its hack/observability/grafana, Apache 2.0).
CAPI_DASHBOARD = Path(__file__).resolve().parent / "data" / "capi-controller-runtime-dashboard.json"
POD = "metal3-ipam-controller-manager-7d9f8-abcde"
CONTROLLER_NAMESPACE = "metal3-ipam-system"
SIZE = 10  # addresses of the filling pool
# Short enough for a test: every alert pending for 2 s before it fires, claims alerted on after 1 s, resolved at
# once (no keep_firing_for).
SETTINGS = observability.RuleSettings(durations=dict.fromkeys(observability.DEFAULT_FOR, "2s"),
                                      claims_not_ready_seconds=1, rate_window="30s", keep_firing_for="0s")
POOL_ALERTS = ("Metal3IPAMPoolUsageHigh", "Metal3IPAMPoolUsageCritical", "Metal3IPAMPoolExhausted",
               "Metal3IPAMClaimsNotReady", "Metal3IPAMExternalIPAMUnreachable")


def _histogram_settings() -> dict:
    """config/prometheus's ServiceMonitor's histogram settings, as Prometheus's scrape configuration names them."""
    spec = yaml.safe_load((REPO / "config" / "prometheus" / "monitor.yaml").read_text())["spec"]
    return {"always_scrape_classic_histograms": spec["scrapeClassicHistograms"],
            "convert_classic_histograms_to_nhcb": spec["convertClassicHistogramsToNHCB"]}


def scrape_job(target: str, **extra) -> dict:
    """The controller's metrics endpoint as a Prometheus in the cluster scrapes it through the ServiceMonitor
    of config/prometheus (and of the chart): with the target labels Kubernetes discovery gives (``namespace``,
    ``pod``), the controller's own labels kept (``honor_labels``, as the pool series carry a ``namespace`` of
    their own), and each classic histogram kept and also converted to a native one with its buckets
    (``scrapeClassicHistograms``, ``convertClassicHistogramsToNHCB``). ``extra``: ``scheme``,
    ``authorization``, ``tls_config``, ``metrics_path`` of another endpoint."""
    return static_job("metal3-ipam", target, labels={"namespace": CONTROLLER_NAMESPACE, "pod": POD},
                      **_histogram_settings(), **extra)


@pytest.fixture(scope="module")
def prometheus(webhook_controller, tmp_path_factory):
    directory = tmp_path_factory.mktemp("prometheus")
    rules = directory / "rules.yaml"
    rules.write_text(yaml.safe_dump(observability.rules_file(SETTINGS)))
    server = Prometheus([scrape_job(f"127.0.0.1:{webhook_controller.process.port}")], [rules], directory=directory)
    try:
        server.start()
    except PrometheusUnavailable as err:
        pytest.fail(f"Prometheus unavailable: {err}", pytrace=False)
    try:
        eventually(server.targets_up, timeout=30, what="the controller scraped")
        yield server
    finally:
        server.stop()


def _firing(prom: Prometheus, name: str, **labels: str) -> list[dict]:
    return [a for a in prom.alerts(name, "firing") if all(a["labels"].get(k) == v for k, v in labels.items())]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Filling:
    """The namespace of the test, its pool and claims."""

    def __init__(self, api, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.kube = Kube(api, namespace)
        self.pool = {"namespace": namespace, "pool": "filling", "kind": "IPPool"}
        self.netbox = {"namespace": namespace, "pool": "far-away", "kind": "NetBoxIPPool"}

    def claim(self, n: int) -> None:
        self.kube.claim(f"claim-{n}", "filling")


@pytest.fixture(scope="module")
def filling(webhook_controller, webhook_api, prometheus):
    namespace = new_namespace(webhook_api, "obs")
    state = Filling(webhook_api, namespace)
    state.kube.pool("filling", pools=[{"start": "192.168.77.10", "end": f"192.168.77.{9 + SIZE}"}], prefix=24)
    return state


def test_usage_alerts_fire_as_the_pool_fills_with_its_labels(filling, prometheus):
    for n in range(SIZE - 1):
        filling.claim(n)
    for n in range(SIZE - 1):
        filling.kube.bound(f"claim-{n}")
    high = eventually(lambda: _firing(prometheus, "Metal3IPAMPoolUsageHigh", **filling.pool), timeout=60,
                      what="the usage warning firing at 90%")
    assert high[0]["labels"]["severity"] == "warning"
    assert high[0]["annotations"]["summary"] == f"IP pool {filling.namespace}/filling (IPPool) is 90% used"
    assert not _firing(prometheus, "Metal3IPAMPoolUsageCritical", **filling.pool)

    filling.claim(SIZE - 1)
    filling.kube.bound(f"claim-{SIZE - 1}")
    critical = eventually(lambda: _firing(prometheus, "Metal3IPAMPoolUsageCritical", **filling.pool), timeout=60,
                          what="the usage page firing at 100%")
    assert critical[0]["annotations"]["summary"] == f"IP pool {filling.namespace}/filling (IPPool) is 100% used"
    eventually(lambda: not _firing(prometheus, "Metal3IPAMPoolUsageHigh", **filling.pool), timeout=30,
               what="the warning giving way to the page")


def test_exhaustion_fires_while_a_claim_waits_and_claims_not_ready_by_reason(filling, prometheus):
    filling.claim(SIZE)
    exhausted = eventually(lambda: _firing(prometheus, "Metal3IPAMPoolExhausted", **filling.pool), timeout=60,
                           what="the exhaustion alert")
    assert exhausted[0]["labels"]["severity"] == "critical"
    assert exhausted[0]["annotations"]["summary"] == (
        f"IP pool {filling.namespace}/filling (IPPool) has no free address and 1 claims are waiting")
    waiting = eventually(lambda: _firing(prometheus, "Metal3IPAMClaimsNotReady", **filling.pool,
                                         reason="PoolExhausted"), timeout=60, what="claims not Ready by reason")
    assert "(PoolExhausted)" in waiting[0]["annotations"]["summary"]


def test_an_unreachable_netbox_fires_the_external_ipam_alert(filling, prometheus, webhook_api):
    put_secret(webhook_api, filling.namespace, "netbox", "0123456789abcdef0123456789abcdef01234567")
    filling.kube.create(("netbox.metal3-ipam.io", "v1alpha1"), "netboxippools", {
        "apiVersion": "netbox.metal3-ipam.io/v1alpha1", "kind": "NetBoxIPPool", "metadata": {"name": "far-away"},
        "spec": {"server": {"url": f"http://127.0.0.1:{_closed_port()}", "tokenSecretRef": {"name": "netbox"}},
                 "source": {"prefix": "10.99.0.0/29"}}})
    fired = eventually(lambda: _firing(prometheus, "Metal3IPAMExternalIPAMUnreachable", **filling.netbox),
                       timeout=90, what="the external IPAM alert for the NetBox pool")
    assert fired[0]["annotations"]["summary"] == (
        f"The IPAM server of pool {filling.namespace}/far-away (NetBoxIPPool) does not answer")


_OLD_SUBNETS = itertools.count()  # the third octet of the next v1alpha1 pool's subnet


def _reviews_answered(webhook_controller, webhook_api, filling, prometheus: Prometheus) -> None:
    """Traffic for every webhook panel: reviews the webhook cannot read (answered 400; two, with a scrape of the
    first in between, so that their rate is seen), and a v1alpha1 in-cluster pool (through /convert)."""
    context = ssl.create_default_context(cadata=webhook_controller.authority.pem.decode())
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    for _ in range(2):
        request = urllib.request.Request(
            f"https://127.0.0.1:{webhook_controller.port}/validate-ipam-metal3-io-v1alpha1-ipclaim", data=b"not json",
            headers={"Content-Type": "application/json"}, method="POST")
        seen = sum(float(s["value"][1]) for s in prometheus.query('controller_runtime_webhook_requests_total{code="400"}'))
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open(request, timeout=10)
        assert refused.value.code == 400
        eventually(lambda: sum(float(s["value"][1]) for s in prometheus.query(
            'controller_runtime_webhook_requests_total{code="400"}')) > seen, timeout=30, what="the 400 scraped")
    # Each call's pool has a subnet of its own: a second pool over the first's addresses would have them all
    # withheld as overlapping, be 100% used and keep Metal3IPAMPoolUsageCritical firing.
    net = f"10.30.{next(_OLD_SUBNETS)}"
    old = {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha1", "kind": "InClusterIPPool",
           "metadata": {"name": f"old-{uuid.uuid4().hex[:6]}"},
           "spec": {"subnet": f"{net}.0/24", "start": f"{net}.10", "gateway": f"{net}.1"}}
    eventually(lambda: apply(webhook_api, old, filling.namespace).status == 201, timeout=30,
               what="a v1alpha1 pool created through the controller's conversion")


def _filled(text: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        text = text.replace(f"${name}", value)
    return text


def _missing(prometheus: Prometheus, queries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(title, query) for title, query in queries if not prometheus.query(query)]


def _all_answer(prometheus: Prometheus, queries: list[tuple[str, str]], timeout: float = 90.0) -> None:
    left = list(queries)

    def none_left() -> bool:
        left[:] = _missing(prometheus, left)
        return not left

    try:
        eventually(none_left, timeout=timeout, interval=1.0, what="every query answered")
    except AssertionError:
        pass
    assert left == [], "queries without series:\n" + "\n".join(f"{t}: {q}" for t, q in left)


def test_every_query_of_the_pool_dashboard_returns_series(filling, prometheus, webhook_controller, webhook_api):
    _reviews_answered(webhook_controller, webhook_api, filling, prometheus)
    values = {"__rate_interval": "1m", "namespace": ".*", "pool": ".*", "kind": ".*", "job": ".*"}
    queries = [(title, _filled(query, values)) for title, query in observability.dashboard_queries()]
    _all_answer(prometheus, queries)


def _capi_dashboard() -> dict:
    return json.loads(CAPI_DASHBOARD.read_text())


def _capi_queries(native: bool) -> list[tuple[str, str]]:
    """The dashboard's queries of controller-runtime, Cluster API, work-queue and client-go series, its variables
    filled (every pod and controller). ``native``: those of its histogram and heatmap panels, which select a
    histogram by its bare name (a native histogram); else the others."""
    found = []

    def walk(panels):
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    for panel in walk(_capi_dashboard()["panels"]):
        for target in panel.get("targets", []):
            expr = target.get("expr", "")
            if not re.search(r"\b(controller_runtime_|capi_reconcile_|workqueue_|rest_client_)", expr):
                continue
            bare = bool(re.search(r"\b\w+_seconds\{", expr))
            if bare == native:
                found.append((panel["title"], _filled(expr, {"__rate_interval": "1m", "Pod": ".*",
                                                             "Controller": ".*"})))
    return found


def test_every_controller_query_of_the_capi_dashboard_returns_series_of_this_controller(
        filling, prometheus, webhook_controller, webhook_api):
    _reviews_answered(webhook_controller, webhook_api, filling, prometheus)
    queries = _capi_queries(native=False)
    assert len(queries) >= 30
    _all_answer(prometheus, queries)
    for title, query in queries:
        for series in prometheus.query(query):
            assert series["metric"].get("pod", POD) == POD, (title, series)
    controllers = {s["metric"]["controller"] for s in prometheus.query("controller_runtime_active_workers")}
    assert "ippool" in controllers and "netboxippool" in controllers


def test_the_native_histogram_panels_of_the_capi_dashboard_return_series(filling, prometheus):
    """The histogram and heatmap panels select a native histogram by its bare name
    (``controller_runtime_reconcile_time_seconds{...}``): the classic histograms the controller serves answer
    them once converted at the scrape, as the ServiceMonitor asks."""
    queries = _capi_queries(native=True)
    assert queries
    _all_answer(prometheus, queries)


def test_the_alerts_resolve_when_the_claims_and_the_netbox_pool_are_deleted(filling, prometheus):
    filling.kube.delete(("netbox.metal3-ipam.io", "v1alpha1"), "netboxippools", "far-away")
    for n in range(SIZE + 1):
        filling.kube.delete(("ipam.metal3.io", "v1alpha1"), "ipclaims", f"claim-{n}")

    def resolved() -> bool:
        return not [a for a in prometheus.alerts() if a["labels"].get("alertname") in POOL_ALERTS
                    and a["labels"].get("namespace") == filling.namespace]

    eventually(resolved, timeout=120, interval=1.0, what="every pool alert of the namespace resolved")
    usage = prometheus.query(f'metal3_ipam_pool_free{{namespace="{filling.namespace}", pool="filling"}}')
    assert [float(s["value"][1]) for s in usage] == [SIZE]
