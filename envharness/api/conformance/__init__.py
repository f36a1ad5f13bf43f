"""Does an environment keep the contract the runtime relies on? (``envharness check-env``)

Like Gymnasium's ``check_env`` and PettingZoo's ``api_test``, but for this contract: what makes
checkpoints, branches, resume and datasets exact. :func:`check_environment` runs an environment
(a Python class or factory, an adapter, a program in another language) with a probe agent that
answers legal-looking moves, in a temporary store, and reports one result per check, each
failure with the fix:

``spec``
    The factory makes a fresh environment each call with the four methods, an ``acting``
    method when it says who acts, an action type agents can be shown as JSON Schema, and the
    same spec every time (a resume compares it with the recorded one).
``encoding``
    The initial state encodes with msgspec and comes back the same from its stored JSON (typed
    again through ``state_type``); every observation encodes (and converts to
    ``observation_type``); ``acting`` names participants; ``render_text`` gives text.
``determinism``
    Two sessions with the same seed record the same evidence (every payload, ids and timings
    aside): what replays, comparisons and the optimizer's reruns assume.
``checkpoint``
    A session stopped halfway, checkpointed and continued (its state restored from the store
    on a fresh environment instance) records the same second half as the uninterrupted one.
``observe-private``
    What one participant observes depends on nothing but the state and that participant: the
    same after observing the others, and on a fresh instance given the restored state. Where
    the environment declares ``private_state`` — dotted paths to mappings keyed by participant
    (``private_state = ("hands",)`` for ``state.hands["alice"]``) — each other participant's
    entry is replaced by the one another seed deals, and the observation must not change.
    *Limits:* without a declaration nothing says which data are private, so a leak that is a
    plain function of the state (showing everyone's hand) is not found; with one, only the
    declared entries are varied, and a replacement the environment cannot observe (it raises)
    counts as inconclusive. Adapters whose state is a seed and moves cannot be varied this
    way: their own tests check privacy (e.g. PettingZoo's hold'em hands).
``resolve-failure``
    An exception inside ``resolve`` ends the session ``failed``, with the reason recorded. The
    environment is wrapped so that its ``resolve`` raises (sync or async, as it is), so this
    checks the path the runtime takes with this environment, not the environment's own error
    reporting.

The report also holds the mean time of each environment method over every call the checks
made. Setting up the check itself — an object that is not an environment, an input the
environment's input type refuses, a participant with an unknown role — raises
:class:`~envharness.errors.ConfigurationError` instead.

In layer order: :mod:`.report` (results, and the signals a check raises), :mod:`.compare`
(evidence compared, states varied) and :mod:`.probe` (the probe agent, the timed environment);
:mod:`.runs` (the environment's instances and probe sessions); :mod:`.checks` (one function per
check); :mod:`.suite` (:func:`check_environment`).
"""

from envharness.api.conformance.report import (
    CHECKS,
    DEFAULT_TURNS,
    CallTiming,
    CheckResult,
    CheckStatus,
    ConformanceReport,
)
from envharness.api.conformance.suite import check_environment

__all__ = [
    "CHECKS",
    "DEFAULT_TURNS",
    "CallTiming",
    "CheckResult",
    "CheckStatus",
    "ConformanceReport",
    "check_environment",
]
