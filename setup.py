"""Only the optional C extension lives here; everything else is in pyproject.toml.

``spark._decode`` decodes record batches column-wise for the Spark source. It is
optional: without a C compiler the source falls back to aiokafka's reader.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("spark._decode", ["spark/_decode.c"], optional=True)])
