"""The app's floors and its settings, checked from the source (issue 78):

* GUMIHO_* variables are read from the process's environment only by the entry points
  listed in ENTRY_POINTS; everything below them is handed a settings object (the app's,
  AppSettings) or the library's paths, which every command and the app set once at their
  start (gumiho.files.paths: the cache folder, llama-server, the vLLM environment);
* no import circle between the app's folders, imports for annotations included;
* app.web is the top floor: only the entry points import it.
"""
import ast
import importlib
from pathlib import Path

import pytest
from test_house import _cycles

from gumiho.files import LibraryPaths, cache_root, configured

ROOT = Path(__file__).resolve().parent.parent

# The commands' and the app's entry points: where a process's environment may be read into
# settings. The bench's parser is its command's entry (main builds it first thing).
ENTRY_POINTS = {"app.py", "app/__main__.py", "app/web/record.py", "gumiho/bench/cli.py"}
PREFIX = "GUMIHO_"
# What an entry point does first: the library's paths, read from its environment once.
CONFIGURES = "LibraryPaths.from_environment(os.environ)"


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
    below = {rel: reads for rel, reads in found.items() if rel not in ENTRY_POINTS}
    assert below == {}, f"GUMIHO_* read below the entry points (hand a settings object down instead): {below}"
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


# ----------------------------------------------------------------------------- the library's paths


def _runs_as_main(source: str) -> bool:
    """Whether a module has an ``if __name__ == "__main__":`` block."""
    return any(isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and isinstance(n.test.left, ast.Name)
               and n.test.left.id == "__name__" for n in ast.parse(source).body)


def imports_of(source: str, rel: str) -> list[tuple[str, str]]:
    """(module, name) of every import of the file ``rel``, anywhere in it, a relative one
    made absolute (name "" for a plain ``import module``)."""
    package = rel.removesuffix(".py").split("/")[:-1]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            out += [(base, a.name) for a in node.names]
    return out


def entry_files(sources: dict) -> list[str]:
    """The files a process starts in: a ``__main__.py``, a module with a ``__main__`` block
    (``python -m``, ``python app.py``) and the console scripts' (gumiho/commands.py)."""
    return sorted(rel for rel, text in sources.items()
                  if rel.endswith("__main__.py") or rel == "gumiho/commands.py" or _runs_as_main(text))


def unconfigured_entries(sources: dict) -> list[str]:
    """The entry files that run the library without setting its paths first: one passes
    that reads them itself (CONFIGURES), that runs nothing of the library (the vLLM
    driver, the llama.cpp trial: another interpreter's scripts), or whose every ``main``
    is imported from a file that reads them (``python -m gumiho.bench``: the bench's cli)."""
    left = []
    for rel in entry_files(sources):
        text = sources[rel]
        imports = imports_of(text, rel)
        mains = [module.replace(".", "/") + ".py" for module, name in imports if name == "main"]
        library = any(m == "gumiho" or m.startswith("gumiho.") for m, _ in imports)
        if CONFIGURES in text or not library or (mains and all(CONFIGURES in sources.get(m, "") for m in mains)):
            continue
        left.append(rel)
    return left


def test_every_entry_point_sets_the_library_paths():
    """GUMIHO_CACHE, GUMIHO_LLAMA_SERVER and GUMIHO_VLLM_ENV work for every command and the
    app because each reads them at its start: the library never does."""
    sources = _sources()
    entries = entry_files(sources)
    assert {"app.py", "app/__main__.py", "gumiho/serve.py", "gumiho/bench/__main__.py", "gumiho/commands.py",
            "gumiho/serving/llamacpp_command.py", "gumiho/train/__main__.py"} <= set(entries)
    assert unconfigured_entries(sources) == []


def test_the_entry_check_finds_an_entry_that_forgets():
    sources = {"gumiho/x.py": "from .loading import load_target\nif __name__ == '__main__':\n    load_target()\n",
               "gumiho/y/__main__.py": "from .cli import main\nmain()\n", "gumiho/y/cli.py": "def main(): pass\n",
               "gumiho/z.py": "import json\nif __name__ == '__main__':\n    print(json.dumps(1))\n"}
    assert unconfigured_entries(sources) == ["gumiho/x.py", "gumiho/y/__main__.py"]
    sources["gumiho/y/cli.py"] = f"import os\ndef main():\n    configure({CONFIGURES})\n"
    assert unconfigured_entries(sources) == ["gumiho/x.py"]


def test_the_paths_are_read_from_a_mapping_handed_in(tmp_path):
    given = {"GUMIHO_CACHE": str(tmp_path / "cache"), "GUMIHO_LLAMA_SERVER": str(tmp_path / "bin" / "llama-server"),
             "GUMIHO_VLLM_ENV": str(tmp_path / "venv"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    paths = LibraryPaths.from_environment(given)
    assert paths == LibraryPaths(cache_root=tmp_path / "cache", llama_server=tmp_path / "bin" / "llama-server",
                                 vllm_env=tmp_path / "venv")
    # Without GUMIHO_CACHE: the XDG cache folder, else ~/.cache/gumiho; a blank value is no value.
    assert LibraryPaths.from_environment({"XDG_CACHE_HOME": str(tmp_path / "xdg")}).cache_root == tmp_path / "xdg" / \
        "gumiho"
    home = Path("~").expanduser()
    assert LibraryPaths.from_environment({"GUMIHO_CACHE": " ", "GUMIHO_VLLM_ENV": ""}) == LibraryPaths() == \
        LibraryPaths(cache_root=home / ".cache" / "gumiho")
    assert LibraryPaths.from_environment({"GUMIHO_CACHE": "~/elsewhere"}).cache_root == home / "elsewhere"


def test_the_library_uses_the_paths_set_or_handed_to_it(tmp_path, library_paths):
    from gumiho.serving.llamacpp_build import build_dir
    from gumiho.serving.vllm_env import VLLM_VERSION, env_dir

    library_paths(cache_root=tmp_path / "cache", vllm_env=None)
    assert cache_root() == tmp_path / "cache" and build_dir().parent == tmp_path / "cache"
    assert env_dir() == tmp_path / "cache" / f"vllm-{VLLM_VERSION}"
    library_paths(cache_root=tmp_path / "cache", vllm_env=tmp_path / "venv")
    assert env_dir() == tmp_path / "venv"
    handed = LibraryPaths(cache_root=tmp_path / "other")
    assert cache_root(handed) == tmp_path / "other" and env_dir(handed) == tmp_path / "other" / f"vllm-{VLLM_VERSION}"


def _command_modules() -> list[str]:
    """The library's commands' modules with a ``main(argv)`` that reads the paths (the
    bench's cli among them, which ``python -m gumiho.bench`` and ``gumiho-bench`` run)."""
    return [rel.removesuffix(".py").replace("/", ".") for rel, text in _sources().items()
            if rel.startswith("gumiho/") and CONFIGURES in text and "\ndef main(argv" in text]


@pytest.mark.parametrize("module", _command_modules())
def test_a_command_reads_the_paths_from_its_environment(module, tmp_path, monkeypatch, capsys):
    """Each command's main, run with the variables set (here with --help, which stops it
    after its parser), leaves the library configured with them."""
    monkeypatch.setenv("GUMIHO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GUMIHO_LLAMA_SERVER", str(tmp_path / "llama-server"))
    monkeypatch.setenv("GUMIHO_VLLM_ENV", str(tmp_path / "venv"))
    assert configured().cache_root != tmp_path / "cache"
    with pytest.raises(SystemExit):
        importlib.import_module(module).main(["--help"])
    assert configured() == LibraryPaths(cache_root=tmp_path / "cache", llama_server=tmp_path / "llama-server",
                                        vllm_env=tmp_path / "venv")


def test_the_serve_command_uses_the_llama_server_its_environment_names(tmp_path, monkeypatch, capsys,
                                                                        library_paths):
    """GUMIHO_LLAMA_SERVER through the serve command to the build step: the binary it names
    is the one refused (not executable), before anything is built or fetched."""
    from gumiho.serve import main

    library_paths(llama_server=tmp_path / "not-this-one")  # what the library would use unconfigured
    (tmp_path / "target.gguf").write_bytes(b"GGUF" + bytes(60))
    (tmp_path / "llama-server").write_text("not a program")
    monkeypatch.setenv("GUMIHO_LLAMA_SERVER", str(tmp_path / "llama-server"))
    monkeypatch.setenv("GUMIHO_CACHE", str(tmp_path / "cache"))
    assert main(["--engine", "llama.cpp", "--drafter", "none", "--target", str(tmp_path / "target.gguf")]) == 2
    said = capsys.readouterr().err
    assert f"GUMIHO_LLAMA_SERVER names {str(tmp_path / 'llama-server')!r}, which is not an executable file" in said
    assert not (tmp_path / "cache").exists()


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
