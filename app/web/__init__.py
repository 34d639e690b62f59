"""The web server and the page:

* :mod:`.server`: ``python app.py``'s server;
* :mod:`.layout`: the page, assembled from the features' tabs;
* :mod:`.status`: the header, the status banner and the poll that follows the model's loading;
* :mod:`.api`: the ``/race``, ``/walkthrough``, ``/compare`` and ``/lossless_check`` endpoints;
* :mod:`.shared`: what the tabs share (the queue slot, the session's state, error messages);
* :mod:`.access`: what a deployment lets its visitors load;
* :mod:`.checks`: what a request may carry, checked in three layers.
"""
