//! [`Worker`]: a session on a thread of its own, started in the background, so that a front
//! end shows its prompt (or answers Jupyter's `kernel_info_request`) at once while evcxr and
//! eager start behind it. Requests queue in order and run once the session is up. The session
//! is a warm one from the session server ([`crate::remote`]) when it can give one, else a
//! [`Session`] started here.

use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use eager::shared::lock;

use crate::engine::{Engine, Interrupter};
use crate::interface::{SessionOptions, StreamSink};
use crate::session::Session;

/// A request run on the session thread.
type Request = Box<dyn FnOnce(&mut dyn Engine) + Send>;

enum Job {
    Run(Request),
    /// Ends the thread, dropping the session (its evcxr child and control socket).
    Stop,
}

/// Where the session stands.
#[derive(Clone)]
enum State {
    Starting,
    Ready(Interrupter),
    Failed(String),
    Ended,
}

/// Sets the state on the session thread's way out, however it leaves (a panic too).
struct OnExit<F: Fn(State)>(F);

impl<F: Fn(State)> Drop for OnExit<F> {
    fn drop(&mut self) {
        (self.0)(State::Ended);
    }
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
            let mut state = lock(&shared.0);
            // A failure stays the answer (the thread's exit comes after it).
            if !(matches!(s, State::Ended) && matches!(*state, State::Failed(_))) {
                *state = s;
            }
            shared.1.notify_all();
        };
        let spawned = std::thread::Builder::new().name("eager-session".into()).spawn(move || {
            let exit = OnExit(set);
            let mut session = match start(&opts, sink) {
                Ok(s) => s,
                // Queued and later jobs are dropped: their callers see the failure.
                Err(e) => return (exit.0)(State::Failed(format!("{e:#}"))),
            };
            (exit.0)(State::Ready(session.interrupter()));
            for job in rx {
                let Job::Run(job) = job else { break };
                // A panic in the engine fails that request; the session goes on.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(session.as_mut())));
            }
        });
        if let Err(e) = spawned {
            *lock(&state.0) = State::Failed(format!("starting the session thread: {e}"));
        }
        Worker { jobs, state }
    }

    fn state(&self) -> State {
        lock(&self.state.0).clone()
    }

    /// Whether the session has started (its cells run without waiting).
    pub fn is_ready(&self) -> bool {
        matches!(self.state(), State::Ready(_))
    }

    /// Waits up to `timeout` for the start: `Some` once it ended (well or not).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Interrupter, String>> {
        let (state, ready) = &*self.state;
        let guard = lock(state);
        let (guard, _) = ready
            .wait_timeout_while(guard, timeout, |s| matches!(s, State::Starting))
            .unwrap_or_else(|p| p.into_inner());
        match &*guard {
            State::Starting => None,
            State::Ready(i) => Some(Ok(i.clone())),
            State::Failed(e) => Some(Err(e.clone())),
            State::Ended => Some(Err("the Rust session ended".into())),
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

    /// Ends the session after the requests queued before this (its cell process and control
    /// socket go with it), waiting up to 10 s.
    pub fn shutdown(&self) {
        if self.jobs.send(Job::Stop).is_ok() {
            let (state, changed) = &*self.state;
            let guard = lock(state);
            let _ = changed.wait_timeout_while(guard, Duration::from_secs(10), |s| {
                !matches!(s, State::Ended | State::Failed(_))
            });
        }
    }

    /// Runs `f` on the session (after the start and every request queued before it) and
    /// returns its result; an error if the session could not start.
    pub fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Engine) -> R + Send + 'static,
    ) -> Result<R, String> {
        let (tx, rx) = mpsc::channel();
        let sent = self.jobs.send(Job::Run(Box::new(move |s: &mut dyn Engine| {
            let _ = tx.send(f(s));
        })));
        match sent.ok().and_then(|_| rx.recv().ok()) {
            Some(r) => Ok(r),
            None => Err(match self.state() {
                State::Failed(e) => format!("the Rust session could not start: {e}"),
                _ => "the Rust session ended".to_string(),
            }),
        }
    }
}

/// A warm session from the session server, or (server off, or it failed: said on stderr) one
/// started here.
fn start(opts: &SessionOptions, sink: StreamSink) -> anyhow::Result<Box<dyn Engine>> {
    if crate::remote::enabled() {
        match crate::remote::connect(opts, sink.clone()) {
            Ok(remote) => return Ok(Box::new(remote)),
            Err(e) => eprintln!("eager: no session from the session server ({e:#}); starting one here"),
        }
    }
    Ok(Box::new(Session::start(opts, sink)?))
}
