"""A Griffe extension for the API pages (mkdocs.yml names it under mkdocstrings' options).

* ``SphinxRoles``: our docstrings cross-reference with Sphinx roles (``:class:`~hf_xcv.X```, ``:func:`f```); Markdown
  has none, so each becomes a code span of the name (``X``, ``f``) instead of showing the role's markup.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(lambda match: f"`{match.group(1).split('.')[-1]}`", obj.docstring.value)
