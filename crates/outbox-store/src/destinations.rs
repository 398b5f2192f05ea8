//! Destinations: where a tenant's alerts are delivered, and what each one can do to help
//! settle an uncertain send (de-duplicate by key, answer a lookup by key).

use chrono::{DateTime, Utc};
use outbox_core::{DestinationKind, OnHeadFailed, OnUncertain, Ordering};
use sqlx::PgExecutor;
use std::time::Duration;
use uuid::Uuid;

use crate::StoreError;

/// A destination to create. The caller has validated URLs, names and secrets.
#[derive(Debug, Clone)]
pub struct NewDestination {
    /// Owning tenant.
    pub tenant_id: Uuid,
    /// Unique within the tenant; approvals name their destination by it.
    pub name: String,
    /// Where alerts are POSTed.
    pub url: String,
    /// Secrets as stored: `whsec_...`, or sealed (`enc:v1:...`, bound to the destination's
    /// id, so sealed ones need [`create_with_id`]). One signature per secret on every request.
    pub signing_secrets: Vec<String>,
    /// Header that carries the notification id.
    pub idempotency_header: String,
    /// How long the destination de-duplicates by that header, if it does.
    pub idempotency_retention: Option<Duration>,
    /// Lookup URL with a `{key}` placeholder, if the destination offers one.
    pub lookup_url_template: Option<String>,
    /// Policy for uncertain sends nothing else settles.
    pub on_uncertain: OnUncertain,
    /// Connect and total request timeout.
    pub timeout: Duration,
    /// Most requests in flight to this destination at once.
    pub max_in_flight: u32,
}

/// What an email destination adds to a [`NewDestination`], whose `url` is then the relay
/// as `smtp://host:port`. The caller has validated addresses and the relay host.
#[derive(Clone)]
pub struct EmailSettings {
    /// `none`, `starttls` or `tls`.
    pub smtp_tls: String,
    /// SMTP user name, if the relay wants AUTH.
    pub smtp_username: Option<String>,
    /// SMTP password as stored: sealed (`enc:v1:...`, bound to the destination's id) or
    /// plain when no key is configured.
    pub smtp_password: Option<String>,
    /// The sender address; its domain names every Message-ID.
    pub mail_from: String,
    /// Recipients of every alert.
    pub mail_to: Vec<String>,
    /// `en` or `es`; English when absent.
    pub locale: Option<String>,
    /// The CA (PEM certificates) the relay's certificate must chain to instead of the
    /// public roots, for a relay on a private PKI.
    pub smtp_ca_pem: Option<String>,
}

impl std::fmt::Debug for EmailSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailSettings")
            .field("smtp_tls", &self.smtp_tls)
            .field("smtp_username", &self.smtp_username)
            .field(
                "smtp_password",
                &self.smtp_password.as_ref().map(|_| "(set)"),
            )
            .field("mail_from", &self.mail_from)
            .field("mail_to", &self.mail_to)
            .field("locale", &self.locale)
            .field("smtp_ca_pem", &self.smtp_ca_pem.as_ref().map(|_| "(set)"))
            .finish()
    }
}

/// What a webhook destination that speaks to an HTTP email API adds to a
/// [`NewDestination`]: its body template, the sender and recipients it asks the API to
/// mail, and the API's key. The caller has checked the template and the addresses.
#[derive(Clone)]
pub struct EmailApiSettings {
    /// `email-api-resend`, or `file`.
    pub body_template: String,
    /// The operator's template text, for `file`.
    pub body_template_text: Option<String>,
    /// The sender.
    pub mail_from: String,
    /// The recipients.
    pub mail_to: Vec<String>,
    /// `en` or `es`, if set (else the tenant's, else English).
    pub locale: Option<String>,
    /// The API key as stored (sealed with the destination's id, or plain when no key is
    /// configured), sent as `Authorization: Bearer`.
    pub bearer_token: Option<String>,
}

impl std::fmt::Debug for EmailApiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailApiSettings")
            .field("body_template", &self.body_template)
            .field("mail_from", &self.mail_from)
            .field("mail_to", &self.mail_to)
            .field("locale", &self.locale)
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "(set)"))
            .finish_non_exhaustive()
    }
}

/// A destination as listed for operators. Secrets are never read back out; only their count.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct DestinationSummary {
    /// Its id.
    pub id: Uuid,
    /// Owning tenant's name.
    pub tenant: String,
    /// Its name.
    pub name: String,
    /// Webhook or email.
    #[sqlx(try_from = "String")]
    pub kind: DestinationKind,
    /// Where alerts are POSTed, or the SMTP relay (`smtp://host:port`).
    pub url: String,
    /// Recipients of an email destination (empty for a webhook).
    pub mail_to: Vec<String>,
    /// Sender of an email destination.
    pub mail_from: Option<String>,
    /// Locale of an email destination's messages, when set.
    pub locale: Option<String>,
    /// Whether an SMTP password is configured (it is never read back out).
    pub smtp_password_set: bool,
    /// A webhook's body template (`email-api-resend`, `file`), when it speaks to an HTTP
    /// email API.
    pub body_template: Option<String>,
    /// Whether an API key is configured (it is never read back out).
    pub bearer_token_set: bool,
    /// Header carrying the notification id.
    pub idempotency_header: String,
    /// De-duplication window in seconds, if any.
    pub idempotency_retention_secs: Option<i64>,
    /// Lookup URL template, if any.
    pub lookup_url_template: Option<String>,
    /// What to do with an uncertain send nothing else can settle.
    #[sqlx(try_from = "String")]
    pub on_uncertain: OnUncertain,
    /// Request timeout in milliseconds.
    pub timeout_ms: i32,
    /// Most of its alerts in `sending` at once, across every dispatcher (claims enforce
    /// it): the most alerts one crash can leave uncertain there.
    pub max_in_flight: i32,
    /// What that bound means, in a sentence for operators (filled by the caller, from
    /// `outbox_core::in_flight::crash_consequence`).
    #[sqlx(skip)]
    pub crash_bound: String,
    /// Number of signing secrets configured.
    pub signing_secret_count: i32,
    /// Secrets replaced by a rotation that still sign until `retiring_until`.
    pub retiring_secret_count: i32,
    /// End of the rotation overlap, while it runs.
    pub retiring_until: Option<DateTime<Utc>>,
    /// How many of the secrets (current and retiring) are sealed with a key.
    pub sealed_secret_count: i32,
    /// Whether alerts are being delivered to it.
    pub enabled: bool,
    /// How long every send may fail before it is disabled automatically, in seconds;
    /// `None`: never.
    pub disable_after_failing_secs: Option<i64>,
    /// Why it is disabled, when it is.
    pub disabled_reason: Option<String>,
    /// Whether it receives the alerts of one ordering key in approval order.
    #[sqlx(try_from = "String")]
    pub ordering: Ordering,
    /// What an ordered lane does past a head that failed for good.
    #[sqlx(try_from = "String")]
    pub on_head_failed: OnHeadFailed,
}

/// Creates a destination and returns its id.
pub async fn create(db: impl PgExecutor<'_>, new: &NewDestination) -> Result<Uuid, StoreError> {
    create_with_id(db, Uuid::now_v7(), new).await
}

/// A fresh destination id, for callers that seal secrets before [`create_with_id`].
pub fn new_id() -> Uuid {
    Uuid::now_v7()
}

/// Creates a destination under an id chosen by the caller (from [`new_id`]).
pub async fn create_with_id(
    db: impl PgExecutor<'_>,
    id: Uuid,
    new: &NewDestination,
) -> Result<Uuid, StoreError> {
    insert(db, &DestinationRow::webhook(id, new)).await
}

/// Creates an email destination under an id chosen by the caller (from [`new_id`]): `new`
/// with its `url` the relay (`smtp://host:port`) and no lookup or de-duplication window,
/// plus `email`. The password, if any, as stored (sealed with this id).
pub async fn create_email_with_id(
    db: impl PgExecutor<'_>,
    id: Uuid,
    new: &NewDestination,
    email: &EmailSettings,
) -> Result<Uuid, StoreError> {
    let row = DestinationRow {
        kind: DestinationKind::Email,
        // SMTP signs nothing, de-duplicates nothing and answers no lookup.
        signing_secrets: &[],
        idempotency_retention_secs: None,
        lookup_url_template: None,
        smtp: Some(email),
        mail_from: Some(&email.mail_from),
        mail_to: &email.mail_to,
        locale: email.locale.as_deref(),
        ..DestinationRow::webhook(id, new)
    };
    insert(db, &row).await
}

/// Creates a webhook destination that speaks to an HTTP email API, under an id chosen by
/// the caller (from [`new_id`]): `new` plus `api`. The API key, if any, as stored (sealed
/// with this id).
pub async fn create_email_api_with_id(
    db: impl PgExecutor<'_>,
    id: Uuid,
    new: &NewDestination,
    api: &EmailApiSettings,
) -> Result<Uuid, StoreError> {
    let row = DestinationRow {
        body: Some(api),
        mail_from: Some(&api.mail_from),
        mail_to: &api.mail_to,
        locale: api.locale.as_deref(),
        ..DestinationRow::webhook(id, new)
    };
    insert(db, &row).await
}

/// A destination's row as inserted: a [`NewDestination`] and what its kind adds. The
/// columns a kind does not have hold what the table's defaults would (empty, `NULL`), so
/// that every kind is created through the one insert, [`insert`].
struct DestinationRow<'a> {
    id: Uuid,
    new: &'a NewDestination,
    kind: DestinationKind,
    signing_secrets: &'a [String],
    idempotency_retention_secs: Option<f64>,
    lookup_url_template: Option<&'a str>,
    /// An email destination's relay settings.
    smtp: Option<&'a EmailSettings>,
    /// A webhook's body template and API key, when it speaks to an HTTP email API.
    body: Option<&'a EmailApiSettings>,
    /// Sender, recipients and locale: an email destination's, or an email API's.
    mail_from: Option<&'a str>,
    mail_to: &'a [String],
    locale: Option<&'a str>,
}

impl<'a> DestinationRow<'a> {
    /// A plain webhook: `new` alone.
    fn webhook(id: Uuid, new: &'a NewDestination) -> Self {
        DestinationRow {
            id,
            new,
            kind: DestinationKind::Webhook,
            signing_secrets: &new.signing_secrets,
            idempotency_retention_secs: new.idempotency_retention.map(|d| d.as_secs_f64()),
            lookup_url_template: new.lookup_url_template.as_deref(),
            smtp: None,
            body: None,
            mail_from: None,
            mail_to: &[],
            locale: None,
        }
    }
}

/// Inserts a destination's row and returns its id; a name the tenant already uses is
/// [`StoreError::AlreadyExists`].
async fn insert(db: impl PgExecutor<'_>, row: &DestinationRow<'_>) -> Result<Uuid, StoreError> {
    let new = row.new;
    let (smtp, body) = (row.smtp, row.body);
    sqlx::query(
        "INSERT INTO destinations (id, tenant_id, name, kind, url, signing_secrets, \
             idempotency_header, idempotency_retention, lookup_url_template, on_uncertain, \
             timeout_ms, max_in_flight, smtp_tls, smtp_username, smtp_password, smtp_ca_pem, \
             body_template, body_template_text, bearer_token, mail_from, mail_to, locale) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, make_interval(secs => $8), $9, $10, $11, $12, \
                 $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)",
    )
    .bind(row.id)
    .bind(new.tenant_id)
    .bind(&new.name)
    .bind(row.kind)
    .bind(&new.url)
    .bind(row.signing_secrets)
    .bind(&new.idempotency_header)
    .bind(row.idempotency_retention_secs)
    .bind(row.lookup_url_template)
    .bind(new.on_uncertain)
    .bind(i32::try_from(new.timeout.as_millis()).unwrap_or(i32::MAX))
    .bind(i32::try_from(new.max_in_flight).unwrap_or(i32::MAX))
    .bind(smtp.map(|e| &e.smtp_tls))
    .bind(smtp.and_then(|e| e.smtp_username.as_deref()))
    .bind(smtp.and_then(|e| e.smtp_password.as_deref()))
    .bind(smtp.and_then(|e| e.smtp_ca_pem.as_deref()))
    .bind(body.map(|b| &b.body_template))
    .bind(body.and_then(|b| b.body_template_text.as_deref()))
    .bind(body.and_then(|b| b.bearer_token.as_deref()))
    .bind(row.mail_from)
    .bind(row.mail_to)
    .bind(row.locale)
    .execute(db)
    .await
    .map_err(|err| name_taken(err, &new.name))?;
    Ok(row.id)
}

/// The id of the tenant's destination called `name`. Scoped by tenant: another tenant's
/// destination of the same name is invisible here.
pub async fn id_by_name(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    name: &str,
) -> Result<Uuid, StoreError> {
    sqlx::query_scalar::<_, Uuid>("SELECT id FROM destinations WHERE tenant_id = $1 AND name = $2")
        .bind(tenant_id)
        .bind(name)
        .fetch_optional(db)
        .await?
        .ok_or_else(|| StoreError::UnknownDestination(name.to_owned()))
}

/// Lists destinations, of one tenant or of all, by tenant then name.
pub async fn list(
    db: impl PgExecutor<'_>,
    tenant_id: Option<Uuid>,
) -> Result<Vec<DestinationSummary>, StoreError> {
    let rows = sqlx::query_as::<_, DestinationSummary>(
        "SELECT d.id, t.name AS tenant, d.name, d.kind, d.url, d.mail_to, d.mail_from, d.locale, \
                d.smtp_password IS NOT NULL AS smtp_password_set, d.body_template, \
                d.bearer_token IS NOT NULL AS bearer_token_set, d.idempotency_header, \
                extract(epoch FROM d.idempotency_retention)::int8 AS idempotency_retention_secs, \
                d.lookup_url_template, d.on_uncertain, d.timeout_ms, d.max_in_flight, \
                cardinality(d.signing_secrets) AS signing_secret_count, \
                CASE WHEN d.retiring_until > now() THEN cardinality(d.retiring_signing_secrets) \
                     ELSE 0 END AS retiring_secret_count, \
                CASE WHEN d.retiring_until > now() THEN d.retiring_until END AS retiring_until, \
                (SELECT count(*)::int4 FROM unnest(d.signing_secrets || d.retiring_signing_secrets) s \
                 WHERE s LIKE 'enc:%') AS sealed_secret_count, \
                d.enabled, \
                ceil(extract(epoch FROM d.disable_after_failing))::int8 AS disable_after_failing_secs, \
                d.disabled_reason, d.ordering, d.on_head_failed \
         FROM destinations d JOIN tenants t ON t.id = d.tenant_id \
         WHERE $1::uuid IS NULL OR d.tenant_id = $1 \
         ORDER BY t.name, d.name",
    )
    .bind(tenant_id)
    .fetch_all(db)
    .await?;
    Ok(rows)
}

/// A destination's secrets as stored, for re-sealing under another key.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredSecrets {
    /// The destination (the sealed secrets are bound to it).
    pub id: Uuid,
    /// Current secrets.
    pub signing_secrets: Vec<String>,
    /// Secrets a rotation replaced (signing until the overlap ends).
    pub retiring_signing_secrets: Vec<String>,
    /// An email destination's SMTP password, sealed like the signing secrets.
    pub smtp_password: Option<String>,
    /// An email API's key, sealed like the signing secrets.
    pub bearer_token: Option<String>,
}

/// Up to `limit` destinations with any secret, after `after` in id order (keyset paging,
/// so a long run needs no transaction and can be resumed).
pub async fn stored_secrets_page(
    db: impl PgExecutor<'_>,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<StoredSecrets>, StoreError> {
    Ok(sqlx::query_as::<_, StoredSecrets>(
        "SELECT id, signing_secrets, retiring_signing_secrets, smtp_password, bearer_token \
         FROM destinations \
         WHERE ($1::uuid IS NULL OR id > $1) \
           AND (cardinality(signing_secrets || retiring_signing_secrets) > 0 \
                OR smtp_password IS NOT NULL OR bearer_token IS NOT NULL) \
         ORDER BY id LIMIT $2",
    )
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await?)
}

/// Replaces a destination's stored secrets with `new`, only if they are still exactly
/// `old` (compare and set: a rotation that happened meanwhile is not overwritten).
/// Returns whether the row was updated.
pub async fn replace_stored_secrets(
    db: impl PgExecutor<'_>,
    old: &StoredSecrets,
    new: &StoredSecrets,
) -> Result<bool, StoreError> {
    let updated = sqlx::query(
        "UPDATE destinations SET signing_secrets = $4, retiring_signing_secrets = $5, \
             smtp_password = $7, bearer_token = $9 \
         WHERE id = $1 AND signing_secrets = $2 AND retiring_signing_secrets = $3 \
           AND smtp_password IS NOT DISTINCT FROM $6 AND bearer_token IS NOT DISTINCT FROM $8",
    )
    .bind(old.id)
    .bind(&old.signing_secrets)
    .bind(&old.retiring_signing_secrets)
    .bind(&new.signing_secrets)
    .bind(&new.retiring_signing_secrets)
    .bind(&old.smtp_password)
    .bind(&new.smtp_password)
    .bind(&old.bearer_token)
    .bind(&new.bearer_token)
    .execute(db)
    .await?
    .rows_affected();
    Ok(updated == 1)
}

/// What a secret rotation did.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct Rotation {
    /// Secrets that keep signing beside the new one during the overlap.
    pub retiring: i32,
    /// When they stop, if any keep signing.
    pub retiring_until: Option<DateTime<Utc>>,
}

/// Makes `new_secret` (as stored) the destination's only current secret. The secrets it
/// replaces keep signing beside it for `overlap` (none when zero); secrets a previous
/// rotation was still retiring are dropped now.
pub async fn rotate_secret(
    db: impl PgExecutor<'_>,
    id: Uuid,
    new_secret: &str,
    overlap: Duration,
) -> Result<Rotation, StoreError> {
    let overlap_secs = overlap.as_secs_f64();
    let rotation = sqlx::query_as::<_, Rotation>(
        "UPDATE destinations SET \
             retiring_signing_secrets = CASE WHEN $3 > 0 THEN signing_secrets ELSE '{}' END, \
             retiring_until = CASE WHEN $3 > 0 AND cardinality(signing_secrets) > 0 \
                                   THEN now() + make_interval(secs => $3) END, \
             signing_secrets = ARRAY[$2] \
         WHERE id = $1 \
         RETURNING cardinality(retiring_signing_secrets) AS retiring, retiring_until",
    )
    .bind(id)
    .bind(new_secret)
    .bind(overlap_secs)
    .fetch_optional(db)
    .await?
    .ok_or_else(|| StoreError::UnknownDestination(id.to_string()))?;
    Ok(rotation)
}

/// An insert's error, with a tenant's destination name already in use said as such.
fn name_taken(err: sqlx::Error, name: &str) -> StoreError {
    if StoreError::is_unique_violation(&err) {
        StoreError::AlreadyExists {
            what: "destination",
            name: name.to_owned(),
        }
    } else {
        StoreError::Database(err)
    }
}
