"""Text views with ANSI colours, read as runs of plain text that each carry a style.

An environment's text view (``Observation.text``, like Gymnasium's ``ansi`` render) may colour
itself with SGR escape sequences (``ESC [ 31 m``). The viewer draws the colours as HTML
classes and ``envharness show`` as terminal colours, or drops them; neither may pass an escape
sequence through — one that moves the cursor, clears the screen or retitles a terminal would
act on the reader's terminal, and in a page it is noise. So a text is parsed here once: SGR
sequences become :class:`Style` values, every other escape sequence is dropped, and control
characters other than newline and tab are made visible (``\\x07``). What :func:`runs` returns
is safe to print once it is escaped for its medium.

It lives at the base of the package because both the viewer and the command line read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["PLAIN", "Colour", "Style", "nearest_basic", "runs", "strip"]

Colour = int | tuple[int, int, int]
"""A palette index (0-15 the basic and bright colours, 16-255 xterm's cube and greys) or an
RGB triple."""


@dataclass(frozen=True, slots=True)
class Style:
    """How a run of text is drawn; the default is the medium's own."""

    fg: Colour | None = None
    bg: Colour | None = None
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: bool = False
    inverse: bool = False


PLAIN = Style()

_ESCAPE = re.compile(
    r"""
      (?:\x1b\[|\x9b) (?P<params>[0-?]*) (?P<inter>[ -/]*) (?P<final>[@-~])   # CSI ... final
    | (?:\x1b\[|\x9b) [0-?]* [ -/]* \Z                                        # CSI cut off
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]) .*? (?:\x07|\x1b\\|\x9c|\Z)     # OSC, DCS, ... ST
    | \x1b [ -/]* [0-~]                                                       # other escapes
    | \x1b                                                                    # a lone ESC
    """,
    re.VERBOSE | re.DOTALL,
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters left once escapes are gone: everything but ``\\n`` and ``\\t``."""

_BASIC_RGB: tuple[tuple[int, int, int], ...] = (
    (0, 0, 0), (205, 49, 49), (13, 188, 121), (229, 229, 16),
    (36, 114, 200), (188, 63, 188), (17, 168, 205), (229, 229, 229),
    (102, 102, 102), (241, 76, 76), (35, 209, 139), (245, 245, 67),
    (59, 142, 234), (214, 112, 214), (41, 184, 219), (255, 255, 255),
)  # fmt: skip
"""The 16 basic colours as :func:`nearest_basic` measures them (a common terminal palette)."""


def runs(text: str) -> list[tuple[str, Style]]:
    """``text`` as consecutive runs of visible text, each with the style it is drawn in.

    Adjacent runs of one style are merged; empty runs are dropped. ``\\r\\n`` counts as a
    newline; a lone ``\\r`` (overprinting) and other control characters are shown escaped.
    """
    text = text.replace("\r\n", "\n")
    found: list[tuple[str, Style]] = []
    style = PLAIN
    position = 0
    for match in _ESCAPE.finditer(text):
        _add(found, text[position : match.start()], style)
        position = match.end()
        if match["final"] == "m" and not match["inter"]:
            style = _apply(style, match["params"])
    _add(found, text[position:], style)
    return found


def strip(text: str) -> str:
    """``text`` without its colours: only what :func:`runs` shows."""
    return "".join(part for part, _ in runs(text))


def nearest_basic(colour: Colour) -> int:
    """The basic colour (0-15) closest to ``colour``: what a medium with only those shows."""
    if isinstance(colour, int):
        if colour < 16:
            return colour
        rgb = _palette_rgb(colour)
    else:
        rgb = colour
    return min(
        range(16),
        key=lambda index: sum((a - b) ** 2 for a, b in zip(_BASIC_RGB[index], rgb, strict=True)),
    )


def _add(found: list[tuple[str, Style]], part: str, style: Style) -> None:
    if not part:
        return
    part = _CONTROL.sub(_visible, part)
    if found and found[-1][1] == style:
        found[-1] = (found[-1][0] + part, style)
    else:
        found.append((part, style))


def _visible(match: re.Match[str]) -> str:
    return f"\\x{ord(match[0]):02x}"


def _palette_rgb(index: int) -> tuple[int, int, int]:
    """xterm's 256 colours: 16-231 a 6x6x6 cube, 232-255 a ramp of greys."""
    if index >= 232:
        grey = 8 + 10 * (index - 232)
        return grey, grey, grey
    index -= 16
    levels = (0, 95, 135, 175, 215, 255)
    return levels[index // 36], levels[index // 6 % 6], levels[index % 6]


def _apply(style: Style, params: str) -> Style:
    """``style`` after one SGR sequence's parameters (``"1;31"``, ``"38;5;208"``,
    ``"38:2::255:0:0"``); parameters this module does not draw are ignored."""
    if not params:
        return PLAIN
    if not re.fullmatch(r"[0-9;:]*", params):
        return style  # private parameters (``?``, ``<``): not a colour
    codes = params.split(";")
    index = 0
    while index < len(codes):
        code = codes[index]
        index += 1
        if ":" in code:  # ITU form, sub-parameters in one field: 38:5:n, 38:2::r:g:b
            head, *rest = code.split(":")
            if head in ("38", "48"):
                colour = _extended([part for part in rest if part != ""] if rest else [])
                if colour is not None:
                    style = _colour(style, head, colour)
            elif head == "4":
                style = replace(style, underline=rest != ["0"])
            continue
        number = int(code) if code else 0
        if number in (38, 48):
            colour, used = _extended_list(codes[index:])
            index += used
            if colour is not None:
                style = _colour(style, str(number), colour)
        else:
            style = _simple(style, number)
    return style


_SWITCHES: dict[int, dict[str, Any]] = {
    1: {"bold": True},
    2: {"dim": True},
    3: {"italic": True},
    4: {"underline": True},
    7: {"inverse": True},
    22: {"bold": False, "dim": False},
    23: {"italic": False},
    24: {"underline": False},
    27: {"inverse": False},
    39: {"fg": None},
    49: {"bg": None},
}
"""The SGR codes that switch one attribute on or off (blink, conceal, fonts...: not drawn)."""


def _simple(style: Style, number: int) -> Style:
    if number == 0:
        return PLAIN
    if 30 <= number <= 37:
        return replace(style, fg=number - 30)
    if 40 <= number <= 47:
        return replace(style, bg=number - 40)
    if 90 <= number <= 97:
        return replace(style, fg=number - 90 + 8)
    if 100 <= number <= 107:
        return replace(style, bg=number - 100 + 8)
    switch = _SWITCHES.get(number)
    return style if switch is None else replace(style, **switch)


def _colour(style: Style, which: str, colour: Colour) -> Style:
    return replace(style, fg=colour) if which == "38" else replace(style, bg=colour)


def _extended_list(rest: list[str]) -> tuple[Colour | None, int]:
    """The colour after a ``38;`` or ``48;`` and how many fields it took."""
    if rest[:1] == ["5"] and len(rest) >= 2:
        return _extended(rest[:2]), 2
    if rest[:1] == ["2"] and len(rest) >= 4:
        return _extended(rest[:4]), 4
    return None, len(rest)  # malformed: the rest of the sequence is its argument


def _extended(fields: list[str]) -> Colour | None:
    try:
        numbers = [int(field) for field in fields]
    except ValueError:
        return None
    if numbers[:1] == [5] and len(numbers) == 2 and 0 <= numbers[1] <= 255:
        return numbers[1]
    if numbers[:1] == [2] and len(numbers) >= 4:
        red, green, blue = numbers[-3:]
        if all(0 <= value <= 255 for value in (red, green, blue)):
            return red, green, blue
    return None
