"""The webhook server's serving certificate: read from a directory (where a cert-manager Secret is mounted)
into a TLS context, and read again whenever its files change."""

from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path

log = logging.getLogger("metal3_ipam.webhook")

CERT_FILE, KEY_FILE = "tls.crt", "tls.key"
DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"


class CertificateFiles:
    """The serving certificate in a directory, loaded again whenever its files change.

    cert-manager renews certificates in place (a Secret volume swaps its
    files), so the TLS context is reloaded without a restart; connections
    already open keep the certificate they started with.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple | None = None
        self.loads = 0
        self.load()

    @property
    def cert(self) -> Path:
        return self.directory / CERT_FILE

    @property
    def key(self) -> Path:
        return self.directory / KEY_FILE

    def _current_stamp(self) -> tuple:
        stamps = []
        for path in (self.cert, self.key):
            st = path.stat()  # follows the symlinks a Secret volume is made of
            stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def load(self) -> None:
        stamp = self._current_stamp()
        self.context.load_cert_chain(self.cert, self.key)
        self._stamp = stamp
        self.loads += 1

    def reload_if_changed(self) -> bool:
        try:
            if self._current_stamp() == self._stamp:
                return False
            self.load()
        except (OSError, ssl.SSLError) as err:
            # Half-written files during a swap: keep serving the old certificate, look again soon.
            log.warning("serving certificate in %s not reloaded: %s", self.directory, err)
            return False
        log.info("serving certificate reloaded from %s", self.directory)
        return True
