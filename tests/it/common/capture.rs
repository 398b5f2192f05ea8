//! A receiver written for the tests alone: records requests as they arrive, and checks
//! Standard Webhooks signatures with its own HMAC code, so the product's signing is
//! verified by something other than itself.

use axum::body::Bytes;
use axum::http::HeaderMap;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::{Arc, Mutex};

#[derive(Clone)]
pub struct Captured {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Captured {
    pub fn header(&self, name: &str) -> String {
        self.headers[name].to_str().unwrap().to_owned()
    }
}

pub struct Capture {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<Captured>>>,
}

impl Capture {
    pub async fn start() -> Capture {
        let seen: Arc<Mutex<Vec<Captured>>> = Arc::default();
        let store = seen.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
            let store = store.clone();
            async move {
                store.lock().unwrap().push(Captured { headers, body });
                axum::Json(serde_json::json!({"id": "captured-1"}))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Capture { addr, seen }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn all(&self) -> Vec<Captured> {
        self.seen.lock().unwrap().clone()
    }

    pub async fn take_one(&self) -> Captured {
        let mut seen = self.seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "exactly one request");
        seen.pop().unwrap()
    }
}

/// `v1,` + base64(HMAC-SHA256(key, id.timestamp.body)), computed here from scratch.
pub fn expected_signature(secret: &str, request: &Captured) -> String {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    let signed = format!(
        "{}.{}.{}",
        request.header("webhook-id"),
        request.header("webhook-timestamp"),
        std::str::from_utf8(&request.body).unwrap()
    );
    mac.update(signed.as_bytes());
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}
