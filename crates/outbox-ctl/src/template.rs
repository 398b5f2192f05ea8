//! `template preview`: an alert rendered as email, printed instead of sent.

use std::path::PathBuf;

use anyhow::{anyhow, Context};
use outbox_core::untrusted::visible;
use outbox_render::{Kind, Locale, RenderedEmail, Renderer};
use uuid::Uuid;

/// `template ...`
#[derive(Debug, clap::Subcommand)]
pub enum TemplateCommand {
    /// Print an alert rendered as email (subject, plain text, HTML) without sending it.
    Preview(PreviewArgs),
}

/// Which parts of the email to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreviewFormat {
    /// The subject and the plain-text body.
    Text,
    /// The subject and the HTML body.
    Html,
    /// The subject and both bodies.
    All,
}

/// `template preview`
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["alert", "payload"])))]
pub struct PreviewArgs {
    /// A stored alert: its payload, with the template kind its payload and occurrence call for.
    #[arg(long, conflicts_with_all = ["kind", "payload"])]
    pub alert: Option<String>,
    /// Template kind: contract_renewal, news_article, news_event or generic.
    #[arg(long, requires = "payload")]
    pub kind: Option<Kind>,
    /// File with the payload (a JSON object).
    #[arg(long, requires = "kind")]
    pub payload: Option<PathBuf>,
    /// Locale: en or es (default en).
    #[arg(long)]
    pub locale: Option<Locale>,
    /// Folder of override templates (`<kind>.<locale>.subject.txt|txt|html`).
    #[arg(long)]
    pub templates: Option<PathBuf>,
    /// What to print.
    #[arg(long, value_enum, default_value_t = PreviewFormat::All)]
    pub format: PreviewFormat,
}

/// Renders and prints. Connects to the database only for `--alert`.
pub(crate) async fn preview(database_url: &str, args: PreviewArgs) -> anyhow::Result<()> {
    let renderer = match &args.templates {
        Some(dir) => Renderer::with_overrides(dir)?,
        None => Renderer::builtin(),
    };
    let locale = outbox_render::resolve(args.locale, None);
    let (kind, payload) = match (&args.alert, &args.kind, &args.payload) {
        (Some(id), ..) => stored_payload(database_url, id).await?,
        (None, Some(kind), Some(file)) => {
            let payload = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            (*kind, payload)
        }
        _ => return Err(anyhow!("give --alert ID, or --kind with --payload FILE")),
    };
    let email = renderer.render(kind, locale, &payload)?;
    print!("{}", shown(&email, kind, locale, args.format));
    Ok(())
}

/// The payload of a stored alert and the template kind for it.
async fn stored_payload(database_url: &str, id: &str) -> anyhow::Result<(Kind, String)> {
    let alert_id = Uuid::parse_str(id).with_context(|| format!("`{id}` is not an alert id"))?;
    let pool = outbox_store::connect(database_url, "outboxctl", 1).await?;
    let alert = outbox_store::alerts::detail(&pool, None, alert_id).await;
    pool.close().await;
    let alert = alert?.ok_or_else(|| anyhow!("no alert {alert_id}"))?;
    if alert.pruned_at.is_some() {
        return Err(anyhow!(
            "alert {alert_id} was pruned: retention removed its payload"
        ));
    }
    let payload = alert.payload.get().to_owned();
    Ok((
        outbox_render::kind_for_alert(&payload, &alert.occurrence),
        payload,
    ))
}

/// The email for a person at a terminal: every line passes through `visible`, so text
/// from the payload cannot act on the terminal, while the bodies keep their lines.
fn shown(email: &RenderedEmail, kind: Kind, locale: Locale, format: PreviewFormat) -> String {
    let mut out = String::new();
    let mut line = |text: &str| {
        out.push_str(&visible(text));
        out.push('\n');
    };
    line(&format!("Subject: {}", email.subject));
    line(&format!(
        "Template: {kind}, {locale}, {}",
        email.template_version
    ));
    let mut body = |name: &str, text: &str| {
        line("");
        line(&format!("--- {name} ---"));
        for text_line in text.lines() {
            line(text_line);
        }
    };
    if format != PreviewFormat::Html {
        body("text/plain", &email.text);
    }
    if format != PreviewFormat::Text {
        body("text/html", &email.html);
    }
    out
}
