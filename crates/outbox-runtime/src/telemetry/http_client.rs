//! The OTLP exporter's HTTP client: the workspace's reqwest 0.12, which
//! opentelemetry-http does not support (its reqwest support is for 0.13, a second copy of
//! the HTTP stack to compile). The collector is the operator's own, so requests to it do
//! not go through the egress guard that watches deliveries.

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response, ResponseBodyTooLarge};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Largest collector answer read (the limit of opentelemetry-http's own clients).
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// A reqwest client, for the OTLP exporter.
#[derive(Debug, Clone)]
pub(crate) struct CollectorClient {
    client: reqwest::Client,
}

impl CollectorClient {
    /// A client whose every request (connection, sending, answer) ends within `timeout`.
    pub(crate) fn new(timeout: Duration) -> Result<CollectorClient, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()?;
        Ok(CollectorClient { client })
    }

    async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let mut response = self.client.execute(request).await?;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(Box::new(ResponseBodyTooLarge::new()));
            }
            body.extend_from_slice(&chunk);
        }
        let mut answer = Response::builder()
            .status(response.status())
            .version(response.version())
            .body(Bytes::from(body))?;
        *answer.headers_mut() = std::mem::take(response.headers_mut());
        Ok(answer)
    }
}

/// The future `HttpClient::send_bytes` returns (the trait is declared with `async_trait`,
/// whose expansion is written out here rather than adding the macro crate).
type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'a>>;

impl HttpClient for CollectorClient {
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: Request<Bytes>,
    ) -> SendFuture<'async_trait>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(self.send(request))
    }
}
