//! `destination list` and `destination show`: destinations as operators see them, with
//! credentials in URLs hidden and what each in-flight bound means.

use anyhow::bail;
use outbox_core::{duration, in_flight, redact, DestinationKind};
use outbox_store::destinations::DestinationSummary;
use outbox_store::{tenants, PgPool};
use std::time::Duration;

use crate::table::Table;

/// `destination list`: a table (or a JSON object a line), with a line below it for each
/// disabled destination saying why it is off.
pub(super) async fn list_destinations(
    pool: &PgPool,
    tenant: Option<&str>,
    json: bool,
) -> anyhow::Result<()> {
    let tenant_id = crate::tenants::filter(pool, tenant).await?;
    let destinations = listed_destinations(pool, tenant_id).await?;
    if json {
        for destination in &destinations {
            println!("{}", outbox_core::untrusted::to_json_line(destination)?);
        }
        return Ok(());
    }
    let mut table = Table::new([
        "TENANT",
        "NAME",
        "KIND",
        "URL",
        "DEDUP",
        "LOOKUP",
        "ON UNCERTAIN",
        "TIMEOUT",
        "MAX IN FLIGHT",
        "A CRASH LEAVES AT MOST",
        "SECRETS",
        "ENABLED",
        "AUTO-DISABLE",
        "ORDERING",
        "RECIPIENTS",
    ]);
    for d in &destinations {
        table.row(row(d));
    }
    print!("{table}");
    // Why each disabled one is off, below the table (a reason is a sentence).
    for d in destinations.iter().filter(|d| !d.enabled) {
        println!(
            "{}/{} is disabled: {}",
            d.tenant,
            d.name,
            d.disabled_reason.as_deref().unwrap_or_default()
        );
    }
    Ok(())
}

/// A destination's row in `destination list`.
fn row(d: &DestinationSummary) -> [String; 15] {
    let kind = match &d.body_template {
        Some(template) => format!("{} ({template})", d.kind),
        None => d.kind.to_string(),
    };
    let crash = format!(
        "{} uncertain, {}",
        d.max_in_flight,
        in_flight::settled_by(
            d.lookup_url_template.is_some(),
            d.idempotency_retention_secs.is_some(),
            d.on_uncertain
        )
    );
    let auto_disable = match d.disable_after_failing_secs {
        Some(secs) => format!(
            "after {} failing",
            duration::format(Duration::from_secs(secs.unsigned_abs()))
        ),
        None => "never".to_owned(),
    };
    let recipients = if d.mail_to.is_empty() {
        "-".to_owned()
    } else {
        d.mail_to.join(",")
    };
    [
        d.tenant.clone(),
        d.name.clone(),
        kind,
        d.url.clone(),
        dedup_text(d),
        yes_no(d.lookup_url_template.is_some()),
        d.on_uncertain.to_string(),
        timeout_text(d),
        d.max_in_flight.to_string(),
        crash,
        credentials_cell(d),
        yes_no(d.enabled),
        auto_disable,
        ordering_cell(d),
        recipients,
    ]
}

/// Destinations as operators see them: credentials in URLs hidden, the in-flight bound
/// explained.
async fn listed_destinations(
    pool: &PgPool,
    tenant_id: Option<uuid::Uuid>,
) -> anyhow::Result<Vec<DestinationSummary>> {
    let mut destinations = outbox_store::destinations::list(pool, tenant_id).await?;
    for d in &mut destinations {
        d.url = redact::url(&d.url);
        d.lookup_url_template = d.lookup_url_template.as_deref().map(redact::url);
        d.crash_bound = in_flight::crash_consequence(
            d.max_in_flight,
            d.lookup_url_template.is_some(),
            d.idempotency_retention_secs.is_some(),
            d.on_uncertain,
        );
    }
    Ok(destinations)
}

/// `outboxctl destination show NAME --tenant T`: one destination, a line per setting.
pub(super) async fn show_destination(
    pool: &PgPool,
    tenant: &str,
    name: &str,
    json: bool,
) -> anyhow::Result<()> {
    let tenant = tenants::find(pool, tenant).await?;
    let Some(d) = listed_destinations(pool, Some(tenant.id))
        .await?
        .into_iter()
        .find(|d| d.name == name)
    else {
        bail!("tenant `{}` has no destination `{name}`", tenant.name);
    };
    if json {
        println!("{}", outbox_core::untrusted::to_json_line(&d)?);
        return Ok(());
    }
    let mut lines = vec![
        ("id", d.id.to_string()),
        ("tenant", d.tenant.clone()),
        ("name", d.name.clone()),
        ("kind", d.kind.to_string()),
        ("url", d.url.clone()),
        ("de-duplication", dedup_text(&d)),
        (
            "lookup",
            d.lookup_url_template
                .clone()
                .unwrap_or_else(|| "no".to_owned()),
        ),
        ("on uncertain", d.on_uncertain.to_string()),
        ("timeout", timeout_text(&d)),
        (
            "max in flight",
            format!("{} ({})", d.max_in_flight, d.crash_bound),
        ),
        ("enabled", yes_no(d.enabled)),
        (
            "ordering",
            super::update::ordering_text(outbox_store::lanes::OrderingSettings {
                ordering: d.ordering,
                on_head_failed: d.on_head_failed,
            }),
        ),
    ];
    if !d.mail_to.is_empty() {
        lines.push(("recipients", d.mail_to.join(",")));
    }
    for (label, value) in lines {
        println!(
            "{:<16}{}",
            format!("{label}:"),
            outbox_core::untrusted::visible(&value)
        );
    }
    Ok(())
}

/// `Idempotency-Key for 1d`: the header a destination de-duplicates by, and for how
/// long; `no` when it does not.
fn dedup_text(d: &DestinationSummary) -> String {
    match d.idempotency_retention_secs {
        Some(secs) => format!(
            "{} for {}",
            d.idempotency_header,
            duration::format(Duration::from_secs(secs.unsigned_abs()))
        ),
        None => "no".to_owned(),
    }
}

/// The request timeout, e.g. `10s`.
fn timeout_text(d: &DestinationSummary) -> String {
    duration::format(Duration::from_millis(d.timeout_ms.unsigned_abs().into()))
}

/// `none`, or `per-key` with what a failed head does (`per-key, skip`).
fn ordering_cell(d: &DestinationSummary) -> String {
    match d.ordering {
        outbox_core::Ordering::None => d.ordering.to_string(),
        outbox_core::Ordering::PerKey => format!("{}, {}", d.ordering, d.on_head_failed),
    }
}

fn yes_no(yes: bool) -> String {
    if yes { "yes" } else { "no" }.to_owned()
}

/// The credentials a destination holds: an email destination's SMTP password (or
/// `none`), else its signing secrets ([`secrets_cell`]) and an email API's key.
fn credentials_cell(d: &DestinationSummary) -> String {
    if d.kind == DestinationKind::Email {
        return if d.smtp_password_set {
            "smtp password"
        } else {
            "none"
        }
        .to_owned();
    }
    let secrets = secrets_cell(d);
    if d.bearer_token_set {
        format!("{secrets} + api key")
    } else {
        secrets
    }
}

/// `1`, `1 sealed`, `1 + 1 until 2026-12-01 10:00`: current secrets, how many are
/// encrypted at rest, and the replaced ones still signing during a rotation's overlap.
fn secrets_cell(d: &DestinationSummary) -> String {
    let total = d.signing_secret_count + d.retiring_secret_count;
    let mut cell = d.signing_secret_count.to_string();
    if let Some(until) = d.retiring_until {
        cell.push_str(&format!(
            " + {} until {}",
            d.retiring_secret_count,
            until.format("%Y-%m-%d %H:%M")
        ));
    }
    if total > 0 && d.sealed_secret_count == total {
        cell.push_str(" sealed");
    } else if d.sealed_secret_count > 0 {
        cell.push_str(&format!(" ({} sealed)", d.sealed_secret_count));
    }
    cell
}
