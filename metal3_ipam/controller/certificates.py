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

    def __init__(self, directory: str | os.PathLike, cert_name: str = CERT_FILE, key_name: str = KEY_FILE,
                 tls: "Tls | None" = None) -> None:
        self.directory = Path(directory)
        self.cert_name, self.key_name = cert_name, key_name
        self.context = (tls or Tls()).apply(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
        self._stamp: tuple | None = None
        self.loads = 0
        self.load()

    @property
    def cert(self) -> Path:
        return self.directory / self.cert_name

    @property
    def key(self) -> Path:
        return self.directory / self.key_name

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


# Go's names of the cipher suites (crypto/tls, as Kubernetes' --tls-cipher-suites takes them) and OpenSSL's.
# TLS 1.3's suites cannot be chosen, in Go as here: they are accepted and always on.
_TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
_CIPHERS = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
}
_VERSIONS = {"VersionTLS10": ssl.TLSVersion.TLSv1, "VersionTLS11": ssl.TLSVersion.TLSv1_1,
             "VersionTLS12": ssl.TLSVersion.TLSv1_2, "VersionTLS13": ssl.TLSVersion.TLSv1_3}


class Tls:
    """The TLS options of the webhooks and the diagnostics endpoint (Cluster API's ``--tls-min-version`` and
    ``--tls-cipher-suites``), applied to a server context."""

    def __init__(self, min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2, ciphers: str | None = None) -> None:
        self.min_version, self.ciphers = min_version, ciphers

    @classmethod
    def named(cls, version: str, suites: list[str]) -> "Tls":
        """From the flags' values; ValueError naming the flag and the value when one is unknown."""
        if version not in _VERSIONS:
            raise ValueError(f"--tls-min-version {version!r}: expected one of {', '.join(_VERSIONS)}")
        unknown = [s for s in suites if s not in _CIPHERS and s not in _TLS13_SUITES]
        if unknown:
            raise ValueError(f"--tls-cipher-suites: unknown cipher suite(s) {', '.join(unknown)}")
        chosen = [_CIPHERS[s] for s in suites if s in _CIPHERS]
        tls = cls(_VERSIONS[version], ":".join(dict.fromkeys(chosen)) or None)
        if tls.ciphers and version != "VersionTLS13":
            try:
                tls.apply(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
            except ssl.SSLError:
                raise ValueError(f"--tls-cipher-suites {','.join(suites)}: none of them is available in this "
                                 f"image's OpenSSL") from None
        return tls

    def apply(self, context: ssl.SSLContext) -> ssl.SSLContext:
        context.minimum_version = self.min_version
        if self.ciphers:
            context.set_ciphers(self.ciphers)
        return context
