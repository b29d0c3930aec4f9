"""Values and names put into Spark SQL text, escaped as Spark's parser reads them (the procedures of Hudi and
Paimon take their arguments only as SQL)."""

from __future__ import annotations


def string_literal(text: str) -> str:
    """A SQL string literal: backslash and quote escaped."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def identifier(name: str) -> str:
    """A quoted identifier part: a backtick doubled."""
    return "`" + name.replace("`", "``") + "`"
