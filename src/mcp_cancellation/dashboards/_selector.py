"""A label selector as people write it, read as PromQL label matchers (private).

``job="mcp"``, ``{job="mcp"}``, ``job=~"mcp|api", env!="dev",`` and the dashboards'
own ``job=~"$job"`` are matchers; ``job=mcp`` (a value not quoted) or ``{{job="mcp"}}``
are not, and are refused with a one-line :class:`ValueError` that says how to write
them, rather than written into every query, where Prometheus would refuse the rules and
Grafana every panel.
"""

from __future__ import annotations

import re

__all__ = ["label_matchers"]

_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OPERATOR = re.compile(r"=~|!~|!=|=")
#: A PromQL string: double- or single-quoted with backslash escapes, or a raw backtick one.
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|`[^`]*`')
#: Regular-expression features RE2 (Prometheus's engine) lacks, which Python's re has.
_NOT_RE2 = re.compile(r"\(\?[=!<]|\(\?P=|\\[1-9]")


def label_matchers(selector: str) -> str:
    """*selector* as PromQL label matchers joined by ``", "``, without braces (``""`` for
    none); ``ValueError`` with a one-line message when it is not a list of matchers."""
    text = selector.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    matchers: list[str] = []
    at = 0
    while True:
        at = _skip_space(text, at)
        if at == len(text):
            break
        name = _NAME.match(text, at)
        if name is None:
            raise _invalid(selector, f"a label name was expected at {text[at:]!r}")
        at = _skip_space(text, name.end())
        operator = _OPERATOR.match(text, at)
        if operator is None:
            raise _invalid(selector, f"'=', '!=', '=~' or '!~' was expected after {name[0]!r}")
        at = _skip_space(text, operator.end())
        value = _STRING.match(text, at)
        if value is None:
            bare = re.match(r"[^,\s}]*", text[at:])
            word = bare[0] if bare else ""
            hint = f'; write {name[0]}{operator[0]}"{word}"' if word else ""
            raise _invalid(selector, f"the value of {name[0]!r} must be a quoted string{hint}")
        if operator[0] in ("=~", "!~"):
            _check_regex(selector, name[0], value[0])
        matchers.append(f"{name[0]}{operator[0]}{value[0]}")
        at = _skip_space(text, value.end())
        if at == len(text):
            break
        if text[at] != ",":
            raise _invalid(selector, f"',' was expected at {text[at:]!r}")
        at += 1
    return ", ".join(matchers)


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _check_regex(selector: str, name: str, literal: str) -> None:
    body = literal[1:-1]
    if literal[0] != "`":
        body = re.sub(r"\\(.)", lambda m: m[1] if m[1] in "\"'\\" else m[0], body)
    body = body.replace("$", "")  # (Grafana variables such as $job: filled in later)
    try:
        re.compile(body)
    except re.error as exc:
        raise _invalid(selector, f"the regular expression of {name!r} is invalid: {exc}") from None
    if _NOT_RE2.search(body):
        raise _invalid(selector, f"the regular expression of {name!r} uses what RE2 lacks")


def _invalid(selector: str, why: str) -> ValueError:
    example = 'job="mcp"'
    return ValueError(f"invalid selector {selector!r}: {why} (PromQL label matchers: {example})")
