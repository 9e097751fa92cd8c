"""Where drafts come from: each module here is one draft source, a `ladref.Proposer`.

* `lookahead`: the paper's 2-D window of Jacobi iterations (W x N-1) and its n-gram harvest;
  `ngram_pool`, the pool the harvest goes into, keyed by first token (G candidates per step);
* `jacobi`: Jacobi decoding's own chain of m guesses, the method lookahead starts from;
* `prompt_lookup`: continuations copied from earlier in the text;
* `recycling`: Token Recycling, a static tree filled from the model's own past top-k predictions;
* `suffix`: suffix decoding, drafts best first by how often each continuation followed the text's
  end, in the request and in a memory of earlier requests; `suffix_trie`, the counted suffix
  trie it searches and the memory (`SuffixMemory`).

Their decoders (``lookahead_decode``, ...) are the shared loop with each proposer, in
`ladref.decoders.methods`; the batch forms of the sources are in `ladref.batched.sources`.
"""
