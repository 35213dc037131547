"""MkDocs hook: the docstrings' Sphinx cross-reference roles (``:func:`name```, ``:class:`...```) are
shown as the code they name, without the role (mkdocstrings renders Markdown, not reStructuredText)."""
from __future__ import annotations

import re

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const|term|ref):(?=<code>)")


def on_page_content(html: str, **kwargs: object) -> str:
    """Drop each role before the ``<code>`` element it names."""
    return _ROLE.sub("", html)
