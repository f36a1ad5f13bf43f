"""Who is to blame: errors of a patch, told apart from errors of the machinery that runs it.

The optimizer rewards a patch by what its reruns measure. If a crash caused by a patch counted as
"no result", a losing patch could turn its negative reward into zero by crashing the rerun; so
every failure the patch's code can cause is a :class:`PatchError` (refused before it ran) or a
:class:`PatchFailure` (failed while it ran), and only what the patch cannot have caused is a
:class:`SandboxInfrastructureError`::

    EnvharnessError
    ├── PatchError                    the patch is at fault; it never ran
    │   ├── PatchParseError           the engineer's answer is not <think>…</think><patch>…</patch>
    │   │   └── PatchSchemaError      the patch JSON does not have the documented shape
    │   ├── PatchPolicyError          the code uses a construct the AST policy refuses (policy.py)
    │   └── PatchSmokeTestError       a hook failed on the synthetic smoke-test context
    └── HookFailure                   (envharness.hooks) a hook call failed; the runtime records
        │                             it and carries on with no intervention
        ├── PatchFailure              the patch's code raised, overran a budget, returned garbage
        └── SandboxInfrastructureError  the sandbox could not run the call (not the patch's fault)

Both kinds of ``HookFailure`` carry ``cause`` (``"patch"`` or ``"infrastructure"``) so the
evidence (the failure's type name) and the optimizer can count them apart.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from envharness.errors import EnvharnessError
from envharness.hooks import HookFailure

__all__ = [
    "FailureKind",
    "PatchError",
    "PatchFailure",
    "PatchParseError",
    "PatchPolicyError",
    "PatchSchemaError",
    "PatchSmokeTestError",
    "SandboxInfrastructureError",
]

FailureKind = Literal[
    "exception",
    "timeout",
    "lines",
    "cpu",
    "memory",
    "recursion",
    "result",
    "notebook",
    "inadmissible",
    "crash",
]
"""How a patch's hook call failed: it raised; overran its wall-clock timeout, its line budget or
its CPU limit; ran out of memory or recursion depth; returned something that is not an effect;
left a notebook that is not JSON or is too big; rewrote to an action that is not admissible; or
its sandbox process died during the call."""


class PatchError(EnvharnessError):
    """The patch was refused before any of its code ran; the message says why and where."""


class PatchParseError(PatchError):
    """The engineer's answer could not be read as ``<think>…</think><patch>…</patch>``."""


class PatchSchemaError(PatchParseError):
    """The patch JSON is not a list of ``add_code_hook`` operations (docs/patches.md)."""


class PatchPolicyError(PatchError):
    """The hook code uses constructs the AST policy refuses; ``violations`` lists them."""

    def __init__(self, message: str, violations: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.violations = violations


class PatchSmokeTestError(PatchError):
    """A hook failed when called once on a synthetic context; ``report`` holds every result."""

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class PatchFailure(HookFailure):
    """The patch's code failed during a call: counted against the patch, never as neutral."""

    cause: ClassVar[str] = "patch"

    def __init__(self, hook: str, problem: str, *, kind: FailureKind = "exception") -> None:
        super().__init__(hook, problem)
        self.kind: FailureKind = kind


class SandboxInfrastructureError(HookFailure):
    """The sandbox could not run the call for reasons the patch cannot have caused (its worker
    could not start, was not open, or broke the protocol outside a call)."""

    cause: ClassVar[str] = "infrastructure"

    def __init__(self, problem: str, *, hook: str = "-") -> None:
        super().__init__(hook, problem)
        self.args = (f"the hook sandbox failed (not the patch's fault): {problem}",)
