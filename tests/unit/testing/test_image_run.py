"""How a container of a rendered Deployment becomes a ``podman run`` command line (metal3_ipam.testing.image)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metal3_ipam.testing import image

POD = {
    "terminationGracePeriodSeconds": 10,
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
                {"name": "cert", "secret": {"secretName": "webhook-server-cert", "defaultMode": 420}}],
}
CONTAINER = {
    "name": "manager", "image": "localhost/metal3-ipam:v0.1.0", "command": ["metal3-ipam"],
    "args": ["run", "--all-namespaces", "--health-address=:8081"],
    "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "PLAIN", "value": "x"}],
    "ports": [{"name": "webhook-server", "containerPort": 9443, "protocol": "TCP"},
              {"name": "metrics", "containerPort": 8081, "protocol": "TCP"}],
    "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}},
    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsUser": 65532,
                        "runAsGroup": 65532, "capabilities": {"drop": ["ALL"]}},
    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                     {"name": "cert", "mountPath": "/tmp/k8s-webhook-server/serving-certs", "readOnly": True}],
}


def kubelet(**kwargs) -> image.Kubelet:
    defaults = dict(secrets={"webhook-server-cert": Path("/host/cert")}, fields={"metadata.namespace": "ns"},
                    service_account=Path("/host/sa"), api_port=6443, published={9443: 19443, 8081: 18081})
    return image.Kubelet(**{**defaults, **kwargs})


def pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def test_the_container_is_run_as_its_manifest_says():
    argv = image.run_argv(POD, CONTAINER, kubelet(), "c1")
    at = argv.index("localhost/metal3-ipam:v0.1.0")
    assert argv[at + 1:] == CONTAINER["args"], "the arguments follow the image unchanged"
    flags = argv[:at]
    assert pairs(flags, "--entrypoint") == ['["metal3-ipam"]']
    assert pairs(flags, "--user") == ["65532:65532"]
    assert {"--read-only", "--read-only-tmpfs=false", "--cap-drop=all", "--security-opt=no-new-privileges",
            "--pull=never"} <= set(flags)
    assert pairs(flags, "--stop-timeout") == ["10"]
    assert pairs(flags, "--memory") == [str(512 * 2**20)] and pairs(flags, "--cpus") == ["0.5"]
    assert pairs(flags, "--env") == ["POD_NAMESPACE=ns", "PLAIN=x", f"KUBERNETES_SERVICE_HOST={image.HOST_LOOPBACK}",
                                     "KUBERNETES_SERVICE_PORT=6443"]
    assert pairs(flags, "--mount") == [
        f"type=bind,source=/host/sa,destination={image.SERVICE_ACCOUNT_DIR},ro=true",
        f"type=tmpfs,destination=/tmp,tmpfs-mode=1777,tmpfs-size={16 * 2**20}",
        "type=bind,source=/host/cert,destination=/tmp/k8s-webhook-server/serving-certs,ro=true"]
    assert pairs(flags, "--publish") == ["127.0.0.1:19443:9443/tcp", "127.0.0.1:18081:8081/tcp"]
    assert pairs(flags, "--network") == [image.NETWORK]


def test_another_user_volumes_left_out_and_what_cannot_be_given():
    argv = image.run_argv(POD, CONTAINER, kubelet(user=(1000650000, 0), leave_out=["tmp"]), "c2")
    assert pairs(argv, "--user") == ["1000650000:0"]
    assert not any(m.startswith("type=tmpfs") for m in pairs(argv, "--mount"))
    with pytest.raises(image.ImageError, match="POD_NAMESPACE"):
        image.run_argv(POD, CONTAINER, kubelet(fields={}), "c3")
    root = {**CONTAINER, "securityContext": {**CONTAINER["securityContext"], "runAsUser": 0}}
    with pytest.raises(image.ImageError, match="runAsNonRoot"):
        image.run_argv(POD, root, kubelet(), "c4")
    hostpath = {**POD, "volumes": [{"name": "tmp", "hostPath": {"path": "/x"}}, POD["volumes"][1]]}
    with pytest.raises(image.ImageError, match="volume tmp"):
        image.run_argv(hostpath, CONTAINER, kubelet(), "c5")


def test_quantities_and_limits_below_the_hosts():
    assert image.quantity_bytes("16Mi") == 16 * 2**20 and image.quantity_bytes("1G") == 10**9
    assert image.quantity_cpus("1") == "1" and image.quantity_cpus("250m") == "0.25"
    with pytest.raises(image.ImageError):
        image.quantity_bytes("lots")
    import resource

    flags = image.ulimit_flags()
    for name, which in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        (value,) = [f.split("=")[1] for f in flags if f.startswith(name + "=")]
        soft, hard = (int(v) for v in value.split(":"))
        limit = resource.getrlimit(which)[1]
        assert soft == hard and (limit == resource.RLIM_INFINITY or hard <= limit)


def test_the_base_is_keyed_by_what_it_holds(monkeypatch):
    key = image.base_key()
    monkeypatch.setattr(image, "BASE_PACKAGES", (*image.BASE_PACKAGES, "curl"))
    assert image.base_key() != key
