"""Entry point (also the Hugging Face Space's app_file): serve the gumiho app.

    python app.py            # http://127.0.0.1:7860
    GRADIO_SERVER_NAME=0.0.0.0 GRADIO_SERVER_PORT=8080 python app.py
"""
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from app import serve  # noqa: E402

if __name__ == "__main__":
    serve()
