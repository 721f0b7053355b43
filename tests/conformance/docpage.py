"""docs/protocol.md as data: its sections, the field tables of §5, the task view's fields and
the example frames of §11, so the conformance tests compare the wire with the page itself."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).parents[2] / "docs" / "protocol.md"
CELL = r"(?:[^|\\]|\\.)+"  # a table cell: anything but an unescaped |
ROW = re.compile(rf"^\| `(\w+)` \| {CELL} \| ({CELL}) \|", flags=re.M)  # field, type, default


def section(title: str, end: str) -> str:
    """The page's text from ``title`` to the next ``end``."""
    text = DOC.read_text()
    assert title in text, f"docs/protocol.md has no {title!r}"
    return text.split(title, 1)[1].split(end, 1)[0]


def documented_frames() -> dict[str, tuple[set[str], set[str]]]:
    """frame type → (fields its §5 table lists, those whose default is "—": required)."""
    frames: dict[str, tuple[set[str], set[str]]] = {}
    for block in re.split(r"\n### ", section("## 5. Frame reference", "\n## 6."))[1:]:
        name = re.match(r"`(\w+)`", block)
        assert name, block[:40]
        fields, required = set(), set()
        for row in ROW.finditer(block):
            fields.add(row.group(1))
            if row.group(2).strip() == "—":
                required.add(row.group(1))
        frames[name.group(1)] = (fields, required)
    return frames


def documented_view() -> tuple[set[str], set[str], set[str]]:
    """The task view's fields, its attempts' fields and its history entries' fields (§5)."""
    text = section("The task view has these fields:", "`outcome` is one of")
    view = set(re.findall(r"`(\w+)`", text.split("- `attempts`", 1)[0]))
    attempts = re.search(r"`attempts`: a list of `\{([^}]*)\}`", text.replace("\n  ", " "))
    history = re.search(r"`history`: a list of `\{([^}]*)\}`", text)
    assert attempts and history
    view |= {"attempts", "history", "updated_at"}
    return (view, {f.strip() for f in attempts.group(1).split(",")},
            {f.strip() for f in history.group(1).split(",")})


def check(frame: dict[str, Any], frames: dict[str, tuple[set[str], set[str]]]) -> None:
    kind = frame["type"]
    assert kind in frames, f"frame type {kind!r} is not in §5"
    fields, required = frames[kind]
    extra = set(frame) - fields - {"v", "type"}
    assert not extra, f"{kind} carries {sorted(extra)}, not documented in §5"
    missing = required - set(frame)
    assert not missing, f"{kind} lacks required {sorted(missing)}"


def example_frames() -> list[tuple[str, dict[str, Any]]]:
    """Every frame of §11's example sessions: ("→" to the coordinator or "←" from it, frame)."""
    text = section("## 11. Example sessions", "\n## 12.")
    frames = []
    for block in re.findall(r"```jsonc\n(.*?)```", text, flags=re.S):
        for found in re.finditer(r"^([→←]) \{", block, flags=re.M):
            start = found.end() - 1
            frames.append((found.group(1), json.loads(block[start:_closing(block, start)])))
    return frames


def _closing(text: str, start: int) -> int:
    """The index just past the ``}`` that closes the ``{`` at ``start``."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise AssertionError(f"unbalanced example frame at {text[start:start + 60]!r}")
