"""Credentials never printed: one redaction for every message that can hold a URL.

A storage URL (``redis://user:PASSWORD@host/0``), an admin app's URL
(``http://ops:PASSWORD@host/admin``) or a query parameter (``?password=...``) may carry a
secret. Every error, warning, log line and CLI message the package formats from a URL
passes it through :func:`redact_url`, and any text that may quote one (an exception from a
client library) through :func:`scrub`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

__all__ = ["MASK", "redact_url", "scrub"]

MASK = "***"
#: Query parameters whose values are secrets (redis-py reads ``password``).
_SECRET_PARAMS = re.compile(r"(?i)([?&](?:password|passwd|pass|token|secret)=)([^&#]*)")


def _secrets_of(url: str) -> list[str]:
    """The secrets *url* holds, raw and percent-decoded, longest first."""
    found: set[str] = set()
    _, sep, rest = url.partition("://")
    if sep:
        netloc = rest.split("/", 1)[0].split("?", 1)[0]
        userinfo, at, _ = netloc.rpartition("@")
        if at:
            user, colon, password = userinfo.partition(":")
            for secret in (password if colon else user,):
                if secret:
                    found.add(secret)
                    found.add(urllib.parse.unquote(secret))
    for match in _SECRET_PARAMS.finditer(url):
        if match.group(2):
            found.add(match.group(2))
            found.add(urllib.parse.unquote(match.group(2)))
    return sorted((s for s in found if s), key=len, reverse=True)


def redact_url(url: str) -> str:
    """*url* with its password (a user name alone counts as one: some servers take a
    token there) and secret query values replaced by ``***``; the rest as given."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if sep:
        netloc, slash, tail = rest.partition("/")
        userinfo, at, hosts = netloc.rpartition("@")
        if at:
            user, colon, _ = userinfo.partition(":")
            userinfo = f"{user}:{MASK}" if colon else MASK
            netloc = f"{userinfo}@{hosts}"
        text = f"{scheme}://{netloc}{slash}{tail}"
    return _SECRET_PARAMS.sub(lambda m: m.group(1) + MASK, text)


def scrub(text: object, urls: Iterable[str | None]) -> str:
    """*text* with every secret of *urls* (see :func:`redact_url`) replaced by ``***``."""
    result = str(text)
    for url in urls:
        if not url:
            continue
        result = result.replace(url, redact_url(url))
        for secret in _secrets_of(url):
            result = result.replace(secret, MASK)
    return result
