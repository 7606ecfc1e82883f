//! [`Worker`]: a [`Session`] on a thread of its own, started in the background, so that a front
//! end shows its prompt (or answers Jupyter's `kernel_info_request`) at once while evcxr and
//! eager start behind it. Requests queue in order and run once the session is up.

use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use crate::session::{Interrupter, Session, SessionOptions, StreamSink};

type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// Where the session's start stands.
#[derive(Clone)]
enum State {
    Starting,
    Ready(Interrupter),
    Failed(String),
}

/// A handle on the session thread; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Worker {
    jobs: mpsc::Sender<Job>,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl Worker {
    /// Starts the session on its own thread and returns at once.
    pub fn start(opts: SessionOptions, sink: StreamSink) -> Worker {
        let (jobs, rx) = mpsc::channel::<Job>();
        let state = Arc::new((Mutex::new(State::Starting), Condvar::new()));
        let shared = state.clone();
        let set = move |s: State| {
            *shared.0.lock().unwrap_or_else(|p| p.into_inner()) = s;
            shared.1.notify_all();
        };
        let spawned = std::thread::Builder::new().name("eager-session".into()).spawn(move || {
            let mut session = match Session::start(&opts, sink) {
                Ok(s) => s,
                // Queued and later jobs are dropped: their callers see the failure.
                Err(e) => return set(State::Failed(format!("{e:#}"))),
            };
            set(State::Ready(session.interrupter()));
            for job in rx {
                job(&mut session);
            }
        });
        if let Err(e) = spawned {
            *state.0.lock().unwrap_or_else(|p| p.into_inner()) = State::Failed(format!("starting the session thread: {e}"));
        }
        Worker { jobs, state }
    }

    fn state(&self) -> State {
        self.state.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the session has started (its cells run without waiting).
    pub fn is_ready(&self) -> bool {
        matches!(self.state(), State::Ready(_))
    }

    /// Waits up to `timeout` for the start: `Some` once it ended (well or not).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Interrupter, String>> {
        let (lock, ready) = &*self.state;
        let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) =
            ready.wait_timeout_while(guard, timeout, |s| matches!(s, State::Starting)).unwrap_or_else(|p| p.into_inner());
        match &*guard {
            State::Starting => None,
            State::Ready(i) => Some(Ok(i.clone())),
            State::Failed(e) => Some(Err(e.clone())),
        }
    }

    /// Waits for the start; the error says why it failed.
    pub fn wait(&self) -> Result<Interrupter, String> {
        loop {
            if let Some(r) = self.wait_timeout(Duration::from_secs(3600)) {
                return r;
            }
        }
    }

    /// The running cell's interrupter, once the session is up.
    pub fn interrupter(&self) -> Option<Interrupter> {
        match self.state() {
            State::Ready(i) => Some(i),
            _ => None,
        }
    }

    /// Runs `f` on the session (after the start and every request queued before it) and
    /// returns its result; an error if the session could not start.
    pub fn run<R: Send + 'static>(&self, f: impl FnOnce(&mut Session) -> R + Send + 'static) -> Result<R, String> {
        let (tx, rx) = mpsc::channel();
        let sent = self.jobs.send(Box::new(move |s: &mut Session| {
            let _ = tx.send(f(s));
        }));
        match sent.ok().and_then(|_| rx.recv().ok()) {
            Some(r) => Ok(r),
            None => Err(match self.state() {
                State::Failed(e) => format!("the Rust session could not start: {e}"),
                _ => "the Rust session ended".to_string(),
            }),
        }
    }
}
