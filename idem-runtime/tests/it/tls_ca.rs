//! A test certificate authority for the TLS tests of the shared stores (issue 19): a CA,
//! a server certificate for `localhost` and `127.0.0.1` signed by it, a client certificate,
//! and a second CA that signed none of them, written as PEM files into a directory.

#![cfg(any(feature = "postgres", feature = "redis"))]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The PEM files of a test CA and the certificates it signed.
pub(crate) struct TestCa {
    /// The CA's certificate: what a client trusts (`sslrootcert`, `ssl_ca_certs`).
    pub(crate) ca: PathBuf,
    /// Another CA's certificate, which signed nothing here: a client trusting only it must
    /// refuse the server.
    pub(crate) other_ca: PathBuf,
    /// The server's certificate (names `localhost` and `127.0.0.1`) and key.
    pub(crate) server_cert: PathBuf,
    pub(crate) server_key: PathBuf,
    /// A client certificate (common name `client_user`) and key.
    pub(crate) client_cert: PathBuf,
    pub(crate) client_key: PathBuf,
}

/// Makes the CA and certificates and writes them into `dir` (keys with mode 0600).
pub(crate) fn make(dir: &Path) -> TestCa {
    let (ca_params, ca_key) = authority("idem test CA");
    let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let (other_params, other_key) = authority("another CA");
    let other_cert = other_params.self_signed(&other_key).expect("another CA");

    let mut server = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("server names");
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().expect("a server key");
    let server_cert = server
        .signed_by(&server_key, &issuer)
        .expect("the server certificate");

    let mut client = CertificateParams::new(Vec::<String>::new()).expect("client params");
    client
        .distinguished_name
        .push(DnType::CommonName, "client_user");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate().expect("a client key");
    let client_cert = client
        .signed_by(&client_key, &issuer)
        .expect("the client certificate");

    let write = |name: &str, text: String, secret: bool| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write a PEM file");
        if secret {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .expect("chmod 600");
        }
        path
    };
    TestCa {
        ca: write("ca.crt", ca_cert.pem(), false),
        other_ca: write("other-ca.crt", other_cert.pem(), false),
        server_cert: write("server.crt", server_cert.pem(), false),
        server_key: write("server.key", server_key.serialize_pem(), true),
        client_cert: write("client.crt", client_cert.pem(), false),
        client_key: write("client.key", client_key.serialize_pem(), true),
    }
}

fn authority(name: &str) -> (CertificateParams, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (params, KeyPair::generate().expect("a CA key"))
}
