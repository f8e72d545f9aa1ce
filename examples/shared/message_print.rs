//! How the demo and `scripts/sub` print a NATS message: the subject, the headers wrapped two
//! spaces apart, and the payload's start with its size.

/// Headers and payloads are wrapped or cut at this width.
pub const WIDTH: usize = 100;

/// Prints `msg` and returns its `Kube-Event-Type` header ("" without one).
pub fn print_message(msg: &async_nats::Message) -> String {
    let mut headers: Vec<(String, String)> = msg
        .headers
        .iter()
        .flat_map(|h| h.iter())
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(|v| (name.to_string(), v.as_str().to_owned()))
        })
        .collect();
    headers.sort();
    let event_type = headers
        .iter()
        .find(|(name, _)| name == "Kube-Event-Type")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    println!("{}", msg.subject.as_str());
    let fields: Vec<String> = headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
    for line in wrap(&fields, WIDTH - 4) {
        println!("    {line}");
    }
    let payload = String::from_utf8_lossy(&msg.payload);
    let shown: String = payload.chars().take(WIDTH - 24).collect();
    let more = if shown.len() < payload.len() {
        "…"
    } else {
        ""
    };
    println!("    payload ({} bytes): {shown}{more}", msg.payload.len());
    event_type
}

/// Joins `fields` with two spaces into lines of at most `width` characters (a longer field gets
/// a line of its own).
fn wrap(fields: &[String], width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for field in fields {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 2 + field.chars().count() <= width => {
                line.push_str("  ");
                line.push_str(field);
            }
            _ => lines.push(field.clone()),
        }
    }
    lines
}
