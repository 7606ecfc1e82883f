//! The kernel's input history, as IPython answers `history_request`: the last `n` inputs, a
//! range of them, or a glob search (with `unique`), with or without their outputs' text.

use jupyter_protocol::{HistoryEntry, HistoryRequest};

/// The entries of `history` ((execution count, input, text of the result)) that `req` asks for.
pub fn entries(history: &[(usize, String, String)], req: &HistoryRequest) -> Vec<HistoryEntry> {
    let output =
        matches!(req, HistoryRequest::Tail { output: true, .. } | HistoryRequest::Range { output: true, .. });
    let entry = |(n, code, out): &(usize, String, String)| {
        if output {
            HistoryEntry::InputOutput(1, *n, (code.clone(), out.clone()))
        } else {
            HistoryEntry::Input(1, *n, code.clone())
        }
    };
    match req {
        HistoryRequest::Tail { n, .. } => {
            let skip = history.len().saturating_sub((*n).max(0) as usize);
            history.iter().skip(skip).map(entry).collect()
        }
        HistoryRequest::Range { start, stop, .. } => {
            history.iter().filter(|(n, ..)| (*n as i32) >= *start && (*n as i32) < *stop).map(entry).collect()
        }
        HistoryRequest::Search { pattern, n, unique, .. } => {
            // As IPython: a glob over the whole input, the last `n` matches, with `unique`
            // each input once (its latest run).
            let mut hits: Vec<&(usize, String, String)> =
                history.iter().filter(|(_, c, _)| glob_matches(pattern, c)).collect();
            if *unique {
                let mut seen = std::collections::HashSet::new();
                hits.reverse();
                hits.retain(|(_, c, _)| seen.insert(c.as_str()));
                hits.reverse();
            }
            let skip = hits.len().saturating_sub((*n).max(0) as usize);
            hits.into_iter().skip(skip).map(entry).collect()
        }
    }
}

/// Whether `text` matches the glob `pattern` as a whole (`*` any run, `?` any one character),
/// as IPython's history search matches.
fn glob_matches(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Where a `*` was last seen in the pattern, and the text position it was tried at.
    let (mut pi, mut ti, mut star): (usize, usize, Option<(usize, usize)>) = (0, 0, None);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            (pi, ti) = (pi + 1, ti + 1);
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            // Let the last `*` take one more character.
            (pi, ti) = (sp + 1, st + 1);
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_globs_match_the_whole_input() {
        assert!(glob_matches("*1 + 2*", "1 + 2 + 3"));
        assert!(glob_matches("let ?*", "let x = 1;"));
        assert!(!glob_matches("1 + 2", "1 + 2 + 3"), "no implied stars");
        assert!(!glob_matches("*z*", "1 + 2 + 3"));
        assert!(glob_matches("a*b*c", "a-b-b-c"));
        assert!(!glob_matches("a*b*c", "a-b-b-d"));
    }
}
