"""tools/equivalents.py: declared equivalent mutants follow their statement when lines move,
and ``--rebase`` writes the new ids (and each entry's source text) back into the TOML file."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"
spec = importlib.util.spec_from_file_location("equivalents", TOOLS / "equivalents.py")
assert spec is not None and spec.loader is not None
equivalents = importlib.util.module_from_spec(spec)
sys.modules["equivalents"] = equivalents
spec.loader.exec_module(equivalents)

BEFORE = ["x = 1", "if ready:", "    return None", "y = 0"]
AFTER = ["# a comment added above", "x = 1", "", "if ready:", "    return None", "y = 0"]


def test_kind_is_what_the_mutant_does_and_which_of_its_kind_on_the_line() -> None:
    assert equivalents.kind("agents:55:const:0.0→1.0") == ("const:0.0→1.0", 1)
    assert equivalents.kind("agents:55:const:0→1#3") == ("const:0→1", 3)
    assert equivalents.kind("m:2:cmp:a < b→a <= b") == ("cmp:a < b→a <= b", 1)


def test_a_declared_id_whose_line_moved_is_found_by_its_text() -> None:
    declared = {"m:3:return:return None→return 0": "never read",
                "m:1:const:1→2#2": "the second of two on its line"}
    texts = {"m:3:return:return None→return 0": "return None", "m:1:const:1→2#2": "x = 1"}
    now = [("m:2:const:1→2", 2), ("m:2:const:1→2#2", 2), ("m:5:return:return None→return 0", 5),
           ("m:6:const:0→1", 6)]
    moved = equivalents.follow(declared, texts, now, AFTER)
    assert moved == {"m:3:return:return None→return 0": "m:5:return:return None→return 0",
                     "m:1:const:1→2#2": "m:2:const:1→2#2"}


def test_an_id_that_still_exists_gone_ambiguous_or_without_text_is_not_moved() -> None:
    now = [("m:1:const:1→2", 1), ("m:2:const:1→2", 2), ("m:3:const:0→1", 3)]
    lines = ["x = 1", "x = 1", "y = 0"]
    declared = ["m:1:const:1→2", "m:7:const:1→2", "m:9:const:0→1", "m:8:const:5→6"]
    texts = {"m:1:const:1→2": "x = 1", "m:7:const:1→2": "x = 1",  # two lines say x = 1
             "m:8:const:5→6": "z = 5"}  # its statement is gone; m:9 has no text
    assert equivalents.follow(declared, texts, now, lines) == {}


def test_two_stale_ids_never_land_on_one_mutant_nor_on_one_already_declared() -> None:
    now = [("m:2:const:1→2", 2)]
    lines = ["", "x = 1"]
    texts = {"m:1:const:1→2": "x = 1", "m:5:const:1→2": "x = 1"}
    moved = equivalents.follow(["m:1:const:1→2", "m:5:const:1→2"], texts, now, lines)
    assert list(moved.values()) == ["m:2:const:1→2"]
    assert equivalents.follow(["m:1:const:1→2", "m:2:const:1→2"], texts, now, lines) == {}


def test_rewrite_moves_ids_adds_texts_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "mutants.toml"
    path.write_text(
        '# header kept\n[module.m]\nequivalent = [\n'
        '  { id = "m:3:return:return None→return 0", text = "return None", reason = "r1" },\n'
        '  { id = "m:4:const:0→1", reason = "has \\"quotes\\"" },\n'
        ']\ntests = ["tests/x.py"]\n')
    changed = equivalents.rewrite(
        path, {"m:3:return:return None→return 0": "m:5:return:return None→return 0"},
        {"m:5:return:return None→return 0": "return None", "m:4:const:0→1": 'y = "0"'})
    assert changed == 2
    data = tomllib.loads(path.read_text())
    assert data["module"]["m"]["equivalent"] == [
        {"id": "m:5:return:return None→return 0", "text": "return None", "reason": "r1"},
        {"id": "m:4:const:0→1", "text": 'y = "0"', "reason": 'has "quotes"'}]
    assert path.read_text().startswith("# header kept\n")
    assert data["module"]["m"]["tests"] == ["tests/x.py"]
    assert equivalents.rewrite(path, {}, {"m:4:const:0→1": 'y = "0"'}) == 0  # nothing new
