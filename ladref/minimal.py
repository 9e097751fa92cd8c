"""Lookahead decoding in one file: greedy, exact, and short enough to read before the library.

Lookahead decoding (Fu et al., ICML 2024) emits exactly greedy decoding's tokens, several per
forward pass when it can. Its three knobs, in the paper's symbols:

    W  the window size: how many future positions the lookahead branch guesses at every step;
    N  the n-gram size: the window keeps the last N-1 Jacobi iterations (N-1 rows of W tokens), the
       pool stores n-grams of N tokens, and one step accepts 1 to N tokens;
    G  the most candidates verified per step (also the n-grams the pool keeps per first token).

One step is ONE forward pass over ``[pending prefix | window | candidates]``, the window's first
cell being the current token (the pending prefix: the tokens the last step accepted before the
current one, not yet in the KV cache; step one: the prompt but its last token):

    1. look up the pool's (N-1)-token continuations of the current token, up to G of them;
    2. lay out both branches, their positions and a mask that keeps them apart; run the model once;
    3. lookahead branch: the argmax after the window's newest row is a new row; from the (N-1)-th step on
       (0-based index >= N-2, once every window row below the first is the model's), each column of
       [window; new row] is an n-gram the model made, added to the pool; the window slides one row;
    4. verification branch: accept the longest candidate prefix greedy agrees with, plus one token.

KV cache: a `DynamicCache` holds every committed token but the "pending" ones, those the last step
accepted (the newest is the current token). A step feeds them first as a causal prefix (step one:
the whole prompt), then its own tokens, and crops the cache back to the committed tokens after.
Accepted candidates are not a suffix of the step, so rather than moving their keys and values into
place (`ladref.runner.ModelRunner.commit`) the next step computes them again: at most N-1 tokens more.

The library splits the method into parts (`ladref.sources.ngram_pool`, `ladref.masks`, `ladref.verify`,
`ladref.step`, `ladref.sources.lookahead`) and adds draft tries, sampling, batches and fast paths. With
the same rules, this decoder takes the steps of ``lookahead_decode(..., config=LookaheadConfig(W, N, G))``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from transformers import DynamicCache

Pool = dict[int, list[tuple[int, ...]]]  # first token -> its (N-1)-token continuations, most recently added first


def check_inputs(model: torch.nn.Module, input_ids: object, max_new_tokens: int, W: int, N: int, G: int,
                 eos_token_id: int | None = None) -> list[int]:
    """Check the arguments of `lookahead_decode_minimal`; returns the prompt as a list of L ints.

    Raises:
        TypeError: not a model with a config; a knob or eos_token_id not an int; ids not integers.
        ValueError: W < 1, N < 2, G < 0, max_new_tokens < 1; not one non-empty (L,) or (1, L) prompt, or ids
            outside the vocabulary; attention that ignores custom masks; prompt + max_new_tokens + W + N > context.
    """
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model must be a transformers causal LM, got {type(model).__name__}")
    for name, value, low in (("max_new_tokens", max_new_tokens, 1), ("W", W, 1), ("N", N, 2), ("G", G, 0)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    if eos_token_id is not None and (isinstance(eos_token_id, bool) or not isinstance(eos_token_id, int)):
        raise TypeError(f"eos_token_id must be an int or None, got {type(eos_token_id).__name__}")
    ids = torch.as_tensor(input_ids)
    ids = ids[0] if ids.dim() == 2 and ids.shape[0] == 1 else ids
    vocab = model.get_input_embeddings().num_embeddings
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError(f"input_ids must be one non-empty prompt, (L,) or (1, L); got shape {tuple(ids.shape)}")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"input_ids must be integer token ids, got {ids.dtype}")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise ValueError(f"input_ids must lie in [0, {vocab}), the model's vocabulary")
    if getattr(model.config, "_attn_implementation", None) not in ("eager", "sdpa"):
        raise ValueError("the model must use eager or sdpa attention (others ignore a custom 4-D mask)")
    context = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    if context is not None and len(ids) + max_new_tokens + W + N > context:
        raise ValueError(f"prompt ({len(ids)}) + max_new_tokens ({max_new_tokens}) + W + N ({W + N}) exceeds "
                         f"the model's context of {context} positions")
    return ids.tolist()


def pool_add(pool: Pool, ngram: Sequence[int], capacity: int) -> None:
    """Add one n-gram of N tokens: its continuation ``ngram[1:]`` goes first under its first token
    (moved there if already present), and at most `capacity` continuations are kept."""
    key, rest = int(ngram[0]), tuple(int(t) for t in ngram[1:])
    pool[key] = [rest, *(old for old in pool.get(key, []) if old != rest)][:capacity]


def seed_pool(pool: Pool, tokens: Sequence[int], N: int, capacity: int) -> None:
    """Add every n-gram of `tokens` (the prompt), first to last."""
    for i in range(len(tokens) - N + 1):
        pool_add(pool, tokens[i : i + N], capacity)


def harvest(pool: Pool, window: torch.Tensor, new_row: torch.Tensor, capacity: int) -> None:
    """Add the W n-grams read down the columns of [window; new_row] (window (N-1, W), new_row (W,)): row r
    sits one position right of row r-1, so column c holds, at positions p+c .. p+c+N-1, an n-gram. It is
    the model's only once every window row below the first is a row the model made, so the decoder calls
    this from its (N-1)-th step on (0-based index >= N-2); before that the rows are the prompt's filler."""
    for column in torch.cat([window, new_row[None]]).t().tolist():
        pool_add(pool, column, capacity)


def init_window(prompt: Sequence[int], W: int, N: int) -> torch.Tensor:
    """The first window, (N-1, W) long: the prompt's last (N-1)*W tokens row by row, the prompt
    repeated when it is shorter. Any guess is correct (verification decides what is emitted)."""
    cells = (N - 1) * W
    return torch.tensor((list(prompt)[-cells:] * cells)[:cells], dtype=torch.long).view(N - 1, W)


def step_mask(prefix: int, W: int, N: int, g: int) -> torch.Tensor:
    """Who may see whom among one step's T = prefix + (N-1)*W + g*(N-1) tokens (besides the cache).

    Layout: the `prefix` pending tokens before the current one | the window row by row, cell (0, 0)
    being the current token | g candidates of N-1 tokens each.
      * the prefix is causal, and every later token sees all of it;
      * window cell (r, c) sees row 0 up to column c, and the cells (1..r, c) above it: together
        the Jacobi trajectory that led to it;
      * candidate token (k, j) sees the current token and its own candidate's tokens 0..j (nothing else).

    Returns:
        (T, T) bool, [i, j] True when token i may attend to token j.
    """
    L, n = (N - 1) * W, N - 1
    allowed = torch.zeros(prefix + L + g * n, prefix + L + g * n, dtype=torch.bool)
    allowed[:, :prefix] = True
    allowed[:prefix, :prefix] = torch.ones(prefix, prefix, dtype=torch.bool).tril()
    r, c = torch.arange(N - 1).repeat_interleave(W), torch.arange(W).repeat(N - 1)  # (L,) row and column of each cell
    row0 = (r[None, :] == 0) & (c[None, :] <= c[:, None])
    own_column = (r[None, :] >= 1) & (c[None, :] == c[:, None]) & (r[None, :] <= r[:, None])
    allowed[prefix : prefix + L, prefix : prefix + L] = row0 | own_column
    k, j = torch.arange(g * n) // n, torch.arange(g * n) % n  # (g*n,) candidate and index of each candidate token
    allowed[prefix + L :, prefix] = True  # candidates continue the current token
    allowed[prefix + L :, prefix + L :] = (k[None, :] == k[:, None]) & (j[None, :] <= j[:, None])
    return allowed


def build_step(pending: Sequence[int], window: torch.Tensor, candidates: Sequence[Sequence[int]], past: int,
               dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model inputs of one step over a cache of `past` tokens.

    Args:
        pending: the committed tokens not yet cached; the last is the current token.
        window: (N-1, W) long, cell (0, 0) already set to the current token.
        candidates: g candidates of N-1 tokens each.
        past: tokens in the KV cache; the current token sits at position p = past + len(pending) - 1.
        dtype: the model's floating dtype.

    Returns:
        input_ids (1, T); position_ids (1, T): the prefix at past.., window cell (r, c) at p + r + c,
        candidate token j at p + 1 + j; and the attention mask (1, 1, T, past + T), additive float:
        0 where `step_mask` allows, the dtype's minimum elsewhere (transformers misreads a bool 4-D mask).
    """
    (rows, W), prefix, g = window.shape, len(pending) - 1, len(candidates)
    flat_candidates = torch.tensor([t for cand in candidates for t in cand], dtype=torch.long)
    input_ids = torch.cat([torch.tensor(pending[:-1], dtype=torch.long), window.flatten(), flat_candidates])
    p = past + prefix
    cells = torch.arange(rows).repeat_interleave(W) + torch.arange(W).repeat(rows)  # r + c of each cell
    positions = torch.cat([torch.arange(past, p), p + cells, p + 1 + torch.arange(rows).repeat(g)])
    allowed = step_mask(prefix, W, rows + 1, g)
    mask = torch.zeros(len(input_ids), past + len(input_ids), dtype=dtype)
    mask[:, past:].masked_fill_(~allowed, torch.finfo(dtype).min)
    return input_ids[None], positions[None], mask[None, None]


def forward(model: torch.nn.Module, cache: DynamicCache, input_ids: torch.Tensor, position_ids: torch.Tensor,
            mask: torch.Tensor, keep: int) -> torch.Tensor:
    """Run the model over one step, appending its keys and values to `cache` (the argument ``cache`` from
    transformers 5.24 on, ``past_key_values`` before); returns the (keep, V) logits of the last `keep` tokens."""
    params, device = inspect.signature(model.forward).parameters, next(model.parameters()).device
    kwargs = {("cache" if "cache" in params else "past_key_values"): cache}
    if "logits_to_keep" in params:
        kwargs["logits_to_keep"] = keep
    out = model(input_ids=input_ids.to(device), position_ids=position_ids.to(device), attention_mask=mask.to(device),
                use_cache=True, **kwargs)
    return out.logits[0, -keep:]


def verify(candidates: Sequence[Sequence[int]], root_pred: int, candidate_preds: torch.Tensor) -> list[int]:
    """The tokens greedy decoding emits next, as many as the candidates let this step accept.

    Args:
        candidates: g candidates of N-1 tokens each, continuing the current token.
        root_pred: y_1, the model's argmax after the current token.
        candidate_preds: (g, N-1) the model's argmax after each candidate token.

    Returns:
        1 to N tokens: the longest candidate prefix c_1..c_k with c_1 = y_1 and each later c_j the
        argmax after c_(j-1), then the argmax after c_k (y_1 when k = 0); the first longest wins.
    """
    best = [root_pred]
    for candidate, preds in zip(candidates, candidate_preds.tolist()):
        targets = [root_pred, *preds]  # targets[j]: greedy's token at index j if the candidate is right before it
        k = 0
        while k < len(candidate) and candidate[k] == targets[k]:
            k += 1
        if k + 1 > len(best):
            best = [*candidate[:k], targets[k]]
    return best


@torch.no_grad()
def lookahead_decode_minimal(model: torch.nn.Module, input_ids: object, max_new_tokens: int, W: int = 4, N: int = 4,
                             G: int = 4, eos_token_id: int | None = None) -> list[int]:
    """Greedy lookahead decoding: exactly greedy decoding's next tokens, in fewer forward passes.

    The loop: check the arguments (`check_inputs`); start the window (`init_window`), a pool seeded
    with the prompt's n-grams (`seed_pool`, capacity G), an empty ``DynamicCache(config=model.config)``,
    and the pending tokens (committed, not yet cached; the last is the current token): the prompt.
    Then, one forward pass per step, steps 1-6 below (the comments in the body): candidates,
    `build_step` and `forward`, crop the cache, `harvest` from the (N-1)-th step on (0-based index
    >= N-2, when every window row below the first is the model's) and slide the window, `verify`,
    and append the accepted tokens, which become the pending ones. Return as soon as the output
    holds max_new_tokens tokens or ends with eos_token_id (the step's later tokens dropped).

    Args:
        model: a transformers decoder-only causal LM with full attention (eager or sdpa).
        input_ids: the prompt: (L,) or (1, L) token ids, or a list of ints.
        max_new_tokens: the most tokens to generate (>= 1).
        W: the window size (>= 1).
        N: the n-gram size (>= 2).
        G: the most candidates verified per step (>= 0; 0 verifies nothing: one token per step).
        eos_token_id: stop after this token; None: always generate max_new_tokens tokens.

    Returns:
        The new tokens (prompt excluded), those greedy decoding would emit.
    """
    prompt = check_inputs(model, input_ids, max_new_tokens, W, N, G, eos_token_id)
    window, pool, cache, dtype = init_window(prompt, W, N), {}, DynamicCache(config=model.config), model.dtype
    seed_pool(pool, prompt, N, G)
    pending, out, step, L = prompt, [], 0, (N - 1) * W  # L: the window's cells
    while True:
        # 1. Candidates: up to G (N-1)-grams the pool keeps for the current token.
        candidates = pool.get(pending[-1], [])[:G]
        # 2. Window cell (0, 0) := the current token; one pass over [pending prefix | window | candidates],
        #    the argmax after each window and candidate token.
        window[0, 0] = pending[-1]
        past = cache.get_seq_length()
        input_ids, position_ids, mask = build_step(pending, window, candidates, past, dtype)
        preds = forward(model, cache, input_ids, position_ids, mask, L + len(candidates) * (N - 1)).argmax(-1).cpu()
        # 3. Crop the cache to the committed tokens: its old length plus the pending ones.
        extra = cache.get_seq_length() - past - len(pending)
        if extra:  # crop(-k) drops the last k entries (in older transformers, crop(0) empties the cache)
            cache.crop(-extra)
        # 4. Lookahead branch: the new row (argmax after row N-2); its n-grams into the pool from step N-2 on; slide.
        new_row = preds[L - W : L]
        if step >= N - 2:
            harvest(pool, window, new_row, G)
        window = torch.cat([window, new_row[None]])[1:].clone()
        # 5. Verification branch: the longest candidate prefix greedy agrees with, plus one token.
        accepted = verify(candidates, int(preds[0]), preds[L:].view(len(candidates), N - 1))
        # 6. Commit: append the accepted tokens (stop at max_new_tokens or eos_token_id); they become the pending ones.
        for token in accepted:
            out.append(token)
            if len(out) == max_new_tokens or token == eos_token_id:
                return out
        pending, step = accepted, step + 1
