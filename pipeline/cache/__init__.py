"""The window store (``--cache DIR``): SQLite storage (store), its keys and checksums (store_keys), the
encode stage's look-up (window_cache), per-token vectors for late chunking (token_store) and ``longbert cache``
(store_report).
"""
