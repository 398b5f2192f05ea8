//! What a message received over SMTP gets: its sender and recipients are refused only
//! by a scripted reply; once its data is in, a scripted refusal or the fail rate, else it
//! is recorded in the inbox (never de-duplicated) and may have its reply dropped.

use std::time::Duration;

use super::{draw, now_rfc3339, sha256_hex, Sink};
use crate::mail;
use crate::records::MailRecord;
use crate::smtp_reply::SmtpReply;

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

impl Sink {
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
            sha256: sha256_hex(mail::without_leading_trace_fields(data)),
            body_sha256: sha256_hex(&data[headers.body_offset..]),
            authenticated_as: envelope.authenticated_as,
            tls: envelope.tls.map(str::to_owned),
            dropped: drop,
            eml_file,
            trace_parent: headers.trace_parent,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SinkArgs;
    use crate::records::SmtpStats;
    use clap::Parser;

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
}
