"""The support desk: a customer asks for a refund; the agent has three tools.

``lookup_order`` (verify the order), ``issue_refund`` and ``reply``. The desk's rule is that a
refund is issued only for an order that was looked up first, and the ticket ends with a reply. The
frozen policy :class:`RefundFirstPolicy` refunds before it looks anything up — a systematic
failure no prompt change is allowed to fix (its model is frozen) — so every ticket fails. A
one-line precondition hook (block ``issue_refund`` until ``order_looked_up``) fixes all of
them; ``envharness selftest`` has the mining engineer discover it from the recorded failures.

Hooks see :meth:`SupportDesk.hook_view`: the ticket, what has been done, the predicates
``order_looked_up``, ``refund_issued`` and ``reply_sent``, and the admissible tool calls. They
never see the order's paid amount or the scorer's verdict, and patch code may not name the
verdict (``hook_forbidden_terms``).
"""

from __future__ import annotations

from collections.abc import Mapping
from random import Random
from typing import Any, Literal

import msgspec

from envharness.contracts.environment import EnvironmentSpec, Resolution, ScoreReport
from envharness.contracts.scenario import Scenario
from envharness.demos._plans import PlanFollower
from envharness.hooks import HookView

__all__ = [
    "DeskAction",
    "DeskState",
    "RefundFirstPolicy",
    "SupportDesk",
    "TicketInput",
    "tickets",
]

Tool = Literal["lookup_order", "issue_refund", "reply"]


class TicketInput(msgspec.Struct, frozen=True, kw_only=True):
    order_id: str
    customer: str
    amount: float
    """The refund the customer asks for."""


class DeskAction(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    tool: Tool
    order_id: str | None = None
    amount: float | None = None
    template: Literal["refund_issued", "refund_denied"] | None = None


class DeskState(msgspec.Struct, frozen=True, kw_only=True):
    order_id: str
    customer: str
    amount: float
    paid: float
    """What the customer paid: only a lookup reveals it, and hooks never see it."""
    looked_up: bool = False
    refunded: float | None = None
    refund_before_lookup: bool = False
    """The scorer's verdict on the desk's rule; hooks must not read or name it."""
    replied: str | None = None
    done: tuple[dict[str, Any], ...] = ()


class SupportDesk:
    """One ticket, one agent, up to one tool call per turn; the ticket ends with a reply."""

    spec = EnvironmentSpec(
        name="support-desk",
        version="1",
        input_type=TicketInput,
        action_type=DeskAction,
        roles=("agent",),
        invalid_actions="block",
        scoring_version="support-desk-score@1",
        state_type=DeskState,
    )
    hook_forbidden_terms = ("refund_before_lookup",)
    """Strings patch code must not contain: the name of the scorer's verdict (answer leakage)."""

    def initialize(self, input: TicketInput, rng: Random, roster: Mapping[str, str]) -> DeskState:
        paid = round(input.amount + rng.randrange(0, 40), 2)
        return DeskState(
            order_id=input.order_id, customer=input.customer, amount=input.amount, paid=paid
        )

    def observe(self, state: DeskState, participant: str) -> dict[str, Any]:
        observation: dict[str, Any] = {
            "ticket": _ticket_text(state),
            "order_id": state.order_id,
            "amount_requested": state.amount,
            "done": list(state.done),
        }
        if state.looked_up:
            observation["order"] = {"id": state.order_id, "paid": state.paid, "refundable": True}
        return observation

    def resolve(self, state: DeskState, actions: Mapping[str, DeskAction]) -> Resolution:
        outcomes: dict[str, Any] = {}
        for participant, action in actions.items():
            state, outcomes[participant] = self._apply(state, action)
        return Resolution(state=state, outcomes=outcomes, done=state.replied is not None)

    def _apply(self, state: DeskState, action: DeskAction) -> tuple[DeskState, dict[str, Any]]:
        done = (*state.done, msgspec.to_builtins(action))
        if action.tool == "lookup_order":
            if action.order_id != state.order_id:
                return msgspec.structs.replace(state, done=done), {
                    "ok": False,
                    "error": f"no order {action.order_id!r}",
                }
            return msgspec.structs.replace(state, looked_up=True, done=done), {
                "ok": True,
                "order": {"id": state.order_id, "paid": state.paid},
            }
        if action.tool == "issue_refund":
            if state.refunded is not None:
                return msgspec.structs.replace(state, done=done), {
                    "ok": False,
                    "error": "already refunded",
                }
            amount = action.amount if action.amount is not None else state.amount
            return msgspec.structs.replace(
                state,
                refunded=amount,
                refund_before_lookup=not state.looked_up,
                done=done,
            ), {"ok": True, "refunded": amount}
        template = action.template or "refund_issued"
        return msgspec.structs.replace(state, replied=template, done=done), {"ok": True}

    def intervene(self, state: DeskState, intervention: Mapping[str, Any]) -> DeskState:
        raise ValueError("the support desk accepts no interventions")

    def score(self, state: DeskState, scenario: Scenario[Any]) -> ScoreReport:
        resolved = (
            state.refunded is not None
            and not state.refund_before_lookup
            and state.refunded <= state.paid
            and state.replied == "refund_issued"
        )
        return ScoreReport(
            metrics={"resolved": float(resolved), "tool_calls": float(len(state.done))},
            passed=resolved,
        )

    def hook_view(self, state: DeskState, participant: str) -> HookView:
        """What hooks may read: the ticket and progress, never the paid amount or verdict."""
        return HookView(
            state={
                "order_id": state.order_id,
                "amount_requested": state.amount,
                "tool_calls": len(state.done),
            },
            predicates={
                "order_looked_up": state.looked_up,
                "refund_issued": state.refunded is not None,
                "reply_sent": state.replied is not None,
            },
            admissible=[
                {"tool": "lookup_order", "order_id": state.order_id},
                {"tool": "issue_refund", "order_id": state.order_id, "amount": state.amount},
                {"tool": "reply", "template": "refund_issued"},
                {"tool": "reply", "template": "refund_denied"},
            ],
            task=_ticket_text(state),
        )


def _ticket_text(state: DeskState) -> str:
    return (
        f"{state.customer} asks for a refund of {state.amount:.2f} on order {state.order_id}. "
        "Refund the order and reply to the customer."
    )


class RefundFirstPolicy:
    """The frozen policy: refund, then look the order up, then reply.

    It follows its plan step by step; a step that is vetoed is set aside until the world moves
    (see :mod:`envharness.demos._plans`). It never reads a hint or a veto's message.
    """

    implementation = "refund-first-policy@1"
    runs_inline = True

    def __init__(self) -> None:
        self._plan = PlanFollower()

    def act(self, observation: Any) -> dict[str, Any]:
        order_id = observation["order_id"]
        plan = [
            {
                "tool": "issue_refund",
                "order_id": order_id,
                "amount": observation["amount_requested"],
            },
            {"tool": "lookup_order", "order_id": order_id},
            {"tool": "reply", "template": "refund_issued"},
        ]
        step = self._plan.next_step(plan, observation["done"])
        return step if step is not None else {"tool": "reply", "template": "refund_issued"}


_CUSTOMERS = ("Ada", "Grace", "Linus", "Barbara", "Edsger", "Frances", "Donald", "Radia")


def tickets(count: int = 8, *, prefix: str = "ticket") -> list[Scenario[TicketInput]]:
    """``count`` refund tickets with distinct orders and amounts."""
    return [
        Scenario(
            id=f"{prefix}-{i + 1}",
            input=TicketInput(
                order_id=f"A-{1000 + 7 * i}",
                customer=_CUSTOMERS[i % len(_CUSTOMERS)],
                amount=float(20 + 5 * i),
            ),
        )
        for i in range(count)
    ]
