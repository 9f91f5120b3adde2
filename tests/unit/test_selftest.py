"""The fuzzer's measured power (mutation self-test) must not fall."""

from __future__ import annotations

import ast

import pytest

from fuzz.config import RunConfig
from fuzz.run.selftest import _Mutator, entry_definition, load_equivalents, mutants_of, selftest_target
from fuzz.targets import lookup

# Reached on 2026-11-29 (CPU, 100 examples per mutant, equivalents excluded):
# 100% on every target but glm4v-embeddings (58/59) and diffusion-gemma-sampler
# (lab/selftest/2026-11-29.md). CI keeps the fast targets at 100% (each under ~15 s).
# Since issue #43 the rate covers every definition the record claims, not only the entry:
# keep-on-cpu-ultravox-audio-lens's claimed attention-metadata helpers leave 23 survivors
# untriaged, 45/68 (lab/selftest/2026-12-06-all-definitions.md); its entry stays at 100%.
FLOOR = {"fla-chunk-indices": 1.0, "fla-chunk-offsets": 1.0, "keye-vision-split": 1.0,
         "paddleocr-encode-image": 1.0, "ernie-encoder-metadata-graph": 1.0, "async-tensor-h2d": 1.0,
         "keep-on-cpu-ultravox-audio-lens": 1.0}
# Mutating every claimed definition of these two took ~5 and ~2.5 min on a 2-core host, more than CI's time bar
# allows; CI keeps their entry function's mutants (all of them before #43, 100%), and the all-definitions rate
# is measured in the lab (lab/selftest/2026-12-06-all-definitions.md: ultravox 45/68, 23 untriaged).
ENTRY_ONLY = {"ernie-encoder-metadata-graph", "keep-on-cpu-ultravox-audio-lens"}


# Several seconds each on a 2-core host: run by `pytest -m slow` (.ci/run does);
# the default run keeps the fastest, fla-chunk-offsets.
SLOW = {"ernie-encoder-metadata-graph", "keep-on-cpu-ultravox-audio-lens", "paddleocr-encode-image",
        "fla-chunk-indices", "keye-vision-split", "async-tensor-h2d"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(FLOOR)])
def test_kill_rate_does_not_fall(name):
    (target,) = lookup([name])
    limit = None
    if name in ENTRY_ONLY:  # the entry's mutants come first (test_the_entry_s_mutants_come_first_with_their_numbers)
        limit = sum(1 for mutant, _ in mutants_of(target) if mutant.definition == entry_definition(target))
    result = selftest_target(target, RunConfig(devices=("cpu",), seed=0, max_examples=100), load_equivalents(),
                             limit=limit)
    assert result["kill_rate"] >= FLOOR[name], result["survived"]
    assert result["mutants"] >= 4
    # The entry function's own mutants, which were all of them before #43, stay at 100%.
    assert result["definitions"][entry_definition(target)]["survived"] == 0, result["survived"]
    # Issue #8's bar for power: killed fast, not just killed eventually.
    assert result["examples_to_kill"]["median"] <= 20, result["examples_to_kill"]


def _mutations(source: str) -> list[str]:
    ast.parse(source)
    found, index = [], 0
    while True:
        mutated = ast.parse(source)
        mutator = _Mutator(index)
        mutator.visit(mutated)
        if mutator.applied is None:
            return found
        found.append(f"{mutator.applied[0]}: {mutator.applied[2]}")
        index += 1


def test_operator_catalogue():
    found = _mutations("y = x[i % n] + f(a, output_size=k) * 2 if h < w else 0")
    kinds = {f.split(":")[0] for f in found}
    assert kinds == {"drop-mod", "arith-swap", "constant", "name-swap", "compare-swap", "drop-keyword"}
    assert any("drop output_size=" in f for f in found)
    assert any("h -> w" in f for f in found) and any("Lt -> LtE" in f for f in found)


def test_adapted_lines_are_not_mutated():
    (target,) = lookup(["glm4v-embeddings"])
    assert all("ADAPTED" not in mutant.code for mutant, _ in mutants_of(target))


def test_a_caller_only_equivalent_does_not_excuse_the_wide_contract():
    (target,) = lookup(["keye-process-image"])
    mutant = next(m for m, _ in mutants_of(target) if m.operator == "drop-mod")
    from fuzz.run.selftest import _is_equivalent

    equivalents = load_equivalents()
    assert _is_equivalent(target, mutant, equivalents, ("cpu",), "caller")
    assert _is_equivalent(target, mutant, equivalents, ("cpu",), "wide") is None


@pytest.mark.slow  # builds every mutant of every listed target (~1 min); the default run keeps the caller-only test
def test_every_listed_equivalent_names_a_real_mutant():
    """A stale entry (the code changed) must not silently excuse a new survivor."""
    by_target: dict[str, set] = {}
    for entry in load_equivalents():
        if entry["target"] not in by_target:
            (target,) = lookup([entry["target"]])
            by_target[entry["target"]] = {(m.operator, m.code, m.description, m.definition)
                                          for m, _ in mutants_of(target)}
        definition = entry.get("definition") or entry_definition(lookup([entry["target"]])[0])
        assert (entry["operator"], entry["code"], entry["description"], definition) in by_target[entry["target"]], \
            entry
        assert entry["reason"].strip()
        assert set(entry.get("contracts", ["caller", "wide"])) <= {"caller", "wide"}, entry


def test_each_kill_names_the_oracle_that_made_it():
    (target,) = lookup(["fla-chunk-offsets"])
    result = selftest_target(target, RunConfig(devices=("cpu",), seed=0, max_examples=50), load_equivalents(),
                             limit=4)
    assert sum(result["killed_by"].values()) == result["killed"] == len(result["kills"])
    assert set(result["killed_by"]) <= {"differential", "sync", "harness", "timeout"} | {
        o for kill in result["kills"] for o in kill["oracles"]}
    assert all(kill["oracles"] for kill in result["kills"])
    assert all(kill["definition"] == "prepare_chunk_offsets" for kill in result["kills"])
    assert result["definitions"] == {"prepare_chunk_offsets": {
        "mutants": 4, "killed": result["killed"], "equivalent": len(result["equivalent"]),
        "survived": len(result["survived"])}}


def test_shared_mutants_are_only_killed_by_the_target_s_own_oracles():
    (target,) = lookup(["fla-chunk-offsets"])
    result = selftest_target(target, RunConfig(devices=("cpu",), seed=0, max_examples=50), load_equivalents(),
                             limit=6, shared=True)
    assert result["shared"] is True
    for kill in result["kills"]:
        assert "differential" not in kill["oracles"], kill  # both sides run the same mutant
    assert result["killed"] >= 1, result["survived"]  # the invariants/reference see some of them


def test_a_target_whose_copies_already_differ_has_no_kill_rate():
    """Every mutant of a target whose unmutated copies already fail would count as killed (F20, F21 made the
    shipped figures 67/67 and 6/6, lab/selftest/2026-12-06-issue43.md): its rate is not measured."""
    import dataclasses

    (target,) = lookup(["fla-chunk-offsets"])
    # The legacy side replaced by another function of the same signature: the copies differ on every input.
    broken = dataclasses.replace(target, legacy="legacy.fla_index:prepare_chunk_indices")
    result = selftest_target(broken, RunConfig(devices=("cpu",), seed=0, max_examples=20), load_equivalents(),
                             limit=3)
    assert result["kill_rate"] is None and result["killed"] == 0 and result["mutants"] == 3
    assert result["baseline"].startswith("divergence on cpu"), result["baseline"]
    measured = selftest_target(target, RunConfig(devices=("cpu",), seed=0, max_examples=20), load_equivalents(),
                               limit=1)
    assert measured["baseline"] is None and measured["kill_rate"] is not None


def test_every_claimed_definition_of_the_copy_module_is_mutated():
    """Issue #43: uva-buffer-pool-copy-to-uva's entry is a delegation with no operator's node; its logic is in
    the helpers its record claims (upstream), which must be mutated too, each mutant named by its definition."""
    (target,) = lookup(["uva-buffer-pool-copy-to-uva"])
    mutants = [m for m, _ in mutants_of(target)]
    assert {m.definition for m in mutants} == {"UvaBufferPool._next_buf", "NonUvaBuffer.uva"}
    assert any(m.code == "if n > buf.cpu.shape[0]:" for m in mutants)
    assert len({m.key for m in mutants}) == len(mutants)
    from fuzz.run.selftest import mutated_definitions

    assert mutated_definitions(target) == ["UvaBufferPool.copy_to_uva", "UvaBufferPool._next_buf", "NonUvaBuffer.uva"]


@pytest.mark.slow  # ~2 s: builds every mutant of a target (CI's slow step runs it)
def test_the_entry_s_mutants_come_first_with_their_numbers():
    """A claimed helper's mutants follow the entry's: mutant N of the entry is what it was (names in lab/ and
    --limit keep their meaning); a claimed definition outside the copy module (0.27.1's forward) is skipped."""
    (target,) = lookup(["staged-write-tensor-apply-write"])
    definitions = [m.definition for m, _ in mutants_of(target)]
    entry = definitions.count("StagedWriteTensor.apply_write")
    assert entry >= 1 and set(definitions[:entry]) == {"StagedWriteTensor.apply_write"}
    assert {"StagedWriteTensor.stage_write", "UvaBufferPool._next_buf"} <= set(definitions[entry:])
    (ernie,) = lookup(["ernie-encoder-metadata"])
    assert {m.definition for m, _ in mutants_of(ernie)} == {"Ernie4_5_VisionTransformer.prepare_encoder_metadata"}


def test_nested_operations_at_one_column_get_distinct_names():
    (target,) = lookup(["glm4v-pos-embeds"])  # `h * w * t`: both Mults start at the column of h
    keys = [m.key for m, _ in mutants_of(target)]
    assert len(set(keys)) == len(keys)
    assert any(key.endswith(" #2") for key in keys)


def test_an_equivalent_names_its_definition():
    """An entry without `definition` is the entry function's: it must not excuse the same line in a helper."""
    import dataclasses

    from fuzz.run.selftest import _is_equivalent

    (target,) = lookup(["uva-buffer-pool-copy-to-uva"])
    mutant = next(m for m, _ in mutants_of(target) if m.code == "if n > buf.cpu.shape[0]:")
    entry = {"target": target.name, "operator": mutant.operator, "code": mutant.code,
             "description": mutant.description, "reason": "r"}
    assert _is_equivalent(target, mutant, [entry], ("cpu",)) is None
    assert _is_equivalent(target, mutant, [{**entry, "definition": mutant.definition}], ("cpu",)) == "r"
    in_entry = dataclasses.replace(mutant, definition=entry_definition(target))
    assert entry_definition(target) == "UvaBufferPool.copy_to_uva"
    assert _is_equivalent(target, in_entry, [entry], ("cpu",)) == "r"


@pytest.mark.slow  # ~2 s: builds every mutant of a target (CI's slow step runs it)
def test_the_table_names_each_survivor_s_definition(capsys):
    from fuzz.commands.selftest_cmd import selftest

    assert selftest(["uva-buffer-pool-copy-to-uva"], device="cpu", max_examples=5, limit=1) == 0
    out = capsys.readouterr().out
    assert "per definition: UvaBufferPool.copy_to_uva 0; UvaBufferPool._next_buf 1 (" in out
