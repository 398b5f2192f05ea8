//! Email alerts as sent: what the dispatcher needs to render an email alert's message (or
//! an email API's request body) once, and its exact bytes, written before its first send
//! and read by every attempt.

use chrono::{DateTime, Utc};
use outbox_core::{DestinationKind, Locale, SmtpRelay, SmtpTls};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::StoreError;

/// What rendering and sending one email alert needs, read when it is sent.
#[derive(Clone, sqlx::FromRow)]
pub struct EmailJob {
    /// The alert (its id makes the Message-ID).
    pub alert_id: Uuid,
    /// The payload's exact text.
    pub payload: String,
    /// The alert's occurrence (part of choosing its template kind).
    pub occurrence: String,
    /// 0 for the original alert, then 1, 2, ... for each correction.
    pub revision: i32,
    /// Earlier revisions of the same alert, oldest first (what a correction threads under).
    pub earlier_revisions: Vec<Uuid>,
    /// The relay's host as stored (a name, or an address; [`EmailJob::relay`] reads it).
    pub smtp_host: String,
    /// The relay's port.
    #[sqlx(try_from = "i32")]
    pub smtp_port: u16,
    /// How the connection to the relay is secured.
    pub smtp_tls: SmtpTls,
    /// The CA the relay's certificate must chain to, when not the public roots.
    pub smtp_ca_pem: Option<String>,
    /// SMTP user name, if any.
    pub smtp_username: Option<String>,
    /// SMTP password as stored (sealed or plain), if any.
    pub smtp_password: Option<String>,
    /// Sender address.
    pub mail_from: String,
    /// Recipients.
    pub mail_to: Vec<String>,
    /// The destination's locale, if set.
    pub locale: Option<Locale>,
    /// The tenant's locale, used when the destination has none.
    pub tenant_locale: Option<Locale>,
    /// The tenant's name (whose templates render it).
    pub tenant_name: String,
}

impl std::fmt::Debug for EmailJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailJob")
            .field("alert_id", &self.alert_id)
            .field("revision", &self.revision)
            .field("smtp_host", &self.smtp_host)
            .field("smtp_port", &self.smtp_port)
            .field("smtp_tls", &self.smtp_tls)
            .field("mail_from", &self.mail_from)
            .field("mail_to", &self.mail_to)
            .finish_non_exhaustive()
    }
}

impl EmailJob {
    /// The relay, or why the stored host is none (written by other means).
    pub fn relay(&self) -> Result<SmtpRelay, String> {
        SmtpRelay::new(&self.smtp_host, self.smtp_port).map_err(|err| format!("the relay {err}"))
    }
}

/// The email settings and alert data of `alert_id`, if its destination is an email one.
pub async fn email_job(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<Option<EmailJob>, StoreError> {
    Ok(sqlx::query_as::<_, EmailJob>(
        "SELECT a.id AS alert_id, a.payload, a.occurrence, a.revision, \
                ARRAY(SELECT e.id FROM alerts e \
                      WHERE e.tenant_id = a.tenant_id AND e.subject = a.subject \
                        AND e.occurrence = a.occurrence AND e.destination_id = a.destination_id \
                        AND e.revision < a.revision \
                      ORDER BY e.revision) AS earlier_revisions, \
                d.smtp_host, d.smtp_port, d.smtp_tls, d.smtp_ca_pem, d.smtp_username, d.smtp_password, d.mail_from, d.mail_to, d.locale, \
                t.locale AS tenant_locale, t.name AS tenant_name \
         FROM alerts a JOIN destinations d ON d.id = a.destination_id \
         JOIN tenants t ON t.id = a.tenant_id \
         WHERE a.id = $1 AND d.kind = $2",
    )
    .bind(alert_id)
    .bind(DestinationKind::Email)
    .fetch_optional(db)
    .await?)
}

/// What rendering one alert into an HTTP email API's request body needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct BodyJob {
    /// The alert.
    pub alert_id: Uuid,
    /// The payload's exact text.
    pub payload: String,
    /// The alert's occurrence (part of choosing its template kind).
    pub occurrence: String,
    /// 0 for the original alert, then 1, 2, ... for each correction.
    pub revision: i32,
    /// `email-api-resend`, or `file`.
    pub body_template: String,
    /// The operator's template text, for `file`.
    pub body_template_text: Option<String>,
    /// The sender the API is asked to mail from.
    pub mail_from: String,
    /// The recipients.
    pub mail_to: Vec<String>,
    /// The destination's locale, if set.
    pub locale: Option<Locale>,
    /// The tenant's locale, used when the destination has none.
    pub tenant_locale: Option<Locale>,
}

/// The body template settings and alert data of `alert_id`, if its destination has a
/// body template.
pub async fn body_job(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<Option<BodyJob>, StoreError> {
    Ok(sqlx::query_as::<_, BodyJob>(
        "SELECT a.id AS alert_id, a.payload, a.occurrence, a.revision, \
                d.body_template, d.body_template_text, d.mail_from, d.mail_to, d.locale, \
                t.locale AS tenant_locale \
         FROM alerts a JOIN destinations d ON d.id = a.destination_id \
         JOIN tenants t ON t.id = a.tenant_id \
         WHERE a.id = $1 AND d.body_template IS NOT NULL",
    )
    .bind(alert_id)
    .fetch_optional(db)
    .await?)
}

/// An email alert's message (or an email API's request body) as rendered once.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RenderedMessage {
    /// Its `Message-ID` (with the angle brackets); for a request body, the Message-ID the
    /// alert would have as email.
    pub message_id: String,
    /// The exact bytes sent (headers and body, CRLF line ends; or the request body).
    pub bytes: Vec<u8>,
    /// SHA-256 of `bytes`, lowercase hex.
    pub sha256: String,
    /// The version of the templates it was rendered with.
    pub template_version: String,
    /// When it was rendered.
    pub rendered_at: DateTime<Utc>,
}

/// The stored message of `alert_id`, if it was rendered.
pub async fn find(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
) -> Result<Option<RenderedMessage>, StoreError> {
    Ok(sqlx::query_as::<_, RenderedMessage>(
        "SELECT message_id, bytes, sha256, template_version, rendered_at \
         FROM rendered_messages WHERE alert_id = $1",
    )
    .bind(alert_id)
    .fetch_optional(db)
    .await?)
}

/// Stores `alert_id`'s message unless one is stored already, and returns the stored one:
/// the first rendering wins for good, so every attempt sends the same bytes.
pub async fn store_once(
    db: impl PgExecutor<'_>,
    alert_id: Uuid,
    message_id: &str,
    bytes: &[u8],
    sha256: &str,
    template_version: &str,
) -> Result<RenderedMessage, StoreError> {
    Ok(sqlx::query_as::<_, RenderedMessage>(
        "WITH inserted AS ( \
             INSERT INTO rendered_messages (alert_id, message_id, bytes, sha256, template_version) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (alert_id) DO NOTHING \
             RETURNING message_id, bytes, sha256, template_version, rendered_at \
         ) \
         SELECT * FROM inserted \
         UNION ALL \
         SELECT message_id, bytes, sha256, template_version, rendered_at \
         FROM rendered_messages WHERE alert_id = $1 AND NOT EXISTS (SELECT 1 FROM inserted)",
    )
    .bind(alert_id)
    .bind(message_id)
    .bind(bytes)
    .bind(sha256)
    .bind(template_version)
    .fetch_one(db)
    .await?)
}
