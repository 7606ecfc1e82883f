//! Is a cell complete? A cell is complete when its brackets are closed outside strings, chars
//! and comments; an empty line ends any cell. Shared by the REPL's multi-line editing, its
//! reading of piped input, and the kernel's `is_complete_request`.

/// What more a cell needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completeness {
    Complete,
    /// Open brackets, string or comment: read another line.
    Incomplete,
    /// A closing bracket without its opener: submit it and let rustc say why.
    Invalid,
}

pub fn completeness(src: &str) -> Completeness {
    if src.ends_with("\n\n") {
        return Completeness::Complete;
    }
    let b = src.as_bytes();
    let mut stack: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 1;
                i += 2;
                while depth > 0 {
                    if i + 1 >= b.len() {
                        return Completeness::Incomplete;
                    }
                    match (b[i], b[i + 1]) {
                        (b'/', b'*') => (depth, i) = (depth + 1, i + 2),
                        (b'*', b'/') => (depth, i) = (depth - 1, i + 2),
                        _ => i += 1,
                    }
                }
                continue;
            }
            b'r' if matches!(b.get(i + 1), Some(b'"') | Some(b'#')) && (i == 0 || !is_ident(b[i - 1])) => {
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                match find(&b[j + 1..], &close) {
                    Some(k) => i = j + 1 + k + close.len(),
                    None => return Completeness::Incomplete,
                }
                continue;
            }
            b'"' => {
                i += 1;
                loop {
                    match b.get(i) {
                        None => return Completeness::Incomplete,
                        Some(b'\\') => i += 2,
                        Some(b'"') => break,
                        _ => i += 1,
                    }
                }
            }
            // A char literal ('a', '\n', '\u{..}'), not a lifetime ('a).
            b'\'' => {
                if b.get(i + 1) == Some(&b'\\') {
                    if let Some(k) = b[i + 2..].iter().position(|&c| c == b'\'') {
                        i += 2 + k;
                    }
                } else if let Some(len) =
                    std::str::from_utf8(&b[i + 1..]).ok().and_then(|s| s.chars().next()).map(char::len_utf8)
                {
                    if b.get(i + 1 + len) == Some(&b'\'') {
                        i += 1 + len;
                    }
                }
            }
            c @ (b'(' | b'[' | b'{') => stack.push(c),
            c @ (b')' | b']' | b'}') => {
                let open = match c {
                    b')' => b'(',
                    b']' => b'[',
                    _ => b'{',
                };
                if stack.pop() != Some(open) {
                    return Completeness::Invalid;
                }
            }
            _ => {}
        }
        i += 1;
    }
    if stack.is_empty() {
        Completeness::Complete
    } else {
        Completeness::Incomplete
    }
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::{completeness, Completeness::*};

    #[test]
    fn brackets_strings_and_comments() {
        assert_eq!(completeness("let x = 1;"), Complete);
        assert_eq!(completeness("fn f() {"), Incomplete);
        assert_eq!(completeness("fn f() {\n  1\n}"), Complete);
        assert_eq!(completeness("let s = \"{\";"), Complete);
        assert_eq!(completeness("let s = \"abc"), Incomplete);
        assert_eq!(completeness("let s = r#\"{\"#;"), Complete);
        assert_eq!(completeness("let c = '{';"), Complete);
        assert_eq!(completeness("fn f<'a>(x: &'a str) -> &'a str { x }"), Complete);
        assert_eq!(completeness("// {\nlet x = 1;"), Complete);
        assert_eq!(completeness("/* { */ let x = 1;"), Complete);
        assert_eq!(completeness("/* unterminated"), Incomplete);
        assert_eq!(completeness("let v = vec![1,\n"), Incomplete);
        assert_eq!(completeness("fn f() {\n\n"), Complete);
        assert_eq!(completeness("let x = 1);"), Invalid);
        assert_eq!(completeness("let c = '\\'';"), Complete);
    }
}
