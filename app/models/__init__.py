"""The models the app runs, and where it runs them:

* :mod:`.hub`: the model cache (the default target loaded in the background, the drafters for it,
  one other target on request) and what a request resolves to;
* :mod:`.worker`: the one thread that runs every piece of model work, in order;
* :mod:`.gpu`: ZeroGPU hardware on a Space (imported first: it must import ``spaces`` before torch).
"""
