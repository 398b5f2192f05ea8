//! Fault settings: what the sink does wrong on purpose, set from the command line and
//! changed at run time through `POST /_sink/faults` and `DELETE /_sink/faults`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Response, StatusCode};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use crate::config::{check_rate, check_status, SinkArgs};

/// The current faults, as `POST` and `DELETE /_sink/faults` answer them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultSettings {
    /// Probability of applying a delivery and then closing the connection unanswered.
    pub drop_response_rate: f64,
    /// Probability of refusing a delivery with `fail_status`.
    pub fail_rate: f64,
    /// Status of a refused delivery.
    pub fail_status: u16,
    /// Wait before answering an applied or duplicate delivery, in milliseconds.
    pub latency_ms: u64,
    /// Keys whose next applied or duplicate delivery goes unanswered, once each.
    pub drop_response_for_keys: BTreeSet<String>,
    /// Responses given, in order, to the next deliveries instead of applying them.
    pub script: VecDeque<ScriptedResponse>,
}

/// One scripted answer: given verbatim, and the delivery is not applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedResponse {
    /// Status code, 200 to 599.
    pub status: u16,
    /// Response headers, by name.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Response body.
    #[serde(default)]
    pub body: String,
}

/// A change to the faults: every field is optional; keys and script entries are added to
/// what is already there.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FaultPatch {
    drop_response_rate: Option<f64>,
    fail_rate: Option<f64>,
    fail_status: Option<u16>,
    latency_ms: Option<u64>,
    #[serde(default)]
    drop_response_for_keys: Vec<String>,
    #[serde(default)]
    script: Vec<ScriptedResponse>,
}

impl FaultSettings {
    /// The faults the sink starts with.
    pub(crate) fn from_args(args: &SinkArgs) -> Self {
        FaultSettings {
            drop_response_rate: args.drop_response_rate,
            fail_rate: args.fail_rate,
            fail_status: args.fail_status.as_u16(),
            latency_ms: args.latency.map_or(0, duration_ms),
            drop_response_for_keys: BTreeSet::new(),
            script: VecDeque::new(),
        }
    }

    /// Applies `patch` entirely, or not at all when any part of it is out of range.
    pub(crate) fn apply(&mut self, patch: FaultPatch) -> Result<(), String> {
        if let Some(rate) = patch.drop_response_rate {
            check_rate(rate).map_err(|err| format!("drop_response_rate: {err}"))?;
        }
        if let Some(rate) = patch.fail_rate {
            check_rate(rate).map_err(|err| format!("fail_rate: {err}"))?;
        }
        if let Some(status) = patch.fail_status {
            check_status(status).map_err(|err| format!("fail_status: {err}"))?;
        }
        for (i, scripted) in patch.script.iter().enumerate() {
            scripted
                .response()
                .map_err(|err| format!("script[{i}]: {err}"))?;
        }

        if let Some(rate) = patch.drop_response_rate {
            self.drop_response_rate = rate;
        }
        if let Some(rate) = patch.fail_rate {
            self.fail_rate = rate;
        }
        if let Some(status) = patch.fail_status {
            self.fail_status = status;
        }
        if let Some(ms) = patch.latency_ms {
            self.latency_ms = ms;
        }
        self.drop_response_for_keys
            .extend(patch.drop_response_for_keys);
        self.script.extend(patch.script);
        Ok(())
    }

    /// No faults at all. The fail status stays: it is a setting for when failures are
    /// turned back on, not a fault in itself.
    pub(crate) fn clear(&mut self) {
        self.drop_response_rate = 0.0;
        self.fail_rate = 0.0;
        self.latency_ms = 0;
        self.drop_response_for_keys.clear();
        self.script.clear();
    }

    /// The wait before answering an applied or duplicate delivery.
    pub(crate) fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms)
    }
}

impl ScriptedResponse {
    /// The response to send, or why it cannot be sent.
    pub(crate) fn response(&self) -> Result<Response<Full<Bytes>>, String> {
        let status = check_status(self.status)?;
        let mut response = Response::new(Full::new(Bytes::from(self.body.clone())));
        *response.status_mut() = status;
        for (name, value) in &self.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("`{name}` is not a header name"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("the value of `{name}` is not a valid header value"))?;
            response.headers_mut().append(name, value);
        }
        Ok(response)
    }

    /// The response of an entry already checked by [`FaultSettings::apply`]; a plain 500
    /// should it fail anyway.
    pub(crate) fn response_or_500(&self) -> (Response<Full<Bytes>>, StatusCode) {
        match self.response() {
            Ok(response) => {
                let status = response.status();
                (response, status)
            }
            Err(err) => {
                tracing::error!(error = %err, "scripted response cannot be sent");
                let mut response = Response::new(Full::new(Bytes::from(err)));
                *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                (response, StatusCode::INTERNAL_SERVER_ERROR)
            }
        }
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn settings() -> FaultSettings {
        FaultSettings::from_args(&SinkArgs::parse_from(["sink", "--latency", "2s"]))
    }

    fn patch(json: &str) -> Result<FaultPatch, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn starts_from_the_command_line() {
        let faults = settings();
        assert_eq!(faults.latency_ms, 2000);
        assert_eq!(faults.fail_status, 503);
        assert_eq!(faults.fail_rate, 0.0);
    }

    #[test]
    fn patches_add_keys_and_script_entries() {
        let mut faults = settings();
        faults
            .apply(patch(r#"{"fail_rate": 0.5, "drop_response_for_keys": ["a"]}"#).unwrap())
            .unwrap();
        faults
            .apply(
                patch(r#"{"drop_response_for_keys": ["b"], "script": [{"status": 429, "headers": {"Retry-After": "1"}}]}"#)
                    .unwrap(),
            )
            .unwrap();
        assert_eq!(faults.fail_rate, 0.5);
        assert_eq!(faults.drop_response_for_keys.len(), 2);
        assert_eq!(faults.script.len(), 1);
        let (response, status) = faults.script[0].response_or_500();
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["retry-after"], "1");

        faults.clear();
        assert_eq!(faults.fail_rate, 0.0);
        assert_eq!(faults.latency_ms, 0);
        assert!(faults.drop_response_for_keys.is_empty());
        assert!(faults.script.is_empty());
        assert_eq!(faults.fail_status, 503);
    }

    #[test]
    fn a_bad_patch_changes_nothing() {
        let mut faults = settings();
        let before = faults.clone();
        assert!(faults
            .apply(patch(r#"{"fail_rate": 0.5, "drop_response_rate": 3}"#).unwrap())
            .is_err());
        assert!(faults
            .apply(patch(r#"{"fail_rate": 0.5, "script": [{"status": 42}]}"#).unwrap())
            .is_err());
        assert!(faults
            .apply(
                patch(r#"{"script": [{"status": 200, "headers": {"bad header": "x"}}]}"#).unwrap()
            )
            .is_err());
        assert_eq!(faults, before);
        assert!(patch(r#"{"fail_rat": 0.5}"#).is_err());
        assert!(patch(r#"{"script": [{"status": 200, "colour": "red"}]}"#).is_err());
    }
}
