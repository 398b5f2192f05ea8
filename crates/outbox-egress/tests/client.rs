//! The guarded client against a real local server: what reaches it and what is refused
//! before any connection is made.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_egress::{refusal_of, AllowList, Guard, Lookup};
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A server on 127.0.0.1 that answers 200 to anything and counts connections.
async fn counting_server() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = socket.read(&mut buffer).await;
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (port, connections)
}

/// Names with chosen addresses, as a hostile DNS server would answer.
#[derive(Debug)]
struct Names(HashMap<&'static str, Vec<IpAddr>>);

impl Lookup for Names {
    fn lookup<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move {
            self.0
                .get(name)
                .cloned()
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))
        })
    }
}

fn names() -> Arc<Names> {
    Arc::new(Names(HashMap::from([
        (
            "mixed.test",
            vec![
                "93.184.216.34".parse().unwrap(),
                "127.0.0.1".parse().unwrap(),
            ],
        ),
        ("loopback.test", vec!["127.0.0.1".parse().unwrap()]),
    ])))
}

async fn get(guard: &Guard, url: &str) -> Result<u16, reqwest::Error> {
    let client = guard.client_builder().build().unwrap();
    let response = client.get(url).send().await?;
    Ok(response.status().as_u16())
}

#[tokio::test]
async fn a_name_with_one_public_and_one_private_address_is_refused_before_connecting() {
    let (port, connections) = counting_server().await;
    let guard = Guard::default().with_lookup(names());
    let err = get(&guard, &format!("http://mixed.test:{port}/hook"))
        .await
        .unwrap_err();
    let refused = refusal_of(&err).expect("the guard's refusal is in the error");
    assert_eq!(
        refused.to_string(),
        "destination address 127.0.0.1 is not allowed: loopback"
    );
    let url = url::Url::parse(&format!("http://mixed.test:{port}/hook")).unwrap();
    assert!(
        guard.vet_url(&url).await.is_err(),
        "vetting a URL says the same"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 0, "nothing connected");
}

#[tokio::test]
async fn localhost_from_the_hosts_file_is_refused_and_the_allow_list_opens_it() {
    let (port, connections) = counting_server().await;
    let err = get(&Guard::default(), &format!("http://localhost:{port}/hook"))
        .await
        .unwrap_err();
    assert!(refusal_of(&err).is_some(), "{err:?}");
    assert_eq!(connections.load(Ordering::SeqCst), 0);

    let open = Guard::new(AllowList::parse("127.0.0.0/8,::1/128").unwrap());
    assert_eq!(
        get(&open, &format!("http://localhost:{port}/hook"))
            .await
            .unwrap(),
        200
    );
    let open = open.with_lookup(names());
    assert_eq!(
        get(&open, &format!("http://loopback.test:{port}/hook"))
            .await
            .unwrap(),
        200
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_an_ordinary_failure_not_a_refusal() {
    let guard = Guard::default().with_lookup(names());
    let err = get(&guard, "http://nowhere.test/hook").await.unwrap_err();
    assert!(err.is_connect(), "{err:?}");
    assert!(refusal_of(&err).is_none());
}
