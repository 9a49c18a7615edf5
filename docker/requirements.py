"""Print the runtime requirements of raftsink's image, one a line, from pyproject.toml.

The project's dependency list also carries the Spark connector's and the test stack's
packages; a node needs none of them. Usage: requirements.py PYPROJECT [WITH_SPARK(0|1)]
"""

import re
import sys
import tomllib

NOT_IN_NODE = {"pytest", "testcontainers"}
SPARK = {"pyspark", "pyarrow"}


def main() -> None:
    with open(sys.argv[1], "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    with_spark = len(sys.argv) > 2 and sys.argv[2] == "1"
    for dep in deps:
        name = re.split(r"[\s<>=!~;\[]", dep, maxsplit=1)[0].lower()
        if name in NOT_IN_NODE or (name in SPARK and not with_spark):
            continue
        print(dep)


if __name__ == "__main__":
    main()
