"""The side builder's merges that optimized/gdn_attn.py needed to build from 0.32.0..0.34.0 (issue #43):
upstream lines added next to a line the copy adapts, and a class whose own lines (dataclass fields) changed."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from fuzz.releases.matching import CopyLines, UpstreamFile, walk_spans
from fuzz.releases.merge3 import Conflict, merge3
from fuzz.releases.sidebuild import _merged_class_head, _parsable_head, global_names
from fuzz.releases.sides import _package, bind, side_source, template_for
from fuzz.targets import lookup

BASE = ["def f(self, c):", "    self.a = c.a", "    from vllm.x import g", "", "    self.b = g(c)"]
OURS = ["def f(self, c):", "    self.a = c.a", "    # from vllm.x import g  # ADAPTED: stood in above", "",
        "    self.b = g(c)"]


def test_lines_upstream_adds_right_above_an_adapted_line_go_above_the_adaptation():
    # 0.32.0's `self.checkpoint_builder = MambaPrefillCheckpointBuilder(...)` above the vllm import
    # optimized/gdn_attn.py comments out.
    theirs = [*BASE[:2], "    self.n = N(c)", *BASE[2:]]
    assert merge3(BASE, OURS, theirs) == [*OURS[:2], "    self.n = N(c)", *OURS[2:]]


def test_lines_upstream_adds_right_below_an_adapted_line_go_below_it():
    theirs = [*BASE[:3], "    self.n = N(c)", *BASE[3:]]
    assert merge3(BASE, OURS, theirs) == [*OURS[:3], "    self.n = N(c)", *OURS[3:]]


def test_an_adapted_line_upstream_also_edits_is_still_a_conflict():
    theirs = [*BASE[:2], "    self.n = N(c)", "    from vllm.y import g", *BASE[3:]]
    assert isinstance(merge3(BASE, OURS, theirs), Conflict)


def test_lines_added_between_two_adapted_lines_are_a_conflict():
    base = ["def f():", "    a = x()", "    b = y()", "    return a + b"]
    ours = ["def f():", "    a = X()  # ADAPTED", "    b = Y()  # ADAPTED", "    return a + b"]
    theirs = ["def f():", "    a = x()", "    c = 1", "    b = y()", "    return a + b"]
    assert isinstance(merge3(base, ours, theirs), Conflict)


BASE_FILE = '''\
@dataclass
class Meta:
    a: int
    b: torch.Tensor | None = None


class Builder:
    kind = 1

    def build(self):
        return Meta(1)
'''
NEW_FILE = BASE_FILE.replace("    b: torch.Tensor | None = None\n",
                             "    b: torch.Tensor | None = None\n    c: Plan | None = None  # new\n")


def _spans(upstream: UpstreamFile, qualname: str):
    return upstream.spans[qualname][0]


def _head(copy_text: str, new_text: str = NEW_FILE, qualname: str = "Meta"):
    base = UpstreamFile.from_text("vllm/m.py", BASE_FILE)
    new = UpstreamFile.from_text("vllm/m.py", new_text)
    lines = copy_text.splitlines()
    span = next(s for s in walk_spans(ast.parse(copy_text).body) if s.qualname == qualname)
    return _merged_class_head(lines, CopyLines.from_text(copy_text), span, base, _spans(base, qualname), new,
                              _spans(new, qualname))


def test_a_field_upstream_adds_is_merged_into_the_copys_class():
    first, end, merged = _head(BASE_FILE)
    assert (first, end) == (1, 4)
    assert "    c: Plan | None = None  # new" in merged and merged[:2] == ["@dataclass", "class Meta:"]


def test_a_field_the_copy_adapts_and_upstream_changes_is_a_conflict():
    copy = BASE_FILE.replace("    b: torch.Tensor | None = None\n", "    b: object = None  # ADAPTED: no torch type\n")
    new = BASE_FILE.replace("    b: torch.Tensor | None = None\n", "    b: torch.Tensor = None\n")
    problem = _head(copy, new)
    assert isinstance(problem, str) and "changed lines the copy adapts" in problem


def test_a_class_head_above_its_methods_is_merged_and_its_methods_left_alone():
    new = BASE_FILE.replace("    kind = 1\n", "    kind = 1\n    other = 2\n")
    first, end, merged = _head(BASE_FILE, new, "Builder")
    assert BASE_FILE.splitlines()[first - 1] == "class Builder:" and merged == ["class Builder:", "    kind = 1",
                                                                                "    other = 2", ""]


def test_own_lines_changed_below_the_first_method_are_not_merged():
    new = BASE_FILE + "    after = 3\n"
    problem = _head(BASE_FILE, new, "Builder")
    assert isinstance(problem, str) and "between its methods" in problem


def test_a_merged_head_is_checked_for_the_names_it_needs():
    # Annotations are never evaluated in a rebuilt module: Plan needs nothing, a default does.
    assert global_names(_parsable_head(["@dataclass", "class Meta:", "    c: Plan | None = DEFAULT"])) == {
        "dataclass", "DEFAULT"}
    assert global_names(_parsable_head(["class Builder(Base):"])) == {"Base"}


# The two ends in the inner loop; the releases between (about a second each) with the slow tests.
@pytest.mark.parametrize("version", ["0.28.0", *(pytest.param(v, marks=pytest.mark.slow)
                                                for v in ("0.30.0", "0.31.0", "0.32.0", "0.33.0")), "0.34.0"])
def test_gdn_attn_builds_from_every_release_since_0_28_0(version):
    (target,) = lookup(["gdn-cudagraph-capture-metadata"])
    template = template_for(version, target)
    build = _package(side_source(f"vllm=={version}"), template, ()).module("gdn_attn")
    assert build.error is None and build.failed == {}


def test_gdn_attn_from_0_34_0_has_its_new_metadata_fields_and_the_copys_stand_ins():
    (target,) = lookup(["gdn-cudagraph-capture-metadata"])
    build = _package(side_source("vllm==0.34.0"), "optimized", ()).module("gdn_attn")
    assert "GDNAttentionMetadataBuilder.update_block_table" in build.pulled and "GDNAttentionMetadata" in build.changed
    module = bind(target, optimized="vllm==0.34.0").impl("optimized").module
    fields = {f.name for f in dataclasses.fields(module.GDNAttentionMetadata)}
    assert {"spec_sequence_masks_cpu", "uniform_spec_sequence_length", "checkpoint", "aiter_prefill_metadata",
            "flashinfer_checkpoint_plan"} <= fields
    assert module.rocm_aiter_ops.__doc__ is None and "ADAPTED" in build.text.split("class rocm_aiter_ops:")[1][:20]
