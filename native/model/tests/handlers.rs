//! Command handlers through the replayer: the history a read, a claim and an ack
//! leave, a blocked reader served by a later write, an overflow refused.

mod common;

use common::profile;
use pelmodel::ids::StreamId;
use pelmodel::lag::group_lag;
use pelmodel::{Replayer, Unit};

/// One command through the replayer: its outcome kind and error, or the internal
/// error (a test failure through `?`, never a panic).
fn apply(
    r: &mut Replayer,
    seq: i64,
    args: &[&str],
) -> Result<(&'static str, Option<String>), String> {
    let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let o = r.apply(seq, 1000 + seq, &argv, Some(0), Some("c"), Unit::Follow)?;
    Ok((o.kind, o.error))
}

#[test]
fn read_claim_ack_history() -> Result<(), String> {
    let mut r = Replayer::with_defaults(profile("7.2")?);
    assert_eq!(
        apply(&mut r, 1, &["XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"])?.0,
        "applied"
    );
    assert_eq!(
        apply(&mut r, 2, &["XADD", "k", "1-1", "f", "v"])?.0,
        "applied"
    );
    assert_eq!(
        apply(
            &mut r,
            3,
            &["XREADGROUP", "GROUP", "g", "a", "STREAMS", "k", ">"]
        )?
        .0,
        "applied"
    );
    assert_eq!(
        apply(&mut r, 4, &["XCLAIM", "k", "g", "b", "0", "1-1"])?.0,
        "applied"
    );
    assert_eq!(
        apply(&mut r, 5, &["XACK", "k", "g", "1-1", "nope"])?,
        ("error", Some("invalid_id".to_string()))
    );
    assert_eq!(apply(&mut r, 6, &["xack", "k", "g", "1-1"])?.0, "applied");
    let t = r.drain_tables();
    assert_eq!(
        t.ownership_changes.change,
        ["delivered", "claimed", "acked"]
    );
    assert_eq!(
        t.ownership_changes.command,
        ["XREADGROUP", "XCLAIM", "XACK"]
    );
    assert_eq!(t.pel_history.len(), 2);
    assert_eq!(t.pel_history.valid_to_seq, [Some(4), Some(6)]);
    let (_, _, stream) = r.streams()[0];
    let group = &stream.groups["g"];
    assert_eq!(group_lag(stream, group, false), Some(0));
    assert_eq!(
        group
            .records
            .get(&StreamId::new(1, 1))
            .map(|r| r.status.as_str()),
        Some("acked")
    );
    assert_eq!(r.counters.errors.get("invalid_id"), Some(&1));
    Ok(())
}

#[test]
fn blocked_reader_is_served_by_a_later_write() -> Result<(), String> {
    let mut r = Replayer::with_defaults(profile("7.0")?);
    apply(&mut r, 1, &["XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"])?;
    let argv: Vec<String> = [
        "XREADGROUP",
        "GROUP",
        "g",
        "a",
        "BLOCK",
        "0",
        "STREAMS",
        "k",
        ">",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    r.apply(2, 1002, &argv, Some(0), Some("reader"), Unit::Follow)?;
    assert_eq!(r.blocked_clients().len(), 1);
    apply(&mut r, 3, &["XADD", "k", "*", "f", "v"])?;
    assert!(r.blocked_clients().is_empty());
    let t = r.drain_tables();
    assert_eq!(t.ownership_changes.seq, [3]);
    assert_eq!(t.ownership_changes.request_seq, [2]);
    Ok(())
}

#[test]
fn overflow_is_an_internal_error() -> Result<(), String> {
    let mut r = Replayer::with_defaults(profile("7.4")?);
    apply(&mut r, 1, &["XADD", "k", "1-1", "f", "v"])?;
    apply(
        &mut r,
        2,
        &["XSETID", "k", "2-0", "ENTRIESADDED", "9223372036854775807"],
    )?;
    let argv: Vec<String> = ["XADD", "k", "*", "f", "v"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(r.apply(3, 5, &argv, None, None, Unit::Follow).is_err());
    Ok(())
}
