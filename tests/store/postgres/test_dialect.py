"""The adapter that runs the SQLite store's statements on PostgreSQL: what it rewrites, and
what it refuses rather than guess at."""

from __future__ import annotations

import pytest

from envharness.store.index_rules import _update_sessions
from envharness.store.postgres.dialect import translate, translate_positional


def test_positional_parameters_are_numbered_in_order() -> None:
    assert translate_positional("UPDATE t SET a = ?, n = MAX(n, ?) WHERE id = ?") == (
        "UPDATE t SET a = $1, n = GREATEST(n, $2) WHERE id = $3"
    )
    assert translate_positional("SELECT 1") == "SELECT 1"


def test_a_statement_of_many_rows_keeps_every_parameter() -> None:
    statement = translate_positional(_update_sessions(64))
    assert "?" not in statement
    assert statement.count("$") == 64 * 15
    assert "$960)" in statement
    assert "$961" not in statement


def test_named_parameters_go_to_psycopgs_own_placeholders() -> None:
    assert translate("SELECT * FROM t WHERE id = :id AND n > ?") == (
        "SELECT * FROM t WHERE id = %(id)s AND n > %s"
    )


@pytest.mark.parametrize(
    "statement",
    ["SELECT * FROM t WHERE name LIKE 'a%'", "SELECT 'quoted' FROM t WHERE id = ?"],
)
def test_percent_signs_and_quoted_text_are_refused_by_both(statement: str) -> None:
    for translation in (translate, translate_positional):
        with pytest.raises(ValueError, match="a statement this adapter does not translate"):
            translation(statement)
