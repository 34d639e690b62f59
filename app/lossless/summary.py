"""What the ``/lossless_check`` endpoint returns."""
from __future__ import annotations

from gumiho.lab.rules import RULE_DESCRIPTIONS

from .run import LosslessResult

ALPHA = 0.01  # the test's level, as the page says it


def lossless_summary(result: LosslessResult) -> dict:
    """Both samples as {sequence text: count}, the chi-square test of one distribution
    (statistic, degrees of freedom, p-value, how many rare sequences were pooled into
    one cell), the rule, and a sentence of what the figures mean."""
    c = result.check

    def counts(sample: dict) -> dict:
        return {result.texts[seq]: n for seq, n in sorted(sample.items(), key=lambda kv: -kv[1])}

    return {"ok": True, "message": "", "prompt": result.prompt, "model": result.model, "drafter": result.drafter,
            "rule": c.rule, "rule_words": RULE_DESCRIPTIONS[c.rule], "temperature": c.temperature,
            "tokens": c.tokens, "samples": c.samples, "stopped": c.stopped,
            "vanilla": counts(c.vanilla), "speculative": counts(c.speculative),
            "chi2": round(c.chi2, 4), "dof": c.dof, "p_value": c.p_value, "alpha": ALPHA,
            "pooled": c.pooled, "sequences": c.sequences,
            "pooling": f"sequences whose expected count is below 5 are pooled into one cell ({c.pooled} were)",
            "verdict": c.verdict(ALPHA), "seconds": round(c.seconds, 2)}
