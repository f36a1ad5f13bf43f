"""Sandboxes that run a patch's hook code: in-process (:class:`LocalSandbox`) or in worker
processes under kernel limits (:class:`SubprocessSandbox`, the default for untrusted patches).

Both offer hook code the same small world (``_hookrt``): restricted builtins, read-only ``math``,
``re`` and ``json`` helpers, the effect constructors, a read-only ``ctx`` and a JSON-only ``nb``,
under a line budget and a wall-clock timeout. ``docs/patches.md`` says what each one defends
against and what it does not.
"""

from envharness.optimizer.patches.sandbox.contract import (
    HookCall,
    HookOutcome,
    HookProgram,
    Sandbox,
    SandboxBase,
    SandboxLimits,
)
from envharness.optimizer.patches.sandbox.local import LocalSandbox
from envharness.optimizer.patches.sandbox.process import SANDBOX_ENV, SubprocessSandbox

__all__ = [
    "SANDBOX_ENV",
    "HookCall",
    "HookOutcome",
    "HookProgram",
    "LocalSandbox",
    "Sandbox",
    "SandboxBase",
    "SandboxLimits",
    "SubprocessSandbox",
]
