"""The window store (``--cache DIR``): what the encode stage asks of a store (store_api.Store), the SQLite
store that is its embedded default (store, store_file; its per-token vectors for late chunking in
token_store), the keys and checksums (store_keys), the encode stage's look-up (window_cache, encode_stage)
and ``longbert cache`` (store_report).
"""
