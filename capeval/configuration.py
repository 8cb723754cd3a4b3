"""One base for the dataclass configurations of capeval's model families: to and from a dict of JSON values, and to
and from a folder's ``config.json`` (the idea of transformers' ``PretrainedConfig``).

Model-independent: each family's ``configuration.py`` declares a dataclass that mixes in :class:`JsonConfig`.
Parsers of the original formats a family was converted from live beside the converters, in ``conversion/``.
"""
from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any, ClassVar, Dict, Mapping, Optional, Type, TypeVar, Union

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
"""The weights file of every model folder capeval writes or loads."""

_Config = TypeVar("_Config", bound="JsonConfig")


class ConfigError(ValueError):
    """A configuration that cannot be read: an unknown or missing field, another ``model_type``, a malformed
    ``config.json``."""


def _json_value(value: Any) -> Any:
    """``value`` of :func:`dataclasses.asdict` with tuples as lists, as JSON reads them back."""
    if isinstance(value, dict):
        return {key: _json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    return value


def _field_value(annotation: Any, value: Any, complete: bool) -> Any:
    """A JSON value read back as the field's type: a nested config from its dict, a tuple from a list."""
    if isinstance(annotation, type) and issubclass(annotation, JsonConfig) and isinstance(value, Mapping):
        return annotation.from_dict(value, complete=complete)
    if typing.get_origin(annotation) is tuple and isinstance(value, list):
        return tuple(value)
    return value


class JsonConfig:
    """Mixin of a dataclass configuration saved as ``config.json``.

    :meth:`from_dict` takes the dict :meth:`to_dict` gives (or that JSON read back): fields it leaves out keep their
    defaults (unless ``complete``), a field it does not know is an error, nested configurations and tuples are
    rebuilt from their JSON dicts and lists. :meth:`load` reads a model folder's ``config.json``, which must state
    every field: a missing key would silently take a default and change the scores.
    """

    model_type: ClassVar[Optional[str]] = None
    """Written to ``config.json`` after the fields and checked on reading (a folder says which model it holds);
    ``None``: not written."""
    sort_keys: ClassVar[bool] = False
    """Whether ``config.json`` lists its keys sorted (else in field order), as the family's published files do."""

    def to_dict(self) -> Dict[str, Any]:
        """The fields as JSON values (nested configurations as dicts, tuples as lists), then ``model_type``."""
        values: Dict[str, Any] = _json_value(dataclasses.asdict(self))  # type: ignore[call-overload]
        if self.model_type is not None:
            values["model_type"] = self.model_type
        return values

    @classmethod
    def from_dict(cls: Type[_Config], values: Mapping[str, Any], *, complete: bool = False) -> _Config:
        """The configuration of ``values``; :class:`ConfigError` for an unknown field, another ``model_type``, or
        (when ``complete``) a field it leaves out, in it or in a nested configuration."""
        values = dict(values)
        if cls.model_type is not None:
            model_type = values.pop("model_type", cls.model_type)
            if model_type != cls.model_type:
                raise ConfigError(f"config has model_type {model_type!r}, expected {cls.model_type!r}")
        annotations = typing.get_type_hints(cls)
        known = {field.name for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} fields: {unknown}")
        missing = [name for name in known if name not in values] if complete else []
        if missing:
            raise ConfigError(f"{cls.__name__} fields missing: {sorted(missing)}; a model's config states every field "
                              "(a default would silently change the scores)")
        return cls(**{name: _field_value(annotations[name], value, complete) for name, value in values.items()})

    def save(self, folder: Union[str, Path]) -> Path:
        """Write ``<folder>/config.json`` (indented, one trailing newline); returns its path."""
        path = Path(folder) / CONFIG_NAME
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=self.sort_keys) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls: Type[_Config], folder: Union[str, Path]) -> _Config:
        """The configuration of ``<folder>/config.json``, which must state every field; :class:`ConfigError` naming
        the file otherwise (also for a file that is not UTF-8 JSON)."""
        path = Path(folder) / CONFIG_NAME
        try:
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")), complete=True)
        except ValueError as error:  # ConfigError, JSONDecodeError, UnicodeDecodeError
            raise ConfigError(f"{path}: {error}") from None
