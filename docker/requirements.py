"""Print the requirements of raftsink's image, one a line, from pyproject.toml.

A node's image installs the base dependencies only (the server's own). WITH_SPARK=1 (the
compose file's spark-demo image) adds the `demo` extra: the Spark source and the Kafka
producers of docker/spark_job.py. Usage: requirements.py PYPROJECT [WITH_SPARK(0|1)]
"""

import re
import sys
import tomllib

SPARK_EXTRAS = ("demo",)


def _name(dep: str) -> str:
    return re.split(r"[\s<>=!~;\[]", dep, maxsplit=1)[0].lower()


def _extra_deps(extras: dict[str, list[str]], extra: str, project: str) -> list[str]:
    """An extra's requirements with references to the project's own extras expanded."""
    out: list[str] = []
    for dep in extras[extra]:
        if _name(dep) == project:
            inner = re.search(r"\[([^\]]*)\]", dep)
            for sub in inner.group(1).split(",") if inner else []:
                out += _extra_deps(extras, sub.strip(), project)
        else:
            out.append(dep)
    return out


def main() -> None:
    with open(sys.argv[1], "rb") as f:
        project = tomllib.load(f)["project"]
    deps = list(project["dependencies"])
    if len(sys.argv) > 2 and sys.argv[2] == "1":
        extras = project.get("optional-dependencies", {})
        for extra in SPARK_EXTRAS:
            deps += _extra_deps(extras, extra, project["name"].lower())
    seen: set[str] = set()
    for dep in deps:
        if _name(dep) not in seen:
            seen.add(_name(dep))
            print(dep)


if __name__ == "__main__":
    main()
