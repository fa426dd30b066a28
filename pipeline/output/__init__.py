"""What a run writes: window vectors -> one vector per output row (aggregate), the rows stage's tables
(rows), every column name and the metadata (schema), the sinks (write), files that reach the disk (durable)
and the one-writer lock (lock).
"""
