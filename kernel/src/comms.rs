//! Jupyter comms in the kernel, as the messaging spec has them: the comms open now (opened by
//! the session's widgets or by a front end) for `comm_info_request`; a session's comm lines
//! turned into `comm_open`/`comm_msg`/`comm_close` on iopub; a front end's comm messages handed
//! to the session when their comm is open (else logged and dropped); and a front end's queued
//! updates of one widget merged into one (the debounce of a drag).

use std::collections::HashMap;

use eager_cell::widgets::{CommKind, CommLine};
use jupyter_protocol::{
    CommClose, CommId, CommInfo, CommMsg, CommOpen, JupyterMessage, JupyterMessageContent,
};
use serde_json::{json, Value};

/// The comms open now: id and target.
#[derive(Default)]
pub struct Comms {
    open: HashMap<String, String>,
}

impl Comms {
    /// A session's comm line as the iopub message to send (a child of `parent`, when a request
    /// runs); notes opens and closes.
    pub fn outgoing(&mut self, line: CommLine, parent: Option<&JupyterMessage>) -> JupyterMessage {
        let data = match line.data {
            Value::Object(m) => m,
            _ => Default::default(),
        };
        let comm_id = CommId(line.comm_id.clone());
        let content: JupyterMessageContent = match line.kind {
            CommKind::Open => {
                let target_name = line.target_name.unwrap_or_default();
                self.open.insert(line.comm_id, target_name.clone());
                CommOpen { comm_id, target_name, data, target_module: None }.into()
            }
            CommKind::Msg => CommMsg { comm_id, data }.into(),
            CommKind::Close => {
                self.open.remove(&line.comm_id);
                CommClose { comm_id, data }.into()
            }
        };
        let mut msg = JupyterMessage::new(content, parent);
        if line.metadata.is_object() {
            msg.metadata = line.metadata;
        }
        msg
    }

    /// The session's request for a front end's comm message, or `None` (logged) when the
    /// message names a comm that is not open. Notes opens and closes.
    pub fn incoming(&mut self, content: &JupyterMessageContent) -> Option<Value> {
        let (kind, id, target, data) = match content {
            JupyterMessageContent::CommOpen(o) => {
                self.open.insert(o.comm_id.0.clone(), o.target_name.clone());
                ("open", &o.comm_id.0, Some(o.target_name.as_str()), &o.data)
            }
            JupyterMessageContent::CommMsg(m) => ("msg", &m.comm_id.0, None, &m.data),
            JupyterMessageContent::CommClose(c) => ("close", &c.comm_id.0, None, &c.data),
            _ => return None,
        };
        if kind != "open" && !self.open.contains_key(id) {
            eprintln!("eager-kernel: comm_{kind} for comm {id}, which is not open: ignored");
            return None;
        }
        if kind == "close" {
            self.open.remove(id);
        }
        Some(json!({"kind": kind, "comm_id": id, "target_name": target, "data": data}))
    }

    /// The open comms, of `target` only when given (`comm_info_reply`'s `comms`).
    pub fn info(&self, target: Option<&str>) -> HashMap<CommId, CommInfo> {
        self.open
            .iter()
            .filter(|(_, t)| target.is_none_or(|want| want == t.as_str()))
            .map(|(id, t)| (CommId(id.clone()), CommInfo { target_name: t.clone() }))
            .collect()
    }
}

/// The comm id of a widget update (`comm_msg` with method `update`), if `msg` is one.
pub fn update_of(msg: &JupyterMessage) -> Option<&str> {
    match &msg.content {
        JupyterMessageContent::CommMsg(m)
            if m.data.get("method").and_then(Value::as_str) == Some("update") =>
        {
            Some(&m.comm_id.0)
        }
        _ => None,
    }
}

/// Folds `later`'s state update into `msg`'s (both updates of one comm): later values win.
pub fn merge_update(msg: &mut JupyterMessage, later: &JupyterMessage) {
    let (JupyterMessageContent::CommMsg(m), JupyterMessageContent::CommMsg(l)) =
        (&mut msg.content, &later.content)
    else {
        return;
    };
    let Some(Value::Object(newer)) = l.data.get("state") else { return };
    if let Some(Value::Object(state)) = m.data.get_mut("state") {
        for (k, v) in newer {
            state.insert(k.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comm_msg(id: &str, state: Value) -> JupyterMessage {
        let data = json!({"method": "update", "state": state, "buffer_paths": []});
        JupyterMessage::new(
            JupyterMessageContent::CommMsg(CommMsg {
                comm_id: CommId(id.into()),
                data: data.as_object().unwrap().clone(),
            }),
            None,
        )
    }

    #[test]
    fn opens_are_listed_by_target_and_closes_forgotten() {
        let mut comms = Comms::default();
        let parent = comm_msg("p", json!({}));
        let open = CommLine {
            kind: CommKind::Open,
            comm_id: "w1".into(),
            target_name: Some("jupyter.widget".into()),
            data: json!({"state": {}}),
            metadata: json!({"version": "2.1.0"}),
        };
        let msg = comms.outgoing(open, Some(&parent));
        assert_eq!(msg.metadata["version"], "2.1.0");
        assert_eq!(comms.info(Some("jupyter.widget")).len(), 1);
        assert_eq!(comms.info(Some("other")).len(), 0);
        assert!(comms.incoming(&comm_msg("w1", json!({"value": 1})).content).is_some());
        assert!(comms.incoming(&comm_msg("nope", json!({"value": 1})).content).is_none(), "not open");
        let close = JupyterMessageContent::CommClose(CommClose {
            comm_id: CommId("w1".into()),
            data: Default::default(),
        });
        assert_eq!(comms.incoming(&close).unwrap()["kind"], "close");
        assert!(comms.info(None).is_empty());
    }

    #[test]
    fn queued_updates_of_one_widget_merge_with_later_values_winning() {
        let mut first = comm_msg("w", json!({"value": 1, "other": true}));
        let later = comm_msg("w", json!({"value": 9}));
        assert_eq!(update_of(&later), Some("w"));
        merge_update(&mut first, &later);
        let JupyterMessageContent::CommMsg(m) = &first.content else { unreachable!() };
        assert_eq!(m.data["state"], json!({"value": 9, "other": true}));
    }
}
