"""The target's side of distillation: batched greedy answers, with the last hidden
state of every token of prompt + answer taken from the generation's own forwards
(``generate_with_hidden``) or from a second, unpadded forward over the text
(``last_hidden``, ``last_hidden_batched``)."""
from __future__ import annotations

import torch

from gumiho.runtimes.kvcache import cache_layers, new_cache
from gumiho.runtimes.pytorch import cache_keyword
from gumiho.train.data import length_groups


@torch.inference_mode()
def generate_greedy(model, prompts: list[list[int]], max_new_tokens: int, eos_id: int, pad_id: int) -> list[list[int]]:
    """Greedy answers for a batch of prompts; each answer ends at (and includes) EOS if reached."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):  # left padding keeps every prompt's end aligned
        input_ids[row, width - len(p):] = torch.tensor(p)
        attention[row, width - len(p):] = 1
    dev = next(model.parameters()).device
    out = model.generate(
        input_ids=input_ids.to(dev),
        attention_mask=attention.to(dev),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    answers = []
    for row in out[:, width:].tolist():
        if eos_id in row:
            row = row[: row.index(eos_id) + 1]
        answers.append(row)
    return answers


@torch.inference_mode()
def generate_with_hidden(model, prompts: list[list[int]], max_new_tokens: int, eos_id: int, pad_id: int,
                         drop_fraction: float = 0.1, prefill_tokens: int = 2048,
                         ) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Greedy answers, as ``generate_greedy``, together with the final-norm hidden states
    of every token of prompt + answer, taken from the generation's own forwards.

    Returns ``(answers, hiddens)``: ``hiddens[i]`` is a float32 CPU tensor
    [len(prompts[i]) + len(answers[i]), H] equal, up to float rounding, to
    ``last_hidden(model, prompts[i] + answers[i])``, so no second pass over the text is
    needed. Unlike ``model.generate``, rows that are finished leave the batch (and the
    KV cache) and cost nothing while the rest of the batch goes on; since a drop
    copies the cache, they are dropped once at least ``drop_fraction`` of the batch's
    rows are done (0: at every step). The prompts are prefilled in groups of similar
    length of at most ``prefill_tokens`` padded tokens, not as one batch padded to the
    longest prompt: for 64 prompts of 35 to 205 tokens that batch holds 3x as many
    tokens as the prompts, and on a 2-core CPU its prefill took about 35 s against 19 s
    in groups. The cache appends in place (``gumiho.runtimes.kvcache.new_cache``) instead of
    copying itself at every step, which took over a third of a decode step there."""
    dev = next(model.parameters()).device
    body = model.model
    head = model.get_output_embeddings()
    # transformers 5.x calls the cache argument ``cache`` (``past_key_values`` is deprecated).
    cache_kw = cache_keyword(type(body))
    n = len(prompts)
    lengths = [len(p) for p in prompts]
    width = max(lengths)
    answers: list[list[int]] = [[] for _ in prompts]
    parts: list[list[torch.Tensor]] = [[] for _ in prompts]
    first = [0] * n

    # Decoding runs all rows as one batch, left-padded to the longest prompt: each
    # row's newest token is then in the last column, and one step feeds them all.
    # Padding is masked out as a key, and each row's position ids count from its own
    # first real token, so every real token sees exactly the keys and rotary
    # positions of an unpadded run of its own sequence: its hidden state (and next
    # token) equals the unpadded forward's up to float rounding. The same holds in
    # each prefill group, whose keys/values are then moved to the row's place in
    # the batch's cache (the columns left of a row's prompt stay zero and masked).
    attention = torch.zeros((n, width), dtype=torch.long)
    layers_k: list[torch.Tensor] = []
    layers_v: list[torch.Tensor] = []
    for group in length_groups(lengths, prefill_tokens):
        w = lengths[group[-1]]
        ids = torch.full((len(group), w), pad_id, dtype=torch.long)
        mask = torch.zeros((len(group), w), dtype=torch.long)
        for j, r in enumerate(group):
            ids[j, w - lengths[r]:] = torch.tensor(prompts[r])
            mask[j, w - lengths[r]:] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        group_cache = new_cache()
        hidden = body(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=positions.to(dev),
                      use_cache=True, **{cache_kw: group_cache}).last_hidden_state
        if max_new_tokens > 0:
            for r, token in zip(group, head(hidden[:, -1]).argmax(-1).tolist()):
                first[r] = token
        hidden = hidden.float().cpu()
        for l, layer in enumerate(cache_layers(group_cache)):
            if l == len(layers_k):
                layers_k.append(layer.keys.new_zeros((n, *layer.keys.shape[1:-2], width, layer.keys.shape[-1])))
                layers_v.append(layer.values.new_zeros((n, *layer.values.shape[1:-2], width,
                                                        layer.values.shape[-1])))
            for j, r in enumerate(group):
                layers_k[l][r, ..., width - lengths[r]:, :] = layer.keys[j, ..., w - lengths[r]:, :]
                layers_v[l][r, ..., width - lengths[r]:, :] = layer.values[j, ..., w - lengths[r]:, :]
        for j, r in enumerate(group):
            parts[r].append(hidden[j, w - lengths[r]:])
            attention[r, width - lengths[r]:] = 1
        del group_cache, hidden
    if max_new_tokens <= 0:
        return answers, [torch.cat(x) for x in parts]
    cache = new_cache()  # appends in place, instead of copying the whole cache at every step
    for l, (k, v) in enumerate(zip(layers_k, layers_v)):
        cache.update(k, v, l)
    del layers_k, layers_v
    attention = attention.to(dev)
    for r in range(n):
        answers[r].append(first[r])

    def finished(r: int) -> bool:
        return answers[r][-1] == eos_id or len(answers[r]) >= max_new_tokens

    # ``rows[b]``: the prompt in batch row b. A row stays while the hidden state of its
    # answer's last token is missing. That token (EOS, or the max_new_tokens-th) comes
    # out of the forward of the token before it; its own hidden state, which the
    # drafter is trained to regress, takes one more forward with that token as input.
    # So a finished row goes through one more step (its next-token prediction is
    # ignored), and only then is it complete.
    rows = list(range(n))
    complete = [False] * n
    fed = torch.tensor(lengths)  # tokens of each row in the cache: the next position id
    while True:
        step_ids = torch.tensor([[answers[r][-1]] for r in rows], dtype=torch.long)
        attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=1)
        hidden = body(input_ids=step_ids.to(dev), attention_mask=attention, position_ids=fed[rows, None].to(dev),
                      use_cache=True, **{cache_kw: cache}).last_hidden_state[:, 0]
        fed[rows] += 1
        hidden_cpu = hidden.float().cpu()
        going = []
        for b, r in enumerate(rows):
            if complete[r]:  # complete and only waiting to be dropped: its output is ignored
                continue
            parts[r].append(hidden_cpu[b:b + 1])
            if finished(r):  # this forward's input was the answer's last token
                complete[r] = True
            else:
                going.append(b)
        if not going:
            break
        for b, token in zip(going, head(hidden[going]).argmax(-1).tolist()):
            answers[rows[b]].append(token)
        # A complete row left in the batch costs its share of every step; dropping rows
        # copies the cache (twice: the selection, then new append buffers). Drop in
        # bulk once enough rows are complete. On a 2-core CPU (SmolLM2-135M, 64 prompts,
        # 192 new tokens) a drop cost about half a step, the batch ran 4% more row-steps
        # than needed with drop_fraction 0.1 and 13% with 0.25, 3% slower overall.
        done = len(rows) - len(going)
        if done and done >= drop_fraction * len(rows):
            cache.batch_select_indices(torch.tensor(going, device=dev))
            attention = attention[going]
            rows = [rows[b] for b in going]
    return answers, [torch.cat(x) for x in parts]


@torch.inference_mode()
def last_hidden(model, ids: list[int]) -> torch.Tensor:
    """Final-norm hidden states [T, H] of one unpadded sequence (the lm_head input)."""
    x = torch.tensor([ids], dtype=torch.long, device=next(model.parameters()).device)
    return model.model(input_ids=x).last_hidden_state[0].float().cpu()


@torch.inference_mode()
def last_hidden_batched(model, seqs: list[list[int]], max_tokens: int) -> list[torch.Tensor]:
    """``last_hidden`` of every sequence, several per forward.

    Sequences are sorted by length and packed, right-padded, into batches of at
    most ``max_tokens`` padded tokens. Right padding changes nothing for the real
    tokens: under the causal mask a token never attends to anything after it, and
    its position ids stay 0..n-1. The results equal the one-at-a-time forward up
    to float rounding (other matrix shapes); on a GPU, where one short sequence
    leaves the chip idle, this is many times faster."""
    dev = next(model.parameters()).device
    out: list[torch.Tensor | None] = [None] * len(seqs)
    for rows in length_groups([len(x) for x in seqs], max_tokens):
        width = len(seqs[rows[-1]])
        x = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            x[r, :len(seqs[i])] = torch.tensor(seqs[i])
            mask[r, :len(seqs[i])] = 1
        hidden = model.model(input_ids=x.to(dev), attention_mask=mask.to(dev)).last_hidden_state.float().cpu()
        for r, i in enumerate(rows):
            out[i] = hidden[r, :len(seqs[i])].clone()
    return out
