//! The top-level statements of a PTX module as rustc's NVPTX backend writes it: the header
//! (`.version`, `.target`, `.address_size`), then declarations ending in `;` and definitions whose
//! body is a `{` .. `}` pair on lines of their own. Read by `build.rs` (`build/merge.rs`, the
//! device units' modules merged into one) and by the library (`embedded`, each kernel cut out
//! into a module of its own).

/// One top-level PTX statement: a declaration ending in `;` or a definition ending in `}`.
pub struct Item<'a> {
    /// The statement, from its first line to its closing `;` or `}` line, newline included.
    pub text: &'a str,
    /// Whether it has a body (`{ .. }` on lines of its own): a function, a kernel.
    pub has_body: bool,
}

/// The module header (`.version`, `.target`, `.address_size`) and the top-level items that follow
/// it. Comments between items are dropped; those inside bodies are kept.
pub fn split(ptx: &str) -> Result<(&str, Vec<Item<'_>>), String> {
    let header_end = ptx
        .find(".address_size")
        .and_then(|i| ptx[i..].find('\n').map(|j| i + j + 1))
        .ok_or("no .address_size line")?;
    let (header, rest) = ptx.split_at(header_end);
    let mut items = Vec::new();
    let mut depth = 0i64;
    let mut start: Option<usize> = None;
    let mut has_body = false;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        let line_start = offset;
        offset += line.len();
        let trimmed = line.trim();
        if start.is_none() {
            if trimmed.is_empty() || trimmed.starts_with("//") {
                continue;
            }
            start = Some(line_start);
            has_body = false;
        }
        let opens = trimmed.matches('{').count() as i64;
        let closes = trimmed.matches('}').count() as i64;
        // A body is a `{` alone on its line; braces inside a line are initialisers (`= {..};`).
        if trimmed == "{" {
            has_body = true;
        }
        depth += opens - closes;
        if depth < 0 {
            return Err("unbalanced `}`".into());
        }
        if depth == 0 && (trimmed.ends_with(';') || (has_body && trimmed == "}")) {
            let begin = start.take().unwrap();
            items.push(Item {
                text: &rest[begin..offset],
                has_body,
            });
        }
    }
    if start.is_some() {
        return Err("the module ends inside a statement".into());
    }
    Ok((header, items))
}

/// An item's text without its comments (`// callseq 40`, which count the module's calls), the
/// form two units' copies of one function are compared in.
pub fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.split_once("//").map_or(line, |(code, _)| code).trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The name a top-level item declares or defines: the first word that is not a directive, a
/// number or a parameter list (`.func (.param .b32 r) name(`, `.visible .global .align 4 .b8
/// name[4] = {..};`).
pub fn defined_name(text: &str) -> Option<&str> {
    let mut rest = text.trim_start();
    loop {
        rest = rest.trim_start();
        if rest.starts_with('.') {
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '(')
                .unwrap_or(rest.len());
            rest = &rest[end..];
        } else if rest.starts_with('(') {
            rest = &rest[rest.find(')')? + 1..];
        } else if rest.starts_with(|c: char| c.is_ascii_digit()) {
            let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            rest = &rest[end..];
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
                .unwrap_or(rest.len());
            return (end > 0).then(|| &rest[..end]);
        }
    }
}
