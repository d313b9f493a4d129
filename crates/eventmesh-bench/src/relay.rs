//! The floor of any server standing between clients and another server: a
//! relay that only copies bytes both ways, with no decoding at all. Put in
//! front of NATS (`pubsub --target nats://<relay>`), it shows what one more
//! process and one more pair of sockets on each side cost on this machine,
//! which the runtime in front of JetStream pays before doing any work.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use clap::Args;
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Address to listen on (port 0: any free port; the address bound is
    /// printed on the first line of stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where each accepted connection is relayed to (`HOST:PORT`).
    #[arg(long)]
    to: String,
}

/// Relays connections until the process is stopped.
pub async fn run(a: RelayArgs) -> Result<()> {
    let listener = TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("binding {}", a.listen))?;
    println!("{}", listener.local_addr()?);
    loop {
        let (mut client, _) = listener.accept().await.context("accepting")?;
        let to = a.to.clone();
        tokio::spawn(async move {
            let mut server = match TcpStream::connect(&to).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("cannot connect to {to}: {e}");
                    return;
                }
            };
            for s in [&client, &server] {
                let _ = s.set_nodelay(true);
            }
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        });
    }
}
