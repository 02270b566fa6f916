//! `.dockerignore`: which context paths COPY and ADD may not see. Patterns
//! are Go `filepath.Match` globs on slash paths relative to the context
//! (`*`, `?`, `[...]`), plus `**` for any number of directories; a
//! pattern that matches a directory excludes everything under it; `!`
//! re-includes; the last matching line wins; `#` lines are comments.

#[derive(Debug, Clone, Default)]
pub struct Ignore {
    /// (excluded-if-matched, pattern components)
    rules: Vec<(bool, Vec<String>)>,
}

impl Ignore {
    pub fn parse(text: &str) -> Ignore {
        let mut rules = Vec::new();
        for line in text.lines() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let (exclude, pat) = match t.strip_prefix('!') {
                Some(p) => (false, p.trim()),
                None => (true, t),
            };
            let comps: Vec<String> =
                pat.split('/').filter(|c| !c.is_empty() && *c != ".").map(str::to_string).collect();
            if comps.is_empty() {
                continue;
            }
            rules.push((exclude, comps));
        }
        Ignore { rules }
    }

    /// Whether the context-relative path `rel` (slash-separated, no
    /// leading slash) is excluded: by a rule matching it or one of its
    /// parent directories.
    pub fn excluded(&self, rel: &str) -> bool {
        let comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
        let mut out = false;
        for (exclude, pat) in &self.rules {
            let hit = (1..=comps.len()).any(|n| matches(pat, &comps[..n]));
            if hit {
                out = *exclude;
            }
        }
        out
    }

    /// Whether a `!` rule may re-include something under an excluded
    /// directory (then the walk must look inside it).
    pub fn has_exceptions(&self) -> bool {
        self.rules.iter().any(|(exclude, _)| !exclude)
    }
}

fn matches(pat: &[String], path: &[&str]) -> bool {
    match pat.first() {
        None => path.is_empty(),
        Some(p) if p == "**" => (0..=path.len()).any(|k| matches(&pat[1..], &path[k..])),
        Some(p) => !path.is_empty() && glob(p.as_bytes(), path[0].as_bytes()) && matches(&pat[1..], &path[1..]),
    }
}

/// One component: `*` (any run), `?` (one byte), `[...]` / `[^...]`
/// classes with ranges, `\` escapes.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some(b'*') => (0..=s.len()).any(|k| glob(&p[1..], &s[k..])),
        Some(b'?') => !s.is_empty() && glob(&p[1..], &s[1..]),
        Some(b'[') => {
            let Some(close) = p.iter().skip(1).position(|&c| c == b']').map(|n| n + 1) else {
                return !s.is_empty() && s[0] == b'[' && glob(&p[1..], &s[1..]);
            };
            if s.is_empty() {
                return false;
            }
            let mut class = &p[1..close];
            let negate = matches!(class.first(), Some(b'^' | b'!'));
            if negate {
                class = &class[1..];
            }
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= class[i] <= s[0] && s[0] <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == s[0];
                    i += 1;
                }
            }
            hit != negate && glob(&p[close + 1..], &s[1..])
        }
        Some(b'\\') if p.len() > 1 => !s.is_empty() && s[0] == p[1] && glob(&p[2..], &s[1..]),
        Some(&c) => !s.is_empty() && s[0] == c && glob(&p[1..], &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_exclude_files_dirs_and_exceptions_reinclude() {
        let ig = Ignore::parse("# c\n*.log\nsecret/\n**/node_modules\n!keep.log\nbuild/*.o\n");
        assert!(ig.excluded("a.log"));
        assert!(!ig.excluded("keep.log"));
        assert!(!ig.excluded("sub/a.log"), "a pattern is anchored at the context root");
        assert!(ig.excluded("secret"));
        assert!(ig.excluded("secret/key"));
        assert!(ig.excluded("x/y/node_modules/z"));
        assert!(ig.excluded("node_modules"));
        assert!(ig.excluded("build/a.o"));
        assert!(!ig.excluded("build/a.c"));
        assert!(!ig.excluded("src/main.rs"));
        assert!(glob(b"[a-c]?", b"bz"));
        assert!(!glob(b"[^a-c]?", b"bz"));
    }
}
