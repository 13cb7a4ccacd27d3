"""The engine seam: Arrow batches in, Arrow batches out.

The functions Spark runs in its Python workers (:mod:`.udf`: the router and the
partition replay) turn Arrow batches of events into Arrow batches of output rows through one of
two engines with one interface: the Python engine (:mod:`.python`, over the pure model,
:mod:`pelengine.model`) or the native one (``pelengine_native``, Rust, loaded and chosen
by :mod:`.native`). :mod:`.errors` words the errors about an event for both. The
functions capture only plain values.
"""
