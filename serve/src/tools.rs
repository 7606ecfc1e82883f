//! Tool calls, as OpenAI's chat API and vLLM define them: the `tools` a request declares go to
//! the checkpoint's chat template; `tool_choice: "required"` or a named function holds the reply
//! to a call's JSON (the function's name and its `parameters` schema) through structured output,
//! and the reply then carries `tool_calls` with `finish_reason: "tool_calls"`. `"auto"` (the
//! default when tools are given) needs a parser of the model's own call syntax, which vLLM also
//! asks for on its command line (`--tool-call-parser`): here it is a 400, as there without one.

use serde_json::{json, Value};

use crate::openai::ApiError;
use crate::structured::Constraint;

/// How the reply is held to the tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolMode {
    /// Some declared function is called: the reply is `{"name": …, "arguments": {…}}`.
    Required,
    /// This function is called: the reply is its arguments.
    Named(String),
}

/// The tools' checks and what they ask of the output: `None` when no call is forced
/// (`tool_choice` `"none"`, or no tools).
pub fn tool_choice(
    tools: Option<&Value>,
    choice: Option<&Value>,
) -> Result<Option<(ToolMode, Constraint)>, ApiError> {
    let tools: &[Value] = match tools {
        None | Some(Value::Null) => &[],
        Some(Value::Array(t)) => t,
        Some(other) => return Err(ApiError::invalid("tools", format!("tools must be a list, got {other}"))),
    };
    let mut functions = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let f = t.get("function");
        let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
        match (t.get("type").and_then(Value::as_str), name) {
            (Some("function"), Some(name)) if !name.is_empty() => {
                let params =
                    f.and_then(|f| f.get("parameters")).cloned().unwrap_or(json!({"type": "object"}));
                if !params.is_object() {
                    return Err(ApiError::invalid(
                        &format!("tools[{i}].function.parameters"),
                        "a function's parameters must be a JSON schema object",
                    ));
                }
                functions.push((name.to_string(), params));
            }
            _ => {
                return Err(ApiError::invalid(
                    &format!("tools[{i}]"),
                    "a tool is {\"type\": \"function\", \"function\": {\"name\": …, \"parameters\": {…}}}",
                ))
            }
        }
    }
    let call = |name: &str, params: &Value| {
        json!({"type": "object", "properties": {"name": {"const": name}, "arguments": params},
               "required": ["name", "arguments"], "additionalProperties": false})
    };
    match choice {
        Some(Value::String(s)) if s == "none" => Ok(None),
        None if functions.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "required" && !functions.is_empty() => {
            let any: Vec<Value> = functions.iter().map(|(n, p)| call(n, p)).collect();
            Ok(Some((ToolMode::Required, Constraint::JsonSchema(json!({"anyOf": any})))))
        }
        Some(c @ Value::Object(_)) if c.get("type").and_then(Value::as_str) == Some("function") => {
            let name = c.get("function").and_then(|f| f.get("name")).and_then(Value::as_str).unwrap_or("");
            match functions.iter().find(|(n, _)| n == name) {
                Some((n, p)) => Ok(Some((ToolMode::Named(n.clone()), Constraint::JsonSchema(p.clone())))),
                None => Err(ApiError::invalid("tool_choice", format!("tool_choice names `{name}`, which no tool declares"))),
            }
        }
        None | Some(Value::String(_)) if !functions.is_empty() => Err(ApiError::invalid(
            "tool_choice",
            "tool_choice \"auto\" (the default with tools) needs a parser of the model's own tool-call syntax, \
             which this server has not: send \"required\", a named function or \"none\"",
        )),
        Some(c) => Err(ApiError::invalid(
            "tool_choice",
            format!("tool_choice must be \"none\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": …}}}} with tools declared, got {c}"),
        )),
        None => Ok(None),
    }
}

/// The `tool_calls` of a reply `text` made under `mode`, with `id` as the call's id; `None`
/// when the text is not a complete call (the reply ran out of tokens).
pub fn tool_calls(mode: &ToolMode, text: &str, id: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(text).ok()?;
    let (name, arguments) = match mode {
        ToolMode::Required => (v.get("name")?.as_str()?.to_string(), v.get("arguments")?.clone()),
        ToolMode::Named(n) => (n.clone(), v),
    };
    Some(json!([{"id": id, "type": "function",
                 "function": {"name": name, "arguments": serde_json::to_string(&arguments).ok()?}}]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
               {"type": "function", "function": {"name": "now"}}])
    }

    #[test]
    fn choices_give_their_constraints_and_auto_is_refused() {
        let t = tools();
        assert_eq!(tool_choice(Some(&t), Some(&json!("none"))).expect("none"), None);
        assert_eq!(tool_choice(None, None).expect("no tools"), None);
        let (mode, c) = tool_choice(Some(&t), Some(&json!("required"))).expect("required").expect("a call");
        assert_eq!(mode, ToolMode::Required);
        let Constraint::JsonSchema(s) = c else { panic!("a schema") };
        assert_eq!(s["anyOf"][1]["properties"]["name"]["const"], "now");
        assert_eq!(s["anyOf"][1]["properties"]["arguments"], json!({"type": "object"}));
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let (mode, c) = tool_choice(Some(&t), Some(&named)).expect("named").expect("a call");
        assert_eq!(mode, ToolMode::Named("get_weather".into()));
        assert_eq!(c, Constraint::JsonSchema(t[0]["function"]["parameters"].clone()));
        for (tools, choice, param) in [
            (Some(t.clone()), None, "tool_choice"),
            (Some(t.clone()), Some(json!("auto")), "tool_choice"),
            (Some(t.clone()), Some(json!({"type": "function", "function": {"name": "nope"}})), "tool_choice"),
            (None, Some(json!("required")), "tool_choice"),
            (Some(json!([{"type": "retrieval"}])), Some(json!("required")), "tools[0]"),
            (Some(json!({"a": 1})), None, "tools"),
        ] {
            let e = tool_choice(tools.as_ref(), choice.as_ref()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{tools:?} {choice:?}");
        }
    }

    #[test]
    fn a_complete_reply_becomes_a_call_and_a_cut_one_does_not() {
        let calls =
            tool_calls(&ToolMode::Required, r#"{"name":"now","arguments":{}}"#, "c1").expect("a call");
        assert_eq!(
            calls,
            json!([{"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}])
        );
        let calls = tool_calls(&ToolMode::Named("f".into()), r#"{"city":"Oslo"}"#, "c2").expect("a call");
        assert_eq!(calls[0]["function"]["arguments"], r#"{"city":"Oslo"}"#);
        assert_eq!(tool_calls(&ToolMode::Named("f".into()), r#"{"city":"Os"#, "c3"), None);
    }
}
