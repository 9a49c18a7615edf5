"""int64 columns (array('q')) in snapshots: base64 of their little-endian bytes, the
same on every machine. Used by the partition index (sink/state/partitions.py) and the
retention index (retention.py)."""

from __future__ import annotations

import base64
import sys
from array import array


def pack_i64(a: array) -> str:
    if sys.byteorder == "big":  # snapshots are little-endian everywhere
        a = array("q", a)
        a.byteswap()
    return base64.b64encode(a.tobytes()).decode()


def unpack_i64(s: str) -> array:
    a = array("q")
    a.frombytes(base64.b64decode(s))
    if sys.byteorder == "big":
        a.byteswap()
    return a
