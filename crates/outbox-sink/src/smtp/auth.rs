//! The exchange of `AUTH PLAIN [initial-response]` and `AUTH LOGIN [initial-response]`
//! (RFC 4954): the client's user name and password read, checked against the configured
//! credentials, and answered.

use base64::Engine;

use super::channel::Channel;
use super::end::End;
use crate::config::SmtpCredentials;

/// Runs the exchange of `AUTH <args>` on `channel`: the user the client authenticated as,
/// or `None` when it did not (the refusal answered, and counted as a bad command).
pub(super) async fn authenticate(
    channel: &mut Channel,
    credentials: &SmtpCredentials,
    args: &str,
) -> Result<Option<String>, End> {
    let (mechanism, initial) = match args.split_once(' ') {
        Some((mechanism, initial)) => (mechanism.to_ascii_uppercase(), Some(initial.trim())),
        None => (args.to_ascii_uppercase(), None),
    };
    let given = match mechanism.as_str() {
        "PLAIN" => {
            let response = match initial {
                Some(initial) => initial.to_owned(),
                None => match challenge(channel, "").await? {
                    Some(response) => response,
                    None => return Ok(None),
                },
            };
            // authorization identity NUL user NUL password
            decode_base64(&response).and_then(|plain| {
                let mut parts = plain.splitn(3, '\0');
                let _authorization = parts.next()?;
                Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
            })
        }
        "LOGIN" => {
            let user = match initial {
                Some(initial) => Some(initial.to_owned()),
                // "Username:" and "Password:", in base64.
                None => challenge(channel, "VXNlcm5hbWU6").await?,
            };
            let Some(user) = user else {
                return Ok(None);
            };
            let Some(password) = challenge(channel, "UGFzc3dvcmQ6").await? else {
                return Ok(None);
            };
            decode_base64(&user).zip(decode_base64(&password))
        }
        _ => {
            channel
                .bad("504 5.5.4 unrecognized authentication type")
                .await?;
            return Ok(None);
        }
    };
    match given {
        Some((user, password)) if credentials.accepts(&user, &password) => {
            tracing::info!(user, "SMTP client authenticated");
            channel.reply("235 2.7.0 Authentication successful").await?;
            Ok(Some(user))
        }
        // The password is never logged, not even a wrong one: it may be a near miss.
        Some((user, _)) => {
            tracing::info!(user, "SMTP authentication failed");
            channel
                .bad("535 5.7.8 authentication credentials invalid")
                .await?;
            Ok(None)
        }
        None => {
            channel.bad("501 5.5.2 cannot decode the response").await?;
            Ok(None)
        }
    }
}

/// Sends a `334` challenge and reads the client's answer; `None` when the client cancels
/// the exchange with `*` (answered `501`, counted as a bad command so that a client cannot
/// loop on AUTH forever).
async fn challenge(channel: &mut Channel, challenge: &str) -> Result<Option<String>, End> {
    channel.reply(&format!("334 {challenge}")).await?;
    let answer = channel.read_line().await?;
    if answer.trim() == "*" {
        channel.bad("501 5.7.0 authentication cancelled").await?;
        return Ok(None);
    }
    Ok(Some(answer))
}

fn decode_base64(text: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()?;
    String::from_utf8(bytes).ok()
}
