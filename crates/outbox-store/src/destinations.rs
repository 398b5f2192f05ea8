//! Destinations: where a tenant's alerts are delivered, and what each one can do to help
//! settle an uncertain send (de-duplicate by key, answer a lookup by key).
//!
//! A destination is created by one INSERT of a [`NewDestination`], whatever its kind: the
//! struct holds every setting a destination starts with, and its [`Delivery`] what its kind
//! adds (a webhook's URL, an HTTP email API's body template, an email destination's relay).

use chrono::{DateTime, Utc};
use outbox_core::{
    DestinationKind, Locale, OnHeadFailed, OnUncertain, Ordering, SmtpRelay, SmtpTls,
};
use sqlx::PgExecutor;
use std::time::Duration;
use uuid::Uuid;

use crate::lanes::OrderingSettings;
use crate::StoreError;

/// How long every send may fail before a destination is disabled automatically, unless it
/// is told otherwise (the column's default).
pub const DEFAULT_FAILING_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// A destination to create, with every setting it starts with. The caller has validated
/// URLs, names, addresses and secrets.
#[derive(Debug, Clone)]
pub struct NewDestination {
    /// Owning tenant.
    pub tenant_id: Uuid,
    /// Unique within the tenant; approvals name their destination by it.
    pub name: String,
    /// How alerts reach it, and what its kind adds.
    pub delivery: Delivery,
    /// A webhook's secrets as stored: `whsec_...`, or sealed (`enc:v1:...`, bound to the
    /// destination's id, so sealed ones need [`create_with_id`]). One signature per secret
    /// on every request. An email destination signs nothing: it is stored without them.
    pub signing_secrets: Vec<String>,
    /// Header that carries the notification id.
    pub idempotency_header: String,
    /// How long the destination de-duplicates by that header, if it does (a webhook's; an
    /// email destination is stored without one).
    pub idempotency_retention: Option<Duration>,
    /// Lookup URL with a `{key}` placeholder, if the destination offers one (a webhook's;
    /// an email destination is stored without one).
    pub lookup_url_template: Option<String>,
    /// Policy for uncertain sends nothing else settles.
    pub on_uncertain: OnUncertain,
    /// Connect and total request timeout.
    pub timeout: Duration,
    /// Most requests in flight to this destination at once.
    pub max_in_flight: u32,
    /// Whether it receives the alerts of one ordering key in approval order, and what a
    /// lane does past a head that failed for good.
    pub ordering: OrderingSettings,
    /// How long every send may fail before it is disabled automatically; `None`: never.
    pub disable_after_failing: Option<Duration>,
}

impl NewDestination {
    /// A webhook `name` of `tenant_id` POSTed to `url`, unsigned, with what a destination
    /// gets unless told otherwise: the `Idempotency-Key` header, no de-duplication window
    /// and no lookup, uncertain sends held, a 10 s timeout, 16 in flight, no ordering, and
    /// [`DEFAULT_FAILING_WINDOW`].
    pub fn webhook(tenant_id: Uuid, name: &str, url: &str) -> NewDestination {
        let url = url.to_owned();
        NewDestination::delivered(tenant_id, name, Delivery::Webhook { url })
    }

    /// An email destination `name` of `tenant_id` mailed as `email` says, with what a
    /// destination gets unless told otherwise (as [`NewDestination::webhook`]'s).
    pub fn email(tenant_id: Uuid, name: &str, email: EmailSettings) -> NewDestination {
        NewDestination::delivered(tenant_id, name, Delivery::Email(email))
    }

    fn delivered(tenant_id: Uuid, name: &str, delivery: Delivery) -> NewDestination {
        NewDestination {
            tenant_id,
            name: name.to_owned(),
            delivery,
            signing_secrets: Vec::new(),
            idempotency_header: "Idempotency-Key".to_owned(),
            idempotency_retention: None,
            lookup_url_template: None,
            on_uncertain: OnUncertain::Hold,
            timeout: Duration::from_secs(10),
            max_in_flight: 16,
            ordering: OrderingSettings {
                ordering: Ordering::None,
                on_head_failed: OnHeadFailed::Block,
            },
            disable_after_failing: Some(DEFAULT_FAILING_WINDOW),
        }
    }
}

/// How a destination's alerts reach it: what its kind adds to a [`NewDestination`].
#[derive(Debug, Clone)]
pub enum Delivery {
    /// POSTed to `url` (http or https).
    Webhook {
        /// Where alerts are POSTed.
        url: String,
    },
    /// POSTed to `url`, an HTTP email API: each alert rendered as email into the request
    /// body by `api`'s template.
    EmailApi {
        /// The API's URL.
        url: String,
        /// Its template, the mail it asks for, and its key.
        api: EmailApiSettings,
    },
    /// Mailed over SMTP through a relay.
    Email(EmailSettings),
}

impl Delivery {
    /// The kind stored (an HTTP email API is a webhook).
    pub fn kind(&self) -> DestinationKind {
        match self {
            Delivery::Webhook { .. } | Delivery::EmailApi { .. } => DestinationKind::Webhook,
            Delivery::Email(_) => DestinationKind::Email,
        }
    }
}

/// Who an email alert is from and to, and its language: an email destination's, or what
/// an HTTP email API is asked to mail. The caller has checked the addresses.
#[derive(Debug, Clone)]
pub struct Mailing {
    /// The sender address; its domain names every Message-ID.
    pub from: String,
    /// The recipients of every alert.
    pub to: Vec<String>,
    /// The language, if set (else the tenant's, else English).
    pub locale: Option<Locale>,
}

/// What an email destination adds to a [`NewDestination`]: its relay and how to speak to
/// it, and its mail.
#[derive(Clone)]
pub struct EmailSettings {
    /// The relay the messages are handed to.
    pub relay: SmtpRelay,
    /// How the connection to it is secured.
    pub smtp_tls: SmtpTls,
    /// SMTP user name, if the relay wants AUTH.
    pub smtp_username: Option<String>,
    /// SMTP password as stored: sealed (`enc:v1:...`, bound to the destination's id) or
    /// plain when no key is configured.
    pub smtp_password: Option<String>,
    /// The CA (PEM certificates) the relay's certificate must chain to instead of the
    /// public roots, for a relay on a private PKI.
    pub smtp_ca_pem: Option<String>,
    /// The sender, the recipients and the language.
    pub mail: Mailing,
}

impl std::fmt::Debug for EmailSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailSettings")
            .field("relay", &self.relay)
            .field("smtp_tls", &self.smtp_tls)
            .field("smtp_username", &self.smtp_username)
            .field(
                "smtp_password",
                &self.smtp_password.as_ref().map(|_| "(set)"),
            )
            .field("smtp_ca_pem", &self.smtp_ca_pem.as_ref().map(|_| "(set)"))
            .field("mail", &self.mail)
            .finish()
    }
}

/// What a webhook that speaks to an HTTP email API adds to a [`NewDestination`]: its body
/// template, the sender and recipients it asks the API to mail, and the API's key. The
/// caller has checked the template and the addresses.
#[derive(Clone)]
pub struct EmailApiSettings {
    /// `email-api-resend`, or `file`.
    pub body_template: String,
    /// The operator's template text, for `file`.
    pub body_template_text: Option<String>,
    /// The API key as stored (sealed with the destination's id, or plain when no key is
    /// configured), sent as `Authorization: Bearer`.
    pub bearer_token: Option<String>,
    /// The sender, the recipients and the language.
    pub mail: Mailing,
}

impl std::fmt::Debug for EmailApiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailApiSettings")
            .field("body_template", &self.body_template)
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "(set)"))
            .field("mail", &self.mail)
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
    /// Where alerts are POSTed, or the SMTP relay (`smtp://host:port`, from
    /// [`SmtpRelay`]).
    #[sqlx(skip)]
    pub url: String,
    /// Recipients of an email destination (empty for a webhook).
    pub mail_to: Vec<String>,
    /// Sender of an email destination.
    pub mail_from: Option<String>,
    /// Locale of an email destination's messages, when set.
    pub locale: Option<Locale>,
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

/// Creates a destination under an id chosen by the caller (from [`new_id`]), in one
/// INSERT, and returns the id; a name the tenant already uses is
/// [`StoreError::AlreadyExists`]. The columns its kind does not have hold what the
/// table's defaults would (empty, `NULL`): an email destination signs nothing,
/// de-duplicates nothing and answers no lookup.
pub async fn create_with_id(
    db: impl PgExecutor<'_>,
    id: Uuid,
    new: &NewDestination,
) -> Result<Uuid, StoreError> {
    let (url, api, email) = match &new.delivery {
        Delivery::Webhook { url } => (Some(url), None, None),
        Delivery::EmailApi { url, api } => (Some(url), Some(api), None),
        Delivery::Email(email) => (None, None, Some(email)),
    };
    let mail = api.map(|a| &a.mail).or(email.map(|e| &e.mail));
    let webhook = email.is_none();
    sqlx::query(
        "INSERT INTO destinations (id, tenant_id, name, kind, url, signing_secrets, \
             idempotency_header, idempotency_retention, lookup_url_template, on_uncertain, \
             timeout_ms, max_in_flight, ordering, on_head_failed, disable_after_failing, \
             smtp_host, smtp_port, smtp_tls, smtp_username, smtp_password, smtp_ca_pem, \
             body_template, body_template_text, bearer_token, mail_from, mail_to, locale) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, make_interval(secs => $8), $9, $10, $11, $12, \
                 $13, $14, make_interval(secs => $15), $16, $17, $18, $19, $20, $21, $22, \
                 $23, $24, $25, $26, $27)",
    )
    .bind(id)
    .bind(new.tenant_id)
    .bind(&new.name)
    .bind(new.delivery.kind())
    .bind(url)
    .bind(if webhook {
        &new.signing_secrets[..]
    } else {
        &[]
    })
    .bind(&new.idempotency_header)
    .bind(
        new.idempotency_retention
            .filter(|_| webhook)
            .map(|d| d.as_secs_f64()),
    )
    .bind(new.lookup_url_template.as_deref().filter(|_| webhook))
    .bind(new.on_uncertain)
    .bind(i32::try_from(new.timeout.as_millis()).unwrap_or(i32::MAX))
    .bind(i32::try_from(new.max_in_flight).unwrap_or(i32::MAX))
    .bind(new.ordering.ordering)
    .bind(new.ordering.on_head_failed)
    .bind(new.disable_after_failing.map(|d| d.as_secs_f64()))
    .bind(email.map(|e| e.relay.stored_host()))
    .bind(email.map(|e| i32::from(e.relay.port)))
    .bind(email.map(|e| e.smtp_tls))
    .bind(email.and_then(|e| e.smtp_username.as_deref()))
    .bind(email.and_then(|e| e.smtp_password.as_deref()))
    .bind(email.and_then(|e| e.smtp_ca_pem.as_deref()))
    .bind(api.map(|a| &a.body_template))
    .bind(api.and_then(|a| a.body_template_text.as_deref()))
    .bind(api.and_then(|a| a.bearer_token.as_deref()))
    .bind(mail.map(|m| &m.from))
    .bind(mail.map_or(&[][..], |m| &m.to[..]))
    .bind(mail.and_then(|m| m.locale))
    .execute(db)
    .await
    .map_err(|err| name_taken(err, &new.name))?;
    Ok(id)
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

/// A listed destination with where it leads as stored: a webhook's URL, or an email
/// destination's relay.
#[derive(sqlx::FromRow)]
struct ListedDestination {
    #[sqlx(flatten)]
    summary: DestinationSummary,
    webhook_url: Option<String>,
    smtp_host: Option<String>,
    smtp_port: Option<i32>,
}

impl ListedDestination {
    /// The summary, its `url` the webhook's or the relay as `smtp://host:port` (a host
    /// written by other means that is none, as stored).
    fn summary(self) -> DestinationSummary {
        let relay = self.smtp_host.zip(self.smtp_port).map(|(host, port)| {
            let port = u16::try_from(port).unwrap_or_default();
            SmtpRelay::new(&host, port).map_or(host, |relay| relay.to_string())
        });
        DestinationSummary {
            url: self.webhook_url.or(relay).unwrap_or_default(),
            ..self.summary
        }
    }
}

/// Lists destinations, of one tenant or of all, by tenant then name.
pub async fn list(
    db: impl PgExecutor<'_>,
    tenant_id: Option<Uuid>,
) -> Result<Vec<DestinationSummary>, StoreError> {
    let rows = sqlx::query_as::<_, ListedDestination>(
        "SELECT d.id, t.name AS tenant, d.name, d.kind, d.url AS webhook_url, d.smtp_host, \
                d.smtp_port, d.mail_to, d.mail_from, d.locale, \
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
    Ok(rows.into_iter().map(ListedDestination::summary).collect())
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
