"""pelengine: rebuild Redis Streams consumer-group state from a log of commands."""

__version__ = "0.1.0"
