"""What the admission tests share: a control plane whose API server calls the controller's webhooks over TLS.

``webhook_plane`` is a control plane of the module's own (the webhook configurations it carries would
refuse every pool of other modules' tests while no controller answers them); ``webhook_controller`` is
``metal3-ipam run --webhook-port … --webhook-cert-dir …`` with a serving certificate for 127.0.0.1 from
a CA of the module's own, its webhooks registered on that plane (webhook_fixtures.register_webhooks) and
the in-cluster IP pools' conversion pointed at its ``/convert``.
"""

from __future__ import annotations

import pytest

from controller_fixtures import ControllerProcess, free_port, start_control_plane
from metal3_ipam.testing.certs import Authority
from webhook_fixtures import (WebhookController, convert_at, converted_crds, register_webhooks,
                              unregister_webhooks, wait_until_webhooks_answer)


@pytest.fixture(scope="module")
def webhook_plane(control_plane_binaries):
    plane = start_control_plane(control_plane_binaries)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def webhook_api(webhook_plane):
    with webhook_plane.api_client() as api:
        yield api


@pytest.fixture(scope="module")
def webhook_controller(webhook_plane, webhook_api, tmp_path_factory):
    cert_dir = tmp_path_factory.mktemp("serving-certs")
    authority = Authority.create()
    authority.issue(cert_dir, hosts=("127.0.0.1",))
    port = free_port()
    process = ControllerProcess(webhook_plane.kubeconfig,
                                ["-A", "--leader-election-namespace", "default", "--webhook-port", str(port),
                                 "--webhook-cert-dir", str(cert_dir)],
                                name="webhook-controller", log_dir=tmp_path_factory.mktemp("controller"))
    process.start()
    configurations = register_webhooks(webhook_api, port, authority.pem)
    try:
        wait_until_webhooks_answer(webhook_api)
        convert_at(webhook_api, converted_crds(), port, authority.pem)
        yield WebhookController(process, port, authority, configurations)
    finally:
        unregister_webhooks(webhook_api, configurations)
        process.stop()
