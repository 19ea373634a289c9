//! Hiding passwords in the connection strings a store shows (in errors, `Display` and
//! `Debug`): a leaf below the locator and every store that takes a URL.

/// `text` with every password it holds replaced by `***`: in a URL, the password of the
/// user info (which ends at the last `@`, so a password holding `/`, `?`, `#` or `@` is
/// hidden whole) and any `password=` query parameter; in a key-value connection string
/// (`host=… password=…`), the `password` value, quoted or not. Used for every URL a store
/// shows in errors, `Display` and `Debug`.
pub(crate) fn redact_url(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return redact_key_values(text);
    };
    let (user_info, host_onwards) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let mut shown = format!("{scheme}://");
    match user_info.map(|info| {
        info.split_once(':')
            .map_or((info, None), |(u, p)| (u, Some(p)))
    }) {
        Some((user, Some(_password))) => shown.push_str(&format!("{user}:***@")),
        Some((user, None)) => shown.push_str(&format!("{user}@")),
        None => {}
    }
    match host_onwards.split_once('?') {
        Some((before, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if name.eq_ignore_ascii_case("password") => {
                        format!("{name}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            shown.push_str(&format!("{before}?{}", query.join("&")));
        }
        None => shown.push_str(host_onwards),
    }
    shown
}

/// A libpq-style `key=value` string with the value of every `password` key replaced by `***`
/// (spaces around `=` allowed; a value in single quotes may hold spaces and `\'`).
fn redact_key_values(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = find_password_key(rest) {
        let after_key = &rest[at + "password".len()..];
        let after_equals = after_key.trim_start();
        let Some(value) = after_equals.strip_prefix('=') else {
            shown.push_str(&rest[..at + "password".len()]);
            rest = after_key;
            continue;
        };
        let value = value.trim_start();
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let close = quoted.char_indices().find(|&(_, c)| {
                let closes = c == '\'' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            });
            close.map_or(value.len(), |(i, _)| i + 2)
        } else {
            value
                .find(|c: char| c.is_ascii_whitespace())
                .unwrap_or(value.len())
        };
        shown.push_str(&rest[..at]);
        shown.push_str("password=***");
        rest = &value[value_len..];
    }
    shown.push_str(rest);
    shown
}

/// The byte offset of the next `password` key: at the start or after whitespace.
fn find_password_key(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let at = from + found;
        if at == 0 || text[..at].ends_with(|c: char| c.is_ascii_whitespace()) {
            return Some(at);
        }
        from = at + "password".len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_show_and_other_urls_stay_whole() {
        for (text, shown) in [
            ("redis://host:6379/0", "redis://host:6379/0"),
            (
                "postgres://u@h/db?application_name=a@b",
                "postgres://u@h/db?application_name=a@b",
            ),
            ("postgres://u:p@ss@h/db", "postgres://u:***@h/db"),
            ("postgres://ü:pässwörd@h/db", "postgres://ü:***@h/db"),
            (
                "postgres://u@h/db?PASSWORD=x&sslmode=disable",
                "postgres://u@h/db?PASSWORD=***&sslmode=disable",
            ),
            (
                "host=h password='a \\' b' dbname=x",
                "host=h password=*** dbname=x",
            ),
            (
                "host=h passwordx=1 mypassword=2",
                "host=h passwordx=1 mypassword=2",
            ),
            ("password=", "password=***"),
            ("", ""),
            ("@", "@"),
            ("://@", "://@"),
        ] {
            assert_eq!(redact_url(text), shown, "{text:?}");
        }
    }
}
