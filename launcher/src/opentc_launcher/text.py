"""Text shown to users, safely: the user's own values (names, exceptions whose __str__ raises, file names that are
not UTF-8) are escaped and shortened, so a message about them can always be logged and written, and what is accepted
stays within the 1,024 characters SageMaker shows."""

from __future__ import annotations

TAIL_CHARS = 3000


def safe_str(exc: BaseException) -> str:
    """str(exc), or its type name and a safe repr when its own __str__ raises (the message is the user's code)."""
    try:
        return str(exc)
    except Exception as e:  # noqa: BLE001  (anything the user's __str__ raises)
        return f"<{type(exc).__name__}.__str__ raised {type(e).__name__}; repr: {object.__repr__(exc)}>"


def printable(text: str) -> str:
    """`text` with what cannot be written as UTF-8 (lone surrogates, from a file name that is not UTF-8) escaped
    as \\udcff, so a message about it can always be logged and written."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(value: object, limit: int = 60) -> str:
    """repr(value) for a message, shortened when long ("'7777...' (5000 characters)"): the input it names must not
    push what is accepted out of the 1,024 characters SageMaker shows."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters as written"
    return f"{text[:limit - 20]}... ({size})"


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]
