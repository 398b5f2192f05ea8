//! Who acts on an alert, and why (`--actor`, `--note`): the evidence records both with
//! every action, and the audit log the same operator name.

use anyhow::bail;

/// Who is acting, and why.
#[derive(Debug, clap::Args)]
pub struct Accountable {
    /// Why: stored with the action in the alert's evidence.
    #[arg(long)]
    note: Option<String>,
    /// Who: the operator's name in the evidence, recorded as `cli:NAME`.
    #[arg(long, env = "USER", default_value = "operator")]
    actor: String,
}

/// The operator as the evidence and the audit log record them: `cli:` and `--actor`,
/// `$USER`, or "operator" when both are empty. The prefix tells them from a console
/// account of the same name (`console:NAME`).
pub(crate) fn actor_name(actor: &str) -> String {
    let actor = actor.trim();
    format!("cli:{}", if actor.is_empty() { "operator" } else { actor })
}

impl Accountable {
    pub(crate) fn actor(&self) -> String {
        actor_name(&self.actor)
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.actor.trim().len() > 100 {
            bail!("--actor is longer than 100 bytes");
        }
        Ok(())
    }

    pub(crate) fn note(&self) -> anyhow::Result<&str> {
        self.check()?;
        let note = self.note.as_deref().unwrap_or("").trim();
        if note.is_empty() {
            bail!("--note is required: say why, it is kept with the alert's evidence");
        }
        if note.len() > 1000 {
            bail!("--note is longer than 1000 bytes");
        }
        Ok(note)
    }
}
