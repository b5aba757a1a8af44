"""docs/README.md and the README's documentation list name every page of docs/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md")


def linked_pages(text: str, prefix: str) -> set[str]:
    return set(re.findall(rf"\]\({re.escape(prefix)}([a-z0-9-]+\.md)", text))


def test_docs_index_lists_every_page_once_with_its_line() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    rows = re.findall(r"(?m)^\| \[([a-z0-9-]+\.md)\]\(\1\) \| (.+) \|$", index)
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)), f"a page is listed twice: {names}"
    assert sorted(names) == PAGES
    assert all(line.strip() for _, line in rows)


def test_readme_links_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("Documentation (") :]
    section = section[: section.index("\n\n")]
    assert linked_pages(section, "docs/") == set(PAGES)
    assert "docs/README.md" in section
