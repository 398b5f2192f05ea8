//! The sink's SMTP side over real sockets: each test serves one sink in-process on two
//! ephemeral ports (HTTP and SMTP) and delivers mail to it with lettre, a real SMTP client,
//! reading back what the sink recorded through `/_sink/messages` and `/stats`.

use clap::Parser;
use lettre::message::header::{HeaderName, HeaderValue};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use outbox_sink::{serve_with_mail, MailListeners, SinkArgs};
use outbox_testkit::tls::{TestCa, TlsFiles};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

struct TestSink {
    base: String,
    smtp_port: u16,
    /// The implicit-TLS listener's port, when it has one.
    smtps_port: Option<u16>,
    client: Client,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl TestSink {
    async fn start(flags: &[&str]) -> TestSink {
        Self::serve(flags, false).await
    }

    /// A sink presenting `files`' certificate: `STARTTLS` on its SMTP port, and an
    /// implicit-TLS port.
    async fn start_tls(files: &TlsFiles, flags: &[&str]) -> TestSink {
        let (cert, key) = (files.cert(), files.key());
        let mut all = vec![
            "--smtp-tls-cert",
            cert.to_str().unwrap(),
            "--smtp-tls-key",
            key.to_str().unwrap(),
        ];
        all.extend_from_slice(flags);
        Self::serve(&all, true).await
    }

    async fn serve(flags: &[&str], implicit_tls: bool) -> TestSink {
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let smtp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let smtps = match implicit_tls {
            true => Some(TcpListener::bind("127.0.0.1:0").await.unwrap()),
            false => None,
        };
        let base = format!("http://{}", http.local_addr().unwrap());
        let smtp_port = smtp.local_addr().unwrap().port();
        let smtps_port = smtps.as_ref().map(|l| l.local_addr().unwrap().port());
        let args = SinkArgs::parse_from(std::iter::once("sink").chain(flags.iter().copied()));
        let (stop, stopped) = oneshot::channel::<()>();
        let mail = MailListeners {
            smtp: Some(smtp),
            smtps,
        };
        let task = tokio::spawn(serve_with_mail(http, mail, args, async {
            let _ = stopped.await;
        }));
        TestSink {
            base,
            smtp_port,
            smtps_port,
            client: Client::builder().no_proxy().build().unwrap(),
            stop: Some(stop),
            task,
        }
    }

    /// A plain-text SMTP client for this sink, as an application would configure one for a
    /// local relay.
    fn transport(&self, credentials: Option<(&str, &str)>) -> AsyncSmtpTransport<Tokio1Executor> {
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
            .port(self.smtp_port)
            .timeout(Some(Duration::from_secs(10)));
        if let Some((user, password)) = credentials {
            builder = builder.credentials(Credentials::new(user.to_owned(), password.to_owned()));
        }
        builder.build()
    }

    async fn send(&self, message: &Message) -> Result<String, lettre::transport::smtp::Error> {
        let response = self.transport(None).send(message.clone()).await?;
        Ok(response.message().collect::<Vec<_>>().join(" "))
    }

    async fn get(&self, path: &str) -> Value {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    async fn messages(&self, message_id: Option<&str>) -> Vec<Value> {
        let path = match message_id {
            Some(id) => format!("/_sink/messages?message_id={id}"),
            None => "/_sink/messages".to_owned(),
        };
        self.get(&path).await.as_array().unwrap().clone()
    }

    async fn smtp_stats(&self) -> Value {
        self.get("/stats").await["smtp"].clone()
    }

    async fn faults(&self, faults: Value) {
        let response = self
            .client
            .post(format!("{}/_sink/faults", self.base))
            .json(&faults)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{:?}",
            response.text().await
        );
    }

    async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

/// A renewal alert as the dispatcher sends one: its own Message-ID, two recipients, a
/// Spanish subject (RFC 2047 encoded on the wire), `X-Alert-Id`, and a body line starting
/// with a dot (dot-stuffed on the wire).
fn alert_message(alert: &str) -> Message {
    Message::builder()
        .from("Alertas <alerts@example.com>".parse().unwrap())
        .to("cfo@example.com".parse().unwrap())
        .to("ops@example.com".parse().unwrap())
        .subject("Renovación: contrato C-7 vence el 15 de enero de 2027")
        .message_id(Some(format!("<{alert}@alerts.example.com>")))
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("X-Alert-Id"),
            alert.to_owned(),
        ))
        .body(
            "El contrato C-7 se renueva.\r\n.punto al inicio\r\nImporte: 12.000,00 €\r\n"
                .to_owned(),
        )
        .unwrap()
}

/// The reply code of a refusal the client got, if it got one.
fn reply_code(err: &lettre::transport::smtp::Error) -> Option<String> {
    err.status().map(|code| code.to_string())
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The message data the sink receives: the message, then the CRLF that ends its last line
/// (part of the `<CRLF>.<CRLF>` the client sends after it).
fn data_on_the_wire(message: &Message) -> Vec<u8> {
    let mut data = message.formatted();
    data.extend_from_slice(b"\r\n");
    data
}

fn unique_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "outbox-sink-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ))
}

#[tokio::test]
async fn a_message_is_recorded_with_its_message_id_recipients_subject_and_hash() {
    let sink = TestSink::start(&[]).await;
    let message = alert_message("alert-1");
    let reply = sink.send(&message).await.unwrap();

    let messages = sink.messages(None).await;
    assert_eq!(messages.len(), 1);
    let record = &messages[0];
    assert_eq!(
        reply,
        format!(
            "2.0.0 Ok: queued as {}",
            record["queue_id"].as_str().unwrap()
        )
    );
    assert_eq!(record["message_id"], "alert-1@alerts.example.com");
    assert_eq!(record["alert_id"], "alert-1");
    assert_eq!(record["mail_from"], "alerts@example.com");
    assert_eq!(
        record["rcpt_to"],
        json!(["cfo@example.com", "ops@example.com"])
    );
    assert_eq!(
        record["subject"],
        "Renovación: contrato C-7 vence el 15 de enero de 2027"
    );
    assert_eq!(record["to"], "cfo@example.com, ops@example.com");
    // The data hashed is what the client sent, dot-stuffing undone: the dotted line
    // arrives with one dot, or the hash would differ.
    let data = data_on_the_wire(&message);
    assert_eq!(record["sha256"], sha256_hex(&data));
    assert_eq!(record["size"], data.len());
    assert_eq!(record["dropped"], false);
    assert_eq!(record["tls"], Value::Null, "plain text");
    let body_start = data.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(record["body_sha256"], sha256_hex(&data[body_start..]));

    assert_eq!(
        sink.smtp_stats().await,
        json!({
            "messages": 1, "distinct_message_ids": 1, "duplicate_message_ids": 0,
            "dropped": 0, "refused": 0, "refused_recipients": 0, "refused_senders": 0,
            "too_large": 0,
        })
    );
    sink.stop().await;
}

#[tokio::test]
async fn a_message_records_its_traceparent_field() {
    let sink = TestSink::start(&[]).await;
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let mut traced = alert_message("alert-traced");
    traced.headers_mut().insert_raw(HeaderValue::new(
        HeaderName::new_from_ascii_str("Traceparent"),
        parent.to_owned(),
    ));
    sink.send(&traced).await.unwrap();
    sink.send(&alert_message("alert-plain")).await.unwrap();

    let traced = &sink.messages(Some("alert-traced@alerts.example.com")).await[0];
    assert_eq!(traced["trace_parent"], parent);
    let plain = sink.messages(Some("alert-plain@alerts.example.com")).await[0].clone();
    assert!(plain.get("trace_parent").is_none(), "{plain}");
    sink.stop().await;
}

#[tokio::test]
async fn the_same_message_twice_is_two_messages_in_the_inbox() {
    let sink = TestSink::start(&[]).await;
    let message = alert_message("alert-2");
    let first = sink.send(&message).await.unwrap();
    let second = sink.send(&message).await.unwrap();
    sink.send(&alert_message("alert-3")).await.unwrap();
    assert_ne!(first, second, "each message gets its own queue id");

    // Angle brackets or not, the query names the same message.
    let twice = sink
        .messages(Some("%3Calert-2@alerts.example.com%3E"))
        .await;
    assert_eq!(twice.len(), 2);
    assert_eq!(twice[0]["sha256"], twice[1]["sha256"]);
    assert_eq!(
        sink.messages(Some("alert-2@alerts.example.com"))
            .await
            .len(),
        2
    );
    assert_eq!(sink.messages(Some("nobody@x")).await.len(), 0);
    let stats = sink.smtp_stats().await;
    assert_eq!(stats["messages"], 3);
    assert_eq!(stats["distinct_message_ids"], 2);
    assert_eq!(stats["duplicate_message_ids"], 1);
    sink.stop().await;
}

#[tokio::test]
async fn a_reply_dropped_after_the_final_dot_loses_the_reply_but_keeps_the_message() {
    let sink = TestSink::start(&[]).await;
    sink.faults(json!({"smtp_drop_for_message_ids": ["<alert-4@alerts.example.com>"]}))
        .await;
    let message = alert_message("alert-4");
    let err = sink.send(&message).await.unwrap_err();
    // Neither accepted nor refused: the connection was lost after the data.
    assert!(
        !err.is_transient() && !err.is_permanent(),
        "connection lost, not a reply: {err:?}"
    );

    let messages = sink.messages(Some("alert-4@alerts.example.com")).await;
    assert_eq!(
        messages.len(),
        1,
        "the message is in the inbox all the same"
    );
    assert_eq!(messages[0]["dropped"], true);
    assert_eq!(
        messages[0]["sha256"],
        sha256_hex(&data_on_the_wire(&message))
    );
    assert_eq!(sink.smtp_stats().await["dropped"], 1);

    // Once only: the resend is answered, and the inbox now holds the message twice.
    sink.send(&message).await.unwrap();
    let stats = sink.smtp_stats().await;
    assert_eq!(
        (
            stats["messages"].as_u64(),
            stats["duplicate_message_ids"].as_u64()
        ),
        (Some(2), Some(1))
    );
    sink.stop().await;
}

#[tokio::test]
async fn scripted_451_and_550_reach_the_client_as_transient_and_permanent() {
    let sink = TestSink::start(&["--seed", "7"]).await;
    sink.faults(json!({
        "smtp_rcpt_script": ["550 5.1.1 no such user"],
        "smtp_data_script": ["451 4.3.0 try later"],
    }))
    .await;
    let message = alert_message("alert-5");

    let err = sink.send(&message).await.unwrap_err();
    assert!(err.is_permanent(), "{err:?}");
    assert_eq!(reply_code(&err).as_deref(), Some("550"));

    let err = sink.send(&message).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(reply_code(&err).as_deref(), Some("451"));

    // The fail rate, with a reply of its own.
    sink.faults(json!({"smtp_fail_rate": 1.0, "smtp_fail_reply": "554 5.7.1 refused by policy"}))
        .await;
    let err = sink.send(&message).await.unwrap_err();
    assert!(err.is_permanent(), "{err:?}");
    sink.faults(json!({"smtp_fail_rate": 0.0})).await;

    // Nothing refused is in the inbox; the next attempt is.
    assert!(sink.messages(None).await.is_empty());
    sink.send(&message).await.unwrap();
    assert_eq!(sink.messages(None).await.len(), 1);
    let stats = sink.smtp_stats().await;
    assert_eq!(stats["refused_recipients"], 1);
    assert_eq!(stats["refused"], 2);
    sink.stop().await;
}

#[tokio::test]
async fn the_latency_fault_delays_the_final_reply() {
    let sink = TestSink::start(&["--smtp-latency", "400ms"]).await;
    let started = Instant::now();
    sink.send(&alert_message("alert-6")).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    sink.stop().await;
}

#[tokio::test]
async fn eml_files_hold_each_message_as_received() {
    let dir = unique_dir("eml");
    let sink = TestSink::start(&["--eml-dir", dir.to_str().unwrap()]).await;
    let message = alert_message("alert-7");
    sink.send(&message).await.unwrap();
    sink.send(&message).await.unwrap();

    let messages = sink.messages(None).await;
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let recorded: Vec<String> = messages
        .iter()
        .map(|m| m["eml_file"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names, recorded,
        "one file per message, named by time and queue id"
    );
    for (name, record) in names.iter().zip(&messages) {
        assert!(name.ends_with(&format!("-{}.eml", record["queue_id"].as_str().unwrap())));
        let contents = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(contents, data_on_the_wire(&message));
    }
    sink.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_message_over_the_size_limit_is_refused_552_and_not_recorded() {
    let sink = TestSink::start(&["--smtp-max-message-bytes", "4096"]).await;
    let big = Message::builder()
        .from("alerts@example.com".parse().unwrap())
        .to("cfo@example.com".parse().unwrap())
        .subject("big")
        .body(format!("{}\r\n", "x".repeat(70)).repeat(100))
        .unwrap();
    let err = sink.send(&big).await.unwrap_err();
    assert!(err.is_permanent(), "{err:?}");
    assert_eq!(reply_code(&err).as_deref(), Some("552"));
    assert!(sink.messages(None).await.is_empty());
    assert_eq!(sink.smtp_stats().await["too_large"], 1);
    sink.send(&alert_message("alert-8")).await.unwrap();
    sink.stop().await;
}

#[tokio::test]
async fn with_credentials_configured_only_authenticated_clients_deliver() {
    let sink = TestSink::start(&["--smtp-auth", "relay:correct-horse"]).await;
    let message = alert_message("alert-9");

    let err = sink
        .transport(None)
        .send(message.clone())
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err).as_deref(), Some("530"));
    let err = sink
        .transport(Some(("relay", "wrong-horse")))
        .send(message.clone())
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err).as_deref(), Some("535"));
    assert!(sink.messages(None).await.is_empty());

    sink.transport(Some(("relay", "correct-horse")))
        .send(message.clone())
        .await
        .unwrap();
    let messages = sink.messages(None).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["authenticated_as"], "relay");
    sink.stop().await;
}

/// Reads one reply line (multi-line replies up to their last line).
async fn read_reply(reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> String {
    let mut reply = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        reply.push_str(&line);
        if line.len() < 4 || line.as_bytes()[3] != b'-' {
            return reply;
        }
    }
}

/// Waits (at most 10 s) for the server to close the connection; returns when it did.
async fn closed_by_server(reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Instant {
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the server never closed the connection");
    Instant::now()
}

/// A client that reads the greeting and never sends a command: how long after the
/// greeting the server closed the connection.
async fn silent_client(addr: String) -> Duration {
    let (read, _write) = TcpStream::connect(addr).await.unwrap().into_split();
    let mut reader = BufReader::new(read);
    assert!(read_reply(&mut reader).await.starts_with("220 "));
    let greeted = Instant::now();
    closed_by_server(&mut reader).await - greeted
}

/// A client whose data never ends: how long after the data started the server closed the
/// connection (and the writing half, kept open until then).
async fn endless_data_client(addr: String) -> (Duration, tokio::net::tcp::OwnedWriteHalf) {
    let (read, mut write) = TcpStream::connect(addr).await.unwrap().into_split();
    let mut reader = BufReader::new(read);
    read_reply(&mut reader).await;
    for command in [
        "EHLO slow.example",
        "MAIL FROM:<a@x>",
        "RCPT TO:<b@y>",
        "DATA",
    ] {
        write
            .write_all(format!("{command}\r\n").as_bytes())
            .await
            .unwrap();
        let reply = read_reply(&mut reader).await;
        assert!(
            reply.starts_with('2') || reply.starts_with("354"),
            "{reply}"
        );
    }
    let data_started = Instant::now();
    write
        .write_all(b"Subject: never ends\r\n\r\nfirst line")
        .await
        .unwrap();
    (closed_by_server(&mut reader).await - data_started, write)
}

/// A client that trickles a command, a byte every 200 ms: how long after the greeting the
/// server closed the connection. The deadline is for the whole line, so bytes arriving do
/// not keep the connection open.
async fn trickling_client(addr: String) -> Duration {
    let (read, mut write) = TcpStream::connect(addr).await.unwrap().into_split();
    let mut reader = BufReader::new(read);
    read_reply(&mut reader).await;
    let greeted = Instant::now();
    let trickle = async {
        for byte in b"EHLO a-very-slow-client.example".iter().cycle() {
            if write.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::select! {
        closed = closed_by_server(&mut reader) => closed - greeted,
        () = trickle => Instant::now() - greeted,
    }
}

#[tokio::test]
async fn slow_smtp_clients_are_closed_within_the_deadline_while_others_deliver() {
    let sink = TestSink::start(&["--header-timeout", "1s", "--body-timeout", "2s"]).await;
    let addr = format!("127.0.0.1:{}", sink.smtp_port);
    let silent = tokio::spawn(silent_client(addr.clone()));
    let endless = tokio::spawn(endless_data_client(addr.clone()));
    let trickling = tokio::spawn(trickling_client(addr));

    // Meanwhile a well-behaved client delivers.
    sink.send(&alert_message("alert-10")).await.unwrap();

    let trickled_for = trickling.await.unwrap();
    assert!(
        trickled_for >= Duration::from_millis(900) && trickled_for < Duration::from_secs(4),
        "a trickled command is closed at the command deadline (1 s), after {trickled_for:?}"
    );
    let silent_for = silent.await.unwrap();
    let (endless_for, _write) = endless.await.unwrap();
    assert!(
        silent_for >= Duration::from_millis(900) && silent_for < Duration::from_secs(4),
        "a silent client is closed at the command deadline (1 s), after {silent_for:?}"
    );
    assert!(
        endless_for >= Duration::from_millis(1900) && endless_for < Duration::from_secs(5),
        "an endless DATA is closed at the data deadline (2 s), after {endless_for:?}"
    );
    let messages = sink.messages(None).await;
    assert_eq!(
        messages.len(),
        1,
        "only the complete message is in the inbox"
    );
    assert_eq!(messages[0]["alert_id"], "alert-10");
    sink.stop().await;
}

#[tokio::test]
async fn connections_past_the_cap_are_turned_away() {
    let sink = TestSink::start(&["--max-client-connections", "1"]).await;
    let addr = format!("127.0.0.1:{}", sink.smtp_port);
    let (read, _write) = TcpStream::connect(&addr).await.unwrap().into_split();
    let mut holder = BufReader::new(read);
    assert!(read_reply(&mut holder).await.starts_with("220 "));

    let (read, _write2) = TcpStream::connect(&addr).await.unwrap().into_split();
    let mut turned_away = BufReader::new(read);
    assert!(read_reply(&mut turned_away).await.starts_with("421 "));
    closed_by_server(&mut turned_away).await;

    drop((holder, _write));
    // The slot frees once the server notices the close: poll with a deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match sink.send(&alert_message("alert-11")).await {
            Ok(_) => break,
            Err(err) => assert!(Instant::now() < deadline, "never delivered: {err:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sink.stop().await;
}

/// A raw SMTP session, one command at a time.
struct RawSession {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl RawSession {
    async fn open(port: u16) -> (RawSession, String) {
        let (read, writer) = TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap()
            .into_split();
        let mut session = RawSession {
            reader: BufReader::new(read),
            writer,
        };
        let greeting = read_reply(&mut session.reader).await;
        (session, greeting)
    }

    async fn send(&mut self, bytes: &str) -> String {
        self.writer.write_all(bytes.as_bytes()).await.unwrap();
        read_reply(&mut self.reader).await
    }
}

#[tokio::test]
async fn a_raw_session_gets_rfc_5321_answers() {
    let sink = TestSink::start(&["--smtp-auth", "relay:correct-horse"]).await;
    let (mut smtp, greeting) = RawSession::open(sink.smtp_port).await;
    assert!(greeting.starts_with("220 "), "{greeting}");

    assert!(smtp.send("MAIL FROM:<a@x>\r\n").await.starts_with("503 "));
    let ehlo = smtp.send("EHLO client.example\r\n").await;
    assert!(ehlo.starts_with("250-"), "{ehlo}");
    assert!(ehlo.contains("AUTH PLAIN LOGIN"), "{ehlo}");
    assert!(ehlo.contains("SIZE 10485760"), "{ehlo}");
    assert!(!ehlo.contains("STARTTLS"), "no TLS is offered: {ehlo}");
    assert!(smtp.send("STARTTLS\r\n").await.starts_with("502 "));
    assert!(smtp.send("NOOP\r\n").await.starts_with("250 "));
    assert!(smtp.send("VRFY cfo\r\n").await.starts_with("252 "));
    assert!(smtp.send("MAIL FROM:<a@x>\r\n").await.starts_with("530 "));

    // AUTH LOGIN, step by step ("relay" and "correct-horse" in base64).
    assert_eq!(smtp.send("AUTH LOGIN\r\n").await, "334 VXNlcm5hbWU6\r\n");
    assert_eq!(smtp.send("cmVsYXk=\r\n").await, "334 UGFzc3dvcmQ6\r\n");
    assert!(smtp
        .send("Y29ycmVjdC1ob3JzZQ==\r\n")
        .await
        .starts_with("235 "));

    assert!(smtp.send("RCPT TO:<b@y>\r\n").await.starts_with("503 "));
    assert!(smtp
        .send("MAIL FROM:<a@x> SIZE=99999999\r\n")
        .await
        .starts_with("552 "));
    assert!(smtp.send("MAIL FROM:<a@x>\r\n").await.starts_with("250 "));
    assert!(
        smtp.send("DATA\r\n").await.starts_with("554 "),
        "no recipient yet"
    );
    assert!(smtp.send("RCPT TO:<first@y>\r\n").await.starts_with("250 "));
    // RSET forgets the transaction.
    assert!(smtp.send("RSET\r\n").await.starts_with("250 "));
    assert!(smtp.send("RCPT TO:<b@y>\r\n").await.starts_with("503 "));

    assert!(smtp.send("mail from:<>\r\n").await.starts_with("250 "));
    assert!(smtp.send("rcpt to:<b@y>\r\n").await.starts_with("250 "));
    assert!(smtp.send("DATA\r\n").await.starts_with("354 "));
    // Dot-stuffed lines lose one dot; a bare LF line ending is taken as it comes.
    let reply = smtp
        .send("Message-ID: <raw-1@x>\r\nSubject: =?utf-8?q?caf=C3=A9?=\r\n\r\n..leading dot\r\nbare lf\n.\r\n")
        .await;
    assert!(reply.starts_with("250 2.0.0 Ok: queued as "), "{reply}");
    assert!(smtp.send("QUIT\r\n").await.starts_with("221 "));

    let messages = sink.messages(Some("raw-1@x")).await;
    assert_eq!(messages.len(), 1);
    let data =
        "Message-ID: <raw-1@x>\r\nSubject: =?utf-8?q?caf=C3=A9?=\r\n\r\n.leading dot\r\nbare lf\n";
    assert_eq!(messages[0]["sha256"], sha256_hex(data.as_bytes()));
    assert_eq!(
        messages[0]["body_sha256"],
        sha256_hex(b".leading dot\r\nbare lf\n")
    );
    assert_eq!(messages[0]["subject"], "café");
    assert_eq!(messages[0]["mail_from"], "");
    assert_eq!(messages[0]["authenticated_as"], "relay");
    sink.stop().await;
}

#[tokio::test]
async fn stopping_the_sink_tells_idle_smtp_clients_421() {
    let sink = TestSink::start(&[]).await;
    let (mut smtp, _) = RawSession::open(sink.smtp_port).await;
    assert!(smtp
        .send("EHLO client.example\r\n")
        .await
        .starts_with("250"));
    sink.stop().await;
    assert!(read_reply(&mut smtp.reader).await.starts_with("421 "));
    closed_by_server(&mut smtp.reader).await;
}

#[tokio::test]
async fn the_same_seed_gives_the_same_smtp_faults() {
    async fn outcomes(seed: &str) -> Vec<&'static str> {
        let sink = TestSink::start(&[
            "--seed",
            seed,
            "--smtp-fail-rate",
            "0.3",
            "--smtp-drop-rate",
            "0.3",
        ])
        .await;
        let mut outcomes = Vec::new();
        for i in 0..12 {
            outcomes.push(
                match sink.send(&alert_message(&format!("seeded-{i}"))).await {
                    Ok(_) => "accepted",
                    Err(err) if err.is_transient() => "refused",
                    Err(_) => "reply lost",
                },
            );
        }
        let stats = sink.smtp_stats().await;
        let count = |outcome| outcomes.iter().filter(|o| **o == outcome).count() as u64;
        assert_eq!(stats["refused"].as_u64(), Some(count("refused")));
        assert_eq!(stats["dropped"].as_u64(), Some(count("reply lost")));
        // Lost replies are in the inbox too.
        assert_eq!(
            stats["messages"].as_u64(),
            Some(count("accepted") + count("reply lost"))
        );
        sink.stop().await;
        outcomes
    }
    let first = outcomes("42").await;
    assert_eq!(first, outcomes("42").await);
    assert!(
        first.contains(&"accepted") && first.contains(&"refused") && first.contains(&"reply lost"),
        "{first:?}"
    );
}

/// A client that trusts only `ca` (PEM), for the relay at 127.0.0.1.
fn tls_parameters(ca: &str) -> TlsParameters {
    TlsParameters::builder("127.0.0.1".to_owned())
        .certificate_store(CertificateStore::None)
        .add_root_certificate(Certificate::from_pem(ca.as_bytes()).unwrap())
        .build_rustls()
        .unwrap()
}

#[tokio::test]
async fn starttls_and_implicit_tls_deliver_and_the_inbox_says_how_each_came() {
    let ca = TestCa::new("sink test CA");
    let files = ca.issue(&["127.0.0.1"]);
    let sink = TestSink::start_tls(&files, &["--smtp-auth", "relay:correct-horse"]).await;
    let credentials = Credentials::new("relay".to_owned(), "correct-horse".to_owned());
    let starttls = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
        .port(sink.smtp_port)
        .tls(Tls::Required(tls_parameters(&ca.pem())))
        .credentials(credentials.clone())
        .timeout(Some(Duration::from_secs(10)))
        .build();
    let implicit = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
        .port(sink.smtps_port.unwrap())
        .tls(Tls::Wrapper(tls_parameters(&ca.pem())))
        .credentials(credentials)
        .timeout(Some(Duration::from_secs(10)))
        .build();
    let first = alert_message("alert-tls-1");
    let second = alert_message("alert-tls-2");
    starttls.send(first.clone()).await.unwrap();
    implicit.send(second.clone()).await.unwrap();
    // A client that trusts another CA gets nowhere, and nothing is recorded.
    let stranger = TestCa::new("another CA");
    let refused = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
        .port(sink.smtps_port.unwrap())
        .tls(Tls::Wrapper(tls_parameters(&stranger.pem())))
        .timeout(Some(Duration::from_secs(10)))
        .build();
    assert!(refused.send(alert_message("alert-tls-3")).await.is_err());

    let messages = sink.messages(None).await;
    assert_eq!(messages.len(), 2, "{messages:?}");
    for (message, sent, how) in [
        (&messages[0], &first, "starttls"),
        (&messages[1], &second, "tls"),
    ] {
        assert_eq!(message["tls"], how);
        assert_eq!(message["authenticated_as"], "relay");
        assert_eq!(message["sha256"], sha256_hex(&data_on_the_wire(sent)));
    }
    sink.stop().await;
}

#[tokio::test]
async fn a_hidden_starttls_offer_and_a_scripted_sender_refusal_reach_a_raw_client() {
    let files = TestCa::new("sink test CA").issue(&["127.0.0.1"]);
    let sink = TestSink::start_tls(&files, &[]).await;
    let (mut smtp, _) = RawSession::open(sink.smtp_port).await;
    let ehlo = smtp.send("EHLO client.example\r\n").await;
    assert!(ehlo.contains("STARTTLS"), "{ehlo}");

    sink.faults(json!({
        "smtp_hide_starttls": true,
        "smtp_mail_from_script": ["451 4.7.1 sender deferred"]
    }))
    .await;
    let ehlo = smtp.send("EHLO client.example\r\n").await;
    assert!(!ehlo.contains("STARTTLS"), "{ehlo}");
    assert!(smtp.send("STARTTLS\r\n").await.starts_with("502 "));
    assert_eq!(
        smtp.send("MAIL FROM:<a@x>\r\n").await,
        "451 4.7.1 sender deferred\r\n"
    );
    assert!(smtp.send("MAIL FROM:<a@x>\r\n").await.starts_with("250 "));
    assert_eq!(sink.smtp_stats().await["refused_senders"], 1);
    sink.stop().await;
}

#[tokio::test]
async fn commands_sent_in_plain_text_after_starttls_are_never_run_over_tls() {
    let ca = TestCa::new("sink test CA");
    let files = ca.issue(&["127.0.0.1"]);
    let sink = TestSink::start_tls(&files, &[]).await;
    let (smtp, _) = RawSession::open(sink.smtp_port).await;
    let RawSession {
        mut reader,
        mut writer,
    } = smtp;
    writer.write_all(b"EHLO client.example\r\n").await.unwrap();
    read_reply(&mut reader).await;
    // An attacker on the path appends a command to the client's STARTTLS.
    writer
        .write_all(b"STARTTLS\r\nMAIL FROM:<injected@x>\r\n")
        .await
        .unwrap();
    assert!(read_reply(&mut reader).await.starts_with("220 "));
    let stream = reader.into_inner().reunite(writer).unwrap();

    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(files.ca()).unwrap();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(&pem).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, stream)
        .await
        .unwrap();
    let (read, mut write) = tokio::io::split(tls);
    let mut read = BufReader::new(read);
    // Over TLS the session starts again: a transaction the injected MAIL FROM would have
    // opened does not exist, so a second MAIL FROM is not "nested".
    write.write_all(b"EHLO client.example\r\n").await.unwrap();
    let mut line = String::new();
    read.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("250-sink greets"), "{line}");
    loop {
        let mut more = String::new();
        read.read_line(&mut more).await.unwrap();
        if more.as_bytes().get(3) == Some(&b' ') {
            break;
        }
    }
    write.write_all(b"MAIL FROM:<a@x>\r\n").await.unwrap();
    let mut reply = String::new();
    read.read_line(&mut reply).await.unwrap();
    assert!(reply.starts_with("250 "), "{reply}");
    sink.stop().await;
}
