"""The API's endpoints, for clients rather than the page, answered as JSON: ``/race``
(one race: app.race.summary.summary), ``/walkthrough`` (one generation looked at
verify step by verify step: app.walkthrough.summary.walk_summary), ``/compare`` (one
prompt decoded by every shipped drafter: app.compare.summary.compare_summary) and
``/lossless_check`` (speculative sampling's output tested against the target's:
app.lossless.summary.lossless_summary).

An example prompt at the recorded settings is answered from its recording at once
(app/replays) unless the call says ``live=True``; every answer's ``source`` says which
("recorded" or "live"), and a recorded one's ``recorded_on`` says on what machine and
day. A finished live race's ``run_id`` replays it on the page at ``?run=<run_id>``."""
from __future__ import annotations

import inspect
import uuid
from typing import Optional

import gradio as gr

from ..compare.run import CompareForm, compute_compare, parse_compare
from ..compare.summary import compare_summary
from ..core.forms import COPY_DEFAULT, SIZED_SHAPE, RaceForm, parse_request
from ..core.jobs import DONE, RECORDED, run_job
from ..core.page import GENERATE, friendly
from ..lossless.run import LosslessForm, compute_lossless, parse_lossless
from ..lossless.summary import lossless_summary
from ..models.hub import ModelHub
from ..race.run import compute_race
from ..race.summary import summary
from ..replays import LIVE, Replays
from ..replays import RECORDED as RECORDED_SOURCE
from ..walkthrough.steps import PAPER_TREE, compute_walk, walk_request
from ..walkthrough.summary import walk_summary


def add_api(hub: ModelHub, replays: Optional[Replays] = None) -> dict:
    """Register ``/race``, ``/walkthrough``, ``/compare`` and ``/lossless_check`` on the Blocks being
    built (``replays``: the recorded examples and the shared runs; none: every call live); return each
    one's parameters' defaults in order (None for the prompt, which has none), by
    name, for app.web.checks.requests to complete short calls."""

    replays = replays if replays is not None else Replays(hub)
    # A function of its own, not a bound one: Gradio reads the endpoint's parameters,
    # their types and defaults, and its description from this signature and docstring.
    async def race_api(prompt: str, max_new_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
                       seed: int = 0, tree_depth: Optional[int] = None, tree_top_k: Optional[int] = None,
                       tree_nodes: Optional[int] = None, drafter: str = "gumiho", target: str = "",
                       drafter_path: str = "", tree_cost_aware: Optional[bool] = None,
                       copy_from_context: bool = COPY_DEFAULT, target_weights: str = "", live: bool = False) -> dict:
        """Run vanilla and Gumiho decoding of one prompt, timed in alternation (each on its own clock: the
        sum of its own steps), and return both texts with their statistics (tau, tokens/s, target forwards,
        wall time) and the speedup; for Gumiho also acceptance by draft position (unconditional,
        conditional, and the part copied from the context). The tree: with none of tree_depth, tree_top_k,
        tree_nodes and tree_cost_aware given, the one the runtime that runs wants (on the 4-bit weights a chain
        of one); with any given, the others take the page's starting values. With tree_cost_aware, tree_nodes is the
        most drafted tokens a step verifies. With copy_from_context, the copy proposer drafts beside the drafter (tokens that
        followed the same words earlier in the prompt or the answer). target_weights: "as stored" runs the default
        model's 4-bit file in llama.cpp, "float32" (and "", the default) its dequantised weights in PyTorch, where
        the whole hybrid drafter pays; the answer's runtime and weights say which ran, and its fastest gives vanilla
        on the 4-bit file, timed alone after the race, when the race ran float32. An example prompt at the recorded
        settings is answered from its recording (source "recorded", recorded_on) unless live is true; a live race's
        run_id replays it on the page at ?run=<run_id>."""
        form = RaceForm(prompt, max_new_tokens, temperature, top_p, seed, tree_depth, tree_top_k, tree_nodes, drafter,
                        target, drafter_path, tree_cost_aware, copy_from_context, target_weights)
        return await api_race(hub, form, replays, live)

    # No concurrency limit of Gradio's: the model thread is the queue, and it refuses
    # work beyond its bound with "The server is busy" (app/core/page.py says why).
    gr.api(race_api, api_name="race", concurrency_id=GENERATE, concurrency_limit=None)

    async def walkthrough_api(prompt: str, max_new_tokens: int = 24, tree: str = PAPER_TREE,
                              drafter: str = "gumiho", temperature: float = 0.0, seed: int = 0,
                              live: bool = False) -> dict:
        """Generate with the walkthrough's tree ("paper": the paper's shape, every head drafts; "race": the
        race's tree for this machine), greedily (temperature 0) or by speculative sampling, and return every
        verify step: the draft tree's nodes (text, parent, depth, the head that proposed it, its draft
        probability), the accepted path, the target's own choice at each depth, the acceptance test of every
        node the target checked, in order ("checks": draft_prob, rule_q, target_prob, accept_prob, uniform,
        accepted), at temperature above 0 the residual the step's last token was drawn from ("residual": its
        likeliest tokens, the mass they cover, the token drawn), and the text. Recorded examples as in /race."""
        try:
            req = walk_request(RaceForm(prompt, max_new_tokens, temperature, 1.0, seed, drafter=drafter), tree,
                               hub.access)
            return await answer(hub, replays, "walkthrough", req, live, lambda stop: compute_walk(hub, req, stop),
                                lambda walk: walk_summary(walk, prompt))
        except Exception as e:
            return error_summary(friendly(e), prompt)

    gr.api(walkthrough_api, api_name="walkthrough", concurrency_id=GENERATE, concurrency_limit=None)

    async def compare_api(prompt: str, max_new_tokens: int = 64, tree_shape: str = SIZED_SHAPE,
                          tree_depth: Optional[int] = None, tree_top_k: Optional[int] = None,
                          tree_nodes: Optional[int] = None, tree_cost_aware: Optional[bool] = None,
                          target_weights: str = "", copy_alone: bool = False, gumiho_with_copy: bool = False,
                          live: bool = False) -> dict:
        """Decode one prompt greedily with vanilla decoding and with every drafter shipped for the default model
        (gumiho, all-serial, all-parallel, eagle3; copy_alone and gumiho_with_copy add the copy proposer alone
        and beside Gumiho), all with one tree (tree_shape "sized": the tree settings given, as in /race; "paper":
        the paper's tree) and one runtime (target_weights as in /race), each timed on its own clock in turns. Returns per
        drafter its text and whether it is vanilla's, tau, tokens/s, speedup, drafting and verify seconds,
        acceptance by position (unconditional and conditional), the positions its serial and MLP heads drafted
        and its size in parameters; the drafters that could not run, with the reason; and sentences written
        from the figures. Recorded examples as in /race."""
        return await api_compare(hub, CompareForm(prompt, max_new_tokens, tree_depth, tree_top_k, tree_nodes,
                                                  tree_cost_aware, tree_shape, target_weights, copy_alone,
                                                  gumiho_with_copy), replays, live)

    gr.api(compare_api, api_name="compare", concurrency_id=GENERATE, concurrency_limit=None)

    async def lossless_check_api(prompt: str, temperature: float = 0.8, samples: int = 200, tokens: int = 2,
                                 rule: str = "exact", seed: int = 0, live: bool = False) -> dict:
        """Sample the first `tokens` tokens (2-3; 1 is refused: the first token comes from the prefill, before
        anything is drafted, so both samples would be the target's own and no rule could fail) of one answer
        `samples` times (10-1000) by vanilla sampling and as many times by speculative sampling with the default
        model's Gumiho drafter, at `temperature`, and test whether both samples come from one distribution.
        `rule`: "exact" (the engine's acceptance rule),
        or a wrong one that the test should catch: "keep_drafts" (keep every drafted token) or "drafter_q"
        (min(1, p/q) with the drafter's own q, although the drafts were picked top-k). Returns both samples as
        {sequence text: count} ("vanilla", "speculative"), the chi-square test ("chi2", "dof", "p_value", and
        "pooled": rare sequences pooled into one cell), "rule", "samples", "seconds", and a sentence
        ("verdict"). Recorded examples as in /race."""
        return await api_lossless(hub, LosslessForm(prompt, temperature, samples, tokens, rule, seed), replays, live)

    gr.api(lossless_check_api, api_name="lossless_check", concurrency_id=GENERATE, concurrency_limit=None)
    return {fn.__name__.removesuffix("_api"): [None if p.default is inspect.Parameter.empty else p.default
                                              for p in inspect.signature(fn).parameters.values()]
            for fn in (race_api, walkthrough_api, compare_api, lossless_check_api)}


async def answer(hub: ModelHub, replays: Replays, kind: str, req, live: bool, compute, summarize,
                 default_target: bool = True) -> dict:
    """One endpoint's answer to a checked request (app.core.jobs.run_job): its recording
    when the request is a recorded example's and ``live`` is false, else ``compute(stop)``
    on the model thread; ``summarize`` makes the JSON, to which ``source`` (and
    ``recorded_on``, or the live run's ``queue``) is added."""
    async for update in run_job(hub, replays, kind, req, compute, live=live, default_target=default_target):
        if update.stage == RECORDED:
            return {**summarize(update.result), "source": RECORDED_SOURCE, "recorded_on": update.recorded_on}
        if update.stage == DONE:
            # "queue": the runs ahead when it arrived, the wait then expected, and the seconds to the answer.
            return {**summarize(update.result), "source": LIVE, "queue": update.line}
    raise RuntimeError(f"the {kind} job ended without an answer")  # run_job always ends with one


async def api_race(hub: ModelHub, form: RaceForm, replays: Optional[Replays] = None, live: bool = False) -> dict:
    """The /race endpoint's work (:func:`answer`); a finished live race is kept to be
    shared by its ``run_id``."""
    replays = replays if replays is not None else Replays(hub)
    try:
        req = parse_request(form, hub.access, settings=hub.settings)
        shared = {}

        def race(stop):
            result = compute_race(hub, req, stop)
            if not (result.vanilla.stopped or result.gumiho.stopped):
                result.run_id = uuid.uuid4().hex
                replays.shared.put(result.run_id, "race", result)
                shared["run_id"] = result.run_id
            return result

        out = await answer(hub, replays, "race", req, live, race, lambda r: summary(r, form.prompt),
                           default_target=not req.target)
        return {**out, **shared}
    except Exception as e:
        return error_summary(friendly(e), form.prompt)


async def api_compare(hub: ModelHub, form: CompareForm, replays: Optional[Replays] = None, live: bool = False) -> dict:
    """The /compare endpoint's work (:func:`answer`)."""
    try:
        req = parse_compare(form, hub.access)
        return await answer(hub, replays if replays is not None else Replays(hub), "compare", req, live,
                            lambda stop: compute_compare(hub, req, stop), lambda c: compare_summary(c, form.prompt))
    except Exception as e:
        return error_summary(friendly(e), form.prompt)


async def api_lossless(hub: ModelHub, form: LosslessForm, replays: Optional[Replays] = None,
                       live: bool = False) -> dict:
    """The /lossless_check endpoint's work (:func:`answer`)."""
    try:
        req = parse_lossless(form)
        return await answer(hub, replays if replays is not None else Replays(hub), "lossless", req, live,
                            lambda stop: compute_lossless(hub, req, stop), lossless_summary)
    except Exception as e:
        return error_summary(friendly(e), form.prompt)


def error_summary(message: str, prompt) -> dict:
    # The prompt is echoed only when it is valid text: a lone surrogate cannot be sent back as JSON.
    echo = prompt if isinstance(prompt, str) and prompt.encode("utf-8", "replace").decode("utf-8") == prompt else None
    return {"ok": False, "message": message, "prompt": echo}
