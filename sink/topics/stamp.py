"""LogAppendTime: the leader stamps a RecordBatch v2 with its clock, as Kafka does.

Kafka (LogValidator, v2 batches of a LogAppendTime topic): attributes bit 3
(timestampType) set, maxTimestamp = the broker's time, baseTimestamp and the records'
deltas untouched (consumers read every record's timestamp as maxTimestamp when the bit
is set), CRC-32C recomputed (it covers attributes and maxTimestamp).
"""

from __future__ import annotations

import struct

from crc32c import crc32c

LOG_APPEND_TIME_FLAG = 0x08
_CRC_AT, _CRC_START, _ATTR_AT, _MAX_TS_AT = 17, 21, 21, 35
_H = struct.Struct(">h")
_Q = struct.Struct(">q")
_I = struct.Struct(">I")


def stamp_log_append_time(batch: bytes | memoryview, now_ms: int) -> bytes:
    """A copy of batch with the LogAppendTime flag, maxTimestamp = now_ms and its CRC."""
    out = bytearray(batch)
    (attrs,) = _H.unpack_from(out, _ATTR_AT)
    _H.pack_into(out, _ATTR_AT, attrs | LOG_APPEND_TIME_FLAG)
    _Q.pack_into(out, _MAX_TS_AT, now_ms)
    _I.pack_into(out, _CRC_AT, crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)
