"""The gumiho Gradio app: vanilla vs Gumiho decoding side by side, every token
coloured by the head that drafted it, live acceptance plots, and a step-by-step
walkthrough of the draft tree. ``python app.py`` serves it."""
from .models import zerogpu  # noqa: F401  (first: on a ZeroGPU Space it imports `spaces` before torch is used)
from .models.hub import ModelHub
from .web.layout import build_app, load_css
from .web.server import serve

__all__ = ["ModelHub", "build_app", "load_css", "serve"]
