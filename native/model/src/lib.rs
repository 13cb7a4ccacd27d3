//! The pelengine consumer-group model in Rust: a port of `pelengine/model` (the
//! exact model of Redis Streams consumer groups), without Python or Arrow.
//!
//! * `ids`: stream IDs and Redis' number parsers;
//! * `listpack`: the node sizes approximate trimming depends on;
//! * `state`: streams, groups, consumers, pending entries, delivery records;
//! * `calls`: version profiles, calls, blocked reads;
//! * `units`: execution units (MULTI/EXEC, scripts);
//! * `commands`: one handler per command, and the lag estimates;
//! * `history`: the history rows (`ownership_changes`, `pel_history`, delivery
//!   segments, group incarnations), column by column;
//! * `replay`: the `Replayer` applying logged commands;
//! * `persist`: the model between runs as plain data with a schema version.
//!
//! The Python model is the reference: every outcome, counter, history row and state
//! field is the same for every input, its quirks included.

// Library code never panics on input (the lints of `[workspace.lints]` in ../Cargo.toml).

/// The model's insertion-ordered maps. Their order is insertion order whatever the
/// hasher; Fx hashing (rustc's) is several times cheaper than SipHash on the short
/// keys the model hashes (names, IDs), and nothing here hashes keys an attacker
/// chooses to slow a shared server down: a replay only hurts itself.
pub type IndexMap<K, V> = indexmap::IndexMap<K, V, rustc_hash::FxBuildHasher>;

pub mod calls;
pub mod commands;
pub mod history;
pub mod ids;
pub mod listpack;
pub mod persist;
pub mod printable;
pub mod replay;
pub mod repr;
pub mod routing;
pub mod state;
pub mod texts;
pub mod units;

pub use calls::{BlockedRead, Call, Profile};
pub use history::HistoryTables;
pub use ids::{format_id, id_parts, StreamId};
pub use persist::{StateData, StateError, StateSections, STATE_SCHEMA_VERSION};
pub use replay::{command_name, get_profile, resolve_profile, Outcome, Replayer, Unit, PROFILES};
pub use state::{
    Consumer, Counters, DeliveryRecord, Group, Node, PelVersion, PendingEntry, Stream, Value,
    INVALID_ENTRIES_READ,
};
