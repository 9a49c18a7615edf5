"""Bounded (de)compression of Kafka's codecs, for the message-set conversion.

Only the old-version paths decompress (a Produce v0-2 wrapper message is unpacked
into a RecordBatch v2; a Fetch v0-3 answer unpacks stored batches into messages);
the v2 paths keep batches opaque. Everything here is bounded: a decompressed
payload larger than `limit` raises CodecError before it is built (a compression
bomb costs at most `limit` bytes), and damaged input raises CodecError, never
anything else.

Codecs (attributes & 7): 1 gzip (zlib), 2 snappy (raw, or xerial/snappy-java
framing: the Java client's SnappyOutputStream), 3 lz4 (the LZ4 frame format,
parsed here block by block; magic-0 messages carry a wrong header checksum,
KAFKA-3160, so the header checksum is never checked), 4 zstd (not decoded here:
zstd needs Produce v7 / Fetch v10, which have no message sets).
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam

__all__ = ["GZIP", "LZ4", "NONE", "SNAPPY", "ZSTD", "CodecError", "compress", "decompress"]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic (8), version (4), compatible version (4)
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_U32 = struct.Struct("<I")  # LZ4 frames are little-endian
_BE_U32 = struct.Struct(">I")


class CodecError(ValueError):
    """Compressed data that cannot be decoded within the limit."""


def decompress(codec: int, data: bytes | memoryview, limit: int) -> bytes:
    """data decompressed with codec; at most limit bytes (else CodecError)."""
    try:
        if codec == GZIP:
            return _gunzip(bytes(data), limit)
        if codec == SNAPPY:
            return _unsnappy(bytes(data), limit)
        if codec == LZ4:
            return _unlz4(bytes(data), limit)
        if codec == ZSTD:
            return _unzstd(bytes(data), limit)
    except CodecError:
        raise
    except Exception as exc:  # zlib.error, cramjam's DecompressionError, struct.error
        raise CodecError(f"codec {codec}: {exc}") from None
    raise CodecError(f"unsupported compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    """data compressed with codec as a RecordBatch v2 carries it (gzip member, raw
    snappy, LZ4 frame): what Kafka's own clients read back."""
    if codec == GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return _lz4_frame(data)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CodecError(f"unsupported compression codec {codec}")


def _gunzip(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise CodecError(f"gzip payload larger than {limit} bytes")
    if not d.eof:
        raise CodecError("truncated gzip payload")
    return out


def _unsnappy(data: bytes, limit: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_raw(data, limit)
    out = bytearray()
    pos = _XERIAL_HEADER
    while pos < len(data):
        if pos + 4 > len(data):
            raise CodecError("truncated xerial snappy chunk length")
        (n,) = _BE_U32.unpack_from(data, pos)
        pos += 4
        if pos + n > len(data):
            raise CodecError("truncated xerial snappy chunk")
        out += _snappy_raw(data[pos : pos + n], limit - len(out))
        pos += n
    return bytes(out)


def _snappy_raw(data: bytes, limit: int) -> bytes:
    n = cramjam.snappy.decompress_raw_len(data)  # the length the stream claims
    if n > limit:
        raise CodecError(f"snappy payload larger than {limit} bytes")
    return bytes(cramjam.snappy.decompress_raw(data))


def _unzstd(data: bytes, limit: int) -> bytes:
    """A zstd payload. Producers' streaming encoders need not write the frame's content
    size, so the output is bounded by the buffer: it starts at 8x the input and doubles
    up to limit + 1 (the decoder refuses to overrun it), so memory never passes limit
    and the work done is at most about twice the final output."""
    size = min(limit + 1, max(64 << 10, 8 * len(data)))
    while True:
        buf = bytearray(size)
        try:
            n = cramjam.zstd.decompress_into(data, buf)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):  # damaged, not merely larger than buf
                raise CodecError(f"zstd: {exc}") from None
            if size > limit:
                raise CodecError(f"zstd payload larger than {limit} bytes") from None
            size = min(limit + 1, size * 2)
            continue
        if n > limit:
            raise CodecError(f"zstd payload larger than {limit} bytes")
        del buf[n:]
        return bytes(buf)


def _unlz4(data: bytes, limit: int) -> bytes:
    """An LZ4 frame. Its blocks are walked first: each inflates to at most the frame's
    block maximum (64 KiB - 4 MiB; a stored block to its own size), so their sum bounds
    the output (to within one block) before anything is decompressed. The header
    checksum is rewritten (magic-0 producers computed it wrongly, KAFKA-3160); block
    and content checksums are checked by the decoder."""
    if len(data) < 7 or _U32.unpack_from(data, 0)[0] != _LZ4_MAGIC:
        raise CodecError("not an LZ4 frame")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1:
        raise CodecError(f"LZ4 frame version {flg >> 6}")
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 7)
    if block_max is None:
        raise CodecError("bad LZ4 block maximum size")
    hc_at = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    pos = hc_at + 1
    bound = 0
    while True:
        if pos + 4 > len(data):
            raise CodecError("truncated LZ4 frame")
        (word,) = _U32.unpack_from(data, pos)
        pos += 4
        if word == 0:  # end mark
            break
        size, stored = word & 0x7FFFFFFF, bool(word & 0x80000000)
        if size > block_max or pos + size > len(data):
            raise CodecError("bad LZ4 block size")
        bound += size if stored else block_max
        if bound > limit + block_max:  # the last block may be short: one block of slack
            raise CodecError(f"lz4 payload may be larger than {limit} bytes")
        pos += size + (4 if flg & 0x10 else 0)
    if pos > len(data):
        raise CodecError("truncated LZ4 frame")
    fixed = bytearray(data)
    fixed[hc_at] = (xxh32(data[4:hc_at]) >> 8) & 0xFF
    out = bytes(cramjam.lz4.decompress(bytes(fixed)))
    if len(out) > limit:
        raise CodecError(f"lz4 payload larger than {limit} bytes")
    return out


def _lz4_frame(data: bytes) -> bytes:
    """An LZ4 frame of independent 64 KiB blocks, no checksums: the layout Kafka's Java
    client writes (its reader refuses linked blocks, which cramjam's frame encoder
    makes)."""
    descriptor = bytes((0x60, 0x40))  # version 01, independent blocks; 64 KiB maximum
    out = [_U32.pack(_LZ4_MAGIC), descriptor, bytes(((xxh32(descriptor) >> 8) & 0xFF,))]
    for i in range(0, len(data), 64 << 10):
        chunk = data[i : i + (64 << 10)]
        packed = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(packed) >= len(chunk):
            out += [_U32.pack(len(chunk) | 0x80000000), chunk]
        else:
            out += [_U32.pack(len(packed)), packed]
    out.append(_U32.pack(0))
    return b"".join(out)


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a short input (under 16 bytes: an LZ4 frame descriptor)."""
    if len(data) >= 16:
        raise ValueError("xxh32 here covers inputs under 16 bytes only")
    h = (seed + _P5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        h = (h + _U32.unpack_from(data, i)[0] * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        i += 4
    for b in data[i:]:
        h = (h + b * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h
