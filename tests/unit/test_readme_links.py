"""README.md's pointers into docs/ land: every relative link names a file that exists, and a link to a section of a
docs page names a heading that page has. mkdocs checks the links between the docs pages (`make docs`, --strict);
README.md is outside its docs_dir, so its links are checked here, with the heading ids mkdocs gives."""

from __future__ import annotations

import re
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_ids(page: Path) -> set[str]:
    """The ids of a page's headings, as mkdocs' toc extension makes them (inline code's backticks dropped)."""
    ids, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            ids.add(slugify(m.group(1).replace("`", "").strip(), "-"))
    return ids


def test_readme_links_name_existing_files_and_sections() -> None:
    links = [t for t in LINK.findall((ROOT / "README.md").read_text()) if "://" not in t]
    assert any(t.startswith("docs/") for t in links)
    for target in links:
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"README.md links to {path}, which does not exist"
        if anchor:
            assert anchor in heading_ids(ROOT / path), f"README.md links to {target}: {path} has no such heading"
