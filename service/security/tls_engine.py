"""The TLS library of the Kafka listeners: the OpenSSL that ships inside ``cryptography``
(4.x), through pyOpenSSL for set-up and its C bindings for the record layer.

Why not the ``ssl`` module here: its OpenSSL is whatever the interpreter was linked with
(3.0 on Debian 12, 1.1.1 on older systems), and the Kafka listeners' record layer is the
hot path of every TLS byte a broker moves. Measured on one machine (docs/benchmarks.md,
``bench/tls.py``): AES-GCM runs at 12 GB/s in the wheel's OpenSSL and at 5 GB/s in
Debian's, a 16 KiB record costs half the time to decrypt, and a broker serving TLS
consumers spends about 70% less CPU on TLS. The wheel's OpenSSL is also the one PyCA
updates with each ``cryptography`` release. The HTTP listener (aiohttp), the
inter-broker client and the S3 client keep the ``ssl`` module: their contexts come
from :mod:`service.security.tls`, built from the same :class:`TlsSettings`.

:func:`listener_context` is :func:`service.security.tls.server_context` for this
library: the same versions and suites (:func:`~service.security.tls.protocol_plan`), the
same keystore and truststore files, the same client-certificate modes, no session
tickets or resumption (a resumed session would carry no client certificate to map), no
renegotiation (a write never has to read). The suites of TLS 1.2 default to the ``ssl``
module's, so both libraries offer what Python offers. A bad setting is a ``ValueError``.

:data:`lib` and :data:`ffi` are ``cryptography``'s bindings of that OpenSSL, for
:mod:`service.security.tls_transport`'s record loop; :func:`check_bindings` says at
start whether they hold what the loop calls.
"""

from __future__ import annotations

import functools
import logging
import re
import ssl
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.bindings.openssl.binding import Binding
from OpenSSL import SSL

from service.security.tls import (
    TlsSettings,
    keystore_error,
    keystore_files,
    memory_file,
    protocol_plan,
    truststore_error,
)

__all__ = ["address", "c_record_loop", "check_bindings", "ffi", "lib", "listener_context", "openssl_version",
           "peer_certificate", "ssl_error_reason"]

log = logging.getLogger(__name__)

lib: Any = Binding.lib
ffi: Any = Binding.ffi

#: what the record loop calls (service.security.tls_transport), and pyOpenSSL's names for
#: a memory-BIO connection's SSL object and BIOs
_CALLS = ("SSL_read", "SSL_write", "SSL_get_error", "BIO_read", "BIO_write", "BIO_get_mem_data",
          "ERR_get_error", "ERR_clear_error", "ERR_reason_error_string", "OBJ_txt2nid", "OBJ_nid2ln")
_CONNECTION_FIELDS = ("_ssl", "_into_ssl", "_from_ssl")

#: TLS 1.2 suites when ssl.cipher.suites names none: the ssl module's default (Python 3.10+)
_DEFAULT_TLS12 = "@SECLEVEL=2:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:DHE+AES:!aNULL:!eNULL:!aDSS:!SHA1:!AESCCM"
_VERSIONS = {ssl.TLSVersion.TLSv1_2: SSL.TLS1_2_VERSION, ssl.TLSVersion.TLSv1_3: SSL.TLS1_3_VERSION}
_VERIFY = {"none": SSL.VERIFY_NONE, "requested": SSL.VERIFY_PEER,
           "required": SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT}


@functools.cache
def check_bindings() -> None:
    """``RuntimeError`` naming what is missing when this pyOpenSSL or ``cryptography`` lacks
    a binding the record loop calls (the versions pyproject.toml allows all have them);
    looked at once a process."""
    missing = [name for name in _CALLS if not hasattr(lib, name)]
    missing += [f"pyOpenSSL Context.{name}" for name in ("set_tls13_ciphersuites",) if not hasattr(SSL.Context, name)]
    probe = SSL.Connection(SSL.Context(SSL.TLS_SERVER_METHOD), None)
    missing += [f"pyOpenSSL Connection.{name}" for name in _CONNECTION_FIELDS if not hasattr(probe, name)]
    if missing:
        raise RuntimeError(f"the TLS listeners need {', '.join(missing)}, which this pyOpenSSL "
                           f"{SSL.__name__} / cryptography does not have: install the versions pyproject.toml names")


@functools.cache
def c_record_loop() -> Callable[..., tuple[int, int, int]] | None:
    """``read_records`` of ``service.security._tlsread`` bound to this OpenSSL's functions,
    or None when the extension is not built (the record loop then runs in Python)."""
    try:  # setup.py builds it; optional
        from service.security._tlsread import bind, read_records
    except ImportError:  # without a compiler: the same loop in Python
        return None
    bind(*(address(getattr(lib, name)) for name in ("SSL_read", "SSL_get_error", "BIO_write", "ERR_clear_error")))
    return read_records  # type: ignore[no-any-return]


def address(cdata: Any) -> int:
    """A pointer of the bindings (an ``SSL *``, a ``BIO *``) as the C loop takes it."""
    return int(ffi.cast("uintptr_t", cdata))


def openssl_version() -> str:
    """The version of the OpenSSL the Kafka listeners use (``OpenSSL 4.0.3 29 Sep 2026``)."""
    return SSL.OpenSSL_version(SSL.OPENSSL_VERSION).decode()


def listener_context(settings: TlsSettings) -> SSL.Context:
    """The context of a Kafka TLS listener (see the module docstring)."""
    if not settings.has_keystore:
        raise ValueError("a TLS listener needs a key and certificate: ssl.keystore.location, or "
                         "ssl.certificate.location and ssl.key.location (strata up --ssl-cert "
                         "FILE --ssl-key FILE)")
    plan = protocol_plan(settings)
    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_min_proto_version(_VERSIONS[plan.minimum])
    ctx.set_max_proto_version(_VERSIONS[plan.maximum])
    tls12 = ":".join(plan.tls12) if plan.tls12 else _DEFAULT_TLS12
    try:
        ctx.set_cipher_list(tls12.encode())
    except SSL.Error:
        if plan.tls12:
            raise ValueError(f"ssl.cipher.suites: OpenSSL knows none of {', '.join(plan.tls12)}") from None
        raise
    if plan.tls13:
        ctx.set_tls13_ciphersuites(":".join(plan.tls13).encode())
    _load_keystore(ctx, settings)
    ctx.set_verify(_VERIFY[settings.client_auth])
    if settings.client_auth != "none":
        _load_truststore(ctx, settings)
    ctx.set_options(SSL.OP_NO_TICKET | SSL.OP_NO_RENEGOTIATION | SSL.OP_NO_COMPRESSION
                    | SSL.OP_CIPHER_SERVER_PREFERENCE)
    ctx.set_session_cache_mode(SSL.SESS_CACHE_OFF)
    ctx.set_session_id(b"strata-kafka")
    ctx.set_mode(SSL.MODE_RELEASE_BUFFERS)  # an idle connection holds no record buffers, as the ssl module's
    if plan.tls13:  # read back (a connection freezes the context: last)
        got = [name for name in SSL.Connection(ctx, None).get_cipher_list() if name in plan.tls13]
        if got != list(plan.tls13):
            raise ValueError(f"ssl.cipher.suites: OpenSSL enabled the TLS 1.3 suites {got}, not {list(plan.tls13)}")
    return ctx


def ssl_error_reason(exc: SSL.Error) -> str:
    """OpenSSL's reasons in a pyOpenSSL error (``[('x509 certificate routines', '', 'key
    values mismatch')]``)."""
    errors = exc.args[0] if exc.args else None
    if isinstance(errors, list) and errors:
        return "; ".join(str(e[-1]) for e in errors if isinstance(e, tuple) and e[-1]) or type(exc).__name__
    return str(exc) or type(exc).__name__


def _load_keystore(ctx: SSL.Context, settings: TlsSettings) -> None:
    """The chain from its file; the key decrypted by ``cryptography`` (pyOpenSSL's password
    callback is deprecated), from the key file or the keystore's one file."""
    from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    password = settings.key_password.encode() if settings.key_password else None
    try:
        with keystore_files(settings) as (chain, key_file):
            with open(key_file or chain, "rb") as f, open(chain, "rb"):  # OSError says what is wrong, OpenSSL not
                pem = _PRIVATE_KEY.search(f.read())
            ctx.use_certificate_chain_file(chain)
            if pem is None:
                reason = "no PEM private key in it"
            else:
                try:
                    key = load_pem_private_key(pem.group(0), password)
                except TypeError:  # a password for a key that has none: ignored, as the ssl module does
                    if password is None:
                        raise
                    key = load_pem_private_key(pem.group(0), None)
                    log.warning("ssl.key.password is set but the key of %s is not encrypted; the password is "
                                "not used", key_file or chain)
                if not isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey,
                                        ed448.Ed448PrivateKey, dsa.DSAPrivateKey)):
                    raise TypeError(f"a {type(key).__name__} cannot serve TLS")
                ctx.use_privatekey(key)
                ctx.check_privatekey()
                return
    except SSL.Error as exc:
        reason = ssl_error_reason(exc)
    except OSError as exc:
        reason = exc.strerror or str(exc)
    except (TypeError, ValueError) as exc:  # cryptography's: a wrong, missing or needless password, a bad key
        reason = str(exc)
    raise keystore_error(settings, reason)


#: a PEM private key block (PKCS#8, encrypted or not, or a traditional RSA/EC one)
_PRIVATE_KEY = re.compile(rb"-----BEGIN ((?:[A-Z]+ )?PRIVATE KEY)-----.+?-----END \1-----", re.DOTALL)


def _load_truststore(ctx: SSL.Context, settings: TlsSettings) -> None:
    try:
        if settings.truststore_location:
            ctx.load_verify_locations(settings.truststore_location)
        elif settings.truststore_certificates:
            with memory_file(settings.truststore_certificates) as path:
                ctx.load_verify_locations(path)
        else:  # the system's, as the ssl module's load_default_certs (the wheel's OpenSSL knows no system paths)
            paths = ssl.get_default_verify_paths()
            if paths.cafile or paths.capath:
                ctx.load_verify_locations(paths.cafile, paths.capath)
    except SSL.Error as exc:
        raise truststore_error(settings, ssl_error_reason(exc)) from None
    except OSError as exc:
        raise truststore_error(settings, exc.strerror or str(exc)) from None


def peer_certificate(conn: SSL.Connection) -> dict[str, Any] | None:
    """The client's verified certificate in ``SSLSocket.getpeercert()``'s form (its
    ``subject`` and ``issuer``: relative distinguished names of (OpenSSL long name, value)
    pairs, as the ``ssl`` module gives them), or None without one."""
    if conn.get_context().get_verify_mode() == SSL.VERIFY_NONE:
        return None  # nothing was verified: the ssl module's getpeercert() is empty then too
    cert = conn.get_peer_certificate(as_cryptography=True)
    if cert is None:
        return None
    return {"subject": _name(cert.subject), "issuer": _name(cert.issuer)}


def _name(name: Any) -> tuple[tuple[tuple[str, str], ...], ...]:
    return tuple(tuple((_long_name(attr.oid.dotted_string), _text(attr.value)) for attr in rdn)
                 for rdn in name.rdns)


def _long_name(dotted: str) -> str:
    """OpenSSL's long name of an attribute (``commonName``), its dotted form if unknown:
    what the ``ssl`` module writes."""
    nid = lib.OBJ_txt2nid(dotted.encode())
    if nid == 0:
        return dotted
    text = lib.OBJ_nid2ln(nid)
    return dotted if text == ffi.NULL else ffi.string(text).decode()


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.hex()
