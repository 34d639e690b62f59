"""The Walkthrough tab: one generation, one verify step at a time.

* :mod:`.tab`: its components and events;
* :mod:`.steps`: the steps computed (each step's tree, who drafted each node, the accepted path);
* :mod:`.treeplot`: the draft tree drawn;
* :mod:`.summary`: what the ``/walkthrough`` endpoint returns.
"""
