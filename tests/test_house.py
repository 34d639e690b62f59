"""The package's shape, checked: no import circles among the modules of gumiho/ and
app/, short functions in the decode loop and the proposers."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP_MODULES = [*sorted(str(p.relative_to(ROOT)) for p in (ROOT / "gumiho/engine").glob("*.py")),
                *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "gumiho/proposers").glob("*.py"))]
MAX_LINES = 80


def _module_name(path: Path, top: str) -> str:
    parts = list(path.relative_to(ROOT / top).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([top] + parts)


def _imports(path: Path, name: str, package: bool) -> set[str]:
    """Every module of the same top package that ``path`` imports, at any depth of
    the file (an import inside a function is still an import), those for annotations
    only (under ``if TYPE_CHECKING:``) included: they never run, but a circle through
    them is still two modules that each need the other to be read."""
    top = name.split(".")[0]
    here = name.split(".") if package else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == top}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[:len(here) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != top:
                continue
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


def _graph(top: str) -> dict[str, set[str]]:
    files = {_module_name(p, top): p for p in (ROOT / top).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        deps = _imports(path, name, path.name == "__init__.py")
        # A package imported for its names stands for its __init__; a submodule for itself.
        graph[name] = {d for d in deps if d in files and d != name and not name.startswith(d + ".")}
    return graph


def _cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    for top in ("gumiho", "app"):
        assert _cycles(_graph(top)) == [], top


def test_serving_and_export_do_not_import_each_other():
    """The engines this project drives (serving/) and the files it writes (export/) share
    what both need through formats/, never through each other."""
    graph = _graph("gumiho")
    for a, b in (("gumiho.serving", "gumiho.export"), ("gumiho.export", "gumiho.serving")):
        crossing = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.startswith(a) for d in deps
                          if d.startswith(b))
        assert crossing == [], crossing


def test_the_app_is_grouped_by_feature():
    """At most six loose modules at app/'s top: the rest live in a package per thing a
    visitor sees (race, compare, walkthrough) and per shared part (views, models, web)."""
    loose = [p.name for p in (ROOT / "app").glob("*.py") if p.name != "__init__.py"]
    assert len(loose) <= 6, loose
    for package in ("race", "compare", "walkthrough", "views", "models", "web"):
        assert (ROOT / "app" / package / "__init__.py").is_file(), package


def test_the_space_tool_is_not_in_the_library_wheel():
    """Deployment and rehearsal live in space_deploy/, which pyproject.toml does not ship."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = project["tool"]["setuptools"]["packages"]
    assert "gumiho.app" in packages and not any("space_deploy" in p or "deploy" in p for p in packages)
    assert not list((ROOT / "app").rglob("*deploy*")) and not list((ROOT / "app").rglob("*rehearsal*"))
    shipped = {f"gumiho.app.{p.relative_to(ROOT / 'app').as_posix().replace('/', '.')}"
               for p in (ROOT / "app").rglob("*") if (p / "__init__.py").is_file()}
    assert shipped <= set(packages), shipped - set(packages)  # every app package is in the wheel


def test_the_cycle_check_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_import_graph_counts_annotation_only_imports(tmp_path):
    module = tmp_path / "kinds.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .config import DrafterConfig\n")
    assert _imports(module, "gumiho.drafter.kinds", False) == {"gumiho.drafter.config",
                                                               "gumiho.drafter.config.DrafterConfig"}


MAX_MODULE_LINES = 400


def test_no_module_is_longer_than_400_lines():
    long = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
            for top in ("gumiho", "app", "space_deploy") for p in (ROOT / top).rglob("*.py")}
    assert {rel: n for rel, n in long.items() if n > MAX_MODULE_LINES} == {}


def test_decode_loop_and_proposer_functions_are_short():
    long = []
    for rel in LOOP_MODULES:
        for node in ast.walk(ast.parse((ROOT / rel).read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_LINES:
                    long.append(f"{rel}:{node.name} ({n} lines)")
    assert long == []



def test_the_suite_tests_the_package_not_the_research_scripts():
    """research/ holds finished experiments with their own tests (research/tests): no
    test of the suite may load a file from there, or the experiments would be
    load-bearing again; and the package itself never imports from research/."""
    research = {p.stem for p in (ROOT / "research").glob("*.py")}
    assert research  # the check below looks at something
    loads = []
    for path in sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "gumiho").rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                  and not n.level}
        by_path = "spec_from_file_location" in text or "runpy" in names  # a file loaded by its path
        if names & (research | {"research", "scripts"}) or (by_path and path != Path(__file__).resolve()):
            loads.append(str(path.relative_to(ROOT)))
    assert loads == []


def test_every_package_of_the_library_is_installed():
    """pyproject.toml lists the packages by name: a new subpackage left off the list
    would be missing from an installed wheel while every test in the clone passes."""
    import re

    listed = set(re.search(r"^packages = \[(.*)\]", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
                 .replace('"', "").replace(" ", "").split(","))
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "gumiho").rglob("__init__.py")}
    found |= {"gumiho.app" + "".join("." + part for part in p.parent.relative_to(ROOT / "app").parts)
              for p in (ROOT / "app").rglob("__init__.py")}
    assert found - listed == set()


RUNTIME_QUESTIONS = ("runtime_name", "runtime.name ==", "runtime.name !=", "runtime.name in", "runtime is None",
                     "runtime is not None", "hasattr(cache", "isinstance(target.runtime", "isinstance(self.runtime",
                     "LlamaCppCache")


def runtime_questions(text: str) -> list[str]:
    return [q for q in RUNTIME_QUESTIONS if q in text]


def test_nothing_outside_the_runtimes_asks_which_runtime_it_has():
    """The runtime is a seam (gumiho/runtimes): the decode loop, the bench and the app
    call its interface; its name is only shown, never branched on. Loading makes one
    (gumiho/loading/runtime.py chooses them by name, gumiho/loading/targets.py constructs them), which is not asking."""
    root = Path(__file__).resolve().parents[1]
    found = {}
    for path in list((root / "gumiho").rglob("*.py")) + list((root / "app").rglob("*.py")):
        if "runtimes" in path.parts:
            continue
        hits = runtime_questions(path.read_text(encoding="utf-8"))
        if hits:
            found[str(path.relative_to(root))] = hits
    assert not found, found


def test_the_runtime_question_check_finds_a_question():
    assert runtime_questions('if target.runtime.name == "llama.cpp":\n    tree = chain')
    assert runtime_questions("if hasattr(cache, 'keep'):")
    assert not runtime_questions('record["runtime"] = target.runtime.name')


def test_every_file_a_cache_key_names_exists():
    """A moved module must not leave a cache key naming its old file (the vLLM export's key
    named export/transformers_folder.py after it moved to formats/, and serving failed)."""
    missing = []
    for path in sorted((ROOT / "gumiho").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "code_key":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and not (ROOT / "gumiho" / arg.value).is_file():
                        missing.append(f"{path.relative_to(ROOT)}: {arg.value}")
    assert missing == []


def app_imports(source: str, name: str) -> list[str]:
    """What in ``source`` (the module ``name`` of gumiho/) would import the app: an import
    of ``app`` or ``gumiho.app``, relative ones resolved, or either name handed to
    importlib as a string."""
    here = name.split(".")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level] + ([base] if base else []))
            found += [base] + [f"{base}.{a.name}" for a in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
            found.append(str(node.args[0].value))
    return sorted({f for f in found if f.split(".")[0] == "app" or f.split(".")[:2] == ["gumiho", "app"]})


def test_the_library_never_imports_the_app():
    """The arrows run from the app down to the library, never back up: the app's console
    entry lives in the app (app/__main__.py), and a library module that reached for the
    app would need the app's packages (gradio) wherever the library runs."""
    assert _app_imports_under("gumiho") == {}


def _app_imports_under(folder: str) -> dict[str, list[str]]:
    """file -> what it imports of the app, for every module below ``folder`` of gumiho/."""
    found = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        # A package's __init__ resolves relative imports from itself, a module from its package.
        name = _module_name(path, "gumiho") + (".__init__" if path.name == "__init__.py" else "")
        hits = app_imports(path.read_text(encoding="utf-8"), name)
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    return found


def test_the_app_import_check_finds_an_import():
    assert app_imports("import app.web", "gumiho.commands") == ["app.web"]
    assert app_imports("from ..app import serve", "gumiho.bench.cli") == ["gumiho.app", "gumiho.app.serve"]
    assert app_imports("from . import app", "gumiho.__init__") == ["gumiho.app"]
    assert app_imports("importlib.import_module('gumiho.app')", "gumiho.commands") == ["gumiho.app"]
    assert app_imports("from gumiho.apps import x\nimport application", "gumiho.commands") == []


def _reached_from(graph: dict[str, set[str]], starts) -> set[str]:
    """Every module ``starts`` import, directly or through others."""
    seen, todo = set(), list(starts)
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def engine_reaches(graph: dict[str, set[str]]) -> list[str]:
    """The lab and app modules the engine's modules (gumiho/engine) import, at any
    remove: the engine is handed the lab's rules, it never fetches them."""
    engine = [m for m in graph if m == "gumiho.engine" or m.startswith("gumiho.engine.")]
    return sorted(m for m in _reached_from(graph, engine)
                  if m.split(".")[:2] in (["gumiho", "lab"], ["gumiho", "app"]) or m.split(".")[0] == "app")


def test_the_engine_never_imports_the_lab_or_the_app():
    assert [m for m in _graph("gumiho") if m.startswith("gumiho.engine.")]  # the check looks at something
    assert engine_reaches(_graph("gumiho")) == []
    assert _app_imports_under("gumiho/engine") == {}  # not even by name, through importlib


def test_the_engine_import_check_finds_an_import():
    graph = {"gumiho.engine.decode": {"gumiho.tree"}, "gumiho.tree": {"gumiho.lab.rules"}, "gumiho.lab.rules": set()}
    assert engine_reaches(graph) == ["gumiho.lab.rules"]
    assert engine_reaches({"gumiho.engine.run": {"gumiho.tree"}, "gumiho.tree": set()}) == []
