"""Build of raftsink's two compiled modules; everything else is in pyproject.toml.

connectors.spark._v2records (C, no dependencies but CPython) decodes Kafka RecordBatch v2
records straight into Arrow buffers for the Spark source. It is optional: where no C compiler
exists (a slim container image) the build skips it and connectors/spark/decode.py falls back
to aiokafka's Cython decoder, which gives the same rows, only slower.

sink.kafka.protocol._record_walk (C, no dependencies but CPython) decodes every record of a
Produce request's batches, as Kafka's broker does before it appends them; also optional:
without it sink/kafka/protocol/record_check.py walks them in Python (same answers, about 1.2 us
a record instead of a few ns).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "connectors.spark._v2records",
            ["connectors/spark/_v2records.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        ),
        Extension(
            "sink.kafka.protocol._record_walk",
            ["sink/kafka/protocol/_record_walk.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
            optional=True,
        ),
    ]
)
