"""The scripted engineer: gives the answers it was given, for tests and demos.

``ScriptedEngineer(["<patch>…</patch>", …])`` answers every call with (the first ``count`` of)
the same list; ``ScriptedEngineer(rounds=[[…], […]])`` answers call *i* with round *i* (and
nothing once the rounds run out). An answer may be an exception instance, which becomes a
proposal with ``error`` set — an engineer endpoint that is down, without a network.
"""

from __future__ import annotations

from collections.abc import Sequence

from envharness.errors import ConfigurationError
from envharness.optimizer.engineers.contract import FailurePacket, Proposal

__all__ = ["Answer", "ScriptedEngineer"]

Answer = str | BaseException


class ScriptedEngineer:
    """Deterministic answers; ``packets`` keeps every packet it was shown (to inspect)."""

    def __init__(
        self,
        answers: Sequence[Answer] | None = None,
        *,
        rounds: Sequence[Sequence[Answer]] | None = None,
        name: str = "scripted",
        version: str = "scripted@1",
    ) -> None:
        if (answers is None) == (rounds is None):
            raise ConfigurationError("ScriptedEngineer takes answers=[...] or rounds=[[...]]")
        if isinstance(answers, str):
            raise ConfigurationError("answers is a list of answers, not one string")
        self._answers = list(answers) if answers is not None else None
        self._rounds = [list(r) for r in rounds] if rounds is not None else None
        self._name = name
        self._version = version
        self._calls = 0
        self.packets: list[FailurePacket] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return self._version

    async def propose(self, packet: FailurePacket, count: int, *, seed: int) -> list[Proposal]:
        self.packets.append(packet)
        if self._rounds is not None:
            batch = self._rounds[self._calls] if self._calls < len(self._rounds) else []
        else:
            batch = self._answers or []
        self._calls += 1
        return [self._proposal(answer) for answer in batch[:count]]

    def _proposal(self, answer: Answer) -> Proposal:
        if isinstance(answer, BaseException):
            return Proposal(engineer=self._name, error=f"{type(answer).__name__}: {answer}")
        return Proposal(engineer=self._name, text=answer)
