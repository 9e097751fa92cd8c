"""What a step costs and which drafts pay: the settings every decoder that chooses its steps shares.

* `timing` times real decoding steps; `cost` keeps the step-cost curve t(q, kv) they give, and
  `cost_cache` the curves measured on a machine, once; `surface` the surface t(q, kv, B), one
  curve per batch size;
* `policy` holds the settings of the policy that chooses each step's drafts and window
  (`PolicySettings`; the policy is the engine's, `ladref.batched.policy.BatchPolicy`);
* `compiling` holds the compile modes and scoped Inductor settings a compiled step uses.

A leaf: it imports the core modules only, and the batched engine (`ladref.batched`), the fast
paths (`ladref.fast`) and the benchmarks import it.
"""
