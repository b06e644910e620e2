"""The history page against hostile names: a case, protocol, machine, commit message or path that a
pull request chose is text on the page, never markup, script or an event handler; the page loads
nothing from anywhere (its Content-Security-Policy and its lack of any URL say so)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from history_records import STEP_CASE, planted_values, record_json, write_artifacts

from qualify.commands.history import history_page

HOSTILE = [
    "</script><script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</title><svg onload=alert(1)>",
    "<!-- x --><style>body{background:url(//evil.example/x)}</style>",
    "&lt;b&gt; ]]> '\" `",
]


URL_ATTRIBUTES = {"href", "src", "xlink:href", "action", "formaction", "background", "poster", "data", "style"}


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parsed(page: str) -> _Tags:
    tags = _Tags()
    tags.feed(page)
    tags.close()
    return tags


def _hostile_page(tmp_path: Path, name: str) -> str:
    series = planted_values(4)
    rename = {STEP_CASE: name}
    folder = tmp_path / "a"
    for i in range(4):
        record = folder / f"r{i}"
        record.mkdir(parents=True)
        revision = name if i == 3 else None  # a record's self-reported revision is hostile too
        data = record_json(i, {c: v[i] for c, v in series.items()}, plan_name=name, rename=rename, revision=revision)
        (record / "results.json").write_text(json.dumps(data))
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"records": {"r1": {"commit": "abcdef1", "message": name}}}))
    _, page = history_page(artifacts=folder, manifest=manifest)
    return page


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_text_never_markup(tmp_path, name):
    page = _hostile_page(tmp_path, name)
    parsed = _parsed(page)
    assert [t for t, _ in parsed.tags if t in ("script", "img", "iframe", "object", "embed", "link", "base")] == []
    assert [t for t, _ in parsed.tags].count("style") == 1  # the page's own, in <head>
    assert [t for t, _ in parsed.tags].count("svg") == len(planted_values(1))  # one plot per case, none injected
    for tag, attrs in parsed.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        # attributes that load or style something: only the page's own #anchors, never data
        loading = {a: v for a, v in attrs.items() if a in URL_ATTRIBUTES}
        assert all(a == "href" and (v or "").startswith("#case-") for a, v in loading.items()), (tag, attrs)
    text = "".join(parsed.text)
    assert name in text  # shown to the reader, as the characters it is
    assert name not in page  # each HOSTILE name holds a character escaping rewrites


def test_the_page_forbids_scripts_and_every_fetch():
    from qualify.render.history_html import CSP

    assert "default-src 'none'" in CSP and "script-src" not in CSP


def test_the_page_carries_its_policy_and_no_url(tmp_path):
    write_artifacts(tmp_path / "a", planted_values(3))
    _, page = history_page(artifacts=tmp_path / "a")
    parsed = _parsed(page)
    metas = [a for t, a in parsed.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert len(metas) == 1 and metas[0]["content"].startswith("default-src 'none'")
    urls = [v for _, a in parsed.tags for k, v in a.items() if k in ("src", "href") and not (v or "").startswith("#")]
    assert urls == []
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
