//! Email destinations: the message of an email alert, rendered once and stored before its
//! first send, and the SMTP dialogue that sends those stored bytes on every attempt.
//!
//! The dialogue is driven one command at a time (lettre's `AsyncSmtpConnection`), so the
//! outcome says exactly which phase ended it: before the message data went out nothing can
//! have arrived (not sent, with the phase as the error class: `connect`, `greeting`,
//! `tls`, `auth`, `mail_from`, ...; or refused by a reply to `RCPT TO` or `DATA`); once the
//! data went out, a lost connection or a missing final reply leaves the delivery
//! uncertain. Reaching the relay, TLS included, is `relay`'s.

use lettre::message::header::{self, HeaderName, HeaderValue};
use lettre::message::{Mailbox, Mailboxes, MultiPart};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::AsyncSmtpConnection;
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::{ClientId, MailBodyParameter, MailParameter};
use lettre::{Address, Message};
use outbox_render::kind_for_alert;
use outbox_store::dispatch::ClaimedAlert;
use outbox_store::rendered::{EmailJob, RenderedMessage};
use sha2::{Digest, Sha256};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::attempt_trace::{self, step_span};
use crate::classify::{Exchange, SmtpPhase};
use crate::relay::{or_not_sent, within, Security};
use crate::templates::TenantTemplates;
use crate::Shared;
use outbox_core::trace_context::TraceContext;
use tracing::Instrument;

/// One attempt's exchange, and the evidence naming the message it sent (when one was
/// rendered).
pub(crate) async fn send(
    shared: &Shared,
    row: &ClaimedAlert,
    trace: Option<&TraceContext>,
) -> (Exchange, Option<String>) {
    let job = match outbox_store::rendered::email_job(&shared.pool, row.alert_id).await {
        Ok(Some(job)) => job,
        Ok(None) => {
            return (
                Exchange::Unsendable("the destination is no longer an email destination".into()),
                None,
            )
        }
        Err(err) => {
            return (
                Exchange::NotConnected(format!("reading the email settings failed: {err}")),
                None,
            )
        }
    };
    let message = match stored_message(shared, &job).await {
        Ok(message) => message,
        Err(exchange) => return (exchange, None),
    };
    let note = format!(
        "message {} sha256:{} rendered with templates {}",
        message.message_id, message.sha256, message.template_version
    );
    let timeout =
        Duration::from_millis(u64::try_from(row.destination.timeout_ms).unwrap_or(10_000));
    let bytes = with_trace_field(&message.bytes, trace);
    let span = attempt_trace::smtp_client_span(job.relay().ok());
    let exchange = deliver(shared, row, &job, &bytes, timeout)
        .instrument(span.clone())
        .await;
    attempt_trace::record_exchange(&span, &exchange);
    (exchange, Some(note))
}

/// The stored message with the attempt's trace context as its first header fields
/// (`Traceparent`, and `Tracestate` when there is one). Mail has no standard for trace
/// context: the fields are informational, for a receiving system that reads them. They
/// are added to the bytes sent, never to the stored message, whose bytes and fingerprint
/// are the same on every attempt.
fn with_trace_field(stored: &[u8], trace: Option<&TraceContext>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(stored.len() + 128);
    for (name, value) in attempt_trace::trace_headers(trace) {
        // `traceparent` -> `Traceparent`, as mail header fields are usually written.
        let mut chars = name.chars();
        if let Some(first) = chars.next() {
            bytes.push(first.to_ascii_uppercase() as u8);
            bytes.extend_from_slice(chars.as_str().as_bytes());
        }
        bytes.extend_from_slice(b": ");
        bytes.extend_from_slice(value.as_bytes());
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(stored);
    bytes
}

/// The alert's stored message; rendered and stored first when this is its first attempt.
/// Write before act: the bytes are committed before any connection is opened, so a crash
/// after sending still resends exactly what was sent.
async fn stored_message(shared: &Shared, job: &EmailJob) -> Result<RenderedMessage, Exchange> {
    let not_stored = |err: outbox_store::StoreError| {
        Exchange::NotConnected(format!("the rendered message could not be stored: {err}"))
    };
    if let Some(message) = outbox_store::rendered::find(&shared.pool, job.alert_id)
        .await
        .map_err(not_stored)?
    {
        return Ok(message);
    }
    // A snapshot: a reload (SIGHUP) meanwhile changes the next rendering, not this one.
    let templates = shared.templates();
    let built = build_message(job, &templates).map_err(Exchange::Unsendable)?;
    let sha256 = hex(&Sha256::digest(&built.bytes));
    outbox_store::rendered::store_once(
        &shared.pool,
        job.alert_id,
        &built.message_id,
        &built.bytes,
        &sha256,
        &built.template_version,
    )
    .await
    .map_err(not_stored)
}

/// A message built from an alert, before it is stored.
#[derive(Debug)]
pub(crate) struct BuiltMessage {
    pub message_id: String,
    pub bytes: Vec<u8>,
    pub template_version: String,
}

/// Renders `job`'s alert in the destination's locale (else the tenant's, else English)
/// and builds its MIME
/// message: text and HTML alternatives, `Message-ID: <alert-id@sender-domain>`,
/// `X-Alert-Id`, `X-Alert-Revision`, and for a correction `In-Reply-To` and `References`
/// to the alert it corrects.
pub(crate) fn build_message(
    job: &EmailJob,
    templates: &TenantTemplates,
) -> Result<BuiltMessage, String> {
    let locale = outbox_render::resolve(job.locale, job.tenant_locale);
    let kind = kind_for_alert(&job.payload, &job.occurrence);
    let rendered = templates
        .render(&job.tenant_name, kind, locale, &job.payload)
        .map_err(|err| format!("the alert could not be rendered: {err}"))?;
    let from: Address = job
        .mail_from
        .parse()
        .map_err(|_| format!("the sender address `{}` is not valid", job.mail_from))?;
    let domain = from.domain().to_owned();
    let message_id = |id: &uuid::Uuid| format!("<{id}@{domain}>");
    let own_id = message_id(&job.alert_id);
    let recipients = recipients(job)?;
    // `To` is built once from the whole list: adding one address at a time re-reads the
    // header each time, and a list that does not read back would be replaced.
    let to: Mailboxes = recipients
        .iter()
        .map(|address| Mailbox::new(None, address.clone()))
        .collect();
    let mut builder = Message::builder()
        .from(Mailbox::new(None, from))
        .header(header::To::from(to))
        .subject(rendered.subject)
        .message_id(Some(own_id.clone()));
    if let Some(previous) = job.earlier_revisions.last() {
        builder = builder.in_reply_to(message_id(previous));
        let chain: Vec<String> = job.earlier_revisions.iter().map(message_id).collect();
        builder = builder.references(chain.join(" "));
    }
    let mut message = builder
        .multipart(MultiPart::alternative_plain_html(
            rendered.text,
            rendered.html,
        ))
        .map_err(|err| format!("the message could not be built: {err}"))?;
    for (name, value) in [
        ("X-Alert-Id", job.alert_id.to_string()),
        ("X-Alert-Revision", job.revision.to_string()),
    ] {
        let name = HeaderName::new_from_ascii(name.to_owned())
            .map_err(|_| "a header name is invalid".to_owned())?;
        message
            .headers_mut()
            .insert_raw(HeaderValue::new(name, value));
    }
    let bytes = message.formatted();
    check_to_header(&bytes, &recipients)?;
    Ok(BuiltMessage {
        message_id: own_id,
        bytes,
        template_version: rendered.template_version,
    })
}

/// Checks that the `To` header of `message` (as it goes out) names exactly `envelope`,
/// in order: nobody receives the message without everyone who reads it seeing so, whatever
/// an address or the header's folding did to the rendering.
pub(crate) fn check_to_header(message: &[u8], envelope: &[Address]) -> Result<(), String> {
    let named = to_header(message)?;
    let expected: Vec<&str> = envelope.iter().map(AsRef::as_ref).collect();
    let named: Vec<&str> = named.iter().map(AsRef::as_ref).collect();
    if named != expected {
        return Err(format!(
            "the message's To header names [{}] but it would be sent to [{}]; not sent",
            named.join(", "),
            expected.join(", ")
        ));
    }
    Ok(())
}

/// The addresses of the one `To` header of a message's header section, read back with the
/// mail library's own parser.
fn to_header(message: &[u8]) -> Result<Vec<Address>, String> {
    let head_end = message
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(message.len());
    let head = String::from_utf8_lossy(&message[..head_end]);
    // Unfolded: a line that starts with a blank continues the field before it.
    let mut fields: Vec<String> = Vec::new();
    for line in head.split("\r\n") {
        match fields.last_mut() {
            Some(field) if line.starts_with([' ', '\t']) => field.push_str(line),
            _ => fields.push(line.to_owned()),
        }
    }
    let mut values = fields.iter().filter_map(|field| {
        let (name, value) = field.split_once(':')?;
        name.trim().eq_ignore_ascii_case("to").then_some(value)
    });
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err("the message does not have exactly one To header; not sent".to_owned());
    };
    let mailboxes: Mailboxes = value.trim().parse().map_err(|_| {
        format!(
            "the message's To header `{}` does not read back as addresses; not sent",
            value.trim()
        )
    })?;
    Ok(mailboxes.into_iter().map(|mailbox| mailbox.email).collect())
}

/// Everyone an email alert goes to: the destination's recipients, then the owners its
/// payload names (`recipients`, e.g. a contract's), each address once (compared without
/// regard to case, the first spelling kept), at most 100, by the rule every recipient
/// follows ([`outbox_core::recipients`]), checked again here for rows written before it.
/// All of them are in the `To` header and the envelope. An address the rule refuses is a
/// configuration error.
pub(crate) fn recipients(job: &EmailJob) -> Result<Vec<Address>, String> {
    let owners =
        outbox_core::recipients::payload_recipients(&job.payload).map_err(|err| err.to_string())?;
    let owners: Vec<String> = owners.iter().map(ToString::to_string).collect();
    outbox_core::recipients::recipients(job.mail_to.iter().chain(&owners).map(String::as_str))
        .map_err(|err| err.to_string())
}

/// Runs one SMTP dialogue to a vetted address of the relay, sending `bytes` as they are.
async fn deliver(
    shared: &Shared,
    row: &ClaimedAlert,
    job: &EmailJob,
    bytes: &[u8],
    timeout: Duration,
) -> Exchange {
    let dialogue = match Dialogue::prepare(shared, row, job, bytes).await {
        Ok(dialogue) => dialogue,
        Err(exchange) => return exchange,
    };
    // The destination's timeout bounds the whole dialogue, as it bounds a whole HTTP
    // request: the send must end inside the claim's lease.
    let deadline = tokio::time::Instant::now() + timeout;
    // Before the data: nothing can have been delivered, whatever goes wrong.
    let hello = ClientId::Domain(dialogue.from.domain().to_owned());
    let opened = crate::relay::open(deadline, dialogue.addr, &dialogue.security, &hello)
        .instrument(step_span("smtp open"))
        .await;
    let mut conn = match opened {
        Ok(conn) => conn,
        Err(exchange) => return exchange,
    };
    if let Err(exchange) = dialogue.before_data(deadline, &mut conn, job, bytes).await {
        return exchange;
    }
    let exchange = send_data(deadline, &mut conn, bytes)
        .instrument(step_span("smtp message data"))
        .await;
    // A polite end, if time is left; its outcome changes nothing.
    let _ = within(deadline, conn.quit()).await;
    exchange
}

/// What a dialogue needs, checked before the relay is reached: an error is a
/// configuration error, or the relay cannot be reached.
struct Dialogue {
    addr: SocketAddr,
    security: Security,
    password: Option<String>,
    from: Address,
    recipients: Vec<Address>,
}

impl Dialogue {
    async fn prepare(
        shared: &Shared,
        row: &ClaimedAlert,
        job: &EmailJob,
        bytes: &[u8],
    ) -> Result<Dialogue, Exchange> {
        let relay = job.relay().map_err(Exchange::Unsendable)?;
        let security = Security::of(job.smtp_tls, job.smtp_ca_pem.as_deref(), &relay.host)
            .map_err(Exchange::Unsendable)?;
        let addr = vetted_address(&shared.config.egress, &relay.host, relay.port).await?;
        let password = match &job.smtp_password {
            Some(stored) => Some(
                shared
                    .config
                    .secret_keys
                    .open(row.destination.id, stored)
                    .map_err(|err| {
                        Exchange::Unsendable(format!("the SMTP password of the destination: {err}"))
                    })?,
            ),
            None => None,
        };
        let Ok(from) = job.mail_from.parse::<Address>() else {
            return Err(Exchange::Unsendable(format!(
                "the sender `{}` is not valid",
                job.mail_from
            )));
        };
        let recipients = recipients(job).map_err(Exchange::Unsendable)?;
        // The stored bytes may predate this check: what is sent must name whom it is sent to.
        check_to_header(bytes, &recipients).map_err(Exchange::Unsendable)?;
        Ok(Dialogue {
            addr,
            security,
            password,
            from,
            recipients,
        })
    }

    /// AUTH (when the destination has credentials), then the envelope and `DATA`: an
    /// error means nothing was sent, or the relay refused.
    async fn before_data(
        self,
        deadline: tokio::time::Instant,
        conn: &mut AsyncSmtpConnection,
        job: &EmailJob,
        bytes: &[u8],
    ) -> Result<(), Exchange> {
        if let (Some(user), Some(password)) = (&job.smtp_username, self.password) {
            let credentials = Credentials::new(user.clone(), password);
            or_not_sent(
                deadline,
                SmtpPhase::Auth,
                conn.auth(&[Mechanism::Plain, Mechanism::Login], &credentials),
                |err| format!("SMTP AUTH refused: {err}"),
                "SMTP AUTH timed out",
            )
            .instrument(step_span("smtp auth"))
            .await?;
        }
        let mut params = Vec::new();
        if !bytes.is_ascii() {
            params.push(MailParameter::Body(MailBodyParameter::EightBitMime));
        }
        // A refused sender is not the message's fault: whatever the reply, nothing was
        // sent and the attempt is retried (a relay that keeps refusing exhausts the
        // retries).
        or_not_sent(
            deadline,
            SmtpPhase::MailFrom,
            conn.command(Mail::new(Some(self.from), params)),
            |err| format!("MAIL FROM: {err}"),
            "MAIL FROM timed out",
        )
        .instrument(step_span("smtp mail from"))
        .await?;
        let recipients = step_span("smtp rcpt to");
        for to in self.recipients {
            let rcpt = conn.command(Rcpt::new(to, vec![]));
            let refused = before_data(deadline, SmtpPhase::RcptTo, "RCPT TO", rcpt)
                .instrument(recipients.clone())
                .await;
            if let Some(refused) = refused {
                return Err(refused);
            }
        }
        drop(recipients);
        let data = before_data(deadline, SmtpPhase::Data, "DATA", conn.command(Data))
            .instrument(step_span("smtp data"))
            .await;
        match data {
            Some(refused) => Err(refused),
            None => Ok(()),
        }
    }
}

/// The message data: from here on a lost reply means it may have been delivered.
async fn send_data(
    deadline: tokio::time::Instant,
    conn: &mut AsyncSmtpConnection,
    bytes: &[u8],
) -> Exchange {
    match within(deadline, conn.message(bytes)).await {
        Ok(Ok(reply)) => {
            let reply: Vec<&str> = reply.message().collect();
            let reply = reply.join(" ");
            Exchange::SmtpAccepted {
                reference: queue_id(&reply),
                reply,
            }
        }
        Ok(Err(err)) => match reply_code(&err) {
            Some(code) => Exchange::SmtpRefused {
                phase: "message data",
                code,
                reply: err.to_string(),
            },
            None if err.is_timeout() => {
                Exchange::TimedOut(format!("no final SMTP reply after the message data: {err}"))
            }
            None => Exchange::Broken(format!(
                "the connection was lost after the message data, before the final reply: {err}"
            )),
        },
        Err(()) => Exchange::TimedOut(
            "no final SMTP reply after the message data before the timeout".to_owned(),
        ),
    }
}

/// The outcome of a command before the data: `None` when it succeeded. A reply refuses
/// (4xx: not processed, 5xx: rejected); anything else means nothing was sent.
async fn before_data<T>(
    deadline: tokio::time::Instant,
    phase: SmtpPhase,
    command: &'static str,
    step: impl Future<Output = Result<T, lettre::transport::smtp::Error>>,
) -> Option<Exchange> {
    let not_sent = |why| Exchange::SmtpNotSent { phase, why };
    match within(deadline, step).await {
        Ok(Ok(_)) => None,
        Ok(Err(err)) => Some(match reply_code(&err) {
            Some(code) => Exchange::SmtpRefused {
                phase: command,
                code,
                reply: err.to_string(),
            },
            None => not_sent(format!("{command}: {err}")),
        }),
        Err(()) => Some(not_sent(format!("{command} timed out"))),
    }
}

/// The three-digit code of a negative reply.
fn reply_code(err: &lettre::transport::smtp::Error) -> Option<u16> {
    err.status().and_then(|code| code.to_string().parse().ok())
}

/// The relay's queue id in a `250 ... queued as ID` reply.
fn queue_id(reply: &str) -> Option<String> {
    let (_, rest) = reply.split_once("queued as ")?;
    let id = rest.split_whitespace().next()?;
    (!id.is_empty()).then(|| id.chars().take(200).collect())
}

/// The relay's address, resolved once and vetted by the egress guard: the connection goes
/// to that address only, so a name cannot resolve to a blocked address at connect time.
async fn vetted_address(
    guard: &outbox_egress::Guard,
    host: &url::Host<String>,
    port: u16,
) -> Result<SocketAddr, Exchange> {
    let addrs: Vec<IpAddr> = match host {
        url::Host::Ipv4(ip) => vec![IpAddr::V4(*ip)],
        url::Host::Ipv6(ip) => vec![IpAddr::V6(*ip)],
        url::Host::Domain(name) => match tokio::net::lookup_host((name.as_str(), port)).await {
            Ok(found) => found.map(|addr| addr.ip()).collect(),
            Err(err) => {
                return Err(Exchange::SmtpNotSent {
                    phase: SmtpPhase::Connect,
                    why: format!("the relay `{name}` does not resolve: {err}"),
                })
            }
        },
    };
    let Some(first) = addrs.first() else {
        return Err(Exchange::SmtpNotSent {
            phase: SmtpPhase::Connect,
            why: format!("the relay `{host}` has no address"),
        });
    };
    guard
        .check_all(&addrs)
        .map_err(|refused| Exchange::Blocked(refused.to_string()))?;
    Ok(SocketAddr::new(*first, port))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{Locale, SmtpTls};

    fn job(revision: i32, earlier: Vec<uuid::Uuid>, locale: Option<Locale>) -> EmailJob {
        EmailJob {
            alert_id: uuid::Uuid::nil(),
            payload: r#"{"kind":"note","text":"hello"}"#.into(),
            occurrence: "o-1".into(),
            revision,
            earlier_revisions: earlier,
            smtp_host: "127.0.0.1".into(),
            smtp_port: 25,
            smtp_tls: SmtpTls::None,
            smtp_ca_pem: None,
            tenant_name: "acme".into(),
            smtp_username: None,
            smtp_password: None,
            mail_from: "alerts@example.org".into(),
            mail_to: vec!["cfo@example.org".into()],
            locale,
            tenant_locale: None,
        }
    }

    fn text(built: &BuiltMessage) -> String {
        String::from_utf8_lossy(&built.bytes).into_owned()
    }

    #[test]
    fn the_message_id_is_the_alert_id_at_the_sender_domain() {
        let built =
            build_message(&job(0, vec![], None), &TenantTemplates::default()).expect("builds");
        assert_eq!(
            built.message_id,
            "<00000000-0000-0000-0000-000000000000@example.org>"
        );
        let text = text(&built);
        assert!(text.contains("Message-ID: <00000000-0000-0000-0000-000000000000@example.org>"));
        assert!(text.contains("X-Alert-Id: 00000000-0000-0000-0000-000000000000"));
        assert!(text.contains("X-Alert-Revision: 0"));
        assert!(text.contains("multipart/alternative"));
        assert!(!text.contains("In-Reply-To"));
    }

    #[test]
    fn a_correction_threads_under_the_alert_it_corrects() {
        let first = uuid::Uuid::from_u128(1);
        let second = uuid::Uuid::from_u128(2);
        let built = build_message(
            &job(2, vec![first, second], Some(Locale::Es)),
            &TenantTemplates::default(),
        )
        .expect("builds");
        // Long headers are folded; unfolded they read as one line.
        let text = text(&built).replace("\r\n ", " ").replace("\r\n\t", " ");
        assert!(text.contains(&format!("In-Reply-To: <{second}@example.org>")));
        assert!(text.contains(&format!(
            "References: <{first}@example.org> <{second}@example.org>"
        )));
    }

    #[test]
    fn the_payloads_owners_join_the_destinations_recipients_once() {
        let mut job = job(0, vec![], None);
        job.mail_to = vec!["cfo@example.org".into(), "ops@example.org".into()];
        job.payload =
            r#"{"kind":"note","recipients":["CFO@Example.org","owner@example.org"]}"#.into();
        let all: Vec<String> = recipients(&job)
            .expect("addresses")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            all,
            ["cfo@example.org", "ops@example.org", "owner@example.org"]
        );
        let built = build_message(&job, &TenantTemplates::default()).expect("builds");
        let text = text(&built).replace("\r\n ", " ");
        assert!(
            text.contains("To: cfo@example.org, ops@example.org, owner@example.org"),
            "{text}"
        );

        job.payload = r#"{"kind":"note","recipients":"owner@example.org"}"#.into();
        assert!(recipients(&job).is_err());
        job.payload = r#"{"kind":"note","recipients":["not an address"]}"#.into();
        assert!(recipients(&job).is_err());
        // Stored before recipients were checked at approval: refused at send time too.
        for hidden in [r#""a,b"@attacker.example"#, "x@[127.0.0.1]"] {
            job.payload = serde_json::json!({"kind": "note", "recipients": [hidden]}).to_string();
            assert!(recipients(&job).is_err(), "{hidden}");
            assert!(build_message(&job, &TenantTemplates::default()).is_err());
        }
    }

    #[test]
    fn the_to_header_names_exactly_the_envelope_even_when_folded() {
        let mut job = job(0, vec![], None);
        job.mail_to = (0..40).map(|i| format!("owner-{i}@example.org")).collect();
        let built = build_message(&job, &TenantTemplates::default()).expect("builds");
        let envelope = recipients(&job).expect("addresses");
        assert!(text(&built).contains("\r\n "), "a long To header is folded");
        assert_eq!(to_header(&built.bytes), Ok(envelope.clone()));
        assert_eq!(check_to_header(&built.bytes, &envelope), Ok(()));

        // Addresses beyond ASCII read back too.
        job.mail_to = vec!["josé@exämple.org".into(), "o'brien@example.org".into()];
        let built = build_message(&job, &TenantTemplates::default()).expect("builds");
        let envelope = recipients(&job).expect("addresses");
        assert_eq!(check_to_header(&built.bytes, &envelope), Ok(()));
    }

    #[test]
    fn a_message_whose_to_header_hides_a_recipient_is_not_sent() {
        let envelope: Vec<Address> = ["cfo@example.org", "spy@attacker.example"]
            .iter()
            .map(|a| a.parse().expect("address"))
            .collect();
        let hidden =
            b"From: alerts@example.org\r\nTo: cfo@example.org\r\nSubject: x\r\n\r\nbody\r\n";
        let why = check_to_header(hidden, &envelope).unwrap_err();
        assert!(why.contains("spy@attacker.example"), "{why}");
        let twice = b"To: cfo@example.org\r\nTo: spy@attacker.example\r\n\r\n";
        assert!(check_to_header(twice, &envelope).is_err());
        let none = b"From: alerts@example.org\r\n\r\nTo: cfo@example.org, spy@attacker.example\r\n";
        assert!(check_to_header(none, &envelope).is_err());
    }

    /// Address-like text made mostly of the characters that matter to a header: quotes,
    /// commas, brackets, backslashes, blanks, `@`, dots, and letters beyond ASCII.
    fn address_like() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let part = proptest::collection::vec(
            prop_oneof![
                4 => proptest::char::range('a', 'z'),
                1 => proptest::sample::select(vec![
                    '"', ',', '[', ']', '\\', ' ', '@', '.', '<', '>', '(', ')', ';', ':',
                    '+', '\'', 'é', '1', '\t',
                ]),
            ],
            1..10,
        )
        .prop_map(String::from_iter);
        (part.clone(), part).prop_map(|(local, domain)| format!("{local}@{domain}.example"))
    }

    proptest::proptest! {
        #[test]
        fn every_address_the_rule_accepts_reads_back_from_the_to_header(
            addresses in proptest::collection::vec(address_like(), 1..6)
        ) {
            let mut job = job(0, vec![], None);
            // The ones the rule accepts, as a destination's or a payload's would be.
            job.mail_to = addresses
                .into_iter()
                .filter(|a| outbox_core::recipients::recipient(a).is_ok())
                .collect();
            if !job.mail_to.is_empty() {
                let envelope = recipients(&job).map_err(proptest::test_runner::TestCaseError::fail)?;
                let built = build_message(&job, &TenantTemplates::default());
                let built = built.map_err(proptest::test_runner::TestCaseError::fail)?;
                proptest::prop_assert_eq!(check_to_header(&built.bytes, &envelope), Ok(()));
            }
        }
    }

    #[test]
    fn queue_ids_are_read() {
        assert_eq!(
            queue_id("2.0.0 Ok: queued as ABC123").as_deref(),
            Some("ABC123")
        );
        assert_eq!(queue_id("2.0.0 Ok"), None);
    }
}
