//! Template versions: `sha256:<hex>` over the names and texts of the templates that made an
//! output, each written with its length first, so that equal versions mean equal templates.

use sha2::{Digest, Sha256};

/// A template version being computed.
#[derive(Default)]
pub(crate) struct Version(Sha256);

impl Version {
    /// Adds `text` (a template's name or source), its length first.
    pub(crate) fn add(&mut self, text: &str) {
        self.0.update((text.len() as u64).to_be_bytes());
        self.0.update(text.as_bytes());
    }

    /// Adds the version of the templates an output was made from, as it is.
    pub(crate) fn add_version(&mut self, version: &str) {
        self.0.update(version.as_bytes());
    }

    /// `sha256:<hex>`.
    pub(crate) fn finish(self) -> String {
        let digest = self.0.finalize();
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }
}
