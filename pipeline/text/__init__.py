"""Texts -> windows, no torch: the tokenize stage's work (tokenize), the window rules (segment), the unique
windows of a block (dedup), the texts the Python API takes (texts), and ``longbert stats`` (stats).
"""
