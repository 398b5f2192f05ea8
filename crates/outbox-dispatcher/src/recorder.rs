//! Records outcomes in batches. Every worker task hands its completion to the recorder
//! and waits for the answer; the recorder takes whatever has queued up (up to
//! [`MAX_BATCH`]) and writes it with one statement and one commit. Under load the batches
//! grow by themselves, as a group commit does; on an idle system a batch is one row and
//! nothing waits for a timer.
//!
//! A failed batch is retried row by row, so one completion the database refuses (a
//! constraint, say) cannot take the outcomes of its neighbours down with it.

use outbox_store::dispatch::{self, Completion};
use outbox_store::PgPool;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Mutex};

/// Most completions written by one statement.
pub(crate) const MAX_BATCH: usize = 512;
/// Batches written at once: one can commit while the next is being built.
const RECORDERS: usize = 2;

type Reply = oneshot::Sender<Result<bool, String>>;

/// Hands completions to the recorder tasks.
#[derive(Clone)]
pub(crate) struct Recorder {
    queue: mpsc::UnboundedSender<(Completion, Reply)>,
}

impl Recorder {
    /// Starts the recorder tasks on `pool`. They end once every `Recorder` is dropped.
    pub(crate) fn start(pool: PgPool) -> Recorder {
        let (queue, incoming) = mpsc::unbounded_channel();
        let incoming = Arc::new(Mutex::new(incoming));
        for _ in 0..RECORDERS {
            tokio::spawn(record_batches(pool.clone(), incoming.clone()));
        }
        Recorder { queue }
    }

    /// Records `done` (fenced); `Ok(false)` when the claim had been taken over.
    pub(crate) async fn record(&self, done: Completion) -> Result<bool, String> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((done, reply))
            .map_err(|_| "the recorder has stopped".to_owned())?;
        answer
            .await
            .map_err(|_| "the recorder dropped the completion".to_owned())?
    }
}

async fn record_batches(
    pool: PgPool,
    incoming: Arc<Mutex<mpsc::UnboundedReceiver<(Completion, Reply)>>>,
) {
    let mut batch: Vec<(Completion, Reply)> = Vec::with_capacity(MAX_BATCH);
    loop {
        {
            // One recorder gathers at a time; the other may be committing meanwhile.
            let mut incoming = incoming.lock().await;
            if incoming.recv_many(&mut batch, MAX_BATCH).await == 0 {
                return;
            }
        }
        let (completions, replies): (Vec<Completion>, Vec<Reply>) = batch.drain(..).unzip();
        let answers = write(&pool, &completions).await;
        for (reply, answer) in replies.into_iter().zip(answers) {
            let _ = reply.send(answer);
        }
    }
}

async fn write(pool: &PgPool, completions: &[Completion]) -> Vec<Result<bool, String>> {
    match dispatch::complete_batch(pool, completions).await {
        Ok(applied) => applied.into_iter().map(Ok).collect(),
        Err(err) if completions.len() == 1 => vec![Err(err.to_string())],
        Err(err) => {
            tracing::warn!(error = %err, rows = completions.len(), "recording a batch failed; recording its rows one by one");
            let mut answers = Vec::with_capacity(completions.len());
            for done in completions {
                answers.push(
                    dispatch::complete(pool, done)
                        .await
                        .map_err(|err| err.to_string()),
                );
            }
            answers
        }
    }
}
