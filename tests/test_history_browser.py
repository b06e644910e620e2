"""The history page in a real headless browser (Debian's chromium, driven by playwright): it loads
with no console error, every plot renders with one point per record, the planted step is flagged
where it was planted and the flat cases are not; a hostile case name stays text.

Without playwright or /usr/bin/chromium these tests skip and say why; with
QUALIFY_REQUIRE_BROWSER=1 (CI sets it) a missing browser fails them instead."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from history_records import N_RECORDS, STEP_AT, STEP_CASE, planted_values, write_artifacts

from qualify.commands.history import history_page, write_page

# Debian's chromium, or any Chromium-family browser named by QUALIFY_CHROMIUM (GitHub's runners
# carry Google Chrome, which .github/workflows/ci.yml links as `chromium`)
CHROMIUM = Path(os.environ.get("QUALIFY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if not CHROMIUM.is_file():
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    return None


def _require_browser() -> None:
    """Skip, saying why, when the browser is missing; fail instead under QUALIFY_REQUIRE_BROWSER=1."""
    missing = _missing()
    if missing:
        if os.environ.get("QUALIFY_REQUIRE_BROWSER") == "1":
            pytest.fail(f"QUALIFY_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)


@pytest.fixture(scope="module")
def browser():
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _load(browser, page_path: Path):
    """The page opened from its file, with every console message and page error it raised."""
    tab = browser.new_page()
    messages: list[tuple[str, str]] = []
    tab.on("console", lambda m: messages.append((m.type, m.text)))
    tab.on("pageerror", lambda e: messages.append(("pageerror", str(e))))
    requests: list[str] = []
    tab.on("request", lambda r: requests.append(r.url))
    tab.goto(page_path.as_uri(), wait_until="load")
    return tab, messages, requests


def _plots(tab) -> list[dict]:
    """Per case section: its heading, the points it declares, and what the browser drew."""
    return tab.eval_on_selector_all(
        "section.case",
        """sections => sections.map(s => {
            const svg = s.querySelector('svg.plot');
            const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
            return {
                heading: s.querySelector('h2').textContent,
                declared: Number(s.dataset.points),
                points: svg ? svg.querySelectorAll('circle.point').length : -1,
                drawn: svg ? [...svg.querySelectorAll('circle.point')].filter(
                    c => c.getBoundingClientRect().width > 0).length : -1,
                width: box.width, height: box.height,
                changes: svg ? [...svg.querySelectorAll('line.change')].map(l => Number(l.dataset.index)) : null,
            };
        })""",
    )


def test_the_page_loads_and_flags_the_planted_step_only(browser, tmp_path):
    write_artifacts(tmp_path / "a", planted_values())
    _, html = history_page(artifacts=tmp_path / "a")
    write_page(html, tmp_path / "history.html")
    tab, messages, requests = _load(browser, tmp_path / "history.html")
    assert [m for m in messages if m[0] in ("error", "pageerror", "warning")] == []
    assert requests == [(tmp_path / "history.html").as_uri()]  # nothing fetched but the page itself
    plots = _plots(tab)
    assert len(plots) == len(planted_values(1))
    for plot in plots:
        assert plot["points"] == plot["declared"] == N_RECORDS == plot["drawn"], plot
        assert plot["width"] > 100 and plot["height"] > 100, plot
        if plot["heading"].startswith(STEP_CASE + " "):
            assert plot["changes"] == [STEP_AT], plot
        else:
            assert plot["changes"] == [], plot
    tab.close()


def test_a_flat_history_shows_no_change_point(browser, tmp_path):
    write_artifacts(tmp_path / "a", planted_values(step=0.0, seed=4))
    _, html = history_page(artifacts=tmp_path / "a")
    write_page(html, tmp_path / "flat.html")
    tab, messages, _ = _load(browser, tmp_path / "flat.html")
    assert [m for m in messages if m[0] in ("error", "pageerror", "warning")] == []
    plots = _plots(tab)
    assert plots and all(p["changes"] == [] and p["points"] == N_RECORDS for p in plots)
    assert tab.locator("line.change").count() == 0
    tab.close()


def test_a_hostile_case_name_runs_nothing_in_the_browser(browser, tmp_path):
    from history_records import record_json

    name = "</script><script>document.title='pwned';console.error('pwned')</script><img src=x onerror=alert(1)>"
    series = planted_values(3)
    for i in range(3):
        (tmp_path / "a" / f"r{i}").mkdir(parents=True)
        data = record_json(i, {c: v[i] for c, v in series.items()}, rename={STEP_CASE: name})
        (tmp_path / "a" / f"r{i}" / "results.json").write_text(json.dumps(data))
    _, html = history_page(artifacts=tmp_path / "a")
    write_page(html, tmp_path / "hostile.html")
    tab, messages, requests = _load(browser, tmp_path / "hostile.html")
    assert messages == [] and len(requests) == 1
    assert tab.title() == "qualify history: vecload"
    assert tab.locator("script").count() == 0 and tab.locator("img").count() == 0
    assert any(name in h for h in tab.locator("section.case h2").all_text_contents())
    tab.close()


def test_a_missing_browser_skips_with_its_reason_and_fails_when_required(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv("QUALIFY_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no-chromium is missing|playwright is not installed"):
        _require_browser()
    monkeypatch.setenv("QUALIFY_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="QUALIFY_REQUIRE_BROWSER=1 but"):
        _require_browser()
