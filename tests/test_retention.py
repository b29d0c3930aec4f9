"""What snapshot expiry keeps and why (lakewarden/domain/retention.py), on histories written out by hand: Iceberg's
ref rules at their boundaries, and the snapshots writers need (Flink checkpoints, write-audit-publish, a running
rewrite's base, data expiration's last commit). tests/test_writer_safe_maintenance.py checks the same rules
against Iceberg's own expiry on real tables."""

from __future__ import annotations

from lakewarden.domain.retention import (
    FLINK_CHECKPOINT,
    FLINK_JOB_ID,
    FLINK_OPERATOR_ID,
    OWN_COMMIT,
    PUBLISHED_WAP_ID,
    WAP_ID,
    Need,
    Policy,
    Ref,
    Snapshot,
    latest_external_commit,
    next_expiry_at,
    plan_expiry,
)

H = 3_600_000  # an hour, in ms
NOW = 1000 * H
MAIN = Ref("main", 10)


def history(*specs: tuple[int, int | None, int, dict[str, str]]) -> list[Snapshot]:
    """(id, parent, hours before NOW, summary) -> snapshots in commit order."""
    return [Snapshot(i, parent, NOW - hours * H, summary) for i, parent, hours, summary in specs]


def line(count: int, own: set[int] | None = None) -> list[Snapshot]:
    """Snapshots 1..count on one line, snapshot i committed (count - i + 1) hours before NOW; those in `own`
    committed by lakewarden."""
    own = own or set()
    return history(
        *((i, i - 1 or None, count - i + 1, {OWN_COMMIT: "1"} if i in own else {}) for i in range(1, count + 1))
    )


def test_main_keeps_min_count_or_what_is_newer_than_the_cutoff_whichever_is_more() -> None:
    snapshots = line(10)
    assert plan_expiry(snapshots, [MAIN], Policy(keep_ms=4 * H, min_count=1), NOW).expired == [1, 2, 3, 4, 5, 6]
    assert plan_expiry(snapshots, [MAIN], Policy(keep_ms=4 * H, min_count=6), NOW).expired == [1, 2, 3, 4]
    # `older than`: a snapshot exactly at the cutoff stays
    assert plan_expiry(snapshots, [MAIN], Policy(keep_ms=5 * H, min_count=1), NOW).expired == [1, 2, 3, 4, 5]
    # retainLast is at least 1 whatever the table says
    assert plan_expiry(snapshots, [MAIN], Policy(keep_ms=0, min_count=0), NOW).expired == list(range(1, 10))


def test_a_branch_keeps_by_its_own_retention_and_stops_at_the_first_snapshot_it_need_not_keep() -> None:
    # main: 1-2-3-4-10; branch b: 3-5-6-7 (7 its head)
    snapshots = history(
        (1, None, 20, {}), (2, 1, 19, {}), (3, 2, 18, {}), (5, 3, 17, {}), (6, 5, 16, {}), (7, 6, 15, {}),
        (4, 3, 14, {}), (10, 4, 1, {}),
    )  # fmt: skip
    policy = Policy(keep_ms=2 * H, min_count=1)
    plain = plan_expiry(snapshots, [MAIN, Ref("b", 7)], policy, NOW)
    assert plain.expired == [1, 2, 3, 5, 6, 4]  # oldest first; b keeps only its head by the table's rules
    own = plan_expiry(snapshots, [MAIN, Ref("b", 7, min_snapshots_to_keep=3)], policy, NOW)
    assert own.expired == [1, 2, 3, 4]
    aged = plan_expiry(snapshots, [MAIN, Ref("b", 7, max_snapshot_age_ms=17 * H)], policy, NOW)
    assert aged.expired == [1, 2, 3, 4]  # 5 is exactly 17 h old: kept; 3 is older: the walk stops there


def test_refs_past_their_max_age_are_dropped_and_their_snapshots_go_with_them() -> None:
    snapshots = line(10)
    policy = Policy(keep_ms=2 * H, min_count=1)
    young_tag = Ref("v1", 3, branch=False, max_ref_age_ms=8 * H)  # 3 is 8 h old: kept (not older than)
    old_tag = Ref("v0", 2, branch=False, max_ref_age_ms=8 * H)  # 2 is 9 h old: dropped
    plan = plan_expiry(snapshots, [MAIN, young_tag, old_tag], policy, NOW)
    assert plan.expired_refs == ["v0"] and 3 not in plan.expired and 2 in plan.expired
    # the table's default applies to a ref that sets none; main is never dropped
    plan = plan_expiry(
        snapshots, [Ref("main", 10), Ref("v0", 2, branch=False)], Policy(2 * H, 1, max_ref_age_ms=H), NOW
    )
    assert plan.expired_refs == ["v0"] and 10 not in plan.expired
    # a ref to a snapshot that is not there is dropped, as Iceberg drops it
    assert plan_expiry(snapshots, [MAIN, Ref("gone", 99)], policy, NOW).expired_refs == ["gone"]


def test_a_snapshot_no_ref_reaches_stays_while_it_is_not_older_than_the_cutoff() -> None:
    # 7 and 8 were committed off main (a rolled-back write, an expired branch's): reached by no ref
    snapshots = history((1, None, 9, {}), (7, 1, 8, {}), (8, 7, 3, {}), (10, 1, 1, {}))
    plan = plan_expiry(snapshots, [MAIN], Policy(keep_ms=4 * H, min_count=1), NOW)
    assert plan.expired == [1, 7]


def flink(job: str, checkpoint: int, operator: str = "") -> dict[str, str]:
    summary = {FLINK_JOB_ID: job, FLINK_CHECKPOINT: str(checkpoint)}
    if operator:
        summary[FLINK_OPERATOR_ID] = operator
    return summary


def test_each_flink_jobs_newest_checkpoint_snapshot_is_kept_with_everything_after_it() -> None:
    snapshots = history(
        (1, None, 50, flink("job-a", 1)),
        (2, 1, 40, flink("job-a", 2)),  # job a's newest
        (3, 2, 30, flink("job-b", 7)),  # job b's newest
        (4, 3, 20, {OWN_COMMIT: "9"}),
        (10, 4, 10, {OWN_COMMIT: "9"}),
    )
    plan = plan_expiry(snapshots, [MAIN], Policy(keep_ms=H, min_count=1), NOW)
    assert plan.expired == [1]  # kept from job a's checkpoint on
    assert [(k.snapshot_id, k.need) for k in plan.needed] == [(2, Need.FLINK_CHECKPOINT), (3, Need.FLINK_CHECKPOINT)]
    assert "job-a restores from checkpoint 2" in plan.needed[0].detail
    # Amoro keeps the newest of any job only (3): job a restoring would walk back to a missing snapshot
    # two sink operators of one job are two writers
    two = history(
        (1, None, 50, flink("j", 5, "op1")), (2, 1, 40, flink("j", 6, "op2")), (10, 2, 1, flink("j", 7, "op2"))
    )
    assert plan_expiry(two, [MAIN], Policy(keep_ms=H, min_count=1), NOW).expired == []
    # past the retention a job is gone for good: its snapshot is no longer held
    short = Policy(keep_ms=H, min_count=1, flink_retention_ms=35 * H)
    assert plan_expiry(snapshots, [MAIN], short, NOW).expired == [1, 2]
    assert plan_expiry(snapshots, [MAIN], Policy(keep_ms=H, min_count=1, flink_retention_ms=40 * H), NOW).expired == [1]


def test_the_last_commit_lakewarden_did_not_make_is_kept_for_data_expiration() -> None:
    snapshots = line(10, own={7, 8, 9, 10})
    assert latest_external_commit(snapshots) == snapshots[5]
    plan = plan_expiry(snapshots, [MAIN], Policy(keep_ms=H, min_count=1), NOW)
    assert plan.expired == [1, 2, 3, 4, 5]
    assert [(k.snapshot_id, k.need) for k in plan.needed] == [(6, Need.LAST_COMMIT)]
    assert latest_external_commit(line(3, own={1, 2, 3})) is None


def test_a_staged_write_is_kept_until_published_or_abandoned_past_its_retention() -> None:
    snapshots = history(
        (1, None, 60, {}),
        (5, 1, 50, {WAP_ID: "audit-1"}),  # staged, not published
        (6, 1, 45, {WAP_ID: "audit-2"}),  # staged, published as 7
        (7, 1, 40, {PUBLISHED_WAP_ID: "audit-2"}),
        (10, 7, 1, {}),
    )
    plan = plan_expiry(snapshots, [MAIN], Policy(keep_ms=H, min_count=1), NOW)
    assert [(k.snapshot_id, k.need) for k in plan.needed] == [(5, Need.WAP_STAGED), (10, Need.LAST_COMMIT)]
    assert plan.expired == [1]  # 5 and all after it stay; 1 (main's old snapshot) goes
    abandoned = plan_expiry(snapshots, [MAIN], Policy(keep_ms=H, min_count=1, wap_retention_ms=49 * H), NOW)
    assert abandoned.expired == [1, 5, 6, 7]
    # staged on a branch (`spark.wap.branch`): the branch's own retention holds it, not this rule
    on_branch = plan_expiry(snapshots, [MAIN, Ref("audit", 5)], Policy(keep_ms=H, min_count=1), NOW)
    assert all(k.need is not Need.WAP_STAGED for k in on_branch.needed)


def test_a_running_rewrites_base_is_kept_and_a_branchs_own_age_limit_is_not_overridden() -> None:
    snapshots = line(10)
    plan = plan_expiry(snapshots, [MAIN], Policy(keep_ms=H, min_count=1), NOW, {4: "self-optimizing process 12"})
    assert plan.expired == [1, 2, 3]
    assert str(plan.needed[0]) == "4: the base of self-optimizing process 12"
    # main sets its own max-snapshot-age-ms: the owner's word, not lowered; the expiry would remove the base
    strict = Ref("main", 10, max_snapshot_age_ms=2 * H)
    blocked = plan_expiry(snapshots, [strict], Policy(keep_ms=H, min_count=1), NOW, {4: "process 12"})
    assert [k.snapshot_id for k in blocked.blocked] == [4]
    assert plan_expiry(snapshots, [strict], Policy(keep_ms=H, min_count=1), NOW).blocked == []


def test_the_base_of_lakewardens_recent_work_stays_for_the_yield_window() -> None:
    """A writer that planned on snapshot 3 may still commit after lakewarden's rewrite 4 landed on top of it: 3,
    and with it the files the rewrite removed, stay until 4 is older than the window; then the usual rules."""
    snapshots = history((1, None, 5, {}), (2, 1, 4, {}), (3, 2, 3, {}))
    snapshots += [Snapshot(4, 3, NOW - H // 2, {OWN_COMMIT: "9"}), Snapshot(5, 4, NOW - H // 4, {})]
    main = Ref("main", 5)
    windowed = Policy(keep_ms=H, min_count=1, yield_window_ms=H)
    plan = plan_expiry(snapshots, [main], windowed, NOW)
    assert plan.expired == [1, 2]
    yielding = [k for k in plan.needed if k.need is Need.YIELD_BASE]
    assert [k.snapshot_id for k in yielding] == [3] and "snapshot 4" in yielding[0].detail
    # the window closes half an hour on (strictly older than it): the base goes with the next expiry
    assert next_expiry_at(snapshots, [main], windowed, NOW, 24 * H) == NOW + H // 2 + 1
    later = plan_expiry(snapshots, [main], windowed, NOW + H // 2 + 1)
    assert later.expired == [1, 2, 3, 4] and all(k.need is not Need.YIELD_BASE for k in later.needed)
    # off (no window), or a writer's own commit on top: nothing is kept for it
    assert plan_expiry(snapshots, [main], Policy(keep_ms=H, min_count=1), NOW).expired == [1, 2, 3]
    theirs = [*snapshots[:3], Snapshot(4, 3, NOW - H // 2, {}), snapshots[4]]
    assert plan_expiry(theirs, [main], windowed, NOW).expired == [1, 2, 3]
