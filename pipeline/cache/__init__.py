"""The window store (``--cache DIR`` or ``s3://BUCKET/PREFIX``): what the encode stage asks of a store
(store_api.Store), the one place stores are opened by URI scheme (stores.open_store), the SQLite store
that is its embedded default (store, store_file; its per-token vectors for late chunking in token_store),
the store in S3-compatible storage (object_store, object_blocks, object_client), the keys and checksums
(store_keys) and ``longbert cache`` (store_report). Storage alone: the encode stage and its look-up
(pipeline.model.encode_stage, pipeline.model.window_cache) use it; nothing here imports torch or transformers.
"""
