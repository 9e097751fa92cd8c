"""A/B in one process: the linear layers of a pass of 2-5 rows computed as W @ x^T inside
`ladref.kernels.linear_scope` (new) against ``F.linear`` as the model calls it (old).

A measurement script: the old way is chosen by wrapping `ModelFacts.of` for its turns so that its
facts say ``small_linears=False`` (every runner and decoder reads its model's facts there); the
library itself has no switch. The turns are `head_ab.py`'s: step widths timed through
`ModelRunner`; greedy, prompt lookup and adaptive over 12 Spec-Bench prompts (2 per task, 32 new
tokens), each variant with its own cost curve (a `CostCache` keys curves by the runner, whose
details name the linears); batched greedy over the first 2, 4 and 8 of them. Its log:
linears_ab.log (the totals at its end summed from its lines).
"""
import dataclasses

import ladref.runner as runner_module
from head_ab import decoders_ab, widths_ab

FACTS_OF = runner_module.ModelFacts.of.__func__


def use(variant: str) -> None:
    def of(cls, model):
        facts = FACTS_OF(cls, model)
        return facts if variant == "new" else dataclasses.replace(facts, small_linears=False)

    runner_module.ModelFacts.of = classmethod(of)


if __name__ == "__main__":
    widths_ab(use, widths=(1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16))
    decoders_ab(use, batches=(2, 4, 8))
