"""The page, one module per part, each adding its components inside the Blocks and
wiring its own events (app/layout.py assembles them in page order):

* :mod:`.status`: the header, the status banner and the poll that follows the model's loading;
* :mod:`.race`: the Race tab, vanilla and Gumiho decoding side by side;
* :mod:`.walkthrough`: the Walkthrough tab, one generation one verify step at a time;
* :mod:`.api`: the ``/race`` endpoint;
* :mod:`.shared`: what they share (the queue slot, the session's state, error messages).
"""
