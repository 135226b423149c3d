"""``--format html`` (issue 16): well-formed, self-contained, complete, and readable in a browser."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from unitcheck.cli import main
from unitcheck.linter import Report
from unitcheck.report import render
from unitcheck.report.group import finding_keys, group_findings
from unitcheck.report.html import Html, anchor

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
URL_ATTRS = {"href", "src", "srcset", "action", "formaction", "poster", "data", "xlink:href", "background"}


class Checker(HTMLParser):
    """Balanced tags, and every attribute that could load something points inside the page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: list[str] = []
        self.links: list[str] = []
        self.tags: list[str] = []
        self.doctype = False

    def handle_decl(self, decl: str) -> None:
        self.doctype = self.doctype or decl.lower() == "doctype html"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._attrs(tag, attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._attrs(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()

    def _attrs(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name == "id" and value:
                self.ids.append(value)
            if name in URL_ATTRS:
                self.links.append(value or "")
            if name == "style" and value and "url(" in value:
                self.errors.append(f"url() in a style attribute of <{tag}>")


def check_page(text: str) -> Checker:
    c = Checker()
    c.feed(text)
    c.close()
    assert c.doctype, "no <!DOCTYPE html>"
    assert not c.errors, c.errors[:5]
    assert c.stack == [], f"unclosed tags: {c.stack}"
    assert not re.search(r"(?i)\b(?:https?|ftp|wss?|file)://", text), "a URL in the page"
    assert not re.search(r"(?i)url\(|@import|<script|<link|<iframe|<img", text), "an external resource"
    assert all(link.startswith("#") for link in c.links), [x for x in c.links if not x.startswith("#")][:5]
    assert len(c.ids) == len(set(c.ids)), "duplicate ids"
    assert {link[1:] for link in c.links} <= set(c.ids), "a link to an id the page lacks"
    return c


def _complete(report: Report, text: str, page: Checker) -> None:
    """Every finding has its anchor and its folded explanation; groups and heatmap add up."""
    keys = finding_keys(report.violations)
    assert {anchor(k) for k in keys} <= set(page.ids)
    assert text.count('<details class="explain"') == len(report.violations)
    assert text.count("<article ") == len(group_findings(report.violations))
    svg = text[text.index("<svg"):text.index("</svg>")]
    cells = [int(n) for n in re.findall(r"<title>[^<]*: (\d+) findings?</title>", svg)]
    assert sum(cells) == len(report.violations)


def test_gpt_page_is_self_contained_and_complete(gpt_report: Report) -> None:
    text = render(gpt_report, "html")
    page = check_page(text)
    _complete(gpt_report, text, page)
    assert "<svg" in text and "models/gpt.py:50" in text


def test_llama_32_page_is_self_contained_and_complete(llama32_report: Report) -> None:
    text = render(llama32_report, "html")
    page = check_page(text)
    _complete(llama32_report, text, page)
    assert page.tags.count("article") == len(group_findings(llama32_report.violations)) < 10


def test_opaque_generators_link_to_the_finding_that_made_them(gpt_report: Report) -> None:
    text = render(gpt_report, "html")
    keys = dict(zip((v.node for v in gpt_report.violations), finding_keys(gpt_report.violations), strict=True))
    # the first residual add's stream is the output of the UC101 embedding add, node `add`
    block = text[text.index('id="' + anchor(keys["add_1"]) + '"'):]
    block = block[:block.index("</details>")]
    assert f'href="#{anchor(keys["add"])}"' in block


def test_explanation_hook(gpt_report: Report) -> None:
    keys = finding_keys(gpt_report.violations)
    text = render(gpt_report, "html", explanations={keys[1]: "tree <of> generators", keys[2]: Html("<b>given</b>")})
    check_page(text)
    assert "<pre>tree &lt;of&gt; generators</pre>" in text and "<b>given</b>" in text
    assert text.count('<details class="explain"') == len(gpt_report.violations)


def test_no_group_gives_one_card_per_finding(gpt_report: Report) -> None:
    text = render(gpt_report, "html", group=False)
    check_page(text)
    assert text.count("<article ") == len(gpt_report.violations)


def test_cli_writes_the_page_atomically(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "unitcheck.html"
    target.write_text("previous")
    assert main(["lint", "gct", "--format", "html", "--output", str(target)]) == 0
    check_page(target.read_text())
    assert "No violations" in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["unitcheck.html"]


def screenshot(html: Path, png: Path) -> None:
    """Headless Chromium, sandbox off (CI runs as root), nothing fetched, a fresh profile."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium)")
    profile = png.parent / f"profile-{png.stem}"
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
           f"--screenshot={png}", "--window-size=1400,2000", html.resolve().as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=180, check=False)
    assert png.exists(), f"chromium wrote no screenshot: {' '.join(cmd)}"


@pytest.mark.slow
@pytest.mark.parametrize("which", ["gpt", "llama32"])
def test_pages_render_in_headless_chromium(which: str, request, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from PIL import Image

    report = request.getfixturevalue(f"{which}_report")
    html = tmp_path / f"{which}.html"
    html.write_text(render(report, "html", root=str(ROOT)))
    png = tmp_path / f"lint_report_{which}.png"
    screenshot(html, png)
    img = Image.open(png).convert("RGB")
    assert img.size == (1400, 2000)
    # the heatmap's busiest cell is drawn in the darkest red, and it made it onto the screen
    pixels = img.getdata()
    assert sum(1 for p in pixels if p == (153, 27, 27)) > 200
    assert len(set(img.resize((140, 200)).getdata())) > 50  # not a blank or error page
    if which == "llama32" and os.environ.get("UNITCHECK_UPDATE_FIGURES") == "1":
        FIGURES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, FIGURES / png.name)


def test_ci_example_uploads_the_html_report() -> None:
    yaml = pytest.importorskip("yaml")
    steps = yaml.safe_load((ROOT / "examples" / "ci" / "unitcheck.yml").read_text())["jobs"]["units"]["steps"]
    made = [m[1] for s in steps if (m := re.search(r"--format html --output (\S+)", s.get("run", "")))]
    uploaded = [s["with"]["path"] for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    assert made and made == uploaded
    assert all(s.get("if") == "always()" for s in steps if "--format html" in s.get("run", ""))
