//! Webhook destinations that speak to an HTTP email API: the alert's request body is
//! rendered once by the destination's body template (the email's subject, text and HTML
//! in its locale, written into the API's JSON shape) and stored before the first send;
//! every attempt sends those stored bytes with the same idempotency key.

use outbox_render::{BodyTemplate, Mail, Renderer};
use outbox_store::dispatch::ClaimedAlert;
use outbox_store::rendered::{BodyJob, RenderedMessage};
use sha2::{Digest, Sha256};

use crate::classify::Exchange;
use crate::Shared;

/// The stored request body of `row`'s alert, rendered and stored first when this is its
/// first attempt, and the evidence naming it. Write before act: the bytes are committed
/// before any request is made, so a crash after sending still resends exactly what was
/// sent.
pub(crate) async fn stored_body(
    shared: &Shared,
    row: &ClaimedAlert,
) -> Result<(Vec<u8>, String), Exchange> {
    let not_stored = |err: outbox_store::StoreError| {
        Exchange::NotConnected(format!(
            "the rendered request body could not be stored: {err}"
        ))
    };
    let stored = match outbox_store::rendered::find(&shared.pool, row.alert_id)
        .await
        .map_err(not_stored)?
    {
        Some(stored) => stored,
        None => render_and_store(shared, row).await?,
    };
    let note = format!(
        "request body sha256:{} rendered with templates {}",
        stored.sha256, stored.template_version
    );
    Ok((stored.bytes, note))
}

async fn render_and_store(
    shared: &Shared,
    row: &ClaimedAlert,
) -> Result<RenderedMessage, Exchange> {
    let job = match outbox_store::rendered::body_job(&shared.pool, row.alert_id).await {
        Ok(Some(job)) => job,
        Ok(None) => {
            return Err(Exchange::Unsendable(
                "the destination no longer has a body template".into(),
            ))
        }
        Err(err) => {
            return Err(Exchange::NotConnected(format!(
                "reading the body template failed: {err}"
            )))
        }
    };
    let (message_id, bytes, template_version) =
        render(&job, &Renderer::builtin()).map_err(Exchange::Unsendable)?;
    let sha256: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    outbox_store::rendered::store_once(
        &shared.pool,
        job.alert_id,
        &message_id,
        &bytes,
        &sha256,
        &template_version,
    )
    .await
    .map_err(|err| {
        Exchange::NotConnected(format!(
            "the rendered request body could not be stored: {err}"
        ))
    })
}

/// Renders `job`'s alert into its request body: the Message-ID the alert would have as
/// email, the body's bytes and the templates' version. Recipients the rule of
/// [`outbox_core::recipients`] refuses are a configuration error.
pub(crate) fn render(
    job: &BodyJob,
    renderer: &Renderer,
) -> Result<(String, Vec<u8>, String), String> {
    let locale = outbox_render::resolve(job.locale, job.tenant_locale);
    let template = BodyTemplate::stored(&job.body_template, job.body_template_text.as_deref())
        .map_err(|err| format!("the body template: {err}"))?;
    // Checked at `destination add`; again here for destinations added before the rule.
    outbox_core::recipients::recipients(job.mail_to.iter().map(String::as_str))
        .map_err(|err| err.to_string())?;
    let alert_id = job.alert_id.to_string();
    let body = template
        .render(
            renderer,
            &Mail {
                alert_id: &alert_id,
                revision: job.revision,
                payload: &job.payload,
                occurrence: &job.occurrence,
                locale,
                from: &job.mail_from,
                to: &job.mail_to,
            },
        )
        .map_err(|err| format!("the alert could not be rendered: {err}"))?;
    // The sender may carry a display name (`Acme Alerts <alerts@acme.example>`).
    let domain = job
        .mail_from
        .rsplit('@')
        .next()
        .unwrap_or("localhost")
        .trim_end_matches('>');
    Ok((
        format!("<{alert_id}@{domain}>"),
        body.bytes,
        body.template_version,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(to: &[&str]) -> BodyJob {
        BodyJob {
            alert_id: uuid::Uuid::nil(),
            payload: r#"{"kind":"note","text":"hello"}"#.into(),
            occurrence: "o-1".into(),
            revision: 0,
            body_template: "email-api-resend".into(),
            body_template_text: None,
            mail_from: "Acme Alerts <alerts@example.org>".into(),
            mail_to: to.iter().map(|t| (*t).to_owned()).collect(),
            locale: None,
            tenant_locale: None,
        }
    }

    #[test]
    fn recipients_stored_before_the_rule_are_refused_at_send() {
        let renderer = Renderer::builtin();
        assert!(render(&job(&["cfo@example.org"]), &renderer).is_ok());
        for hidden in [r#""a,b"@attacker.example"#, "x@[127.0.0.1]"] {
            let why = render(&job(&["cfo@example.org", hidden]), &renderer).unwrap_err();
            assert!(why.contains(hidden), "{why}");
        }
    }
}
