//! A certificate authority for tests, made at test time: it writes PEM
//! files (the CA, server certificates for `localhost` and `127.0.0.1`,
//! client certificates with a chosen subject) into a directory the test
//! owns, so TLS and mTLS are tested against real certificates and real
//! handshakes. Nothing here is meant for production use.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A test certificate authority writing into one directory.
pub struct TestPki {
    dir: PathBuf,
    name: String,
    ca_file: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

impl TestPki {
    /// A new CA named `name`; its certificate is written to
    /// `<dir>/<name>-ca.pem`.
    pub fn new(dir: &Path, name: &str) -> TestPki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        let ca_file = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca_file, cert.pem()).expect("write the CA certificate");
        TestPki {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            ca_file,
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate's PEM file.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// A server certificate valid for `localhost`, `127.0.0.1` and `::1`,
    /// with `cn` as its subject, written as `<file>.pem` and
    /// `<file>-key.pem`. Issuing again under the same file name replaces
    /// the files (as a certificate rotation does).
    pub fn server(&self, file: &str, cn: &str) -> Pair {
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])
        .expect("server parameters");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.issue(file, params)
    }

    /// A client certificate with subject `CN=<cn>` (and `O=<org>` when
    /// given), written as `<file>.pem` and `<file>-key.pem`.
    pub fn client(&self, file: &str, cn: &str, org: Option<&str>) -> Pair {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client parameters");
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(org) = org {
            params
                .distinguished_name
                .push(DnType::OrganizationName, org);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(file, params)
    }

    fn issue(&self, file: &str, mut params: CertificateParams) -> Pair {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .unwrap_or_else(|e| panic!("{} CA cannot sign {file}: {e}", self.name));
        let pair = Pair {
            cert: self.dir.join(format!("{file}.pem")),
            key: self.dir.join(format!("{file}-key.pem")),
        };
        // The key first, then the certificate: a reader that sees the new
        // certificate finds its key already in place.
        write_atomically(&pair.key, &key.serialize_pem());
        write_atomically(&pair.cert, &cert.pem());
        pair
    }
}

/// Writes through a temporary file and a rename, so a concurrent reader
/// sees the old file or the new one, never half of one.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("rename to {}: {e}", path.display()));
}
