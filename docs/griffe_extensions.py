"""Griffe extensions for the API pages (mkdocs.yml names them under mkdocstrings' options).

* ``NamespaceSubpackages``: load a package's folders that have no ``__init__.py``. ``hf_xcv/models/`` is such a folder
  (a PEP 420 namespace subpackage inside a regular package): Python imports it, but griffe skips it on purpose, so
  ``::: hf_xcv.ViTForImageClassification`` could not resolve to ``hf_xcv.models.vit``. This registers each such
  folder as a namespace module before griffe loads the submodules; once the folder has an ``__init__.py`` it does
  nothing.
* ``SphinxRoles``: our docstrings cross-reference with Sphinx roles (``:class:`~hf_xcv.X```, ``:func:`f```); Markdown
  has none, so each becomes a code span of the name (``X``, ``f``) instead of showing the role's markup.
"""

from __future__ import annotations

import re
from pathlib import Path

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")


class NamespaceSubpackages(griffe.Extension):
    def on_module_instance(self, *, mod: griffe.Module, **kwargs) -> None:
        if not mod.is_package or mod.is_namespace_package or not isinstance(mod.filepath, Path):
            return
        for folder in sorted(mod.filepath.parent.iterdir()):
            if folder.name in mod.members or not folder.is_dir() or (folder / "__init__.py").exists():
                continue
            if any(folder.glob("*/__init__.py")) or any(folder.glob("*.py")):
                mod.set_member(folder.name, griffe.Module(folder.name, filepath=[folder], parent=mod))


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(lambda match: f"`{match.group(1).split('.')[-1]}`", obj.docstring.value)
