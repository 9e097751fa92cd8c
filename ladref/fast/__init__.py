"""The fast paths: adaptive decoding, and steps of constant shape.

* `adaptive` is the engine (`ladref.batched.loop.decode_batch`) under the batch policy, one prompt
  a batch of one (`adaptive_decode`; its rows price their steps on the surface, `ladref.pricing.surface`);
* `static` runs passes over a static KV cache at a few padded widths, each compiled once
  (`ladref.pricing.compiling`); `compiled` and `compiled_adaptive` run the engine over them, one
  prompt a call (`CompiledDecoder`, `CompiledAdaptiveDecoder`: `ladref.batched.runner_cache.RunnerCache`);
  `precompiled` keeps them as AOTInductor packages on disk, each with a `package_record` of what
  it was built for.

Nothing in the core imports this package: it is read after the method itself.
"""
