"""Planted bugs and benign refactors for the gdn-cudagraph-capture-metadata target (optimized/gdn_attn.py)."""

from fuzz.api import Plant

_OPT = "optimized.gdn_attn"

BUGS = [
    Plant("planted-gdn-capture-draft-counts-not-minus-one", "gdn-cudagraph-capture-metadata", _OPT,
          "torch.diff(m.query_start_loc_cpu).sub_(1)", "torch.diff(m.query_start_loc_cpu)",
          "the host mirror's query lengths taken as draft counts: padded (zero-length) requests count as "
          "spec decodes and a one-token batch looks speculative"),
    Plant("planted-gdn-capture-accepted-padding-zero", "gdn-cudagraph-capture-metadata", _OPT,
          "num_accepted_tokens[num_spec_decodes:].fill_(1)", "num_accepted_tokens[num_spec_decodes:].fill_(0)",
          "padded requests captured with 0 accepted tokens instead of 1 (the GDN kernel indexes state by it)"),
]

BENIGN = [
    Plant("benign-gdn-capture-out-of-place-sub", "gdn-cudagraph-capture-metadata", _OPT,
          "torch.diff(m.query_start_loc_cpu).sub_(1)", "torch.diff(m.query_start_loc_cpu) - 1",
          "in-place or not, the fresh diff minus one is the same host tensor"),
]
