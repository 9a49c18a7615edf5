"""Property test: random append / truncate / reset / reopen / crash sequences
against a plain in-memory model of the log."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raftlog.entry import EntryType, LogEntry, SnapshotMeta
from raftlog.storage import LogStore, StorageOptions
from tests.helpers.storage import payload

OPTS = StorageOptions(segment_bytes=4096, index_checkpoint_entries=5, index_checkpoint_bytes=1500)

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"),
            st.integers(1, 12),
            st.integers(0, 2),
            st.integers(0, 700),
            st.sampled_from([EntryType.DATA, EntryType.DATA, EntryType.CONFIG, EntryType.NOOP]),
        ),
        st.tuples(st.just("truncate_suffix"), st.integers(0, 40)),
        st.tuples(st.just("truncate_prefix"), st.integers(0, 40)),
        st.tuples(st.just("reset"), st.integers(1, 30)),
        st.tuples(st.just("hard_state"), st.integers(0, 100)),
        st.just(("reopen",)),
        st.just(("crash",)),
    ),
    max_size=40,
)


class Model:
    def __init__(self) -> None:
        self.first = 1
        self.prev_term = 0
        self.entries: dict[int, tuple[int, bytes]] = {}
        self.types: dict[int, EntryType] = {}
        self.last = 0

    @property
    def last_term(self) -> int:
        return self.entries[self.last][0] if self.last >= self.first else self.prev_term


def check(store: LogStore, model: Model) -> None:
    assert store.first_index() == model.first
    assert store.last_index() == model.last
    assert store.last_term() == model.last_term
    assert store.term_at(model.first - 1) == model.prev_term
    if model.last >= model.first:
        got = store.read(model.first, 10**6, 10**9)
        assert [(e.index, e.term, e.data) for e in got] == [
            (i, *model.entries[i]) for i in range(model.first, model.last + 1)
        ]
        mid = (model.first + model.last) // 2
        assert store.term_at(mid) == model.entries[mid][0]
    assert store.term_at(model.last + 1) is None
    assert store.config_indexes() == [
        i for i in range(model.first, model.last + 1) if model.types.get(i) is EntryType.CONFIG
    ]


@example(  # a segment roll inside a batch of CONFIG entries, then a crash (found in CI)
    [
        ("append", 1, 0, 0, EntryType.DATA),
        ("append", 1, 0, 466, EntryType.NOOP),
        ("append", 2, 2, 492, EntryType.NOOP),
        ("append", 9, 1, 363, EntryType.CONFIG),
        ("crash",),
    ]
)
@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops)
def test_random_operations_match_the_model(op_list):
    d = tempfile.mkdtemp(prefix="rs-model-")
    try:
        store = LogStore.open(d, OPTS)
        model = Model()
        hs = 0
        for op in op_list:
            kind = op[0]
            if kind == "append":
                _, n, bump, size, etype = op
                term = model.last_term + bump or 1
                batch = []
                for i in range(model.last + 1, model.last + 1 + n):
                    data = payload(i, term, size)
                    batch.append(LogEntry(i, term, etype, data))
                    model.entries[i] = (term, data)
                    model.types[i] = etype
                store.append(batch)
                model.last += n
            elif kind == "truncate_suffix":
                i = max(model.first, min(op[1], model.last + 1))
                store.truncate_suffix(i)
                model.last = min(model.last, i - 1)
            elif kind == "truncate_prefix":
                i = min(op[1], model.last)
                if i >= model.first:
                    store.truncate_prefix(i)
                    model.prev_term = model.entries[i][0]
                    model.first = i + 1
            elif kind == "reset":
                nxt = model.last + op[1]
                term = model.last_term + 1
                store.reset(nxt, SnapshotMeta(nxt - 1, term, b""))
                model.first, model.last, model.prev_term = nxt, nxt - 1, term
                model.entries.clear()
                model.types.clear()
            elif kind == "hard_state":
                hs = op[1]
                store.save_hard_state(store.hard_state()._replace(term=hs))
            elif kind == "reopen":
                store.close()
                store = LogStore.open(d, OPTS)
            elif kind == "crash":
                store._release()
                store = LogStore.open(d, OPTS)
            check(store, model)
            assert store.hard_state().term == hs
        store.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
