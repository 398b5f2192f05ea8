//! The fault suite's referee. It judges a run only by the database's tables and the
//! sinks' own records, never by what the dispatchers say about themselves, and counts:
//!
//! - **lost**: committed alerts that are not accepted, failed, held or superseded;
//! - **logical duplicates**: more than one alert per identity and revision;
//! - **partial commits**: an alert without its queue row or outcome (or with both), or
//!   without the evidence line its approval writes;
//! - **unexpected**: a key a sink saw that no committed alert has;
//! - **mutated retries**: a key seen with another payload than the one committed;
//! - **effective duplicates** per sink (applied more than once) and **wire duplicates**
//!   (recognised and absorbed by the sink);
//! - **unresolved uncertain** alerts;
//! - **phantom acceptances**: alerts recorded as accepted that their sink never applied.
//!
//! Passing means all zero, except wire duplicates at sinks that de-duplicate or answer
//! lookups, and effective duplicates at `retry` sinks, each of which must belong to an
//! alert flagged `possible_duplicate`.
//!
//! An email destination is judged by its SMTP inbox ([`Inbox`], the sink's
//! `/_sink/messages`), which de-duplicates nothing, as a real one: a Message-ID there more
//! than once is an effective duplicate (allowed only at a `retry` destination, for an
//! alert flagged `possible_duplicate`); a message whose bytes differ from the alert's
//! stored message is a mutated retry; a message for no committed alert is unexpected; an
//! email alert recorded as accepted whose Message-ID is not in the inbox is a phantom
//! acceptance.
//!
//! Layout: [`SinkRecord`] and [`Sink`] (what a webhook sink recorded), [`InboxMessage`]
//! and [`Inbox`] (what an SMTP inbox recorded), [`check`] and [`check_with_inboxes`] (the
//! counts and the offenders), [`Report`] (with its table).

use outbox_core::AlertState;
use outbox_store::PgPool;
use std::collections::HashMap;
use std::fmt;
use uuid::Uuid;

/// What a sink can do, which decides which duplicates it may show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// De-duplicates by key (within a retention window).
    Idempotent,
    /// Answers lookups by key.
    Lookup,
    /// Neither; the destination's policy is `hold`.
    PlainHold,
    /// Neither; the destination's policy is `retry` (duplicates allowed, if flagged).
    PlainRetry,
}

/// One request as the sink recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkRecord {
    /// The idempotency key (the notification id), if the request had one.
    pub key: Option<String>,
    /// Hex SHA-256 of the body.
    pub payload_sha256: Option<String>,
    /// `applied`, `wire_duplicate`, `failed`, `scripted`, ...
    pub outcome: String,
}

/// A sink and its records.
#[derive(Debug, Clone)]
pub struct Sink {
    /// The destination name it serves.
    pub destination: String,
    /// What it can do.
    pub capability: Capability,
    /// Everything it recorded.
    pub records: Vec<SinkRecord>,
}

/// One message as an SMTP inbox recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxMessage {
    /// Its `Message-ID`, without angle brackets.
    pub message_id: Option<String>,
    /// Its `X-Alert-Id` header.
    pub alert_id: Option<String>,
    /// Hex SHA-256 of the message data as received.
    pub sha256: String,
}

/// An SMTP inbox serving one email destination, and what it holds.
#[derive(Debug, Clone)]
pub struct Inbox {
    /// The email destination's name.
    pub destination: String,
    /// Its policy for uncertain sends: [`Capability::PlainHold`] or
    /// [`Capability::PlainRetry`] (SMTP offers neither a lookup nor a key window).
    pub capability: Capability,
    /// Every message it received for that destination.
    pub messages: Vec<InboxMessage>,
}

/// A broken invariant, with what is needed to understand it.
#[derive(Debug, Clone)]
pub struct Offence {
    /// Which count it adds to.
    pub kind: &'static str,
    /// The alert, when there is one.
    pub alert_id: Option<Uuid>,
    /// What is wrong.
    pub detail: String,
}

/// The counts of one run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The run's seed, printed with the table.
    pub seed: u64,
    /// Committed alerts.
    pub alerts: usize,
    /// Not accepted, failed, held or superseded.
    pub lost: usize,
    /// Alerts beyond the first per identity and revision.
    pub logical_duplicates: usize,
    /// Alerts whose queue row, outcome or approval evidence is inconsistent.
    pub partial_commits: usize,
    /// Keys seen by a sink that no committed alert has.
    pub unexpected: usize,
    /// Keys seen with a payload other than the committed one.
    pub mutated_retries: usize,
    /// Keys applied more than once, per sink.
    pub effective_duplicates: Vec<(String, usize)>,
    /// Keys absorbed as duplicates, per sink.
    pub wire_duplicates: Vec<(String, usize)>,
    /// Alerts still uncertain.
    pub unresolved_uncertain: usize,
    /// Alerts recorded as accepted that their sink never applied.
    pub phantom_acceptances: usize,
    /// Messages in each SMTP inbox, to show the email destinations were exercised.
    pub inbox_messages: Vec<(String, usize)>,
    /// Everything that breaks the rules above.
    pub offences: Vec<Offence>,
}

impl Report {
    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.offences.is_empty()
    }
}

/// Judges a run of webhook destinations: reads the database, compares with the sinks'
/// records.
pub async fn check(
    pool: &PgPool,
    seed: u64,
    sinks: &[Sink],
) -> Result<Report, outbox_store::StoreError> {
    check_with_inboxes(pool, seed, sinks, &[]).await
}

/// Judges a run of webhook and email destinations: reads the database, compares with the
/// sinks' records and the inboxes' messages.
pub async fn check_with_inboxes(
    pool: &PgPool,
    seed: u64,
    sinks: &[Sink],
    inboxes: &[Inbox],
) -> Result<Report, outbox_store::StoreError> {
    let alerts = outbox_store::committed::committed_alerts(pool).await?;
    let duplicated = outbox_store::committed::duplicated_identities(pool).await?;
    let mut report = Report {
        seed,
        alerts: alerts.len(),
        ..Report::default()
    };
    let by_id: HashMap<String, &outbox_store::committed::CommittedAlert> =
        alerts.iter().map(|a| (a.id.to_string(), a)).collect();

    for alert in &alerts {
        let offence = |kind, detail: String| Offence {
            kind,
            alert_id: Some(alert.id),
            detail,
        };
        match alert.state {
            Some(
                AlertState::Accepted
                | AlertState::Failed
                | AlertState::Held
                | AlertState::Superseded,
            ) => {}
            Some(AlertState::Uncertain) => {
                report.unresolved_uncertain += 1;
                report.lost += 1;
                report.offences.push(offence(
                    "unresolved uncertain",
                    "still uncertain after the drain".into(),
                ));
            }
            other => {
                report.lost += 1;
                report.offences.push(offence(
                    "lost",
                    format!("ended {}", other.map_or("in no state", AlertState::as_str)),
                ));
            }
        }
        if alert.queued == alert.settled || (alert.events == 0 && !alert.pruned) {
            report.partial_commits += 1;
            report.offences.push(offence(
                "partial commit",
                format!(
                    "queue row: {}, outcome: {}, evidence lines: {}",
                    alert.queued, alert.settled, alert.events
                ),
            ));
        }
    }
    for (subject, occurrence, count) in &duplicated {
        report.logical_duplicates += usize::try_from(*count - 1).unwrap_or(0);
        report.offences.push(Offence {
            kind: "logical duplicate",
            alert_id: None,
            detail: format!("{count} alerts for {subject} / {occurrence}"),
        });
    }

    let mut applied_anywhere: std::collections::HashSet<&str> = Default::default();
    for sink in sinks {
        let mut applied: HashMap<&str, usize> = HashMap::new();
        let mut wire = 0;
        for record in &sink.records {
            let Some(key) = record.key.as_deref() else {
                continue;
            };
            let Some(alert) = by_id.get(key) else {
                report.unexpected += 1;
                report.offences.push(Offence {
                    kind: "unexpected",
                    alert_id: None,
                    detail: format!(
                        "sink `{}` saw key {key}, which never committed",
                        sink.destination
                    ),
                });
                continue;
            };
            if record
                .payload_sha256
                .as_deref()
                .is_some_and(|h| h != alert.payload_sha256)
            {
                report.mutated_retries += 1;
                report.offences.push(Offence {
                    kind: "mutated retry",
                    alert_id: Some(alert.id),
                    detail: format!(
                        "sink `{}` got payload {} for this key; committed {}",
                        sink.destination,
                        record.payload_sha256.as_deref().unwrap_or("?"),
                        alert.payload_sha256
                    ),
                });
            }
            match record.outcome.as_str() {
                "applied" => *applied.entry(key).or_default() += 1,
                "wire_duplicate" => {
                    wire += 1;
                    if matches!(
                        sink.capability,
                        Capability::PlainHold | Capability::PlainRetry
                    ) {
                        report.offences.push(Offence {
                            kind: "wire duplicate",
                            alert_id: Some(alert.id),
                            detail: format!(
                                "resent to `{}`, which neither de-duplicates nor answers lookups",
                                sink.destination
                            ),
                        });
                    }
                }
                _ => {}
            }
        }
        applied_anywhere.extend(applied.keys().copied());
        let mut effective = 0;
        for (key, times) in applied {
            if times < 2 {
                continue;
            }
            effective += times - 1;
            let alert = by_id[key];
            let allowed = sink.capability == Capability::PlainRetry && alert.possible_duplicate;
            if !allowed {
                report.offences.push(Offence {
                    kind: "effective duplicate",
                    alert_id: Some(alert.id),
                    detail: format!(
                        "applied {times} times by `{}`{}",
                        sink.destination,
                        if sink.capability == Capability::PlainRetry {
                            " without the possible_duplicate flag"
                        } else {
                            ""
                        }
                    ),
                });
            }
        }
        report
            .effective_duplicates
            .push((sink.destination.clone(), effective));
        report
            .wire_duplicates
            .push((sink.destination.clone(), wire));
    }
    if !inboxes.is_empty() {
        let stored = outbox_store::committed::stored_messages(pool).await?;
        check_inboxes(&mut report, &by_id, &stored, inboxes);
    }
    for alert in &alerts {
        let judged = sinks.iter().any(|s| s.destination == alert.destination);
        if judged
            && alert.state == Some(AlertState::Accepted)
            && !applied_anywhere.contains(alert.id.to_string().as_str())
        {
            report.phantom_acceptances += 1;
            report.offences.push(Offence {
                kind: "phantom acceptance",
                alert_id: Some(alert.id),
                detail: format!(
                    "recorded as accepted, but sink `{}` never applied it",
                    alert.destination
                ),
            });
        }
    }
    Ok(report)
}

/// Counts what the inboxes show against the alerts (`by_id`) and their stored messages.
fn check_inboxes(
    report: &mut Report,
    by_id: &HashMap<String, &outbox_store::committed::CommittedAlert>,
    stored: &[outbox_store::committed::StoredMessage],
    inboxes: &[Inbox],
) {
    let stored: HashMap<String, &outbox_store::committed::StoredMessage> =
        stored.iter().map(|m| (m.alert_id.to_string(), m)).collect();
    for inbox in inboxes {
        let mut received: HashMap<&str, usize> = HashMap::new();
        for message in &inbox.messages {
            let key = message.alert_id.as_deref().unwrap_or("");
            let (Some(alert), Some(expected)) = (by_id.get(key), stored.get(key)) else {
                report.unexpected += 1;
                report.offences.push(Offence {
                    kind: "unexpected",
                    alert_id: None,
                    detail: format!(
                        "inbox `{}` got message {} (alert {}), which no committed email alert sent",
                        inbox.destination,
                        message
                            .message_id
                            .as_deref()
                            .unwrap_or("without a Message-ID"),
                        message.alert_id.as_deref().unwrap_or("?")
                    ),
                });
                continue;
            };
            if message.message_id.as_deref() != Some(expected.message_id.as_str())
                || message.sha256 != expected.wire_sha256
            {
                report.mutated_retries += 1;
                report.offences.push(Offence {
                    kind: "mutated retry",
                    alert_id: Some(alert.id),
                    detail: format!(
                        "inbox `{}` got message {} sha256:{}; stored {} sha256:{}",
                        inbox.destination,
                        message.message_id.as_deref().unwrap_or("?"),
                        message.sha256,
                        expected.message_id,
                        expected.wire_sha256
                    ),
                });
            }
            *received.entry(key).or_default() += 1;
        }
        let mut effective = 0;
        for (key, times) in &received {
            if *times < 2 {
                continue;
            }
            effective += times - 1;
            let alert = by_id[*key];
            let allowed = inbox.capability == Capability::PlainRetry && alert.possible_duplicate;
            if !allowed {
                report.offences.push(Offence {
                    kind: "effective duplicate",
                    alert_id: Some(alert.id),
                    detail: format!(
                        "Message-ID {} is in inbox `{}` {times} times{}",
                        stored[*key].message_id,
                        inbox.destination,
                        if inbox.capability == Capability::PlainRetry {
                            " without the possible_duplicate flag"
                        } else {
                            ""
                        }
                    ),
                });
            }
        }
        for alert in by_id
            .values()
            .filter(|a| a.destination == inbox.destination)
        {
            let id = alert.id.to_string();
            if alert.state == Some(AlertState::Accepted) && !received.contains_key(id.as_str()) {
                report.phantom_acceptances += 1;
                report.offences.push(Offence {
                    kind: "phantom acceptance",
                    alert_id: Some(alert.id),
                    detail: format!(
                        "recorded as accepted, but its message is not in inbox `{}`",
                        inbox.destination
                    ),
                });
            }
        }
        report
            .effective_duplicates
            .push((inbox.destination.clone(), effective));
        report.wire_duplicates.push((inbox.destination.clone(), 0));
        report
            .inbox_messages
            .push((inbox.destination.clone(), inbox.messages.len()));
    }
}

/// Prints each offence with the alert's evidence trail and the sinks' records for it.
pub async fn explain(
    pool: &PgPool,
    report: &Report,
    sinks: &[Sink],
) -> Result<String, outbox_store::StoreError> {
    let mut out = String::new();
    for offence in &report.offences {
        out.push_str(&format!("{}: {}\n", offence.kind, offence.detail));
        if let Some(id) = offence.alert_id {
            out.push_str(&format!("  alert {id}\n"));
            for line in outbox_store::committed::evidence_lines(pool, id).await? {
                out.push_str(&format!("    {line}\n"));
            }
            for sink in sinks {
                for record in sink
                    .records
                    .iter()
                    .filter(|r| r.key.as_deref() == Some(&id.to_string()))
                {
                    out.push_str(&format!(
                        "    sink `{}`: {} (payload {})\n",
                        sink.destination,
                        record.outcome,
                        record.payload_sha256.as_deref().unwrap_or("?")
                    ));
                }
            }
        }
    }
    Ok(out)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {}: {} committed alerts", self.seed, self.alerts)?;
        let rows: [(&str, usize); 7] = [
            ("lost", self.lost),
            ("logical duplicates", self.logical_duplicates),
            ("partial commits", self.partial_commits),
            ("unexpected", self.unexpected),
            ("mutated retries", self.mutated_retries),
            ("unresolved uncertain", self.unresolved_uncertain),
            ("phantom acceptances", self.phantom_acceptances),
        ];
        for (name, n) in rows {
            writeln!(f, "  {name:<36} {n}")?;
        }
        for ((sink, effective), (_, wire)) in
            self.effective_duplicates.iter().zip(&self.wire_duplicates)
        {
            writeln!(
                f,
                "  {:<36} {effective}",
                format!("effective duplicates at {sink}")
            )?;
            writeln!(f, "  {:<36} {wire}", format!("wire duplicates at {sink}"))?;
        }
        for (inbox, messages) in &self.inbox_messages {
            writeln!(
                f,
                "  {:<36} {messages}",
                format!("messages in inbox {inbox}")
            )?;
        }
        writeln!(
            f,
            "  {:<36} {}",
            "verdict",
            if self.passed() { "pass" } else { "FAIL" }
        )
    }
}
