"""The window store (``--cache DIR`` or ``s3://BUCKET/PREFIX``): what the encode stage asks of a store
(store_api.Store), the one place stores are opened by URI scheme (stores.open_store), the SQLite store
that is its embedded default (store, store_file; its per-token vectors for late chunking in token_store),
the store in S3-compatible storage (object_store, object_blocks, object_client), the keys and checksums
(store_keys), the encode stage's look-up (window_cache, encode_stage) and ``longbert cache`` (store_report).
"""
