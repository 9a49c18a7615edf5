import json
import random

import pytest

from connectors.spark import offsets as off
from connectors.spark.errors import InvalidOptionError


def test_to_json_is_sorted_like_json_sort_keys():
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    tps = [(t, p) for t in ("b", "a", "topic-10", "topic-2") for p in range(12)]
    rng.shuffle(tps)
    m = {tp: rng.randrange(1000) for tp in tps}
    text = json.dumps(off.to_json(m))
    assert text == json.dumps(json.loads(text), sort_keys=True)
    # insertion order must not matter (Spark compares offsets as strings)
    assert off.dumps(dict(reversed(list(m.items())))) == off.dumps(m)
    assert off.from_json(text) == m


def test_from_json_rejects_bad_values():
    with pytest.raises(ValueError):
        off.from_json('{"t": {"0": "x"}}')
    with pytest.raises(ValueError):
        off.from_json('{"t": 3}')
    with pytest.raises(ValueError):
        off.from_json("[1]")


def test_offset_spec_parsing():
    assert off.parse_offset_spec("s", "earliest", off.EARLIEST) == off.OffsetSpec(off.EARLIEST)
    assert off.parse_offset_spec("s", " LATEST ", off.EARLIEST) == off.OffsetSpec(off.LATEST)
    spec = off.parse_offset_spec("s", '{"t": {"0": 5, "1": -2}}', off.EARLIEST)
    assert spec.for_partition(("t", 0)) == 5
    assert spec.for_partition(("t", 1)) == off.EARLIEST
    assert spec.for_partition(("t", 2)) == off.EARLIEST  # unlisted -> default
    with pytest.raises(InvalidOptionError, match="earliest"):
        off.parse_offset_spec("startingOffsets", "yesterday", off.EARLIEST)
    with pytest.raises(InvalidOptionError):
        off.parse_offset_spec("startingOffsets", '{"t": {"0": -7}}', off.EARLIEST)
