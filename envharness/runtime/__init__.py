"""Running sessions: the turn loop and the plans it runs."""

from envharness.runtime.session import ProgressCallback, SessionPlan, SessionResult, SessionRunner

__all__ = ["ProgressCallback", "SessionPlan", "SessionResult", "SessionRunner"]
