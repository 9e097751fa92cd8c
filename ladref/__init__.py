"""ladref: a pure-PyTorch reference for Jacobi decoding and Lookahead Decoding.

    >>> from ladref import LookaheadConfig, lookahead_decode
    >>> result = lookahead_decode(model, input_ids, 128, config=LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4))
    >>> result.token_ids, result.stats.compression

Every decoder has one call shape: ``decode(model, input_ids, max_new_tokens, *, ...)``, its own
options and then the keywords every decoder shares (`ladref.options`).

Two tiers. **The reference** is one prompt, eager: the step every draft decoder repeats and its
pieces, one proposer per draft source; the tutorials, the course and the identity tests read it,
and `greedy_decode`, `lookahead_decode`, `draft_decode`, ... run it for one prompt. **The engine**
(`ladref.batched`) runs everything else as one tensor program a step: every batch, eager or
captured, `adaptive_decode` at every B (one prompt a batch of one), and the compiled decoders (the
engine over a static cache whose forward pass is compiled). Each source is written once per tier;
its tensor twin names its reference and registers itself (`ladref.batched.forms`).

Seven rooms, each importing only those before it: the core at the top (the reference step and
its pieces), the draft sources in `ladref.sources`, what steps cost and which drafts pay in
`ladref.pricing`, the batched engine in `ladref.batched`, the decoders you call in
`ladref.decoders` (one prompt runs the reference, a batch the engine), adaptive and compiled
decoding in `ladref.fast`, and what you run in `ladref.bench`. In reading order (the tutorials' and the docs'):

0. `ladref.minimal`: the whole method in one file (greedy lookahead decoding, its pieces and its
   loop), to read before the rest;
1. `ladref.config` (W, N, G), `ladref.results` (what a call returns);
2. `ladref.decoders.greedy` (the oracle) and `ladref.sources.jacobi` (the fixed-point iteration);
3. the building blocks: `ladref.tree` (the draft trie), `ladref.sources.ngram_pool`,
   `ladref.masks`, `ladref.verify`;
4. `ladref.proposer` (where drafts come from: the protocol, `DraftSource`, `StepOutcome`),
   `ladref.step` (the combined step and the one loop every tree decoder repeats) and
   `ladref.decoders.draft` (`draft_decode`, that loop with any proposers);
5. the draft sources: `ladref.sources.lookahead` (the paper's window and pool),
   `ladref.sources.prompt_lookup`, `ladref.sources.recycling` (Token Recycling),
   `ladref.sources.suffix` (suffix decoding, over the counted trie of `ladref.sources.suffix_trie`)
   and Jacobi's chain in `ladref.sources.jacobi`; their decoders in `ladref.decoders.methods`;
6. `ladref.accept` (the accept rules of speculative sampling: one draft, several drafts),
   `ladref.sampling` (the choosers: `SamplingChooser` verifies with `ladref.accept`'s rule),
   `ladref.decoders.sample` and `ladref.decoders.generate` (sampling; inside ``model.generate``);
7. the batch: `ladref.batched` (every row of a batch stepped by one tensor program: `drafts`,
   `layout`, `verify`, `cache`, `state`, `step`, `loop`; logits processors in `process`; the
   sources' batch forms in `ladref.batched.sources`; adaptive decoding in `policy`, `acceptance`,
   `prices` and `gate`; the
   whole step captured as one compiled program over a static cache in `static` and `captured`; the
   engine over a one-prompt runner's cache in `runner_cache`);
8. pricing and the fast paths: `ladref.pricing.timing`, `ladref.pricing.cost` (the step-cost curve),
   `ladref.pricing.cost_cache` (curves measured once per machine) and `ladref.pricing.surface` (the
   step cost of a batch, t(q, kv, B)),
   `ladref.pricing.policy` and `ladref.fast.adaptive` (drafting only what the machine affords),
   `ladref.fast.static`, `ladref.pricing.compiling`, `ladref.fast.compiled`, `ladref.fast.compiled_adaptive`,
   `ladref.fast.precompiled` and `ladref.fast.package_record` (the engine over constant-shape
   passes of a static cache, compiled once or loaded from a package);
9. plumbing: `ladref.facts` (the model's facts and checks), `ladref.runner` (the runners: prefill,
   forward, commit), `ladref.head` (a pass's logits, the CPU output head), `ladref.hf_internals` (the
   only module touching transformers internals), `ladref.call` (input checks, stopping rules),
   `ladref.rows` (one prompt or a batch: the split every decoder makes), `ladref.options` (the
   keywords every decoder shares), `ladref.kernels` (the attention-kernel choice), `ladref.types`,
   `ladref.models` (the embedded model), `ladref.compat` (clear errors for earlier call shapes).

What you run rather than read (benchmarks, auto-tuning, FLOPs, datasets, the demo, the prompt
lookup baseline) lives in `ladref.bench`; the library never imports it.

Importing `ladref` imports none of them: each public name's module is imported when the name is
first used (PEP 562), so a building block (``import ladref.tree``) costs torch's import, not
transformers' as well (1.5-1.7 s against 4.7-5.8 s on a 2-core machine: benchmarks/archive/import_time/).
"""

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the public names (`x as x`: exported to type checkers), each imported on first use (below)
    from .batched.captured import CapturedBatchDecoder as CapturedBatchDecoder
    from .config import LookaheadConfig as LookaheadConfig
    from .decoders.draft import draft_decode as draft_decode
    from .decoders.generate import lookahead_generator as lookahead_generator
    from .decoders.greedy import greedy_decode as greedy_decode
    from .decoders.methods import (
        jacobi_decode as jacobi_decode,
        lookahead_decode as lookahead_decode,
        prompt_lookup_decode as prompt_lookup_decode,
        recycling_decode as recycling_decode,
        suffix_decode as suffix_decode,
    )
    from .decoders.sample import sample_decode as sample_decode
    from .fast.adaptive import AdaptiveDecoder as AdaptiveDecoder, adaptive_decode as adaptive_decode
    from .fast.compiled import CompiledDecoder as CompiledDecoder
    from .fast.compiled_adaptive import CompiledAdaptiveDecoder as CompiledAdaptiveDecoder
    from .models import chat_ids as chat_ids, default_device as default_device, load_default_model as load_default_model
    from .options import DecodeOptions as DecodeOptions
    from .pricing.cost import CostModel as CostModel
    from .pricing.cost_cache import CostCache as CostCache
    from .pricing.surface import CostSurface as CostSurface
    from .proposer import DraftSource as DraftSource, Proposer as Proposer, StepOutcome as StepOutcome
    from .results import BatchResult as BatchResult, DecodeResult as DecodeResult, DecodeStats as DecodeStats
    from .sources.jacobi import JacobiProposer as JacobiProposer
    from .sources.lookahead import LookaheadProposer as LookaheadProposer, LookaheadWindow as LookaheadWindow
    from .sources.prompt_lookup import PromptLookupProposer as PromptLookupProposer
    from .sources.recycling import RecyclingProposer as RecyclingProposer, TreeTemplate as TreeTemplate
    from .sources.suffix import SuffixProposer as SuffixProposer
    from .sources.suffix_trie import SuffixMemory as SuffixMemory
    from .tree import DraftTree as DraftTree
    from .types import EosIds as EosIds, Streamer as Streamer, TokenIds as TokenIds, Tokenizer as Tokenizer


def _public_names() -> dict[str, str]:
    """{name: the module defining it}, read from the ``if TYPE_CHECKING:`` imports above, so that
    they are written once: what type checkers and the docs read is what ``__getattr__`` imports."""
    tree = ast.parse(Path(__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING")
    return {alias.name: f".{node.module}" for node in block.body for alias in node.names}


_PUBLIC = _public_names()
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> object:
    """A public name, its module imported on first use (PEP 562)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'ladref' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)
    globals()[name] = value  # the next use is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.2.0"
