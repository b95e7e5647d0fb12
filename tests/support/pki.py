"""A throwaway PKI for the TLS tests: a CA, a server certificate for 127.0.0.1, client certificates.

Made with the cryptography package at test time; nothing secret is checked in.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(directory: Path, stem: str, cert: x509.Certificate, key: Key) -> Pair:
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return Pair(cert_path, key_path)


@dataclass
class Authority:
    name: str
    cert: x509.Certificate
    key: Key
    path: Path

    @classmethod
    def create(cls, directory: Path, name: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        pair = _write(directory, name, cert, key)
        return cls(name, cert, key, pair.cert)

    def issue(
        self,
        directory: Path,
        stem: str,
        *,
        server: bool,
        sans: list[x509.GeneralName] | None = None,
    ) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(stem))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return _write(directory, stem, builder.sign(self.key, hashes.SHA256()), key)


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: Pair
    client: Pair  # issued by ca, SAN DNS:scraper.example
    other_client: Pair  # issued by ca, SAN DNS:intruder.example
    rogue_client: Pair  # issued by a CA the server does not trust
    rogue_ca: Path
    directory: Path
    authority: Authority

    @classmethod
    def create(cls, directory: Path) -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        ca = Authority.create(directory, "test-ca")
        rogue = Authority.create(directory, "rogue-ca")
        loopback: list[x509.GeneralName] = [
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.DNSName("localhost"),
        ]
        return cls(
            ca=ca.path,
            server=ca.issue(directory, "server", server=True, sans=loopback),
            client=ca.issue(
                directory, "client", server=False, sans=[x509.DNSName("scraper.example")]
            ),
            other_client=ca.issue(
                directory, "other-client", server=False, sans=[x509.DNSName("intruder.example")]
            ),
            rogue_client=rogue.issue(directory, "rogue-client", server=False),
            rogue_ca=rogue.path,
            directory=directory,
            authority=ca,
        )

    def reissue_server(self, stem: str) -> Pair:
        """Another server certificate from the same CA (for rotation tests)."""
        loopback: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        return self.authority.issue(self.directory, stem, server=True, sans=loopback)
