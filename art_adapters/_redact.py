"""Keep credentials out of what we write down: URLs without userinfo, secret-looking query values masked.

A URL given as ``https://user:password@host/v1?api-key=...`` works for requests, but the same
string must not reach a log line, an error message, trajectory metadata or a cache file.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["redact_text", "redact_url"]

#: ``scheme://user:password@`` anywhere in a text (an exception's message that quotes a URL).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")
#: Query parameter names whose values are credentials (``api-key``, ``access_token``, ``sig``...).
_SECRET_PARAM = re.compile(r"key|token|secret|passw|auth|sig|credential", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` without its ``user:password@`` part and with secret-looking query values as ``***``.

    Anything that does not parse as a URL with a host is returned unchanged.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.netloc:
        return url
    netloc = parts.netloc.rpartition("@")[2]  # userinfo ends at the last "@" of the authority
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_SECRET_PARAM.search(name) for name, _ in pairs):
            query = urlencode([(n, "***" if _SECRET_PARAM.search(n) else v) for n, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """``text`` with the userinfo of every URL in it removed (``https://u:p@host`` -> ``https://host``)."""
    return _USERINFO.sub(r"\g<scheme>", text)
