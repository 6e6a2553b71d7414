"""The code's shape, checked: folders are layers whose imports only go down, no import comes back
round to the file it started from (Python or the page's scripts), no object reaches into
another's private attributes, files and functions stay small enough to read."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ["app.py", "options.py", "startup.py", "inference", "ui", "bench"]
# Lower layers first: a module may import its own layer and those before it, never one after it.
LAYERS = {
    "inference": ["errors", "text", "model", "request", "runtime", "serving", "analysis"],
    "ui": ["guard", "library", "services", "http", "page", "server"],
}
# Sanity bounds, not targets: a module is as long as its one job needs (files are split by job,
# not by size); past these, a file or function has likely taken on a second job.
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
BASES_OF_OWN = ("self", "cls", "torch", "sys", "os")  # torch._dynamo, sys._getframe...: module APIs
# Private names of other packages we call on purpose: the official voxcpm has no public streaming
# call that takes a prompt cache, and the peer benchmark measures exactly that path.
OUTSIDE_PRIVATE = {"bench/official_side.py": {"_generate_with_prompt_cache"}}


def python_files(*tops: str) -> list[Path]:
    out = []
    for top in tops:
        path = ROOT / top
        out += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return out


def private_reaches(tree: ast.AST) -> list[tuple[int, str]]:
    """`x._name` where x is not self/cls: a read or write of another object's private state."""
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        if node.attr in ("_replace", "_asdict", "_fields", "_make"):  # namedtuple's public API
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in BASES_OF_OWN:
            continue
        if isinstance(base, ast.Call) and getattr(base.func, "id", "") == "super":
            continue
        hits.append((node.lineno, node.attr))
    return hits


def test_the_private_reach_check_finds_one():
    tree = ast.parse("def f(worker):\n    worker._lock.acquire()\n    self._ok = 1\n")
    assert private_reaches(tree) == [(2, "_lock")]


def test_no_module_reaches_into_another_objects_private_attributes():
    found = [f"{p.relative_to(ROOT)}:{line} .{attr}" for p in python_files(*PRODUCT)
             for line, attr in private_reaches(ast.parse(p.read_text(encoding="utf-8")))
             if attr not in OUTSIDE_PRIVATE.get(str(p.relative_to(ROOT)), ())]
    assert found == []


def layer_of(package: str, dotted: str) -> int | None:
    parts = dotted.split(".")
    if parts[0] != package or len(parts) < 2:
        return None
    names = LAYERS[package]
    return names.index(parts[1]) if parts[1] in names else None


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """What `path` imports, anywhere in it (a function's late import too): each module's absolute
    dotted name (relative imports resolved) with the names taken from it (none for `import a`)."""
    here = path.relative_to(ROOT).with_suffix("").parts
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or node.module):
            module = ".".join(list(here[:-node.level]) + ([node.module] if node.module else [])) \
                if node.level else node.module
            out.append((module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names]
    return out


def imported_modules(path: Path) -> list[str]:
    """Absolute dotted names of the modules `path` imports."""
    return [module for module, _ in imports(path)]


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_imports_only_go_down_the_layers(package):
    upward = []
    for path in python_files(package):
        own = layer_of(package, ".".join(path.relative_to(ROOT).with_suffix("").parts))
        if own is None:
            continue
        for name in imported_modules(path):
            other = layer_of(package, name)
            if other is not None and other > own:
                upward.append(f"{path.relative_to(ROOT)} imports {name}")
    assert upward == []


def test_inference_never_imports_the_app_or_the_tests():
    bad = [f"{p.relative_to(ROOT)} imports {n}" for p in python_files("inference", "bench")
           for n in imported_modules(p) if n.split(".")[0] in ("ui", "tests", "app")]
    assert bad == []


# A page script's static imports of its own files (`import { a } from './b.js'`); vendored code and
# dynamic import() are left out.
JS_IMPORT = re.compile(r"""^\s*import\s[^;]*?from\s+['"](\.[^'"]+)['"]""", re.M | re.S)


def module_file(dotted: str) -> Path | None:
    path = ROOT.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def python_imports(path: Path) -> set[Path]:
    """The product's files that `path` imports: `from a import b` names a/b.py when that is a
    module, else a.py or a/__init__.py."""
    out = set()
    for module, names in imports(path):
        out |= {module_file(f"{module}.{name}") or module_file(module) for name in names} or {module_file(module)}
    return out - {None, path}


def import_graph() -> dict[Path, set[Path]]:
    graph = {path: python_imports(path) for path in python_files(*PRODUCT)}
    for path in sorted((ROOT / "static").rglob("*.js")):
        if "vendor" not in path.parts:
            graph[path] = {(path.parent / name).resolve() for name in JS_IMPORT.findall(path.read_text(encoding="utf-8"))}
    return graph


def circles(graph: dict) -> list[list]:
    """The groups of files whose imports lead from each to each (each group sorted)."""
    reach = {}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            node = todo.pop()
            if node not in seen and node in graph:
                seen.add(node)
                todo += graph[node]
        reach[start] = seen
    groups = {frozenset(n for n in reach[v] if v in reach[n]) for v in graph if v in reach[v]}
    return sorted(sorted(group) for group in groups)


def test_the_circle_check_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_comes_back_round_to_the_file_it_started_from():
    found = [[str(p.relative_to(ROOT)) for p in group] for group in circles(import_graph())]
    assert found == []


def source_files() -> list[Path]:
    files = python_files(*PRODUCT, "tests")
    files += sorted(p for p in (ROOT / "static").rglob("*.js") if "vendor" not in p.parts)
    return files


def test_files_are_short_enough_to_read():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in source_files()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES]
    assert long == []


def test_functions_are_short_enough_to_read():
    long = []
    for path in python_files(*PRODUCT):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert long == []
