"""numpy arrays -> the Arrow arrays of the output columns, each with at most one copy of the values, and none
where a block's per-token vectors already lie in one array (``tiled_buffer``)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa


def fixed_list_array(values: np.ndarray, valid: np.ndarray, list_type: pa.FixedSizeListType) -> pa.Array:
    """(n, D) values and (n,) validity -> fixed_size_list<x>[D] (x: the type's value type) with nulls
    where not valid."""
    flat = pa.array(values.astype(list_type.value_type.to_pandas_dtype()).reshape(-1), type=list_type.value_type)
    mask = pa.array(~valid) if not valid.all() else None
    return pa.FixedSizeListArray.from_arrays(flat, list_size=list_type.list_size, mask=mask)


def tiled_buffer(items: list[np.ndarray | None], dtype: np.dtype) -> np.ndarray | None:
    """The one array of ``dtype`` that the items that are not None tile back to back, in order, as
    C-contiguous views (what the token aggregate's token_rows makes), flattened (a view, no copy);
    None when they do not, e.g. after a document's rows were left unused by a row error."""
    present = [x for x in items if x is not None]
    base = present[0].base if present else None
    if not isinstance(base, np.ndarray) or base.dtype != dtype or not base.flags.c_contiguous:
        return None
    at = base.__array_interface__["data"][0]
    for x in present:
        if x.base is not base or not x.flags.c_contiguous or x.__array_interface__["data"][0] != at:
            return None
        at += x.nbytes
    return base.reshape(-1) if at == base.__array_interface__["data"][0] + base.nbytes else None


def list_array(items: list[np.ndarray | None], list_type: pa.ListType) -> pa.Array:
    """Per row an (m,) or (m, k) array, or None -> list<x> or list<fixed_size_list<x>[k]> with nulls."""
    inner = list_type.value_type
    fixed = pa.types.is_fixed_size_list(inner)
    leaf = inner.value_type if fixed else inner
    dtype = leaf.to_pandas_dtype()
    offsets = np.zeros(len(items) + 1, dtype=np.int32)
    for i, item in enumerate(items):
        offsets[i + 1] = offsets[i] + (item.shape[0] if item is not None else 0)
    width = inner.list_size if fixed else 1
    flat_values = tiled_buffer(items, dtype)
    if flat_values is None:
        flat_values = np.empty(int(offsets[-1]) * width, dtype=dtype)   # one copy of the values, filled in place
        for i, item in enumerate(items):
            if item is not None:
                flat_values[offsets[i] * width:offsets[i + 1] * width] = item.reshape(-1)
    flat = pa.array(flat_values, type=leaf)
    values = pa.FixedSizeListArray.from_arrays(flat, list_size=inner.list_size) if fixed else flat
    mask = pa.array([item is None for item in items], type=pa.bool_())
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=list_type, mask=mask)
