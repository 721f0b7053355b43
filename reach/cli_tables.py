"""Human output of the operator commands (reach.cli_admin): tables as wide as the terminal
that never cut an id, a name or an error, and the small formats their cells use."""

from __future__ import annotations

from typing import Any


def _console() -> Any:
    from rich.console import Console
    return Console(soft_wrap=False)


TEXT_COLUMNS = frozenset(("Error", "Note", "Capabilities"))
"""Free text: wrapped at spaces to fit the terminal, at least 24 columns wide. The other
columns (ids to copy into the next command, names, states, counts) stay whole on one line."""


def table(title: str, columns: list[str], rows: list[list[str]], empty: str) -> None:
    """A table as wide as the terminal (rich). Nothing in it is ever cut: when the terminal
    is too narrow for the table, each row is printed as a block of "Column: value" lines."""
    from rich.markup import escape
    from rich.table import Table
    console = _console()
    if not rows:
        console.print(empty)
        return
    table = Table(title=title, title_justify="left", expand=False)
    needed = 1  # the left border; each column adds its width, two of padding and a border
    for i, name in enumerate(columns):
        widest = max([len(name), *(len(row[i]) for row in rows)])
        if name in TEXT_COLUMNS:
            table.add_column(name, overflow="fold", min_width=min(widest, 24))
            needed += min(widest, 24) + 3
        else:
            table.add_column(name, no_wrap=True, min_width=widest)
            needed += widest + 3
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    if needed <= console.width:
        console.print(table)
        return
    console.print(escape(title), soft_wrap=True)
    label = max(len(name) for name in columns) + 1
    for row in rows:
        console.print()
        for name, cell in zip(columns, row, strict=True):
            console.print(escape(f"  {name + ':':<{label}} {cell}"), soft_wrap=True)


def ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0f} ms"


def err(error: Any) -> str:
    if not error:
        return "-"
    if isinstance(error, dict):
        return f"{error.get('code', '?')}: {error.get('message', '')}"
    return str(error)
