"""Declared equivalent mutants (tools/mutants.toml) that follow their statement when lines move.

A mutant's id names its line (``module:line:operator:original→replacement``), so every edit
above a declared equivalent turned its id stale, and the next run counted the mutant as a
survivor again until someone found its new line by hand. An entry may also carry ``text``: the
stripped source line it was declared on. When its id no longer exists, the one line of the
module with that text and a mutant of the same kind is where it moved, and the run counts it
there (and says so). ``python tools/mutate.py --rebase`` writes the moved ids, and the text of
every entry that has none yet, back into the file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

# One entry per line, as mutants.toml writes them: { id = "...", [text = "...",] reason = ... }
_ENTRY = re.compile(r'^(\s*\{\s*id = )("(?:[^"\\]|\\.)*")(?:, text = "(?:[^"\\]|\\.)*")?(.*)$',
                    re.DOTALL)


def kind(ident: str) -> tuple[str, int]:
    """``("const:0.0→1.0", n)`` for ``"agents:55:const:0.0→1.0#n"``: what the mutant does,
    and which of the same kind on its line it is (1 for the first)."""
    _, _, rest = ident.split(":", 2)
    rest, _, nth = rest.partition("#")
    return rest, int(nth) if nth else 1


def follow(equivalent: Iterable[str], texts: Mapping[str, str],
           mutants: Iterable[tuple[str, int]], lines: list[str]) -> dict[str, str]:
    """``{old id: new id}`` for the declared ids that no longer exist but whose ``text`` is on
    exactly one line that has a mutant of the same kind. ``mutants``: (id, line) of the
    module's mutants now; ``lines``: its source. Never two old ids onto one new id, nor onto
    an id that is declared already."""
    declared = set(equivalent)
    now = list(mutants)
    ids = {ident for ident, _ in now}
    moved: dict[str, str] = {}
    for ident in sorted(declared - ids):
        text = texts.get(ident)
        if text is None:
            continue
        want, nth = kind(ident)
        by_line: dict[int, list[str]] = {}
        for other, line in now:
            if kind(other)[0] == want and lines[line - 1].strip() == text:
                by_line.setdefault(line, []).append(other)
        if len(by_line) != 1:
            continue  # gone, or ambiguous: stays stale, for a person to look at
        (on_line,) = by_line.values()
        if nth <= len(on_line):
            new = on_line[nth - 1]
            if new not in declared and new not in moved.values():
                moved[ident] = new
    return moved


def rewrite(path: Path, moved: Mapping[str, str], texts: Mapping[str, str]) -> int:
    """Write ``moved`` ids and each entry's current source ``text`` (by its new id) into the
    TOML file at ``path``, keeping everything else as it is; how many entries changed."""
    changed = 0
    out: list[str] = []
    for line in path.read_text().splitlines(keepends=True):
        match = _ENTRY.match(line)
        if match:
            ident = json.loads(match.group(2))  # TOML basic strings escape as JSON does here
            new = moved.get(ident, ident)
            text = texts.get(new)
            if text is not None:
                redone = (f"{match.group(1)}{json.dumps(new, ensure_ascii=False)}, "
                          f"text = {json.dumps(text, ensure_ascii=False)}{match.group(3)}")
                if redone != line:
                    changed += 1
                line = redone
        out.append(line)
    path.write_text("".join(out))
    return changed
