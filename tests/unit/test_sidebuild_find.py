"""The side builder finds a definition's implementation, not a ``typing.overload`` stub before it."""

from __future__ import annotations

from fuzz.releases.matching import UpstreamFile
from fuzz.releases.sidebuild import _find

JSONTREE = '''\
from typing import overload


@overload
def json_map_leaves(f, value: int) -> int: ...


@overload
def json_map_leaves(f, value: list) -> list: ...


def json_map_leaves(f, value):
    """The implementation."""
    return f(value)
'''


def test_an_overloaded_function_is_found_at_its_implementation():
    # vllm/utils/jsontree.py's json_map_leaves: taking the first stub made every mm_inputs side from a release
    # "change" lines the copy adapts (cannot-build), lab/selftest/2026-12-06-issue43.md.
    upstream = UpstreamFile.from_text("vllm/utils/jsontree.py", JSONTREE)
    found, span = _find([upstream], "json_map_leaves", "function")
    assert found is upstream and upstream.lines[span.start - 1].startswith("def json_map_leaves(f, value):")


def test_a_function_only_stubs_define_is_still_found():
    upstream = UpstreamFile.from_text("vllm/x.py", "from typing import overload\n\n\n@overload\ndef g(x): ...\n")
    assert _find([upstream], "g", "function") is not None
