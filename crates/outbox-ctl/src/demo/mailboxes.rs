//! The demo's two mailboxes, each an email destination: who reads it, in which language,
//! and the sender their mail comes from.

use outbox_core::Locale;

/// The sender of the demo's email; its domain names every Message-ID.
pub(super) const MAIL_FROM: &str = "alerts@demo.example";

/// An email destination of the demo and its reader.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mailbox {
    /// The destination's name.
    pub(super) destination: &'static str,
    /// Its one recipient.
    pub(super) address: &'static str,
    /// The language of its messages.
    pub(super) locale: Locale,
    /// Who reads it, in words.
    pub(super) reader: &'static str,
}

/// The CFO's (whose mail is the renewals, and whose first email is held) and the
/// operations team's (the news; disabled while the monitors decide, so no renewals).
pub(super) const MAILBOXES: [Mailbox; 2] = [
    Mailbox {
        destination: "cfo-mail",
        address: "cfo@demo.example",
        locale: Locale::Es,
        reader: "the CFO, renewal alerts in Spanish",
    },
    Mailbox {
        destination: "ops-mail",
        address: "ops-team@demo.example",
        locale: Locale::En,
        reader: "the operations team, news alerts in English",
    },
];

/// The inbox's messages to `mailbox`'s recipient.
pub(super) fn received_by<'a>(
    inbox: &'a [serde_json::Value],
    mailbox: &Mailbox,
) -> impl Iterator<Item = &'a serde_json::Value> {
    let to = mailbox.address;
    inbox.iter().filter(move |m| {
        m["rcpt_to"]
            .as_array()
            .is_some_and(|r| r.iter().any(|t| t == to))
    })
}
