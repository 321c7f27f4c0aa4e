"""The package's imports go one way: read from the source (ast, nothing executed), imports inside functions
included, there is no import cycle, no module imports one of a higher layer, and no model family imports another.

The layers, from the bottom (docs/contributing.md describes them): a module may import its own layer and those
below. Within a layer, imports between modules are allowed as long as they make no cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "hf_xcv"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("hf_xcv.utils", "hf_xcv.version", "hf_xcv.registry", "hf_xcv.remote_code")),
    ("building blocks", ("hf_xcv.layers", "hf_xcv.processing", "hf_xcv.integrations")),
    ("attention", ("hf_xcv.attention",)),
    ("conversion mappings", ("hf_xcv.conversion",)),
    ("losses, metrics, data", ("hf_xcv.losses", "hf_xcv.metrics", "hf_xcv.data", "hf_xcv.visualization")),
    (
        "bases",
        (
            "hf_xcv.configuration_utils",
            "hf_xcv.configuration_detection",
            "hf_xcv.model_card",
            "hf_xcv.checkpoint_conversion",
            "hf_xcv.modeling_utils",
            "hf_xcv.modeling_detection",
        ),
    ),
    ("model families", ("hf_xcv.models",)),
    ("assembly", ("hf_xcv.auto", "hf_xcv.presets", "hf_xcv.pipelines")),
    ("programs", ("hf_xcv.training", "hf_xcv.cli", "hf_xcv.convert", "hf_xcv.train", "hf_xcv")),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> list[str]:
    """The package modules an import statement of module ``name`` names (a ``from package import module`` names
    the module; ``from module import name`` the module)."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join(package + ([node.module] if node.module else []))
        targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = []
    for target in targets:
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in known and target != name:
            found.append(target)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports, anywhere in its source."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[name] = {
            target
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for target in imported(name, path, node, known)
        }
    return graph


def layer_of(module: str) -> int:
    """The index of the layer whose longest prefix names ``module`` (the package itself, ``hf_xcv``, names only its
    ``__init__``: a new top-level module must be given a layer)."""
    best, rank = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            below = module.startswith(prefix + ".") and prefix != "hf_xcv"
            if (module == prefix or below) and len(prefix) > best:
                best, rank = len(prefix), index
    return rank


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )


def family_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["hf_xcv", "models"] else None


def sibling_family_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if family_of(module) and family_of(target) and family_of(module) != family_of(target)
    )


def test_every_module_has_a_layer():
    assert [name for name in modules() if layer_of(name) < 0] == []
    assert layer_of("hf_xcv.a_new_module") < 0 and layer_of("hf_xcv") == len(LAYERS) - 1


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_no_module_imports_from_a_higher_layer():
    assert upward_imports(import_graph()) == []


def test_no_model_family_imports_another():
    assert sibling_family_imports(import_graph()) == []


def test_the_checker_sees_imports_inside_functions_and_relative_ones(tmp_path):
    source = "from ..models import vit\n\ndef f():\n    from ..auto import MODEL_TYPES\n    import hf_xcv.presets\n"
    path = PACKAGE / "conversion" / "example.py"
    known = {name: PACKAGE for name in ("hf_xcv.models", "hf_xcv.models.vit", "hf_xcv.auto", "hf_xcv.presets")}
    tree = ast.parse(source)
    targets = {t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
               for t in imported("hf_xcv.conversion.example", path, node, known)}  # fmt: skip
    assert targets == {"hf_xcv.models.vit", "hf_xcv.auto", "hf_xcv.presets"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_docs_list_the_layers_this_test_enforces():
    """docs/contributing.md's table of layers is this test's LAYERS, in order."""
    page = (REPO_ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    section = page.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    documented = [(row.split("|")[1].strip(), tuple(re.findall(r"`([^`]+)`", row.split("|")[2]))) for row in rows]
    assert documented == LAYERS
