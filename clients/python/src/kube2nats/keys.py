"""The key contract (docs/subscribers.md) and the event subjects (docs/messages.md).

Mirror key of an object: ``[{cluster}.]{group}.{version}.{plural}.{namespace}.{name}``, each
token escaped by the KEY rule; event subject:
``{prefix}.[{cluster}.]{group}.{version}.{plural}.{namespace}.{name}.{added|modified|deleted}``,
each token escaped by the SUBJECT rule. The group token of the core group is ``core``, the
namespace token of a cluster-scoped object ``_``.
"""

from __future__ import annotations

from typing import Optional, Tuple

__all__ = [
    "escape_key_token",
    "unescape_key_token",
    "escape_subject_token",
    "object_key",
    "parse_key",
    "key_filter",
    "event_subject",
    "subject_filter",
    "WILDCARD",
]

#: A token that matches any value in the filters (``version="*"``: any version).
WILDCARD = "*"

_HEX = "0123456789ABCDEF"
_KEY_PASS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_SUBJECT_PASS = _KEY_PASS | frozenset(b":")
_HEXDIGITS = frozenset("0123456789ABCDEFabcdef")


def _escape(text: str, passing: frozenset, mark: str) -> str:
    if text == "":
        return mark
    if text.isascii() and all(ord(c) in passing for c in text):
        return text
    out = []
    for b in text.encode("utf-8"):
        if b in passing:
            out.append(chr(b))
        elif b == 0x2E:  # "."
            out.append("_")
        else:
            out.append(mark + _HEX[b >> 4] + _HEX[b & 0xF])
    return "".join(out)


def escape_key_token(text: str) -> str:
    """One token of a mirror key: ``[A-Za-z0-9-]`` pass, ``.`` -> ``_``, every other byte of the
    UTF-8 encoding -> ``=XX`` (upper-case hex), the empty string -> ``=``."""
    return _escape(text, _KEY_PASS, "=")


def unescape_key_token(token: str) -> str:
    """The inverse of :func:`escape_key_token`: ``_`` is ``.``, ``=XX`` one byte, ``=`` alone the
    empty string. Bytes that do not form UTF-8 are replaced (U+FFFD)."""
    if token == "=":
        return ""
    if "_" not in token and "=" not in token:
        return token
    out = bytearray()
    i, n = 0, len(token)
    while i < n:
        c = token[i]
        if c == "_":
            out += b"."
            i += 1
        elif c == "=" and i + 2 < n and token[i + 1] in _HEXDIGITS and token[i + 2] in _HEXDIGITS:
            out.append(int(token[i + 1 : i + 3], 16))
            i += 3
        else:
            out += c.encode("utf-8")
            i += 1
    return out.decode("utf-8", errors="replace")


def escape_subject_token(text: str) -> str:
    """One token of an event subject: ``[A-Za-z0-9-:]`` pass, ``.`` -> ``_``, every other byte
    of the UTF-8 encoding -> ``%XX``, the empty string -> ``%``."""
    return _escape(text, _SUBJECT_PASS, "%")


def _group_token(group: str, escape) -> str:
    if group == WILDCARD:
        return WILDCARD
    return "core" if group == "" else escape(group)


def _token(value: str, escape) -> str:
    return WILDCARD if value == WILDCARD else escape(value)


def _head(cluster: Optional[str], group: str, version: str, plural: str, escape) -> str:
    tokens = [_group_token(group, escape), _token(version, escape), _token(plural, escape)]
    if cluster:
        tokens.insert(0, escape(cluster))
    return ".".join(tokens)


def object_key(
    group: str,
    version: str,
    plural: str,
    namespace: Optional[str],
    name: str,
    cluster: Optional[str] = None,
) -> str:
    """The mirror key of one object. ``group=""`` is the core group; ``namespace=None`` a
    cluster-scoped object (token ``_``)."""
    ns = "_" if namespace is None else escape_key_token(namespace)
    return f"{_head(cluster, group, version, plural, escape_key_token)}.{ns}.{escape_key_token(name)}"


def parse_key(key: str) -> Tuple[Optional[str], str]:
    """``(namespace, name)`` from a key's last two tokens; namespace ``None`` for a
    cluster-scoped object (token ``_``). Raises ``ValueError`` for a key of fewer than two
    tokens."""
    head, sep, name = key.rpartition(".")
    if not sep:
        raise ValueError(f"not a mirror key: {key!r}")
    ns_token = head.rpartition(".")[2]
    namespace = None if ns_token == "_" else unescape_key_token(ns_token)
    return namespace, unescape_key_token(name)


def key_filter(
    plural: str,
    group: str = "",
    version: str = WILDCARD,
    namespace: Optional[str] = None,
    cluster: Optional[str] = None,
) -> str:
    """The KV watch's key filter: ``[{cluster}.]{group}.{version|*}.{plural}.{namespace|*}.*``
    (``namespace=None``: all namespaces)."""
    ns = WILDCARD if namespace is None else escape_key_token(namespace)
    return f"{_head(cluster, group, version, plural, escape_key_token)}.{ns}.*"


def event_subject(
    group: str,
    version: str,
    plural: str,
    namespace: Optional[str],
    name: str,
    event_type: str,
    prefix: str = "kube",
    cluster: Optional[str] = None,
) -> str:
    """The subject kube2nats publishes an event on (default template, docs/messages.md);
    ``event_type`` is ``ADDED``, ``MODIFIED`` or ``DELETED`` (either case)."""
    ns = "_" if namespace is None else escape_subject_token(namespace)
    head = _head(cluster, group, version, plural, escape_subject_token)
    return f"{prefix}.{head}.{ns}.{escape_subject_token(name)}.{event_type.lower()}"


def subject_filter(
    plural: str,
    group: str = "",
    version: str = WILDCARD,
    namespace: Optional[str] = None,
    prefix: str = "kube",
    cluster: Optional[str] = None,
) -> str:
    """A durable consumer's filter on the event stream:
    ``{prefix}.[{cluster}.]{group}.{version|*}.{plural}.{namespace|*}.*.*``."""
    ns = WILDCARD if namespace is None else escape_subject_token(namespace)
    return f"{prefix}.{_head(cluster, group, version, plural, escape_subject_token)}.{ns}.*.*"
