"""connectors.spark.session's log4j2 file: written once per content, and skipped (Spark's
defaults) where the temp directory takes no file of that name."""

from __future__ import annotations

import os

from connectors.spark import session


def test_the_file_is_written_once_and_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(session.tempfile, "gettempdir", lambda: str(tmp_path))
    path = session._log4j2_file()
    assert path is not None
    with open(path) as f:
        assert f.read() == session.LOG4J2
    mtime = os.stat(path).st_mtime_ns
    assert session._log4j2_file() == path
    assert os.stat(path).st_mtime_ns == mtime  # not rewritten
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]  # no temporary left


def test_other_content_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setattr(session.tempfile, "gettempdir", lambda: str(tmp_path))
    (tmp_path / "raftsink-spark-log4j2.properties").write_text("rootLogger.level = debug\n")
    path = session._log4j2_file()
    with open(path) as f:
        assert f.read() == session.LOG4J2


def test_no_file_where_the_name_is_taken(tmp_path, monkeypatch):
    monkeypatch.setattr(session.tempfile, "gettempdir", lambda: str(tmp_path))
    (tmp_path / "raftsink-spark-log4j2.properties").mkdir()  # not a file we can replace
    assert session._log4j2_file() is None
    assert sorted(os.listdir(tmp_path)) == ["raftsink-spark-log4j2.properties"]
