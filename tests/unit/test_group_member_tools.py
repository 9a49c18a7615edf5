"""The client-matrix tools checked on their own (tests/helpers/group_members.py and the
librdkafka suite's lists), so a matrix failure is the server's and not the harness's:
kcat's rebalance lines become assignments, `settled` accepts only one whole generation,
and docs/kafka.md names exactly the librdkafka tests the suite runs and skips."""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

from tests.helpers.group_members import Member, _read_kcat_stdout, _read_stderr, settled

ROOT = Path(__file__).resolve().parents[2]


class _Alive:
    """Stands in for a member's running process (only poll() is asked)."""

    pid = 0

    def poll(self) -> None:
        return None


def _member(name: str = "m") -> Member:
    return Member(name, "kcat", _Alive())  # type: ignore[arg-type]


def test_kcat_rebalance_lines_become_assignments():
    m = _member()
    err = io.StringIO(
        "% Waiting for group rebalance\n"
        "% Group g rebalanced (memberid rdkafka-4c1e-9a): assigned: t [0], t [3], t [5]\n"
        "% Reached end of topic t [0] at offset 20\n"
        "% Group g rebalanced (memberid rdkafka-4c1e-9a): revoked: t [0], t [3], t [5]\n"
        "% Group g rebalanced (memberid rdkafka-4c1e-9a): assigned: t [3]\n"
    )
    _read_stderr(m, err, kcat=True)
    assert m.assignments() == [[0, 3, 5], [], [3]]
    assert m.assignment == [3]


def test_kcat_json_lines_become_records():
    m = _member()
    out = io.StringIO(
        '{"topic":"t","partition":2,"offset":7,"tstype":"create","ts":1,"key":null,"payload":"x"}\n'
        "% not json\n"
        '{"topic":"t","partition":0,"offset":0,"key":null,"payload":"y"}\n'
    )
    _read_kcat_stdout(m, out)
    assert [(p, o) for p, o, _ in m.records()] == [(2, 7), (0, 0)]


def test_settled_needs_one_whole_disjoint_assignment():
    a, b = _member("a"), _member("b")
    assert not settled([a, b], 6)  # nothing reported yet
    a._add("assignment", {"parts": [0, 1, 2]})
    assert not settled([a, b], 6)  # b has none
    b._add("assignment", {"parts": [3, 4]})
    assert not settled([a, b], 6)  # partition 5 uncovered
    b._add("assignment", {"parts": [2, 3, 4, 5]})
    assert not settled([a, b], 6)  # partition 2 twice (a's old generation)
    a._add("assignment", {"parts": [0, 1]})
    assert settled([a, b], 6)
    b._add("assignment", {"parts": []})
    assert not settled([a, b], 6)  # a member without partitions: a rebalance under way


def test_docs_list_the_librdkafka_tests_run_and_skipped():
    # read the two dicts from the test module's source (importing it loads the cluster code)
    tree = ast.parse((ROOT / "tests/integration/test_librdkafka_suite.py").read_text())
    lists = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("RUN", "SKIP")
    }
    RUN, SKIP = lists["RUN"], lists["SKIP"]
    assert not set(RUN) & set(SKIP)
    doc = (ROOT / "docs" / "kafka.md").read_text()
    section = doc.split("### librdkafka's test suite", 1)[1].split("\n## ", 1)[0]
    run_part, skip_part = section.split("Skipped, with the reason:", 1)
    listed = lambda text: set(re.findall(r"^\| (\d{4}) ", text, re.M))  # noqa: E731
    assert listed(run_part) == set(RUN)
    assert listed(skip_part) == set(SKIP)
