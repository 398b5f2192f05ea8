//! `operator add|list|remove`: the console's operator accounts. A new account's password
//! is printed once on stdout and only its argon2id hash is stored.

use anyhow::bail;
use clap::builder::TypedValueParser;
use outbox_core::OperatorRole;
use outbox_store::{operator_accounts, tenants, PgPool};

use crate::table::Table;
use outbox_core::untrusted::visible;

/// `operator ...`
#[derive(Debug, clap::Subcommand)]
pub enum OperatorCommand {
    /// Create an account; prints its password, which is shown only this once.
    Add {
        /// Its name; the evidence of its actions names it `console:NAME`.
        name: String,
        /// viewer (reads) or operator (reads and acts).
        #[arg(long, value_parser = role_names())]
        role: OperatorRole,
        /// Limit it to these tenants (names or ids; repeat or separate with commas).
        /// Default: every tenant.
        #[arg(long = "tenant", alias = "tenants", value_delimiter = ',')]
        tenants: Vec<String>,
    },
    /// List accounts (never passwords).
    List {
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove an account; its sessions end at once.
    Remove {
        /// Its name.
        name: String,
    },
}

/// `--role`: one of [`OperatorRole`]'s names, which the help lists with what each may do.
fn role_names() -> impl TypedValueParser<Value = OperatorRole> {
    let described = OperatorRole::ALL.iter().map(|role| {
        clap::builder::PossibleValue::new(role.as_str()).help(match role {
            OperatorRole::Viewer => "Reads every page; cannot act",
            OperatorRole::Operator => {
                "Reads and acts (replay, resolve, destinations, bulk replays)"
            }
        })
    });
    clap::builder::PossibleValuesParser::new(described).try_map(|name| name.parse::<OperatorRole>())
}

/// Runs an `operator ...` command.
pub(crate) async fn run(pool: &PgPool, command: OperatorCommand) -> anyhow::Result<()> {
    match command {
        OperatorCommand::Add {
            name,
            role,
            tenants,
        } => add(pool, &name, role, &tenants).await,
        OperatorCommand::List { json } => list(pool, json).await,
        OperatorCommand::Remove { name } => remove(pool, &name).await,
    }
}

/// Whether `name` can be an account's name: 1 to 64 of letters, digits, `.`, `_`, `-`,
/// starting with a letter or digit (it is shown in evidence lines and URLs).
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        bail!("an operator's name is 1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter or digit");
    }
    Ok(())
}

/// `operator add`: prints the new account's password, shown only this once.
async fn add(
    pool: &PgPool,
    name: &str,
    role: OperatorRole,
    tenant_names: &[String],
) -> anyhow::Result<()> {
    check_name(name)?;
    let mut tenant_ids = Vec::with_capacity(tenant_names.len());
    for tenant in tenant_names {
        let id = tenants::find(pool, tenant.trim()).await?.id;
        if !tenant_ids.contains(&id) {
            tenant_ids.push(id);
        }
    }
    let password = outbox_core::password::new_password();
    let hash = outbox_core::password::hash_password(&password)
        .map_err(|err| anyhow::anyhow!("hashing the password: {err}"))?;
    let scope = (!tenant_ids.is_empty()).then_some(tenant_ids.as_slice());
    operator_accounts::create(pool, name, role, scope, &hash).await?;
    println!("{password}");
    eprintln!(
        "operator {name} ({role}) created; its password is shown above, this once: sign in at /console/login"
    );
    Ok(())
}

/// `operator list`: the accounts, never their passwords.
async fn list(pool: &PgPool, json: bool) -> anyhow::Result<()> {
    let accounts = operator_accounts::list(pool).await?;
    if json {
        for account in &accounts {
            println!("{}", outbox_core::untrusted::to_json_line(account)?);
        }
        return Ok(());
    }
    let mut table = Table::new(["NAME", "ROLE", "TENANTS", "CREATED"]);
    for account in accounts {
        let tenants = if account.tenant_ids.is_none() {
            "all".to_owned()
        } else {
            visible(&account.tenant_names.join(",")).into_owned()
        };
        table.row([
            account.name,
            account.role.to_string(),
            tenants,
            account.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
        ]);
    }
    print!("{table}");
    Ok(())
}

/// `operator remove`: the account's sessions end at once.
async fn remove(pool: &PgPool, name: &str) -> anyhow::Result<()> {
    if !operator_accounts::remove(pool, name).await? {
        bail!("no operator `{}`", visible(name));
    }
    eprintln!("operator {name} removed; its sessions ended");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn operator_names_are_plain() {
        assert!(check_name("alice").is_ok());
        assert!(check_name("ops.on-call_2").is_ok());
        for bad in ["", "-x", "a b", "<script>", &"a".repeat(65), "é"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
