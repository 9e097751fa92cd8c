"""The fast paths: drafting only what a machine affords, and steps of constant shape.

* `timing` times real decoding steps; `cost` keeps the step-cost curve t(q, kv) they give, and
  `cost_cache` the curves measured on a machine, once; `surface` the surface t(q, kv, B), one
  curve per batch size;
* `policy` chooses each step's drafts and window from learned acceptance (`acceptance`) and that cost;
  `adaptive` is the drafting loop with that choice (`adaptive_decode`; a batch's rows price
  their steps on the surface);
* `static` runs steps over a static KV cache at a few padded widths, `compiling` compiles each one
  (modes, scoped Inductor settings, a graph per runner); `compiled` puts them together
  (`CompiledDecoder`, `CompiledAdaptiveDecoder`); `precompiled` keeps them as AOTInductor
  packages on disk, each with a `package_record` of what it was built for.

Nothing in the core imports this package: it is read after the method itself.
"""
