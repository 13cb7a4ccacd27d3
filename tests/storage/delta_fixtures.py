"""Hand-built Delta tables for reader features delta-rs cannot write itself.

delta-rs 1.6.6 never writes deletion vectors (its DELETE rewrites files) and, asked for column
mapping, writes logical column names without declaring the ``columnMapping`` feature. So the
table here is written the way Delta Lake (Spark) writes one: physical column names in the
parquet files, ``columnMapping`` + ``deletionVectors`` reader/writer features in the protocol
and an inline deletion vector (Delta's portable RoaringBitmapArray, Z85-encoded) on an Add.
"""

from __future__ import annotations

import json
import os
import struct
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_PORTABLE_MAGIC = 1681511377
_ROARING_NO_RUN_COOKIE = 12346


def z85_encode(data: bytes) -> str:
    """Z85 as Delta's Base85Codec does it: zero-padded to a multiple of 4 bytes."""
    data = data + b"\x00" * (-len(data) % 4)
    out = []
    for i in range(0, len(data), 4):
        value = struct.unpack(">I", data[i : i + 4])[0]
        chunk = []
        for _ in range(5):
            value, rem = divmod(value, 85)
            chunk.append(_Z85[rem])
        out.append("".join(reversed(chunk)))
    return "".join(out)


def roaring_bitmap_array(rows: list[int]) -> bytes:
    """Delta's portable RoaringBitmapArray for row indexes < 65536 (one array container)."""
    values = sorted(set(rows))
    assert values and values[-1] < 65536
    bitmap = struct.pack("<II", _ROARING_NO_RUN_COOKIE, 1)
    bitmap += struct.pack("<HH", 0, len(values) - 1)
    bitmap += struct.pack("<I", len(bitmap) + 4)  # offset of the container data
    bitmap += struct.pack(f"<{len(values)}H", *values)
    return struct.pack("<iqi", _PORTABLE_MAGIC, 1, 0) + bitmap


def write_dv_column_mapping_table(path: str, files: list[tuple[pa.Table, list[int]]]) -> None:
    """A table with column mapping (name mode) and deletion vectors, one version.

    ``files``: (data with logical column names, row indexes deleted by a DV) per data file.
    """
    os.makedirs(os.path.join(path, "_delta_log"), exist_ok=True)
    schema = files[0][0].schema
    physical = {name: f"col-{uuid.uuid4()}" for name in schema.names}
    type_names = {pa.int64(): "long", pa.string(): "string", pa.float64(): "double"}
    fields = [
        {
            "name": f.name,
            "type": type_names[f.type],
            "nullable": True,
            "metadata": {
                "delta.columnMapping.id": i + 1,
                "delta.columnMapping.physicalName": physical[f.name],
            },
        }
        for i, f in enumerate(schema)
    ]
    now = int(time.time() * 1000)
    actions: list[dict[str, object]] = [
        {"commitInfo": {"timestamp": now, "operation": "WRITE", "engineInfo": "pelengine-tests"}},
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["columnMapping", "deletionVectors"],
                "writerFeatures": ["columnMapping", "deletionVectors"],
            }
        },
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps({"type": "struct", "fields": fields}),
                "partitionColumns": [],
                "configuration": {
                    "delta.columnMapping.mode": "name",
                    "delta.columnMapping.maxColumnId": str(len(fields)),
                    "delta.enableDeletionVectors": "true",
                },
                "createdTime": now,
            }
        },
    ]
    for data, deleted in files:
        name = f"part-{uuid.uuid4()}.snappy.parquet"
        pq.write_table(
            data.rename_columns([physical[n] for n in data.column_names]), os.path.join(path, name)
        )
        add: dict[str, object] = {
            "path": name,
            "partitionValues": {},
            "size": os.path.getsize(os.path.join(path, name)),
            "modificationTime": now,
            "dataChange": True,
            "stats": json.dumps({"numRecords": data.num_rows}),
        }
        if deleted:
            raw = roaring_bitmap_array(deleted)
            add["deletionVector"] = {
                "storageType": "i",
                "pathOrInlineDv": z85_encode(raw),
                "sizeInBytes": len(raw),
                "cardinality": len(set(deleted)),
            }
        actions.append({"add": add})
    with open(os.path.join(path, "_delta_log", "00000000000000000000.json"), "w") as log:
        log.write("\n".join(json.dumps(a) for a in actions) + "\n")
