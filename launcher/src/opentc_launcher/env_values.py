"""Values in environment variables: numbers read and checked the same way everywhere (RANK, OPENTC_PEER_TIMEOUT,
...), and the one rule for a variable a worker would set that the user already set (keep_theirs)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeVar, overload

from .text import shown

Number = TypeVar("Number", int, float)


class BadEnvironmentValue(ValueError):
    """An environment variable's value is not accepted; the message names it and what is accepted."""


MAX_PORT = 65535
MAX_DIGITS = 18   # a whole number anyone means fits in 18 digits (and in a C long long)


def flag(text: str) -> bool | None:
    """"true" or "false", in any letter case and with blanks around: what a hyperparameter (hand-written, or a JSON
    boolean the SDK wrote) and a launcher option (`--library-patches false`) may say; None for anything else."""
    value = text.strip().lower()
    return {"true": True, "false": False}.get(value)


def whole_number(text: str) -> int | None:
    """`text` as a whole number >= 0 written in ASCII digits, at most MAX_DIGITS of them; else None.

    str.isdigit() alone is not enough: it says yes to '²' and to a number 5,000 digits long, which int() then
    refuses with a ValueError."""
    text = text.strip()
    if not text or len(text) > MAX_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


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
    if kind is int:   # digits 0-9 only (no sign: every minimum here is >= 0); int() also takes '٣'
        value = whole_number(text)
    else:
        try:
            value = kind(text)
        except ValueError:
            value = None
    if value is None or not math.isfinite(value) or value < minimum or (maximum is not None and value > maximum):
        what = "a whole number" if kind is int else "a finite number"
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        raise BadEnvironmentValue(f"environment variable {name}={shown(text)} is not accepted: use {what} {bounds}.")
    return value


def keep_theirs(wanted: Mapping[str, str], env: Mapping[str, str],
                flag_lists: frozenset[str] = frozenset()) -> tuple[dict[str, str], tuple[str, ...]]:
    """`wanted` settled against `env`: the variables to set (those `env` lacks; for one in `flag_lists`, a list of
    --name[=value] items such as XLA_FLAGS, the user's list with ours whose name it lacks added), and a line for each
    the user set otherwise, which stays ("NAME=value: keeping it", "..., with --x=y added")."""
    to_set: dict[str, str] = {}
    kept: list[str] = []
    for name, value in wanted.items():
        if name not in env:
            to_set[name] = value
        elif name in flag_lists and (extra := missing_flags(env[name], value)):
            to_set[name] = f"{env[name].strip()} {extra}"
            kept.append(f"{name}={env[name]}: keeping it, with {extra} added")
        elif env[name] != value:
            kept.append(f"{name}={env[name]}: keeping it")
    return to_set, tuple(kept)


def missing_flags(users: str, ours: str) -> str:
    """Our --name[=value] items whose name the user's list does not set, space-separated ('' when none)."""
    def name(item: str) -> str:
        return item.split("=", 1)[0]

    theirs = {name(item) for item in users.split()}
    return " ".join(item for item in ours.split() if name(item) not in theirs)
