//! TLS of the NATS connection: the CA file that servers' certificates are
//! checked against and the client certificate shown to servers that
//! verify clients, from [`JetStreamSettings`].
//!
//! Invariants worth naming:
//! - any TLS file makes TLS required: the connection never falls back to
//!   plain text (a `tls://` URL requires it by itself);
//! - every file is read and parsed before connecting: one that cannot be
//!   read, holds no certificate (or key) or is broken PEM fails the connect
//!   with its path and the cause, instead of an anonymous error from deep
//!   inside the handshake.

use eventmesh_core::pem;

use crate::JetStreamSettings;

/// `connect` with the TLS settings of `opts` applied; the error names the
/// file at fault.
pub(crate) fn apply(
    mut connect: async_nats::ConnectOptions,
    opts: &JetStreamSettings,
) -> Result<async_nats::ConnectOptions, String> {
    if let Some(ca) = &opts.tls_ca_file {
        pem::certificates(ca, "NATS CA")?;
        connect = connect.add_root_certificates(ca.clone()).require_tls(true);
    }
    match (&opts.tls_cert_file, &opts.tls_key_file) {
        (Some(cert), Some(key)) => {
            pem::certificates(cert, "NATS client certificate")?;
            pem::private_key(key, "NATS client key")?;
            connect = connect
                .add_client_certificate(cert.clone(), key.clone())
                .require_tls(true);
        }
        (None, None) => {}
        _ => return Err("the NATS client certificate and key files must be given together".into()),
    }
    Ok(connect)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_files_are_named_with_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let opts = JetStreamSettings {
            tls_ca_file: Some(missing.clone()),
            ..Default::default()
        };
        let e = apply(async_nats::ConnectOptions::new(), &opts).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "cannot read the NATS CA file {}: ",
                missing.display()
            )),
            "{e}"
        );
        let text = dir.path().join("text.pem");
        std::fs::write(&text, "hello\n").unwrap();
        let opts = JetStreamSettings {
            tls_cert_file: Some(text.clone()),
            tls_key_file: Some(text.clone()),
            ..Default::default()
        };
        let e = apply(async_nats::ConnectOptions::new(), &opts).unwrap_err();
        assert_eq!(
            e,
            format!(
                "the NATS client certificate file {} holds no PEM certificate",
                text.display()
            )
        );
    }
}
