"""A commit's web page: from the GitProvider's `spec.commitUrlTemplate`, or derived from the
remote URL on github.com, gitlab.com and bitbucket.org (docs/alerts.md, "The commit link").
Pure; never raises.
"""

from __future__ import annotations

import re

from kubescribe.net.urls import Form, UrlSyntaxError, parse

PLACEHOLDER = "{sha}"
TEMPLATE_PATTERN = r"^https://[^\s{}]+\{sha\}[^\s{}]*$"
"""An `https://` URL with exactly one `{sha}` and no other brace (the schema's pattern)."""

_TEMPLATE = re.compile(TEMPLATE_PATTERN)
_SEGMENT = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")
_SHA = re.compile(r"\A[0-9a-f]{7,64}\Z")
_WEB = {
    "github.com": ("https://github.com/{path}/commit/{sha}", 2),
    "gitlab.com": ("https://gitlab.com/{path}/-/commit/{sha}", 0),  # subgroups: any depth
    "bitbucket.org": ("https://bitbucket.org/{path}/commits/{sha}", 2),
}
_SCHEMES = frozenset({"https", "http", "ssh", "git+ssh", "ssh+git", "git"})


def derived_template(remote_url: str) -> str | None:
    """The commit URL template of a remote on a known forge (None: not one of them)."""
    try:
        remote = parse(remote_url.strip())
    except UrlSyntaxError:
        return None
    if remote.form not in (Form.URL, Form.SCP) or remote.scheme not in _SCHEMES:
        return None
    web = _WEB.get(remote.host)
    if web is None:
        return None
    template, depth = web
    path = remote.path.strip("/").removesuffix(".git")
    segments = path.split("/")
    if not all(_SEGMENT.match(s) for s in segments) or len(segments) < 2:
        return None
    if depth and len(segments) != depth:
        return None
    return template.replace("{path}", path)


def commit_url_template(remote_url: str, explicit: str | None) -> str | None:
    """The template to use: `explicit` when set and valid, else one derived from the URL."""
    if explicit:
        return explicit if _TEMPLATE.match(explicit) else None
    return derived_template(remote_url)


def commit_url(template: str | None, sha: str) -> str | None:
    """The link to commit `sha` (None: no template, or not a commit id)."""
    if template is None or not _SHA.match(sha):
        return None
    return template.replace(PLACEHOLDER, sha)
