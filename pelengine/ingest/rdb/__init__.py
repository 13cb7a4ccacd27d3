"""Read a Redis or Valkey RDB snapshot: every stream with its consumer groups in full,
and the name, type and expiry of every other key.

Pure Python, no pyspark (numpy only to checksum large files faster). The files
read are a ``dump.rdb`` (``SAVE``/``BGSAVE``) and the RDB base file of an AOF
directory (``appendonly.aof.N.base.rdb``, written when ``aof-use-rdb-preamble
yes``, the default). What the servers of this project write:

============  ==========  =============================  ======================
server        header      stream type                    consumers' times
============  ==========  =============================  ======================
Redis 7.0     REDIS0010   19 (STREAM_LISTPACKS_2)        seen time only
Valkey 8.1    REDIS0011   21 (STREAM_LISTPACKS_3)        seen and active time
Valkey 9.1    VALKEY080   21 (STREAM_LISTPACKS_3)        seen and active time
============  ==========  =============================  ======================

(Redis 7.2 writes ``REDIS0011`` and Redis 7.4 ``REDIS0012``, both with type 21;
type 15, the stream of Redis 5 and 6, is read too.)

The format, as this package reads it
------------------------------------

*Header*: 9 ASCII bytes, ``REDIS`` and a 4-digit version, or (Valkey 9 and later)
``VALKEY`` and a 3-digit version (80 for Valkey 9.0/9.1). Type codes 22 and up mean
different things after the two magics: after ``REDIS`` they are Redis 7.4's hashes
with field expiry (22 to 25), after ``VALKEY`` 22 is Valkey 9's hash with field
expiry. Everything else is shared.

*Body*: a sequence of one-byte opcodes, each followed by its operands, until the
``EOF`` opcode (255):

* ``AUX`` (250): two strings, a name and a value (``redis-ver``, ``ctime``, ...);
* ``SELECTDB`` (254): a length, the db of the keys that follow;
* ``RESIZEDB`` (251): two lengths, size hints of the db's keys and expires;
* ``SLOT_INFO`` (244, cluster mode): three lengths (slot, keys, expires);
* ``EXPIRETIME_MS`` (252): 8 bytes, little-endian signed ms, for the next key;
  ``EXPIRETIME`` (253): the same in 4-byte seconds (very old files);
* ``IDLE`` (248): a length, the next key's LRU idle seconds; ``FREQ`` (249): one
  byte, its LFU counter;
* ``FUNCTION2`` (245): one string, the source of a function library;
* ``MODULE_AUX`` (247): a module's data outside the keyspace: module id, a "when"
  given as opcode 2 and a length, then self-describing items (opcode 1/2: a
  length, 3: a 4-byte float, 4: an 8-byte double, 5: a string) until opcode 0;
* a *value type* (0 to 25, below): a key (a string) and its value.

Not read (an error naming them): 246, the function format of Redis 7.0's release
candidates; Valkey's 243 (a cluster node's slot imports in progress) and 242
(replication only); type codes past these (Redis 8's, Valkey 9.2's 23).

After ``EOF`` (from version 5 on) come 8 bytes: the CRC-64 (Jones polynomial,
reflected, initial value 0) of every byte before them, little-endian; zero when
the server was configured with ``rdbchecksum no``. Nothing after them is read
(``RdbFile.end_offset`` says where they end).

*Lengths*: the top two bits of the first byte choose the form: ``00`` the other 6
bits; ``01`` 14 bits (those 6 bits, then the next byte); ``10`` with the rest of the
byte 0 or 1: a 32-bit or 64-bit big-endian number follows; ``11``: not a length,
the rest of the byte says how the *string* that this byte starts is encoded.

*Strings*: a length then that many bytes; or (``11`` form) an integer stored in 1, 2
or 4 little-endian signed bytes (the string is its decimal text); or LZF: the
compressed length, the uncompressed length, then the compressed bytes. (LZF: a
control byte below 32 copies the next control+1 bytes; otherwise its top 3 bits
(7 meaning "add the next byte") plus 2 are a length to copy from earlier output,
at a distance given by its low 5 bits, the next byte, plus 1.)

*Values* (the kinds each type code holds; every one is walked by its encoding):

* 0 string: one string;
* lists: 1 (strings), 10 (one ziplist), 14 (quicklist: ziplists), 18 (quicklist 2:
  per node a container length, 1 plain element or 2 a listpack, and a string);
* sets: 2 (strings), 11 (intset), 20 (listpack);
* sorted sets: 3 (member, score as text with a one-byte length; 253/254/255 are
  nan/+inf/-inf), 5 (member, 8-byte binary double), 12 (ziplist), 17 (listpack);
* hashes: 4 (field, value pairs), 9 (zipmap), 13 (ziplist), 16 (listpack); Redis
  7.4: 24 (8-byte minimum expiry, then per field a TTL length relative to it, field,
  value), 22 (no minimum, absolute TTLs: the release-candidate form), 25 (8-byte
  minimum expiry and a listpack of field, value, TTL), 23 (that listpack alone);
  Valkey 9: 22 (per field: field, value, 8-byte expiry ms, -1 for none);
* 6 and 7, module values: refused (:class:`RdbFormatError` naming the module).

These values are walked, not decoded: each string is stepped over (an LZF one by
its compressed length, unexpanded), the header and end byte of an uncompressed
ziplist, listpack or intset are checked and its element count read (an empty
container is dropped, as the server drops it when it loads), and the checksum
vouches for the rest.

*Streams* (15, 19, 21): the number of nodes; per node its master ID (a 16-byte
string: ms and seq, big-endian) and a listpack; then the length (live entries),
the last ID (two lengths); 19 and 21 add the first ID, the max deleted entry ID
and entries-added (five lengths); then the groups: per group its name, last
delivered ID (two lengths), 19 and 21 add entries-read (a length, 2^64-1 meaning
unknown); the group PEL: a count, per entry a raw 16-byte ID, the delivery time
(8 bytes, little-endian ms) and the delivery count (a length); the consumers: a
count, per consumer its name, seen time (8 bytes), 21 adds the active time (8
bytes, -1 if never active), and its PEL: a count and raw 16-byte IDs, each of
which must be in the group PEL.

*Listpacks*: 4 bytes total size, 2 bytes element count (65535: unknown), the
elements, and a 0xFF terminator. An element is an encoding byte (``0xxxxxxx`` a
7-bit unsigned integer; ``10xxxxxx`` a string of up to 63 bytes; ``110xxxxx`` and
one byte a 13-bit signed integer; ``1110xxxx`` and one byte a string of up to 4095
bytes; 0xF0 and a 4-byte length a longer string; 0xF1/F2/F3/F4 a 16/24/32/64-bit
little-endian signed integer), its data, then its own size (encoding and data) in
1 to 5 bytes of 7 bits, read from the right, for walking backwards.

*A stream node's listpack*: the master entry (live count, deleted count, the
number of master fields, those field names, a 0), then per entry (deleted ones
included): flags (1 deleted, 2 same fields as the master entry), the ID's ms and
seq as differences from the master ID, then either the values of the master
fields, or a field count and field/value pairs; and last the number of elements
the entry used (for walking backwards), checked here.

Names and values
----------------

Keys, group names and consumer names are ``str``: UTF-8 decoded with
``errors="surrogateescape"``. A valid UTF-8 name reads as itself; each byte of an
invalid sequence becomes a lone surrogate (U+DC80 to U+DCFF), so
``name.encode("utf-8", "surrogateescape")`` gives back the exact bytes (the
convention of :mod:`pelengine.model.listpack`). Stream field names and values,
aux values and function sources stay ``bytes`` (an integer-encoded element is its
decimal text, as the server replies it).

Errors: a truncated file, a corrupt byte, an opcode or type this reader does not
know (or a module value, which cannot be read without its module) raise
:class:`RdbFormatError` naming the file and the byte offset; a checksum that does
not match raises :class:`RdbChecksumError`. Nothing is guessed.

The modules: :mod:`~pelengine.ingest.rdb.reader` (the walk: :func:`parse_rdb`,
:func:`read_rdb`), :mod:`~pelengine.ingest.rdb.results` (:class:`RdbFile` and the
records it holds), :mod:`~pelengine.ingest.rdb.format` (opcodes, types, field layouts),
the codecs :mod:`~pelengine.ingest.rdb.crc`, :mod:`~pelengine.ingest.rdb.lzf` and
:mod:`~pelengine.ingest.rdb.listpack`, and :mod:`~pelengine.ingest.rdb.starting_state`
(a snapshot as ``PELENGINE.LOAD`` rows).
"""

from __future__ import annotations

from pelengine.ingest.rdb.crc import crc64
from pelengine.ingest.rdb.format import MODULE_NAME_CHARSET, module_name
from pelengine.ingest.rdb.listpack import decode_listpack
from pelengine.ingest.rdb.lzf import LzfError, lzf_decompress
from pelengine.ingest.rdb.reader import parse_rdb, read_rdb
from pelengine.ingest.rdb.results import (
    RdbChecksumError,
    RdbFile,
    RdbFormatError,
    RdbStream,
    decode_name,
)

__all__ = [
    "MODULE_NAME_CHARSET",
    "LzfError",
    "RdbChecksumError",
    "RdbFile",
    "RdbFormatError",
    "RdbStream",
    "crc64",
    "decode_listpack",
    "decode_name",
    "lzf_decompress",
    "module_name",
    "parse_rdb",
    "read_rdb",
]
