"""The matcher core: filters, covering forests, the DoubleForest and the engine.

A library with no I/O: the Spark job and the offline replay both drive it.
"""
