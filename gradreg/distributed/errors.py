"""Errors of distributed evaluation (gradreg's own error classes travel back from the workers as they are)."""
from __future__ import annotations

from gradreg.errors import GradregError


class ClusterError(GradregError):
    """The cluster could not finish a step: no workers, or workers kept dying until the retries ran out."""


class ReplicaMismatch(ClusterError):
    """A worker's copy of the model is not in the state a step expects (a new worker, or one that
    applied an update the others have not): the driver resynchronises the replicas and runs the step again."""
