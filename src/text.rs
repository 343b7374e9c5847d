//! Small text helpers for the messages and summaries quantir prints.

/// `items` joined with ", ", or `none` when there are none.
pub fn list_or<S: AsRef<str>>(items: &[S], none: &str) -> String {
    if items.is_empty() {
        none.to_string()
    } else {
        items.iter().map(AsRef::as_ref).collect::<Vec<&str>>().join(", ")
    }
}

/// A count map as "3 onnx.Conv, 1 onnx.MatMul", or `none` when empty.
pub fn counts<K: std::fmt::Display, V: std::fmt::Display>(map: impl IntoIterator<Item = (K, V)>, none: &str) -> String {
    let items: Vec<String> = map.into_iter().map(|(k, v)| format!("{v} {k}")).collect();
    list_or(&items, none)
}
