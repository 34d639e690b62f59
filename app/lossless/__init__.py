"""The Lossless? tab: does speculative sampling write the target's own distribution?

* :mod:`.run`: the experiment's form checked, and the experiment run (gumiho.lab.lossless);
* :mod:`.figures`: both samples side by side, a bar per sequence;
* :mod:`.summary`: what the ``/lossless_check`` endpoint returns;
* :mod:`.tab`: its components and events.
"""
