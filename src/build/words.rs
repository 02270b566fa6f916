//! Dockerfile words: splitting an instruction's arguments on unquoted
//! blanks, and expanding `$VAR`, `${VAR}`, `${VAR:-word}`, `${VAR:+word}`
//! with quote removal, as Docker's shell-word processing does for ENV,
//! ARG, LABEL, COPY, ADD, WORKDIR, USER, EXPOSE, STOPSIGNAL and FROM.
//! RUN, CMD and ENTRYPOINT are never expanded here (their shell does it).

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WordError {
    #[error("unterminated quote {0} in {1:?}")]
    Unterminated(char, String),
    #[error("unterminated ${{...}} in {0:?}")]
    Brace(String),
    #[error("unsupported substitution {0:?}: husk knows ${{VAR}}, ${{VAR:-word}} and ${{VAR:+word}}")]
    Modifier(String),
    #[error("bad variable name in {0:?}")]
    BadName(String),
}

/// Splits on unquoted, unescaped blanks; quotes and escapes are kept for
/// `expand` to remove.
pub fn split(s: &str, escape: char) -> Result<Vec<String>, WordError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = s.chars();
    let mut in_word = false;
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                cur.push(c);
                if c == escape && q == '"' {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                } else if c == q {
                    quote = None;
                }
            }
            None if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            None => {
                in_word = true;
                cur.push(c);
                if c == escape {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                } else if c == '"' || c == '\'' {
                    quote = Some(c);
                }
            }
        }
    }
    if let Some(q) = quote {
        return Err(WordError::Unterminated(q, s.to_string()));
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// Expands variables from `vars` and removes quotes and escapes. Inside
/// single quotes nothing is expanded; inside double quotes variables are.
pub fn expand(word: &str, vars: &BTreeMap<String, String>, escape: char) -> Result<String, WordError> {
    let chars: Vec<char> = word.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let mut quote: Option<char> = None;
    while i < chars.len() {
        let c = chars[i];
        match (quote, c) {
            (Some('\''), '\'') | (Some('"'), '"') => {
                quote = None;
                i += 1;
            }
            (Some('\''), _) => {
                out.push(c);
                i += 1;
            }
            (None, '\'') | (None, '"') => {
                quote = Some(c);
                i += 1;
            }
            (_, e) if e == escape => {
                // Inside double quotes only `"`, `$` and the escape itself
                // are escaped; elsewhere the escape is kept.
                match chars.get(i + 1) {
                    Some(&n) if quote.is_none() || n == '"' || n == '$' || n == escape => {
                        out.push(n);
                        i += 2;
                    }
                    _ => {
                        out.push(c);
                        i += 1;
                    }
                }
            }
            (_, '$') => {
                let (text, used) = variable(&chars[i + 1..], vars, escape, word)?;
                out.push_str(&text);
                i += 1 + used;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    if let Some(q) = quote {
        return Err(WordError::Unterminated(q, word.to_string()));
    }
    Ok(out)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The value of the variable reference after a `$`, and how many chars it
/// took. A `$` followed by no name stays a `$`.
fn variable(
    rest: &[char],
    vars: &BTreeMap<String, String>,
    escape: char,
    word: &str,
) -> Result<(String, usize), WordError> {
    if rest.first() == Some(&'{') {
        // The matching brace: a default may hold ${...} itself.
        let mut depth = 0;
        let close = rest
            .iter()
            .position(|&c| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .ok_or_else(|| WordError::Brace(word.to_string()))?;
        let inner: String = rest[1..close].iter().collect();
        let name_len = inner.chars().take_while(|&c| is_name_char(c)).count();
        let name = &inner[..name_len];
        if name.is_empty() {
            return Err(WordError::BadName(word.to_string()));
        }
        let value = vars.get(name).filter(|v| !v.is_empty());
        let modifier = &inner[name_len..];
        let text = match modifier {
            "" => vars.get(name).cloned().unwrap_or_default(),
            m if m.starts_with(":-") => match value {
                Some(v) => v.clone(),
                None => expand(&m[2..], vars, escape)?,
            },
            m if m.starts_with(":+") => match value {
                Some(_) => expand(&m[2..], vars, escape)?,
                None => String::new(),
            },
            m => return Err(WordError::Modifier(format!("${{{name}{m}}}"))),
        };
        return Ok((text, close + 1));
    }
    let n = rest.iter().take_while(|&&c| is_name_char(c)).count();
    if n == 0 {
        return Ok(("$".into(), 0));
    }
    let name: String = rest[..n].iter().collect();
    Ok((vars.get(&name).cloned().unwrap_or_default(), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        [("A", "1"), ("EMPTY", ""), ("P", "/usr/bin")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn variables_expand_in_all_documented_forms() {
        let v = vars();
        let e = |s: &str| expand(s, &v, '\\').unwrap();
        assert_eq!(e("$A"), "1");
        assert_eq!(e("${A}x"), "1x");
        assert_eq!(e("${NOPE:-def}"), "def");
        assert_eq!(e("${EMPTY:-def}"), "def");
        assert_eq!(e("${A:-def}"), "1");
        assert_eq!(e("${A:+set}"), "set");
        assert_eq!(e("${NOPE:+set}"), "");
        assert_eq!(e("$P:/bin"), "/usr/bin:/bin");
        assert_eq!(e("'$A'"), "$A");
        assert_eq!(e("\"$A b\""), "1 b");
        assert_eq!(e("\\$A"), "$A");
        assert_eq!(e("a$"), "a$");
        assert_eq!(e("${NOPE:-${A}}"), "1");
        assert!(matches!(expand("${A", &v, '\\'), Err(WordError::Brace(_))));
        assert!(matches!(expand("${A/x/y}", &v, '\\'), Err(WordError::Modifier(_))));
        assert!(matches!(expand("'x", &v, '\\'), Err(WordError::Unterminated('\'', _))));
    }

    #[test]
    fn words_split_on_unquoted_blanks_only() {
        assert_eq!(split("a=1 b=\"x y\"  c='p q'", '\\').unwrap(), vec!["a=1", "b=\"x y\"", "c='p q'"]);
        assert_eq!(split("a\\ b c", '\\').unwrap(), vec!["a\\ b", "c"]);
        assert_eq!(split("a` b c", '`').unwrap(), vec!["a` b", "c"]);
        assert!(split("a \"b", '\\').is_err());
    }
}
