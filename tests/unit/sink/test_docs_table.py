"""docs/kafka.md's table of APIs is the one generated from the registry that
ApiVersions advertises from."""

from pathlib import Path

from sink.kafka.handlers.table import BEGIN, END, api_table

DOC = Path(__file__).resolve().parents[3] / "docs" / "kafka.md"


def test_docs_table_matches_the_registry():
    text = DOC.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == api_table(), (
        "docs/kafka.md is stale: paste `python -m sink.kafka.handlers.table`"
    )
