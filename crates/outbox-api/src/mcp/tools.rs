//! The five tools an agent calls, as the MCP server lists them: names, the descriptions
//! that teach the approval rules, and input schemas generated from argument types.
//!
//! The argument types here exist for their schemas: the arguments themselves are read
//! by the same parsers and into the same request types as the HTTP bodies
//! (`body::parse_json` into `ApproveRequest` and `ReviseRequest`), so a tool call is
//! refused exactly where and how an HTTP request would be.

use outbox_core::AlertState;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::Deserialize;

/// `approve_alert`.
pub(crate) const APPROVE_ALERT: &str = "approve_alert";
/// `revise_alert`.
pub(crate) const REVISE_ALERT: &str = "revise_alert";
/// `get_alert`.
pub(crate) const GET_ALERT: &str = "get_alert";
/// `list_destinations`.
pub(crate) const LIST_DESTINATIONS: &str = "list_destinations";
/// `list_alerts`.
pub(crate) const LIST_ALERTS: &str = "list_alerts";

/// Every tool's name, in the order they are listed.
pub(crate) const NAMES: [&str; 5] = [
    APPROVE_ALERT,
    REVISE_ALERT,
    GET_ALERT,
    LIST_DESTINATIONS,
    LIST_ALERTS,
];

/// The arguments of `approve_alert`: the identity and what to deliver.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // read only for its schema
pub(crate) struct ApproveArguments {
    /// The name of one of the tenant's destinations (list_destinations).
    #[schemars(length(min = 1, max = 512), regex(pattern = crate::alerts::TEXT_PATTERN))]
    destination: String,
    /// What the alert is about, stable across reruns: `contract:ACME-7`. At most 512 bytes
    /// of UTF-8, not blank, no control or bidirectional characters.
    #[schemars(length(min = 1, max = 512), regex(pattern = crate::alerts::TEXT_PATTERN))]
    subject: String,
    /// Which occurrence of the subject this is, decided from the facts, never from the
    /// clock of the run or a random id: `2027-01-31/30d` (the renewal date and the 30-day
    /// tier). A rerun gives the same occurrence. At most 512 bytes, as `subject`.
    #[schemars(length(min = 1, max = 512), regex(pattern = crate::alerts::TEXT_PATTERN))]
    occurrence: String,
    /// What the destination receives: a non-empty JSON object of at most 256 KiB, nested
    /// at most 64 levels. An email destination reads its optional `recipients` member (a
    /// list of at most 100 mail addresses).
    #[schemars(extend("minProperties" = 1))]
    payload: JsonObject,
}

/// The arguments of `revise_alert`: which alert to correct, the corrected payload and why.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // read only for its schema
pub(crate) struct ReviseArguments {
    /// The alert to correct: the latest revision of its identity (an identity-conflict
    /// names it as `latest_alert_id`).
    alert_id: String,
    /// The corrected payload: a non-empty JSON object of at most 256 KiB, nested at most
    /// 64 levels.
    #[schemars(extend("minProperties" = 1))]
    payload: JsonObject,
    /// Why the correction is made, for the evidence trail: at most 2000 bytes of UTF-8,
    /// not blank.
    #[schemars(length(min = 1, max = 2000), regex(pattern = crate::alerts::TEXT_PATTERN))]
    reason: String,
}

/// The arguments of `get_alert`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // read only for its schema
pub(crate) struct GetAlertArguments {
    /// The alert's id (as `approve_alert` returned it).
    alert_id: String,
}

/// The arguments of `list_destinations`: none.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoArguments {}

/// The arguments of `list_alerts`: filters and paging, all optional. Read as they are
/// schemed, then checked by the listing's own query rules (`AlertQuery::parse`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListAlertsArguments {
    /// Only alerts in this state.
    #[serde(default)]
    #[schemars(schema_with = "state_schema")]
    pub(crate) state: Option<String>,
    /// Only alerts to this destination (its name).
    #[schemars(length(max = 512))]
    pub(crate) destination: Option<String>,
    /// Only alerts whose subject contains this text (case-insensitive). It must hold three
    /// letters or digits in a row (`acme`, `C-123`), else the call is refused
    /// (unsearchable-filter).
    #[schemars(length(min = 3, max = 512))]
    pub(crate) subject: Option<String>,
    /// The previous page's `next_before`: only alerts older than that one.
    pub(crate) before: Option<String>,
    /// At most this many alerts (default 50).
    #[schemars(range(min = 1, max = 200))]
    pub(crate) limit: Option<i64>,
}

/// The states an alert can be in, from the lifecycle's own list.
fn state_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = AlertState::ALL.iter().map(|s| s.as_str()).collect();
    schemars::json_schema!({
        "type": "string",
        "enum": names,
        "description": "Only alerts in this state.",
    })
}

const APPROVE_DESCRIPTION: &str = "\
Approve an alert for delivery. Its identity is (destination, subject, occurrence): that \
identity decides the alert, so a rerun must reuse the same identity. Take occurrence from \
the facts (for a renewal: the renewal date and the tier, `2027-01-31/30d`), never from the \
run's clock or a random id. Approving the same identity with the same payload again \
returns the same alert with created=false and changes nothing, so approving again after a \
lost answer is safe. A different payload for an existing identity is refused \
(identity-conflict): correct it with revise_alert and a reason, never with a new \
occurrence. An alert in state uncertain or held must not be sent again: an operator \
decides, so never approve it anew under another occurrence. Returns alert_id, created and \
state, with the alert.";

const REVISE_DESCRIPTION: &str = "\
Correct an alert's payload, with the reason for it: the revision is a new alert, delivered \
after the one it corrects. Use it when approve_alert answers identity-conflict (revise the \
alert it names); never invent a new occurrence to send a changed payload. Repeating the \
same correction returns the revision already made and writes nothing.";

const GET_ALERT_DESCRIPTION: &str = "\
Read one alert: its identity, state, revisions, delivery attempts and evidence trail. \
States: pending and sending are being delivered; accepted was delivered; uncertain and \
held mean do not send again, an operator decides (the system itself decides about \
resending); failed was refused by the destination; superseded was replaced by a revision. \
Another tenant's alert is not found.";

const LIST_DESTINATIONS_DESCRIPTION: &str = "\
List the destinations this token may approve alerts for: name (what approve_alert takes as \
destination), kind (webhook or email), locale, whether it is enabled and whether a lost \
answer can be settled by asking it (can_look_up).";

const LIST_ALERTS_DESCRIPTION: &str = "\
List this tenant's alerts, newest first, one page at a time; filter by state, destination \
or subject text (three letters or digits in a row at least). Pass next_before as before for \
the next page. Run one listing at a time: too many at once are refused \
(too-many-listings; retry a second later). Use it to find an alert before approving again, \
never to decide a new occurrence.";

/// The tools, as `tools/list` shows them.
pub(crate) fn all() -> Vec<Tool> {
    NAMES.iter().filter_map(|name| by_name(name)).collect()
}

/// One tool's listing, or `None` for a name that is not a tool.
pub(crate) fn by_name(name: &str) -> Option<Tool> {
    let tool = match name {
        APPROVE_ALERT => Tool::new(APPROVE_ALERT, APPROVE_DESCRIPTION, JsonObject::new())
            .with_input_schema::<ApproveArguments>()
            .annotate(writes()),
        REVISE_ALERT => Tool::new(REVISE_ALERT, REVISE_DESCRIPTION, JsonObject::new())
            .with_input_schema::<ReviseArguments>()
            .annotate(writes()),
        GET_ALERT => Tool::new(GET_ALERT, GET_ALERT_DESCRIPTION, JsonObject::new())
            .with_input_schema::<GetAlertArguments>()
            .annotate(reads()),
        LIST_DESTINATIONS => Tool::new(
            LIST_DESTINATIONS,
            LIST_DESTINATIONS_DESCRIPTION,
            JsonObject::new(),
        )
        .with_input_schema::<NoArguments>()
        .annotate(reads()),
        LIST_ALERTS => Tool::new(LIST_ALERTS, LIST_ALERTS_DESCRIPTION, JsonObject::new())
            .with_input_schema::<ListAlertsArguments>()
            .annotate(reads()),
        _ => return None,
    };
    Some(tool)
}

/// A tool that writes, and whose repetition with the same arguments changes nothing.
fn writes() -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(false)
        .destructive(false)
        .idempotent(true)
        .open_world(true)
}

fn reads() -> ToolAnnotations {
    ToolAnnotations::new().read_only(true).open_world(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema_that_requires_what_its_request_requires() {
        let tools = all();
        assert_eq!(
            tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>(),
            NAMES
        );
        let required = |name: &str| -> Vec<String> {
            let tool = by_name(name).unwrap_or_default();
            let mut names: Vec<String> = tool
                .input_schema
                .get("required")
                .and_then(|r| r.as_array())
                .map(|r| {
                    r.iter()
                        .filter_map(|n| n.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        };
        assert_eq!(
            required(APPROVE_ALERT),
            ["destination", "occurrence", "payload", "subject"]
        );
        assert_eq!(required(REVISE_ALERT), ["alert_id", "payload", "reason"]);
        assert_eq!(required(GET_ALERT), ["alert_id"]);
        assert!(required(LIST_ALERTS).is_empty());
        for tool in &tools {
            assert_eq!(tool.input_schema.get("type"), Some(&"object".into()));
            assert_eq!(
                tool.input_schema.get("additionalProperties"),
                Some(&false.into()),
                "{}",
                tool.name
            );
        }
        let approve = serde_json::Value::Object(
            by_name(APPROVE_ALERT)
                .unwrap_or_default()
                .input_schema
                .as_ref()
                .clone(),
        );
        assert_eq!(approve["properties"]["subject"]["maxLength"], 512);
        assert_eq!(approve["properties"]["payload"]["minProperties"], 1);
        assert_eq!(
            approve["properties"]["occurrence"]["pattern"],
            crate::alerts::TEXT_PATTERN
        );
    }
}
