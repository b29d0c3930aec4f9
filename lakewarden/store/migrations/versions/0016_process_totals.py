"""Running totals of ended processes, per table, action, type, status and the group that ran them; and each table's
streak of failures per action.

Why: the overview and the Prometheus scrape summed every kept process's JSON summary (plus what pruning had folded into
`pruned_process_totals`), so they slowed down as the history kept grew (bench/history.py). A process is now added to
`process_totals` in the transaction that ends it, and those read the totals and the running processes only. The upgrade
moves the pruned totals (to the group their table is in now, as they were shown) and adds every ended process still
kept; the downgrade gives back the part of the totals that kept processes do not account for as pruned totals. The
maintenance back-off and the failure alerts ranked every kept process to find each table's failures in a row;
`process_streak` keeps them as processes end, starting from the processes kept.

Revision ID: 0016 Revises: 0015
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

KEY = ("catalog_name", "db_name", "table_name", "action", "type", "status")
ENDED = ("success", "failed", "canceled")

process = sa.table(
    "optimizing_process",
    *(sa.column(name, sa.String()) for name in (*KEY, "group_name")),
    sa.column("summary", sa.JSON()),
    sa.column("process_id", sa.BigInteger()),
    sa.column("table_id", sa.Integer()),
    sa.column("plan_time", sa.DateTime(timezone=True)),
)
identifier = sa.table("table_identifier", sa.column("table_id"), *(sa.column(name, sa.String()) for name in KEY[:3]))
runtime = sa.table("table_runtime", sa.column("table_id"), sa.column("optimizing_group", sa.String()))


def _totals_table(name: str, grouped: bool) -> Any:
    return sa.table(
        name,
        *(sa.column(column, sa.String()) for column in (*KEY, *(("group_name",) if grouped else ()))),
        sa.column("count", sa.BigInteger()),
        sa.column("sums", sa.JSON()),
    )


def _create_totals(name: str, grouped: bool) -> None:
    lengths = {"catalog_name": 64, "db_name": 255, "table_name": 255, "action": 32, "type": 16, "status": 16}
    if grouped:
        lengths["group_name"] = 64
    op.create_table(
        name,
        *(sa.Column(column, sa.String(length), primary_key=True) for column, length in lengths.items()),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("sums", sa.JSON(), nullable=False),
    )


def _add(into: dict[tuple[str, ...], list[Any]], key: tuple[str, ...], count: int, sums: dict[str, Any]) -> None:
    entry = into.setdefault(key, [0, {}])
    entry[0] += count
    for field, value in (sums or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            entry[1][field] = entry[1].get(field, 0) + value


def upgrade() -> None:
    _create_totals("process_totals", grouped=True)
    bind = op.get_bind()
    totals: dict[tuple[str, ...], list[Any]] = {}
    pruned = _totals_table("pruned_process_totals", grouped=False)
    group_of = (
        sa.select(runtime.c.optimizing_group)
        .select_from(identifier.join(runtime, runtime.c.table_id == identifier.c.table_id))
        .where(*(identifier.c[name] == pruned.c[name] for name in KEY[:3]))
        .scalar_subquery()
    )
    for row in bind.execute(sa.select(*(pruned.c[name] for name in KEY), group_of, pruned.c.count, pruned.c.sums)):
        _add(totals, (*row[:6], row[6] or ""), row[7], row[8])
    kept = sa.select(*(process.c[name] for name in KEY), process.c.group_name, process.c.summary)
    for row in bind.execute(kept.where(process.c.status.in_(ENDED))):
        _add(totals, tuple(row[:7]), 1, row[7])
    table = _totals_table("process_totals", grouped=True)
    names = (*KEY, "group_name")
    rows = [{**dict(zip(names, key, strict=True)), "count": n, "sums": sums} for key, (n, sums) in totals.items()]
    if rows:
        bind.execute(table.insert(), rows)
    op.drop_table("pruned_process_totals")
    op.create_table(
        "process_streak",
        sa.Column("table_id", sa.Integer(), primary_key=True),
        sa.Column("action", sa.String(32), primary_key=True),
        sa.Column("failed_in_a_row", sa.Integer(), nullable=False),
        sa.Column("newest_planned_at", sa.DateTime(timezone=True), nullable=False),
    )
    streaks: dict[tuple[int, str], dict[str, Any]] = {}
    ended = sa.select(process.c.table_id, process.c.action, process.c.status, process.c.plan_time)
    for table_id, action, status, planned in bind.execute(
        ended.where(process.c.status.in_(ENDED)).order_by(process.c.process_id)
    ):
        streak = streaks.setdefault((table_id, action), {"table_id": table_id, "action": action, "failed_in_a_row": 0})
        streak["failed_in_a_row"] = streak["failed_in_a_row"] + 1 if status == "failed" else 0
        streak["newest_planned_at"] = planned
    if streaks:
        columns = ("table_id", "action", "failed_in_a_row", "newest_planned_at")
        bind.execute(sa.table("process_streak", *(sa.column(c) for c in columns)).insert(), list(streaks.values()))


def downgrade() -> None:
    op.drop_table("process_streak")
    _create_totals("pruned_process_totals", grouped=False)
    bind = op.get_bind()
    totals: dict[tuple[str, ...], list[Any]] = {}
    table = _totals_table("process_totals", grouped=True)
    for row in bind.execute(sa.select(*(table.c[name] for name in KEY), table.c.count, table.c.sums)):
        _add(totals, tuple(row[:6]), row[6], row[7])
    kept: dict[tuple[str, ...], list[Any]] = {}
    query = sa.select(*(process.c[name] for name in KEY), process.c.summary).where(process.c.status.in_(ENDED))
    for row in bind.execute(query):
        _add(kept, tuple(row[:6]), 1, row[6])
    rows = []
    for key, (count, sums) in totals.items():
        kept_count, kept_sums = kept.get(key, [0, {}])
        if count > kept_count:
            left = {field: value - kept_sums.get(field, 0) for field, value in sums.items()}
            rows.append({**dict(zip(KEY, key, strict=True)), "count": count - kept_count, "sums": left})
    if rows:
        bind.execute(_totals_table("pruned_process_totals", grouped=False).insert(), rows)
    op.drop_table("process_totals")
