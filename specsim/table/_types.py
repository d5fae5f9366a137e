"""Value types of the cost table: one cell, the key a table was measured under, a key mismatch."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, NamedTuple, Optional

SCHEMA = 1

# Order of the four costs along the last axis of ``CostTable.costs``.
COST_FIELDS = ("verify_ms", "verify_j", "draft_ms", "draft_j")
VERIFY_MS, VERIFY_J, DRAFT_MS, DRAFT_J = range(4)
# A cell's costs at every context of a table's context axis, one array per cost.
CONTEXT_FIELDS = tuple(f"{f}_at" for f in COST_FIELDS)


class Cell(NamedTuple):
    """The cost of one step at width ``n`` and draft depth ``k`` (``k = 0``: plain decode).

    ``verify_ms``/``verify_j``: one verify step, median wall ms and GPU energy in joules;
    ``draft_ms``/``draft_j``: the ``k`` chained draft steps that fed it (0 at ``k = 0``).
    """

    n: int
    k: int
    verify_ms: float
    verify_j: float
    draft_ms: float
    draft_j: float

    @property
    def step_ms(self) -> float:
        """Wall ms of the whole speculative step."""
        return self.verify_ms + self.draft_ms

    @property
    def step_j(self) -> float:
        """GPU joules of the whole speculative step."""
        return self.verify_j + self.draft_j


class ContextAxis(NamedTuple):
    """A table's context axis (docs/tables.md#context): ``tokens``, the measured contexts (mean KV
    tokens per decoding sequence), strictly ascending; ``reference``, the one of them the plain
    grid prices; ``at``, ``(n, k) -> ((verify_ms, verify_j, draft_ms, draft_j) per context)``."""

    tokens: tuple
    reference: int
    at: dict


@dataclass(frozen=True)
class KeyMismatch:
    """One way a table's key differs from the serve's (docs/tables.md#key).

    ``kind`` is one of ``"schema"``, ``"box_class"``, ``"recipe"``, ``"plan_digest"``; ``mode`` is
    set for plan digests, where ``table``/``serve`` is None on the side that lacks the mode.
    """

    kind: str
    table: object
    serve: object
    mode: Optional[str] = None

    def __str__(self) -> str:
        if self.kind == "plan_digest":
            return f"plan digest of mode {self.mode!r}: table has {self.table!r}, serve has {self.serve!r}"
        return f"{self.kind}: table has {self.table!r}, serve has {self.serve!r}"


@dataclass(frozen=True)
class TableKey:
    """What a table was measured under; equal keys are the only licence to use it.

    ``plan_digests`` maps each measured mode (``verify``, ``draft``, ...) to the digest of the
    launch plan of that mode; it is stored read-only.
    """

    schema: int
    box_class: str
    recipe: str
    plan_digests: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        digests = MappingProxyType(dict(sorted(dict(self.plan_digests).items())))
        object.__setattr__(self, "plan_digests", digests)

    def __eq__(self, other):
        if not isinstance(other, TableKey):
            return NotImplemented
        return (
            self.schema == other.schema
            and self.box_class == other.box_class
            and self.recipe == other.recipe
            and dict(self.plan_digests) == dict(other.plan_digests)
        )

    def __hash__(self):
        return hash((self.schema, self.box_class, self.recipe, tuple(self.plan_digests.items())))

    def __repr__(self):
        return (
            f"TableKey(schema={self.schema!r}, box_class={self.box_class!r}, "
            f"recipe={self.recipe!r}, plan_digests={dict(self.plan_digests)!r})"
        )

    def check(self, serve: "TableKey") -> list:
        """Every way this (the table's) key differs from ``serve``'s, in the order docs/tables.md#key gives.

        Returns
        -------
        list of KeyMismatch
            Empty when the table may be used.
        """
        out = []
        if self.schema != serve.schema:
            out.append(KeyMismatch("schema", self.schema, serve.schema))
        if self.box_class != serve.box_class:
            out.append(KeyMismatch("box_class", self.box_class, serve.box_class))
        if self.recipe != serve.recipe:
            out.append(KeyMismatch("recipe", self.recipe, serve.recipe))
        for mode in sorted(set(self.plan_digests) | set(serve.plan_digests)):
            mine, theirs = self.plan_digests.get(mode), serve.plan_digests.get(mode)
            if mine != theirs:
                out.append(KeyMismatch("plan_digest", mine, theirs, mode))
        return out
