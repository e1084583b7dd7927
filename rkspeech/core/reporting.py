"""Reports: JSON first (``rkspeech.core.atomic.write_json``), and a short table for people."""

from __future__ import annotations


def print_table(title: str, rows, headers=("", ""), *, stderr: bool = False) -> None:
    """Two-or-more-column table on stdout (``stderr``: there, when stdout carries data)."""
    import sys

    stream = sys.stderr if stderr else sys.stdout
    rows = [tuple(str(c) for c in r) for r in rows]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title, file=stream)
        width = max((len(r[0]) for r in rows), default=0)
        for r in rows:
            print(f"  {r[0]:<{width}}  " + "  ".join(r[1:]), file=stream)
        return
    table = Table(title=title, show_header=any(headers))
    for h in headers if len(headers) == len(rows[0] if rows else headers) else [""] * len(rows[0]):
        table.add_column(h)
    for r in rows:
        table.add_row(*r)
    Console(stderr=stderr).print(table)
