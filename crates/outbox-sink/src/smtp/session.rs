//! One SMTP session: the commands a client sends, from the greeting to `QUIT`, each
//! answered in the order RFC 5321 asks (greeting, then AUTH when configured, then a
//! transaction: `MAIL FROM`, `RCPT TO`, `DATA`), with the sink deciding what each
//! sender, recipient and message gets.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

use super::auth;
use super::channel::{Channel, Data};
use super::end::End;
use super::settings::SmtpConfig;
use crate::records::MailRecord;
use crate::state::inbox::{Envelope, MailAction};
use crate::state::Sink;

/// Most recipients of one message (RFC 5321 asks servers to accept at least 100).
const MAX_RECIPIENTS: usize = 100;

/// The name the server gives itself in its greeting and EHLO reply.
const SERVER_NAME: &str = "sink";

/// A mail transaction in progress: from `MAIL FROM` to the end of `DATA` or `RSET`.
#[derive(Debug)]
struct Transaction {
    mail_from: String,
    rcpt_to: Vec<String>,
}

pub(super) struct Session {
    channel: Channel,
    /// `starttls` or `tls` once the session is encrypted.
    tls: Option<&'static str>,
    sink: Arc<Sink>,
    config: Arc<SmtpConfig>,
    greeted: bool,
    authenticated_as: Option<String>,
    transaction: Option<Transaction>,
}

impl Session {
    /// A session on `channel`, encrypted already when `tls` says how.
    pub(super) fn new(
        channel: Channel,
        tls: Option<&'static str>,
        sink: Arc<Sink>,
        config: Arc<SmtpConfig>,
    ) -> Self {
        Session {
            channel,
            tls,
            sink,
            config,
            greeted: false,
            authenticated_as: None,
            transaction: None,
        }
    }

    /// Answers with one reply line.
    async fn reply(&mut self, line: &str) -> Result<(), End> {
        self.channel.reply(line).await
    }

    /// A reply to a command the client got wrong (see [`Channel::bad`]).
    async fn bad(&mut self, reply: &str) -> Result<(), End> {
        self.channel.bad(reply).await
    }

    /// Greets the client and answers its commands until the session ends.
    pub(super) async fn run(&mut self) -> End {
        let greeting = format!("220 {SERVER_NAME} ESMTP ready");
        if let Err(end) = self.reply(&greeting).await {
            return end;
        }
        loop {
            if let Err(end) = self.next_command().await {
                return end;
            }
        }
    }

    /// Reads one command and answers it.
    async fn next_command(&mut self) -> Result<(), End> {
        let line = self.channel.read_line().await?;
        let (verb, args) = match line.split_once(' ') {
            Some((verb, args)) => (verb.to_ascii_uppercase(), args.trim()),
            None => (line.to_ascii_uppercase(), ""),
        };
        match verb.as_str() {
            "EHLO" | "HELO" if args.is_empty() => self.bad("501 5.5.4 a domain is required").await,
            "EHLO" => self.ehlo(args).await,
            "HELO" => {
                self.greeted = true;
                self.transaction = None;
                self.reply(&format!("250 {SERVER_NAME}")).await
            }
            "MAIL" => self.mail(args).await,
            "RCPT" => self.recipient(args).await,
            "DATA" => self.data().await,
            "RSET" => {
                self.transaction = None;
                self.reply("250 2.0.0 Ok").await
            }
            "NOOP" => self.reply("250 2.0.0 Ok").await,
            "VRFY" => self.reply("252 2.5.0 cannot verify, send some mail").await,
            "QUIT" => {
                self.reply("221 2.0.0 Bye").await?;
                Err(End::Quit)
            }
            "AUTH" => self.auth(args).await,
            "STARTTLS" => self.starttls(args).await,
            _ => self.bad("500 5.5.2 command not recognized").await,
        }
    }

    /// `EHLO`: the greeting, with the extensions offered now.
    async fn ehlo(&mut self, domain: &str) -> Result<(), End> {
        self.greeted = true;
        self.transaction = None;
        let mut lines = vec![
            format!("{SERVER_NAME} greets {domain}"),
            format!("SIZE {}", self.config.max_message_bytes),
            "8BITMIME".to_owned(),
            "ENHANCEDSTATUSCODES".to_owned(),
            "SMTPUTF8".to_owned(),
        ];
        if self.starttls_offer().is_some() {
            lines.push("STARTTLS".to_owned());
        }
        if self.config.credentials.is_some() {
            lines.push("AUTH PLAIN LOGIN".to_owned());
        }
        self.channel.reply_lines(250, &lines).await
    }

    async fn mail(&mut self, args: &str) -> Result<(), End> {
        if !self.greeted {
            return self.reply("503 5.5.1 send EHLO or HELO first").await;
        }
        if self.config.credentials.is_some() && self.authenticated_as.is_none() {
            return self.reply("530 5.7.0 authentication required").await;
        }
        if self.transaction.is_some() {
            return self.reply("503 5.5.1 a transaction is already open").await;
        }
        let Some((address, params)) = path_argument(args, "FROM:") else {
            return self.bad("501 5.5.4 expected MAIL FROM:<address>").await;
        };
        let declared_size = params.split_ascii_whitespace().find_map(|param| {
            let (name, value) = param.split_once('=')?;
            name.eq_ignore_ascii_case("SIZE")
                .then(|| value.parse::<u64>().ok())
                .flatten()
        });
        if declared_size.is_some_and(|size| size > self.config.max_message_bytes as u64) {
            return self
                .reply("552 5.3.4 message size exceeds the fixed limit")
                .await;
        }
        if let Some(refusal) = self.sink.decide_sender() {
            tracing::info!(sender = %address, reply = %refusal.line(), "SMTP sender refused");
            return self.reply(&refusal.line()).await;
        }
        self.transaction = Some(Transaction {
            mail_from: address,
            rcpt_to: Vec::new(),
        });
        self.channel.between_messages = false;
        self.reply("250 2.1.0 Ok").await
    }

    async fn recipient(&mut self, args: &str) -> Result<(), End> {
        let Some(recipients) = self.transaction.as_ref().map(|t| t.rcpt_to.len()) else {
            return self.reply("503 5.5.1 send MAIL FROM first").await;
        };
        let Some((address, _)) = path_argument(args, "TO:").filter(|(a, _)| !a.is_empty()) else {
            return self.bad("501 5.1.3 expected RCPT TO:<address>").await;
        };
        if recipients >= MAX_RECIPIENTS {
            return self.reply("452 4.5.3 too many recipients").await;
        }
        if let Some(refusal) = self.sink.decide_recipient() {
            tracing::info!(recipient = %address, reply = %refusal.line(), "SMTP recipient refused");
            return self.reply(&refusal.line()).await;
        }
        if let Some(transaction) = &mut self.transaction {
            transaction.rcpt_to.push(address);
        }
        self.reply("250 2.1.5 Ok").await
    }

    /// `DATA`: the message read and handed to the sink, which refuses or accepts it.
    async fn data(&mut self) -> Result<(), End> {
        match &self.transaction {
            None => return self.reply("503 5.5.1 send MAIL FROM first").await,
            Some(t) if t.rcpt_to.is_empty() => {
                return self.reply("554 5.5.1 no valid recipients").await
            }
            Some(_) => {}
        }
        self.reply("354 End data with <CR><LF>.<CR><LF>").await?;
        let data = self.channel.read_data().await?;
        // Whatever happens next, the transaction is over.
        let Some(transaction) = self.transaction.take() else {
            return Ok(());
        };
        let data = match data {
            Data::Complete(data) => data,
            Data::TooLarge => {
                self.sink.record_mail_too_large();
                tracing::info!(
                    limit = self.config.max_message_bytes,
                    "SMTP message too large"
                );
                let refusal = format!(
                    "552 5.3.4 the message exceeds {} bytes",
                    self.config.max_message_bytes
                );
                return self.reply(&refusal).await;
            }
        };
        let envelope = Envelope {
            mail_from: transaction.mail_from,
            rcpt_to: transaction.rcpt_to,
            authenticated_as: self.authenticated_as.clone(),
            tls: self.tls,
        };
        match self.sink.decide_mail(envelope, &data) {
            MailAction::Refuse(refusal) => {
                tracing::info!(reply = %refusal.line(), "SMTP message refused");
                self.reply(&refusal.line()).await
            }
            MailAction::Accept {
                record,
                delay,
                drop,
            } => {
                write_eml(&self.config, &self.sink, &record, data).await;
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                tracing::info!(
                    queue_id = record.queue_id,
                    message_id = record.message_id,
                    recipients = record.rcpt_to.len(),
                    size = record.size,
                    dropped = drop,
                    "SMTP message accepted"
                );
                if drop {
                    return Err(End::ReplyDropped);
                }
                self.channel.between_messages = true;
                self.reply(&format!("250 2.0.0 Ok: queued as {}", record.queue_id))
                    .await
            }
        }
    }

    /// `AUTH PLAIN [initial-response]` or `AUTH LOGIN [initial-response]`, when offered
    /// and not yet done, outside a transaction.
    async fn auth(&mut self, args: &str) -> Result<(), End> {
        let Some(credentials) = self.config.credentials.clone() else {
            return self.bad("502 5.5.1 AUTH is not offered").await;
        };
        if !self.greeted {
            return self.reply("503 5.5.1 send EHLO first").await;
        }
        if self.authenticated_as.is_some() {
            return self.reply("503 5.5.1 already authenticated").await;
        }
        if self.transaction.is_some() {
            return self.reply("503 5.5.1 not during a transaction").await;
        }
        if let Some(user) = auth::authenticate(&mut self.channel, &credentials, args).await? {
            self.authenticated_as = Some(user);
        }
        Ok(())
    }

    /// The certificate to offer over `STARTTLS`, if it is offered on this session now: a
    /// certificate is configured, the session is not encrypted yet, and the offer is not
    /// hidden by a fault.
    fn starttls_offer(&self) -> Option<TlsAcceptor> {
        if self.tls.is_some() || self.sink.starttls_hidden() {
            return None;
        }
        self.config.tls.clone().map(TlsAcceptor::from)
    }

    /// `STARTTLS`: the `220`, then the handshake; the session starts again over TLS.
    async fn starttls(&mut self, args: &str) -> Result<(), End> {
        let Some(acceptor) = self.starttls_offer() else {
            return self.bad("502 5.5.1 STARTTLS is not offered").await;
        };
        if !args.is_empty() {
            return self.bad("501 5.5.4 STARTTLS takes no parameters").await;
        }
        if self.transaction.is_some() {
            return self.reply("503 5.5.1 not during a transaction").await;
        }
        self.reply("220 2.0.0 ready to start TLS").await?;
        self.channel.start_tls(acceptor).await?;
        self.tls = Some("starttls");
        // RFC 3207: everything learnt before the handshake is forgotten.
        self.greeted = false;
        self.authenticated_as = None;
        self.transaction = None;
        self.channel.between_messages = false;
        Ok(())
    }
}

/// The address and the parameters of `FROM:<address> PARAMS` (or `TO:`), the keyword
/// matched without regard to case and blanks allowed after the colon. An address without
/// angle brackets is accepted too, as many servers do.
fn path_argument(args: &str, keyword: &str) -> Option<(String, String)> {
    let head = args.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    let rest = args[keyword.len()..].trim_start();
    let (address, params) = match rest.strip_prefix('<') {
        Some(inside) => {
            let end = inside.find('>')?;
            (&inside[..end], &inside[end + 1..])
        }
        None => rest.split_once(' ').unwrap_or((rest, "")),
    };
    if address.contains(char::is_whitespace) {
        return None;
    }
    Some((address.to_owned(), params.trim().to_owned()))
}

/// Writes an accepted message to its `.eml` file, when `--eml-dir` names a folder; a
/// file that cannot be written is logged and left out of the message's record.
async fn write_eml(config: &SmtpConfig, sink: &Sink, record: &MailRecord, data: Vec<u8>) {
    if let (Some(dir), Some(name)) = (&config.eml_dir, &record.eml_file) {
        let path = dir.join(name);
        if let Err(err) = write_file(path.clone(), data).await {
            tracing::error!(file = %path.display(), error = %err, "cannot write a .eml file");
            sink.eml_not_written(&record.queue_id);
        }
    }
}

/// Writes a file off the runtime's threads.
async fn write_file(path: PathBuf, contents: Vec<u8>) -> io::Result<()> {
    tokio::task::spawn_blocking(move || std::fs::write(path, contents))
        .await
        .map_err(io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_paths_and_parameters() {
        assert_eq!(
            path_argument("FROM:<a@x> SIZE=10 BODY=8BITMIME", "FROM:"),
            Some(("a@x".to_owned(), "SIZE=10 BODY=8BITMIME".to_owned()))
        );
        assert_eq!(
            path_argument("from: <>", "FROM:"),
            Some((String::new(), String::new()))
        );
        assert_eq!(
            path_argument("To:b@y", "TO:"),
            Some(("b@y".to_owned(), String::new()))
        );
        assert_eq!(path_argument("TO:<b@y", "TO:"), None);
        assert_eq!(path_argument("FROM:<a@x>", "TO:"), None);
        assert_eq!(path_argument("T", "TO:"), None);
    }
}
