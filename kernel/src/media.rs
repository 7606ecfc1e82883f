//! How outputs travel as Jupyter messages: a value per MIME type as the protocol's media (JSON
//! types as JSON), a live display as `display_data` then `update_display_data`, and an output
//! as nbformat writes it (a widget callback's) as its iopub message.

use jupyter_protocol::{
    DisplayData, ErrorOutput, JupyterMessageContent, Media, MediaType, StreamContent, Transient,
    UpdateDisplayData,
};

/// A cell's live display line as Jupyter's display handles: `display_data` with the id in
/// `transient`, then `update_display_data` (an empty update empties it: a finished heartbeat).
pub fn live_display(d: eager_cell::DisplayLine) -> JupyterMessageContent {
    let media = Media::new(d.data.into_iter().map(|(mime, v)| media_type(&mime, v)).collect());
    if d.update {
        UpdateDisplayData::new(media, &d.id).into()
    } else {
        DisplayData { transient: Some(Transient { display_id: Some(d.id) }), ..DisplayData::new(media) }
            .into()
    }
}

/// A value of type `mime` as the protocol's media.
pub fn media_type(mime: &str, v: String) -> MediaType {
    match mime {
        "text/plain" => MediaType::Plain(v),
        "text/html" => MediaType::Html(v),
        "image/svg+xml" => MediaType::Svg(v),
        "image/png" => MediaType::Png(v),
        "text/markdown" => MediaType::Markdown(v),
        // A widget's view and other JSON types go as JSON, not as a string of it.
        other if other.ends_with("json") => {
            let value = serde_json::from_str(&v).unwrap_or(serde_json::Value::String(v));
            MediaType::Other((other.to_string(), value))
        }
        other => MediaType::Other((other.to_string(), serde_json::Value::String(v))),
    }
}

/// An output as nbformat writes it (what a widget callback printed or showed) as the iopub
/// message that carries it.
pub fn output_message(o: &serde_json::Value) -> Option<JupyterMessageContent> {
    let text = |k: &str| o[k].as_str().unwrap_or_default().to_string();
    Some(match o["output_type"].as_str()? {
        "stream" if o["name"] == "stderr" => StreamContent::stderr(&text("text")).into(),
        "stream" => StreamContent::stdout(&text("text")).into(),
        "error" => ErrorOutput {
            ename: text("ename"),
            evalue: text("evalue"),
            traceback: serde_json::from_value(o["traceback"].clone()).unwrap_or_default(),
        }
        .into(),
        _ => {
            let data = o["data"].as_object()?;
            let media = data
                .iter()
                .map(|(mime, v)| match v {
                    serde_json::Value::String(s) => media_type(mime, s.clone()),
                    other => MediaType::Other((mime.clone(), other.clone())),
                })
                .collect();
            DisplayData::new(Media::new(media)).into()
        }
    })
}
