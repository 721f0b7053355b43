"""Make Rich's SVG export draw the same grid in every renderer (pure: text in, text out).

Rich writes one ``<text>`` per run of equally styled cells, placed at the run's first column,
with spaces as ``&#160;``, and relies on ``textLength`` and on the font "Fira Code" to put
each character on its column. Renderers without those (librsvg, hence GNOME's viewers,
Inkscape's import, many CI thumbnailers) got a different picture:

- librsvg trims leading and trailing ``&#160;`` as white space (Unicode's ``White_Space``
  includes U+00A0) unless ``xml:space="preserve"``, so a run that begins with the space
  between two fields was drawn one column left: ``connectedws://...``, ``reach-dash—``, and
  every plain cell one column left of the coloured cells beside it;
- librsvg ignores ``textLength``, and the fallback monospace font is a little narrower than
  Rich's 0.61 em cell, so a long run drifts left as it goes.

:func:`renderable` rewrites the export so that no renderer has to get those right: every
word (a run of non-blank cells) is its own ``<text>`` at its own column's x, blanks are not
drawn at all (the backgrounds are separate rectangles), the root asks for
``xml:space="preserve"``, and the font list names common monospace fonts before the generic
``monospace``, at a size whose advance fills the cell (within 0.02 px a character, so a long
word does not drift). A renderer that honours ``textLength`` draws the same picture as
before.
"""

from __future__ import annotations

import html
import re

from rich.cells import cell_len

FONTS = '"Fira Code", "DejaVu Sans Mono", Menlo, Consolas, "Liberation Mono", monospace'
FONT_SIZE = "20.3px"
"""Rich's cell is 0.61 of its 20 px font; the usual monospace fonts advance 0.600-0.602 em, so
at 20.3 px their glyphs fill the 12.2 px cell (rules and bars are drawn without gaps)."""

_TEXT = re.compile(
    r'<text class="(?P<cls>[^"]*)" x="(?P<x>[-\d.e]+)" y="(?P<y>[-\d.e]+)" '
    r'textLength="(?P<length>[-\d.e]+)" clip-path="(?P<clip>[^"]*)">(?P<body>.*?)</text>',
    re.DOTALL)
_WORD = re.compile(r"[^\s\u00a0]+")


def _num(value: float) -> str:
    """A coordinate as Rich writes them (``format(v, "g")``), rounded against float noise."""
    return format(round(value, 3), "g")


def _split(match: re.Match[str]) -> str:
    body = html.unescape(match["body"])
    if not body or not _WORD.search(body):
        return ""  # blanks only: the background rectangle is all there is to draw
    char_width = float(match["length"]) / len(body)
    x0 = float(match["x"])
    out = []
    for word in _WORD.finditer(body):  # whole words: a name or a URL stays searchable
        x = x0 + cell_len(body[: word.start()]) * char_width
        text = word.group()
        out.append(f'<text class="{match["cls"]}" x="{_num(x)}" y="{match["y"]}" '
                   f'textLength="{_num(char_width * len(text))}" '
                   f'clip-path="{match["clip"]}">{html.escape(text, quote=False)}</text>')
    return "".join(out)


def renderable(svg: str) -> str:
    """``svg`` (Rich's ``export_svg``) with each word at its own column, blanks preserved,
    and a monospace font list: the same grid in Chromium, Firefox and librsvg."""
    svg = svg.replace("font-family: Fira Code, monospace;\n        font-size: 20px;",
                      f"font-family: {FONTS};\n        font-size: {FONT_SIZE};", 1)
    svg = re.sub(r"<svg (?![^>]*xml:space)", '<svg xml:space="preserve" ', svg, count=1)
    return _TEXT.sub(_split, svg)
