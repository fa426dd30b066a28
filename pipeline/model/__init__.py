"""The model: its identity and folder checks before any weight loads (facts, checkpoint), what the chip does
fast (chip), loading (load, int8), the forward pass (encode), pooling hidden states into window vectors (pool)
and late chunking (late). Only encode runs torch on a device.
"""
