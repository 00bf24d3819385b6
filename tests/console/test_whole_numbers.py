"""Numbers typed by users are ASCII digits: ``str.isdigit`` also passes ``²`` (and other
superscripts), which ``int`` refuses — such input got a 500 where a validation error
belongs (console forms, API parameters, the zbus index, JMQ4 client addresses)."""

from __future__ import annotations

import pytest
from django import forms
from django.core.exceptions import ValidationError

from brokers.engine.record import encode_client_ip
from brokers.validators import validate_broker_weights
from mqcloud.console.forms import parse_weights


def test_weights_typed_in_the_console_are_ascii_numbers() -> None:
    assert parse_weights("1=100, 2=-1") == {"1": 100, "2": -1}
    for text in ("1=²", "²=5", "1=-²"):
        with pytest.raises(forms.ValidationError):
            parse_weights(text)


def test_weights_of_the_catalog_are_keyed_by_ascii_broker_ids() -> None:
    validate_broker_weights({"1": 5})
    with pytest.raises(ValidationError):
        validate_broker_weights({"²": 5})


def test_a_client_address_with_an_odd_port_keeps_its_host() -> None:
    assert encode_client_ip("10.0.0.1:²") == encode_client_ip("10.0.0.1")
    assert encode_client_ip("[::1]:²") == encode_client_ip("::1")
