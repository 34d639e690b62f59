"""The top floor: the page and its server. Nothing else in the app imports it (only
the entry points, app.py and ``python -m app``; tests/test_house_app.py checks that):

* :mod:`.server`: ``python app.py``'s server;
* :mod:`.layout`: the page, assembled from the features' tabs;
* :mod:`.status`: the header, the status banner and the poll that follows the model's loading;
* :mod:`.api`: the ``/race``, ``/walkthrough``, ``/compare`` and ``/lossless_check`` endpoints;
* :mod:`.record`: ``python -m app.web.record``, the example prompts' recordings;
* :mod:`.checks`: what an HTTP request and an event's values may carry, checked before the forms
  (app.core.forms) check what the user typed.
"""
