"""The stages chained and run: Batch (batch), the built-in stages and their Context (stages), the options
resolved against the model once (block), Pipeline and the local engine (compose), what both engines share
(run), the feeder threads (feed), progress (progress) and the Ray engine (ray_engine).
"""
