"""The engine seam: Arrow batches in, Arrow batches out.

The functions Spark runs in its Python workers (the router and the grouped replay)
turn Arrow batches of events into Arrow batches of output rows through the pure
model (:mod:`pelengine.model`). They capture only plain values.
"""
