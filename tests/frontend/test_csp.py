"""The Content-Security-Policy (clear/csp.py): the header on every page, and nothing on a page that would need
'unsafe-inline': no inline script, no <style>, no style="" attribute, no on…= handler, no javascript: URL. Checked in
every template's source and in every page a walk from the navigation reaches (the browser tests check that Chromium
reports no violation: tests/support/browser.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.test import Client

from diagnosis.services.insights import insights_build
from tests.frontend.conftest import EVIL_TRACE_ID, client_for
from traces.models import Trace

pytestmark = pytest.mark.django_db

REPO_ROOT = Path(__file__).resolve().parents[2]
_NOT_OURS = {".venv", "var", "node_modules", ".git"}
DATA_SCRIPT_TYPES = {"application/json"}  # json_script: data, never executed
_URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href"}


def _templates() -> list[Path]:
    found = []
    for path in REPO_ROOT.rglob("templates/**/*.html"):
        if not _NOT_OURS & set(path.relative_to(REPO_ROOT).parts):
            found.append(path)
    return sorted(found)


class _InlineFinder(HTMLParser):
    """What in one HTML document the policy would refuse."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        where = f"line {self.getpos()[0]}: <{tag}"
        values = dict(attrs)
        for name, value in attrs:
            javascript_url = name in _URL_ATTRIBUTES and (value or "").strip().lower().startswith("javascript:")
            if name == "style" or name.startswith("on") or javascript_url:
                self.problems.append(f'{where} {name}="{value}">')
        if tag == "style":
            self.problems.append(f"{where}> block")
        if tag == "script" and not values.get("src") and (values.get("type") or "").lower() not in DATA_SCRIPT_TYPES:
            self.problems.append(f"{where}> inline script")


def inline_problems(html: str) -> list[str]:
    finder = _InlineFinder()
    finder.feed(html)
    finder.close()
    return finder.problems


# A template's source, Django tags and all: the same things, found by pattern.
_TEMPLATE_PATTERNS = {
    "<style> block": re.compile(r"<style\b", re.IGNORECASE),
    'style="" attribute': re.compile(r"<[a-z][^>]*\sstyle\s*=", re.IGNORECASE | re.DOTALL),
    "on…= handler": re.compile(r"<[a-z][^>]*\son[a-z]+\s*=", re.IGNORECASE | re.DOTALL),
    "javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
    "inline script": re.compile(r"<script\b(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.IGNORECASE),
}


def test_the_parser_finds_what_the_policy_refuses():
    html = ('<p style="color:red" onclick="x()">a</p><a href="javascript:x()">b</a><style>p{}</style>'
            '<script>x()</script><script src="/static/a.js"></script><script type="application/json">{}</script>'
            '<svg><rect width="3" fill="red"/></svg><p>&lt;script&gt;x()&lt;/script&gt; style="a" onload=</p>')
    assert len(inline_problems(html)) == 5, inline_problems(html)


def test_no_template_has_inline_script_or_style():
    templates = _templates()
    assert any(p.name == "base.html" for p in templates) and len(templates) > 40, templates
    problems = []
    for path in templates:
        source = path.read_text(encoding="utf-8")
        for what, pattern in _TEMPLATE_PATTERNS.items():
            for match in pattern.finditer(source):
                line = source.count("\n", 0, match.start()) + 1
                problems.append(f"{path.relative_to(REPO_ROOT)}:{line}: {what}: {match.group(0)[:80]!r}")
    assert not problems, "move these to frontend/static/frontend/ (clear.js, clear.css):\n" + "\n".join(problems)


def test_every_html_response_carries_the_policy_and_the_other_headers():
    response = Client().get("/login/")
    policy = response["Content-Security-Policy"]
    assert policy == settings.CLEAR_CSP
    directives = {d.split()[0]: d.split()[1:] for d in policy.split(";") if d.strip()}
    assert directives["script-src"] == ["'self'"] and directives["style-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"] and directives["frame-ancestors"] == ["'none'"]
    assert "unsafe" not in policy
    assert response["X-Frame-Options"] == "DENY" and response["X-Content-Type-Options"] == "nosniff"
    assert Client().get("/p/no-such-project/")["Content-Security-Policy"] == policy  # the 404 page too
    assert Client().get("/api/docs/")["Content-Security-Policy"] == policy


def test_an_empty_setting_turns_the_header_off(settings):
    settings.CLEAR_CSP = ""
    response = Client().get("/login/")
    assert response.status_code == 200 and "Content-Security-Policy" not in response


def test_api_docs_need_no_inline_script_or_style():
    """Swagger UI: its init script is a file (the split view), its page has no <style>; Redoc, which injects styles,
    sends people to it."""
    client = Client()
    html = client.get("/api/docs/").content.decode()
    assert not inline_problems(html), inline_problems(html)
    script = re.search(r'<script src="([^"]*script=[^"]*)"', html).group(1).replace("&amp;", "&")
    response = client.get(script)
    assert response.status_code == 200 and "SwaggerUIBundle(" in response.content.decode()
    assert client.get("/api/redoc/")["Location"] == "/api/docs/"


# ---- every page a walk from the navigation reaches ----------------------------------------------------------------

_ID = re.compile(r"/(\d+|[0-9a-f]{16,32}|[0-9a-f]{8}-[0-9a-f-]{27})(?=/|$)")
_SKIP = re.compile(r"^/static/|^/admin/|^/api/|/logout/|/export/|\.json$|/artifacts/")


class _Links(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def _pattern(url: str) -> str:
    parts = urlsplit(url)
    query = "&".join(sorted({pair.split("=", 1)[0] for pair in parts.query.split("&") if pair}))
    return _ID.sub("/<id>", parts.path) + ("?" + query if query else "")


def test_no_page_the_walk_reaches_has_inline_script_or_style(seeded, evil_trace, owner):
    """The pages rendered with data (the support desk, judged, insights and tickets built, and a trace whose content
    is hostile HTML): the header on each, nothing inline. Python-built HTML (frontend/render.py) is in them."""
    insights_build(run=seeded.run)
    project = seeded.project
    client = client_for(owner)
    evil = Trace.objects.get(project=project, trace_id=EVIL_TRACE_ID)
    start = ["/", "/login/", "/p/no-such-project/", f"/p/{project.slug}/traces/{evil.trace_id}/"]
    start += [f"/p/{project.slug}/traces/{evil.trace_id}/?span={span_id}"
              for span_id in evil.spans.values_list("span_id", flat=True)]
    queue, seen, visited, problems = list(start), {_pattern(u) for u in start}, [], []
    while queue:
        url = queue.pop(0)
        response = (Client() if url == "/login/" else client).get(url, follow=True)
        visited.append(url)
        if "text/html" not in response.get("Content-Type", ""):
            continue
        html = response.content.decode()
        if response.get("Content-Security-Policy") != settings.CLEAR_CSP:
            problems.append(f"{url}: no Content-Security-Policy header")
        problems += [f"{url}: {problem}" for problem in inline_problems(html)]
        links = _Links()
        links.feed(html)
        for href in links.hrefs:
            path = href.split("#", 1)[0]
            if path.startswith("/") and not _SKIP.search(urlsplit(path).path) and _pattern(path) not in seen:
                seen.add(_pattern(path))
                queue.append(path)
        assert len(visited) < 300, "the walk does not end: " + "\n".join(visited[-20:])
    kinds = {_pattern(u) for u in visited}
    for must in ("/traces/<id>/", "/insights/<id>/", "/runs/<id>/", "/tickets/", "/workflow/", "/nodes/",
                 "/settings/rubrics/", "/settings/judge/", "/settings/issue-tracker/", "/settings/api-keys/",
                 "/evolution/", "/runs/new/"):
        assert any(must in kind for kind in kinds), (must, sorted(kinds))
    assert not problems, "\n".join(problems)
