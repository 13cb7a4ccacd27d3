//! Execution units: what a server runs without running anything else in between.
//!
//! A transaction is what one client sends between `MULTI` and `EXEC`/`DISCARD`;
//! a script is its `EVAL`/`EVALSHA`/`FCALL` row followed by the rows of the
//! commands it ran, whose client is `lua` (as MONITOR prints them, `[0 lua]`).
//! See `Replayer` (`place`) for how the replay follows them.

/// Commands that run a script: the commands it runs follow as rows of client `lua`.
pub const SCRIPT_CALLS: [&str; 6] = [
    "EVAL",
    "EVALSHA",
    "EVAL_RO",
    "EVALSHA_RO",
    "FCALL",
    "FCALL_RO",
];
/// The client MONITOR names for the commands a script runs.
pub const LUA_CLIENT: &str = "lua";
