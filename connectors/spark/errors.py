"""Errors the raftsink Spark source raises; each message says what to do."""

from __future__ import annotations


class RaftsinkSourceError(Exception):
    """Base class of every error the raftsink source raises on purpose."""


class InvalidOptionError(RaftsinkSourceError, ValueError):
    """An option is missing, malformed or contradicts another option."""


class ClusterUnreachableError(RaftsinkSourceError):
    """No node of `raftsink.nodes` answered (the message names every address tried)."""


class TopicNotFoundError(RaftsinkSourceError):
    """A subscribed or assigned topic (or partition) does not exist in the cluster."""


class OffsetOutOfRangeError(RaftsinkSourceError):
    """Requested offsets lie outside what the cluster holds (e.g. beyond the high watermark)."""


class DataLossError(RaftsinkSourceError):
    """Offsets the query needs were removed (log start moved past them) or a partition vanished."""
