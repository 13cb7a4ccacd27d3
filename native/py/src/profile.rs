//! The version profile a replay follows, as pelengine resolved it.
//!
//! Which profiles exist and which server versions each describes is known in one
//! place, the Python model (`pelengine.model.replay`: `PROFILES`, `resolve_profile`).
//! The core receives the resolved `Profile` and reads its fields; given a name (or a
//! server version) instead, it asks that resolver, as it does for the profile a saved
//! model names.

use pelmodel::Profile;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// `profile`: a `pelengine.model.replay.Profile`, or a profile name or server version
/// that `pelengine.model.get_profile` resolves (its `ValueError` for one it does not
/// know).
pub fn profile_of(profile: &Bound<'_, PyAny>) -> PyResult<Profile> {
    let resolved = if profile.is_instance_of::<PyString>() {
        profile
            .py()
            .import("pelengine.model")?
            .call_method1("get_profile", (profile,))?
    } else {
        profile.clone()
    };
    let flag = |name: &str| -> PyResult<bool> { resolved.getattr(name)?.extract() };
    Ok(Profile {
        name: resolved.getattr("name")?.extract()?,
        active_time: flag("active_time")?,
        eager_consumers: flag("eager_consumers")?,
        xsetid_checks_max_deleted: flag("xsetid_checks_max_deleted")?,
        unit_time_snapshot: flag("unit_time_snapshot")?,
        strict_lag: flag("strict_lag")?,
        script_block: flag("script_block")?,
    })
}

/// The profile a saved model names, resolved by Python's resolver (the interpreter
/// taken for the call: loading runs with it released). Err: `"Type: message"` of the
/// exception it raised, as Python's `persist.load` quotes it.
pub fn resolve_saved(name: &str) -> Result<Profile, String> {
    Python::attach(|py| {
        profile_of(PyString::new(py, name).as_any()).map_err(|e| {
            let class = e
                .get_type(py)
                .name()
                .map_or_else(|_| "Exception".to_owned(), |n| n.to_string());
            let message = e
                .value(py)
                .str()
                .map_or_else(|_| String::new(), |s| s.to_string());
            format!("{class}: {message}")
        })
    })
}
