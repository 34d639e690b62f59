"""Where a drafter's training text comes from, kept apart from the trainer.

Prompt banks (``prompts``, ``tasks``, ``taxonomy``, ``instructions``) write prompt
files; ``distill`` has the target answer them and ``textdata`` puts existing text in
the answer turn, both writing shards of ``gumiho.train.shards``, the one format the
trainer reads. The dependency runs one way: these modules use the shard format, and
the trainer (``gumiho.train.loop`` and the modules it uses) never imports them, so a
new data source needs no change to training.
"""
