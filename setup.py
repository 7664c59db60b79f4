"""Only the optional C extensions live here; everything else is in pyproject.toml.

``spark._decode`` decodes record batches column-wise for the Spark source. It is
optional: without a C compiler the source falls back to aiokafka's reader.

``common.record._recordscan`` walks the records of every produced batch to check
their framing before they are appended (a few ns per record). Optional too:
without it ``common.record.batch`` walks them in Python, about a hundred times
slower, and the broker logs a warning at start.

``service.security._tlsread`` is the record loop of a TLS produce: ciphertext into
OpenSSL and records out into the request, in C. Optional: without it the loop runs in
Python, a call per record (service/security/tls_transport.py). It needs no OpenSSL
headers: it is given the functions of the OpenSSL the listeners use at start.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("spark._decode", ["spark/_decode.c"], optional=True),
        Extension("common.record._recordscan", ["common/record/_recordscan.c"], optional=True),
        Extension("service.security._tlsread", ["service/security/_tlsread.c"], optional=True),
    ]
)
