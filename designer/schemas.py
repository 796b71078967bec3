"""Turn the JSON Schema an `llm` node declares as its `output_schema` into a pydantic model.

Structured outputs go through `RunContext.structured`, which takes a pydantic model; a workflow is JSON,
so its schemas are converted here, once, at compile time.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

_SCALARS: dict[str, type] = {"string": str, "number": float, "integer": int, "boolean": bool}
_ALLOWED = {"type", "properties", "required", "description", "title", "items", "enum", "minItems", "maxItems",
            "minimum", "maximum", "minLength", "maxLength", "additionalProperties"}


class SchemaError(ValueError):
    """An output schema Parley cannot turn into a model; `path` is where, inside the schema."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _class_name(path: str) -> str:
    words = re.split(r"[^A-Za-z0-9]+", path)
    return "".join(w[:1].upper() + w[1:] for w in words if w) or "Output"


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def _annotation(schema: Any, path: str, name: str) -> Any:
    if not isinstance(schema, dict):
        raise SchemaError(path, "a property schema must be an object such as {\"type\": \"string\"}")
    unknown = sorted(set(schema) - _ALLOWED)
    if unknown:
        raise SchemaError(_join(path, unknown[0]), f"unsupported schema keyword '{unknown[0]}'")
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            raise SchemaError(_join(path, "enum"), "enum must be a non-empty list of strings")
        return Literal[tuple(values)]  # type: ignore[valid-type]
    kind = schema.get("type")
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        if "items" not in schema:
            raise SchemaError(path, "an array needs `items`")
        return list[_annotation(schema["items"], _join(path, "items"), name + "Item")]  # type: ignore[misc]
    if kind == "object":
        return _object_model(schema, path, name)
    raise SchemaError(_join(path, "type"), f"unsupported type {kind!r}; use string, number, integer, boolean, "
                                           "array or object")


def _object_model(schema: dict[str, Any], path: str, name: str) -> type[BaseModel]:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise SchemaError(_join(path, "properties"), "an object needs at least one property")
    required = schema.get("required", list(properties))
    if not isinstance(required, list) or not set(required) <= set(properties):
        raise SchemaError(_join(path, "required"), "required must list names of declared properties")
    fields: dict[str, Any] = {}
    for prop, sub in properties.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", prop):
            raise SchemaError(_join(path, f"properties.{prop}"), f"property name '{prop}' must be an identifier")
        annotation = _annotation(sub, _join(path, f"properties.{prop}"), name + _class_name(prop))
        description = sub.get("description") if isinstance(sub, dict) else None
        if prop in required:
            fields[prop] = (annotation, Field(..., description=description))
        else:
            fields[prop] = (annotation | None, Field(None, description=description))
    model = create_model(name, __config__=ConfigDict(extra="ignore"), **fields)
    model.__doc__ = schema.get("description") or f"The {name} answer."
    return model


def model_from_schema(schema: dict[str, Any], name: str = "Output") -> type[BaseModel]:
    """Build a pydantic model from a JSON Schema object (properties listed in `required` are required;
    without `required`, all are).

    Raises:
        SchemaError: the schema uses something outside the supported subset.
    """
    if schema.get("type", "object") != "object":
        raise SchemaError("type", "an output schema must describe an object")
    return _object_model(schema, "", _class_name(name))
