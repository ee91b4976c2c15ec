"""Serializer fields and validators shared by the /api/v1/ endpoints."""

from typing import Any

from rest_framework import serializers

POSTGRES_BIGINT_MAX = 2**63 - 1


def _contains_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_contains_nul(k) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_contains_nul(item) for item in value)
    return False


def json_storable(value: Any) -> None:
    """Validator: a JSON value Postgres's jsonb can store (it rejects \\u0000 in strings and keys)."""
    if _contains_nul(value):
        raise serializers.ValidationError("Strings cannot contain NUL (\\u0000) characters.")
