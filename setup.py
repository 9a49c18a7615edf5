"""Build of raftsink's one compiled module; everything else is in pyproject.toml.

connectors.spark._v2records (C, no dependencies but CPython) decodes Kafka RecordBatch v2
records straight into Arrow buffers for the Spark source. It is optional: where no C compiler
exists (a slim container image) the build skips it and connectors/spark/decode.py falls back
to aiokafka's Cython decoder, which gives the same rows, only slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "connectors.spark._v2records",
            ["connectors/spark/_v2records.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
