//! The failing window after which a destination is disabled automatically
//! (`--disable-after-failing`): read from the command line, set when a destination is
//! added, changed by `destination update`.

use anyhow::bail;
use outbox_core::duration;
use outbox_store::{tenants, PgPool};
use std::time::Duration;

/// How long every send may fail before a destination is disabled: `None` for never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailingWindow(pub Option<Duration>);

/// Longest `--disable-after-failing` window (a year; `never` is the way to say longer).
const MAX_FAILING_WINDOW: Duration = Duration::from_secs(365 * 86_400);

/// The failing window a destination gets unless told otherwise (the column's default).
const DEFAULT_FAILING_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Reads `--disable-after-failing`: a positive duration, or `never`.
pub(super) fn parse_failing_window(text: &str) -> Result<FailingWindow, String> {
    if text.trim() == "never" {
        return Ok(FailingWindow(None));
    }
    let window = duration::parse_positive(text.trim())
        .map_err(|err| format!("{err}; or `never` to keep the destination on"))?;
    if window > MAX_FAILING_WINDOW {
        return Err("at most 365d; or `never` to keep the destination on".to_owned());
    }
    Ok(FailingWindow(Some(window)))
}

/// `destination update` flags.
#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// Destination name.
    name: String,
    /// Owning tenant (name or id).
    #[arg(long, env = "OUTBOX_TENANT")]
    tenant: String,
    /// Disable the destination automatically once every send to it has failed for this
    /// long; `never` to keep it on.
    #[arg(long, value_name = "DURATION|never", value_parser = parse_failing_window)]
    disable_after_failing: Option<FailingWindow>,
}

impl UpdateArgs {
    /// The tenant and the destination's name, as given, for the audit log.
    pub(crate) fn audited(&self) -> (&str, &str) {
        (&self.tenant, &self.name)
    }
}

/// `destination update`: changes the settings given, and says what they are now.
pub(super) async fn update_destination(pool: &PgPool, args: UpdateArgs) -> anyhow::Result<()> {
    let Some(FailingWindow(window)) = args.disable_after_failing else {
        bail!("nothing to change: give --disable-after-failing DURATION|never");
    };
    let tenant = tenants::find(pool, &args.tenant).await?;
    if !outbox_store::health::set_disable_after_failing(pool, tenant.id, &args.name, window).await?
    {
        bail!(
            "tenant `{}` has no destination named `{}`",
            tenant.name,
            args.name
        );
    }
    eprintln!(
        "destination `{}`: {}",
        args.name,
        failing_window_text(window)
    );
    Ok(())
}

/// Sets a new destination's failing window, unless it is the column's default (24h).
pub(super) async fn set_failing_window(
    conn: &mut outbox_store::PgConnection,
    tenant_id: uuid::Uuid,
    name: &str,
    window: FailingWindow,
) -> anyhow::Result<()> {
    if window.0 != Some(DEFAULT_FAILING_WINDOW) {
        outbox_store::health::set_disable_after_failing(&mut *conn, tenant_id, name, window.0)
            .await?;
    }
    Ok(())
}

/// What a failing window means, in words.
fn failing_window_text(window: Option<Duration>) -> String {
    match window {
        Some(window) => format!(
            "disabled automatically once every send has failed for {}",
            duration::format(window)
        ),
        None => "never disabled automatically".to_owned(),
    }
}
