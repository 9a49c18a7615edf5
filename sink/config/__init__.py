"""Typed configuration of a raftsink node: one table, validated once at start-up.

schema   the sections (node, kafka, raft, transport, storage, retention, cluster, ...) as
         frozen dataclasses; each setting's type, default and doc, once
table    OPTIONS: every setting with its TOML key, RAFTSINK_* variable, flag
         and flat (first-version) alias, derived from the schema
load     load_config(): file < environment < flags, errors naming key and source
flags    the `raftsink serve` flags, generated from the table
doc      docs/operations.md's settings table, generated from the table
         (`python -m sink.config --doc`)
"""

from sink.config.doc import render_table
from sink.config.flags import add_config_arguments, flag_overrides
from sink.config.load import build, env_value, load_config
from sink.config.schema import (
    EVENT_LOOPS,
    ClusterSection,
    KafkaSection,
    NodeSection,
    RaftSection,
    RetentionSection,
    SinkConfig,
)
from sink.config.table import BY_KEY, LEGACY, OPTIONS, Option
from sink.config.values import (
    ConfigError,
    Peer,
    format_addresses,
    format_peers,
    parse_addresses,
    parse_hostport,
    parse_peers,
)

__all__ = [
    "BY_KEY",
    "EVENT_LOOPS",
    "LEGACY",
    "OPTIONS",
    "ClusterSection",
    "ConfigError",
    "KafkaSection",
    "NodeSection",
    "Option",
    "Peer",
    "RaftSection",
    "RetentionSection",
    "SinkConfig",
    "add_config_arguments",
    "build",
    "env_value",
    "flag_overrides",
    "format_addresses",
    "format_peers",
    "load_config",
    "parse_addresses",
    "parse_hostport",
    "parse_peers",
    "render_table",
]
