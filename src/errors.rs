//! Printing an error with its causes. Every error type of the workspace says only its own level
//! in `Display` (what and where) and leaves the cause to `source()`, so a message is the chain
//! joined: the programs print it after `error:`, the C ABI hands it to the caller.

/// `err` and its source chain on one line, `a: b: c`; each cause appears once.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut s = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        s.push_str(": ");
        s.push_str(&e.to_string());
        cur = e.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::chain;

    #[derive(Debug, thiserror::Error)]
    #[error("reading x.gguf")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn joins_every_level_once() {
        let e = Outer(std::io::Error::other("disk gone"));
        assert_eq!(chain(&e), "reading x.gguf: disk gone");
    }
}
