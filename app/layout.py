"""The Gradio Blocks: a race tab (vanilla vs Gumiho), a walkthrough tab, and the
wiring between the controls, the per-session state and the shared models.

Concurrency: every event that runs a model shares one queue slot
(``concurrency_id="generate"``), so generations never overlap on the CPU (a race
times its two decoders in alternation, app/race.py); requests beyond it wait in the queue. Replays, toggles
and status polls do no model work and are not limited by that slot.
Per-session data (the last race, the walkthrough) lives in ``gr.State``; the only
shared objects are the models and the table of stop flags, keyed by run ids that
each session holds privately.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from typing import Optional

import gradio as gr

from gumiho import CopySettings, GumihoError

from . import figures
from .access import Access
from .hub import ModelHub
from .inputs import COPY_DEFAULT, DEVICE_TREE, MAX_NEW_TOKENS, MAX_TREE_DEPTH, MAX_TREE_NODES, MAX_TREE_TOP_K, \
    WALK_MAX_NEW_TOKENS, parse_request
from .race import RUNS, TIMING_NOTE, Control, Progress, compute_race, error_summary, in_background, on_model_thread, \
    replay_frames, summary, until_ready
from .render import esc, render_banner, render_legend, render_result, render_run, render_stats
from .tokens import DrafterLayout, RaceResult
from .walkthrough import EXPLANATION, PAPER_TREE, PLAY_INTERVAL_S, TREE_CHOICES, Walk, choices_table, compute_walk, \
    step_figure, step_header, text_so_far, walk_request

log = logging.getLogger("gumiho.app")

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
GENERATE = "generate"  # the queue slot every model-running event shares
PLAY, PAUSE = "▶ Play", "⏸ Pause"  # the walkthrough's autoplay button
CONCURRENCY = max(1, int(os.environ.get("GUMIHO_APP_CONCURRENCY", "1") or 1))

HEADER = """<div class="gm-header"><h1>🦊 Gumiho speculative decoding, made visible</h1>
<p>A small drafter guesses the next tokens (a serial Transformer for positions 1–2, parallel MLP heads for 3–7);
the target model checks the whole draft tree in one forward pass and keeps the longest prefix it agrees with.
The answer is exactly the target's own &mdash; only faster when the guesses are good.</p></div>"""

METRICS = """
**The numbers, exactly.** *tau* = new tokens / target forward passes (the prompt's prefill counts as one
forward that produced one token; vanilla has tau = 1). *Acceptance at position d* (bars) = share of verify
steps whose accepted draft length is ≥ d; *conditional acceptance* (line) = that share divided by the share
at d−1. *Speedup* = vanilla wall time / Gumiho wall time for the same tokens of the same prompt, both timed
in this process.
"""


def load_css() -> str:
    with open(os.path.join(ASSETS, "style.css"), encoding="utf-8") as f:
        return f.read()


def load_examples() -> list[str]:
    try:
        with open(os.path.join(ASSETS, "examples.json"), encoding="utf-8") as f:
            return [p for p in json.load(f)["prompts"] if isinstance(p, str) and p.strip()]
    except (OSError, ValueError, KeyError):
        return ["Write a short poem about the sea."]


def _placeholder(text: str) -> str:
    return f'<span class="gm-placeholder">{text}</span>'


def _advanced_note(access: Access) -> str:
    if access.public:
        extra = " Folders on this server are accepted too." if access.local_paths else ""
        return ("This public demo loads only the models it lists: " + ", ".join(f"`{n}`" for n in access.listed())
                + " (a paper's pair brings its drafter; the hub models need a GPU in practice)." + extra
                + " Run the app on your own machine (`python app.py`) to try any model.")
    return ("Any Hugging Face causal LM with full attention (Llama, Qwen2, SmolLM, Mistral…): a hub id (needs the "
            "Hub to be reachable, or the model already downloaded), a local folder, or a name of the registry "
            "(such as `amd/Gumiho-vicuna-7b`, which brings its drafter). Give the folder of a drafter trained for it "
            "with `python -m gumiho.train`; without one, a random drafter is used.")


def _fail(e: BaseException) -> str:
    """The one way an error reaches the page: a toast, and the banner this returns,
    both with the same text escaped (Gradio renders a toast's message as HTML, so
    text from the request, such as a model id, must not become markup there)."""
    msg = _friendly(e)
    gr.Warning(esc(msg))
    return render_banner(msg, "error")


def _friendly(e: BaseException) -> str:
    if isinstance(e, GumihoError):
        return str(e)
    log.exception("unexpected error in a request", exc_info=e)
    return f"Something went wrong ({type(e).__name__}); the app keeps serving, please try again."


def build_app(hub: Optional[ModelHub] = None) -> gr.Blocks:
    hub = hub or ModelHub()
    examples = load_examples()
    ready0 = hub.ready

    with gr.Blocks(title="Gumiho speculative decoding") as demo:
        gr.HTML(HEADER)
        banner = gr.HTML(render_banner(*hub.status()), elem_id="gm-banner")
        timer = gr.Timer(1.0, active=True)
        race_state = gr.State(None)
        run_id = gr.State("")
        request_state = gr.State(None)  # the checked request of the run being started
        walk_state = gr.State(None)

        with gr.Tabs():
            # ------------------------------------------------------------------ race
            with gr.Tab("Race", id="race"):
                with gr.Row(equal_height=True):
                    prompt = gr.Textbox(label="Prompt", lines=3, max_lines=8, scale=5, elem_id="gm-prompt",
                                        value=examples[0], placeholder="Ask the model something…")
                    with gr.Column(scale=1, min_width=150):
                        run_btn = gr.Button("Run the race", variant="primary", interactive=ready0, elem_id="gm-run")
                        stop_btn = gr.Button("Stop", variant="stop", interactive=False, elem_id="gm-stop")
                gr.Examples(examples=[[p] for p in examples], inputs=[prompt], label="Example prompts")
                with gr.Accordion("Settings", open=False):
                    with gr.Row():
                        max_new = gr.Slider(1, MAX_NEW_TOKENS, value=64, step=1, label="Max new tokens")
                        temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)")
                        top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
                        # No minimum here: the framework's own check of it would end the run's chain of
                        # events midway and leave the page waiting; parse_request says what is wrong.
                        seed = gr.Number(0, precision=0, label="Seed (sampling)")
                    with gr.Row():
                        depth = gr.Slider(1, MAX_TREE_DEPTH, value=DEVICE_TREE.depth, step=1, label="Tree depth")
                        top_k = gr.Slider(1, MAX_TREE_TOP_K, value=DEVICE_TREE.top_k, step=1,
                                          label="Tree top-k (branching of the serial steps)")
                        budget = gr.Slider(1, MAX_TREE_NODES, value=DEVICE_TREE.total_tokens, step=1,
                                           label="Tree node budget (drafted tokens per step; "
                                                 "the most per step when sized by cost)")
                        cost_aware = gr.Checkbox(DEVICE_TREE.cost_aware, label="Size trees by measured cost",
                                                 info="Each step verifies only the drafted tokens likely enough "
                                                      "to pay for the longer verify forward on this machine",
                                                 elem_id="gm-cost-aware")
                        drafter = gr.Dropdown(choices=hub.drafter_choices(), value="gumiho", label="Drafter",
                                              elem_id="gm-drafter")
                        copy_box = gr.Checkbox(COPY_DEFAULT, label="Copy from the context (green)",
                                               info="A third guesser: where the last tokens occurred earlier in "
                                                    "the prompt or the answer, it proposes what followed them "
                                                    "there, verified with the drafter's guesses",
                                               elem_id="gm-copy")
                    gr.Markdown("On a CPU extra tree nodes cost verify time, by an amount that depends on the CPU; "
                                "sized by cost, each step keeps a drafted token only when its chance of being "
                                "accepted pays for that time, as timed on this machine (once, a few seconds). On a "
                                "GPU trees of ~60 nodes cost little more than one token. "
                                "With temperature > 0 the two columns sample "
                                "different texts from the same distribution; at 0 they are identical.")
                with gr.Accordion("Advanced: another target model", open=False):
                    gr.Markdown(_advanced_note(hub.access))
                    with gr.Row():
                        target_id = gr.Textbox(label="Target model id or folder (empty = default)", max_lines=1)
                        drafter_path = gr.Textbox(label="Drafter folder (config.json + model.safetensors)",
                                                  max_lines=1)
                status = gr.HTML("", elem_id="gm-status")
                gr.Markdown(TIMING_NOTE)
                with gr.Row():
                    first_legend = DrafterLayout(copy=CopySettings().max_tokens if COPY_DEFAULT else 0)
                    legend = gr.HTML(render_legend(first_legend), elem_id="gm-legend")
                    ghosts = gr.Checkbox(False, label="Show rejected drafts (struck-through ghosts)",
                                         elem_id="gm-ghosts", scale=0, min_width=260)
                with gr.Row(equal_height=False):
                    with gr.Column():
                        gr.HTML('<div class="gm-col-title">Vanilla decoding: one target forward per token</div>')
                        v_stats = gr.HTML(render_stats(None), elem_id="gm-vanilla-stats")
                        v_html = gr.HTML(_placeholder("Vanilla output appears here."), elem_id="gm-vanilla",
                                         elem_classes=["gm-tokens"])
                    with gr.Column():
                        gr.HTML('<div class="gm-col-title">Gumiho speculative decoding: a draft tree per '
                                'target forward</div>')
                        g_stats = gr.HTML(render_stats(None), elem_id="gm-gumiho-stats")
                        g_html = gr.HTML(_placeholder("Gumiho output appears here, coloured by the head that "
                                                      "drafted each token."), elem_id="gm-gumiho",
                                         elem_classes=["gm-tokens"])
                result_html = gr.HTML("", elem_id="gm-result")
                with gr.Row():
                    acc_plot = gr.Plot(figures.acceptance_figure(None, None), label="Acceptance by position",
                                       elem_id="gm-acc-plot")
                    hist_plot = gr.Plot(figures.accepted_length_figure(None, None), label="Accepted length",
                                        elem_id="gm-hist-plot")
                speed_plot = gr.Plot(figures.speed_figure([], []), label="Speed", elem_id="gm-speed-plot")
                gr.Markdown(METRICS)

            # ------------------------------------------------------------------ walkthrough
            with gr.Tab("Walkthrough", id="walk"):
                gr.Markdown("Step through one generation, **one verify step at a time**. It uses greedy decoding "
                            "and the Race tab's drafter. Its tree is the paper's shape, deep enough for every head "
                            "of the drafter to show, unless you pick the race's tree.")
                with gr.Row(equal_height=True):
                    walk_prompt = gr.Textbox(label="Prompt", lines=2, scale=4, value=examples[0],
                                             elem_id="gm-walk-prompt")
                    with gr.Column(scale=1, min_width=160):
                        walk_tokens = gr.Slider(1, WALK_MAX_NEW_TOKENS, value=24, step=1, label="Max new tokens")
                        walk_btn = gr.Button("Generate and step through", variant="primary", interactive=ready0,
                                             elem_id="gm-walk-run")
                walk_tree = gr.Radio(TREE_CHOICES, value=PAPER_TREE, label="Tree", elem_id="gm-walk-tree-choice",
                                     info="The race's tree is the one the Race tab's settings give (depth, top-k, "
                                          "node budget, sized by cost or not).")
                walk_status = gr.HTML("", elem_id="gm-walk-status")
                with gr.Row():
                    prev_btn = gr.Button("◀ Previous step", interactive=False, elem_id="gm-walk-prev")
                    play_btn = gr.Button(PLAY, interactive=False, elem_id="gm-walk-play")
                    walk_slider = gr.Slider(1, 2, value=1, step=1, label="Verify step", interactive=False,
                                            elem_id="gm-walk-slider")
                    next_btn = gr.Button("Next step ▶", interactive=False, elem_id="gm-walk-next")
                # Autoplay: off until Play; each tick shows the next step (walk_tick).
                walk_timer = gr.Timer(PLAY_INTERVAL_S, active=False)
                walk_playing = gr.State(False)
                walk_head = gr.HTML("", elem_id="gm-walk-head")
                walk_plot = gr.Plot(None, label="Draft tree", elem_id="gm-walk-tree")
                walk_table = gr.HTML("", elem_id="gm-walk-table")
                walk_text = gr.HTML(_placeholder("The text so far appears here; the current step is outlined."),
                                    elem_id="gm-walk-text", elem_classes=["gm-tokens"])
                gr.Markdown(EXPLANATION)

        # ---------------------------------------------------------------------- status
        def poll():
            level, text = hub.status()
            done = hub.state in ("ready", "error")
            ready = hub.ready
            can_run = ready or hub.state == "error"  # after an error, other models can still be tried
            return (render_banner(text, level), gr.Button(interactive=can_run), gr.Button(interactive=ready),
                    gr.Dropdown(choices=hub.drafter_choices()), gr.Timer(active=not done))

        poll_outputs = [banner, run_btn, walk_btn, drafter, timer]
        demo.load(poll, outputs=poll_outputs, queue=False, show_progress="hidden", api_visibility="undocumented")
        timer.tick(poll, outputs=poll_outputs, queue=False, show_progress="hidden", api_visibility="undocumented")

        # ---------------------------------------------------------------------- race events
        def start_race(show_rejected, prompt_v, max_new_v, temp_v, top_p_v, seed_v, depth_v, top_k_v, budget_v, kind_v,
                       target_v, drafter_path_v, cost_aware_v=None, copy_v=None):
            """Checks the request (and is the only step that reads the controls: should
            the web framework's own check of a control fail here, nothing has been
            disabled yet, so the page stays usable). A bad request ends the run here
            with its message, and the steps after it only restore the buttons: Run is
            disabled until they have (end_race), so a click in between cannot start a
            run whose buttons the refused run's last step would then reset."""
            try:
                req = parse_request(prompt_v, max_new_v, temp_v, top_p_v, seed_v, depth_v, top_k_v, budget_v, kind_v,
                                    target_v, drafter_path_v, cost_aware=cost_aware_v, access=hub.access,
                                    copy=copy_v)
            except Exception as e:
                return ("", None, gr.Button(interactive=False), gr.skip(), _fail(e)) + (gr.skip(),) * 5
            rid = RUNS.new(show_rejected)
            return (rid, req, gr.Button(interactive=False), gr.Button(interactive=True),
                    render_banner("Waiting for a free slot (one generation runs at a time)…", "info"),
                    "", "", render_stats(None), render_stats(None), "")

        async def race_compute(rid, req):
            if req is None:  # refused by start_race, which said why
                yield None, gr.skip(), gr.skip()
                return
            ctl = RUNS.get(rid) or Control()
            try:
                if not req.target_id and not hub.wait_ready(0):
                    yield None, render_banner("Waiting for the model to finish loading…", "loading"), gr.skip()
                    await until_ready(hub)
                progress = Progress()
                result = None
                async for item in in_background(lambda: compute_race(hub, req, ctl.stop, progress), hub.submit,
                                                stop=ctl.stop):
                    if item is None:
                        yield None, render_banner(progress.text(), "loading"), gr.skip()
                    else:
                        result = item
            except Exception as e:  # every failure becomes a message; the app keeps serving
                yield None, _fail(e), gr.skip()
                return
            note = ("Replaying both runs side by side with their recorded timestamps…" if not result.vanilla.stopped
                    else "Stopped.")
            yield result, render_banner(note, "info"), render_legend(result.gumiho.layout)

        def race_replay(rid, result: Optional[RaceResult]):
            if result is None:
                yield (gr.skip(),) * 9
                return
            ctl = RUNS.get(rid) or Control()
            g_note = result.notes[0] if result.notes else ""
            if result.drafter_note:
                g_note += " — " + result.drafter_note
            v, g = result.vanilla, result.gumiho
            if v.stopped and not g.events:
                g_note = "Not run: stopped before Gumiho's turn."
            try:
                yield from _replay(result, ctl, g_note)
            except Exception as e:  # the steps after this one still run and restore the buttons
                yield (gr.skip(),) * 8 + (_fail(e),)

        def _replay(result: RaceResult, ctl: Control, g_note: str):
            v, g = result.vanilla, result.gumiho
            for fr in replay_frames(result, ctl.stop):
                if fr.stopped:
                    end = render_stopped(fr.clock)
                else:
                    end = render_result(result) if fr.final else ""
                out = [render_run(v, fr.n_vanilla), render_run(g, fr.n_gumiho, ctl.show_rejected),
                       render_stats(v, fr.n_vanilla, fr.clock, _state_note(v, fr.n_vanilla, fr)),
                       render_stats(g, fr.n_gumiho, fr.clock, g_note), end]
                if fr.plots:
                    g_stats_now = g.stats(fr.n_gumiho)
                    out += [figures.acceptance_figure(g_stats_now, g.layout),
                            figures.accepted_length_figure(g_stats_now, g.layout),
                            figures.speed_figure(v.series(fr.n_vanilla), g.series(fr.n_gumiho), result.duration)]
                else:
                    out += [gr.skip(), gr.skip(), gr.skip()]
                if fr.final:
                    out.append(render_banner(_final_note(result, fr), "ready" if not fr.stopped else "info"))
                else:
                    out.append(render_banner(f"Replaying with the recorded timestamps: {fr.clock:.1f} s of "
                                             f"{result.duration:.1f} s", "info"))
                yield tuple(out)

        def end_race(rid):
            RUNS.end(rid)
            return gr.Button(interactive=hub.ready or hub.state == "error"), gr.Button(interactive=False)

        def stop_race(rid):
            RUNS.stop(rid)
            return render_banner("Stopping both columns…", "info")

        def toggle_ghosts(show, rid, result: Optional[RaceResult]):
            ctl = RUNS.get(rid)
            if ctl is not None:  # a run is in flight: its replay picks the toggle up
                ctl.show_rejected = bool(show)
                return gr.skip()
            if result is None or not result.gumiho.events:
                return gr.skip()
            return render_run(result.gumiho, None, bool(show))

        race_inputs = [ghosts, prompt, max_new, temperature, top_p, seed, depth, top_k, budget, drafter, target_id,
                       drafter_path, cost_aware, copy_box]
        replay_outputs = [v_html, g_html, v_stats, g_stats, result_html, acc_plot, hist_plot, speed_plot, status]
        (run_btn.click(start_race, inputs=race_inputs,
                       outputs=[run_id, request_state, run_btn, stop_btn, status, v_html, g_html, v_stats, g_stats,
                                result_html],
                       # Queued (with no limit: it does no model work) so that its message can be a toast too.
                       concurrency_limit=None, show_progress="hidden", api_visibility="undocumented")
         .then(race_compute, inputs=[run_id, request_state], outputs=[race_state, status, legend],
               concurrency_id=GENERATE,
               concurrency_limit=CONCURRENCY, show_progress="minimal", api_visibility="undocumented")
         .then(race_replay, inputs=[run_id, race_state], outputs=replay_outputs, concurrency_limit=None,
               show_progress="hidden", api_visibility="undocumented")
         .then(end_race, inputs=[run_id], outputs=[run_btn, stop_btn], queue=False, show_progress="hidden",
               api_visibility="undocumented"))
        stop_btn.click(stop_race, inputs=[run_id], outputs=[status], queue=False, show_progress="hidden",
                       api_visibility="undocumented")
        ghosts.change(toggle_ghosts, inputs=[ghosts, run_id, race_state], outputs=[g_html], queue=False,
                      show_progress="hidden", api_visibility="undocumented")

        # ---------------------------------------------------------------------- walkthrough events
        def stopped_play():
            """Autoplay off: walk_playing, walk_timer, play_btn. (Made per call: a component
            made here, at build time, would join the page.)"""
            return False, gr.Timer(active=False), gr.Button(value=PLAY)

        async def walk_run(prompt_v, tokens_v, tree_v, kind_v, depth_v, top_k_v, budget_v, target_v, drafter_path_v,
                           cost_aware_v=None, copy_v=None):
            nothing = (None, gr.Slider(interactive=False), gr.Button(interactive=False), gr.Button(interactive=False),
                       gr.Button(value=PLAY, interactive=False), False, gr.Timer(active=False), "", None, "", "")
            try:
                req = walk_request(prompt_v, tokens_v, tree_v, depth_v, top_k_v, budget_v, kind_v, target_v,
                                   drafter_path_v, cost_aware=cost_aware_v, access=hub.access, copy=copy_v)
                if not req.target_id:
                    await until_ready(hub)
                stop = threading.Event()  # set if the page goes away mid-walk
                walk = await on_model_thread(lambda: compute_walk(hub, req, stop), hub.submit, stop)
            except Exception as e:
                return (_fail(e),) + nothing
            if not walk.steps:
                return (render_banner("The answer ended before the first verify step (it is one token long): try "
                                      "another prompt or more tokens.", "warn"),) + nothing
            note = (f"{len(walk.steps)} verify steps for {sum(len(v.tokens) for v in walk.views)} tokens, with "
                    f"{walk.tree_label}.")
            if walk.note:
                note += " " + walk.note
            n = len(walk.steps)
            return ((render_banner(note, "warn" if walk.note else "ready"), walk,
                     gr.Slider(minimum=1, maximum=max(n, 2), value=1, step=1, interactive=n > 1),
                     gr.Button(interactive=False), gr.Button(interactive=n > 1),
                     gr.Button(value=PLAY, interactive=n > 1), False, gr.Timer(active=False))
                    + _walk_view(walk, 0))

        def walk_goto(walk: Optional[Walk], index, delta):
            if walk is None or not walk.steps:
                return (gr.skip(),) * 7
            i = _walk_index(walk, index, delta)
            n = len(walk.steps)
            return (gr.Slider(value=i + 1), gr.Button(interactive=i > 0), gr.Button(interactive=i < n - 1)) + \
                _walk_view(walk, i)

        def walk_play(walk: Optional[Walk], index, playing):
            """Play or Pause. Play at the last step starts again from the first."""
            if playing or walk is None or len(walk.steps) < 2:
                return stopped_play() + (gr.skip(),) * 7
            at_end = _walk_index(walk, index, 0) >= len(walk.steps) - 1
            return (True, gr.Timer(active=True), gr.Button(value=PAUSE)) + \
                (walk_goto(walk, 1, 0) if at_end else (gr.skip(),) * 7)

        def walk_tick(walk: Optional[Walk], index, playing):
            """One autoplay step: the next verify step, and a stop at the last."""
            if not playing or walk is None or not walk.steps:
                return stopped_play() + (gr.skip(),) * 7
            i = _walk_index(walk, index, +1)
            ended = stopped_play() if i >= len(walk.steps) - 1 else (gr.skip(),) * 3
            return ended + walk_goto(walk, i + 1, 0)

        walk_view_outputs = [walk_head, walk_plot, walk_table, walk_text]
        play_outputs = [walk_playing, walk_timer, play_btn]
        walk_btn.click(walk_run, inputs=[walk_prompt, walk_tokens, walk_tree, drafter, depth, top_k, budget, target_id,
                                         drafter_path, cost_aware, copy_box],
                       outputs=[walk_status, walk_state, walk_slider, prev_btn, next_btn, play_btn, walk_playing,
                                walk_timer] + walk_view_outputs,
                       concurrency_id=GENERATE, concurrency_limit=CONCURRENCY, api_visibility="undocumented")
        nav_outputs = [walk_slider, prev_btn, next_btn] + walk_view_outputs
        prev_btn.click(lambda w, i: walk_goto(w, i, -1), inputs=[walk_state, walk_slider], outputs=nav_outputs,
                       queue=False, show_progress="hidden", api_visibility="undocumented")
        next_btn.click(lambda w, i: walk_goto(w, i, +1), inputs=[walk_state, walk_slider], outputs=nav_outputs,
                       queue=False, show_progress="hidden", api_visibility="undocumented")
        walk_slider.release(lambda w, i: walk_goto(w, i, 0), inputs=[walk_state, walk_slider], outputs=nav_outputs,
                            queue=False, show_progress="hidden", api_visibility="undocumented")
        play_inputs = [walk_state, walk_slider, walk_playing]
        play_btn.click(walk_play, inputs=play_inputs, outputs=play_outputs + nav_outputs, queue=False,
                       show_progress="hidden", api_visibility="undocumented")
        walk_timer.tick(walk_tick, inputs=play_inputs, outputs=play_outputs + nav_outputs, queue=False,
                        show_progress="hidden", api_visibility="undocumented")

        # ---------------------------------------------------------------------- API
        async def race_api(prompt: str, max_new_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
                           seed: int = 0, tree_depth: int = DEVICE_TREE.depth, tree_top_k: int = DEVICE_TREE.top_k,
                           tree_nodes: int = DEVICE_TREE.total_tokens, drafter: str = "gumiho", target: str = "",
                           drafter_path: str = "", tree_cost_aware: bool = DEVICE_TREE.cost_aware,
                           copy_from_context: bool = COPY_DEFAULT) -> dict:
            """Run vanilla and Gumiho decoding of one prompt, timed in alternation (each on its own clock: the
            sum of its own steps), and return both texts with their statistics (tau, tokens/s, target forwards,
            wall time) and the speedup; for Gumiho also acceptance by draft position (unconditional,
            conditional, and the part copied from the context). With tree_cost_aware, tree_nodes is the
            most drafted tokens a step verifies. With copy_from_context, the copy proposer drafts beside the drafter (tokens that
            followed the same words earlier in the prompt or the answer)."""
            return await api_race(hub, prompt, max_new_tokens, temperature, top_p, seed, tree_depth, tree_top_k,
                                  tree_nodes, drafter, target, drafter_path, tree_cost_aware, copy_from_context)

        gr.api(race_api, api_name="race", concurrency_id=GENERATE, concurrency_limit=CONCURRENCY)

    demo.queue(max_size=int(os.environ.get("GUMIHO_APP_QUEUE_SIZE", "64") or 64),
               default_concurrency_limit=CONCURRENCY)
    return demo


async def api_race(hub: ModelHub, prompt, max_new_tokens, temperature, top_p, seed, tree_depth, tree_top_k, tree_nodes,
                   drafter, target, drafter_path, tree_cost_aware, copy_from_context=None) -> dict:
    """The /race endpoint's work. Async so that a client's cancel reaches it (an
    asyncio cancellation at the await), and with it the model thread: the job leaves
    its queue, or the running generation stops at its next step."""
    try:
        req = parse_request(prompt, max_new_tokens, temperature, top_p, seed, tree_depth, tree_top_k, tree_nodes,
                            drafter, target, drafter_path, cost_aware=tree_cost_aware, access=hub.access,
                            copy=copy_from_context)
        if not req.target_id:
            await until_ready(hub)
        stop = threading.Event()
        return summary(await on_model_thread(lambda: compute_race(hub, req, stop), hub.submit, stop), prompt)
    except Exception as e:
        return error_summary(_friendly(e), prompt)


def _walk_view(walk: Walk, i: int) -> tuple:
    return step_header(walk, i), step_figure(walk, i), choices_table(walk, i), text_so_far(walk, i)


def _walk_index(walk: Walk, index, delta: int) -> int:
    """The 0-based step ``delta`` away from the slider's (1-based) ``index``, kept in range."""
    try:
        i = int(index) - 1 + delta
    except (TypeError, ValueError):
        i = 0
    return max(0, min(len(walk.steps) - 1, i))


def _state_note(run, n, frame) -> str:
    if frame.final and not frame.stopped:
        return f"finished ({run.finish_reason})" if run.finish_reason else ""
    return "done" if n >= len(run.events) and run.events else ""


def render_stopped(clock: float) -> str:
    return f'<div class="gm-result stopped">Replay stopped at {clock:.1f} s.</div>'


def _final_note(result: RaceResult, frame) -> str:
    if frame.stopped:
        return "Replay stopped."
    if result.vanilla.stopped and not result.gumiho.events:
        return "Stopped while vanilla decoding was timed: its column shows what it produced; Gumiho did not run."
    if result.vanilla.stopped or result.gumiho.stopped:
        return "Stopped: both columns show what was produced until then."
    return ("Done. Both decoders were timed in alternation, each on its own clock, and replayed with those "
            "timestamps. Toggle 'Show rejected drafts' to see what the drafter guessed and the target threw away.")


__all__ = ["build_app", "load_css"]
