"""Turn captured command logs into rows of the events table (docs/input.md)."""
