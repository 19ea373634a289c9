//! TLS to PostgreSQL (rustls), with libpq's URL parameters: `sslmode` (`disable`, `prefer`
//! — the default —, `require`, `verify-ca`, `verify-full`), `sslrootcert` (a PEM file of CA
//! certificates, or `system` for the operating system's roots), `sslcert` and `sslkey` (a
//! PEM client certificate chain and its private key).
//!
//! As in libpq: `prefer` uses TLS when the server offers it and `require` insists on it,
//! neither checking the server's certificate (encryption without authentication), unless
//! `sslrootcert` is given, which makes `require` check the chain (`verify-ca`);
//! `verify-ca` checks the chain against the roots; `verify-full` the chain and that the
//! certificate names the host. Unlike libpq, the roots default to the system's (not
//! `~/.postgresql/root.crt`), and no client certificate is read unless named. The
//! parameters are read from the URL form (`postgres://…?sslmode=verify-full`); the
//! `key=value` form takes `sslmode` `disable`, `prefer` or `require` only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use rustls::{Error as TlsError, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How the server's certificate is checked (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it; the certificate not checked.
    Prefer,
    /// TLS; the certificate not checked.
    Require,
    /// TLS; the certificate's chain checked against the roots.
    VerifyCa,
    /// TLS; the chain checked, and that the certificate names the host.
    VerifyFull,
}

/// The TLS settings a URL gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TlsSettings {
    pub(super) mode: Mode,
    /// `sslrootcert`: a PEM file; `None` for the system's roots.
    root_cert: Option<PathBuf>,
    /// `sslcert` and `sslkey`.
    client_cert: Option<(PathBuf, PathBuf)>,
}

/// Takes the TLS parameters out of the URL `url`: the URL for tokio-postgres (with
/// `sslmode` `disable`, `prefer` or `require`, the one it knows; idem's checks are in the
/// connector) and the settings.
///
/// # Errors
/// A text saying what is wrong: an unknown `sslmode`, `sslcert` without `sslkey` or the
/// other way round, a parameter given twice.
pub(super) fn split(url: &str) -> Result<(String, TlsSettings), String> {
    let mut settings = TlsSettings {
        mode: Mode::Prefer,
        root_cert: None,
        client_cert: None,
    };
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let Some((base, query)) = url.split_once('?').filter(|_| is_url) else {
        return Ok((url.to_owned(), settings));
    };
    let (mut mode, mut root, mut cert, mut key) = (None, None, None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match name {
            "sslmode" => &mut mode,
            "sslrootcert" => &mut root,
            "sslcert" => &mut cert,
            "sslkey" => &mut key,
            _ => {
                kept.push(pair);
                continue;
            }
        };
        if slot.replace(percent_decoded(value)?).is_some() {
            return Err(format!("`{name}` is given twice"));
        }
    }
    settings.mode = match mode.as_deref() {
        None | Some("prefer") => Mode::Prefer,
        Some("disable") => Mode::Disable,
        Some("require") if root.is_some() => Mode::VerifyCa,
        Some("require") => Mode::Require,
        Some("verify-ca") => Mode::VerifyCa,
        Some("verify-full") => Mode::VerifyFull,
        Some("allow") => {
            return Err("sslmode `allow` (TLS only when the server insists) is not supported: write `prefer`, `require`, `verify-ca` or `verify-full`".to_owned())
        }
        Some(other) => {
            return Err(format!(
                "sslmode `{other}` is not one of `disable`, `prefer`, `require`, `verify-ca`, `verify-full`"
            ))
        }
    };
    settings.root_cert = root.filter(|root| root != "system").map(PathBuf::from);
    settings.client_cert = match (cert, key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
        (Some(_), None) => return Err("`sslcert` needs `sslkey` (its private key)".to_owned()),
        (None, Some(_)) => return Err("`sslkey` needs `sslcert` (its certificate)".to_owned()),
    };
    let library_mode = match settings.mode {
        Mode::Disable => "disable",
        Mode::Prefer => "prefer",
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => "require",
    };
    let sslmode = format!("sslmode={library_mode}");
    kept.push(&sslmode);
    Ok((format!("{base}?{}", kept.join("&")), settings))
}

/// `%XX` sequences decoded (a path may hold them).
fn percent_decoded(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = value
                .get(at + 1..at + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| format!("`{value}` has a `%` not followed by two hex digits"))?;
            out.push(hex);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{value}` does not decode to UTF-8"))
}

/// The connector for `settings` (also for `disable`: tokio-postgres then never uses it).
///
/// # Errors
/// A text naming the file that cannot be read or holds no certificate or key.
pub(super) fn connector(settings: &TlsSettings) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = match settings.mode {
        Mode::Disable | Mode::Prefer | Mode::Require => Arc::new(Unverified(provider)),
        Mode::VerifyCa | Mode::VerifyFull => {
            let roots = roots(settings.root_cert.as_deref())?;
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("TLS roots: {e}"))?;
            if settings.mode == Mode::VerifyCa {
                Arc::new(ChainOnly(webpki))
            } else {
                webpki
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match &settings.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certificates(cert, "sslcert")?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("sslkey {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("sslcert/sslkey: {e}"))?
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The roots: the PEM file `file`, else the system's.
fn roots(file: Option<&Path>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match file {
        Some(file) => {
            for cert in certificates(file, "sslrootcert")? {
                roots
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {}: {e}", file.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "no system root certificates were found: name a CA file with sslrootcert=PATH"
                        .to_owned(),
                );
            }
        }
    }
    Ok(roots)
}

/// The certificates of the PEM file `file` (`parameter` names it in errors).
fn certificates(file: &Path, parameter: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{parameter} {}: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{parameter} {}: no PEM certificate in it",
            file.display()
        ));
    }
    Ok(certs)
}

/// `prefer` and `require`: any certificate is accepted (libpq's encryption without
/// authentication); the handshake's signatures are still checked.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked against the roots, the host name is not.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins N1: libpq's parameters are read, the URL tokio-postgres gets keeps the rest
    #[test]
    fn tls_parameters_are_taken_out_of_the_url() {
        let (url, settings) = split(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca%20dir/ca.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(url, "postgres://u@h/db?connect_timeout=3&sslmode=require");
        assert_eq!(settings.mode, Mode::VerifyFull);
        assert_eq!(settings.root_cert, Some(PathBuf::from("/ca dir/ca.pem")));
        let (url, settings) = split("postgres://u@h/db").unwrap();
        assert_eq!(
            (url.as_str(), settings.mode),
            ("postgres://u@h/db", Mode::Prefer)
        );
        let (_, settings) = split("postgres://u@h/db?sslmode=require&sslrootcert=/ca.pem").unwrap();
        assert_eq!(
            settings.mode,
            Mode::VerifyCa,
            "libpq: require with a root file checks the chain"
        );
        let (url, settings) = split("postgres://u@h/db?sslmode=disable").unwrap();
        assert_eq!(
            (url.as_str(), settings.mode),
            ("postgres://u@h/db?sslmode=disable", Mode::Disable)
        );
        let (_, settings) =
            split("postgres://u@h/db?sslmode=verify-ca&sslrootcert=system").unwrap();
        assert_eq!(settings.root_cert, None);
        let (_, settings) = split("postgres://u@h/db?sslcert=/c.pem&sslkey=/k.pem").unwrap();
        assert_eq!(
            settings.client_cert,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
        );
        let (url, _) = split("host=h user=u sslmode=require").unwrap();
        assert_eq!(
            url, "host=h user=u sslmode=require",
            "the key=value form is tokio-postgres's"
        );

        for (bad, says) in [
            ("postgres://h/db?sslmode=sometimes", "not one of"),
            ("postgres://h/db?sslmode=allow", "not supported"),
            ("postgres://h/db?sslcert=/c.pem", "needs `sslkey`"),
            ("postgres://h/db?sslkey=/k.pem", "needs `sslcert`"),
            ("postgres://h/db?sslmode=require&sslmode=disable", "twice"),
            ("postgres://h/db?sslrootcert=%zz", "two hex digits"),
        ] {
            let e = split(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    // pins N1: verify-ca checks the chain and not the name; verify-full checks both
    #[test]
    fn verify_ca_checks_the_chain_and_not_the_name() {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["db.internal".to_owned()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let stranger_key = KeyPair::generate().unwrap();
        let stranger = CertificateParams::new(vec!["db.internal".to_owned()])
            .unwrap()
            .self_signed(&stranger_key)
            .unwrap();

        let mut roots = RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let full = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
        let chain_only = ChainOnly(Arc::clone(&full));
        let now = UnixTime::now();
        let name = |host: &str| ServerName::try_from(host.to_owned()).unwrap();
        let check = |verifier: &dyn ServerCertVerifier, cert: &CertificateDer<'_>, host: &str| {
            verifier
                .verify_server_cert(cert, &[], &name(host), &[], now)
                .is_ok()
        };
        assert!(check(&*full, leaf.der(), "db.internal"));
        assert!(
            !check(&*full, leaf.der(), "other.example"),
            "verify-full checks the name"
        );
        assert!(
            check(&chain_only, leaf.der(), "other.example"),
            "verify-ca does not"
        );
        assert!(
            !check(&chain_only, stranger.der(), "db.internal"),
            "verify-ca checks the chain"
        );
    }

    // pins N1: a root or client file that cannot be used is named
    #[test]
    fn unusable_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let settings = |mode, root: Option<&Path>| TlsSettings {
            mode,
            root_cert: root.map(Path::to_path_buf),
            client_cert: None,
        };
        let e = connector(&settings(Mode::VerifyFull, Some(&empty)))
            .err()
            .unwrap();
        assert!(e.contains("sslrootcert") && e.contains("empty.pem"), "{e}");
        let missing = dir.path().join("missing.pem");
        let e = connector(&settings(Mode::VerifyCa, Some(&missing)))
            .err()
            .unwrap();
        assert!(e.contains("missing.pem"), "{e}");
        assert!(connector(&settings(Mode::Require, None)).is_ok());
    }
}
