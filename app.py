"""Entry point (also the Hugging Face Space's app_file): serve the gumiho app.

    python app.py            # http://127.0.0.1:7860
    GRADIO_SERVER_NAME=0.0.0.0 GRADIO_SERVER_PORT=8080 python app.py

It installs and downloads nothing: on a Space, everything the app runs came with the
upload (`python -m space_deploy`): the library, the drafters and the default model's
file (assets/models), with the packages of the upload's requirements.txt, all of them
wheels. A Space whose network is cut still starts and serves (docs/space.md).
"""
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


if __name__ == "__main__":
    from app.core.settings import AppSettings
    from app.web.server import serve
    from gumiho.files import LibraryPaths, configure

    # The entry point: the operator's GUMIHO_* settings are read here, once, and handed down
    # (the library's paths: its cache folder, llama-server, the vLLM environment).
    configure(LibraryPaths.from_environment(os.environ))
    serve(settings=AppSettings.from_environment(os.environ))
