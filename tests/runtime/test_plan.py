"""A plan handed the controls of an experiment keeps everything else it was planned with."""

from __future__ import annotations

import dataclasses

from envharness.runtime.plan import PauseRequest, SessionPlan


def test_run_by_keeps_every_other_field_as_replace_does() -> None:
    # Every field a value of its own: a field the copy forgot would come back as its default.
    values = {field.name: object() for field in dataclasses.fields(SessionPlan)}
    plan = SessionPlan(**values)
    pause, budget = PauseRequest(), object()

    def settling() -> None:
        """Frees nothing: only its identity matters."""

    def commits_to(commits: object) -> None:
        """Takes nothing: only its identity matters."""

    controlled = plan.run_by(pause, settling, budget, commits_to)
    expected = dataclasses.replace(
        plan, pause=pause, settling=settling, shared_budget=budget, commits_to=commits_to
    )
    for field in dataclasses.fields(SessionPlan):
        assert getattr(controlled, field.name) is getattr(expected, field.name), field.name
    assert (
        controlled.pause,
        controlled.settling,
        controlled.shared_budget,
        controlled.commits_to,
    ) == (pause, settling, budget, commits_to)
