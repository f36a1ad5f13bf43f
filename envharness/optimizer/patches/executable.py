"""``ExecutableHarness``: a patch's code hooks, run in a sandbox, as the runtime's ``HarnessHooks``.

Validation is a pipeline, each stage refusing with an error that names the problem:

1. **schema** — ``HarnessPatch.from_dict`` (``PatchSchemaError``);
2. **AST policy** — ``check_patch`` (``PatchPolicyError``, naming construct and line);
3. **smoke test** — each hook called once on a synthetic context (:meth:`ExecutableHarness.
   smoke_test`, ``PatchSmokeTestError`` through :meth:`SmokeReport.raise_for_failure`);
4. **execution** — :meth:`ExecutableHarness.call`, where any failure is a ``HookFailure``: a
   ``PatchFailure`` when the patch's code is to blame (the runtime records it and goes on with no
   intervention; the optimizer counts it against the patch), a ``SandboxInfrastructureError``
   when it is not.

:func:`validate_patch` runs stages 1 to 3 and returns a harness ready for stage 4.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from envharness.errors import ConfigurationError
from envharness.hooks import (
    HOOK_NAMES,
    Effect,
    HookContext,
    HookFailure,
    HookName,
    Rewrite,
    StepSummary,
    checked_notebook,
    effect_from_json,
)
from envharness.optimizer.engineers.contract import FailurePacket, FailureStep
from envharness.optimizer.patches.errors import (
    PatchFailure,
    PatchSmokeTestError,
    SandboxInfrastructureError,
)
from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.patches.policy import check_patch
from envharness.optimizer.patches.sandbox import HookProgram, Sandbox

__all__ = [
    "ExecutableHarness",
    "SmokeReport",
    "SmokeResult",
    "contexts_from_packet",
    "default_version",
    "smoke_contexts",
    "validate_patch",
]


class SmokeResult(msgspec.Struct, frozen=True, kw_only=True):
    """One smoke-test call: the hook, its step, and the effect it chose or why it failed."""

    hook: HookName
    step: int
    ok: bool
    effect: str | None = None
    problem: str | None = None
    kind: str | None = None
    seconds: float = 0.0


class SmokeReport(msgspec.Struct, frozen=True, kw_only=True):
    """Every smoke-test call of one harness version; ``ok`` when none failed."""

    version: str
    results: tuple[SmokeResult, ...] = ()

    @property
    def ok(self) -> bool:
        return all(result.ok for result in self.results)

    @property
    def failures(self) -> tuple[SmokeResult, ...]:
        return tuple(result for result in self.results if not result.ok)

    def __str__(self) -> str:
        if not self.results:
            return f"smoke test of {self.version}: no hooks to call"
        verdict = "passed" if self.ok else f"failed ({len(self.failures)} of {len(self.results)})"
        lines = [f"smoke test of {self.version} {verdict}:"]
        for result in self.results:
            if result.ok:
                what = f"ok, {result.effect or 'no effect'}"
            else:
                what = f"FAILED ({result.kind}): {result.problem}"
            lines.append(f"  {result.hook} at step {result.step}: {what}")
        return "\n".join(lines)

    def raise_for_failure(self) -> None:
        """Raise :class:`PatchSmokeTestError` (carrying this report) when a call failed."""
        if not self.ok:
            raise PatchSmokeTestError(str(self), self)


class ExecutableHarness:
    """A patch's code hooks as ``HarnessHooks``: every call runs in the sandbox.

    Build it with :meth:`from_patch` (schema and policy checked) or :func:`validate_patch`
    (smoke-tested too). The sandbox is not owned: open a ``SubprocessSandbox`` around the
    harness's use (``async with SubprocessSandbox() as sandbox:``).
    """

    def __init__(self, patch: HarnessPatch, *, sandbox: Sandbox, version: str) -> None:
        self._patch = patch
        self._sandbox = sandbox
        self._version = version
        self._program = HookProgram.from_patch(patch)
        self._defined = patch.hook_names

    @classmethod
    def from_patch(
        cls,
        patch: HarnessPatch | Mapping[str, Any] | Sequence[Any],
        *,
        sandbox: Sandbox,
        version: str | None = None,
        forbidden_terms: Sequence[str] = (),
    ) -> ExecutableHarness:
        """Check ``patch`` (a ``HarnessPatch`` or its JSON) against the schema and the AST policy.

        ``version`` defaults to ``patch-<first 12 hex digits of the digest>``; ``forbidden_terms``
        are the environment's answer-leakage terms. Raises ``PatchSchemaError`` or
        ``PatchPolicyError``.
        """
        if not isinstance(patch, HarnessPatch):
            patch = HarnessPatch.from_dict(patch)
        if not isinstance(sandbox, Sandbox):
            raise ConfigurationError(
                f"sandbox must be a LocalSandbox, a SubprocessSandbox or another Sandbox, not "
                f"{type(sandbox).__name__}"
            )
        if version is None:
            version = default_version(patch)
        elif not isinstance(version, str) or not version:
            raise ConfigurationError(f"version must be a non-empty string, not {version!r}")
        check_patch(patch, forbidden_terms=forbidden_terms)
        return cls(patch, sandbox=sandbox, version=version)

    @property
    def version(self) -> str:
        return self._version

    @property
    def defined(self) -> frozenset[HookName]:
        return self._defined

    @property
    def patch(self) -> HarnessPatch:
        return self._patch

    @property
    def sandbox(self) -> Sandbox:
        return self._sandbox

    def __repr__(self) -> str:
        hooks = ", ".join(hook.hook for hook in self._patch.hooks)
        return (
            f"ExecutableHarness({self._version!r}, hooks=[{hooks}], sandbox={self._sandbox.name})"
        )

    async def call(
        self, hook: HookName, ctx: HookContext, notebook: dict[str, Any]
    ) -> tuple[Effect | None, dict[str, Any]]:
        """Run the patch's ``hook`` code hooks in the sandbox; raises ``HookFailure`` subclasses."""
        if hook not in self._defined:
            return None, notebook
        try:
            context = msgspec.to_builtins(ctx)
        except (TypeError, ValueError) as exc:
            raise SandboxInfrastructureError(
                f"the hook context cannot be sent to the sandbox as JSON: {exc}", hook=hook
            ) from None
        try:
            outcome = await self._sandbox.run(self._program, hook, context, notebook)
        except HookFailure:
            raise
        except Exception as exc:
            raise SandboxInfrastructureError(f"{type(exc).__name__}: {exc}", hook=hook) from exc
        try:
            effect = effect_from_json(outcome.effect)
        except ConfigurationError as exc:
            raise PatchFailure(hook, str(exc), kind="result") from None
        try:
            result = checked_notebook(outcome.notebook, self._sandbox.limits.notebook_bytes)
        except ConfigurationError as exc:
            raise PatchFailure(hook, str(exc), kind="notebook") from None
        if (
            isinstance(effect, Rewrite)
            and ctx.admissible is not None
            and effect.action not in ctx.admissible
        ):
            raise PatchFailure(
                hook,
                f"rewrote the action to {effect.action!r:.200}, which is not one of the "
                f"{len(ctx.admissible)} admissible actions",
                kind="inadmissible",
            )
        return effect, result

    async def smoke_test(self, contexts: Sequence[HookContext] | None = None) -> SmokeReport:
        """Call each defined hook once per context (default: :func:`smoke_contexts`), threading
        one notebook through; a ``PatchFailure`` becomes a failed result, an infrastructure
        error is raised (it says nothing about the patch)."""
        chosen = list(contexts) if contexts is not None else smoke_contexts()
        results = []
        notebook: dict[str, Any] = {}
        for ctx in chosen:
            if ctx.hook not in self._defined:
                continue
            started = time.perf_counter()
            try:
                effect, notebook = await self.call(ctx.hook, ctx, notebook)
            except PatchFailure as exc:
                failed = SmokeResult(
                    hook=ctx.hook,
                    step=ctx.step,
                    ok=False,
                    problem=exc.problem,
                    kind=exc.kind,
                    seconds=time.perf_counter() - started,
                )
                results.append(failed)
                continue
            name = msgspec.to_builtins(effect)["effect"] if effect is not None else None
            seconds = time.perf_counter() - started
            results.append(
                SmokeResult(hook=ctx.hook, step=ctx.step, ok=True, effect=name, seconds=seconds)
            )
        return SmokeReport(version=self._version, results=tuple(results))


async def validate_patch(
    patch: HarnessPatch | Mapping[str, Any] | Sequence[Any],
    *,
    sandbox: Sandbox,
    version: str | None = None,
    forbidden_terms: Sequence[str] = (),
    contexts: Sequence[HookContext] | None = None,
) -> ExecutableHarness:
    """Schema → AST policy → smoke test; the harness, ready to run, or the first stage's error."""
    harness = ExecutableHarness.from_patch(
        patch, sandbox=sandbox, version=version, forbidden_terms=forbidden_terms
    )
    report = await harness.smoke_test(contexts)
    report.raise_for_failure()
    return harness


def default_version(patch: HarnessPatch) -> str:
    """``patch-`` and the first 12 hex digits of the patch's digest."""
    return f"patch-{patch.digest()[:12]}"


def smoke_contexts(
    *,
    state: Mapping[str, Any] | None = None,
    predicates: Mapping[str, bool] | None = None,
    admissible: Sequence[Any] | None = None,
    action: Any = None,
    task: str | None = None,
) -> list[HookContext]:
    """One synthetic context per hook, in the order hooks run (``step`` 0 for ``on_init``, 1 for
    the others); pass what the environment is known to expose to make them realistic. The
    attempted action of ``on_before_action`` and ``on_post_step`` is ``action``, or an empty
    JSON object when it is not given (hooks should read it with ``.get``)."""
    common: dict[str, Any] = {
        "session_id": "smoke-test",
        "participant": "smoke",
        "role": "smoke",
        "state": dict(state or {}),
        "predicates": dict(predicates or {}),
        "admissible": list(admissible) if admissible is not None else None,
        "task": task,
    }
    contexts = []
    for hook in HOOK_NAMES:
        step = 0 if hook == "on_init" else 1
        attempted = None
        if hook in ("on_before_action", "on_post_step"):
            attempted = action if action is not None else {}
        contexts.append(HookContext(hook=hook, step=step, action=attempted, **common))
    return contexts


def contexts_from_packet(packet: FailurePacket, *, limit: int = 8) -> list[HookContext]:
    """Smoke-test contexts from the steps a failure packet shows (what the engineer saw), so a
    hook is tried on the state and predicate keys it will really meet; falls back to
    :func:`smoke_contexts` when the packet has no steps."""
    steps: list[tuple[FailureStep, str | None]] = []
    for example in [cluster.example for cluster in packet.clusters] + list(packet.passing):
        steps.extend((step, example.task) for step in example.steps)
    if not steps:
        return smoke_contexts(task=packet.task)
    contexts = []
    history: list[StepSummary] = []
    for number, (step, task) in enumerate(steps[:limit]):
        hooks = HOOK_NAMES if number == 0 else HOOK_NAMES[1:]
        for hook in hooks:
            contexts.append(
                HookContext(
                    hook=hook,
                    session_id="smoke-test",
                    participant=step.participant,
                    role="smoke",
                    step=0 if hook == "on_init" else step.step,
                    state=dict(step.state),
                    predicates=dict(step.predicates),
                    admissible=list(step.admissible) if step.admissible is not None else None,
                    task=task or packet.task,
                    action=step.action if hook in ("on_before_action", "on_post_step") else None,
                    last_outcome=history[-1].outcome if history else None,
                    history=tuple(history),
                )
            )
        history.append(StepSummary(step=step.step, action=step.action, outcome=step.outcome,
                                   blocked=step.blocked))  # fmt: skip
    return contexts
