"""Output columns of one's own: a stage placed after ``rows`` declares the columns it appends to the
output table (``adds_columns``, as a spaCy component declares what it ``assigns``), the written schema
holds them after longbert's own, and a table that differs from what was declared is refused by name.

pipeline.engine.compose checks the declarations when a pipeline is built and each such stage's table as
it runs; pipeline.engine.local checks each table against the file's schema before it is written.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from ..errors import ConfigError

HOW = ("declare them on the stage, e.g. stage.adds_columns = (pyarrow.field('n_chars', pyarrow.int32()),), "
       "and place it after 'rows'")


def declared(stage: Any) -> tuple[pa.Field, ...]:
    """The columns ``stage`` declares it appends (its ``adds_columns``: pyarrow fields or (name, type) pairs).

    Raises:
        ConfigError: an entry that is neither, naming the stage and the entry.
    """
    fields = []
    for item in getattr(stage, "adds_columns", None) or ():
        if isinstance(item, pa.Field):
            fields.append(item)
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], pa.DataType):
            fields.append(pa.field(str(item[0]), item[1]))
        else:
            name = getattr(stage, "name", None) or getattr(stage, "__name__", type(stage).__name__)
            raise ConfigError(f"stage {name!r} declares adds_columns entry {item!r}; give pyarrow fields or "
                              "(name, pyarrow type) pairs, e.g. (pyarrow.field('n_chars', pyarrow.int32()),)")
    return tuple(fields)


def declared_label(stage: Any) -> str:
    """What a stage's label gains from its declared columns, so --resume tells two declarations apart:
    "" without any; else "[name:type,...]". Example: adds_columns (n_chars int32) -> "[n_chars:int32]"."""
    fields = declared(stage)
    return "" if not fields else "[" + ",".join(f"{f.name}:{f.type}" for f in fields) + "]"


def added_columns(steps: Sequence[tuple[str, Any]], given: Iterable[str] = (),
                  fills: Mapping[str, tuple[str, ...]] | None = None) -> tuple[tuple[str, pa.Field], ...]:
    """(stage name, field) of every declared column, in stage order, checked when the pipeline is built.

    Args:
        steps: (name, stage) in order. given: fields a batch holds before the first stage (a slice's).
        fills: stage name -> the fields it fills, for stages that do not declare theirs.

    Raises:
        ConfigError: a stage that declares columns but runs before the output table exists (before
            'rows'), or a column declared twice, naming the stage(s) and the column.
    """
    have, out, seen = set(given), [], {}
    for name, stage in steps:
        fields = declared(stage)
        if fields and "table" not in have:
            raise ConfigError(f"stage {name!r} declares output columns {[f.name for f in fields]}, but runs before "
                              "the stage that makes the output table ('rows'); insert it after 'rows'")
        for f in fields:
            if f.name in seen:
                raise ConfigError(f"column {f.name!r} is declared by stage {seen[f.name]!r} and by stage {name!r}; "
                                  "give each added column one stage")
            seen[f.name] = name
            out.append((name, f))
        have.update(getattr(stage, "fills", None) or (fills or {}).get(name, ()))
    return tuple(out)


def with_added(schema: pa.Schema, added: Sequence[tuple[str, pa.Field]]) -> pa.Schema:
    """``schema`` with the added columns after its own and, in its ``longbert`` metadata, ``added_columns``:
    [{"column", "type", "stage"}] (the metadata as it was when nothing is added).

    Raises:
        ConfigError: an added column that takes the name of one of longbert's, naming the stage.
    """
    import json

    if not added:
        return schema
    for stage, f in added:
        if f.name in schema.names:
            raise ConfigError(f"stage {stage!r} declares column {f.name!r}, which the output already has "
                              f"({', '.join(schema.names)}); give it another name")
    meta = dict(schema.metadata or {})
    if b"longbert" in meta:
        info = json.loads(meta[b"longbert"])
        info["added_columns"] = [{"column": f.name, "type": str(f.type), "stage": stage} for stage, f in added]
        meta[b"longbert"] = json.dumps(info).encode()
    return pa.schema([*schema, *(f for _, f in added)], metadata=meta)


def checked_table(name: str, stage: Any, before: pa.Table, after: pa.Table) -> pa.Table:
    """The table ``stage`` returned, checked against the one it was given and the columns it declares: the
    declared columns cast (safely) to their declared types, so every block writes one schema; ``after``
    itself when nothing needed a cast.

    Raises:
        ConfigError: a column added without being declared, a declared column missing, or one whose
            values do not fit its declared type, naming the stage, the column and the fix.
    """
    fields = {f.name: f for f in declared(stage)}
    if after is before and not fields:
        return after
    new = [c for c in after.column_names if c not in before.column_names]
    undeclared = [c for c in new if c not in fields]
    if undeclared:
        raise ConfigError(f"stage {name!r} added column(s) {undeclared} to the output table without declaring them; "
                          + HOW)
    missing = [c for c in fields if c not in after.column_names]
    if missing:
        raise ConfigError(f"stage {name!r} declares column(s) {missing} but its table has none (it has "
                          f"{after.column_names}); add them in every block, null where there is no value")
    for column, f in fields.items():
        i = after.column_names.index(column)
        if after.schema.field(i).type != f.type:
            try:
                after = after.set_column(i, f, after.column(i).cast(f.type, safe=True))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise ConfigError(f"stage {name!r} declares column {column!r} as {f.type}, but a block holds "
                                  f"{after.schema.field(i).type} values that do not fit ({err}); declare the type "
                                  "it holds or cast its values") from None
    return after


def as_written(table: pa.Table, schema: pa.Schema, stages: Sequence[str]) -> pa.Table:
    """``table`` in the file's column order, checked against its schema before it is written.

    Raises:
        ConfigError: columns the file does not have or lacks, naming them, the stages and the fix.
    """
    extra = [c for c in table.column_names if c not in schema.names]
    missing = [c for c in schema.names if c not in table.column_names]
    if extra or missing:
        what = "; ".join(part for part in (f"columns {extra} are not in the output schema" if extra else "",
                                           f"columns {missing} are missing" if missing else "") if part)
        raise ConfigError(f"the output table of the stages {list(stages)} does not match the file: {what}; to add "
                          f"columns of your own, {HOW}")
    table = table.select(schema.names)
    if not table.schema.remove_metadata().equals(schema.remove_metadata()):
        wrong = [f"{f.name} ({table.schema.field(f.name).type}, the file has {f.type})" for f in schema
                 if table.schema.field(f.name).type != f.type]
        raise ConfigError(f"the output table of the stages {list(stages)} has other column types than the file: "
                          f"{', '.join(wrong) or 'nullability'}; keep the types the rows stage and adds_columns give")
    return table
