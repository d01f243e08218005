"""Certificates as cert-manager issues them (a CA, leaf certificates for a Service's DNS name, a ``kubernetes.io/tls``
Secret with ``ca.crt``) and a Secret volume updated the way the kubelet updates one: the new files in a fresh
directory, then the ``..data`` symlink swapped to it in one rename."""

from __future__ import annotations

import datetime
import os
import pathlib
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.k8s.envtest import CertificateAuthority


@dataclass
class Leaf:
    cert: x509.Certificate
    cert_pem: bytes
    key_pem: bytes

    @property
    def der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class Issuer:
    """A CA issuer: one self-signed CA certificate (the test cluster's own CA class,
    tests/k8s/envtest.CertificateAuthority) that signs every leaf for a Service's DNS names."""

    def __init__(self, name: str = "specdecode-test-ca"):
        ca = CertificateAuthority(name)
        self.key, self.cert, self.cert_pem = ca.key, ca.cert, ca.cert_pem

    def issue(self, *dns_names: str) -> Leaf:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        return Leaf(cert, cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def secret_data(self, leaf: Leaf) -> dict[str, bytes]:
        """The keys of the ``kubernetes.io/tls`` Secret cert-manager writes for a CA issuer."""
        return {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem, "ca.crt": self.cert_pem}


class SecretVolume:
    """A Secret volume as the kubelet lays it out: ``<key> -> ..data/<key>``, ``..data -> ..<timestamp>``."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)
        self._generation = 0

    def write(self, data: dict[str, bytes]) -> None:
        self._generation += 1
        fresh = f"..2026_01_01_00_00_{self._generation:02d}.{os.getpid()}"
        (self.path / fresh).mkdir()
        for key, value in data.items():
            (self.path / fresh / key).write_bytes(value)
        data_link = self.path / "..data"
        old = os.readlink(data_link) if data_link.is_symlink() else None
        tmp = self.path / "..data_tmp"
        os.symlink(fresh, tmp)
        os.rename(tmp, data_link)  # the atomic swap: a reader sees the old pair or the new one, never a mix
        for key in data:
            link = self.path / key
            if not link.is_symlink():
                os.symlink(f"..data/{key}", link)
        if old is not None:
            for f in (self.path / old).iterdir():
                f.unlink()
            (self.path / old).rmdir()
