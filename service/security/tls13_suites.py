"""TLS 1.3 cipher suites for an :class:`ssl.SSLContext`, which the ``ssl`` module of
Python 3.11 cannot choose (``set_ciphers`` is TLS 1.2's ``SSL_CTX_set_cipher_list``).

Kafka's ``ssl.cipher.suites`` names the suites of every TLS version, so a broker told
``TLS_AES_256_GCM_SHA384`` must refuse TLS 1.3 with AES-128. :func:`set_tls13_suites`
calls OpenSSL's ``SSL_CTX_set_ciphersuites`` on the context's own ``SSL_CTX``, through
the library the ``ssl`` module is linked with. The ``SSL_CTX`` pointer is the first field
of CPython's context object; it is used only after OpenSSL confirms it (the context's
options read through it equal ``SSLContext.options``), and the result is read back with
``get_ciphers``. Anything unexpected is a ``ValueError``: the broker refuses to start
rather than serve suites it was told not to.
"""

from __future__ import annotations

import ctypes
import ssl
import sys
from collections.abc import Sequence

__all__ = ["TLS13_SUITES", "set_tls13_suites"]

#: the TLS 1.3 suites OpenSSL offers (IANA and OpenSSL names are the same)
TLS13_SUITES = ("TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256",
                "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256")


def _libssl() -> ctypes.CDLL:
    """The OpenSSL the ``ssl`` module is linked with (``OSError`` when it cannot be told)."""
    import _ssl

    where = getattr(_ssl, "__file__", None)
    if where is None:  # built in: a search of every loaded library might find another OpenSSL
        raise OSError("the ssl module is built into the interpreter")
    # dlopen of the ssl module's own file: its symbols resolve through the libssl it links
    lib = ctypes.CDLL(where)
    lib.OpenSSL_version_num.restype = ctypes.c_ulong
    if lib.OpenSSL_version_num() != ssl.OPENSSL_VERSION_NUMBER:
        raise OSError("the OpenSSL found is not the one the ssl module uses")
    return lib


def set_tls13_suites(ctx: ssl.SSLContext, suites: Sequence[str]) -> None:
    """Restrict ``ctx``'s TLS 1.3 suites to ``suites``, in that order of preference."""
    names = [s.upper() for s in suites]
    unknown = [s for s in names if s not in TLS13_SUITES]
    if unknown or not names:
        raise ValueError(f"not TLS 1.3 cipher suites: {', '.join(unknown) or '(none)'}")
    if sys.implementation.name != "cpython":
        raise ValueError("TLS 1.3 cipher suites can be restricted on CPython only")
    try:
        lib = _libssl()
        get_options, set_suites = lib.SSL_CTX_get_options, lib.SSL_CTX_set_ciphersuites
    except (OSError, AttributeError) as exc:
        raise ValueError(f"OpenSSL's SSL_CTX_set_ciphersuites is not reachable: {exc}") from None
    get_options.argtypes, get_options.restype = [ctypes.c_void_p], ctypes.c_uint64
    set_suites.argtypes, set_suites.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int
    if type(ctx).__basicsize__ < object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p):
        raise ValueError("this Python's SSLContext holds no OpenSSL context where expected")
    handle = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not handle or get_options(handle) != ctx.options:
        raise ValueError("this Python's ssl module is not laid out as expected; "
                         "TLS 1.3 cipher suites cannot be restricted")
    if set_suites(handle, ":".join(names).encode()) != 1:
        raise ValueError(f"OpenSSL refused the TLS 1.3 cipher suites {', '.join(names)}")
    got = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.3"]
    if got != [n for n in names if n in got] or not got:
        raise ValueError(f"OpenSSL enabled the TLS 1.3 suites {got}, not {names}")
