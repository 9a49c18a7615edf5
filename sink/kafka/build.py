"""Compatibility name for sink.kafka.protocol.build (tests/helpers/kafka_wire.py
imports build from here); new code imports sink.kafka.protocol."""

from sink.kafka.protocol.build import BuildError, build, encode_entity, encode_response

__all__ = ["BuildError", "build", "encode_entity", "encode_response"]
