"""``python -m app`` from a clone, and the installed package's ``gumiho-app`` command
(pyproject.toml, where the app is ``gumiho.app``): serve the app, as ``python app.py`` does."""
import os


def main() -> None:
    # As app.py: no usage reports to Gradio unless the environment asks for them. Gradio
    # reads the variable when the page is built, after this package's import.
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from gumiho.files import LibraryPaths, configure

    from .core.settings import AppSettings
    from .web.server import serve

    # The entry point: the operator's GUMIHO_* settings are read here, once, and handed down
    # (the library's paths: its cache folder, llama-server, the vLLM environment).
    configure(LibraryPaths.from_environment(os.environ))
    serve(settings=AppSettings.from_environment(os.environ))


if __name__ == "__main__":
    main()
