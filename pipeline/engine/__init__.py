"""The stages chained and run: the run's options resolved against the model once and the built-in stages
built from that record (resolved; block checks the options against the model's config and gives the heap
back once per block), Pipeline with its one loop over blocks (compose) and its parameters (params), the
local engine (local), what both engines share (run), the feeder threads (feed), progress (progress),
the Ray engine (ray_engine) and ``longbert stats`` (stats). The Batch and the stage contract sit below
every phase (pipeline.batch, pipeline.stage).
"""
