"""What libgit2 passed to `certificate_check`, read past pygit2.

pygit2 1.21 hands `certificate_check` only `(None, valid, host)`; the `git_cert` libgit2 passes
is read from pygit2's dispatching frame, and the SSH host key from libgit2 1.9's
`git_cert_hostkey` (the raw key is cross-checked against its SHA-256 there). Anything unexpected
refuses the connection.
"""

from __future__ import annotations

import ctypes
import hashlib
from enum import IntFlag
from typing import Any

from pygit2.ffi import ffi

from kubescribe.git.transport.errors import GitFailure, TransportRefused

GIT_CERT_X509 = 1
GIT_CERT_HOSTKEY_LIBSSH2 = 2
_MAX_HOST_KEY = 16384


class _HostKeyCert(ctypes.Structure):
    """libgit2 1.9's `git_cert_hostkey` (pygit2 declares only its first fields)."""

    _fields_ = (
        ("cert_type", ctypes.c_int),
        ("type", ctypes.c_int),
        ("hash_md5", ctypes.c_ubyte * 16),
        ("hash_sha1", ctypes.c_ubyte * 20),
        ("hash_sha256", ctypes.c_ubyte * 32),
        ("raw_type", ctypes.c_int),
        ("hostkey", ctypes.c_void_p),
        ("hostkey_len", ctypes.c_size_t),
    )


class _SshCertType(IntFlag):
    SHA256 = 1 << 2
    RAW = 1 << 3


class _X509Cert(ctypes.Structure):
    _fields_ = (("cert_type", ctypes.c_int), ("data", ctypes.c_void_p), ("len", ctypes.c_size_t))


def libgit2_cert(frame: Any) -> tuple[int, int]:
    """(type, address) of the `git_cert` in pygit2's `_certificate_check_cb` frame."""
    cert = frame.f_locals.get("cert_i") if frame.f_code.co_name == "_certificate_check_cb" else None
    if cert is None or cert == ffi.NULL:
        raise TransportRefused(
            GitFailure.TRANSFER_FAILED, "cannot read the server's certificate from libgit2"
        )
    return int(cert.cert_type), int(ffi.cast("uintptr_t", cert))


def host_key(address: int) -> bytes:
    """The raw SSH host key of the `git_cert_hostkey` at `address`."""
    cert = _HostKeyCert.from_address(address)
    needed = _SshCertType.RAW | _SshCertType.SHA256
    if cert.type & needed != needed or not 0 < cert.hostkey_len <= _MAX_HOST_KEY:
        raise TransportRefused(GitFailure.TRANSFER_FAILED, "libgit2 gave no raw SSH host key")
    raw = ctypes.string_at(cert.hostkey, cert.hostkey_len)
    if hashlib.sha256(raw).digest() != bytes(cert.hash_sha256):
        raise TransportRefused(GitFailure.TRANSFER_FAILED, "cannot read the SSH host key")
    return raw


def x509_der(address: int) -> bytes:
    """The DER server certificate of the `git_cert_x509` at `address`."""
    cert = _X509Cert.from_address(address)
    if not cert.data or not 0 < cert.len <= 1 << 20:
        raise TransportRefused(GitFailure.CERTIFICATE_UNTRUSTED, "empty server certificate")
    return ctypes.string_at(cert.data, cert.len)
