"""Request frames (without the size prefix) that made kio's native reader abort the
node process (issue 19): each claims an array length far beyond the frame."""

from __future__ import annotations

import struct

HUGE_UVARINT = b"\xff\xff\xff\xff\x0f"  # 2^32 - 1: a compact length of 4,294,967,294


def _head_v2(api_key: int, version: int, corr: int) -> bytes:
    return struct.pack(">hhih", api_key, version, corr, 1) + b"k" + b"\x00"


def metadata_v12(corr: int = 1) -> bytes:
    """Metadata v12, topics compact array length ff ff ff ff 0f."""
    return _head_v2(3, 12, corr) + HUGE_UVARINT + b"\x01\x00\x00"


def produce_v9(corr: int = 1) -> bytes:
    """Produce v9: transactional_id null, acks -1, timeout, topic_data of 2^32-2 topics."""
    return _head_v2(0, 9, corr) + b"\x00" + struct.pack(">hi", -1, 5000) + HUGE_UVARINT + b"\x00"


def fetch_v12(corr: int = 1) -> bytes:
    """Fetch v12: replica, max_wait, min_bytes, max_bytes, isolation, session id/epoch,
    then a topics array of 2^32-2 entries."""
    fixed = struct.pack(">iiiibii", -1, 100, 1, 1 << 20, 0, 0, -1)
    return _head_v2(1, 12, corr) + fixed + HUGE_UVARINT + b"\x00"


def find_coordinator_v4(corr: int = 1) -> bytes:
    """FindCoordinator v4: key_type 0, coordinator_keys of 2^32-2 strings."""
    return _head_v2(10, 4, corr) + b"\x00" + HUGE_UVARINT + b"\x00"


KILLER_FRAMES = {
    "metadata_v12": metadata_v12,
    "produce_v9": produce_v9,
    "fetch_v12": fetch_v12,
    "find_coordinator_v4": find_coordinator_v4,
}
