"""What the image tests of this folder share: the cert-manager CRDs, the namespace config/default installs into,
and the kubelet's part of running the manager container (its Secret, token and ports)."""

from __future__ import annotations

from pathlib import Path

from controller_fixtures import free_port
from metal3_ipam.testing import image as image_mod

CERT_MANAGER_CRDS = Path(__file__).resolve().parent / "data" / "cert-manager-crds.yaml"
OPENSHIFT_USER = (1000650000, 0)
NAMESPACE = "metal3-ipam-system"  # config/default's


def kubelet_for(installed, pod, container, tmp_path, namespace: str = NAMESPACE, **kwargs) -> image_mod.Kubelet:
    """The kubelet's part: the certificate Secret, the ServiceAccount's token, and every port the container
    declares or its probes name published on the host's loopback (the webhook port where the API server calls)."""
    plane, admin, certs, webhook_port = installed
    (cert,) = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probes = {container[p]["httpGet"]["port"] for p in ("livenessProbe", "readinessProbe") if p in container}
    numbers = {*ports.values(), *(ports.get(p, p) for p in probes)}
    webhook = next(n for name, n in ports.items() if "webhook" in name)
    return image_mod.Kubelet(
        secrets={cert: certs}, fields={"metadata.namespace": namespace},
        service_account=image_mod.service_account_folder(admin, pod, namespace, plane.ca_file, tmp_path / "serviceaccount"),
        api_port=int(plane.server.rpartition(":")[2]),
        published={n: webhook_port if n == webhook else free_port() for n in numbers}, **kwargs)
