"""A Griffe extension for the API pages: the docstrings' Sphinx roles (``:class:`~a.b.C```,
``:func:``, ``:meth:``, ``:data:`` …) become inline code (``C``, or the full path without the
tilde), as the reader of the docs site expects, instead of showing the raw role."""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def plain(text: str) -> str:
    """``text`` with each Sphinx role as inline code: the last name after a tilde, else all."""
    def one(m: re.Match) -> str:
        target = m.group(2).strip()
        return f"`{target.rsplit('.', 1)[-1] if m.group(1) else target}`"

    return ROLE.sub(one, text)


STAR = re.compile(r"(?<=[\w)])\*(?![*\w])")  # y*, n*: a star after a name, not emphasis


def escaped(text: str) -> str:
    """``text`` with the stars of y*, x*, n* escaped outside code spans, so that Markdown does
    not read two of them as the edges of an emphasis."""
    parts = re.split(r"(``.*?``|`[^`]*`)", text)  # the code spans at the odd indices
    return "".join(STAR.sub(r"\\*", p) if i % 2 == 0 else p for i, p in enumerate(parts))


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring's Sphinx roles when Griffe loads an object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = escaped(plain(obj.docstring.value))
