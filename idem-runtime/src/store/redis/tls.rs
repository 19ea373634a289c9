//! TLS to Redis (rustls, through redis-rs): a `rediss://` URL connects over TLS and checks
//! the server's certificate against the system's root certificates, or against the CA file
//! of the URL parameter `ssl_ca_certs`; `ssl_certfile` and `ssl_keyfile` give a client
//! certificate and its key (PEM; the parameter names are redis-py's). idem takes these
//! parameters out of the URL before redis-rs reads it. A plain `redis://` URL with any of
//! them is refused: they would be ignored.

use redis::{ClientTlsConfig, TlsCertificates};

/// The URL for redis-rs, and the certificates the URL's parameters name (`None`: the
/// system's roots, no client certificate).
///
/// # Errors
/// A text saying what is wrong: a parameter on a `redis://` URL, given twice, a file that
/// cannot be read, `ssl_certfile` without `ssl_keyfile` or the other way round.
pub(super) fn split(url: &str) -> Result<(String, Option<TlsCertificates>), String> {
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (url, None),
    };
    let Some((base, query)) = before_fragment.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let (mut ca, mut cert, mut key) = (None, None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match name {
            "ssl_ca_certs" => &mut ca,
            "ssl_certfile" => &mut cert,
            "ssl_keyfile" => &mut key,
            _ => {
                kept.push(pair);
                continue;
            }
        };
        if slot.replace(value.to_owned()).is_some() {
            return Err(format!("`{name}` is given twice"));
        }
    }
    let mut library_url = base.to_owned();
    if !kept.is_empty() {
        library_url.push('?');
        library_url.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        library_url.push('#');
        library_url.push_str(fragment);
    }
    if ca.is_none() && cert.is_none() && key.is_none() {
        return Ok((library_url, None));
    }
    if !url.starts_with("rediss://") {
        return Err(
            "`ssl_ca_certs`, `ssl_certfile` and `ssl_keyfile` need a TLS URL: write rediss://"
                .to_owned(),
        );
    }
    let read =
        |name: &str, path: &str| std::fs::read(path).map_err(|e| format!("{name} {path}: {e}"));
    let client_tls = match (cert, key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read("ssl_certfile", &cert)?,
            client_key: read("ssl_keyfile", &key)?,
        }),
        (Some(_), None) => {
            return Err("`ssl_certfile` needs `ssl_keyfile` (its private key)".to_owned())
        }
        (None, Some(_)) => {
            return Err("`ssl_keyfile` needs `ssl_certfile` (its certificate)".to_owned())
        }
    };
    let root_cert = ca.map(|ca| read("ssl_ca_certs", &ca)).transpose()?;
    Ok((
        library_url,
        Some(TlsCertificates {
            client_tls,
            root_cert,
        }),
    ))
}

/// Installs rustls's ring provider as the process default unless one is installed:
/// redis-rs builds its TLS configuration with the process default, which rustls cannot
/// pick by itself when a build enables more than one provider.
pub(super) fn ensure_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins N1: the certificate parameters are taken out of the URL, the rest kept
    #[test]
    fn tls_parameters_are_taken_out_of_the_url() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "CA").unwrap();
        let url = format!(
            "rediss://:pw@h:6380/2?ssl_ca_certs={}&protocol=resp3",
            ca.display()
        );
        let (library_url, certs) = split(&url).unwrap();
        assert_eq!(library_url, "rediss://:pw@h:6380/2?protocol=resp3");
        let certs = certs.unwrap();
        assert_eq!(certs.root_cert.as_deref(), Some(&b"CA"[..]));
        assert!(certs.client_tls.is_none());
        let (tls, none) = split("rediss://h/0").unwrap();
        assert_eq!((tls.as_str(), none.is_none()), ("rediss://h/0", true));
        let (plain, none) = split("redis://h/0?protocol=resp3").unwrap();
        assert_eq!(
            (plain.as_str(), none.is_none()),
            ("redis://h/0?protocol=resp3", true)
        );

        for (bad, says) in [
            (
                format!("redis://h/0?ssl_ca_certs={}", ca.display()),
                "rediss://",
            ),
            (
                "rediss://h/0?ssl_certfile=/c.pem".to_owned(),
                "needs `ssl_keyfile`",
            ),
            (
                "rediss://h/0?ssl_ca_certs=/no/such.pem".to_owned(),
                "/no/such.pem",
            ),
            (
                "rediss://h/0?ssl_ca_certs=a&ssl_ca_certs=b".to_owned(),
                "twice",
            ),
        ] {
            let e = split(&bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
