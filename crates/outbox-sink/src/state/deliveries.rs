//! What a delivery gets, in this order: with a secret configured, a bad signature is
//! refused (as a real receiver would before anything else); then a scripted answer if one
//! is queued, then the fail rate, then de-duplication within the retention; whatever is
//! left is applied. Applied and duplicate deliveries are acknowledged after the latency,
//! or have their response dropped.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::HeaderMap;
use hyper::{Response, StatusCode};
use std::time::{Duration, Instant};

use super::{draw, now_rfc3339, sha256_hex, Applied, Inner, Sink};
use crate::json::json_response;
use crate::records::{trace_header, Outcome, Record};
use crate::signature::{self, SignatureCheck};

/// What to do with a delivery once decided.
#[derive(Debug)]
pub(crate) enum Action {
    /// Answer this now.
    Respond(Response<Full<Bytes>>),
    /// Wait `delay`, then either answer 200 with the receipt or close the connection.
    Acknowledge {
        receipt: String,
        delay: Duration,
        drop: bool,
    },
}

/// What a delivery's record shows of its headers besides the idempotency key and the
/// signature check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecordedHeaders {
    /// `Authorization`: its scheme and the SHA-256 of the rest.
    pub authorization: Option<String>,
    /// `traceparent`, as [`trace_header`] shows it.
    pub trace_parent: Option<String>,
    /// `tracestate`, as [`trace_header`] shows it.
    pub trace_state: Option<String>,
}

impl RecordedHeaders {
    /// What the record of a request with `headers` shows of them.
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        RecordedHeaders {
            authorization: authorization_of(headers),
            trace_parent: trace_header_of(headers, "traceparent"),
            trace_state: trace_header_of(headers, "tracestate"),
        }
    }
}

/// The `Authorization` header as recorded: its scheme and the SHA-256 of the rest.
fn authorization_of(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(hyper::header::AUTHORIZATION)?.as_bytes();
    let text = String::from_utf8_lossy(value);
    let (scheme, credentials) = text.split_once(' ').unwrap_or(("", &text));
    Some(format!(
        "{scheme} sha256:{}",
        sha256_hex(credentials.as_bytes())
    ))
}

/// The trace header `name` as recorded. A repeated header is joined with `, ` first, as
/// HTTP combines field lines, so that a second `traceparent` shows rather than hides.
fn trace_header_of(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    let mut joined = first.as_bytes().to_vec();
    for value in values {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(value.as_bytes());
    }
    Some(trace_header(&joined))
}

impl Sink {
    /// The idempotency key of a request, if it has one.
    pub(crate) fn key_of(&self, headers: &HeaderMap) -> Option<String> {
        headers
            .get(&self.idempotency_header)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    /// Checks the Standard Webhooks signature of a request against the configured secrets,
    /// and its timestamp against the tolerance around `now` (seconds since the epoch).
    pub(crate) fn check_signature(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: i64,
    ) -> SignatureCheck {
        signature::check(&self.keys, self.timestamp_tolerance, headers, body, now)
    }

    /// Records a delivery whose body exceeded the limit; it is answered 413.
    pub(crate) fn record_too_large(
        &self,
        path: &str,
        key: Option<String>,
        headers: RecordedHeaders,
    ) {
        let mut inner = self.lock();
        inner.stats.requests += 1;
        let record = Record {
            status: Some(StatusCode::PAYLOAD_TOO_LARGE.as_u16()),
            ..arrival(&inner, path, key, headers, Outcome::TooLarge)
        };
        inner.records.push(record);
    }

    /// Decides what a delivery gets (in the order of this module's opening), records it
    /// and counts it.
    pub(crate) fn decide(
        &self,
        path: &str,
        key: Option<String>,
        body: &[u8],
        signature: SignatureCheck,
        headers: RecordedHeaders,
    ) -> Action {
        let mut guard = self.lock();
        let inner = &mut *guard;
        inner.stats.requests += 1;
        if signature.is_bad() {
            inner.stats.bad_signatures += 1;
        }
        let mut record = Record {
            payload_sha256: Some(sha256_hex(body)),
            signature,
            body: self
                .keep_bodies
                .then(|| String::from_utf8_lossy(body).into_owned()),
            ..arrival(inner, path, key.clone(), headers, Outcome::Applied)
        };
        let action = match inner
            .refuse_bad_signature(&mut record)
            .or_else(|| inner.answer_scripted(&mut record))
            .or_else(|| inner.inject_failure(&mut record))
        {
            Some(response) => Action::Respond(response),
            None => {
                let receipt = inner.receipt(&mut record, key.as_deref(), self.retention);
                inner.acknowledge(&mut record, receipt, key.as_deref())
            }
        };
        inner.records.push(record);
        action
    }
}

/// The record of a delivery arriving now, before anything is decided about it.
fn arrival(
    inner: &Inner,
    path: &str,
    key: Option<String>,
    headers: RecordedHeaders,
    outcome: Outcome,
) -> Record {
    Record {
        seq: inner.records.len() as u64 + 1,
        at: now_rfc3339(),
        path: path.to_owned(),
        key,
        payload_sha256: None,
        signature: SignatureCheck::Unchecked,
        outcome,
        receipt: None,
        status: None,
        dropped: false,
        authorization: headers.authorization,
        trace_parent: headers.trace_parent,
        trace_state: headers.trace_state,
        body: None,
    }
}

/// The steps of [`Sink::decide`], in its order; each that answers sets the record's
/// outcome and status.
impl Inner {
    /// A bad signature (with a secret configured) is answered 401.
    fn refuse_bad_signature(&mut self, record: &mut Record) -> Option<Response<Full<Bytes>>> {
        if !record.signature.is_bad() {
            return None;
        }
        record.outcome = Outcome::Refused;
        record.status = Some(StatusCode::UNAUTHORIZED.as_u16());
        self.stats.refused += 1;
        Some(json_response(
            StatusCode::UNAUTHORIZED,
            &serde_json::json!({"error": record.signature.refusal()}),
        ))
    }

    /// The next scripted answer, if one is queued.
    fn answer_scripted(&mut self, record: &mut Record) -> Option<Response<Full<Bytes>>> {
        let scripted = self.faults.script.pop_front()?;
        let (response, status) = scripted.response_or_500();
        record.outcome = Outcome::Scripted;
        record.status = Some(status.as_u16());
        self.stats.scripted += 1;
        Some(response)
    }

    /// A refusal with the fail status, when the fail rate draws one.
    fn inject_failure(&mut self, record: &mut Record) -> Option<Response<Full<Bytes>>> {
        if !draw(&mut self.rng, self.faults.fail_rate) {
            return None;
        }
        let status = crate::config::check_status(self.faults.fail_status)
            .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        record.outcome = Outcome::Failed;
        record.status = Some(status.as_u16());
        self.stats.failed += 1;
        Some(json_response(
            status,
            &serde_json::json!({"error": "injected failure"}),
        ))
    }

    /// The receipt of a delivery that gets one: the original receipt of a key applied
    /// within the `retention` (a wire duplicate), else a new one, and the key is applied.
    fn receipt(
        &mut self,
        record: &mut Record,
        key: Option<&str>,
        retention: Option<Duration>,
    ) -> String {
        let now = Instant::now();
        let previous = key
            .and_then(|k| self.applied.get(k))
            .map(|a| (a.receipt.clone(), a.at));
        let receipt = match previous {
            Some((receipt, at))
                if retention.is_some_and(|retention| now.duration_since(at) < retention) =>
            {
                record.outcome = Outcome::WireDuplicate;
                self.stats.wire_duplicates += 1;
                receipt
            }
            previous => {
                self.last_receipt += 1;
                let receipt = format!("r-{}", self.last_receipt);
                record.outcome = Outcome::Applied;
                self.stats.applied += 1;
                if previous.is_some() {
                    self.stats.effective_duplicates += 1;
                }
                if let Some(k) = key {
                    self.applied.insert(
                        k.to_owned(),
                        Applied {
                            receipt: receipt.clone(),
                            at: now,
                        },
                    );
                }
                receipt
            }
        };
        record.receipt = Some(receipt.clone());
        receipt
    }

    /// The acknowledgement of a delivery given `receipt`: after the latency, answered 200
    /// or, by the drop faults, not at all.
    fn acknowledge(&mut self, record: &mut Record, receipt: String, key: Option<&str>) -> Action {
        // Decided now rather than after the latency, so that the draws stay in arrival
        // order however long each answer waits.
        let drop = key.is_some_and(|k| self.faults.drop_response_for_keys.remove(k))
            || draw(&mut self.rng, self.faults.drop_response_rate);
        if drop {
            record.dropped = true;
            self.stats.dropped += 1;
        } else {
            record.status = Some(StatusCode::OK.as_u16());
        }
        Action::Acknowledge {
            receipt,
            delay: self.faults.latency(),
            drop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Stats;
    use crate::state::tests::sink;

    fn receipt(action: Action) -> (String, bool) {
        match action {
            Action::Acknowledge { receipt, drop, .. } => (receipt, drop),
            Action::Respond(r) => panic!("expected an acknowledgement, got {}", r.status()),
        }
    }

    fn deliver(sink: &Sink, key: Option<&str>) -> Action {
        sink.decide(
            "/hook",
            key.map(str::to_owned),
            b"{}",
            SignatureCheck::Unchecked,
            RecordedHeaders::default(),
        )
    }

    #[test]
    fn retention_turns_repeats_into_wire_duplicates() {
        let sink = sink(&["--retention", "1h"]);
        assert_eq!(receipt(deliver(&sink, Some("k"))).0, "r-1");
        assert_eq!(receipt(deliver(&sink, Some("k"))).0, "r-1");
        assert_eq!(receipt(deliver(&sink, None)).0, "r-2");
        assert_eq!(receipt(deliver(&sink, None)).0, "r-3");
        let stats = sink.stats();
        assert_eq!(
            (
                stats.applied,
                stats.wire_duplicates,
                stats.effective_duplicates
            ),
            (3, 1, 0)
        );
        assert_eq!(stats.distinct_keys, 1);
    }

    #[test]
    fn without_retention_repeats_are_applied_again() {
        let sink = sink(&[]);
        assert_eq!(receipt(deliver(&sink, Some("k"))).0, "r-1");
        assert_eq!(receipt(deliver(&sink, Some("k"))).0, "r-2");
        assert_eq!(sink.receipt_of("k").as_deref(), Some("r-2"));
        let stats = sink.stats();
        assert_eq!((stats.applied, stats.effective_duplicates), (2, 1));
    }

    #[test]
    fn reset_keeps_receipts_unique() {
        let sink = sink(&["--retention", "1h"]);
        receipt(deliver(&sink, Some("k")));
        sink.reset();
        assert_eq!(sink.stats(), Stats::default());
        assert!(sink.records(None).is_empty());
        assert_eq!(receipt(deliver(&sink, Some("k"))).0, "r-2");
        assert_eq!(sink.records(None)[0].seq, 1);
    }

    #[test]
    fn bad_signatures_are_refused_and_not_applied() {
        let sink = sink(&["--secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
        for check in [
            SignatureCheck::Missing,
            SignatureCheck::Invalid,
            SignatureCheck::Stale,
        ] {
            let headers = RecordedHeaders::default();
            match sink.decide("/hook", Some("k".to_owned()), b"{}", check, headers) {
                Action::Respond(response) => assert_eq!(response.status(), 401),
                Action::Acknowledge { .. } => panic!("{check:?} was acknowledged"),
            }
        }
        let stats = sink.stats();
        assert_eq!(
            (
                stats.requests,
                stats.refused,
                stats.bad_signatures,
                stats.applied
            ),
            (3, 3, 3, 0)
        );
        assert!(sink.receipt_of("k").is_none());
        assert!(sink
            .records(None)
            .iter()
            .all(|r| r.outcome == Outcome::Refused && r.status == Some(401)));
    }

    #[test]
    fn a_timestamp_outside_the_tolerance_is_stale() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let sink = sink(&["--secret", secret, "--timestamp-tolerance", "5m"]);
        let key = outbox_core::signing::decode_secret(secret).unwrap();
        let check = |timestamp: i64, now: i64| {
            let mut headers = HeaderMap::new();
            let signature = outbox_core::signing::signature_header(
                std::slice::from_ref(&key),
                "msg_1",
                timestamp,
                b"{}",
            );
            headers.insert("webhook-id", "msg_1".parse().unwrap());
            headers.insert("webhook-timestamp", timestamp.to_string().parse().unwrap());
            headers.insert("webhook-signature", signature.parse().unwrap());
            sink.check_signature(&headers, b"{}", now)
        };
        let now = 1_700_000_000;
        assert_eq!(check(now, now), SignatureCheck::Valid);
        assert_eq!(check(now - 300, now), SignatureCheck::Valid);
        assert_eq!(check(now + 300, now), SignatureCheck::Valid);
        assert_eq!(check(now - 301, now), SignatureCheck::Stale);
        assert_eq!(check(now + 301, now), SignatureCheck::Stale);
        assert_eq!(check(0, now), SignatureCheck::Stale);
    }

    #[test]
    fn trace_headers_are_recorded_as_received_or_marked() {
        use crate::records::INVALID_TRACE_HEADER;
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", parent.parse().unwrap());
        headers.insert("tracestate", "vendor=abc,other=1".parse().unwrap());
        let recorded = RecordedHeaders::of(&headers);
        assert_eq!(recorded.trace_parent.as_deref(), Some(parent));
        assert_eq!(recorded.trace_state.as_deref(), Some("vendor=abc,other=1"));

        // A repeated header shows both values; bytes past ASCII and a tab are junk.
        headers.append("traceparent", parent.parse().unwrap());
        headers.insert(
            "tracestate",
            hyper::header::HeaderValue::from_bytes(b"v=\xff\x80").unwrap(),
        );
        let recorded = RecordedHeaders::of(&headers);
        assert_eq!(recorded.trace_parent, Some(format!("{parent}, {parent}")));
        assert_eq!(recorded.trace_state.as_deref(), Some(INVALID_TRACE_HEADER));
        headers.insert("traceparent", "00-a\tb".parse().unwrap());
        assert_eq!(
            RecordedHeaders::of(&headers).trace_parent.as_deref(),
            Some(INVALID_TRACE_HEADER)
        );
        assert_eq!(
            RecordedHeaders::of(&HeaderMap::new()),
            RecordedHeaders::default()
        );

        let sink = sink(&[]);
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", parent.parse().unwrap());
        let recorded = RecordedHeaders::of(&headers);
        receipt(sink.decide(
            "/hook",
            None,
            b"{}",
            SignatureCheck::Unchecked,
            recorded.clone(),
        ));
        sink.record_too_large("/hook", None, recorded);
        for record in sink.records(None) {
            assert_eq!(record.trace_parent.as_deref(), Some(parent));
            assert_eq!(record.trace_state, None);
        }
    }

    #[test]
    fn a_drop_for_a_key_happens_once() {
        let sink = sink(&[]);
        sink.patch_faults(serde_json::from_str(r#"{"drop_response_for_keys": ["k"]}"#).unwrap())
            .unwrap();
        assert!(receipt(deliver(&sink, Some("k"))).1);
        assert!(!receipt(deliver(&sink, Some("k"))).1);
        let records = sink.records(Some("k"));
        assert_eq!(records.len(), 2);
        assert!(records[0].dropped);
        assert_eq!(records[0].status, None);
        assert_eq!(records[1].status, Some(200));
    }
}
