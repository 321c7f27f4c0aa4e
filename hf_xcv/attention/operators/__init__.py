"""Attention operators that are no registry entry: they take other inputs than (batch, heads, length, head_dim)
queries, keys and values, so no model can swap them for an X-former (:mod:`hf_xcv.attention.registry`'s entries).

* :mod:`.deformable`: multi-scale deformable attention (Deformable DETR): a few sampled points per query around a
  reference on every level of a feature pyramid;
* :mod:`.texture`: TTSR's texture transfer: patch relevances between two images, the hard attention's gather of the
  best-matching reference patch and its soft-attention weight.
"""
