"""The two ways a split draft fails loudly instead of hanging: a placement refused before any group exists, and a
collective issued on S alone that the ranks outside S would never join."""

from __future__ import annotations


class DraftGroupError(ValueError):
    """A draft placement that cannot be served (raised before any group is created)."""


class SubsetCollectiveError(RuntimeError):
    """A collective over a group reaching outside S was issued inside a draft-only scope: it would deadlock."""
