"""Retired targets: a side whose release removed the definitions a target is about (fuzz/releases/retired.py).

keye.py is absent from vllm 0.34.0 (its pack's manifest says so; 0.34.0's registry lists Keye among the
models last supported in 0.33.0). The keye targets are ``retired in 0.34.0`` against it: their own state,
counted apart in the ``result:`` line, not incomplete by themselves. A definition that moved is not retired.
Offline: the packs shipped in sources/ and trees made from them.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fuzz.config import RunConfig
from fuzz.engine.runner import fuzz_target
from fuzz.records.model import DeviceTally, Report, ReportError, TargetEntry
from fuzz.releases.packs import SHIPPED_PACKS, PackSource
from fuzz.releases.retired import retirement
from fuzz.releases.sides import CannotBuild, Retired, bind
from fuzz.releases.sources import TreeSource
from fuzz.reports.formats import junit_xml, markdown
from fuzz.reports.report import closing_line, summary_table
from fuzz.reports.trend import Trend, what_changed
from fuzz.targets import lookup
from tests.support import cli

KEYE = "vllm/model_executor/models/keye.py"
KEYE_TARGETS = ["keye-encoder-rope", "keye-vision-split", "keye-process-image", "keye-process-video",
                "keep-on-cpu-keye-grid-thw"]


def target(name: str):
    (found,) = lookup([name])
    return found


def pack_tree(tmp_path: Path, version: str, drop: tuple[str, ...] = (), add: dict[str, str] | None = None) -> Path:
    """A shipped pack as a checkout (no manifest), less ``drop``, plus ``add`` ({path: text})."""
    root = tmp_path / f"tree-{version}"
    shutil.copytree(SHIPPED_PACKS / f"vllm-{version}", root)
    (root / "MANIFEST.json").unlink()
    for path in drop:
        (root / path).unlink()
    for path, text in (add or {}).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


@pytest.mark.parametrize("name", KEYE_TARGETS)
def test_every_keye_target_is_retired_in_0_34_0_with_where_that_is_known_from(name):
    with pytest.raises(Retired) as raised:
        bind(target(name), "vllm==0.28.0", "vllm==0.34.0")
    found = raised.value.retirement
    assert found.release == "0.34.0" and found.label == "retired in 0.34.0"
    assert found.side == "optimized vllm==0.34.0" and found.files == (KEYE,)
    assert "sources/vllm-0.34.0/MANIFEST.json lists vllm/model_executor/models/keye.py as absent" in found.known_from
    assert "vllm 0.33.0 has it" in found.known_from
    assert isinstance(raised.value, CannotBuild)  # replay and other "no callable" paths still say why


def test_either_role_can_be_the_retired_side():
    with pytest.raises(Retired, match="legacy vllm==0.34.0: retired in 0.34.0"):
        bind(target("keye-encoder-rope"), "vllm==0.34.0", "copy")


def test_the_releases_that_still_hold_the_file_are_not_retired():
    bound = bind(target("keye-encoder-rope"), "vllm==0.27.1", "vllm==0.33.0")
    assert bound.optimized.startswith("syncfuzz_sides.")


def test_a_target_of_a_file_the_release_kept_is_not_retired():
    bound = bind(target("ernie-rot-pos-emb"), "vllm==0.28.0", "vllm==0.34.0")
    assert bound.optimized.startswith("syncfuzz_sides.")


def test_a_moved_module_is_not_retired_but_cannot_build_with_its_reason(tmp_path):
    """keye.py moved under another name: its definitions are in the tree, so nothing was retired."""
    text = (SHIPPED_PACKS / "vllm-0.33.0" / KEYE).read_text()
    moved = pack_tree(tmp_path, "0.33.0", drop=(KEYE,), add={"vllm/model_executor/models/keye_vl.py": text})
    assert retirement(target("keye-encoder-rope").upstream, "optimized", str(moved), TreeSource(moved), "path") is None
    with pytest.raises(CannotBuild) as raised:
        bind(target("keye-encoder-rope"), "vllm==0.28.0", str(moved))
    assert not isinstance(raised.value, Retired) and "KeyeSiglipEncoder is not in" in str(raised.value)


def test_one_namesake_elsewhere_is_no_move():
    """keep-on-cpu-keye-grid-thw claims keye's Projector.forward; paddleocr_vl.py has a Projector of its own.
    One shared name of five does not make keye.py moved."""
    found = retirement(target("keep-on-cpu-keye-grid-thw").upstream, "optimized", "vllm==0.34.0",
                       PackSource(SHIPPED_PACKS / "vllm-0.34.0"), "release")
    assert found is not None and found.release == "0.34.0"


def test_vllms_own_registry_is_cited_where_the_side_carries_it(tmp_path):
    registry = ('_PREVIOUSLY_SUPPORTED_MODELS = {\n    "MptForCausalLM": "0.28.0",\n'
                '    "KeyeForConditionalGeneration": "0.33.0",\n'
                '    "KeyeVL1_5ForConditionalGeneration": "0.33.0",\n}\n')
    main = pack_tree(tmp_path, "0.34.0", add={"vllm/model_executor/models/registry.py": registry})
    found = retirement(target("keye-process-image").upstream, "optimized", str(main), TreeSource(main), "path",
                       base=PackSource(SHIPPED_PACKS / "vllm-0.28.0"))
    assert found is not None and found.release == "0.34.0"  # the first pack after 0.33.0 that lacks it
    assert ("vLLM's model registry (_PREVIOUSLY_SUPPORTED_MODELS in " in found.known_from
            and "lists KeyeForConditionalGeneration as last supported in 0.33.0" in found.known_from)


# --------------------------------------------------------------------------- in the report


def retired_entry() -> TargetEntry:
    config = RunConfig(legacy="vllm==0.28.0", optimized="vllm==0.34.0", max_examples=2, isolated=False, confirm=0)
    entry = fuzz_target(target("keye-encoder-rope"), config).entry()
    assert entry.retired is not None and entry.cannot_build is None and entry.examples == 0
    return entry


def agreeing_entry() -> TargetEntry:
    return TargetEntry(name="fla-chunk-offsets", devices=("cpu",),
                       by_device={"cpu": DeviceTally(examples=3, verdicts={"agree": 3})})


def test_a_retired_target_is_counted_apart_and_does_not_make_the_run_incomplete():
    report = Report((agreeing_entry(), retired_entry()))
    assert report.exit_code() == 0 and report.cannot_build() == []
    assert [e.name for e in report.retired()] == ["keye-encoder-rope"]
    line = closing_line(report)
    assert "1/2 targets agree" in line and "0 cannot-build, 1 retired" in line and "exit 0: no failure" in line
    assert "retired in 0.34.0" in summary_table(report.targets)


def test_every_format_says_retired_in_its_release():
    report = Report((agreeing_entry(), retired_entry()))
    data = json.loads(json.dumps(report.to_json()))
    row = data["targets"][1]
    assert row["verdict"] == "retired" and row["verdict_by_device"] == {"cpu": "retired"}
    assert row["retired"]["release"] == "0.34.0" and row["retired"]["files"] == [KEYE]
    again = Report.from_json(data, "r.json")
    assert again.targets[1].retired == row["retired"] and again.exit_code() == 0
    assert "| keye-encoder-rope | cpu | 0 | 0 | retired in 0.34.0: optimized vllm==0.34.0 has no " \
           f"{KEYE}; known from" in markdown(report)
    (case,) = [c for c in ET.fromstring(junit_xml(report)) if c.get("classname") == "syncfuzz.keye-encoder-rope"]
    assert case.find("skipped").get("message").startswith("retired in 0.34.0: ")


def test_a_report_with_a_broken_retired_record_is_refused():
    data = retired_entry().to_json()
    with pytest.raises(ReportError, match="retired record"):
        TargetEntry.from_json({**data, "retired": {"side": "optimized vllm==0.34.0"}})


def test_the_trend_says_newly_retired_and_not_a_fall_in_examples():
    night = Report((TargetEntry(name="keye-encoder-rope", devices=("cpu",),
                               by_device={"cpu": DeviceTally(examples=50, verdicts={"agree": 50})}),),
                   run={"started": "2026-12-05T02:00:00"})
    now = Report((retired_entry(),), run={"started": "2026-12-06T02:00:00"})
    lines = what_changed(Trend.from_reports([("a.json", night), ("b.json", now)]))
    assert any("keye-encoder-rope: newly retired in 0.34.0" in line for line in lines)
    assert not any("examples fell" in line for line in lines)


def test_a_run_against_0_34_0_with_retired_targets_exits_0(tmp_path):
    done = cli("run", "--legacy", "vllm==0.28.0", "--optimized", "vllm==0.34.0", "--target", "keye-encoder-rope",
               "--target", "ernie-rot-pos-emb", "--device", "cpu", "--max-examples", "5", "--seed", "0",
               "--no-coverage", "--in-process", "--confirm", "0", "--corpus", str(tmp_path / "c"),
               "--report", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[fuzz] keye-encoder-rope: retired in 0.34.0 (" in done.stderr
    assert "1/2 targets agree" in done.stdout and "1 retired" in done.stdout
