"""Cost tables: format, validation and lookup (docs/tables.md)."""

from specsim.table._types import COST_FIELDS, SCHEMA, Cell, ContextAxis, KeyMismatch, TableKey
from specsim.table.cost_table import CostTable

__all__ = ["COST_FIELDS", "SCHEMA", "Cell", "ContextAxis", "CostTable", "KeyMismatch", "TableKey"]
