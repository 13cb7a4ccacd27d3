//! The pelengine consumer-group model in Rust: a port of `pelengine/model` (the
//! exact model of Redis Streams consumer groups), without Python or Arrow.
//!
//! Modules from the bottom up (a module uses only those above it in this list;
//! `tests/layers.rs` holds them to it):
//!
//! * `ids`, `printable`: stream IDs and Redis' number parsers; Python's printable
//!   characters;
//! * `repr`, `texts`, `listpack`, `units`, `state`: Python's `repr` of strings; packed
//!   string columns; the node sizes approximate trimming depends on; execution units
//!   (MULTI/EXEC, scripts); streams, groups, consumers, pending entries, delivery
//!   records, the keyspace;
//! * `calls`: version profiles (resolved by the caller), calls, blocked reads;
//! * `fail`, `history`: why a command did not apply; the history rows
//!   (`ownership_changes`, `pel_history`, delivery segments, group incarnations),
//!   column by column;
//! * `recorder`, `waits`, `lag`, `nodes`: what a change of a pending entry records;
//!   blocked readers and signalled keys; the `entries_read` and lag estimates; a
//!   stream's internal nodes;
//! * `model`, `trim`: what a command handler works on (keyspace, recorder, waits);
//!   trimming a stream's head;
//! * `handlers`: one handler per command, by command family, and the table of them;
//! * `replay`: the `Replayer` applying logged commands;
//! * `persist`, `routing`: the model between runs as plain data with a schema
//!   version; which keys a command touches.
//!
//! The Python model is the reference: every outcome, counter, history row and state
//! field is the same for every input, its quirks included. Which server versions a
//! profile describes is the Python model's alone (`pelengine.model.replay`): a
//! `Replayer` is made with its `Profile`, and a saved model names its profile, which
//! `persist::load` asks the caller to resolve.

// Library code never panics on input (the lints of `[workspace.lints]` in ../Cargo.toml).

/// The model's insertion-ordered maps. Their order is insertion order whatever the
/// hasher; Fx hashing (rustc's) is several times cheaper than SipHash on the short
/// keys the model hashes (names, IDs), and nothing here hashes keys an attacker
/// chooses to slow a shared server down: a replay only hurts itself.
pub type IndexMap<K, V> = indexmap::IndexMap<K, V, rustc_hash::FxBuildHasher>;

pub mod calls;
pub mod fail;
pub mod handlers;
pub mod history;
pub mod ids;
pub mod lag;
pub mod listpack;
pub mod model;
pub mod nodes;
pub mod persist;
pub mod printable;
pub mod recorder;
pub mod replay;
pub mod repr;
pub mod routing;
pub mod state;
pub mod texts;
pub mod trim;
pub mod units;
pub mod waits;

pub use calls::{command_name, BlockedRead, Call, Profile, Trigger};
pub use history::HistoryTables;
pub use ids::{format_id, id_parts, StreamId};
pub use persist::{StateData, StateError, StateSections, STATE_SCHEMA_VERSION};
pub use replay::{Outcome, Replayer, Unit};
pub use state::{
    Consumer, Counters, DeliveryRecord, Group, Node, PelVersion, PendingEntry, Stream, Value,
    INVALID_ENTRIES_READ,
};
