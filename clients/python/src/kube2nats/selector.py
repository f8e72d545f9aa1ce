"""Kubernetes label selectors (the string form of ``kubectl -l`` and ``labelSelector=``).

Equality-based: ``a=b``, ``a==b``, ``a!=b``; set-based: ``a in (x,y)``, ``a notin (x,y)``,
``a`` (exists), ``!a`` (does not exist); numeric ``a>1``, ``a<1``. Requirements are joined by
commas and must all hold. ``!=`` and ``notin`` also hold for an object without the label, as in
Kubernetes. A mapping ``{"a": "b"}`` is taken as equality requirements.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Mapping, Optional, Union

__all__ = ["parse_selector", "Selector"]

Selector = Callable[[Optional[Mapping[str, str]]], bool]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\(([^()]*)\)$")
_COMPARE = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*({_VALUE})$")
_ORDER = re.compile(rf"^({_KEY})\s*([<>])\s*(-?[0-9]+)$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")


def _split(text: str) -> List[str]:
    """Splits on the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"invalid label selector {text!r}: unbalanced ')'")
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"invalid label selector {text!r}: unbalanced '('")
    parts.append(text[start:])
    return parts


def _requirement(text: str, whole: str) -> Selector:
    req = text.strip()
    m = _SET.match(req)
    if m:
        key, op = m.group(1), m.group(2)
        values = frozenset(v.strip() for v in m.group(3).split(","))
        if not all(_VALUE_ONLY.match(v) for v in values):
            raise ValueError(f"invalid label selector {whole!r}: bad value in {req!r}")
        if op == "in":
            return lambda labels: labels is not None and labels.get(key) in values
        return lambda labels: labels is None or key not in labels or labels[key] not in values
    m = _COMPARE.match(req)
    if m:
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels is None or labels.get(key) != value
        return lambda labels: labels is not None and labels.get(key) == value
    m = _ORDER.match(req)
    if m:
        key, op, bound = m.group(1), m.group(2), int(m.group(3))

        def ordered(labels: Optional[Mapping[str, str]]) -> bool:
            try:
                have = int(labels[key]) if labels is not None and key in labels else None
            except ValueError:
                return False
            if have is None:
                return False
            return have > bound if op == ">" else have < bound

        return ordered
    m = _EXISTS.match(req)
    if m:
        negate, key = m.group(1) == "!", m.group(2)
        if negate:
            return lambda labels: labels is None or key not in labels
        return lambda labels: labels is not None and key in labels
    raise ValueError(f"invalid label selector {whole!r}: cannot parse {req!r}")


def parse_selector(selector: Union[str, Mapping[str, str], None]) -> Selector:
    """A predicate over an object's labels (``metadata.labels``, ``None`` when it has none).
    Raises ``ValueError`` for a selector Kubernetes would refuse; ``None`` or ``""`` match
    everything."""
    if selector is None:
        return lambda labels: True
    if isinstance(selector, Mapping):
        wanted: Dict[str, str] = dict(selector)
        return lambda labels: labels is not None and all(labels.get(k) == v for k, v in wanted.items())
    if not selector.strip():
        return lambda labels: True
    checks = [_requirement(part, selector) for part in _split(selector)]
    return lambda labels: all(check(labels) for check in checks)
