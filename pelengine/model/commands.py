"""One handler per Redis command, applying its effects to the model.

Every handler receives the replayer (the keyspace and the history recorder),
known here only as ``calls.Model``, and the call (argv, db, the command's "now").
A handler that finds an argument Redis would refuse raises ``CommandError``
before changing anything, so that a rejected command has no effect, as in Redis.
Parsing order follows the server, so the same malformed command fails for the
same reason.

The behaviour of each command is described in its docstring: syntax, effects on
the stream and its groups, and side effects (consumer creation, seen and active
times). Differences between version profiles are named where they apply.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from sortedcontainers import SortedList

from pelengine.model import listpack as lp
from pelengine.model.calls import BlockedRead, Call, Model
from pelengine.model.ids import (
    MAX_ID,
    U64_MAX,
    ZERO_ID,
    ParseError,
    StreamID,
    incr_id,
    parse_id,
    parse_ll,
    parse_strict_id,
    to_signed,
)
from pelengine.model.state import (
    INVALID_ENTRIES_READ,
    Consumer,
    Group,
    Node,
    OtherValue,
    PendingEntry,
    Stream,
)
from pelengine.model.units import LUA_CLIENT

LISTPACK_MAX_SIZE = 1 << 30
BLOCKED_DEFAULT_COUNT = 1000  # 7.0 serves a blocked reader without COUNT this many entries


class CommandError(Exception):
    """Redis would reply with an error: the command has no effect."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _ll(text: str, kind: str = "not_an_integer") -> int:
    value = parse_ll(text)
    if value is None:
        raise CommandError(kind)
    return value


def _strict_id(text: str) -> StreamID:
    try:
        return parse_strict_id(text)
    except ParseError as exc:
        raise CommandError(exc.kind) from None


def _any_id(text: str) -> StreamID:
    try:
        return parse_id(text)[0]
    except ParseError as exc:
        raise CommandError(exc.kind) from None


# --------------------------------------------------------------------------
# Stream helpers: the counters Redis derives for entries_read and lag.
# --------------------------------------------------------------------------


# ``entries_read`` and ``lag`` are estimates, and their rules changed after Redis 7.4.1.
# ``strict`` selects the rules of Valkey 8.1.1+ (its fix of XINFO GROUPS lag; Redis 8.0
# has most of them too), measured live against Valkey 8.1.8 and 9.1.2:
#   * a tombstone before the first entry still counts as one that may lie ahead
#     (``range_has_tombstones``);
#   * an ID below the largest deleted ID has no estimate (``estimate_entries_read``);
#   * a ``>`` delivery counts one more read only while the group is not behind the first
#     entry and no tombstone lies after the group's previous last ID (``_serve_new``).
# Without ``strict``: Redis 7.0 up to 7.4.1 (and Valkey 8.0).


def wrap_i64(value: int) -> int:
    """``value`` as the server's signed 64-bit arithmetic leaves it: counters set to
    extremes (``ENTRIESREAD 9223372036854775807``) wrap there, checked against a live
    server (tests/redis_diff/test_binary_and_extremes.py)."""
    return (value + 2**63) % 2**64 - 2**63


def range_has_tombstones(stream: Stream, start: StreamID | None, strict: bool = False) -> bool:
    """True when an XDEL tombstone may lie at or after ``start`` (the server's estimate:
    anything at or before the largest deleted ID). Before the strict rules, a largest
    deleted ID before the first entry meant none could."""
    mdel = stream.max_deleted_entry_id
    if not stream.length or mdel == ZERO_ID:
        return False
    if not strict and stream.first_id > mdel:
        return False
    start_id = start if start is not None else ZERO_ID
    return start_id <= mdel


def estimate_entries_read(stream: Stream, entry_id: StreamID, strict: bool = False) -> int:
    """The logical read counter of ``entry_id``, or -1 when it cannot be known. The strict
    rules know nothing of an ID (other than 0-0) below the largest deleted ID."""
    if not stream.entries_added:
        return 0
    if not stream.length and entry_id <= stream.last_id:
        return stream.entries_added
    if strict and entry_id != ZERO_ID and entry_id < stream.max_deleted_entry_id:
        return INVALID_ENTRIES_READ
    if entry_id == stream.last_id:
        return stream.entries_added
    if entry_id > stream.last_id:
        return INVALID_ENTRIES_READ
    mdel = stream.max_deleted_entry_id
    if mdel == ZERO_ID or mdel < stream.first_id:
        if entry_id < stream.first_id:
            return wrap_i64(stream.entries_added - stream.length)
        if entry_id == stream.first_id:
            return wrap_i64(stream.entries_added - stream.length + 1)
    return INVALID_ENTRIES_READ


def group_lag(stream: Stream, group: Group, strict: bool = False) -> int | None:
    """The lag XINFO GROUPS reports, or None where the server replies nil. Counters a
    snapshot or ``ENTRIESREAD`` set to extremes make the server's subtraction overflow:
    it wraps, and so does this (:func:`wrap_i64`)."""
    if not stream.entries_added:
        return 0
    if group.entries_read != INVALID_ENTRIES_READ and not range_has_tombstones(
        stream, group.last_id, strict
    ):
        lag = stream.entries_added - group.entries_read
    else:
        estimate = estimate_entries_read(stream, group.last_id, strict)
        if estimate == INVALID_ENTRIES_READ:
            return None
        lag = stream.entries_added - estimate
    return wrap_i64(lag)


def _count_read(stream: Stream, group: Group, entry_id: StreamID, strict: bool) -> None:
    """A ``>`` delivery of ``entry_id`` moves the group's read counter: one more when the
    counter can be trusted, else the estimate of ``entry_id``. The strict rules trust
    it only while the group is not behind the first entry, and look for tombstones
    after the group's previous last ID (not after the delivered one)."""
    trusted = group.entries_read != INVALID_ENTRIES_READ
    if strict:
        trusted = (
            trusted
            and group.last_id >= stream.first_id
            and not range_has_tombstones(stream, group.last_id, strict)
        )
    else:
        trusted = trusted and not range_has_tombstones(stream, entry_id)
    if trusted:
        group.entries_read = wrap_i64(group.entries_read + 1)  # the server's ++ wraps
    elif stream.entries_added:
        group.entries_read = estimate_entries_read(stream, entry_id, strict)


def _refresh_first_id(stream: Stream) -> None:
    stream.first_id = stream.entries[0] if stream.length else ZERO_ID


# --------------------------------------------------------------------------
# XADD / XTRIM
# --------------------------------------------------------------------------


@dataclass
class TrimArgs:
    strategy: str | None = None  # "maxlen" | "minid"
    approx: bool = False
    maxlen: int = 0
    minid: StreamID = ZERO_ID
    limit: int = 0
    no_mkstream: bool = False
    id_given: bool = False
    seq_given: bool = True
    given_id: StreamID = ZERO_ID


def _parse_add_or_trim(argv: list[str], xadd: bool) -> tuple[int, TrimArgs]:
    """Options of XADD/XTRIM in server order; returns the ID position (XADD) and the options."""
    args = TrimArgs()
    limit_given = False
    i = 2
    argc = len(argv)
    while i < argc:
        moreargs = argc - 1 - i
        opt = argv[i]
        low = opt.lower()
        if xadd and opt == "*":
            break
        if low in ("maxlen", "minid") and moreargs:
            if args.strategy is not None:
                raise CommandError("syntax_error")
            args.approx = False
            nxt = argv[i + 1]
            if moreargs >= 2 and nxt == "~":
                args.approx = True
                i += 1
            elif moreargs >= 2 and nxt == "=":
                i += 1
            if low == "maxlen":
                args.maxlen = _ll(argv[i + 1])
                if args.maxlen < 0:
                    raise CommandError("out_of_range")
            else:
                args.minid = _strict_id(argv[i + 1])
            args.strategy = low
            i += 2
            continue
        if low == "limit" and moreargs:
            args.limit = _ll(argv[i + 1])
            if args.limit < 0:
                raise CommandError("out_of_range")
            limit_given = True
            i += 2
            continue
        if xadd and low == "nomkstream":
            args.no_mkstream = True
            i += 1
            continue
        if xadd:
            try:
                args.given_id, args.seq_given = parse_id(opt, strict=True, allow_seq_star=True)
            except ParseError as exc:
                raise CommandError(exc.kind) from None
            args.id_given = True
            break
        raise CommandError("syntax_error")
    if args.limit and args.strategy is None:
        raise CommandError("syntax_error")
    if not xadd and args.strategy is None:
        raise CommandError("syntax_error")
    if limit_given and not args.approx:
        raise CommandError("syntax_error")
    return i, args


def append_entry(
    r: Model, stream: Stream, entry_id: StreamID, fields: list[str], values: list[str]
) -> None:
    """Add an entry at the tail, opening a new node when the tail node is full
    (``stream-node-max-entries`` entries, or ``stream-node-max-bytes`` bytes)."""
    stream.entries.add(entry_id)
    nodes = stream.nodes
    tail = nodes[-1] if nodes else None
    if tail is not None:
        max_bytes = r.node_max_bytes
        if max_bytes <= 0 or max_bytes > LISTPACK_MAX_SIZE:
            max_bytes = LISTPACK_MAX_SIZE
        incoming = sum(lp.byte_length(x) for x in fields) + sum(lp.byte_length(x) for x in values)
        if tail.nbytes + incoming >= max_bytes or (
            r.node_max_entries and tail.total >= r.node_max_entries
        ):
            tail = None
    if tail is None:
        names = tuple(fields)
        size = lp.new_node_bytes(names) + lp.entry_bytes(0, 0, fields, values, same=True)
        nodes.append(Node(entry_id, names, size))
        return
    master = tail.master_id
    tail.nbytes += lp.counter_delta(tail.live, tail.live + 1)
    tail.nbytes += lp.entry_bytes(
        to_signed((entry_id.ms - master.ms) & U64_MAX),
        to_signed((entry_id.seq - master.seq) & U64_MAX),
        fields,
        values,
        same=tuple(fields) == tail.fields,
    )
    tail.total += 1
    tail.live += 1
    tail.appended(entry_id)


def _mark_deleted(node: Node, count: int) -> None:
    """``count`` live entries of ``node`` become tombstones (its counters grow or shrink)."""
    deleted = node.total - node.live
    node.nbytes += lp.counter_delta(node.live, node.live - count)
    node.nbytes += lp.counter_delta(deleted, deleted + count)
    node.live -= count


def delete_entry(stream: Stream, entry_id: StreamID) -> None:
    """XDEL of one live entry: a node whose last live entry goes is freed."""
    stream.entries.remove(entry_id)
    nodes = stream.nodes
    index = bisect_right([n.master_id for n in nodes], entry_id) - 1
    node = nodes[index]
    if node.live == 1:
        del nodes[index]
    else:
        _mark_deleted(node, 1)


def _approx_limit(args: TrimArgs, r: Model) -> int:
    if not args.approx:
        return 0
    if args.limit:
        return args.limit
    limit = 100 * r.node_max_entries
    if limit <= 0:
        return 10000
    return min(limit, 1_000_000)


def _minid_cut(entries: SortedList, node: Node, minid: StreamID) -> int:
    """How many live entries of the head ``node`` (``entries[:node.live]``) an exact
    ``MINID`` trim removes: Redis walks the listpack in order and stops at the first
    entry at or above ``minid``, deleted or not. Where listpack order is ID order that
    is every live entry below ``minid``; across the node's ``runs``, the live entries of
    each run lie below the next run's first ID, and the walk stops in the first run
    whose last ID reaches ``minid``."""
    below = min(entries.bisect_left(minid), node.live)
    if not node.runs:
        return below
    cut = 0
    for i, (_first, last) in enumerate(node.runs):
        upper = node.live
        if i + 1 < len(node.runs):
            upper = min(entries.bisect_left(node.runs[i + 1][0]), node.live)
        if last < minid:
            cut = upper
            continue
        return min(max(below, cut), upper)
    return cut


def _trim(r: Model, call: Call, key: str, stream: Stream, args: TrimArgs) -> int:
    """Remove entries from the head as MAXLEN/MINID asks; returns how many.

    Walks the internal nodes from the head: a node is dropped whole when the
    threshold allows; approximate trimming (``~``) stops at the first node it
    cannot drop whole (or when LIMIT entries would be exceeded), exact trimming
    goes on inside that node. Node sizes follow ``stream-node-max-entries``
    and ``stream-node-max-bytes`` (see ``listpack``). Pending entries of the
    removed IDs now dangle (``Replayer.entries_changed``).
    """
    entries = stream.entries
    nodes = stream.nodes
    limit = _approx_limit(args, r)
    deleted = 0
    # the removed IDs, when a pending entry's history may need them
    removed: list[StreamID] | None = (
        [] if r.record_changes and any(g.pel for g in stream.groups.values()) else None
    )
    while nodes:
        if args.strategy == "maxlen" and len(entries) <= args.maxlen:
            break
        node = nodes[0]
        if limit and deleted + node.live > limit:
            break
        if args.strategy == "maxlen":
            remove_node = len(entries) - node.live >= args.maxlen
        else:
            remove_node = node.last_id < args.minid
        if remove_node:
            if removed is not None:
                removed.extend(entries[: node.live])
            del entries[: node.live]
            deleted += node.live
            del nodes[0]
            continue
        if args.approx:
            break
        if args.strategy == "maxlen":
            cut = len(entries) - args.maxlen
        else:
            cut = _minid_cut(entries, node, args.minid)
        if cut > 0:
            if removed is not None:
                removed.extend(entries[:cut])
            del entries[:cut]
            _mark_deleted(node, cut)
            deleted += cut
        break
    if deleted:
        _refresh_first_id(stream)
        if removed:
            r.entries_changed(call, key, stream, removed)
    return deleted


def xadd(r: Model, call: Call) -> None:
    """XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT n]] <*|id|ms-*> field value ...

    Appends an entry. ``*`` takes max(now, last_id.ms) with the next sequence;
    ``ms-*`` picks the sequence; an explicit ID must exceed the stream's
    last_id and may not be 0-0. Creates the key unless NOMKSTREAM. Counts
    ``entries_added``; records the first entry ID when the stream was empty.
    Trimming then removes entries from the head; their PEL entries stay
    dangling. Groups are untouched.
    """
    argv = call.argv
    idpos, args = _parse_add_or_trim(argv, xadd=True)
    field_pos = idpos + 1
    nfields = len(argv) - field_pos
    if nfields < 2 or nfields % 2 == 1:
        raise CommandError("wrong_arity")
    if args.id_given and args.seq_given and args.given_id == ZERO_ID:
        raise CommandError("id_zero")
    key = argv[1]
    stream = r.lookup_stream(call.db, key)
    if stream is None:
        if args.no_mkstream:
            return
        stream = r.create_stream(call.db, key)
    last = stream.last_id
    if last == MAX_ID:
        raise CommandError("stream_exhausted")
    if args.id_given:
        if args.seq_given:
            new_id = args.given_id
        elif last.ms == args.given_id.ms:
            if last.seq == U64_MAX:
                raise CommandError("id_too_small")
            new_id = StreamID(last.ms, last.seq + 1)
        else:
            new_id = StreamID(args.given_id.ms, 0)
    elif call.now > last.ms:
        new_id = StreamID(call.now, 0)
    else:
        nxt = incr_id(last)
        new_id = nxt if nxt is not None else ZERO_ID
    if new_id <= last:
        raise CommandError("id_too_small")
    append_entry(r, stream, new_id, argv[field_pos::2], argv[field_pos + 1 :: 2])
    if stream.groups:
        # an ID deleted while pending can come back (XSETID below it, then XADD)
        r.entries_changed(call, key, stream, [new_id])
    stream.last_id = new_id
    stream.entries_added += 1
    if stream.length == 1:
        stream.first_id = new_id
    call.result = new_id
    r.signal(call.db, key)
    if args.strategy is not None:
        _trim(r, call, key, stream, args)


def xtrim(r: Model, call: Call) -> None:
    """XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT n]

    Removes entries from the head of the stream. A missing key is not an
    error. Trimming does not move ``max_deleted_entry_id``; PEL entries of
    trimmed IDs stay pending (dangling) until a claim or ack touches them.
    """
    _, args = _parse_add_or_trim(call.argv, xadd=False)
    stream = r.lookup_stream(call.db, call.argv[1])
    if stream is None:
        return
    _trim(r, call, call.argv[1], stream, args)


def xdel(r: Model, call: Call) -> None:
    """XDEL key id [id ...]

    Deletes entries by ID (all IDs are parsed first: one bad ID fails the whole
    command). Raises ``max_deleted_entry_id`` to the largest deleted ID and
    updates the recorded first entry. PEL entries of deleted IDs stay dangling.
    """
    argv = call.argv
    stream = r.lookup_stream(call.db, argv[1])
    if stream is None:
        return
    ids = [_strict_id(a) for a in argv[2:]]
    deleted = 0
    first_entry = False
    removed: list[StreamID] = []
    for entry_id in ids:
        if entry_id in stream.entries:
            delete_entry(stream, entry_id)
            removed.append(entry_id)
            if entry_id == stream.first_id:
                first_entry = True
            if entry_id > stream.max_deleted_entry_id:
                stream.max_deleted_entry_id = entry_id
            deleted += 1
    if deleted and (stream.length == 0 or first_entry):
        _refresh_first_id(stream)
    if removed and stream.groups:
        r.entries_changed(call, argv[1], stream, removed)


# --------------------------------------------------------------------------
# XREADGROUP
# --------------------------------------------------------------------------


def _get_or_create_consumer(r: Model, group: Group, name: str, now: int) -> Consumer:
    consumer = group.consumers.get(name)
    if consumer is None:
        consumer = Consumer(name, now)
        group.consumers[name] = consumer
    return consumer


def _serve_new(
    r: Model,
    call: Call,
    key: str,
    stream: Stream,
    group: Group,
    consumer: Consumer,
    count: int,
    noack: bool,
) -> None:
    """Deliver entries after the group's last_id (a ``>`` read)."""
    now = call.now
    start = incr_id(group.last_id) or ZERO_ID
    for delivered, entry_id in enumerate(stream.entries.irange(minimum=start), start=1):
        if entry_id > group.last_id:
            _count_read(stream, group, entry_id, r.profile.strict_lag)
            group.last_id = entry_id
        if not noack:
            nack = group.pel.get(entry_id)
            if nack is None:
                nack = PendingEntry(consumer, now, 1)
                group.pel[entry_id] = nack
                consumer.pel[entry_id] = nack
                r.record(call, key, group, entry_id, "delivered", None, consumer, nack)
            else:
                previous = nack.consumer
                if previous is not None:
                    previous.pel.pop(entry_id, None)
                nack.consumer = consumer
                nack.delivery_time = now
                nack.delivery_count = 1
                consumer.pel[entry_id] = nack
                r.record(call, key, group, entry_id, "reassigned", previous, consumer, nack)
            if r.profile.active_time:
                consumer.active_time = now
        if count and delivered == count:
            break


def _serve_history(
    r: Model,
    call: Call,
    key: str,
    stream: Stream,
    group: Group,
    consumer: Consumer,
    start: StreamID,
    count: int,
) -> None:
    """Re-deliver the consumer's own pending entries from ``start`` (a history read)."""
    for served, entry_id in enumerate(consumer.pel.irange(minimum=start)):
        if count and served >= count:
            break
        if entry_id in stream.entries:
            nack = consumer.pel[entry_id]
            nack.delivery_time = call.now
            nack.delivery_count += 1
            r.record(call, key, group, entry_id, "redelivered", consumer, consumer, nack)


def xreadgroup(r: Model, call: Call) -> None:
    """XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK] STREAMS key [key ...] id [id ...]

    For each stream: with ``>``, delivers entries after the group's last_id
    (COUNT limits; 0 or negative means all), advancing last_id and
    entries_read and creating PEL entries (count 1, time now) owned by the
    reader; an ID already pending is reassigned to the reader with its count
    reset to 1. NOACK delivers without PEL entries. With any other ID, re-reads
    the reader's own pending entries after that ID: each one still in the
    stream gets count+1 and time now; deleted ones stay pending untouched.
    Every key must exist with the group, or the command fails as a whole.

    Side effects: 7.0 creates the consumer and refreshes its seen time only on
    a stream that is served (a history read, or a ``>`` read with entries after
    last_id); 7.2+ does so on every call, and sets active time on ``>``
    deliveries that create PEL entries.

    With BLOCK, a call that serves nothing blocks its client until a later write
    to one of its keys serves it (see ``Replayer.block``), its timeout passes
    (``BLOCK 0``: never) or the client sends something else; inside an execution
    unit (MULTI, a script) it never blocks. A script may not name BLOCK at all on
    7.0 and 7.2 (an error); 7.4 and Valkey accept it.
    """
    argv = call.argv
    argc = len(argv)
    group_name: str | None = None
    consumer_name = ""
    count = 0
    noack = False
    block_ms: int | None = None
    streams_arg = 0
    i = 1
    while i < argc:
        moreargs = argc - i - 1
        low = argv[i].lower()
        if low == "block" and moreargs:
            if call.client == LUA_CLIENT and not r.profile.script_block:
                raise CommandError("block_in_script")
            i += 1
            timeout = parse_ll(argv[i])
            if timeout is None:
                raise CommandError("not_an_integer")
            if timeout < 0:
                raise CommandError("out_of_range")
            block_ms = timeout
        elif low == "count" and moreargs:
            i += 1
            count = max(_ll(argv[i]), 0)
        elif low == "streams" and moreargs:
            streams_arg = i + 1
            if (argc - streams_arg) % 2:
                raise CommandError("syntax_error")
            break
        elif low == "group" and moreargs >= 2:
            group_name = argv[i + 1]
            consumer_name = argv[i + 2]
            i += 2
        elif low == "noack":
            noack = True
        else:
            raise CommandError("syntax_error")
        i += 1
    if streams_arg == 0 or group_name is None:
        raise CommandError("syntax_error")
    nstreams = (argc - streams_arg) // 2
    keys = argv[streams_arg : streams_arg + nstreams]
    targets: list[tuple[str, Stream, Group, StreamID | None]] = []
    for key, id_text in zip(keys, argv[streams_arg + nstreams :], strict=True):
        stream = r.lookup_stream(call.db, key)
        group = stream.groups.get(group_name) if stream is not None else None
        if stream is None or group is None:
            raise CommandError("nogroup")
        if id_text in ("$", "+") and (id_text == "$" or r.profile.name != "7.0"):
            raise CommandError("syntax_error")
        if id_text == ">":
            targets.append((key, stream, group, None))
        else:
            given = _strict_id(id_text)
            targets.append((key, stream, group, None if given == MAX_ID else given))
    served = False
    for key, stream, group, gt in targets:
        eager = r.profile.eager_consumers
        if gt is not None:
            consumer = _get_or_create_consumer(r, group, consumer_name, call.now)
            consumer.seen_time = call.now
            start = incr_id(gt) or ZERO_ID
            _serve_history(r, call, key, stream, group, consumer, start, count)
            served = True
            continue
        serve = stream.length > 0 and stream.entries[-1] > group.last_id
        if eager or serve:
            consumer = _get_or_create_consumer(r, group, consumer_name, call.now)
            consumer.seen_time = call.now
            if serve:
                _serve_new(r, call, key, stream, group, consumer, count, noack)
                served = True
    if not served and block_ms is not None and not r.in_transaction(call.client):
        r.block(call, keys, group_name, consumer_name, count, noack, block_ms)


def serve_blocked_7_0(r: Model, call: Call, key: str, blocked: BlockedRead) -> bool:
    """Redis 7.0 serving a reader blocked on ``key`` after the key was signalled.

    Returns True when the reader is unblocked: served (entries after the group's
    last_id; COUNT or 1000 of them; consumer created or its seen time refreshed
    now), or ended because the key is gone, is no stream, or lost the group.
    """
    value = r.lookup_any(call.db, key)
    if not isinstance(value, Stream):
        return True
    group = value.groups.get(blocked.group)
    if group is None:
        return True
    if value.last_id <= group.last_id:
        return False
    consumer = _get_or_create_consumer(r, group, blocked.consumer, call.now)
    consumer.seen_time = call.now
    count = blocked.count or BLOCKED_DEFAULT_COUNT
    _serve_new(r, call, key, value, group, consumer, count, blocked.noack)
    return True


# --------------------------------------------------------------------------
# XCLAIM / XAUTOCLAIM / XACK
# --------------------------------------------------------------------------


def _lookup_group(r: Model, call: Call) -> tuple[Stream, Group]:
    stream = r.lookup_stream(call.db, call.argv[1])
    group = stream.groups.get(call.argv[2]) if stream is not None else None
    if stream is None or group is None:
        raise CommandError("nogroup")
    return stream, group


def _drop_dangling(
    r: Model, call: Call, key: str, group: Group, entry_id: StreamID, nack: PendingEntry
) -> None:
    """A claim found the entry gone from the stream: the PEL entry is removed."""
    del group.pel[entry_id]
    if nack.consumer is not None:
        nack.consumer.pel.pop(entry_id, None)
    r.record(call, key, group, entry_id, "dropped", nack.consumer, None, nack, status="deleted")


def _claim(
    r: Model,
    call: Call,
    key: str,
    group: Group,
    entry_id: StreamID,
    nack: PendingEntry,
    consumer: Consumer,
    delivery_time: int,
    retrycount: int,
    justid: bool,
) -> None:
    previous = nack.consumer
    if previous is not consumer and previous is not None:
        previous.pel.pop(entry_id, None)
    nack.delivery_time = delivery_time
    if retrycount >= 0:
        nack.delivery_count = retrycount
    elif not justid:
        nack.delivery_count += 1
    if previous is not consumer:
        consumer.pel[entry_id] = nack
        nack.consumer = consumer
    if r.profile.active_time:
        consumer.active_time = call.now
    r.record(call, key, group, entry_id, "claimed", previous, consumer, nack)


def xclaim(r: Model, call: Call) -> None:
    """XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME ms] [RETRYCOUNT n]
    [FORCE] [JUSTID] [LASTID id]

    Gives pending entries to ``consumer`` when idle >= min-idle-time (0 or
    negative: always). IDs are parsed until the first non-ID, the rest are
    options; any bad option fails the whole command. An ID whose entry is gone
    from the stream is removed from the PEL instead of claimed. FORCE creates a
    PEL entry for an existing stream entry nobody holds. IDLE/TIME set the
    delivery time (future or negative values become now); RETRYCOUNT sets the
    counter, otherwise it is incremented unless JUSTID. LASTID moves the
    group's last_id forward only.

    Side effects: 7.0 creates the consumer / refreshes its seen time at the
    first successful claim only; 7.2+ on every call, and sets its active time
    on each successful claim.
    """
    argv = call.argv
    key = argv[1]
    stream, group = _lookup_group(r, call)
    minidle = max(_ll(argv[4]), 0)
    ids: list[StreamID] = []
    j = 5
    while j < len(argv):
        try:
            ids.append(parse_strict_id(argv[j]))
        except ParseError:
            break
        j += 1
    now = call.now
    force = justid = False
    retrycount = -1
    delivery_time = -1
    last_id = ZERO_ID
    while j < len(argv):
        moreargs = len(argv) - 1 - j
        low = argv[j].lower()
        if low == "force":
            force = True
        elif low == "justid":
            justid = True
        elif low == "idle" and moreargs:
            j += 1
            delivery_time = now - _ll(argv[j])
        elif low == "time" and moreargs:
            j += 1
            delivery_time = _ll(argv[j])
        elif low == "retrycount" and moreargs:
            j += 1
            retrycount = _ll(argv[j])
        elif low == "lastid" and moreargs:
            j += 1
            last_id = _strict_id(argv[j])
        else:
            raise CommandError("syntax_error")
        j += 1
    if last_id > group.last_id:
        group.last_id = last_id
    if delivery_time == -1 or delivery_time < 0 or delivery_time > now:
        delivery_time = now
    consumer: Consumer | None = None
    if r.profile.eager_consumers:
        consumer = _get_or_create_consumer(r, group, argv[3], now)
        consumer.seen_time = now
    for entry_id in ids:
        nack = group.pel.get(entry_id)
        if entry_id not in stream.entries:
            if nack is not None:
                _drop_dangling(r, call, key, group, entry_id, nack)
            continue
        if force and nack is None:
            nack = PendingEntry(None, now, 1)
            group.pel[entry_id] = nack
        if nack is None:
            continue
        if nack.consumer is not None and minidle and now - nack.delivery_time < minidle:
            continue
        if consumer is None:
            consumer = _get_or_create_consumer(r, group, argv[3], now)
            consumer.seen_time = now
        _claim(r, call, key, group, entry_id, nack, consumer, delivery_time, retrycount, justid)


def xautoclaim(r: Model, call: Call) -> None:
    """XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID]

    Scans the group PEL in ID order from ``start`` (``(id`` excludes it),
    examining at most COUNT*10 entries (COUNT defaults to 100) and claiming up
    to COUNT of those idle >= min-idle-time: delivery time becomes now and the
    counter is incremented unless JUSTID. Entries gone from the stream are
    removed from the PEL and count against COUNT. The reply's cursor is the
    next PEL ID after the scan, 0-0 at the end.

    Side effects: as XCLAIM (7.0: consumer at the first claim; 7.2+: always).
    """
    argv = call.argv
    key = argv[1]
    minidle = max(_ll(argv[4]), 0)
    start_text = argv[5]
    if len(start_text) > 1 and start_text[0] == "(":
        start = _strict_id(start_text[1:])
        nxt = incr_id(start)
        if nxt is None:
            raise CommandError("invalid_id")
        start = nxt
    else:
        start = _any_id(start_text)
    count = 100
    justid = False
    j = 6
    max_count = ((1 << 63) - 1) // 16
    while j < len(argv):
        moreargs = len(argv) - 1 - j
        low = argv[j].lower()
        if low == "count" and moreargs:
            value = parse_ll(argv[j + 1])
            if value is None or value < 1 or value > max_count:
                raise CommandError("out_of_range")
            count = value
            j += 1
        elif low == "justid":
            justid = True
        else:
            raise CommandError("syntax_error")
        j += 1
    stream, group = _lookup_group(r, call)
    now = call.now
    consumer: Consumer | None = None
    if r.profile.eager_consumers:
        consumer = _get_or_create_consumer(r, group, argv[3], now)
        consumer.seen_time = now
    attempts = count * 10
    position = start
    last_examined: StreamID | None = None
    while attempts and count:
        attempts -= 1
        found = next(iter(group.pel.irange(minimum=position)), None)
        if found is None:
            break
        entry_id: StreamID = found
        last_examined = entry_id
        position = incr_id(entry_id) or MAX_ID
        nack = group.pel[entry_id]
        if entry_id not in stream.entries:
            _drop_dangling(r, call, key, group, entry_id, nack)
            count -= 1
            continue
        if minidle and now - nack.delivery_time < minidle:
            continue
        if consumer is None:
            consumer = _get_or_create_consumer(r, group, argv[3], now)
            consumer.seen_time = now
        _claim(r, call, key, group, entry_id, nack, consumer, now, -1, justid)
        count -= 1
    cursor = ZERO_ID
    if last_examined is not None and last_examined != MAX_ID:
        after = next(iter(group.pel.irange(minimum=position)), None)
        cursor = after if after is not None else ZERO_ID
    call.result = cursor


def xack(r: Model, call: Call) -> None:
    """XACK key group id [id ...]

    Removes the given IDs from the group PEL (and their owners' PELs); unknown
    IDs are ignored. A missing key or group acknowledges nothing without error;
    otherwise one malformed ID fails the whole command.
    """
    argv = call.argv
    stream = r.lookup_stream(call.db, argv[1])
    group = stream.groups.get(argv[2]) if stream is not None else None
    if stream is None or group is None:
        return
    ids = [_strict_id(a) for a in argv[3:]]
    for entry_id in ids:
        nack = group.pel.pop(entry_id, None)
        if nack is None:
            continue
        if nack.consumer is not None:
            nack.consumer.pel.pop(entry_id, None)
        r.record(call, argv[1], group, entry_id, "acked", nack.consumer, None, nack, status="acked")


# --------------------------------------------------------------------------
# XGROUP / XSETID
# --------------------------------------------------------------------------

_XGROUP_ARITY = {"create": -5, "setid": -5, "destroy": 4, "createconsumer": 5, "delconsumer": 5}


def xgroup(r: Model, call: Call) -> None:
    """XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]
    XGROUP SETID key group id|$ [ENTRIESREAD n]
    XGROUP DESTROY key group
    XGROUP CREATECONSUMER key group consumer
    XGROUP DELCONSUMER key group consumer

    CREATE adds a group whose last_id is the given ID (``$``: the stream's
    last_id) and whose entries_read is ENTRIESREAD or unknown; MKSTREAM creates
    an empty stream when the key is missing. SETID moves last_id anywhere
    (backwards too) and resets entries_read to ENTRIESREAD or unknown; the PEL
    is untouched. DESTROY drops the group and its PEL. CREATECONSUMER adds an
    idle consumer (seen time now). DELCONSUMER removes a consumer with all the
    entries it holds.
    """
    argv = call.argv
    argc = len(argv)
    sub = argv[1].lower()
    if sub == "help":
        return
    arity = _XGROUP_ARITY.get(sub)
    if arity is None:
        raise CommandError("unknown_subcommand")
    if (arity > 0 and argc != arity) or (arity < 0 and argc < -arity):
        raise CommandError("wrong_arity")
    key, group_name = argv[2], argv[3]
    mkstream = False
    entries_read = INVALID_ENTRIES_READ
    i = 5
    while i < argc:
        low = argv[i].lower()
        if sub == "create" and low == "mkstream":
            mkstream = True
            i += 1
        elif sub in ("create", "setid") and low == "entriesread" and i + 1 < argc:
            entries_read = _ll(argv[i + 1])
            if entries_read < 0 and entries_read != INVALID_ENTRIES_READ:
                raise CommandError("out_of_range")
            i += 2
        else:
            raise CommandError("syntax_error")
    stream = r.lookup_stream(call.db, key)
    group: Group | None = None
    if not mkstream:
        if stream is None:
            raise CommandError("no_such_key")
        group = stream.groups.get(group_name)
        if group is None and sub in ("setid", "createconsumer", "delconsumer"):
            raise CommandError("nogroup")
    if sub == "create":
        if argc > 8:
            raise CommandError("syntax_error")
        if argv[4] == "$":
            start = stream.last_id if stream is not None else ZERO_ID
        else:
            start = _strict_id(argv[4])
        if stream is None:
            stream = r.create_stream(call.db, key)
        if group_name in stream.groups:
            raise CommandError("busygroup")
        stream.groups[group_name] = Group(group_name, start, entries_read, call.seq)
        return
    assert stream is not None
    if sub == "setid":
        if argc not in (5, 7):
            raise CommandError("syntax_error")
        assert group is not None
        group.last_id = stream.last_id if argv[4] == "$" else _any_id(argv[4])
        group.entries_read = entries_read
    elif sub == "destroy":
        if group is not None:
            r.close_group(call, call.db, key, group, "group_destroyed")
            del stream.groups[group_name]
            r.signal(call.db, key)
    elif sub == "createconsumer":
        assert group is not None
        if argv[4] not in group.consumers:
            group.consumers[argv[4]] = Consumer(argv[4], call.now)
    else:  # delconsumer
        assert group is not None
        consumer = group.consumers.pop(argv[4], None)
        if consumer is not None:
            for entry_id, nack in list(consumer.pel.items()):
                del group.pel[entry_id]
                r.record(
                    call,
                    key,
                    group,
                    entry_id,
                    "consumer_deleted",
                    consumer,
                    None,
                    nack,
                    status="consumer_deleted",
                )
            consumer.pel.clear()


def xsetid(r: Model, call: Call) -> None:
    """XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]

    Sets the stream's last generated ID (not below its last entry), and
    optionally ``entries_added`` (not below the length) and
    ``max_deleted_entry_id`` (not above the new last ID). A missing key is an
    error. 7.2+ also refuses a last ID below the current max deleted ID.
    """
    argv = call.argv
    new_last = _strict_id(argv[2])
    entries_added = -1
    max_deleted = ZERO_ID
    i = 3
    while i < len(argv):
        moreargs = len(argv) - 1 - i
        low = argv[i].lower()
        if low == "entriesadded" and moreargs:
            entries_added = _ll(argv[i + 1])
            if entries_added < 0:
                raise CommandError("out_of_range")
            i += 2
        elif low == "maxdeletedid" and moreargs:
            max_deleted = _strict_id(argv[i + 1])
            if new_last < max_deleted:
                raise CommandError("id_too_small")
            i += 2
        else:
            raise CommandError("syntax_error")
    stream = r.lookup_stream(call.db, argv[1])
    if stream is None:
        raise CommandError("no_such_key")
    if r.profile.xsetid_checks_max_deleted and new_last < stream.max_deleted_entry_id:
        raise CommandError("id_too_small")
    if stream.length > 0:
        if new_last < stream.entries[-1]:
            raise CommandError("id_too_small")
        if entries_added != -1 and stream.length > entries_added:
            raise CommandError("out_of_range")
    stream.last_id = new_last
    if entries_added != -1:
        stream.entries_added = entries_added
    if max_deleted != ZERO_ID:
        stream.max_deleted_entry_id = max_deleted


# --------------------------------------------------------------------------
# Keyspace commands
# --------------------------------------------------------------------------


def del_keys(r: Model, call: Call) -> None:
    """DEL key [key ...] / UNLINK key [key ...]

    Removes each key that exists; a stream goes with its groups and PELs (their
    pending entries close as ``key_deleted``).
    """
    for key in call.argv[1:]:
        r.delete_key(call, call.db, key)


def rename(r: Model, call: Call) -> None:
    """RENAME src dst / RENAMENX src dst

    Moves the value of ``src`` to ``dst``, replacing what ``dst`` held (RENAMENX
    does nothing when ``dst`` exists). A missing ``src`` is an error; renaming a
    key onto itself changes nothing. A stream keeps its groups, PELs and history.
    """
    src, dst = call.argv[1], call.argv[2]
    nx = call.command == "RENAMENX"
    if r.lookup_any(call.db, src) is None:
        raise CommandError("no_such_key")
    if src == dst:
        return
    if nx and r.lookup_any(call.db, dst) is not None:
        return
    r.delete_key(call, call.db, dst)
    r.move_key(call, call.db, src, dst)


def flush(r: Model, call: Call) -> None:
    """FLUSHDB [ASYNC|SYNC] / FLUSHALL [ASYNC|SYNC]

    Removes every key of the current database (FLUSHALL: of all databases).
    """
    argv = call.argv
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() not in ("async", "sync")):
        raise CommandError("syntax_error")
    r.flush(call, None if call.command == "FLUSHALL" else call.db)


def set_string(r: Model, call: Call) -> None:
    """SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT n|KEEPTTL]

    Not a stream command, but it replaces whatever the key held, a stream
    included (its pending entries close as ``key_deleted``). With GET on a
    non-string key it fails with WRONGTYPE and changes nothing. Expiry is not
    modelled.
    """
    argv = call.argv
    opts = {a.lower() for a in argv[3:]}
    key = argv[1]
    current = r.lookup_any(call.db, key)
    if (
        "get" in opts
        and current is not None
        and not (isinstance(current, OtherValue) and current.type_name == "string")
    ):
        raise CommandError("wrongtype")
    if ("nx" in opts and current is not None) or ("xx" in opts and current is None):
        return
    r.delete_key(call, call.db, key)
    r.set_other(call.db, key, "string")


def mset(r: Model, call: Call) -> None:
    """MSET key value [key value ...]: replaces every key named, streams included."""
    argv = call.argv
    if len(argv) < 3 or len(argv) % 2 == 0:
        raise CommandError("wrong_arity")
    for key in argv[1::2]:
        r.delete_key(call, call.db, key)
        r.set_other(call.db, key, "string")


def make_type_writer(type_name: str) -> Callable[[Model, Call], None]:
    """A command that creates or updates a ``type_name`` value and fails on a stream key."""

    def handler(r: Model, call: Call) -> None:
        key = call.argv[1]
        current = r.lookup_any(call.db, key)
        if current is None:
            r.set_other(call.db, key, type_name)
        elif isinstance(current, Stream) or current.type_name != type_name:
            raise CommandError("wrongtype")

    handler.__doc__ = (
        f"Writes a {type_name} value: creates the key if missing, WRONGTYPE on a stream key."
    )
    return handler


# --------------------------------------------------------------------------
# PELENGINE.LOAD: a starting state from a snapshot (not a server command)
# --------------------------------------------------------------------------

LOAD_COMMAND = "PELENGINE.LOAD"


def load(r: Model, call: Call) -> None:
    """PELENGINE.LOAD BEGIN | KEY key type | STREAM key last_id entries_added
    max_deleted_id first_id | NODE key master_id nbytes nfields field... (id live)... |
    GROUP key group last_id entries_read | CONSUMER key group consumer seen_ms active_ms |
    PENDING key group (id consumer delivery_ms delivery_count)...

    Not a command of any server: the rows ``pelengine ingest-rdb`` and ``ingest-aof``
    (an AOF whose base is an RDB snapshot) write for the state the snapshot holds, in
    this order per key, so that the replay starts exactly where the server stood,
    times and counters included, which no ordinary command can set.

    BEGIN: the snapshot replaces the whole keyspace (every key of every db goes, as
    on FLUSHALL). KEY: a key of another type (``string``, ``list``, ...). STREAM: an
    empty stream with its counters (``-1`` for a counter the snapshot does not have:
    the one the server derives on load). NODE: one internal node appended at the
    stream's tail, with its exact listpack size and master fields, and its entries in
    ID order, ``1`` live, ``0`` deleted. GROUP: a consumer group (``entries_read`` -1:
    unknown). CONSUMER: a consumer with its seen and active time (-1: none). PENDING:
    pending entries of a group and who holds them, with their delivery time and
    count; each is recorded in the history tables as ``loaded`` (no delivery was
    seen: ``deliveries`` 0, no delivery times), and each starts a ``pel_history``
    version.

    A malformed row fails the whole row (``syntax_error``) and changes nothing.
    """
    argv = call.argv
    sub = argv[1].upper()
    try:
        if sub == "BEGIN" and len(argv) == 2:
            r.flush(call, None)
            return
        if len(argv) < 3:
            raise CommandError("syntax_error")
        key = argv[2]
        if sub == "KEY" and len(argv) == 4:
            r.delete_key(call, call.db, key)
            r.set_other(call.db, key, argv[3])
            return
        if sub == "STREAM" and len(argv) == 7:
            _load_stream(r, call, key, argv[3:])
            return
        stream = r.lookup_stream(call.db, key)
        if stream is None:
            raise CommandError("no_such_key")
        if sub == "NODE" and len(argv) >= 6:
            _load_node(stream, argv[3:])
        elif sub == "GROUP" and len(argv) == 6:
            _load_group(call, stream, argv[3:])
        elif sub == "CONSUMER" and len(argv) == 7:
            group = _loaded_group(stream, argv[3])
            consumer = Consumer(argv[4], _load_int(argv[5]))
            consumer.active_time = _load_int(argv[6])
            group.consumers[consumer.name] = consumer
        elif sub == "PENDING" and len(argv) >= 8 and (len(argv) - 4) % 4 == 0:
            _load_pending(r, call, key, stream, argv[3:])
        else:
            raise CommandError("syntax_error")
    except ParseError:
        raise CommandError("syntax_error") from None
    call.touched_stream = True


def _load_int(text: str) -> int:
    value = parse_ll(text)
    if value is None:
        raise CommandError("syntax_error")
    return value


def _load_stream(r: Model, call: Call, key: str, args: list[str]) -> None:
    last_id = parse_strict_id(args[0])
    entries_added = _load_int(args[1])
    max_deleted = parse_strict_id(args[2])
    first_id = parse_strict_id(args[3])
    r.delete_key(call, call.db, key)
    stream = r.create_stream(call.db, key)
    stream.last_id = last_id
    stream.entries_added = entries_added
    stream.max_deleted_entry_id = max_deleted
    stream.first_id = first_id


def _load_node(stream: Stream, args: list[str]) -> None:
    master = parse_strict_id(args[0])
    nbytes = _load_int(args[1])
    nfields = _load_int(args[2])
    if nfields < 0 or len(args) < 3 + nfields + 2 or (len(args) - 3 - nfields) % 2:
        raise CommandError("syntax_error")
    fields = tuple(args[3 : 3 + nfields])
    pairs = args[3 + nfields :]
    entries = [(parse_strict_id(pairs[i]), pairs[i + 1] == "1") for i in range(0, len(pairs), 2)]
    if entries[0][0] < master or (stream.nodes and master <= stream.nodes[-1].last_id):
        raise CommandError("syntax_error")
    node = Node(master, fields, nbytes)
    node.total = len(entries)
    node.live = sum(1 for _, live in entries if live)
    for entry_id, _live in entries:
        node.appended(entry_id)
    stream.nodes.append(node)
    stream.entries.update(entry_id for entry_id, live in entries if live)


def _load_group(call: Call, stream: Stream, args: list[str]) -> None:
    name = args[0]
    entries_read = _load_int(args[2])
    group = Group(name, parse_strict_id(args[1]), entries_read, created_seq=call.seq)
    stream.groups[name] = group


def _loaded_group(stream: Stream, name: str) -> Group:
    group = stream.groups.get(name)
    if group is None:
        raise CommandError("nogroup")
    return group


def _load_pending(r: Model, call: Call, key: str, stream: Stream, args: list[str]) -> None:
    group = _loaded_group(stream, args[0])
    rows = args[1:]
    parsed = []
    for i in range(0, len(rows), 4):
        consumer = group.consumers.get(rows[i + 1])
        if consumer is None:
            raise CommandError("syntax_error")
        parsed.append(
            (parse_strict_id(rows[i]), consumer, _load_int(rows[i + 2]), _load_int(rows[i + 3]))
        )
    for entry_id, consumer, delivery_ms, count in parsed:
        nack = PendingEntry(consumer, delivery_ms, count)
        group.pel[entry_id] = nack
        consumer.pel[entry_id] = nack
        r.loaded(call, key, group, entry_id, nack)
