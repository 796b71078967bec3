"""The docs hold together: the README stays an index, every link between pages lands on a file and a heading that
exist, and every setting of `core.settings.Settings` is documented once in docs/configuration.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parley.core.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])
README_MOST_BYTES = 12 * 1024

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(path: Path) -> str:
    """The page without its fenced code blocks (a `# comment` in a shell example is no heading)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a page, with GitHub's `-1`, `-2` … for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(prose(path)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def local_targets(path: Path) -> list[str]:
    text = prose(path)
    targets = LINK.findall(text) + IMAGE.findall(text)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto: ...


def test_the_readme_is_an_index_of_at_most_12_kb():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MOST_BYTES, f"README.md is {size} bytes; move detail to a docs/ page"


def test_the_readme_keeps_the_two_quick_start_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("run", "test"):
        assert re.search(rf"^make {target}\b", readme, re.MULTILINE), f"`make {target}` left the README's quick start"
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"the Makefile has no `{target}` target"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_lands_on_a_file_and_a_heading(page):
    broken = []
    for target in local_targets(page):
        file_part, _, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)} has broken links:\n" + "\n".join(broken)


def test_every_setting_is_documented_once_in_the_configuration_page():
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \|", (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8"),
                      re.MULTILINE)
    settings = {name.upper() for name in Settings.model_fields}
    missing = sorted(settings - set(rows))
    repeated = sorted({name for name in rows if rows.count(name) > 1})
    assert not missing, f"settings with no row in docs/configuration.md: {missing}"
    assert not repeated, f"settings with more than one row in docs/configuration.md: {repeated}"
