"""What a run writes: window vectors -> one vector per output row (aggregate), the rows stage's tables
(rows), every column name and the metadata (schema), the sinks (write), a DIR/'s parts and manifest
(manifest) in a local folder or an S3 prefix (places), files that reach the disk (durable) and the
one-writer lock (lock).
"""
