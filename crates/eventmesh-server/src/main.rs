//! `eventmesh`: the event mesh runtime's command line. Parses arguments,
//! builds the configuration, and hands over to [`boot::serve`]; also runs
//! the client commands and prints its own shell completion scripts and
//! manual page.

mod boot;
mod conn;
mod grpc;
mod http;
mod http_serve;
mod limits;
mod mqtt;
mod reload;
mod shards;
mod tcp;
mod telemetry;
mod tls;

// The publish path allocates per event (frames, decoded events, stored
// records); glibc's allocator took about a fifth of the server's CPU under
// a pipelined publish load, mimalloc much less.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

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
    Client(Box<eventmesh_client::cli::ClientCommand>),
    /// Print a shell completion script for this command line to stdout.
    ///
    /// For example: eventmesh completions bash > /etc/bash_completion.d/eventmesh
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Print the manual page (roff) to stdout.
    ///
    /// For example: eventmesh man > /usr/local/share/man/man1/eventmesh.1
    Man,
}

/// The shells `eventmesh completions` writes scripts for.
#[derive(Clone, Copy, clap::ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl From<CompletionShell> for clap_complete::Shell {
    fn from(shell: CompletionShell) -> Self {
        match shell {
            CompletionShell::Bash => Self::Bash,
            CompletionShell::Zsh => Self::Zsh,
            CompletionShell::Fish => Self::Fish,
        }
    }
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

/// The completion script for `shell`, generated from [`Cli`].
fn completion_script(shell: CompletionShell) -> Vec<u8> {
    let mut script = Vec::new();
    let mut cmd = Cli::command();
    let name = cmd.get_name().to_string();
    clap_complete::generate(
        clap_complete::Shell::from(shell),
        &mut cmd,
        name,
        &mut script,
    );
    script
}

/// The manual page, generated from [`Cli`]: the top-level sections, then a
/// COMMANDS section with each subcommand's synopsis, description and
/// options, so that one page documents the whole command line.
fn man_page() -> std::io::Result<Vec<u8>> {
    use clap_mangen::roff::Roff;
    use clap_mangen::Man;

    let mut cmd = Cli::command();
    // Sets every subcommand's full name ("eventmesh serve"), which the
    // subcommands' synopses show.
    cmd.build();
    // Every rendered fragment opens with the same definitions of the
    // apostrophe string; the page carries them once, right after `.TH`.
    let preamble = Roff::new().render();
    let fragment = |render: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| {
        let mut out = Vec::new();
        render(&mut out)?;
        let text = String::from_utf8_lossy(&out).into_owned();
        Ok::<_, std::io::Error>(match text.strip_prefix(preamble.as_str()) {
            Some(body) => body.to_string(),
            None => text,
        })
    };
    // The body of a section: its `.SH` heading line dropped, any further
    // headings lowered to subsection level.
    let section_body = |text: String| -> String {
        let mut lines = text.lines();
        if text.starts_with(".SH") {
            lines.next();
        }
        lines
            .map(|line| match line.strip_prefix(".SH ") {
                Some(heading) => format!(".SS {heading}\n"),
                None => format!("{line}\n"),
            })
            .collect()
    };

    let version = cmd.get_version().unwrap_or_default();
    let mut page = format!(
        ".TH {} 1 \"\" \"{} {version}\" \"User Commands\"\n",
        cmd.get_name().to_ascii_uppercase(),
        cmd.get_name(),
    );
    page.push_str(&preamble);
    let man = Man::new(cmd.clone());
    page.push_str(&fragment(&|w| man.render_name_section(w))?);
    page.push_str(&fragment(&|w| man.render_synopsis_section(w))?);
    page.push_str(&fragment(&|w| man.render_description_section(w))?);
    page.push_str(&fragment(&|w| man.render_options_section(w))?);
    page.push_str(".SH COMMANDS\n");
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let full_name = sub.get_bin_name().unwrap_or_else(|| sub.get_name());
        page.push_str(&Roff::new().control("SS", [full_name]).to_roff());
        let sub_man = Man::new(sub.clone());
        page.push_str(&section_body(fragment(&|w| {
            sub_man.render_synopsis_section(w)
        })?));
        page.push_str(".PP\n");
        page.push_str(&section_body(fragment(&|w| {
            sub_man.render_description_section(w)
        })?));
        if sub.get_arguments().any(|a| !a.is_hide_set()) {
            page.push_str(&section_body(fragment(&|w| {
                sub_man.render_options_section(w)
            })?));
        }
    }
    page.push_str(&fragment(&|w| man.render_version_section(w))?);
    Ok(page.into_bytes())
}

/// Writes `bytes` to stdout; a closed pipe (`eventmesh man | head`) is not an error.
fn print_bytes(bytes: std::io::Result<Vec<u8>>) -> ExitCode {
    let written = bytes.and_then(|b| {
        let mut out = std::io::stdout().lock();
        out.write_all(&b)?;
        out.flush()
    });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (args, serve) = match cli.command {
        Command::Serve(a) => (a, true),
        Command::Config(a) => (a, false),
        Command::Completions { shell } => return print_bytes(Ok(completion_script(shell))),
        Command::Man => return print_bytes(man_page()),
        Command::Client(cmd) => {
            // Warnings of long-running commands (an agent's failed
            // handler, say) on stderr; RUST_LOG overrides.
            let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
            let _ = tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_env_filter(filter)
                .try_init();
            return match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(eventmesh_client::cli::run(*cmd)),
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    ExitCode::from(1)
                }
            };
        }
    };
    let loaded = match boot::load_config(args.config.clone(), &args.define) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {}", eventmesh_core::redact::text(&e.to_string()));
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
    let sources = reload::Sources {
        file: args.config,
        defines: args.define,
    };
    match boot::serve(loaded, sources) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", eventmesh_core::redact::text(&format!("{e:#}")));
            ExitCode::from(1)
        }
    }
}
