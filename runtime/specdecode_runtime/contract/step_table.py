"""The step table: step count per batch-size range, the one value the tuner sends to a pod.

Serialised only by :meth:`StepTable.to_json` (the body of ``GET/PUT`` :data:`STEPS_PATH`, and the tuner's status
field), validated only by :func:`parse_step_table`: the operator, the runtime's endpoint and the simulator share
this class so the wire format has a single definition.
"""

from __future__ import annotations

from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .input_files import format_validation_error

STEPS_PATH = "/specdecode/v1/steps"
MAX_TABLE_ENTRIES = 16


class StepTableError(ValueError):
    def __init__(self, errors: list[str], allowed: list[int] | None = None) -> None:
        self.errors = errors
        self.allowed = allowed
        super().__init__("; ".join(errors))


class StepEntry(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)
    # strict: JSON integers only (``true``, ``3.0`` and ``"3"`` are refused, not coerced)
    min_batch: int = Field(ge=1, le=1 << 20, alias="minBatch", strict=True)
    steps: int = Field(ge=0, le=64, strict=True)


class StepTable(BaseModel):
    """Steps per batch size: the entry with the largest ``minBatch`` <= the batch applies; the first starts at 1 so
    every batch size is covered. ``steps`` 0 = no speculation for those batches."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)
    table: list[StepEntry] = Field(min_length=1, max_length=MAX_TABLE_ENTRIES)

    @model_validator(mode="after")
    def _ordered(self) -> StepTable:
        seen: set[int] = set()
        for i, e in enumerate(self.table):
            if e.min_batch in seen:
                raise ValueError(f"table[{i}].minBatch {e.min_batch} appears twice")
            seen.add(e.min_batch)
        if 1 not in seen:
            raise ValueError("one entry must have minBatch 1 so that every batch size has a step count")
        return self

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[int, int]]) -> StepTable:
        return cls(table=[StepEntry(min_batch=int(b), steps=int(s)) for b, s in pairs])

    @classmethod
    def single(cls, steps: int) -> StepTable:
        return cls.from_pairs([(1, steps)])

    def entries(self) -> list[StepEntry]:
        return sorted(self.table, key=lambda e: e.min_batch)

    def pairs(self) -> list[tuple[int, int]]:
        return [(e.min_batch, e.steps) for e in self.entries()]

    def lookup(self, batch: int) -> int:
        steps = self.entries()[0].steps
        for e in self.entries():
            if e.min_batch <= batch:
                steps = e.steps
            else:
                break
        return steps

    def check_candidates(self, candidates: Iterable[int]) -> None:
        allowed = sorted(set(int(c) for c in candidates))
        bad = [
            f"table[{i}].steps: {e.steps} is not a captured candidate"
            for i, e in enumerate(self.table)
            if e.steps not in allowed
        ]
        if bad:
            raise StepTableError(bad + [f"allowed steps: {allowed}"], allowed)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def parse_step_table(data: Any, candidates: Iterable[int] | None = None) -> StepTable:
    """Validate a request body; errors name the field (``table[1].steps: ...``)."""
    try:
        table = StepTable.model_validate(data)
    except ValidationError as err:
        raise StepTableError(format_validation_error(err)) from None
    if candidates is not None:
        table.check_candidates(candidates)
    return table
