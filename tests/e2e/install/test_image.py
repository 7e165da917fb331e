"""The controller image, built from the Dockerfile and run the way the shipped Deployment runs it.

The image is built with podman on a Debian base made by mmdebstrap (no
registry is reached; see :mod:`metal3_ipam.testing.image`) under the name
``config/default`` gives its container. ``config/default`` is rendered by
kustomize and installed on a control plane of the module's own; the
Deployment's container is then run as the kubelet would run it: its command,
arguments, environment, security context, limits, volumes (the webhook
certificate Secret, the /tmp emptyDir) and ports, with the ServiceAccount's
token where a pod finds it. Checked: the user, the read-only root with only
the manifest's volumes writable, no capabilities, no new privileges, the
probes, claims served, the admission webhooks over TLS, a clean end on
SIGTERM (how long it took is printed beside the grace period: a loaded machine
draws it out), and, as another user as OpenShift assigns
one, the same again. Without its /tmp volume, given a kubeconfig with inline
certificates, it ends with one clear line.
"""

from __future__ import annotations

import base64
import json

import pytest
import yaml

from controller_fixtures import REPO, free_port, start_control_plane
from metal3_ipam.testing import image as image_mod
from metal3_ipam.testing.certs import Authority
from image_fixtures import CERT_MANAGER_CRDS, NAMESPACE, OPENSHIFT_USER, kubelet_for
from metal3_ipam.testing.waiting import eventually
from webhook_fixtures import install, serves_claims_and_webhooks, use_webhooks_at


@pytest.fixture(scope="module")
def installed(control_plane_binaries, rendered, tmp_path_factory):
    """config/default applied to a control plane whose certificate also names the host as containers see it."""
    plane = start_control_plane(control_plane_binaries, serving_hosts=[image_mod.HOST_LOOPBACK],
                                crd_paths=[REPO / "config" / "crd" / "capi", CERT_MANAGER_CRDS])
    try:
        with plane.api_client() as admin:
            install(admin, rendered, "kubectl")
            certs = tmp_path_factory.mktemp("webhook-server-cert")
            authority = Authority.create()
            authority.issue(certs)
            image_mod.readable(certs)
            webhook_port = free_port()
            use_webhooks_at(admin, rendered, webhook_port, authority.pem)
            yield plane, admin, certs, webhook_port
    finally:
        plane.stop()


# -- the image ---------------------------------------------------------------------------------------

def test_the_image_holds_no_installer_and_runs_as_its_own_user(built):
    (info,) = json.loads(image_mod.podman("image", "inspect", built.tag).stdout)
    assert info["Config"]["User"] == "65532:65532"
    assert info["Config"]["Entrypoint"] == ["metal3-ipam"]
    assert info["Labels"][image_mod.LABEL] == "true"
    look = image_mod.podman(
        "run", "--rm", *image_mod.ulimit_flags(), "--network", "none", "--entrypoint", "python3", built.tag, "-c",
        "import importlib.util, json, sys; "
        "print(json.dumps([sys.prefix] + [m for m in ('pip', 'setuptools', 'wheel', 'kubernetes.aio') "
        "if importlib.util.find_spec(m.split('.')[0]) and importlib.util.find_spec(m)]))")
    prefix, *found = json.loads(look.stdout)
    assert prefix == "/opt/metal3-ipam" and found == [], look.stdout


# -- the Deployment's container --------------------------------------------------------------------

def test_the_manager_container_runs_as_the_manifest_says(built, installed, manager, tmp_path):
    pod, container = manager
    plane, admin, certs, webhook_port = installed
    with image_mod.Container(pod, container, kubelet_for(installed, pod, container, tmp_path)) as running:
        running.wait_ready()
        assert running.probe("livenessProbe") == 200

        # Who it runs as, and with what: uid and gid, no capability at all, no new privileges, seccomp.
        security = container["securityContext"]
        status = dict(line.split(":\t", 1) for line in running.exec("cat", "/proc/1/status").splitlines()
                      if ":\t" in line)
        assert status["Uid"].split()[0] == str(security["runAsUser"])
        assert status["Gid"].split()[0] == str(security["runAsGroup"])
        for kind in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(status[kind], 16) == 0, (kind, status[kind])
        assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"

        # The root is read-only; what can be written is what the manifest mounts writable (and what every
        # container runtime provides: /dev/shm, the /etc files of the network).
        writable = set()
        for line in running.exec("cat", "/proc/1/mounts").splitlines():
            _, point, kind, options, *_ = line.split()
            if "rw" in options.split(",") and not point.startswith(("/proc", "/sys", "/dev")) \
                    and point not in ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run/.containerenv"):
                writable.add(point)
            if point == "/":
                assert "ro" in options.split(","), line
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert writable == {m["mountPath"] for m in container["volumeMounts"]
                            if "emptyDir" in volumes[m["name"]] and not m.get("readOnly")}

        serves_claims_and_webhooks(admin, "image", pod_namespace=NAMESPACE)
        image_mod.ends_cleanly(running)


def test_the_image_runs_as_an_arbitrary_user_of_group_root(built, installed, manager, tmp_path):
    """OpenShift's restricted policy runs a pod as a uid of the namespace's range, with gid 0."""
    pod, container = manager
    plane, admin, certs, webhook_port = installed
    kubelet = kubelet_for(installed, pod, container, tmp_path, user=OPENSHIFT_USER)
    with image_mod.Container(pod, container, kubelet) as running:
        running.wait_ready()
        status = running.exec("cat", "/proc/1/status")
        assert f"Uid:\t{OPENSHIFT_USER[0]}\t" in status
        serves_claims_and_webhooks(admin, "openshift-uid", pod_namespace=NAMESPACE)
        image_mod.ends_cleanly(running)


def test_without_a_writable_tmp_it_ends_with_one_clear_line(built, installed, manager, tmp_path):
    """A kubeconfig with inline certificates (as clusters hand them out) needs a writable folder for Python's
    ssl; with the manifest's /tmp volume left out there is none."""
    pod, container = manager
    plane, admin, certs, webhook_port = installed
    (tmp,) = [m["name"] for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    kubelet = kubelet_for(installed, pod, container, tmp_path, leave_out=[tmp])
    account = kubelet.service_account
    (account / "kubeconfig").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "pod",
        "clusters": [{"name": "c", "cluster": {
            "server": f"https://{image_mod.HOST_LOOPBACK}:{kubelet.api_port}",
            "certificate-authority-data": base64.b64encode((account / "ca.crt").read_bytes()).decode()}}],
        "users": [{"name": "pod", "user": {"token": (account / "token").read_text()}}],
        "contexts": [{"name": "pod", "context": {"cluster": "c", "user": "pod"}}]}))
    image_mod.readable(account)
    spec = {**container, "env": [*container["env"],
                                 {"name": "KUBECONFIG", "value": f"{image_mod.SERVICE_ACCOUNT_DIR}/kubeconfig"}]}
    with image_mod.Container(pod, spec, kubelet) as running:
        state = eventually(running.ended, timeout=60, interval=0.2, what="the container to end")
        log = running.logs()
    assert state["ExitCode"] != 0, log
    lines = [line for line in log.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in log, log
    (line,) = lines
    assert "certificate-authority-data" in line and "No usable temporary directory" in line, line
    assert "writable temporary folder" in line, line

