//! Passwords are never printed (contract X4): the stores' messages already show locators
//! with `***`; as a second guard, every message `idem` prints (stderr) has the locator's
//! passwords replaced too. Standard output (records) is left as the store holds it: no
//! command prints the locator there.

/// The passwords in a locator: the URL's user-info password and any `password=` query
/// parameter's value.
pub fn of(locator: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Some((_, rest)) = locator.split_once("://") {
        // The user info ends at the last `@` (a password may hold `/`, `?`, `#` or `@`).
        if let Some(at) = rest.rfind('@') {
            if let Some((_, password)) = rest[..at].split_once(':') {
                found.push(password.to_owned());
            }
        }
        if let Some((_, query)) = rest.split_once('?') {
            for pair in query.split('&') {
                if let Some((name, value)) = pair.split_once('=') {
                    if name.eq_ignore_ascii_case("password") {
                        found.push(value.to_owned());
                    }
                }
            }
        }
    }
    found.retain(|p| !p.is_empty() && p != "***");
    found
}

/// The passwords of every argument that holds a URL with one (the `--store` value, a
/// locator given where a subcommand goes, `--store=URL`), and of `IDEM_STORE`'s value:
/// the secrets to scrub from every message, including clap's, which echo arguments.
pub fn of_command_line(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    store_env: Option<std::ffi::OsString>,
) -> Vec<String> {
    let mut found: Vec<String> = args
        .into_iter()
        .chain(store_env)
        .flat_map(|arg| of(&arg.to_string_lossy()))
        .collect();
    // The longest first: a password that holds another one is replaced whole.
    found.sort_by_key(|p| std::cmp::Reverse(p.len()));
    found.dedup();
    found
}

/// `text` with every secret replaced by `***`.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_owned();
    for secret in secrets {
        text = text.replace(secret.as_str(), "***");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins X4: every password form a locator can carry is found and scrubbed
    #[test]
    fn passwords_are_found_and_scrubbed() {
        assert_eq!(of("postgres://user:secret@127.0.0.1:1/db"), ["secret"]);
        assert_eq!(of("redis://:secret@127.0.0.1:1"), ["secret"]);
        assert_eq!(of("postgres://u:p@ss/w?rd@h/db"), ["p@ss/w?rd"]);
        assert_eq!(
            of("postgres://u@h/db?sslmode=disable&password=pw1"),
            ["pw1"]
        );
        assert!(of("redis://127.0.0.1:6379").is_empty());
        assert!(of("sqlite:/tmp/a:b@c").is_empty());
        assert_eq!(
            of("--store=postgres://u:pw@h/db"),
            ["pw"],
            "a locator after `=`"
        );
        let secrets = of("redis://:hunter2@h");
        assert_eq!(
            scrub("cannot connect to redis://:hunter2@h: hunter2", &secrets),
            "cannot connect to redis://:***@h: ***"
        );
    }

    // pins X4: every argument and IDEM_STORE are searched for passwords, the longest first
    #[test]
    fn every_argument_is_searched() {
        let args = [
            "idem",
            "postgres://u:pw@h/db",
            "ls",
            "--store=redis://:pw2x@h",
        ]
        .map(std::ffi::OsString::from);
        let env = Some(std::ffi::OsString::from("redis://:e@h"));
        assert_eq!(of_command_line(args.clone(), env), ["pw2x", "pw", "e"]);
        assert_eq!(
            scrub("pw2x pw", &of_command_line(args, None)),
            "*** ***",
            "a password that holds another is replaced whole"
        );
    }
}
