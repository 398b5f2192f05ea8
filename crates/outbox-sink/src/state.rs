//! The sink's memory and its decisions: what each delivery and each message received over
//! SMTP gets, what is recorded, what is counted. Everything here is synchronous and runs under one lock, so the fault draws
//! happen in the order requests arrive and a seed reproduces a run.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderName};
use hyper::{Response, StatusCode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::config::SinkArgs;
use crate::faults::{FaultPatch, FaultSettings, SmtpReply};
use crate::mail;

/// What the sink did with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Applied, with a new receipt.
    Applied,
    /// The key was applied within the retention: answered with the original receipt,
    /// nothing applied.
    WireDuplicate,
    /// Refused by the fail rate; not applied.
    Failed,
    /// Answered with a scripted response; not applied.
    Scripted,
    /// The body exceeded the size limit; answered 413, not applied.
    TooLarge,
    /// A secret is configured and the signature is missing, wrong or stale: answered 401,
    /// not applied.
    Refused,
}

/// The result of checking a delivery's Standard Webhooks signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SignatureCheck {
    /// A signature matches one of the secrets.
    Valid,
    /// Signature headers are there but none matches (or the timestamp is not an integer).
    Invalid,
    /// A secret is configured but the signature headers are absent.
    Missing,
    /// A signature matches, but `webhook-timestamp` is outside the tolerance: a replay of
    /// an old request, or a forged date.
    Stale,
    /// No secret is configured, or the body was never read.
    Unchecked,
}

impl SignatureCheck {
    /// Why a delivery with this signature is refused.
    fn refusal(self) -> &'static str {
        match self {
            SignatureCheck::Missing => {
                "the webhook-id, webhook-timestamp and webhook-signature headers are required"
            }
            SignatureCheck::Stale => "webhook-timestamp is outside the tolerance",
            SignatureCheck::Invalid | SignatureCheck::Valid | SignatureCheck::Unchecked => {
                "no signature matches"
            }
        }
    }

    fn is_bad(self) -> bool {
        matches!(
            self,
            SignatureCheck::Invalid | SignatureCheck::Missing | SignatureCheck::Stale
        )
    }
}

/// One request to a delivery path, as `GET /_sink/records` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Record {
    /// Position in arrival order, from 1 (restarts at `POST /_sink/reset`).
    pub seq: u64,
    /// Arrival time, RFC 3339.
    pub at: String,
    /// Request path.
    pub path: String,
    /// Idempotency key, when the header was present.
    pub key: Option<String>,
    /// Hex SHA-256 of the body; `None` when the body was too large to read.
    pub payload_sha256: Option<String>,
    /// Signature check result.
    pub signature: SignatureCheck,
    /// What the sink did.
    pub outcome: Outcome,
    /// Receipt given, for applied and wire-duplicate deliveries.
    pub receipt: Option<String>,
    /// Status answered; `None` when the response was dropped.
    pub status: Option<u16>,
    /// The connection was closed without a response.
    pub dropped: bool,
    /// The `Authorization` header's scheme and the SHA-256 of its credentials
    /// (`Bearer sha256:…`), so a test can check which key was sent without the sink
    /// keeping it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<String>,
    /// The body as text (invalid UTF-8 replaced), with `--keep-bodies`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// Counters since start or the last reset, as `GET /stats` answers them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Requests to delivery paths.
    pub requests: u64,
    /// Distinct keys among applied deliveries.
    pub distinct_keys: u64,
    /// Deliveries applied.
    pub applied: u64,
    /// Deliveries answered with an earlier receipt without applying.
    pub wire_duplicates: u64,
    /// Applied deliveries whose key had been applied before: the duplicates a receiver
    /// without de-duplication actually suffers.
    pub effective_duplicates: u64,
    /// Deliveries refused by the fail rate.
    pub failed: u64,
    /// Deliveries answered by a scripted response.
    pub scripted: u64,
    /// Deliveries whose response was dropped.
    pub dropped: u64,
    /// Deliveries with an invalid, missing or stale signature while a secret is configured.
    pub bad_signatures: u64,
    /// Deliveries refused (401) for their signature; each is also a bad signature.
    pub refused: u64,
    /// Messages received over SMTP; only when the SMTP listener is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smtp: Option<SmtpStats>,
}

/// SMTP counters since start or the last reset, under `smtp` in `GET /stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SmtpStats {
    /// Messages accepted (dropped replies included): what the inbox holds.
    pub messages: u64,
    /// Distinct Message-IDs among them.
    pub distinct_message_ids: u64,
    /// Messages whose Message-ID was already in the inbox: the duplicates a reader sees.
    pub duplicate_message_ids: u64,
    /// Accepted messages whose final reply was dropped.
    pub dropped: u64,
    /// Messages refused after their data (scripted replies and the fail rate).
    pub refused: u64,
    /// Recipients refused by a scripted reply.
    pub refused_recipients: u64,
    /// Senders (`MAIL FROM`) refused by a scripted reply.
    pub refused_senders: u64,
    /// Messages over the size limit, answered 552.
    pub too_large: u64,
}

/// A message accepted over SMTP (even when the reply to its final dot was dropped), as
/// `GET /_sink/messages` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MailRecord {
    /// Position in arrival order, from 1 (restarts at `POST /_sink/reset`).
    pub seq: u64,
    /// Arrival time, RFC 3339.
    pub at: String,
    /// Queue id given in the `250` reply (or that would have been, when dropped).
    pub queue_id: String,
    /// `Message-ID` header, without angle brackets.
    pub message_id: Option<String>,
    /// Envelope sender (`MAIL FROM`), empty for a null sender.
    pub mail_from: String,
    /// Envelope recipients (`RCPT TO`) accepted, in order.
    pub rcpt_to: Vec<String>,
    /// `Subject` header, RFC 2047 encoded words decoded.
    pub subject: Option<String>,
    /// `To` header, unfolded, as written: who the message says it is for, beside the
    /// envelope's `rcpt_to`, who actually received it.
    pub to: Option<String>,
    /// `X-Alert-Id` header.
    pub alert_id: Option<String>,
    /// Size of the message data in bytes (after dot-unstuffing, with its final CRLF).
    pub size: u64,
    /// Hex SHA-256 of the message data: header section and body, exactly as received.
    pub sha256: String,
    /// Hex SHA-256 of the body alone (after the blank line that ends the headers).
    pub body_sha256: String,
    /// User the client authenticated as, when AUTH is configured.
    pub authenticated_as: Option<String>,
    /// How the session was encrypted: `starttls`, `tls` (implicit), or `null` for plain
    /// text.
    pub tls: Option<String>,
    /// The connection was closed without answering the final dot.
    pub dropped: bool,
    /// Name of the `.eml` file in `--eml-dir`, when one was written.
    pub eml_file: Option<String>,
}

/// The envelope of a message: who sends, to whom, and who authenticated.
#[derive(Debug, Clone, Default)]
pub(crate) struct Envelope {
    pub mail_from: String,
    pub rcpt_to: Vec<String>,
    pub authenticated_as: Option<String>,
    /// `starttls` or `tls` when the session was encrypted.
    pub tls: Option<&'static str>,
}

/// What to do with a message once its data is in.
#[derive(Debug)]
pub(crate) enum MailAction {
    /// Answer this refusal; nothing is recorded in the inbox.
    Refuse(SmtpReply),
    /// Recorded: wait `delay`, then answer `250` with the queue id, or close the connection
    /// without answering.
    Accept {
        record: Box<MailRecord>,
        delay: Duration,
        drop: bool,
    },
}

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

/// The sink: its configuration and, behind one lock, faults, records, counters and the
/// seeded random generator of the fault draws.
#[derive(Debug)]
pub struct Sink {
    idempotency_header: HeaderName,
    retention: Option<Duration>,
    lookup: bool,
    keys: Vec<Vec<u8>>,
    timestamp_tolerance: Duration,
    seed: u64,
    smtp: bool,
    eml: bool,
    keep_bodies: bool,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    faults: FaultSettings,
    rng: StdRng,
    records: Vec<Record>,
    stats: Stats,
    /// Latest application of each key.
    applied: HashMap<String, Applied>,
    /// Receipts are never reused, not even after a reset: the outside world stores them.
    last_receipt: u64,
    /// Messages accepted over SMTP, in arrival order.
    messages: Vec<MailRecord>,
    smtp_stats: SmtpStats,
    /// Message-IDs in `messages`.
    message_ids: HashSet<String>,
    /// Queue ids, like receipts, are never reused.
    last_queue_id: u64,
}

#[derive(Debug)]
struct Applied {
    receipt: String,
    at: Instant,
}

impl Sink {
    /// A sink configured by `args`, with nothing recorded yet; its `/stats` count SMTP
    /// messages when `--smtp-listen` is given.
    pub fn new(args: &SinkArgs) -> Self {
        Self::with_smtp(args, args.smtp_listen.is_some())
    }

    /// A sink configured by `args` whose `/stats` count SMTP messages when `smtp` is true
    /// (the caller serves SMTP on a listener of its own).
    pub fn with_smtp(args: &SinkArgs, smtp: bool) -> Self {
        // Without a seed one is drawn anyway, so that it can be logged and a run replayed.
        let seed = args.seed.unwrap_or_else(rand::random);
        Sink {
            idempotency_header: args.idempotency_header.clone(),
            retention: args.retention,
            lookup: args.lookup,
            keys: args.secrets.iter().map(|s| s.key().to_vec()).collect(),
            timestamp_tolerance: args.timestamp_tolerance,
            seed,
            smtp,
            eml: args.eml_dir.is_some(),
            keep_bodies: args.keep_bodies,
            inner: Mutex::new(Inner {
                faults: FaultSettings::from_args(args),
                rng: StdRng::seed_from_u64(seed),
                records: Vec::new(),
                stats: Stats::default(),
                applied: HashMap::new(),
                last_receipt: 0,
                messages: Vec::new(),
                smtp_stats: SmtpStats::default(),
                message_ids: HashSet::new(),
                last_queue_id: 0,
            }),
        }
    }

    /// The seed of the fault draws.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Whether `GET /requests/{key}` is answered.
    pub fn lookup_enabled(&self) -> bool {
        self.lookup
    }

    /// Counters since start or the last reset.
    pub fn stats(&self) -> Stats {
        let inner = self.lock();
        Stats {
            distinct_keys: inner.applied.len() as u64,
            smtp: self.smtp.then(|| SmtpStats {
                distinct_message_ids: inner.message_ids.len() as u64,
                ..inner.smtp_stats.clone()
            }),
            ..inner.stats.clone()
        }
    }

    /// Messages accepted over SMTP in arrival order, only those with Message-ID
    /// `message_id` (angle brackets optional) when given.
    pub fn messages(&self, message_id: Option<&str>) -> Vec<MailRecord> {
        let wanted = message_id.map(mail::bare_message_id);
        self.lock()
            .messages
            .iter()
            .filter(|m| wanted.is_none_or(|id| m.message_id.as_deref() == Some(id)))
            .cloned()
            .collect()
    }

    /// Records in arrival order, only those with idempotency key `key` when given.
    pub fn records(&self, key: Option<&str>) -> Vec<Record> {
        self.lock()
            .records
            .iter()
            .filter(|r| key.is_none_or(|k| r.key.as_deref() == Some(k)))
            .cloned()
            .collect()
    }

    /// The receipt of the latest application of `key`, if it was ever applied.
    pub fn receipt_of(&self, key: &str) -> Option<String> {
        self.lock().applied.get(key).map(|a| a.receipt.clone())
    }

    /// The current faults.
    pub fn faults(&self) -> FaultSettings {
        self.lock().faults.clone()
    }

    /// Changes the faults; on error nothing changes.
    pub(crate) fn patch_faults(&self, patch: FaultPatch) -> Result<FaultSettings, String> {
        let mut inner = self.lock();
        inner.faults.apply(patch)?;
        Ok(inner.faults.clone())
    }

    /// Turns every fault off.
    pub fn clear_faults(&self) -> FaultSettings {
        let mut inner = self.lock();
        inner.faults.clear();
        inner.faults.clone()
    }

    /// Forgets records, messages, counters and applied keys. Faults, the random sequence,
    /// the receipt and queue id numbering carry on.
    pub fn reset(&self) {
        let mut inner = self.lock();
        inner.records.clear();
        inner.stats = Stats::default();
        inner.applied.clear();
        inner.messages.clear();
        inner.smtp_stats = SmtpStats::default();
        inner.message_ids.clear();
    }

    /// The reply to a `RCPT TO`: a scripted refusal, or `None` to accept the recipient.
    pub(crate) fn decide_recipient(&self) -> Option<SmtpReply> {
        let mut inner = self.lock();
        let reply = inner.faults.smtp_rcpt_script.pop_front()?;
        inner.smtp_stats.refused_recipients += 1;
        Some(reply)
    }

    /// The reply to a `MAIL FROM`: a scripted refusal, or `None` to accept the sender.
    pub(crate) fn decide_sender(&self) -> Option<SmtpReply> {
        let mut inner = self.lock();
        let reply = inner.faults.smtp_mail_from_script.pop_front()?;
        inner.smtp_stats.refused_senders += 1;
        Some(reply)
    }

    /// Whether `EHLO` leaves `STARTTLS` out of its answer (as an attacker on the path who
    /// strips it would).
    pub(crate) fn starttls_hidden(&self) -> bool {
        self.lock().faults.smtp_hide_starttls
    }

    /// Counts a message over the size limit; it is answered 552 and not recorded.
    pub(crate) fn record_mail_too_large(&self) {
        self.lock().smtp_stats.too_large += 1;
    }

    /// Decides what a message whose data is complete gets: a scripted refusal if one is
    /// queued, then the fail rate; whatever is left is accepted and recorded, never
    /// de-duplicated (an inbox keeps what it is given), and may have its reply dropped.
    pub(crate) fn decide_mail(&self, envelope: Envelope, data: &[u8]) -> MailAction {
        let mut guard = self.lock();
        let inner = &mut *guard;
        if let Some(reply) = inner.faults.smtp_data_script.pop_front() {
            inner.smtp_stats.refused += 1;
            return MailAction::Refuse(reply);
        }
        if draw(&mut inner.rng, inner.faults.smtp_fail_rate) {
            inner.smtp_stats.refused += 1;
            return MailAction::Refuse(inner.faults.smtp_fail_reply.clone());
        }

        let headers = mail::read_headers(data);
        inner.last_queue_id += 1;
        let queue_id = format!("Q{:08X}", inner.last_queue_id);
        let at = now_rfc3339();
        let eml_file = self.eml.then(|| {
            // The time without `-` and `:`, which some file systems refuse, sorts the same.
            let stamp: String = at.chars().filter(|c| *c != '-' && *c != ':').collect();
            format!("{stamp}-{queue_id}.eml")
        });
        inner.smtp_stats.messages += 1;
        if let Some(id) = &headers.message_id {
            if !inner.message_ids.insert(id.clone()) {
                inner.smtp_stats.duplicate_message_ids += 1;
            }
        }
        let drop = headers
            .message_id
            .as_ref()
            .is_some_and(|id| inner.faults.smtp_drop_for_message_ids.remove(id))
            || draw(&mut inner.rng, inner.faults.smtp_drop_rate);
        if drop {
            inner.smtp_stats.dropped += 1;
        }
        let record = MailRecord {
            seq: inner.messages.len() as u64 + 1,
            at,
            queue_id,
            message_id: headers.message_id,
            mail_from: envelope.mail_from,
            rcpt_to: envelope.rcpt_to,
            subject: headers.subject,
            to: headers.to,
            alert_id: headers.alert_id,
            size: data.len() as u64,
            sha256: sha256_hex(data),
            body_sha256: sha256_hex(&data[headers.body_offset..]),
            authenticated_as: envelope.authenticated_as,
            tls: envelope.tls.map(str::to_owned),
            dropped: drop,
            eml_file,
        };
        inner.messages.push(record.clone());
        MailAction::Accept {
            record: Box::new(record),
            delay: inner.faults.smtp_latency(),
            drop,
        }
    }

    /// Notes that the `.eml` file of the message `queue_id` could not be written.
    pub(crate) fn eml_not_written(&self, queue_id: &str) {
        if let Some(record) = self
            .lock()
            .messages
            .iter_mut()
            .find(|m| m.queue_id == queue_id)
        {
            record.eml_file = None;
        }
    }

    /// The idempotency key of a request, if it has one.
    /// The `Authorization` header as recorded: its scheme and the SHA-256 of the rest.
    pub(crate) fn authorization_of(headers: &HeaderMap) -> Option<String> {
        let value = headers.get(hyper::header::AUTHORIZATION)?.as_bytes();
        let text = String::from_utf8_lossy(value);
        let (scheme, credentials) = text.split_once(' ').unwrap_or(("", &text));
        Some(format!(
            "{scheme} sha256:{}",
            sha256_hex(credentials.as_bytes())
        ))
    }

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
        if self.keys.is_empty() {
            return SignatureCheck::Unchecked;
        }
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let (Some(id), Some(timestamp), Some(signature)) = (
            header("webhook-id"),
            header("webhook-timestamp"),
            header("webhook-signature"),
        ) else {
            return SignatureCheck::Missing;
        };
        let Ok(timestamp) = timestamp.trim().parse::<i64>() else {
            return SignatureCheck::Invalid;
        };
        if !outbox_core::signing::verify(&self.keys, id, timestamp, body, signature) {
            return SignatureCheck::Invalid;
        }
        let tolerance = i64::try_from(self.timestamp_tolerance.as_secs()).unwrap_or(i64::MAX);
        if now.abs_diff(timestamp) > tolerance.unsigned_abs() {
            return SignatureCheck::Stale;
        }
        SignatureCheck::Valid
    }

    /// Records a delivery whose body exceeded the limit; it is answered 413.
    pub(crate) fn record_too_large(&self, path: &str, key: Option<String>) {
        let mut inner = self.lock();
        inner.stats.requests += 1;
        let record = Record {
            seq: inner.records.len() as u64 + 1,
            at: now_rfc3339(),
            path: path.to_owned(),
            key,
            payload_sha256: None,
            signature: SignatureCheck::Unchecked,
            outcome: Outcome::TooLarge,
            receipt: None,
            status: Some(StatusCode::PAYLOAD_TOO_LARGE.as_u16()),
            dropped: false,
            authorization: None,
            body: None,
        };
        inner.records.push(record);
    }

    /// Decides what a delivery gets, records it and counts it. A bad signature (with a
    /// secret configured) is refused first, as a real receiver would before anything else;
    /// then come scripted responses, the fail rate, and de-duplication; whatever is left is
    /// applied.
    pub(crate) fn decide(
        &self,
        path: &str,
        key: Option<String>,
        body: &[u8],
        signature: SignatureCheck,
        authorization: Option<String>,
    ) -> Action {
        let mut guard = self.lock();
        let inner = &mut *guard;
        inner.stats.requests += 1;
        if signature.is_bad() {
            inner.stats.bad_signatures += 1;
        }
        let mut record = Record {
            seq: inner.records.len() as u64 + 1,
            at: now_rfc3339(),
            path: path.to_owned(),
            key: key.clone(),
            payload_sha256: Some(sha256_hex(body)),
            signature,
            outcome: Outcome::Applied,
            receipt: None,
            status: None,
            dropped: false,
            authorization,
            body: self
                .keep_bodies
                .then(|| String::from_utf8_lossy(body).into_owned()),
        };

        if signature.is_bad() {
            record.outcome = Outcome::Refused;
            record.status = Some(StatusCode::UNAUTHORIZED.as_u16());
            inner.stats.refused += 1;
            inner.records.push(record);
            return Action::Respond(json_response(
                StatusCode::UNAUTHORIZED,
                &serde_json::json!({"error": signature.refusal()}),
            ));
        }

        if let Some(scripted) = inner.faults.script.pop_front() {
            let (response, status) = scripted.response_or_500();
            record.outcome = Outcome::Scripted;
            record.status = Some(status.as_u16());
            inner.stats.scripted += 1;
            inner.records.push(record);
            return Action::Respond(response);
        }

        if draw(&mut inner.rng, inner.faults.fail_rate) {
            let status = crate::config::check_status(inner.faults.fail_status)
                .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            record.outcome = Outcome::Failed;
            record.status = Some(status.as_u16());
            inner.stats.failed += 1;
            inner.records.push(record);
            return Action::Respond(json_response(
                status,
                &serde_json::json!({"error": "injected failure"}),
            ));
        }

        let now = Instant::now();
        let previous = key
            .as_ref()
            .and_then(|k| inner.applied.get(k))
            .map(|a| (a.receipt.clone(), a.at));
        let receipt = match previous {
            Some((receipt, at))
                if self
                    .retention
                    .is_some_and(|retention| now.duration_since(at) < retention) =>
            {
                record.outcome = Outcome::WireDuplicate;
                inner.stats.wire_duplicates += 1;
                receipt
            }
            previous => {
                inner.last_receipt += 1;
                let receipt = format!("r-{}", inner.last_receipt);
                record.outcome = Outcome::Applied;
                inner.stats.applied += 1;
                if previous.is_some() {
                    inner.stats.effective_duplicates += 1;
                }
                if let Some(k) = &key {
                    inner.applied.insert(
                        k.clone(),
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

        // Decided now rather than after the latency, so that the draws stay in arrival
        // order however long each answer waits.
        let drop = key
            .as_ref()
            .is_some_and(|k| inner.faults.drop_response_for_keys.remove(k))
            || draw(&mut inner.rng, inner.faults.drop_response_rate);
        if drop {
            record.dropped = true;
            inner.stats.dropped += 1;
        } else {
            record.status = Some(StatusCode::OK.as_u16());
        }
        inner.records.push(record);
        Action::Acknowledge {
            receipt,
            delay: inner.faults.latency(),
            drop,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind, still worth serving.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// True with probability `rate`. A zero rate draws nothing, so turning a fault off does not
/// shift the sequence of the others.
fn draw(rng: &mut StdRng, rate: f64) -> bool {
    rate > 0.0 && rng.random::<f64>() < rate
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}

pub(crate) fn sha256_hex(body: &[u8]) -> String {
    use std::fmt::Write;
    Sha256::digest(body)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

/// A JSON response. Serialising the sink's own types cannot fail; should it, the answer is
/// a 500 rather than a panic.
pub(crate) fn json_response(status: StatusCode, value: &impl Serialize) -> Response<Full<Bytes>> {
    let (status, body) = match serde_json::to_vec(value) {
        Ok(body) => (status, body),
        Err(err) => {
            tracing::error!(error = %err, "cannot serialise a response");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                br#"{"error":"internal error"}"#.to_vec(),
            )
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn sink(flags: &[&str]) -> Sink {
        Sink::new(&SinkArgs::parse_from(
            std::iter::once("sink").chain(flags.iter().copied()),
        ))
    }

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
            None,
        )
    }

    fn mail(sink: &Sink, data: &[u8]) -> MailAction {
        let envelope = Envelope {
            mail_from: "alerts@example.com".to_owned(),
            rcpt_to: vec!["cfo@example.com".to_owned()],
            authenticated_as: None,
            tls: None,
        };
        sink.decide_mail(envelope, data)
    }

    #[test]
    fn an_inbox_keeps_every_message_and_counts_repeated_message_ids() {
        let sink = Sink::with_smtp(&SinkArgs::parse_from(["sink"]), true);
        let data = b"Message-ID: <m-1@x>\r\n\r\nhello\r\n";
        for _ in 0..2 {
            assert!(matches!(
                mail(&sink, data),
                MailAction::Accept { drop: false, .. }
            ));
        }
        mail(&sink, b"Message-ID: <m-2@x>\r\n\r\nhi\r\n");
        mail(&sink, b"no headers at all\r\n");
        let stats = sink.stats().smtp.unwrap();
        assert_eq!(
            (
                stats.messages,
                stats.distinct_message_ids,
                stats.duplicate_message_ids
            ),
            (4, 2, 1)
        );
        let twice = sink.messages(Some("<m-1@x>"));
        assert_eq!(twice.len(), 2);
        assert_ne!(twice[0].queue_id, twice[1].queue_id);
        assert_eq!(twice[0].sha256, sha256_hex(data));
        assert_eq!(twice[0].body_sha256, sha256_hex(b"hello\r\n"));
        assert_eq!(sink.messages(None).len(), 4);

        sink.reset();
        assert_eq!(sink.stats().smtp, Some(SmtpStats::default()));
        let MailAction::Accept { record, .. } = mail(&sink, data) else {
            panic!("accepted");
        };
        assert_eq!((record.seq, record.queue_id.as_str()), (1, "Q00000005"));
    }

    #[test]
    fn smtp_stats_appear_only_with_smtp() {
        assert_eq!(sink(&[]).stats().smtp, None);
        assert!(sink(&["--smtp-listen", "127.0.0.1:2525"])
            .stats()
            .smtp
            .is_some());
    }

    #[test]
    fn hashes_bodies_in_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
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
            match sink.decide("/hook", Some("k".to_owned()), b"{}", check, None) {
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
