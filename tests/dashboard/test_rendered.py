"""The dashboard's pictures as a renderer draws them, not only as SVG text (issue 29, item 4).

`reach-dash --screenshot` SVGs and docs/screenshots, drawn with librsvg, ran fields together
(``connectedws://…``, ``reach-dash—``) and put every plain cell one column left of the
coloured ones: librsvg trims the ``&#160;`` a run of cells starts with and ignores
``textLength``. Here every picture is rendered by ``rsvg-convert`` (Debian's librsvg2-bin;
.ci/run installs it) and each word's ink is looked for in its own column: it must start in
the cell the SVG puts it in, and the blank cell before it must stay blank. The content
checks read the same pictures: colour means state (a Kind is not red), names are cut only
when the terminal is too narrow, and what is cut (a name, an attempt's error, the status
line) ends in "…".
"""

from __future__ import annotations

import copy
import html
import os
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dashboard import ReachDashboard, sample, waterfall
from dashboard.views.status import StatusLine
from reach.testing import wait_until
from reach.wire import admin

ROOT = Path(__file__).resolve().parents[2]
SHOTS = sorted((ROOT / "docs" / "screenshots").glob("*.svg"))
SNAPSHOTS = sorted((ROOT / "tests" / "dashboard" / "__snapshots__").glob("*/*.svg"))
RSVG = shutil.which("rsvg-convert")


def need_rsvg() -> str:
    if RSVG is None:
        message = "rsvg-convert is not installed (Debian: apt-get install librsvg2-bin)"
        if os.environ.get("REACH_REQUIRE_SERVICES"):
            pytest.fail(f"{message} (CI sets REACH_REQUIRE_SERVICES: these tests must run)")
        pytest.skip(message)
    return RSVG


# ---------------------------------------------------------------- reading an SVG's grid

_TEXT = re.compile(
    r'<text class="[^"]*-(?P<cls>r\d+)" x="(?P<x>[-\d.e]+)" y="[-\d.e]+" '
    r'textLength="(?P<length>[-\d.e]+)" clip-path="url\(#[^)]*-line-(?P<line>\d+)\)">'
    r"(?P<body>.*?)</text>", re.DOTALL)


@dataclass(frozen=True)
class Word:
    """A run of non-blank cells as the SVG places it: line, first column, text, style."""

    line: int
    column: int
    text: str
    style: str


@dataclass
class Picture:
    svg: str
    cell: float  # a cell's width in SVG units
    line_height: float
    origin: tuple[float, float]  # where the terminal's cells start
    cells: dict[tuple[int, int], tuple[str, str]]  # (line, column) -> (char, style class)
    fills: dict[str, str]  # style class -> its CSS

    @property
    def lines(self) -> list[str]:
        """The terminal's text, line by line (a blank cell is a space)."""
        if not self.cells:
            return []
        rows = max(line for line, _ in self.cells) + 1
        out = []
        for line in range(rows):
            columns = [c for (ln, c) in self.cells if ln == line]
            out.append("".join(self.cells.get((line, c), (" ", ""))[0]
                               for c in range(max(columns) + 1 if columns else 0)))
        return out

    def words(self) -> list[Word]:
        out = []
        for line, text in enumerate(self.lines):
            for match in re.finditer(r"\S+", text):
                style = self.cells[(line, match.start())][1]
                out.append(Word(line, match.start(), match.group(), style))
        return out

    def blank(self, line: int, column: int) -> bool:
        return (line, column) not in self.cells

    def fill(self, word: Word) -> str:
        found = re.search(r"fill: (#[0-9a-f]{6})", self.fills.get(word.style, ""))
        return found.group(1) if found else ""

    def word(self, text: str) -> Word:
        return next(w for w in self.words() if w.text == text)


def picture(svg: str) -> Picture:
    cells: dict[tuple[int, int], tuple[str, str]] = {}
    cell = 0.0
    for m in _TEXT.finditer(svg):
        body = html.unescape(m["body"])
        if not body:
            continue
        cell = float(m["length"]) / len(body)
        column = round(float(m["x"]) / cell)
        for i, char in enumerate(body):  # the sample pictures have no double-width characters
            if not char.isspace():
                cells[(int(m["line"]), column + i)] = (char, m["cls"])
    origin = re.search(r'<g transform="translate\(([\d.]+), ([\d.]+)\)" clip-path', svg)
    height = re.search(r"line-height: ([\d.]+)px", svg)
    assert origin and height and cell
    fills = dict(re.findall(r"\.terminal-(?:\d+-)?(r\d+) \{ ([^}]*)\}", svg))
    return Picture(svg, cell, float(height.group(1)),
                   (float(origin.group(1)), float(origin.group(2))), cells, fills)


# ---------------------------------------------------------------- rendering it

SQUASH = 0.25
"""Rendered at full width and a quarter height: columns are what is checked, and a quarter
of the rows keeps the pure-Python PNG decoding below a second a picture."""


def alpha_rows(data: bytes) -> list[bytearray]:
    """The alpha channel, row by row, of an 8-bit RGBA non-interlaced PNG (rsvg-convert's).
    PNG filters work on each channel separately, so only the alpha bytes are unfiltered."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert (depth, colour, interlace) == (8, 6, 0)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * 4 + 1
    rows, prev = [], bytearray(width)
    for y in range(height):
        kind = raw[y * stride]
        line = bytearray(raw[y * stride + 4:(y + 1) * stride:4])  # byte 3 of each pixel
        if kind == 1:
            for i in range(1, width):
                line[i] = (line[i] + line[i - 1]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev, strict=True))
        elif kind == 3:
            for i in range(width):
                line[i] = (line[i] + ((line[i - 1] if i else 0) + prev[i]) // 2) & 255
        elif kind == 4:
            for i in range(width):
                left, up, corner = (line[i - 1], prev[i], prev[i - 1]) if i else (0, prev[i], 0)
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc
                                      else corner)) & 255
        rows.append(line)
        prev = line
    return rows


def text_only(svg: str) -> str:
    """The picture without its backgrounds and window chrome: what is left is the text."""
    svg = re.sub(r"<rect [^>]*fill=[^>]*/>", "", svg)
    return re.sub(r"<circle [^>]*/>", "", svg)


@dataclass
class Ink:
    """Where librsvg drew glyphs (the text-only picture's alpha)."""

    pic: Picture
    alpha: list[bytearray]

    def any(self, line: int, x0: float, x1: float) -> bool:
        """Is there ink on ``line`` between x ``x0`` and ``x1`` (terminal coordinates)?"""
        ox, oy = self.pic.origin
        top = int((oy + line * self.pic.line_height + 3) * SQUASH)
        bottom = int((oy + (line + 1) * self.pic.line_height - 3) * SQUASH) + 1
        return any(max(self.alpha[y][int(ox + x0):int(ox + x1)], default=0) > 60
                   for y in range(top, bottom))


    def left_edge(self, line: int, x0: float, x1: float) -> float | None:
        """The leftmost ink on ``line`` between ``x0`` and ``x1`` (terminal coordinates)."""
        ox, oy = self.pic.origin
        top = int((oy + line * self.pic.line_height + 3) * SQUASH)
        bottom = int((oy + (line + 1) * self.pic.line_height - 3) * SQUASH) + 1
        for x in range(int(ox + x0), int(ox + x1)):
            if any(self.alpha[y][x] > 60 for y in range(top, bottom)):
                return x - ox
        return None


def ink(svg: str, tmp: Path) -> Ink:
    source = tmp / "picture.svg"
    source.write_text(text_only(svg))
    out = subprocess.run([need_rsvg(), "-y", str(SQUASH), str(source)], capture_output=True,
                         check=True, timeout=60)
    return Ink(picture(svg), alpha_rows(out.stdout))


def misplaced(svg: str, tmp: Path) -> list[str]:
    """Words a renderer drew outside their columns: a word after a blank cell must have ink
    in its first cell and none inside the blank cell before it (a word drawn one column
    left runs into its neighbour: ``connectedws://``)."""
    found = ink(svg, tmp)
    pic, cell, wrong = found.pic, found.pic.cell, []
    for word in pic.words():
        if not word.column or not pic.blank(word.line, word.column - 1):
            continue
        if not word.text[0].isalnum() or word.text[0] in "jJ":  # ink from the cell's left
            continue
        x = word.column * cell
        if found.any(word.line, x - cell + 2, x - 2) or not found.any(word.line, x, x + cell):
            before = pic.lines[word.line][max(0, word.column - 12):word.column]
            wrong.append(f"line {word.line}: {before!r} + {word.text!r} at column "
                         f"{word.column}")
    return wrong


# ---------------------------------------------------------------- the checks

@pytest.mark.parametrize("path", SHOTS + SNAPSHOTS, ids=lambda p: p.name)
def test_every_word_is_drawn_in_its_own_column(path: Path, tmp_path: Path) -> None:
    """docs/screenshots and the snapshot tests' pictures, drawn by librsvg: no word moved
    out of its column (on main: ``connectedws://``, ``reach-dash—``, every plain cell one
    column left of the coloured cells and of its header)."""
    wrong = misplaced(path.read_text(), tmp_path)
    assert not wrong, f"{path.name}: {len(wrong)} words drawn out of place:\n" + "\n".join(
        wrong[:15])


@pytest.mark.parametrize("name", ["agents.svg", "breakers.svg", "dead-letters.svg"])
def test_cells_line_up_with_their_headers_as_drawn(name: str, tmp_path: Path) -> None:
    """Every column's header and cells start at the same x in the rendered picture, plain
    and coloured alike (on main the plain ones sat one column left: "every coloured cell
    sits one column right of its header")."""
    found = ink((ROOT / "docs" / "screenshots" / name).read_text(), tmp_path)
    pic, cell = found.pic, found.pic.cell
    header = next(i for i, line in enumerate(pic.lines)
                  if line.split()[:1] in (["Agent"], ["Task"]))
    columns = [w for w in pic.words() if w.line == header]
    checked = 0
    for head in columns:
        x = head.column * cell
        edge = found.left_edge(header, x - cell, x + cell)
        assert edge is not None
        for word in pic.words():
            if word.line > header and word.column == head.column and word.text[0].isalnum():
                cell_edge = found.left_edge(word.line, x - cell, x + cell)
                assert cell_edge is not None and abs(cell_edge - edge) <= 3, (
                    f"{word.text!r} starts at x={cell_edge}, its header {head.text!r} at "
                    f"x={edge}")
                checked += 1
    assert checked >= 8


def test_the_separators_are_there_in_the_text() -> None:
    """The fields the report saw run together are apart in the pictures' text too."""
    agents = picture((ROOT / "docs" / "screenshots" / "agents.svg").read_text())
    assert "● connected  ws://127.0.0.1:8765  5 agents" in agents.lines[1]
    assert "reach-dash — ws://127.0.0.1:8765" in agents.lines[0]
    traces = picture((ROOT / "docs" / "screenshots" / "traces.svg").read_text())
    assert any(re.search(r"trace a1a1a1a1a1a1a1a1 · 3 tasks", line) for line in traces.lines)


def test_colour_means_state_and_a_kind_is_not_red() -> None:
    """The Kind column (http, process, peer, websocket) is drawn as plain as the names; on
    main http, process and peer were in the same red as faults and offline agents."""
    pic = picture((ROOT / "docs" / "screenshots" / "agents.svg").read_text())
    red = pic.fill(pic.word("offline"))
    plain = pic.fill(pic.word("orders-1"))
    for kind in ("process", "peer", "websocket"):
        assert pic.fill(pic.word(kind)) == plain != red, kind


LONG = "inventory-reconciliation-worker-eu1"  # 35 characters
CAPS = ["orders.write", "orders.cancel", "orders.refund", "orders.export"]


async def shot(width: int, snap: dict[str, Any], *, tab: str = "1",
               note: str = "", down: bool = False) -> Picture:
    app = ReachDashboard(url="ws://127.0.0.1:18765", token="t",
                         connector=sample.connector(sample.ScriptedFeed([snap])))
    async with app.run_test(size=(width, 40)) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press(tab)
        if down:
            await pilot.press("down")
        if note:
            app.query_one(StatusLine).note = note
        await pilot.pause()
        return picture(app.export_screenshot())


def row(pic: Picture, head: str) -> str:
    return next(line for line in pic.lines if line.strip().startswith(head))


async def test_a_name_is_whole_while_the_lists_can_give_way() -> None:
    """At 142 columns a 35-character agent name fits when the capability list gives way
    (on main both were capped at one level, and the name was cut at 25); at 90 columns
    the terminal is too narrow, and the name is cut with "…"."""
    snap = fresh()
    snap["agents"][1]["name"] = LONG
    snap["agents"][1]["capabilities"] = CAPS
    wide = await shot(142, snap)
    line = row(wide, LONG)
    assert LONG + " " in line and line.rstrip().endswith("…")  # the list was cut, marked
    narrow = await shot(90, snap)
    line = row(narrow, LONG[:8])
    assert LONG not in line and re.search(r"inventory-[a-z-]*…", line)


def fresh() -> dict[str, Any]:
    """The sample snapshot, deep-copied: the sample's own letters and agents stay as they are
    for the tests after these."""
    return copy.deepcopy(sample.snapshot())


def letter_with(error: str) -> dict[str, Any]:
    snap = fresh()
    snap["dead_letters"][1]["attempts"][0]["error"] = error
    return snap


async def test_an_attempts_error_is_cut_only_past_the_pane_and_with_an_ellipsis() -> None:
    """In a 160-column pane a 97-character error is shown whole (main cut it at 60, no
    "…"); a longer one is cut at the pane's edge, ending in "…", and the other columns of
    the attempt stay whole."""
    error = "RuntimeError: " + " ".join(f"word{i:02d}" for i in range(12))
    assert len(error) == 97
    pic = await shot(160, letter_with(error), tab="4", down=True)
    attempt = row(pic, "1  orders-2  fault    210 ms  13s ago")
    assert attempt.rstrip().endswith("word11") and "…" not in attempt
    longer = error + " and then some more" * 10
    for width in (160, 100):
        pic = await shot(width, letter_with(longer), tab="4", down=True)
        attempt = row(pic, "1  orders-2  fault    210 ms  13s ago")
        assert attempt.rstrip().endswith("…"), (width, attempt)
        assert len(attempt.rstrip()) >= width - 6, (width, attempt)  # to the pane's edge
    assert "word11 and then" in row(await shot(160, letter_with(longer), tab="4", down=True),
                                    "1  orders-2")


async def test_the_status_line_keeps_the_last_command_whole() -> None:
    """The outcome of the operator's last command comes before the summary and is never
    wrapped out of sight (main lost "succeeded" at 160 columns); what does not fit is the
    summary's end, whole parts of it, replaced by "…"."""
    note = "replayed letter b12c420255: 1 succeeded"
    for width in (100, 160):
        pic = await shot(width, fresh(), note=note)
        status = pic.lines[1]
        assert note in status, (width, status)
        assert re.search(r"(  | · )…$", status.rstrip()), (width, status)  # whole parts


async def test_a_live_width_picture_renders_in_place(tmp_path: Path) -> None:
    """A screenshot at another size (the report's 160-column pane), with a long name, a
    long error and a note, is drawn with every word in its column."""
    snap = letter_with("RuntimeError: " + "x" * 300)
    snap["agents"][1]["name"] = LONG
    for tab in ("1", "2", "4"):
        pic = await shot(160, snap, tab=tab, down=tab == "4",
                         note="replayed letter b12c420255: 1 succeeded")
        assert not misplaced(pic.svg, tmp_path), tab


def test_a_waterfalls_names_and_errors_take_the_room_there_is() -> None:
    """In a wide pane the waterfall's labels and errors are whole (main cut every detail at
    28 columns and every label at 32, however wide the pane); they give way only while the
    bars would get fewer than 40 columns, and then are cut with "…"."""
    timeline = copy.deepcopy(sample.TIMELINES["a1" * 16])
    long_cap = "warehouse.inventory.reconcile-region"  # 36 characters
    error = "orders-2 fault: ConnectionResetError: peer closed the connection mid-write"
    timeline["hops"][2]["capability"] = long_cap
    timeline["hops"][2]["note"] = error.removeprefix("orders-2 ")
    drawn = waterfall.render(admin.Timeline.model_validate(timeline), 190).plain.split("\n")
    assert any(long_cap in line for line in drawn), drawn
    assert any(line.rstrip().endswith(error.removeprefix("orders-2 ")) for line in drawn)
    assert max(len(line) for line in drawn) <= 190
    narrow = waterfall.render(admin.Timeline.model_validate(timeline), 80).plain.split("\n")
    assert not any(long_cap in line for line in narrow)
    assert any(re.search(r"warehouse\.[\w.-]*…", line) for line in narrow)
    assert max(len(line) for line in narrow) <= 80
