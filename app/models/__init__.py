"""The models the app runs:

* :mod:`.hub`: the model cache (the default target loaded in the background, the drafters for it,
  one other target on request), what a request resolves to, and the runtime the default model
  runs on (:func:`.hub.runtime_for`, the app's one decision of it);
* :mod:`.loadable`: whether a model a visitor typed can load here, in the app's words.

The thread every piece of model work runs on, and ZeroGPU hardware on a Space, are
app.core's (app/core/worker.py, app/core/zerogpu.py): every feature's jobs go through them.
"""
