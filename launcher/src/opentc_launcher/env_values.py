"""Numbers read from environment variables, checked the same way everywhere (RANK, OPENTC_PEER_TIMEOUT, ...)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeVar, overload

Number = TypeVar("Number", int, float)


class BadEnvironmentValue(ValueError):
    """An environment variable's value is not accepted; the message names it and what is accepted."""


MAX_PORT = 65535


@overload
def number_from_env(env: Mapping[str, str], name: str, kind: type[Number], default: Number,
                    minimum: int | float = 0, maximum: int | float | None = None) -> Number: ...


@overload
def number_from_env(env: Mapping[str, str], name: str, kind: type[Number], default: None,
                    minimum: int | float = 0, maximum: int | float | None = None) -> Number | None: ...


def number_from_env(env: Mapping[str, str], name: str, kind: type[Number], default: Number | None,
                    minimum: int | float = 0, maximum: int | float | None = None) -> Number | None:
    """`env[name]` as an int or float from minimum to maximum, or `default` when it is unset or empty.

    Non-finite values (nan, inf) are refused: a grace period of nan would never end.
    """
    text = env.get(name, "").strip()
    if not text:
        return default
    value: Number | None
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < minimum or (maximum is not None and value > maximum):
        what = "a whole number" if kind is int else "a finite number"
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        raise BadEnvironmentValue(f"environment variable {name}={text!r} is not accepted: use {what} {bounds}.")
    return value
