"""The RDB format's numbers: opcodes, value types after each magic, stream flags, the
byte layouts of fixed-width fields, and the names of module types (the package
docstring describes the format)."""

from __future__ import annotations

import struct

U64 = (1 << 64) - 1
INVALID_ENTRIES_READ = U64  # a group's entries-read the server does not know (-1)

# opcodes
OP_SLOT_IMPORT = 243  # Valkey 9 cluster: slot import state (not read)
OP_SLOT_INFO = 244
OP_FUNCTION2 = 245
OP_FUNCTION_PRE_GA = 246
OP_MODULE_AUX = 247
OP_IDLE = 248
OP_FREQ = 249
OP_AUX = 250
OP_RESIZEDB = 251
OP_EXPIRETIME_MS = 252
OP_EXPIRETIME = 253
OP_SELECTDB = 254
OP_EOF = 255

OPCODE_NAMES = {
    242: "UPDATE (Valkey forkless save)",
    OP_SLOT_IMPORT: "SLOT_IMPORT (Valkey cluster slot migration)",
    OP_FUNCTION_PRE_GA: "FUNCTION (Redis 7.0 release candidates)",
}

# value types shared by every server: code -> (TYPE reply, RDB type name)
COMMON_TYPES: dict[int, tuple[str, str]] = {
    0: ("string", "STRING"),
    1: ("list", "LIST"),
    2: ("set", "SET"),
    3: ("zset", "ZSET"),
    4: ("hash", "HASH"),
    5: ("zset", "ZSET_2"),
    6: ("module", "MODULE_PRE_GA"),
    7: ("module", "MODULE_2"),
    9: ("hash", "HASH_ZIPMAP"),
    10: ("list", "LIST_ZIPLIST"),
    11: ("set", "SET_INTSET"),
    12: ("zset", "ZSET_ZIPLIST"),
    13: ("hash", "HASH_ZIPLIST"),
    14: ("list", "LIST_QUICKLIST"),
    15: ("stream", "STREAM_LISTPACKS"),
    16: ("hash", "HASH_LISTPACK"),
    17: ("zset", "ZSET_LISTPACK"),
    18: ("list", "LIST_QUICKLIST_2"),
    19: ("stream", "STREAM_LISTPACKS_2"),
    20: ("set", "SET_LISTPACK"),
    21: ("stream", "STREAM_LISTPACKS_3"),
}
# after the REDIS magic (Redis 7.4, RDB 12): hashes with field expiry
REDIS_TYPES: dict[int, tuple[str, str]] = {
    **COMMON_TYPES,
    22: ("hash", "HASH_METADATA_PRE_GA"),
    23: ("hash", "HASH_LISTPACK_EX_PRE_GA"),
    24: ("hash", "HASH_METADATA"),
    25: ("hash", "HASH_LISTPACK_EX"),
}
# after the VALKEY magic (Valkey 9, RDB 80)
VALKEY_TYPES: dict[int, tuple[str, str]] = {**COMMON_TYPES, 22: ("hash", "HASH_2")}

STREAM_FLAG_DELETED = 1
STREAM_FLAG_SAMEFIELDS = 2
MODULE_NAME_CHARSET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

# fixed-width fields: ms times (EXPIRETIME_MS, delivery and seen times), EXPIRETIME's
# seconds, container sizes (little-endian), a raw stream ID (ms and seq, big-endian)
I64 = struct.Struct("<q")
I32 = struct.Struct("<i")
U32 = struct.Struct("<I")
BE_ID = struct.Struct(">QQ")


def module_name(module_id: int) -> str:
    """The 9-character name a module type id carries (its top 54 bits, 6 bits a letter)."""
    value = module_id >> 10
    chars = []
    for _ in range(9):
        chars.append(MODULE_NAME_CHARSET[value & 63])
        value >>= 6
    return "".join(reversed(chars))
