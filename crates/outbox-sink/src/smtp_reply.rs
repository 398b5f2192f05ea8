//! [`SmtpReply`]: an SMTP refusal the sink can be told to give (a 4xx or 5xx code and a
//! printable text), as the command line and `POST /_sink/faults` write it.

use serde::{Deserialize, Serialize};

/// An SMTP refusal, written `"451 4.3.0 try later"`: a 4xx (transient) or 5xx (permanent)
/// code and its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SmtpReply {
    code: u16,
    text: String,
}

impl SmtpReply {
    /// Longest text accepted, well inside the 512 bytes of an SMTP reply line.
    const MAX_TEXT: usize = 200;

    /// The reply code.
    pub fn code(&self) -> u16 {
        self.code
    }

    /// The reply line, without its CRLF.
    pub fn line(&self) -> String {
        format!("{} {}", self.code, self.text)
    }
}

impl std::str::FromStr for SmtpReply {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        let value = value.trim();
        let (code, text) = value.split_once(' ').unwrap_or((value, ""));
        let code: u16 = code
            .parse()
            .map_err(|_| format!("`{value}` does not start with a reply code"))?;
        if !(400..=599).contains(&code) {
            return Err(format!("a refusal must have a 4xx or 5xx code, not {code}"));
        }
        let text = text.trim();
        if text.len() > Self::MAX_TEXT || !text.bytes().all(|b| (b' '..=b'~').contains(&b)) {
            return Err(format!(
                "the text of a reply must be printable ASCII, at most {} characters",
                Self::MAX_TEXT
            ));
        }
        let text = if text.is_empty() { "refused" } else { text };
        Ok(SmtpReply {
            code,
            text: text.to_owned(),
        })
    }
}

impl TryFrom<String> for SmtpReply {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        value.parse()
    }
}

impl From<SmtpReply> for String {
    fn from(reply: SmtpReply) -> String {
        reply.line()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_replies_are_refusals() {
        assert_eq!(
            "550 5.1.1 no such user"
                .parse::<SmtpReply>()
                .unwrap()
                .line(),
            "550 5.1.1 no such user"
        );
        assert!("250 ok".parse::<SmtpReply>().is_err());
        assert!("600 x".parse::<SmtpReply>().is_err());
        assert!("later".parse::<SmtpReply>().is_err());
        assert!("451 caf\u{e9}".parse::<SmtpReply>().is_err());
    }
}
