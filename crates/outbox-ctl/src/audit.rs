//! The audit log's lines for what `outboxctl` does outside alerts' evidence: accounts,
//! tokens, destinations and secrets (`console_audit`, read by the console's audit page).
//! A line is written once its command succeeded, by `cli:NAME` (`--actor` where the
//! command takes one, otherwise `$USER`), never to be taken for the console account
//! `console:NAME`; with the tenant it concerns, so that an account limited to that tenant
//! sees it.

use outbox_core::OperatorRole;
use outbox_store::{tenants, PgPool};

use crate::accountable::actor_name;
use crate::accounts::OperatorCommand;
use crate::credentials::SecretsCommand;
use crate::destinations::DestinationCommand;
use crate::tokens::TokenCommand;
use crate::Command;

/// One line to record.
#[derive(Debug)]
pub(crate) struct Line {
    actor: String,
    tenant: Option<String>,
    action: &'static str,
    target: String,
    note: String,
}

/// The operator running the command when it names none: `$USER`.
fn invoker() -> String {
    actor_name(&std::env::var("USER").unwrap_or_default())
}

fn line(tenant: Option<&str>, action: &'static str, target: String, note: String) -> Line {
    Line {
        actor: invoker(),
        tenant: tenant.map(str::to_owned),
        action,
        target,
        note,
    }
}

/// The line `command` leaves when it succeeds, if it is one that is audited: a table, one
/// arm an audited command.
pub(crate) fn line_for(command: &Command) -> Option<Line> {
    Some(match command {
        Command::Operator(OperatorCommand::Add {
            name,
            role,
            tenants,
        }) => line(
            None,
            "operator added",
            name.clone(),
            account_note(*role, tenants),
        ),
        Command::Operator(OperatorCommand::Remove { name }) => {
            line(None, "operator removed", name.clone(), String::new())
        }
        Command::Token(TokenCommand::Create { tenant, label, .. }) => line(
            Some(tenant),
            "token created",
            format!("token of {tenant}"),
            label.clone().unwrap_or_default(),
        ),
        Command::Token(TokenCommand::Revoke { id }) => {
            line(None, "token revoked", format!("token {id}"), String::new())
        }
        Command::Destination(DestinationCommand::Add(args)) => {
            destination_line(&invoker(), args.audited(), "destination added")
        }
        Command::Destination(DestinationCommand::Update(args)) => {
            // `--actor`, as the evidence of the alerts the update lets go records it.
            destination_line(&args.actor(), args.audited(), "destination updated")
        }
        Command::Destination(DestinationCommand::RotateSecret(args)) => {
            destination_line(&invoker(), args.audited(), "destination secret rotated")
        }
        Command::Destination(DestinationCommand::Disable {
            name,
            tenant,
            actor,
        }) => destination_line(&actor_name(actor), (tenant, name), "destination disabled"),
        Command::Destination(DestinationCommand::Enable {
            name,
            tenant,
            actor,
        }) => destination_line(&actor_name(actor), (tenant, name), "destination enabled"),
        Command::Secrets(SecretsCommand::Rewrap { .. }) => line(
            None,
            "secrets rewrapped",
            "every stored secret".to_owned(),
            String::new(),
        ),
        _ => return None,
    })
}

/// A new account's role and the tenants it is limited to: `viewer, every tenant`.
fn account_note(role: OperatorRole, tenants: &[String]) -> String {
    let scope = if tenants.is_empty() {
        "every tenant".to_owned()
    } else {
        format!("tenants {}", tenants.join(", "))
    };
    format!("{role}, {scope}")
}

/// The line of a command on the destination `(tenant, name)`, by `actor`.
fn destination_line(actor: &str, (tenant, name): (&str, &str), action: &'static str) -> Line {
    Line {
        actor: actor.to_owned(),
        tenant: Some(tenant.to_owned()),
        action,
        target: format!("{tenant}/{name}"),
        note: String::new(),
    }
}

/// Writes `line`. The tenant, named as the command named it (name or id), is looked up
/// now that the command has succeeded.
pub(crate) async fn record(pool: &PgPool, line: Line) -> anyhow::Result<()> {
    let tenant = match &line.tenant {
        Some(tenant) => tenants::find(pool, tenant).await.ok().map(|t| t.id),
        None => None,
    };
    // Target and note say which tenant by the name the command was given; the line's
    // tenant is its id, which is what an account's grant is checked against.
    outbox_store::audit::record_audit(
        pool,
        &line.actor,
        tenant.as_ref().map(std::slice::from_ref),
        line.action,
        &line.target,
        &line.note,
    )
    .await
    .map_err(|err| anyhow::anyhow!("done, but its audit line was not written: {err}"))
}
