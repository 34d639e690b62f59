"""The app's floors and its settings, checked from the source (issue 78):

* GUMIHO_* variables are read from the process's environment only by the entry points
  listed in ENTRY_POINTS; everything below them is handed a settings object;
* no import circle between the app's folders, imports for annotations included;
* app.web is the top floor: only the entry points import it.
"""
import ast
from pathlib import Path

from test_house import _cycles

ROOT = Path(__file__).resolve().parent.parent

# The commands' and the app's entry points: where a process's environment may be read into
# settings. The bench's parser is its command's entry (main builds it first thing).
ENTRY_POINTS = {"app.py", "app/__main__.py", "app/web/record.py", "gumiho/bench/cli.py"}
# Library modules that still read GUMIHO_* below their commands (issue 78, not yet moved to
# the commands' main): each one named here, so that no new one can join them unseen.
LIBRARY_READS_LEFT = {"gumiho/files/__init__.py", "gumiho/serving/llamacpp_build.py", "gumiho/serving/vllm_env.py"}
PREFIX = "GUMIHO_"


def _environ_check(tree):
    """Whether a node is the process's environment: ``os.environ``, or a bare ``environ`` where
    the module imports it from os (elsewhere a bare ``environ`` is a mapping handed in)."""
    bare = any(isinstance(n, ast.ImportFrom) and n.module == "os" and any(a.name == "environ" for a in n.names)
               for n in ast.walk(tree))
    return lambda node: ((isinstance(node, ast.Attribute) and node.attr == "environ")
                         or (bare and isinstance(node, ast.Name) and node.id == "environ"))


def environment_reads(source: str) -> list[str]:
    """The GUMIHO_* names ``source`` reads from the process's environment: ``os.environ.get(...)``,
    ``os.environ[...]``, ``os.getenv(...)``, ``... in os.environ``, with the name given as text or
    as a module constant that holds it. A mapping handed in as an argument is not the environment."""
    tree = ast.parse(source)
    _is_environ = _environ_check(tree)
    constants = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                 for t in n.targets if isinstance(t, ast.Name)}

    def name_of(arg):
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name):
            return constants.get(arg.id, "")
        return ""

    keys = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            func = node.func
            if (func.attr in ("get", "setdefault", "pop") and _is_environ(func.value)) or func.attr == "getenv":
                keys.append(name_of(node.args[0]))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getenv" and node.args:
            keys.append(name_of(node.args[0]))
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            keys.append(name_of(node.slice))
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            keys.append(name_of(node.left))
    return sorted({k for k in keys if k.startswith(PREFIX)})


def _sources():
    paths = [ROOT / "app.py", *sorted((ROOT / "app").rglob("*.py")), *sorted((ROOT / "gumiho").rglob("*.py"))]
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def test_settings_are_read_at_the_entry_points_only():
    found = {rel: reads for rel, text in _sources().items() if (reads := environment_reads(text))}
    below = {rel: reads for rel, reads in found.items() if rel not in ENTRY_POINTS | LIBRARY_READS_LEFT}
    assert below == {}, f"GUMIHO_* read below the entry points (hand a settings object down instead): {below}"
    # The lists above stay true: an entry point named here still reads, a library read left is still there.
    assert {rel for rel in LIBRARY_READS_LEFT if rel not in found} == set()
    assert {"app.py", "app/__main__.py"} - set(_uses_from_environment()) == set()


def _uses_from_environment() -> list[str]:
    return [rel for rel, text in _sources().items() if "AppSettings.from_environment(os.environ)" in text]


def test_the_environment_check_finds_a_read():
    assert environment_reads('import os\nx = os.environ.get("GUMIHO_RUNTIME")') == ["GUMIHO_RUNTIME"]
    assert environment_reads('import os\nV = "GUMIHO_CACHE"\nx = os.environ[V]') == ["GUMIHO_CACHE"]
    assert environment_reads('import os\nx = os.getenv("GUMIHO_X", "")') == ["GUMIHO_X"]
    assert environment_reads('from os import environ\nx = "GUMIHO_Y" in environ') == ["GUMIHO_Y"]
    assert environment_reads('def f(env):\n    return env.get("GUMIHO_PUBLIC")') == []  # a mapping handed in
    assert environment_reads('def f(environ):\n    return environ.get("GUMIHO_PUBLIC")') == []
    assert environment_reads('import os\nx = os.environ.get("HOME")') == []


# ----------------------------------------------------------------------------- the app's floors


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported_modules(source: str, module: str, package: bool) -> set[str]:
    """Every module of the app that ``source`` (the module ``module``) imports, anywhere in the
    file: in a function, and under ``if TYPE_CHECKING:`` too (an annotation's arrow is an arrow)."""
    here = module.split(".") if package else module.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m == "app" or m.startswith("app.")}


def _app_modules():
    paths = sorted((ROOT / "app").rglob("*.py"))
    return {_module(p): (p, imported_modules(p.read_text(encoding="utf-8"), _module(p), p.name == "__init__.py"))
            for p in paths}


def folder(module: str) -> str:
    """The app folder (or loose module) a module belongs to: app.race.tab -> app.race."""
    return ".".join(module.split(".")[:2])


def folder_graph(modules: dict) -> dict:
    graph = {}
    for name, (_, deps) in modules.items():
        # The package app itself (app/__init__.py) is the floor above every folder, not one of them.
        if name == "app":
            continue
        here = folder(name)
        graph.setdefault(here, set()).update(folder(d) for d in deps if d != "app" and folder(d) != here)
    return graph


def test_no_import_circle_between_the_app_folders():
    graph = folder_graph(_app_modules())
    assert {"app.web", "app.core", "app.race", "app.compare", "app.lossless", "app.walkthrough"} <= set(graph)
    assert _cycles(graph) == []


def test_the_folder_check_counts_an_annotation_only_import():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..web.layout import X\n"
    assert imported_modules(source, "app.race.tab", False) >= {"app.web.layout"}
    graph = folder_graph({"app.race.tab": (None, {"app.web.layout"}), "app.web.layout": (None, {"app.race.tab"})})
    assert _cycles(graph) == [["app.race", "app.web"]]


def test_only_the_entry_points_import_the_web_floor():
    """app.web (the page, its server and the API) is the top floor: the features, the core
    and the views never import it, nor does the app's package (app/__init__.py)."""
    up = sorted(f"{name} -> {dep}" for name, (_, deps) in _app_modules().items()
                if not (name == "app.web" or name.startswith("app.web.") or name == "app.__main__")
                for dep in deps if dep == "app.web" or dep.startswith("app.web."))
    assert up == []
    # app.py, at the clone's root, is the other entry point: it may import the server.
    assert any(d.startswith("app.web") for d in imported_modules((ROOT / "app.py").read_text(), "app_py", False))


def test_the_core_imports_no_feature():
    """app.core is what the features share: it imports none of them (only the views, below it)."""
    features = ("app.race", "app.compare", "app.lossless", "app.walkthrough", "app.replays", "app.models")
    up = sorted(f"{name} -> {dep}" for name, (_, deps) in _app_modules().items() if name.startswith("app.core")
                for dep in deps if dep.startswith(features))
    assert up == []
