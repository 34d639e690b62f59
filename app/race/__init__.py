"""The Race tab: vanilla and Gumiho decoding of one prompt side by side.

* :mod:`.tab`: its components and events;
* :mod:`.settings`: the words and choices of its settings (tree shapes, target weights);
* :mod:`.run`: a race computed (the two lanes timed in turns, the fastest way beside them);
* :mod:`.plots`: its figures (acceptance by position, accepted lengths, speed);
* :mod:`.summary`: what the ``/race`` endpoint returns;
* :mod:`.whatif`: the speedup predicted from acceptance and cost, with sliders.
"""
