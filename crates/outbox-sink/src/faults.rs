//! Fault settings: what the sink does wrong on purpose, set from the command line and
//! changed at run time through `POST /_sink/faults` and `DELETE /_sink/faults`. The HTTP
//! faults act on deliveries; the `smtp_*` ones on messages received over SMTP.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Response, StatusCode};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use crate::config::{check_rate, check_status, SinkArgs};
use crate::smtp_reply::SmtpReply;

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
    /// Probability of recording a message and then closing the connection without
    /// answering its final dot.
    pub smtp_drop_rate: f64,
    /// Probability of refusing a message after its data with `smtp_fail_reply`.
    pub smtp_fail_rate: f64,
    /// Reply to a message refused by `smtp_fail_rate`.
    pub smtp_fail_reply: SmtpReply,
    /// Wait before answering the final dot of an accepted message, in milliseconds.
    pub smtp_latency_ms: u64,
    /// Message-IDs (without angle brackets) whose next accepted message goes unanswered,
    /// once each.
    pub smtp_drop_for_message_ids: BTreeSet<String>,
    /// Replies given, in order, to the next `RCPT TO` commands instead of accepting the
    /// recipient.
    pub smtp_rcpt_script: VecDeque<SmtpReply>,
    /// Replies given, in order, after the data of the next messages instead of accepting
    /// them.
    pub smtp_data_script: VecDeque<SmtpReply>,
    /// Replies given, in order, to the next `MAIL FROM` commands instead of accepting the
    /// sender.
    pub smtp_mail_from_script: VecDeque<SmtpReply>,
    /// Leave `STARTTLS` out of the answer to `EHLO` (and refuse the command), as an
    /// attacker on the path who strips the offer would.
    pub smtp_hide_starttls: bool,
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
    smtp_drop_rate: Option<f64>,
    smtp_fail_rate: Option<f64>,
    smtp_fail_reply: Option<SmtpReply>,
    smtp_latency_ms: Option<u64>,
    #[serde(default)]
    smtp_drop_for_message_ids: Vec<String>,
    #[serde(default)]
    smtp_rcpt_script: Vec<SmtpReply>,
    #[serde(default)]
    smtp_data_script: Vec<SmtpReply>,
    #[serde(default)]
    smtp_mail_from_script: Vec<SmtpReply>,
    smtp_hide_starttls: Option<bool>,
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
            smtp_drop_rate: args.smtp_drop_rate,
            smtp_fail_rate: args.smtp_fail_rate,
            smtp_fail_reply: args.smtp_fail_reply.clone(),
            smtp_latency_ms: args.smtp_latency.map_or(0, duration_ms),
            smtp_drop_for_message_ids: BTreeSet::new(),
            smtp_rcpt_script: VecDeque::new(),
            smtp_data_script: VecDeque::new(),
            smtp_mail_from_script: VecDeque::new(),
            smtp_hide_starttls: false,
        }
    }

    /// Applies `patch` entirely, or not at all when any part of it is out of range.
    pub(crate) fn apply(&mut self, patch: FaultPatch) -> Result<(), String> {
        patch.check()?;
        set(&mut self.drop_response_rate, patch.drop_response_rate);
        set(&mut self.fail_rate, patch.fail_rate);
        set(&mut self.fail_status, patch.fail_status);
        set(&mut self.latency_ms, patch.latency_ms);
        self.drop_response_for_keys
            .extend(patch.drop_response_for_keys);
        self.script.extend(patch.script);
        set(&mut self.smtp_drop_rate, patch.smtp_drop_rate);
        set(&mut self.smtp_fail_rate, patch.smtp_fail_rate);
        set(&mut self.smtp_fail_reply, patch.smtp_fail_reply);
        set(&mut self.smtp_latency_ms, patch.smtp_latency_ms);
        self.smtp_drop_for_message_ids.extend(
            patch
                .smtp_drop_for_message_ids
                .iter()
                .map(|id| crate::mail::bare_message_id(id).to_owned()),
        );
        self.smtp_rcpt_script.extend(patch.smtp_rcpt_script);
        self.smtp_data_script.extend(patch.smtp_data_script);
        self.smtp_mail_from_script
            .extend(patch.smtp_mail_from_script);
        set(&mut self.smtp_hide_starttls, patch.smtp_hide_starttls);
        Ok(())
    }

    /// No faults at all. The fail status and the SMTP fail reply stay: they are settings
    /// for when failures are turned back on, not faults in themselves.
    pub(crate) fn clear(&mut self) {
        self.drop_response_rate = 0.0;
        self.fail_rate = 0.0;
        self.latency_ms = 0;
        self.drop_response_for_keys.clear();
        self.script.clear();
        self.smtp_drop_rate = 0.0;
        self.smtp_fail_rate = 0.0;
        self.smtp_latency_ms = 0;
        self.smtp_drop_for_message_ids.clear();
        self.smtp_rcpt_script.clear();
        self.smtp_data_script.clear();
        self.smtp_mail_from_script.clear();
        self.smtp_hide_starttls = false;
    }

    /// The wait before answering the final dot of an accepted message.
    pub(crate) fn smtp_latency(&self) -> Duration {
        Duration::from_millis(self.smtp_latency_ms)
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

impl FaultPatch {
    /// Why the patch cannot be applied: the first value out of range, named by its field.
    fn check(&self) -> Result<(), String> {
        checked("drop_response_rate", self.drop_response_rate, check_rate)?;
        checked("fail_rate", self.fail_rate, check_rate)?;
        checked("fail_status", self.fail_status, check_status)?;
        checked("smtp_drop_rate", self.smtp_drop_rate, check_rate)?;
        checked("smtp_fail_rate", self.smtp_fail_rate, check_rate)?;
        for (i, scripted) in self.script.iter().enumerate() {
            scripted
                .response()
                .map_err(|err| format!("script[{i}]: {err}"))?;
        }
        Ok(())
    }
}

/// Checks a value a patch gives for `field`, if it gives one.
fn checked<T, U>(
    field: &str,
    value: Option<T>,
    check: fn(T) -> Result<U, String>,
) -> Result<(), String> {
    match value {
        Some(value) => check(value)
            .map(drop)
            .map_err(|err| format!("{field}: {err}")),
        None => Ok(()),
    }
}

/// Replaces `setting` with the value a patch gives, if it gives one.
fn set<T>(setting: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *setting = value;
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
    fn smtp_faults_are_patched_and_cleared() {
        let mut faults = settings();
        assert_eq!(faults.smtp_fail_reply.line(), "451 4.3.0 try later");
        faults
            .apply(
                patch(
                    r#"{"smtp_drop_rate": 0.25, "smtp_latency_ms": 10,
                        "smtp_drop_for_message_ids": ["<a@x>", "b@x"],
                        "smtp_rcpt_script": ["550 5.1.1 no such user"],
                        "smtp_data_script": ["451 4.3.0 try later", "554"],
                        "smtp_mail_from_script": ["451 4.7.1 sender deferred"],
                        "smtp_hide_starttls": true,
                        "smtp_fail_reply": "421 4.4.5 busy"}"#,
                )
                .unwrap(),
            )
            .unwrap();
        assert_eq!(faults.smtp_drop_rate, 0.25);
        assert!(faults.smtp_drop_for_message_ids.contains("a@x"));
        assert!(faults.smtp_drop_for_message_ids.contains("b@x"));
        assert_eq!(faults.smtp_rcpt_script[0].code(), 550);
        assert_eq!(faults.smtp_data_script[1].line(), "554 refused");
        assert_eq!(faults.smtp_fail_reply.line(), "421 4.4.5 busy");
        assert_eq!(faults.smtp_mail_from_script[0].code(), 451);
        assert!(faults.smtp_hide_starttls);
        faults.clear();
        assert!(faults.smtp_mail_from_script.is_empty() && !faults.smtp_hide_starttls);
        assert_eq!(faults.smtp_drop_rate, 0.0);
        assert_eq!(faults.smtp_latency_ms, 0);
        assert!(faults.smtp_drop_for_message_ids.is_empty());
        assert!(faults.smtp_rcpt_script.is_empty() && faults.smtp_data_script.is_empty());
        assert_eq!(faults.smtp_fail_reply.line(), "421 4.4.5 busy");
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
        assert!(faults
            .apply(patch(r#"{"fail_rate": 0.5, "smtp_fail_rate": -1}"#).unwrap())
            .is_err());
        assert_eq!(faults, before);
        assert!(patch(r#"{"smtp_rcpt_script": ["250 ok"]}"#).is_err());
        assert!(patch(r#"{"smtp_data_script": ["451 bad\r\ninjected"]}"#).is_err());
        assert!(patch(r#"{"fail_rat": 0.5}"#).is_err());
        assert!(patch(r#"{"script": [{"status": 200, "colour": "red"}]}"#).is_err());
    }
}
