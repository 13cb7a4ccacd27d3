"""Turn captured command logs into rows of the events table (``events.md``)."""
