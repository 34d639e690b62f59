"""The Compare tab: one prompt decoded by every shipped drafter, on one runtime.

* :mod:`.tab`: its components and events;
* :mod:`.run`: a comparison computed (each drafter on its own clock, in turns);
* :mod:`.figures`: its figures;
* :mod:`.summary`: its findings, and what the ``/compare`` endpoint returns.
"""
