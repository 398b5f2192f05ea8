//! The real `sink` binary as an inbox: `--smtp-listen` takes mail from a raw SMTP session
//! with AUTH, lists it at `/_sink/messages`, writes it to `--eml-dir`, and its logs (at
//! debug level) never hold the SMTP password, neither the right one nor a wrong one. The
//! credentials come from a file or the environment; as a flag (visible in `ps`) they still
//! work, with a warning.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use crate::common;

use base64::Engine;
use common::procs::*;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const PASSWORD: &str = "tr0ub4dor-and-3";
const WRONG_PASSWORD: &str = "tr0ub4dor-and-4";

/// Sends `command` (when not empty) and returns the reply, multi-line replies whole.
async fn exchange(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    command: &str,
) -> String {
    if !command.is_empty() {
        writer.write_all(command.as_bytes()).await.unwrap();
    }
    let mut reply = String::new();
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).await.unwrap() > 0,
            "connection closed"
        );
        reply.push_str(&line);
        if line.len() < 4 || line.as_bytes()[3] != b'-' {
            return reply;
        }
    }
}

#[tokio::test]
async fn the_sink_binary_takes_mail_over_smtp_and_never_logs_the_password() {
    let eml_dir = std::env::temp_dir().join(format!("outbox-sink-smtp-{}", std::process::id()));
    std::fs::create_dir_all(&eml_dir).unwrap();
    let credentials = eml_dir.join("smtp-auth");
    std::fs::write(&credentials, format!("relay:{PASSWORD}\n")).unwrap();
    let args = [
        &["--eml-dir", eml_dir.to_str().unwrap()][..],
        &["--smtp-auth-file", credentials.to_str().unwrap()],
    ]
    .concat();
    let inbox = SmtpSink::start_with(&args, &[("RUST_LOG", "debug")]).await;
    let (mut child, base) = (inbox.sink.child, inbox.sink.base);
    let smtp_addr = inbox.smtp_addr;

    let (read, mut writer) = TcpStream::connect(&smtp_addr).await.unwrap().into_split();
    let mut reader = BufReader::new(read);
    let mut say = async |command: &str| exchange(&mut reader, &mut writer, command).await;
    assert!(say("").await.starts_with("220 "));
    assert!(say("EHLO tests.example\r\n")
        .await
        .contains("AUTH PLAIN LOGIN"));
    let plain = |password: &str| {
        base64::engine::general_purpose::STANDARD.encode(format!("\0relay\0{password}"))
    };
    let wrong = say(&format!("AUTH PLAIN {}\r\n", plain(WRONG_PASSWORD))).await;
    assert!(wrong.starts_with("535 "), "{wrong}");
    let right = say(&format!("AUTH PLAIN {}\r\n", plain(PASSWORD))).await;
    assert!(right.starts_with("235 "), "{right}");
    assert!(say("MAIL FROM:<alerts@example.com>\r\n")
        .await
        .starts_with("250 "));
    assert!(say("RCPT TO:<cfo@example.com>\r\n")
        .await
        .starts_with("250 "));
    assert!(say("DATA\r\n").await.starts_with("354 "));
    let queued = say(
        "Message-ID: <bin-1@alerts.example.com>\r\nX-Alert-Id: bin-1\r\n\
         Subject: =?utf-8?b?UmVub3ZhY2nDs24=?=\r\n\r\nHola.\r\n.\r\n",
    )
    .await;
    assert!(queued.starts_with("250 2.0.0 Ok: queued as "), "{queued}");
    assert!(say("QUIT\r\n").await.starts_with("221 "));

    let messages: Vec<serde_json::Value> = reqwest::get(format!("{base}/_sink/messages"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["message_id"], "bin-1@alerts.example.com");
    assert_eq!(messages[0]["subject"], "Renovación");
    assert_eq!(
        messages[0]["rcpt_to"],
        serde_json::json!(["cfo@example.com"])
    );
    let eml = eml_dir.join(messages[0]["eml_file"].as_str().unwrap());
    let written = std::fs::read_to_string(&eml).unwrap();
    assert!(written.ends_with("\r\n\r\nHola.\r\n"), "{written}");

    signal(&child, "TERM");
    let status = child.exit_status().await;
    assert!(status.success());
    let logs = child.log_lines();
    assert!(logs
        .iter()
        .any(|line| line.contains("SMTP client authenticated")));
    for secret in [
        PASSWORD,
        WRONG_PASSWORD,
        plain(PASSWORD).as_str(),
        plain(WRONG_PASSWORD).as_str(),
    ] {
        assert!(
            !logs.iter().any(|line| line.contains(secret)),
            "a log line holds {secret}"
        );
    }
    std::fs::remove_dir_all(&eml_dir).unwrap();
}

/// AUTH PLAIN as `relay` with `password` in a new session at `smtp_addr`: the reply.
async fn auth_reply(smtp_addr: &str, password: &str) -> String {
    let (read, mut writer) = TcpStream::connect(smtp_addr).await.unwrap().into_split();
    let mut reader = BufReader::new(read);
    assert!(exchange(&mut reader, &mut writer, "")
        .await
        .starts_with("220 "));
    exchange(&mut reader, &mut writer, "EHLO tests.example\r\n").await;
    let plain = base64::engine::general_purpose::STANDARD.encode(format!("\0relay\0{password}"));
    exchange(&mut reader, &mut writer, &format!("AUTH PLAIN {plain}\r\n")).await
}

/// One way of giving a process a secret: a name for it, the flags, the environment.
type SecretGiven<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>);

#[tokio::test]
async fn the_smtp_credentials_come_from_a_file_or_the_environment_and_as_a_flag_they_warn() {
    let dir = std::env::temp_dir().join(format!("outbox-sink-auth-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("smtp-auth");
    std::fs::write(&file, format!("relay:{PASSWORD}\n")).unwrap();
    let credentials = format!("relay:{PASSWORD}");
    let cases: [SecretGiven; 3] = [
        (
            "file",
            vec!["--smtp-auth-file", file.to_str().unwrap()],
            vec![],
        ),
        (
            "environment",
            vec![],
            vec![("SINK_SMTP_AUTH", &credentials)],
        ),
        ("flag", vec!["--smtp-auth", &credentials], vec![]),
    ];
    for (form, flags, env) in cases {
        let inbox = SmtpSink::start_with(&flags, &env).await;
        let (mut child, smtp_addr) = (inbox.sink.child, inbox.smtp_addr);
        let wrong = auth_reply(&smtp_addr, WRONG_PASSWORD).await;
        assert!(wrong.starts_with("535 "), "{form}: {wrong}");
        let right = auth_reply(&smtp_addr, PASSWORD).await;
        assert!(right.starts_with("235 "), "{form}: {right}");
        signal(&child, "TERM");
        assert!(child.exit_status().await.success(), "{form}");
        let logs = child.log_lines();
        let warned = logs.iter().any(|line| {
            line.contains("WARN") && line.contains("SINK_SMTP_AUTH or --smtp-auth-file instead")
        });
        assert_eq!(warned, form == "flag", "{form}: {logs:?}");
        assert!(!logs.iter().any(|line| line.contains(PASSWORD)), "{form}");
    }

    // A file that cannot be read, or holds no USER:PASSWORD, stops the sink with one line.
    let bad = dir.join("bad-auth");
    std::fs::write(&bad, "no-colon-here\n").unwrap();
    for (path, reason) in [
        (dir.join("absent"), "reading"),
        (bad, "expected USER:PASSWORD"),
    ] {
        let output = outbox_testkit::process::Run::new(env!("CARGO_BIN_EXE_sink"))
            .args(["--listen", "127.0.0.1:0", "--smtp-auth-file"])
            .args([&path])
            .env("RUST_LOG", "error")
            .output()
            .await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(
            stderr.contains(reason) && !stderr.contains("no-colon-here"),
            "{stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
