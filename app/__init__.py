"""The gumiho Gradio app: vanilla vs Gumiho decoding side by side, every token
coloured by the head that drafted it, live acceptance plots, and a step-by-step
walkthrough of the draft tree. ``python app.py`` serves it.

Its floors, top down: :mod:`.web` (the page's layout, the server, the API), the
features (:mod:`.race`, :mod:`.compare`, :mod:`.lossless`, :mod:`.walkthrough`,
:mod:`.replays`, :mod:`.models`), :mod:`.core` (forms, access, settings, jobs: what
every feature shares), and :mod:`.views` (records and their HTML and figures)."""
import os

# How the runtimes' worker threads wait, set before torch or llama.cpp load OpenMP (libgomp reads
# it once, at its start), unless the operator set either variable. Both runtimes' threads wait
# through libgomp here (llama-cpp-python's build runs llama.cpp on OpenMP). Spinning 10,000 times
# before sleeping, instead of libgomp's 300,000, kept vanilla's quiet speed and, beside a
# neighbour's busy process, ran 1.4-2x faster and kept the race's speedup nearest its quiet
# value; sleeping at once (OMP_WAIT_POLICY=PASSIVE) halved quiet 4-bit speed
# (research/waiting_settings.py, benchmarks/busy/waiting_settings.txt).
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "10000"

from .core import zerogpu  # noqa: F401  (first: on a ZeroGPU Space it imports `spaces` before torch is used)

# The page and its server are the top floor (app.web.layout.build_app, app.web.server.serve):
# only the entry points (app.py, python -m app) import them; nothing below does, this file included.
