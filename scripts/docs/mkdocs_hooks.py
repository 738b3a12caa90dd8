"""MkDocs hooks of the docs site (mkdocs.yml: ``hooks: [scripts/docs/mkdocs_hooks.py]``).

The docstrings name other objects with Sphinx roles (``:class:`~rlfast.algos.PPO```), which
mkdocstrings renders as the role's text followed by the code (``:class:PPO``). The hook drops
the role and keeps the code, shortened to its last dotted part where the reference starts
with ``~``, as Sphinx shows it.
"""
from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj):<code>(~?)([^<]*)</code>")


def _code(match: re.Match) -> str:
    tilde, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def drop_roles(html: str) -> str:
    """``html`` with every rendered Sphinx role reduced to its code."""
    return ROLE.sub(_code, html)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return drop_roles(html)
