"""The README and the pages of docs/ point only at what exists: every relative link names a file
of the repository, every ``#anchor`` a heading of its page, and the README stays a short guide
(docs/README.md is the index of everything it leaves out)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a ``# comment`` in a shell block is no heading)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return kept


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in prose_lines(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def relative_links(page: Path) -> list[str]:
    text = "\n".join(prose_lines(page.read_text(encoding="utf-8")))
    text = re.sub(r"`[^`\n]*`", "", text)  # a link shown as code is not followed
    return [
        target
        for target in LINK.findall(text)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target} (no heading #{anchor} in {destination.name})")
    return broken


def test_every_relative_link_of_the_readme_and_docs_points_at_a_file_and_heading_that_exist():
    problems = {
        str(page.relative_to(ROOT)): broken for page in pages() if (broken := broken_links(page))
    }
    assert problems == {}


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A heading: `with` code\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[fine](other.md#a-heading-with-code) [gone](missing.md) [no](other.md#nowhere)\n"
        "[web](https://example.com/x) `[code](not-a-link.md)`\n"
        "```sh\n[inside](a-fence.md)\n```\n"
    )
    assert broken_links(page) == [
        "missing.md (no such file)",
        "other.md#nowhere (no heading #nowhere in other.md)",
    ]


def test_the_readme_stays_a_short_guide():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES


def test_the_docs_index_links_every_page_of_docs():
    index = ROOT / "docs" / "README.md"
    linked = {target.partition("#")[0] for target in relative_links(index)}
    unlisted = {page.name for page in (ROOT / "docs").glob("*.md")} - linked - {"README.md"}
    assert unlisted == set()
