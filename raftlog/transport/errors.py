"""Transport errors."""

from __future__ import annotations


class TransportError(Exception):
    """The transport could not start or was used after close."""
