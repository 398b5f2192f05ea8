//! The approval API as an MCP (Model Context Protocol) server, for agents that speak MCP
//! rather than HTTP: five tools (approve, revise, read and list alerts, list
//! destinations) and two resources (the tenant's destinations and each alert's trail),
//! served by `decider serve` at `/mcp` (Streamable HTTP, [`http`], to browser pages only
//! from the [`AllowedOrigins`]) and by `outboxctl mcp` over standard input and output
//! ([`serve_stdio`]).
//!
//! Every tool is a thin layer over the operation its HTTP handler runs (`alerts::
//! approve_alert`, `revise_alert`, `alert`, `listings::destinations`, `alerts`): the
//! same checks, the same tenant scoping, the same problems. Arguments are turned back
//! into the bytes of an HTTP body and read by `body::parse_json`, so the limits (size,
//! nesting, numbers, unknown fields) and the problems they give are those of the API. A
//! refusal is a tool result with `isError: true`, the problem's `detail` as its text and
//! the problem document as its structured content, so an agent reads it; only requests
//! the protocol itself cannot serve (an unknown tool, unreadable JSON-RPC) get the
//! protocol's own errors.

pub(crate) mod http;
mod origin;
mod stdio;
mod tools;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde_json::{json, Value};

use crate::alerts::{self, Answer, ApproveRequest, ReviseRequest};
use crate::auth::Caller;
use crate::listings::{self, AlertQuery};
use crate::trace::IncomingTrace;
use crate::{body, AppState, Problem};

pub use origin::AllowedOrigins;
pub use stdio::serve_stdio;

/// What the server tells an agent when it connects: the rules the tools' descriptions
/// teach, in short.
const INSTRUCTIONS: &str = "\
This server approves alerts for delivery, once each. An alert's identity is (destination, \
subject, occurrence) within your tenant: the identity decides the alert. A rerun must give \
the same identity; take occurrence from the facts (e.g. the renewal date and tier, \
`2027-01-31/30d`), never from the run's clock or a random id. Approving the same identity \
with the same payload again returns the existing alert (created=false) and changes nothing, \
so approving again after a lost answer is safe. A changed payload is refused \
(identity-conflict): correct it with revise_alert and a reason, never with a new \
occurrence. States uncertain and held mean do not send again: an operator decides. Start \
with list_destinations; read an alert's evidence with get_alert or the resource \
outbox://alerts/{id}.";

/// The tenant's destinations, as a resource.
const DESTINATIONS_URI: &str = "outbox://destinations";
/// An alert's record and evidence trail, as a resource: this prefix and the alert's id.
const ALERT_URI_PREFIX: &str = "outbox://alerts/";

/// Who a request acts for.
#[derive(Debug, Clone)]
enum Credentials {
    /// The `Caller` that [`http`] authenticated from this HTTP request's own bearer token
    /// and put in its extensions, before any MCP processing.
    PerHttpRequest,
    /// The token `outboxctl mcp` was given, authenticated again for every request, so a
    /// revoked token stops working within the token cache's bound, as over HTTP.
    Token(String),
}

/// The MCP server: the API's state and how each request's caller is known.
#[derive(Debug, Clone)]
pub(crate) struct OutboxMcp {
    state: AppState,
    credentials: Credentials,
}

impl OutboxMcp {
    /// For `/mcp`: each request's caller comes from its own HTTP request.
    pub(crate) fn over_http(state: AppState) -> Self {
        OutboxMcp {
            state,
            credentials: Credentials::PerHttpRequest,
        }
    }

    /// For standard input and output: every request acts with `token`.
    fn with_token(state: AppState, token: String) -> Self {
        OutboxMcp {
            state,
            credentials: Credentials::Token(token),
        }
    }

    async fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, Problem> {
        match &self.credentials {
            Credentials::PerHttpRequest => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Caller>())
                .cloned()
                .ok_or_else(|| Problem::unauthorized("send `Authorization: Bearer <token>`")),
            Credentials::Token(token) => Caller::authenticate(&self.state, token).await,
        }
    }

    /// Runs one tool for `caller`; a name that is no tool was refused before.
    async fn run_tool(
        &self,
        caller: &Caller,
        incoming: &IncomingTrace,
        name: &str,
        mut arguments: JsonObject,
    ) -> Result<Value, Problem> {
        let state = &self.state;
        match name {
            tools::APPROVE_ALERT => {
                let request: ApproveRequest = as_body(&arguments)?;
                approval(alerts::approve_alert(state, caller, incoming, &request).await?)
            }
            tools::REVISE_ALERT => {
                // The id is the HTTP route's; the rest is the revision's body.
                let id = take_text(&mut arguments, "alert_id")?;
                let request: ReviseRequest = as_body(&arguments)?;
                approval(alerts::revise_alert(state, caller, incoming, &id, &request).await?)
            }
            tools::GET_ALERT => {
                let id = take_text(&mut arguments, "alert_id")?;
                let _: tools::NoArguments = as_body(&arguments)?;
                to_value(&alerts::alert(state, caller, &id).await?)
            }
            tools::LIST_DESTINATIONS => {
                let _: tools::NoArguments = as_body(&arguments)?;
                to_value(&listings::destinations(state, caller).await?)
            }
            tools::LIST_ALERTS => {
                let filters: tools::ListAlertsArguments = as_body(&arguments)?;
                let query = AlertQuery::parse(Some(&query_string(&filters)))?;
                to_value(&listings::alerts(state, caller, &query).await?)
            }
            other => Err(Problem::internal().with("tool", other)),
        }
    }

    async fn read(&self, caller: &Caller, uri: &str) -> Result<Value, Problem> {
        if uri == DESTINATIONS_URI {
            return to_value(&listings::destinations(&self.state, caller).await?);
        }
        match uri.strip_prefix(ALERT_URI_PREFIX) {
            Some(id) => to_value(&alerts::alert(&self.state, caller, id).await?),
            None => Err(Problem::new(
                axum::http::StatusCode::NOT_FOUND,
                "no-such-resource",
                "No such resource",
                format!(
                    "no resource `{uri}`; this server has {DESTINATIONS_URI} and \
                     {ALERT_URI_PREFIX}{{id}}"
                ),
            )),
        }
    }
}

/// Arguments as the HTTP body they stand for, read by the body's own parser.
fn as_body<T: serde::de::DeserializeOwned>(arguments: &JsonObject) -> Result<T, Problem> {
    let bytes = serde_json::to_vec(arguments).map_err(|_| Problem::internal())?;
    body::parse_json(&bytes)
}

/// A text argument that the HTTP API takes in its path, removed from the arguments.
fn take_text(arguments: &mut JsonObject, name: &'static str) -> Result<String, Problem> {
    let value = match arguments.remove(name) {
        Some(Value::String(text)) => Some(text),
        None | Some(Value::Null) => None,
        Some(_) => {
            return Err(Problem::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-field",
                "Invalid field",
                format!("field `{name}` must be a string"),
            ))
        }
    };
    Ok(body::identity_field(name, &value)?.to_owned())
}

/// `list_alerts`' filters as the query string `GET /v1/alerts` would have had.
fn query_string(filters: &tools::ListAlertsArguments) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    let texts = [
        ("state", &filters.state),
        ("destination", &filters.destination),
        ("subject", &filters.subject),
        ("before", &filters.before),
    ];
    for (name, value) in texts {
        if let Some(value) = value {
            query.append_pair(name, value);
        }
    }
    if let Some(limit) = filters.limit {
        query.append_pair("limit", &limit.to_string());
    }
    query.finish()
}

/// An approval's or revision's answer: the id, whether this call made it, its state, and
/// the alert.
fn approval(answer: Answer) -> Result<Value, Problem> {
    let (created, alert) = match answer {
        Answer::Created(alert) => (true, alert),
        Answer::Existing(alert) => (false, alert),
    };
    Ok(json!({
        "alert_id": alert.id,
        "created": created,
        "state": alert.state,
        "alert": to_value(&alert)?,
    }))
}

fn to_value(value: &impl Serialize) -> Result<Value, Problem> {
    serde_json::to_value(value).map_err(|_| Problem::internal())
}

/// A refusal as a tool result the agent reads: the problem's detail as text, the problem
/// document as structured content. Details that name an HTTP route name the tool instead.
fn tool_error(problem: &Problem) -> CallToolResult {
    let mut document = problem.document();
    let detail = match problem.kind() {
        "identity-conflict" => format!(
            "alert {} already has this identity (destination, subject, occurrence) with a \
             different payload; it was not changed. A correction must be a revision: call \
             revise_alert with alert_id {}, the corrected payload and a reason. Never send \
             it again under a new occurrence",
            text_member(&document, "existing_alert_id"),
            text_member(&document, "latest_alert_id"),
        ),
        "not-latest-revision" => format!(
            "this alert has been revised since; revise the latest revision instead: call \
             revise_alert with alert_id {}",
            text_member(&document, "latest_alert_id"),
        ),
        _ => problem.detail().to_owned(),
    };
    document["detail"] = Value::String(detail.clone());
    let mut result = CallToolResult::error(vec![ContentBlock::text(detail)]);
    result.structured_content = Some(document);
    result
}

fn text_member<'a>(document: &'a Value, name: &str) -> &'a str {
    document[name].as_str().unwrap_or("?")
}

/// A resource's problem as the protocol's error (a resource read has no "tool error").
fn resource_error(problem: &Problem) -> ErrorData {
    let document = Some(problem.document());
    let detail = problem.detail().to_owned();
    match problem.status().as_u16() {
        404 => ErrorData::resource_not_found(detail, document),
        401 => ErrorData::invalid_request(detail, document),
        _ => ErrorData::internal_error(detail, document),
    }
}

impl ServerHandler for OutboxMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(
            Implementation::new("alert-outbox", env!("CARGO_PKG_VERSION"))
                .with_title("Alert outbox"),
        )
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::all()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::by_name(name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.as_ref();
        if tools::by_name(name).is_none() {
            // The protocol's answer to a name that is no tool: invalid params.
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{name}`; this server's tools are {}",
                    tools::NAMES.join(", ")
                ),
                None,
            ));
        }
        // Over HTTP, the trace context of the request that carried the call.
        let incoming = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<IncomingTrace>())
            .cloned()
            .unwrap_or_default();
        let result = match self.caller(&context).await {
            Ok(caller) => self
                .run_tool(
                    &caller,
                    &incoming,
                    name,
                    request.arguments.unwrap_or_default(),
                )
                .await
                .map_or_else(|problem| tool_error(&problem), CallToolResult::structured),
            Err(problem) => tool_error(&problem),
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let destinations = Resource::new(DESTINATIONS_URI, "destinations")
            .with_title("Destinations")
            .with_description("This tenant's destinations: names, kinds, locale, capability.")
            .with_mime_type("application/json");
        Ok(ListResourcesResult::with_all_items(vec![destinations]))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let alert = ResourceTemplate::new(format!("{ALERT_URI_PREFIX}{{id}}"), "alert")
            .with_title("Alert")
            .with_description(
                "One alert of this tenant: identity, state, revisions, attempts and the \
                 evidence trail, to cite.",
            )
            .with_mime_type("application/json");
        Ok(ListResourceTemplatesResult::with_all_items(vec![alert]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = self
            .caller(&context)
            .await
            .map_err(|p| resource_error(&p))?;
        let value = self
            .read(&caller, &request.uri)
            .await
            .map_err(|p| resource_error(&p))?;
        let contents = ResourceContents::text(value.to_string(), request.uri)
            .with_mime_type("application/json");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn an_identity_conflict_names_the_tool_and_the_alert_to_revise() {
        let problem = Problem::new(
            StatusCode::CONFLICT,
            "identity-conflict",
            "Alert exists with a different payload",
            "POST /v1/alerts/b/revisions",
        )
        .with("existing_alert_id", "a")
        .with("latest_alert_id", "b");
        let result = tool_error(&problem);
        assert_eq!(result.is_error, Some(true));
        let text = serde_json::to_value(&result.content).unwrap_or_default();
        let text = text[0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("revise_alert with alert_id b"), "{text}");
        assert!(!text.contains("POST"), "{text}");
        let document = result.structured_content.unwrap_or_default();
        assert_eq!(document["type"], "/problems/identity-conflict");
        assert_eq!(document["latest_alert_id"], "b");
        assert_eq!(document["detail"], text);
    }

    #[test]
    fn list_alerts_filters_become_the_listings_query() {
        let filters = tools::ListAlertsArguments {
            state: Some("held".into()),
            destination: None,
            subject: Some("acme renewal&x".into()),
            before: None,
            limit: Some(10),
        };
        let query = AlertQuery::parse(Some(&query_string(&filters))).unwrap_or_default();
        assert_eq!(query.state, Some(outbox_core::AlertState::Held));
        assert_eq!(query.subject.as_deref(), Some("acme renewal&x"));
        assert_eq!(query.limit, 10);
    }
}
