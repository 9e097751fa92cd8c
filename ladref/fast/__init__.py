"""The fast paths: adaptive decoding, and steps of constant shape.

* `adaptive` is the drafting loop whose steps a `ladref.pricing.policy.DraftPolicy` chooses
  (`adaptive_decode`; a batch's rows price their steps on the surface, `ladref.pricing.surface`);
* `static` runs steps over a static KV cache at a few padded widths, each compiled once
  (`ladref.pricing.compiling`); `compiled` puts them together (`CompiledDecoder`,
  `CompiledAdaptiveDecoder`); `precompiled` keeps them as AOTInductor packages on disk, each with
  a `package_record` of what it was built for.

Nothing in the core imports this package: it is read after the method itself.
"""
