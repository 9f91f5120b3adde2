"""Each oracle of the mm-*-field-reduce-data targets, broken by hand (strategies/mm_inputs/oracles.py)."""

from __future__ import annotations

import torch

from strategies.mm_inputs import oracles as oracles
from strategies.mm_inputs.inputs import item_sources

_BATCHED = {"device": "cpu", "field": "batched", "form": "rows", "placement": "runner", "elems_on": "host",
            "dtype": "float32", "layout": "plain",
            "items": [{"shape": [2, 3], "index": 1, "seed": 5}, {"shape": [1, 3], "index": 0, "seed": 6}]}
_FLAT = {"device": "cpu", "field": "flat", "form": "tensor", "dim": 1, "placement": "get_data", "elems_on": "host",
         "dtype": "int64", "layout": "plain",
         "items": [{"shape": [2, 3], "sizes": [1, 2], "index": 1, "seed": 1},
                   {"shape": [3, 2], "sizes": [2], "index": 0, "seed": 2}]}


def _output(spec: dict, out) -> dict:
    leaves = out if isinstance(out, list) else [out]
    return {"out": out, "pinned": [False] * len(leaves) if isinstance(out, list) else False,
            "aliases_item": False, "items": item_sources(spec)}


def test_reference_stacks_batched_rows():
    sources = item_sources(_BATCHED)
    want = torch.stack([sources[0][1], sources[1][0]])
    assert torch.equal(oracles.reduce_data_expected(_BATCHED), want)
    assert torch.equal(oracles.reduce_data_observed(_output(_BATCHED, want)), want)


def test_reference_pads_ragged_flat_items_with_zeros():
    sources = item_sources(_FLAT)
    got = oracles.reduce_data_expected(_FLAT)
    # item 0 gives [2, 2] (columns 1:3), item 1 gives [3, 2]: 3 rows, 4 columns, zeros below item 0
    assert got.shape == (3, 4)
    assert torch.equal(got[:2, :2], sources[0][:, 1:3]) and torch.equal(got[2, :2], torch.zeros(2, dtype=got.dtype))
    assert torch.equal(got[:, 2:], sources[1])


def test_places_every_leaf_catches_a_leaf_left_elsewhere():
    out = oracles.reduce_data_expected(_BATCHED)
    assert oracles.reduce_data_places_every_leaf(_BATCHED, _output(_BATCHED, out)) is None
    meta = out.to("meta")  # a device other than the requested cpu
    assert "expected cpu" in oracles.reduce_data_places_every_leaf(_BATCHED, _output(_BATCHED, meta))


def test_leaves_the_items_alone_catches_a_written_item():
    output = _output(_FLAT, oracles.reduce_data_expected(_FLAT))
    assert oracles.reduce_data_leaves_the_items_alone(_FLAT, output) is None
    output["items"][1][0, 0] += 1
    assert "changed" in oracles.reduce_data_leaves_the_items_alone(_FLAT, output)


def test_pins_only_when_asked_catches_a_pinned_leaf():
    output = _output(_FLAT, oracles.reduce_data_expected(_FLAT))
    assert oracles.reduce_data_pins_only_when_asked(_FLAT, output) is None
    output["pinned"] = True  # get_data passes pin_memory=False
    assert "pinned" in oracles.reduce_data_pins_only_when_asked(_FLAT, output)
    keep = {**_BATCHED, "device": "cuda", "placement": "keep_on_cpu"}  # pin forced off for keep_on_cpu
    assert "pinned" in oracles.reduce_data_pins_only_when_asked(keep, {**output, "pinned": [True]})


def test_every_oracle_names_a_malformed_output():
    for check in (oracles.reduce_data_places_every_leaf, oracles.reduce_data_leaves_the_items_alone,
                  oracles.reduce_data_pins_only_when_asked):
        assert "without" in check(_BATCHED, [])
