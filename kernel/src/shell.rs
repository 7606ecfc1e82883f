//! The shell channel's requests in order, read as they come by a task of their own (so that
//! what waits can be seen): a request with a bad signature is logged and dropped, never run;
//! a widget's state updates that queued one after another while the session was busy are
//! merged into one (later values win), the debounce of a drag.

use std::collections::VecDeque;

use jupyter_protocol::{JupyterMessage, JupyterMessageContent};
use jupyter_zmq_client as zmq;
use tokio::sync::mpsc;

use crate::comms;

type Read = std::result::Result<JupyterMessage, String>;

/// The shell's requests, read ahead.
pub struct Queue {
    incoming: mpsc::UnboundedReceiver<Read>,
    /// Read ahead while merging, not merged: next in line.
    held: VecDeque<Read>,
}

impl Queue {
    /// Starts reading `conn`.
    pub fn start<S: zeromq::SocketRecv + Send + 'static>(mut conn: zmq::Connection<S>) -> Queue {
        let (tx, incoming) = mpsc::unbounded_channel();
        tokio::spawn(async move { while tx.send(read_shell(&mut conn).await).is_ok() {} });
        Queue { incoming, held: VecDeque::new() }
    }

    /// The next request to handle, with the requests merged into it; `None` when the channel
    /// is gone.
    pub async fn next(&mut self) -> Option<(JupyterMessage, Vec<JupyterMessage>)> {
        loop {
            let next = match self.held.pop_front() {
                Some(m) => m,
                None => self.incoming.recv().await?,
            };
            let mut msg = match next {
                Ok(m) => m,
                // A bad or missing signature (or a malformed message): never run it.
                Err(e) => {
                    eprintln!("eager-kernel: dropped a shell message: {e}");
                    continue;
                }
            };
            let mut merged = Vec::new();
            if let Some(id) = comms::update_of(&msg).map(String::from) {
                while self.held.is_empty() {
                    match self.incoming.try_recv() {
                        Ok(Ok(later)) if comms::update_of(&later) == Some(id.as_str()) => {
                            comms::merge_update(&mut msg, &later);
                            merged.push(later);
                        }
                        Ok(other) => self.held.push_back(other),
                        Err(_) => break,
                    }
                }
            }
            return Some((msg, merged));
        }
    }
}

/// Reads a shell request as `Connection::read` does (the signature checked, a bad one an
/// error), first giving a `history_request` the fields jupyter_client may leave out, as IPython
/// reads them: a search without `n` returns every match, without `unique` repeats included.
/// (The protocol crate requires them all: otherwise such a request would go unanswered.)
async fn read_shell<S: zeromq::SocketRecv>(
    conn: &mut zmq::Connection<S>,
) -> std::result::Result<JupyterMessage, String> {
    let parts = conn.socket.recv().await.map_err(|e| e.to_string())?;
    let raw = zmq::RawMessage::from_multipart(parts, &conn.mac).map_err(|e| e.to_string())?;
    let json =
        |i: usize| serde_json::from_slice::<serde_json::Value>(&raw.jparts[i]).map_err(|e| e.to_string());
    let header: jupyter_protocol::Header =
        serde_json::from_slice(&raw.jparts[0]).map_err(|e| e.to_string())?;
    let mut content = json(3)?;
    if header.msg_type == "history_request" {
        if let Some(fields) = content.as_object_mut() {
            for (name, value) in [("output", false.into()), ("raw", true.into()), ("unique", false.into())] {
                fields.entry(name).or_insert(value);
            }
            if fields.get("n").is_none_or(serde_json::Value::is_null) {
                fields.insert("n".into(), i32::MAX.into());
            }
        }
    }
    let content = JupyterMessageContent::from_type_and_content(&header.msg_type, content)
        .map_err(|e| format!("{}: {e}", header.msg_type))?;
    Ok(JupyterMessage {
        zmq_identities: raw.zmq_identities,
        parent_header: serde_json::from_slice(&raw.jparts[1]).ok(),
        metadata: json(2)?,
        content,
        buffers: raw.jparts[4..].to_vec(),
        channel: None,
        header,
    })
}
