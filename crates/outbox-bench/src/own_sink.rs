//! Our sink (`outbox-sink`) for a run, on a thread and runtime of its own so that its
//! work is not scheduled behind the dispatcher's, and the destination aimed at it.

use anyhow::Context;

use crate::peer::DESTINATION_BOUND;
use crate::workload::DestinationSettings;

/// Our sink, listening on a free loopback port.
pub(crate) struct OwnSink {
    /// `http://127.0.0.1:<port>`.
    pub(crate) base: String,
}

impl OwnSink {
    /// Starts the sink on its own thread; returns once it listens.
    pub(crate) fn start() -> anyhow::Result<OwnSink> {
        OwnSink::start_with(&[])
    }

    /// Starts the sink with more of `sink`'s flags (`--latency 5ms`), as [`OwnSink::start`].
    pub(crate) fn start_with(flags: &[&str]) -> anyhow::Result<OwnSink> {
        use clap::Parser;
        let args = outbox_sink::SinkArgs::try_parse_from(
            ["sink", "--listen", "127.0.0.1:0"]
                .iter()
                .chain(flags)
                .copied(),
        )?;
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("bench-sink".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = address_tx.send(Err(err));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                        Ok(listener) => listener,
                        Err(err) => {
                            let _ = address_tx.send(Err(err));
                            return;
                        }
                    };
                    let _ = address_tx.send(listener.local_addr());
                    let _ = outbox_sink::serve(listener, args, std::future::pending()).await;
                });
            })?;
        let address = address_rx.recv().context("the sink thread died")??;
        Ok(OwnSink {
            base: format!("http://{address}"),
        })
    }

    /// Its counters (`GET`, read as [`crate::drain::SinkCounters`]).
    pub(crate) fn stats_url(&self) -> String {
        format!("{}/stats", self.base)
    }

    /// Its record of each delivery (`GET`, a JSON array in arrival order).
    pub(crate) fn records_url(&self) -> String {
        format!("{}/_sink/records", self.base)
    }

    /// Clears its records and counters (`POST`).
    pub(crate) fn reset_url(&self) -> String {
        format!("{}/_sink/reset", self.base)
    }

    /// The benchmark destination, delivering to this sink with the benchmark's
    /// destination bound ([`DESTINATION_BOUND`]).
    pub(crate) fn destination(&self) -> DestinationSettings {
        DestinationSettings {
            url: format!("{}/hook", self.base),
            max_in_flight: DESTINATION_BOUND,
        }
    }
}
