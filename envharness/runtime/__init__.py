"""Running sessions: the turn loop, the plans it runs, and how runs go on.

In layer order (``tests/test_layers.py``):

- :mod:`.checks`, :mod:`.compare`, :mod:`.hook_memory`, :mod:`.participants` — checking what
  user code returns, comparing two sessions, the hooks' memory rebuilt from evidence, asking
  agents for actions (their capabilities found once per session);
- :mod:`.hooking` (running harness hooks and interpreting their effects), :mod:`.recorder`
  (sealing, holding and committing a session's records);
- :mod:`.plan` — what a session is asked to do, and how it ended;
- :mod:`.resume` — reading where a recorded session or experiment stopped; :mod:`.turn` — one
  turn: observing, asking, vetting, validating, resolving and recording it;
- :mod:`.session` — the turn loop and the session's life around it (start, segments,
  checkpoints, score, end); :mod:`.branching` — checkpoints and branches;
- :mod:`.experiment` — scenarios x trials under one concurrency limit; :mod:`.template` — what
  every session of one harness shares, and the plans stamped out of it;
- :mod:`.continuation` — resume, continue, and finishing an experiment.
"""

from envharness.runtime.session import ProgressCallback, SessionPlan, SessionResult, SessionRunner

__all__ = ["ProgressCallback", "SessionPlan", "SessionResult", "SessionRunner"]
