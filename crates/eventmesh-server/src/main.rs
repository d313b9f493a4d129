//! `eventmesh`: the event mesh runtime's command line. Parses arguments,
//! builds the configuration, and hands over to [`boot::serve`].

mod api;
mod boot;
mod http;
mod tcp;

// The publish path allocates per event (frames, decoded events, stored
// records); glibc's allocator took about a fifth of the server's CPU under
// a pipelined publish load, mimalloc much less.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "eventmesh",
    version,
    about = "Event mesh runtime: durable CloudEvents publish/subscribe over HTTP, SSE, WebSocket and TCP, and its client commands",
    long_about = "Event mesh runtime. Clients publish CloudEvents over HTTP; every event is \
appended durably to a partitioned log, and pushed to webhook subscribers or handed to \
long-polling clients at least once, with offsets committed only on acknowledgement."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the runtime: traffic HTTP and admin HTTP servers.
    ///
    /// Configuration sources, later wins: built-in defaults, the properties
    /// file, environment variables (EVENTMESH_SERVER_HTTP_PORT for
    /// eventmesh.server.http.port), then -D flags.
    Serve(ServeArgs),
    /// Validate the configuration and print every effective value (secrets
    /// redacted), without starting anything.
    Config(ServeArgs),
    #[command(flatten)]
    Client(eventmesh_client::cli::ClientCommand),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Properties file to read. Default: conf/eventmesh.properties, when it
    /// exists in the working directory.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Set one configuration key, overriding the file and the environment
    /// (repeatable), e.g. -D eventmesh.server.http.port=0
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    define: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (args, serve) = match cli.command {
        Command::Serve(a) => (a, true),
        Command::Config(a) => (a, false),
        Command::Client(cmd) => {
            return match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(eventmesh_client::cli::run(cmd)),
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    ExitCode::from(1)
                }
            };
        }
    };
    let loaded = match boot::load_config(args.config, &args.define) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if !serve {
        for w in &loaded.warnings {
            eprintln!("warning: {w}");
        }
        for (k, v) in loaded.config.redacted_entries() {
            println!("{k}={v}");
        }
        return ExitCode::SUCCESS;
    }
    match boot::serve(loaded) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
