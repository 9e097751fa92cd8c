"""The decoders a user calls: one prompt runs the reference step, a batch the batched engine.

* `greedy`: `greedy_decode`, the oracle every other decoder's output is checked against;
* `draft`: `draft_decode`, the shared drafting loop with your proposers (``decode_with_proposers``
  underneath every draft decoder);
* `methods`: `jacobi_decode`, `lookahead_decode`, `prompt_lookup_decode`, `recycling_decode` and
  `suffix_decode`, that loop with one of ladref's own sources (`ladref.sources`);
* `sample`: `sample_decode`, ordinary sampling, the distribution lookahead sampling keeps;
* `generate`: `lookahead_generator`, the ``generate(custom_generate=...)`` adapter.

This package sits above the reference pieces (`ladref.step`, `ladref.sources`) and the batched
engine (`ladref.batched`), and nothing below imports it.
"""
