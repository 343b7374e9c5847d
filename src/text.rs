//! Small text helpers for the messages and summaries quantir prints.

/// `items` joined with ", ", or `none` when there are none.
pub fn list_or<S: AsRef<str>>(items: &[S], none: &str) -> String {
    if items.is_empty() {
        none.to_string()
    } else {
        items.iter().map(AsRef::as_ref).collect::<Vec<&str>>().join(", ")
    }
}

/// "; N {what} (first key: why, …)" for the (key, why) pairs `items` — only the first is
/// named, the others counted — or nothing when there are none.
pub fn first_of(items: &[(String, String)], what: &str) -> String {
    match items {
        [] => String::new(),
        [(k, why)] => format!("; 1 {what} ({k}: {why})"),
        [(k, why), ..] => format!("; {} {what} ({k}: {why}, …)", items.len()),
    }
}

/// A count map as "3 onnx.Conv, 1 onnx.MatMul", or `none` when empty.
pub fn counts<K: std::fmt::Display, V: std::fmt::Display>(map: impl IntoIterator<Item = (K, V)>, none: &str) -> String {
    let items: Vec<String> = map.into_iter().map(|(k, v)| format!("{v} {k}")).collect();
    list_or(&items, none)
}

/// An error and its causes on one line, each said once: quantir's errors already spell out
/// their source in their own message (`{path}: cannot write: {source}`), so a cause whose text
/// is there is not repeated.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        cause = c.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::first_of;

    #[test]
    fn the_first_of_many_is_named_and_the_rest_counted() {
        let items = |n: usize| -> Vec<(String, String)> { (0..n).map(|i| (format!("k{i}"), "why".into())).collect() };
        assert_eq!(first_of(&items(0), "left"), "");
        assert_eq!(first_of(&items(1), "left"), "; 1 left (k0: why)");
        assert_eq!(first_of(&items(3), "left"), "; 3 left (k0: why, …)");
    }
}
