"""What every feature of the app shares, and nothing feature-specific:

* :mod:`.settings`: the operator's settings (GUMIHO_*), read once at the entry points;
* :mod:`.forms`: what the user typed, checked into requests (the app's domain: limits, drafters, trees);
* :mod:`.access`: what a deployment lets its visitors load;
* :mod:`.jobs`: :func:`.jobs.run_job`, how every tab and endpoint runs a request, and the runs' stop flags;
* :mod:`.turns`: decoders timed in turns, each on its own clock (the race's and the comparison's);
* :mod:`.worker`: the one thread that runs every piece of model work, in order;
* :mod:`.zerogpu`: ZeroGPU hardware on a Space (imported first: it must import ``spaces`` before torch);
* :mod:`.page`: what the tabs of the page share (the queue slot, the session's state, wiring, error words).

The features (race, compare, lossless, walkthrough, replays, models) import from here;
nothing here imports a feature or app.web (tests/test_house_app.py).
"""
