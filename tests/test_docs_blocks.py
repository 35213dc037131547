"""Every code block of README.md and docs/**/*.md runs as written, in the order a reader meets it
(``python -m pytest -m docs``; conventions and annotations in tests/doc_blocks.py). One test per page,
named by its path; a failure names the page, the block's line, the command and the end of its output."""
from pathlib import Path

import pytest

from doc_blocks import REPO, parse_page, run_page

pytestmark = pytest.mark.docs

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_page_blocks_run_as_written(page: Path, tmp_path: Path) -> None:
    name = str(page.relative_to(REPO))
    parsed = parse_page(page.read_text(encoding="utf-8"), name)   # a malformed annotation fails here, with its line
    result = run_page(parsed, tmp_path / "work", label=name)
    for block, reason in result.skipped:
        print(f"{name}:{block.line}: {block.lang or 'untagged'} block skipped: {reason}")
    if result.failure:
        pytest.fail(result.failure, pytrace=False)
