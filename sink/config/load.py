"""Loading: TOML file < RAFTSINK_* environment < flags, then one validation.

Each source yields {key: (raw value, where)}; a later source replaces a key
wholesale. Values are then coerced by the table's kind and the sections are
constructed, which validates them. Every error is a ConfigError that names the
key and where its value came from, e.g.
    kafka.max_frame_bytes must be at least 64 (from env RAFTSINK_MAX_FRAME_BYTES)
"""

from __future__ import annotations

import os
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from sink.config.schema import SinkConfig
from sink.config.table import BY_KEY, LEGACY, OPTIONS, SECTIONS, Option
from sink.config.values import ConfigError, coerce_addresses, coerce_peers, coerce_scalar

Layer = dict[str, tuple[Any, str]]
"""key -> (raw value, where it came from: "file F", "env NAME", "flag --name", ...)."""


def resolve(name: str) -> Option | None:
    """A canonical key ("kafka.max_frame_bytes") or a flat LEGACY name ("max_frame_bytes")."""
    return BY_KEY.get(name) or BY_KEY.get(LEGACY.get(name, ""))


def _put(layer: Layer, opt: Option, value: Any, where: str) -> None:
    if opt.key in layer:
        raise ConfigError(f"{opt.key} is given twice: {layer[opt.key][1]} and {where}")
    layer[opt.key] = (value, where)


def file_layer(path: str) -> Layer:
    """Top-level flat names (LEGACY) and `[section]` tables."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    layer: Layer = {}
    unknown: list[str] = []
    for name, value in data.items():
        if name in SECTIONS and isinstance(value, dict):
            for sub, subvalue in value.items():
                opt = BY_KEY.get(f"{name}.{sub}")
                if opt is None:
                    unknown.append(f"{name}.{sub}")
                else:
                    _put(layer, opt, subvalue, f"file {path} key {opt.key}")
        elif (opt := resolve(name)) is not None and name not in SECTIONS:
            _put(layer, opt, value, f"file {path} key {name}")
        else:
            unknown.append(name)
    if unknown:
        raise ConfigError(f"config file {path}: unknown keys {sorted(unknown)}")
    return layer


def env_layer(environ: Mapping[str, str]) -> Layer:
    """RAFTSINK_<SECTION>_<NAME> and the flat RAFTSINK_<NAME>; other RAFTSINK_*
    variables (the tools' own) are not ours and are ignored."""
    layer: Layer = {}
    for opt in OPTIONS:
        for name in opt.env_names:
            if name in environ:
                _put(layer, opt, environ[name], f"env {name}")
    return layer


def env_value(key: str, environ: Mapping[str, str] | None = None) -> Any:
    """One option's value as the environment (default os.environ) sets it, else its
    default: what a node started without a flag for it reads (launchers use it)."""
    opt = BY_KEY[key]
    layer = env_layer(os.environ if environ is None else environ)
    if key not in layer:
        return opt.default
    raw, where = layer[key]
    return coerce_scalar(f"{key} (from {where})", opt.kind, raw)


def override_layer(values: Mapping[str, Any], where: Mapping[str, str] | None = None) -> Layer:
    """Command-line values keyed by key or flat name; None means "not given"."""
    layer: Layer = {}
    for name, value in values.items():
        if value is None:
            continue
        opt = resolve(name)
        if opt is None:
            raise ConfigError(f"unknown setting {name!r}")
        flag = "--" + name.replace(".", "-").replace("_", "-")
        _put(layer, opt, value, (where or {}).get(name, f"flag {flag}"))
    return layer


def coerce(opt: Option, value: Any) -> Any:
    if opt.kind == "peers":
        return coerce_peers(opt.key, value)
    if opt.kind == "addresses":
        return coerce_addresses(opt.key, value)
    return coerce_scalar(opt.key, opt.kind, value)


_KEY_RE = re.compile(r"\b(" + "|".join(SECTIONS) + r")\.([a-z_]+)\b")


def _explain(message: str, owner: type, section: str, where: Mapping[str, str]) -> str:
    """Name keys instead of classes (`KafkaLimits.x` -> `kafka.x`) and say where the
    first key mentioned got its value."""
    by_field = {o.name: o.key for o in OPTIONS if o.owner is owner and o.section == section}
    message = re.sub(
        rf"\b{owner.__name__}\.(\w+)\b",
        lambda m: by_field.get(m.group(1), m.group(0)),
        message,
    )
    keys = [m.group(0) for m in _KEY_RE.finditer(message) if m.group(0) in BY_KEY]
    if not keys:
        return f"{section}: {message}"
    return f"{message} (from {where.get(keys[0], 'the default')})"


def _construct(
    cls: type,
    section: str,
    path: tuple[str, ...],
    exclude: tuple[str, ...],
    values: Mapping[str, Any],
    where: Mapping[str, str],
) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in exclude:
            continue
        if f.metadata.get("embed"):
            sub_exclude = tuple(f.metadata.get("exclude", ()))
            kwargs[f.name] = _construct(
                hints[f.name], section, (*path, f.name), sub_exclude, values, where
            )
        elif f"{section}.{f.name}" in values:
            kwargs[f.name] = values[f"{section}.{f.name}"]
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:  # ConfigError too: add where the value came from
        raise ConfigError(_explain(str(exc), cls, section, where)) from None


def build(values: Mapping[str, Any], where: Mapping[str, str] | None = None) -> SinkConfig:
    """Coerced values by key -> a validated SinkConfig (missing keys: defaults)."""
    where = where or {}
    missing = [o.key for o in OPTIONS if o.required and o.key not in values]
    if missing:
        flat = {v: k for k, v in LEGACY.items()}
        names = ", ".join(f"{k} ({flat[k]})" if k in flat else k for k in missing)
        raise ConfigError(
            f"missing {names}: give them in the config file, as RAFTSINK_* or as flags"
        )
    hints = typing.get_type_hints(SinkConfig)
    sections = {
        f.name: _construct(
            hints[f.name],
            f.name,
            (f.name,),
            tuple(f.metadata.get("exclude", ())),
            values,
            where,
        )
        for f in fields(SinkConfig)
    }
    try:
        return SinkConfig(**sections)
    except ConfigError as exc:
        raise ConfigError(_explain(str(exc), SinkConfig, "node", where)) from None


def load_config(
    file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    override_sources: Mapping[str, str] | None = None,
) -> SinkConfig:
    """Merge defaults < file < environment < overrides (flags) into a validated SinkConfig.

    env: the environment to read (default os.environ). overrides: key or flat
    name -> value (None: not given); override_sources: name -> the flag used."""
    merged: Layer = {}
    layers = [
        file_layer(file) if file else {},
        env_layer(os.environ if env is None else env),
        override_layer(overrides or {}, override_sources),
    ]
    for layer in layers:
        merged.update(layer)
    values: dict[str, Any] = {}
    where: dict[str, str] = {}
    for key, (raw, source) in merged.items():
        try:
            values[key] = coerce(BY_KEY[key], raw)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (from {source})") from None
        where[key] = source
    return build(values, where)
