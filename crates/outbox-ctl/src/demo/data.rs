//! What the demo's database holds before the deciders run: the tenant, its three webhooks
//! and two mailboxes, the contracts, the watchlist entry and the articles.

use anyhow::Context;
use outbox_core::SmtpTls;
use outbox_store::destinations::{Delivery, EmailSettings, Mailing, NewDestination};
use outbox_store::PgPool;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use uuid::Uuid;

use super::mailboxes::{MAILBOXES, MAIL_FROM};
use super::sink::Sink;

/// The sample data, built in: the same files people read and copy in `examples/`.
const SAMPLE_CONTRACTS: &str = include_str!("../../../../examples/contracts.csv");
const SAMPLE_ARTICLES: &str = include_str!("../../../../examples/articles.json");

/// The contracts (CSV) and articles (JSON) the demo runs on: those in `examples` when
/// given, else the built-in sample.
pub(super) fn sample(examples: Option<&Path>) -> anyhow::Result<(String, String)> {
    let Some(dir) = examples else {
        return Ok((SAMPLE_CONTRACTS.to_owned(), SAMPLE_ARTICLES.to_owned()));
    };
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .with_context(|| format!("reading {}", dir.join(name).display()))
    };
    Ok((read("contracts.csv")?, read("articles.json")?))
}

/// Creates the demo's tenant and its destinations, all delivering to `sink`; the
/// operations team's mailbox is left disabled until the deciders are done.
pub(super) async fn create_destinations(pool: &PgPool, sink: &Sink) -> anyhow::Result<Uuid> {
    let tenant = outbox_store::tenants::create(pool, "demo", "UTC", None).await?;
    let lookup = format!("{}/requests/{{key}}", sink.url);
    for d in [
        webhook(tenant, &sink.url, "ops", &|d| {
            d.idempotency_retention = Some(Duration::from_secs(86_400))
        }),
        webhook(tenant, &sink.url, "finance", &|d| {
            d.lookup_url_template = Some(lookup.clone())
        }),
        webhook(tenant, &sink.url, "legal", &|_| {}),
    ] {
        outbox_store::destinations::create(pool, &d).await?;
    }
    for mailbox in MAILBOXES {
        let email = EmailSettings {
            relay: sink.smtp_addr.parse::<SocketAddr>()?.into(),
            smtp_tls: SmtpTls::None,
            smtp_username: None,
            smtp_password: None,
            smtp_ca_pem: None,
            mail: Mailing {
                from: MAIL_FROM.to_owned(),
                to: vec![mailbox.address.to_owned()],
                locale: Some(mailbox.locale),
            },
        };
        let new = NewDestination {
            delivery: Delivery::Email(email),
            signing_secrets: vec![],
            ..webhook(tenant, &sink.url, mailbox.destination, &|_| {})
        };
        outbox_store::destinations::create(pool, &new).await?;
    }
    // Contracts that name no destination go to every enabled one: the operations team's
    // mailbox is disabled while the monitors decide, so it gets the news alerts its
    // watchlist names it for, and no renewals. It is enabled before delivery starts.
    outbox_store::destination_switch::set_destination_enabled(
        pool, tenant, "ops-mail", false, "demo",
    )
    .await?;
    eprintln!(
        "destinations: ops (de-duplicates by key), finance (lookup by key), legal (neither: hold), \
         cfo-mail ({}), ops-mail ({}); both mailboxes hold an uncertain send",
        MAILBOXES[0].reader, MAILBOXES[1].reader
    );
    Ok(tenant)
}

/// A webhook destination `name` of `tenant` at the sink, signed, as `configure` changes
/// it, with the in-flight bound `destination add` would choose for it.
fn webhook(
    tenant: Uuid,
    sink_url: &str,
    name: &str,
    configure: &dyn Fn(&mut NewDestination),
) -> NewDestination {
    let mut d = NewDestination {
        signing_secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned()],
        timeout: Duration::from_secs(1),
        ..NewDestination::webhook(tenant, name, &format!("{sink_url}/{name}"))
    };
    configure(&mut d);
    // As `destination add` chooses when --max-in-flight is not given.
    d.max_in_flight = outbox_core::in_flight::default_max_in_flight(
        d.lookup_url_template.is_some(),
        d.idempotency_retention.is_some(),
    );
    d
}

/// What the monitors read: the contracts, a watchlist entry for the operations team (by
/// webhook and by mail), and the articles.
pub(super) async fn feed_monitors(
    pool: &PgPool,
    tenant: Uuid,
    contracts: &str,
    articles: &str,
) -> anyhow::Result<()> {
    outbox_decider::contracts::import(
        pool,
        tenant,
        contracts,
        outbox_decider::contracts::Format::Csv,
    )
    .await?;
    outbox_store::sources::add_watchlist_entry(
        pool,
        &outbox_store::sources::NewWatchlistEntry {
            tenant_id: tenant,
            name: "northwind".to_owned(),
            query: "\"northwind hosting\" outage -rumour".to_owned(),
            destinations: vec!["ops".to_owned(), "ops-mail".to_owned()],
            group_events: true,
            group_window_secs: 48 * 3600,
        },
    )
    .await?;
    outbox_decider::news::ingest(pool, articles).await?;
    Ok(())
}
