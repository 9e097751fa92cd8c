"""Batch-native decoding: every row of a batch stepped by one tensor program.

The one-prompt step (`ladref.step`) is the reference the tutorials teach; this package runs the
same step for B rows at once (`ladref.batched.step`), with the drafts, the layout, the
verification and the commit as tensor operations over (B, ...) on the model's device, and one
small read to the host a step (`ladref.batched.loop`).
"""
