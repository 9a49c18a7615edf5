"""Spark's one timing limit the tests cannot raise.

Spark 4's PythonWorkerFactory waits a hard-coded 10 s for a new Python worker to connect back
(no configuration reaches it). On a saturated 2-core machine a worker (interpreter + pyspark +
this connector, about 1 s of CPU when idle) can miss it, and a streaming query fails with this
message while its source starts. To the exactly-once guarantees under test that is a driver
crash: a test may restart the query or driver for this message only, a bounded number of times.
"""

SPARK_WORKER_TIMEOUT = "Python worker failed to connect back"
MAX_WORKER_TIMEOUTS = 3
