"""Request-body fields that take only the JSON type the schema declares.

DRF's fields coerce: a ``BooleanField`` takes ``"true"``, ``"yes"`` and ``1``, a
``CharField`` takes ``12``, an ``IntegerField`` takes ``"12"`` and ``true``. Request
bodies are JSON only (``JSONParser``), so nothing needs coercing, and a value of the wrong
type is a client error the schema already rejects; these fields answer it with 400 so the
API rejects exactly what the schema rejects. Query parameters arrive as strings and keep
DRF's fields (``mqcloud.api.query``).

:class:`StrictModelSerializer` maps model fields to these; serializers of request bodies
declare them explicitly for their own fields.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from rest_framework import serializers


class StrictBooleanField(serializers.BooleanField):
    """``true`` or ``false`` only."""

    default_error_messages = {"invalid": "Must be true or false (a JSON boolean)."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictCharField(serializers.CharField):
    """A JSON string only (DRF would turn a number into its text)."""

    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSlugField(serializers.SlugField):
    """A JSON string only."""

    default_error_messages = {**serializers.SlugField.default_error_messages}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON number only (not a string of digits, not a boolean)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A JSON number only."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSlugRelatedField(serializers.SlugRelatedField):
    """An object named by a JSON string only (DRF would look ``0`` up as ``"0"``)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictModelSerializer(serializers.ModelSerializer):
    """A model serializer whose fields made from model fields take only their JSON type."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.BooleanField: StrictBooleanField,
        models.CharField: StrictCharField,
        models.TextField: StrictCharField,
        models.SlugField: StrictSlugField,
        models.IntegerField: StrictIntegerField,
        models.BigIntegerField: StrictIntegerField,
        models.SmallIntegerField: StrictIntegerField,
        models.PositiveIntegerField: StrictIntegerField,
        models.PositiveSmallIntegerField: StrictIntegerField,
        models.PositiveBigIntegerField: StrictIntegerField,
        models.FloatField: StrictFloatField,
    }
