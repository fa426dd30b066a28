"""Texts -> windows, no torch: the tokenize stage (tokenize), the window rules and the segment stage
(segment), the dedup stage (dedup, on pipeline.plan's window plan) and the texts the Python API takes
(texts). ``longbert stats`` counts windows with segment's rule (pipeline.engine.stats).
"""
