"""The read side: what users ask of the output tables (summary, pel-as-of, sql,
pending, report). Reads go through :mod:`pelengine.storage`.
"""
