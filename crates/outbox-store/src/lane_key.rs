//! Which lane an alert is in, written once for every statement that names a lane. It sits
//! below the modules that join, release, read or lock lanes (`alerts`, `lifecycle`,
//! `dispatch`, `lanes`), so none of them imports another for it.

/// The key of the lane an alert is in, at a destination that orders per key: the ordering
/// key its approval gave, else its subject (`alert_lanes.ordering_key` holds it). Over a
/// row aliased `a` with the columns `ordering_key` and `subject`: an alert's row, or an
/// approval's row before it is inserted. Every statement that names a lane writes this
/// fragment (a test holds the store to that), so that the rule cannot differ between the
/// one that joins a lane and the ones that release, read or lock it.
pub(crate) const LANE_KEY: &str = "COALESCE(a.ordering_key, a.subject)";
