//! Records outcomes in batches. Every worker task hands its completion to the recorder
//! and waits for the answer; the recorder takes whatever has queued up (up to
//! [`MAX_BATCH`]) and writes it with one statement and one commit. Under load the batches
//! grow by themselves, as a group commit does; on an idle system a batch is one row and
//! nothing waits for a timer.
//!
//! A completion that releases an ordered lane also claims the lane's next alert for this
//! dispatcher when it is due (`dispatch::complete_batch_handing_on`), unless shutdown has
//! begun: the answer carries it, and the worker hands it to the claim loop with its own
//! in-flight slot.
//!
//! A failed batch is retried row by row, so one completion the database refuses (a
//! constraint, say) cannot take the outcomes of its neighbours down with it.
//!
//! The two recorders take turns writing ([`TURN_WAIT`]): under load, one gathers what
//! queued up while the other wrote, so the batches are larger and the database does
//! each statement's fixed work (starting its plan, its commit) less often per delivery,
//! and the two no longer insert into the same last pages of the attempts table at once. A recorder whose statement waits on a row another transaction holds (an
//! operator's, the lease sweep's) keeps its turn only for [`TURN_WAIT`]: then the other
//! writes beside it, so one locked row holds up only its own batch.

use outbox_runtime::shutdown::Shutdown;
use outbox_store::dispatch::{self, Completion, Recorded};
use outbox_store::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Mutex};

/// Most completions written by one statement.
pub(crate) const MAX_BATCH: usize = 512;
/// Recorders: they take turns, and the second writes beside a first that is held up.
const RECORDERS: usize = 2;
/// How long a recorder waits for the other's turn to end before it writes beside it.
/// Writing in turns took about a seventh off the database's CPU per delivery in the
/// peers' HTTP drain (docs/performance-log.md#item-24-the-two-recorders-take-turns); a
/// batch's statement takes a few milliseconds, so only a statement held up by a lock
/// lasts this long.
const TURN_WAIT: Duration = Duration::from_millis(50);

type Reply = oneshot::Sender<Result<Recorded, String>>;

/// What the recorder claims as it releases lanes: a lane's next alert, with this lease,
/// until `stop` is set.
#[derive(Clone)]
pub(crate) struct HandOn {
    pub(crate) lease: Duration,
    pub(crate) stop: Shutdown,
}

/// Hands completions to the recorder tasks.
#[derive(Clone)]
pub(crate) struct Recorder {
    queue: mpsc::UnboundedSender<(Completion, Reply)>,
}

impl Recorder {
    /// Starts the recorder tasks on `pool`. They end once every `Recorder` is dropped.
    pub(crate) fn start(pool: PgPool, hand_on: HandOn) -> Recorder {
        let (queue, incoming) = mpsc::unbounded_channel();
        let incoming = Arc::new(Mutex::new(incoming));
        let turn = Arc::new(Mutex::new(()));
        for _ in 0..RECORDERS {
            tokio::spawn(record_batches(
                pool.clone(),
                hand_on.clone(),
                incoming.clone(),
                turn.clone(),
            ));
        }
        Recorder { queue }
    }

    /// Records `done` (fenced); not applied when the claim had been taken over. What the
    /// answer's `next` holds is claimed for this dispatcher: it must be sent or given back.
    pub(crate) async fn record(&self, done: Completion) -> Result<Recorded, String> {
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
    hand_on: HandOn,
    incoming: Arc<Mutex<mpsc::UnboundedReceiver<(Completion, Reply)>>>,
    turn: Arc<Mutex<()>>,
) {
    let mut batch: Vec<(Completion, Reply)> = Vec::with_capacity(MAX_BATCH);
    loop {
        // The turn is taken before gathering, so what queues up while the other recorder
        // writes is this one's batch. Without the turn after `TURN_WAIT` (the other is
        // held up, or idle in its gathering), this one gathers and writes anyway.
        let my_turn = tokio::time::timeout(TURN_WAIT, turn.clone().lock_owned())
            .await
            .ok();
        {
            // One recorder gathers at a time.
            let mut incoming = incoming.lock().await;
            if incoming.recv_many(&mut batch, MAX_BATCH).await == 0 {
                return;
            }
        }
        let (completions, replies): (Vec<Completion>, Vec<Reply>) = batch.drain(..).unzip();
        // Once shutdown has begun nothing new is claimed: a lane's next alert stays due.
        let lease = (!hand_on.stop.is_set()).then_some(hand_on.lease);
        let answers = write(&pool, &completions, lease).await;
        drop(my_turn);
        for (reply, answer) in replies.into_iter().zip(answers) {
            let _ = reply.send(answer);
        }
    }
}

async fn write(
    pool: &PgPool,
    completions: &[Completion],
    hand_on: Option<Duration>,
) -> Vec<Result<Recorded, String>> {
    let batch = match hand_on {
        Some(lease) => dispatch::complete_batch_handing_on(pool, completions, lease).await,
        None => dispatch::complete_batch(pool, completions)
            .await
            .map(|applied| applied.into_iter().map(recorded).collect()),
    };
    match batch {
        Ok(recorded) => recorded.into_iter().map(Ok).collect(),
        Err(err) if completions.len() == 1 => vec![Err(err.to_string())],
        Err(err) => {
            tracing::warn!(error = %err, rows = completions.len(), "recording a batch failed; recording its rows one by one");
            let mut answers = Vec::with_capacity(completions.len());
            for done in completions {
                // One by one without the hand-on: a released lane's next alert is left
                // due for any claim.
                answers.push(
                    dispatch::complete(pool, done)
                        .await
                        .map(recorded)
                        .map_err(|err| err.to_string()),
                );
            }
            answers
        }
    }
}

/// A completion recorded (or not) without claiming anything.
fn recorded(applied: bool) -> Recorded {
    Recorded {
        applied,
        next: Vec::new(),
    }
}
