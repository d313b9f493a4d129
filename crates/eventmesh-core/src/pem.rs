//! Reading PEM files for TLS: certificates and private keys, with errors
//! that name the file, what it was meant to hold and the cause. Every TLS
//! setting of the runtime and its clients (the listeners, etcd, NATS,
//! webhooks, the SDK) reads its files through these two functions, so a
//! wrong file is reported the same way wherever it is configured.

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The file's bytes; `what` names it in the error ("NATS CA", "webhook
/// client certificate", ...).
pub fn read(file: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(file).map_err(|e| format!("cannot read the {what} file {}: {e}", file.display()))
}

/// Every certificate of a PEM file: at least one, none malformed.
pub fn certificates(file: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(file, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the {what} file {} is not valid PEM: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "the {what} file {} holds no PEM certificate",
            file.display()
        ));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(file: &Path, what: &str) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read(file, what)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        format!(
            "the {what} file {} holds no usable PEM private key: {e}",
            file.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_and_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = certificates(&missing, "NATS CA").unwrap_err();
        assert!(
            e.starts_with(&format!(
                "cannot read the NATS CA file {}: ",
                missing.display()
            )),
            "{e}"
        );
        let text = dir.path().join("text.pem");
        std::fs::write(&text, "no PEM here\n").unwrap();
        assert_eq!(
            certificates(&text, "client CA").unwrap_err(),
            format!(
                "the client CA file {} holds no PEM certificate",
                text.display()
            )
        );
        let e = private_key(&text, "TLS key").unwrap_err();
        assert!(
            e.starts_with(&format!(
                "the TLS key file {} holds no usable PEM private key: ",
                text.display()
            )),
            "{e}"
        );
        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = certificates(&broken, "TLS certificate").unwrap_err();
        assert!(
            e.starts_with(&format!(
                "the TLS certificate file {} is not valid PEM: ",
                broken.display()
            )),
            "{e}"
        );
    }
}
