//! PELENGINE.LOAD: a starting state from a snapshot (not a server command).

use std::collections::HashMap;

use crate::calls::Call;
use crate::fail::{internal, Fail};
use crate::ids::{parse_ll, parse_strict_id, StreamId};
use crate::model::Model;
use crate::recorder::Recorder;
use crate::state::{Consumer, Group, Node, PendingEntry, Stream};

use super::{arg, consumer_mut, lookup_stream_in};

/// Not a command of any server: see `load`.
pub const LOAD_COMMAND: &str = "PELENGINE.LOAD";

const SYNTAX: Fail = Fail::Command("syntax_error");

/// PELENGINE.LOAD BEGIN | KEY key type | STREAM key last_id entries_added
/// max_deleted_id first_id | NODE key master_id nbytes nfields field... (id live)... |
/// GROUP key group last_id entries_read | CONSUMER key group consumer seen_ms active_ms |
/// PENDING key group (id consumer delivery_ms delivery_count)...
///
/// Not a command of any server: the rows `pelengine ingest-rdb` and `ingest-aof`
/// (an AOF whose base is an RDB snapshot) write for the state the snapshot holds, in
/// this order per key, so that the replay starts exactly where the server stood,
/// times and counters included, which no ordinary command can set.
///
/// BEGIN: the snapshot replaces the whole keyspace (every key of every db goes, as
/// on FLUSHALL). KEY: a key of another type (`string`, `list`, ...). STREAM: an
/// empty stream with its counters (`-1` for a counter the snapshot does not have:
/// the one the server derives on load). NODE: one internal node appended at the
/// stream's tail, with its exact listpack size and master fields, and its entries in
/// ID order, `1` live, `0` deleted. GROUP: a consumer group (`entries_read` -1:
/// unknown). CONSUMER: a consumer with its seen and active time (-1: none). PENDING:
/// pending entries of a group and who holds them, with their delivery time and
/// count; each is recorded in the history tables as `loaded` (no delivery was
/// seen: `deliveries` 0, no delivery times), and each starts a `pel_history`
/// version.
///
/// A malformed row fails the whole row (`syntax_error`) and changes nothing.
///
/// Two rows the Python model takes with object-identity effects the name-based
/// state cannot hold are refused with `Fail::Internal` (changing nothing): a
/// CONSUMER row replacing a consumer that holds pending entries, and a PENDING row
/// giving an entry pending with one consumer to another.
pub fn load(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let sub = arg(argv, 1)?.to_uppercase();
    if sub == "BEGIN" && argv.len() == 2 {
        return m.flush(call, None);
    }
    if argv.len() < 3 {
        return Err(SYNTAX);
    }
    let key = arg(argv, 2)?;
    if sub == "KEY" && argv.len() == 4 {
        m.delete_key(call, call.db, key)?;
        m.set_other(call.db, key, arg(argv, 3)?);
        return Ok(());
    }
    if sub == "STREAM" && argv.len() == 7 {
        return load_stream(m, call, key, &argv[3..]);
    }
    let Some(stream) = lookup_stream_in(m.keys, call.db, key)? else {
        return Err(Fail::Command("no_such_key"));
    };
    if sub == "NODE" && argv.len() >= 6 {
        load_node(stream, &argv[3..])?;
    } else if sub == "GROUP" && argv.len() == 6 {
        load_group(call, stream, &argv[3..])?;
    } else if sub == "CONSUMER" && argv.len() == 7 {
        let group = loaded_group(stream, &argv[3])?;
        let name = &argv[4];
        let mut consumer = Consumer::new(name, load_int(&argv[5])?);
        consumer.active_time = load_int(&argv[6])?;
        if group.consumers.get(name).is_some_and(|c| !c.pel.is_empty()) {
            return Err(internal(
                "PELENGINE.LOAD CONSUMER replaces a consumer holding pending entries \
                 (not modelled by the name-based state)",
            ));
        }
        group.consumers.insert(name.clone(), consumer);
    } else if sub == "PENDING" && argv.len() >= 8 && (argv.len() - 4).is_multiple_of(4) {
        load_pending(&mut m.hist, call, key, stream, &argv[3..])?;
    } else {
        return Err(SYNTAX);
    }
    call.touched_stream.set(true);
    Ok(())
}

fn load_int(text: &str) -> Result<i64, Fail> {
    parse_ll(text).ok_or(SYNTAX)
}

fn load_id(text: &str) -> Result<StreamId, Fail> {
    parse_strict_id(text).map_err(|_| SYNTAX)
}

fn load_stream(m: &mut Model, call: &Call, key: &str, args: &[String]) -> Result<(), Fail> {
    let last_id = load_id(arg(args, 0)?)?;
    let entries_added = load_int(arg(args, 1)?)?;
    let max_deleted = load_id(arg(args, 2)?)?;
    let first_id = load_id(arg(args, 3)?)?;
    m.delete_key(call, call.db, key)?;
    m.create_stream(call.db, key);
    let stream = m.stream_mut(call.db, key)?;
    stream.last_id = last_id;
    stream.entries_added = entries_added;
    stream.max_deleted_entry_id = max_deleted;
    stream.first_id = first_id;
    Ok(())
}

fn load_node(stream: &mut Stream, args: &[String]) -> Result<(), Fail> {
    let master = load_id(arg(args, 0)?)?;
    let nbytes = load_int(arg(args, 1)?)?;
    let nfields = load_int(arg(args, 2)?)?;
    let n = args.len() as i128;
    let nf = i128::from(nfields);
    if nfields < 0 || n < 3 + nf + 2 || (n - 3 - nf) % 2 != 0 {
        return Err(SYNTAX);
    }
    let nfields = nfields as usize; // fits: below args.len()
    let fields: Vec<String> = args[3..3 + nfields].to_vec();
    let pairs = &args[3 + nfields..];
    let mut entries: Vec<(StreamId, bool)> = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        entries.push((
            load_id(&pair[0])?,
            pair.get(1).is_some_and(|live| live == "1"),
        ));
    }
    let Some(first) = entries.first() else {
        return Err(internal("IndexError: no entries"));
    };
    if first.0 < master
        || stream
            .nodes
            .back()
            .is_some_and(|tail| master <= tail.last_id)
    {
        return Err(SYNTAX);
    }
    let mut node = Node::new(master, fields, nbytes);
    node.total = entries.len() as i64;
    node.live = entries.iter().filter(|(_, live)| *live).count() as i64;
    for (entry_id, _) in &entries {
        node.appended(*entry_id);
    }
    stream.nodes.push_back(node);
    for (entry_id, live) in entries {
        if live {
            stream.entries.insert(entry_id);
        }
    }
    Ok(())
}

fn load_group(call: &Call, stream: &mut Stream, args: &[String]) -> Result<(), Fail> {
    let name = arg(args, 0)?;
    let entries_read = load_int(arg(args, 2)?)?;
    let group = Group::new(name, load_id(arg(args, 1)?)?, entries_read, call.seq);
    stream.groups.insert(name.to_string(), group);
    Ok(())
}

fn loaded_group<'s>(stream: &'s mut Stream, name: &str) -> Result<&'s mut Group, Fail> {
    stream.groups.get_mut(name).ok_or(Fail::Command("nogroup"))
}

fn load_pending(
    hist: &mut Recorder,
    call: &Call,
    key: &str,
    stream: &mut Stream,
    args: &[String],
) -> Result<(), Fail> {
    let Stream {
        entries, groups, ..
    } = stream;
    let group = groups
        .get_mut(arg(args, 0)?)
        .ok_or(Fail::Command("nogroup"))?;
    let rows = &args[1..];
    let mut parsed: Vec<(StreamId, &str, i64, i64)> = Vec::with_capacity(rows.len() / 4);
    for row in rows.chunks(4) {
        let consumer = arg(row, 1)?;
        if !group.consumers.contains_key(consumer) {
            return Err(SYNTAX);
        }
        parsed.push((
            load_id(arg(row, 0)?)?,
            consumer,
            load_int(arg(row, 2)?)?,
            load_int(arg(row, 3)?)?,
        ));
    }
    // An entry pending with another consumer would stay in that consumer's PEL in the
    // Python model (a stale object): refused, see `load`.
    let mut holders: HashMap<StreamId, &str> = HashMap::new();
    for (entry_id, consumer, _, _) in &parsed {
        let holder = match holders.get(entry_id) {
            Some(holder) => Some(*holder),
            None => group.pel.get(entry_id).and_then(|n| n.consumer.as_deref()),
        };
        if holder.is_some_and(|h| h != *consumer) {
            return Err(internal(
                "PELENGINE.LOAD PENDING gives a pending entry to another consumer \
                 (not modelled by the name-based state)",
            ));
        }
        holders.insert(*entry_id, consumer);
    }
    let mut g = hist.open(call, key, group);
    for (entry_id, consumer, delivery_ms, count) in parsed {
        g.pel.insert(
            entry_id,
            PendingEntry::new(Some(consumer.to_string()), delivery_ms, count),
        );
        consumer_mut(g.consumers, consumer)?.pel.insert(entry_id);
        let exists = entries.contains(&entry_id);
        let nack = g
            .pel
            .get_mut(&entry_id)
            .ok_or_else(|| internal("KeyError: not pending"))?;
        g.log.loaded(entry_id, nack, exists)?;
    }
    Ok(())
}
