"""Storage configuration: typed, validated once, every default documented."""

from __future__ import annotations

from dataclasses import dataclass

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclass(frozen=True, slots=True)
class StorageOptions:
    segment_bytes: int = 64 * MiB
    """A segment file is sealed and a new one started once it would exceed this.
    An entry larger than this gets a segment of its own."""

    max_entry_bytes: int = 64 * MiB
    """Largest payload accepted by append; also the sanity bound recovery uses
    to tell a damaged length field from a real frame."""

    index_checkpoint_bytes: int = 8 * MiB
    """Entry locations are written to LMDB once this many bytes were appended
    since the last checkpoint (and at every segment roll). Bounds the tail that
    a restart must scan, so restart time does not grow with the log."""

    index_checkpoint_entries: int = 32768
    """As index_checkpoint_bytes, counted in entries (bounds the scan for small entries)."""

    write_caching: bool = False
    """Relaxed durability, OFF by default (like Redpanda's write caching): an
    append completes after write(2), before fdatasync. A power cut can then
    lose acknowledged entries; a process crash cannot. Syncs still happen every
    write_cache_max_bytes or write_cache_max_ms."""

    write_cache_max_bytes: int = 32 * MiB
    """With write_caching: sync once this many bytes are unsynced."""

    write_cache_max_ms: int = 100
    """With write_caching: sync at the latest this long after the first unsynced write."""

    page_cache_drop: bool = True
    """Keep the log's written data out of the page cache once it is synced: after
    each fsync round the store advises the kernel (posix_fadvise DONTNEED) to drop
    a segment's synced bytes older than its newest page_cache_keep_bytes, and a
    sealed segment's all. Writes then reuse the pages just freed instead of
    growing the cache into memory nobody touched yet (on a VM whose host backs
    guest memory lazily that first touch cost 2 us per KiB written, 8x the
    write itself: docs/storage.md, "The page cache"), and a node's cache stays
    the size of its hot tails (Redpanda bypasses the page cache altogether).
    Reads of dropped data go to the disk. False: the kernel keeps what it likes."""

    page_cache_keep_bytes: int = 16 * MiB
    """With page_cache_drop: the newest bytes of each group's active segment kept in
    the page cache for readers near the tail (consumers, followers catching up)."""

    queue_max_batch_entries: int = 8192
    """The disk queue writes at most this many entries per write+fsync."""

    queue_max_batch_bytes: int = 16 * MiB
    """The disk queue writes at most this many payload bytes per write+fsync
    (one larger entry is still written alone)."""

    queue_max_pending_bytes: int = 256 * MiB
    """Back-pressure: DiskQueue.wait_for_space() waits while more than this many
    payload bytes are submitted but not yet durable."""

    lmdb_map_bytes: int = 64 * GiB
    """Virtual size reserved for the LMDB index (sparse; about 60 bytes per entry)."""

    reserve_bytes: int = 1 * GiB
    """Free-space reserve of each volume the node writes (with reserve_percent, the
    larger wins; capped at a quarter of the volume). Below it the node refuses produce
    (KAFKA_STORAGE_ERROR, retriable) and keeps serving reads; below half of it a
    follower stops appending. 0 with reserve_percent 0: no guard. See
    docs/operations.md (disk full)."""

    reserve_percent: float = 5.0
    """Free-space reserve as a percentage of each volume's size (0 to < 50)."""

    on_corruption: str = "repair"
    """What a node does about damage inside its synced log (a bad CRC before the last
    sync, a missing or short segment, a damaged index): "repair" keeps the intact
    prefix, runs as a replacement (no vote, counts toward no quorum) and fetches the
    rest from the leader (docs/storage.md, "Repairing damaged storage"); "stop"
    stops the node, exit code 3, as before. Repair needs node identity and another
    voter: a single-node cluster, or one without identity, always stops."""

    space_check_ms: int = 250
    """How often the free space of each volume is read (statvfs); produce also
    estimates it between readings from the bytes it accepts."""

    def __post_init__(self) -> None:
        positive = (
            "segment_bytes",
            "max_entry_bytes",
            "index_checkpoint_bytes",
            "index_checkpoint_entries",
            "write_cache_max_bytes",
            "write_cache_max_ms",
            "queue_max_batch_entries",
            "queue_max_batch_bytes",
            "queue_max_pending_bytes",
            "lmdb_map_bytes",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"StorageOptions.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.reserve_bytes, int) or self.reserve_bytes < 0:
            raise ValueError(
                f"StorageOptions.reserve_bytes must be >= 0, got {self.reserve_bytes!r}"
            )
        if (
            not isinstance(self.page_cache_keep_bytes, int)
            or isinstance(self.page_cache_keep_bytes, bool)
            or self.page_cache_keep_bytes < 0
        ):
            raise ValueError(
                "StorageOptions.page_cache_keep_bytes must be an integer >= 0, got "
                f"{self.page_cache_keep_bytes!r}"
            )
        if not 0 <= self.reserve_percent < 50:
            raise ValueError(
                f"StorageOptions.reserve_percent must be in [0, 50), got {self.reserve_percent!r}"
            )
        if self.on_corruption not in ("repair", "stop"):
            raise ValueError(
                f"StorageOptions.on_corruption must be 'repair' or 'stop', got {self.on_corruption!r}"
            )
        if not isinstance(self.space_check_ms, int) or self.space_check_ms <= 0:
            raise ValueError(
                f"StorageOptions.space_check_ms must be a positive integer, got {self.space_check_ms!r}"
            )
        if self.segment_bytes < 4 * KiB:
            raise ValueError(
                f"StorageOptions.segment_bytes must be >= 4096, got {self.segment_bytes}"
            )
        if self.max_entry_bytes >= 2**32:
            raise ValueError("StorageOptions.max_entry_bytes must fit in 32 bits")
        if self.queue_max_pending_bytes < self.queue_max_batch_bytes:
            raise ValueError(
                "StorageOptions.queue_max_pending_bytes must be >= queue_max_batch_bytes"
            )
